"""`make demo` (scripts/demo.py) as a newcomer runs it, on an embedded
PostgreSQL of its own under the test's folder: what it prints of both
requests, the page it names, and that it stops every process it started,
on SIGTERM to make's own process and on Ctrl-C (SIGINT to the terminal's
process group).

The second run reuses the first's cluster and tokens, as a newcomer's
second `make demo` does.
"""
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE / "llama"))
from llama_engine import install, model  # noqa: E402

READY = "demo: running until Ctrl-C"
START_TIMEOUT_S = 180


def start(run_dir):
    """make demo in a session of its own (as a terminal's job); returns the
    process and its output up to the line that says it runs."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LEDGER_", "GATEWAY_", "MAKE", "MFLAGS"))}
    env["LEDGER_RUN_DIR"] = str(run_dir)
    proc = subprocess.Popen(["make", "-s", "--no-print-directory", "demo"], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    said, deadline = [], time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        said.append(line)
        if line.startswith(READY):
            return proc, "".join(said)
    proc.kill()
    raise AssertionError("make demo did not get to run:\n" + "".join(said))


def pids_of(said):
    """The engines' pids, as the demo names them."""
    return [int(p) for p in re.findall(r"^demo: llama-\d on \S+, pid (\d+):", said, re.M)]


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone but for its parent's wait.
    try:
        return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def left_behind(run_dir, pids):
    """Every process of this run still alive: the demo's own, the engines,
    anything that has the run's folder on its command line (run.sh, the
    gateway's log is not, but ledgerd's cluster is), or a postmaster."""
    left = [p for p in pids if not gone(p)]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(run_dir) in cmdline and not gone(int(entry.name)):
            left.append((int(entry.name), cmdline))
    if (run_dir / "pg" / "data" / "postmaster.pid").exists():
        left.append("postmaster.pid")
    return left


def check_said(said):
    first, second = said.split("\n1. ", 1)[1].split("\n2. ", 1)
    # 1: killed in prefill: one whole answer, from a2 on the other engine.
    assert "client: 12 deltas and [DONE]: one whole answer\n" in first, said
    assert re.search(r"a1 +1 +llama-1 +dead ", first), first
    assert re.search(r"a2 +2 +llama-2 +finished ", first), first
    assert "upstream_closed -> retry_prefill" in first, first
    assert re.search(r"request +req-\S+ +completed", first), first
    # 2: killed after the third delta: no rerun, the stream ends with the error.
    assert "client: 3 deltas, then the error event upstream_decode_interrupted:" in second, said
    assert re.search(r"a1 +1 +llama-2 +dead ", second), second
    assert " a2 " not in second, second
    assert "upstream_closed -> terminate_stream" in second, second
    assert re.search(r"request +req-\S+ +terminated", second), second


def test_make_demo_shows_both_failovers_and_stops_everything(tmp_path):
    install()  # npm ci and the model once, under the tests' locks, not in the demo's time
    model()
    run_dir = tmp_path / "demo"
    for how in ("SIGTERM to make", "Ctrl-C"):
        proc, said = start(run_dir)
        try:
            check_said(said)
            page = re.search(r"the incident-review page: (http://\S+/ui/) \(its token: (\S+),",
                             said)
            assert page, said
            with urllib.request.urlopen(page.group(1), timeout=10) as answer:
                assert answer.status == 200
            assert page.group(2) == (run_dir / "dev-token").read_text().strip()
            pids = pids_of(said)
            assert len(pids) == 2, said
        finally:
            if how == "Ctrl-C":
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGTERM)
            rest, _ = proc.communicate(timeout=90)
        assert "demo: stopped" in rest, rest
        assert left_behind(run_dir, pids + [proc.pid]) == [], how
