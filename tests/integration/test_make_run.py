"""scripts/run.sh, the script behind `make run`, against a database of its
own (LEDGER_DATABASE_URL, as a user with a PostgreSQL of their own runs
it): it names the database URL that ledgerd's own commands need and how
to pick another address, and a restart keeps the development token instead
of minting another while the old one stays valid."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from conftest import LEDGERD, ROOT, free_port


def start(service, run_dir):
    """run.sh until ledgerd listens; returns (process, what it said, address)."""
    port = free_port()
    env = dict(os.environ, LEDGERD=str(LEDGERD), LEDGER_DATABASE_URL=service.database_url,
               LEDGER_LISTEN="127.0.0.1:%d" % port, LEDGER_RUN_DIR=str(run_dir))
    proc = subprocess.Popen([str(ROOT / "scripts" / "run.sh")], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    said, deadline = [], time.time() + 30
    while time.time() < deadline:
        line = proc.stderr.readline()
        assert line, "run.sh ended: %s" % "".join(said)
        said.append(line)
        if line.startswith("{") and "address" in json.loads(line):
            return proc, "".join(said), port
    raise AssertionError("ledgerd did not start: %s" % "".join(said))


def stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def token_of(said):
    return re.search(r"^    (ldg_\S+)$", said, re.M).group(1)


def test_make_run_names_the_database_and_keeps_its_token(service, tmp_path):
    proc, said, port = start(service, tmp_path)
    try:
        token = token_of(said)
        assert 'LEDGER_DATABASE_URL="%s"' % service.database_url in said
        assert (tmp_path / "database-url").read_text().strip() == service.database_url
        assert "LEDGER_LISTEN=" in said and "http://127.0.0.1:%d/ui/" % port in said
        who = service.ledgerd.get("/v1/whoami", token=token)
        assert who.json == {"tenant": "dev", "role": "admin"}, who
    finally:
        stop(proc)

    proc, said, _ = start(service, tmp_path)
    try:
        assert token_of(said) == token
    finally:
        stop(proc)
    count = service.sql("SELECT count(*) FROM api_tokens WHERE tenant = 'dev'")
    assert count == [["1"]], count


# --- make run as a newcomer stops it: by make's PID, or not at all ----------------------


def start_make_run(run_dir):
    """`make run` on an embedded cluster under @run_dir, in a session of its own;
    returns (make's process, what it said) once ledgerd listens."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LEDGER_", "MAKE", "MFLAGS"))}
    env.update(LEDGER_LISTEN="127.0.0.1:%d" % free_port(), LEDGER_RUN_DIR=str(run_dir))
    proc = subprocess.Popen(["make", "-s", "--no-print-directory", "run"], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    said, deadline = [], time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        said.append(line)
        if line.startswith("{") and "address" in json.loads(line):
            return proc, "".join(said)
    proc.kill()
    raise AssertionError("make run did not start: %s" % "".join(said))


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def postmaster_of(run_dir):
    pidfile = run_dir / "pg" / "data" / "postmaster.pid"
    return int(pidfile.read_text().split()[0]) if pidfile.exists() else None


def test_make_run_stopped_by_makes_pid_stops_ledgerd_then_the_cluster(tmp_path):
    """A shell's `kill %1` signals make alone: ledgerd drains and exits, then the
    embedded PostgreSQL stops, and make exits."""
    run_dir = tmp_path / "var"
    proc, said = start_make_run(run_dir)
    ledgerd_pid = int((run_dir / "ledgerd.pid").read_text())
    postmaster = postmaster_of(run_dir)
    assert alive(ledgerd_pid) and postmaster and alive(postmaster), said
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=60)[1]
    assert not alive(ledgerd_pid), rest
    assert not alive(postmaster) and postmaster_of(run_dir) is None, rest
    assert "embedded PostgreSQL stopped" in rest, rest
    assert not (run_dir / "ledgerd.pid").exists()


def test_a_second_make_run_names_what_the_first_left_running(tmp_path):
    """make and run.sh killed hard leave ledgerd and the cluster running; the next
    make run says so, with the command that stops each, instead of failing bare."""
    run_dir = tmp_path / "var"
    proc, _ = start_make_run(run_dir)
    ledgerd_pid = int((run_dir / "ledgerd.pid").read_text())
    postmaster = postmaster_of(run_dir)
    # make and run.sh killed, nothing else: ledgerd and the cluster are left.
    run_sh = int(Path("/proc/%d/stat" % ledgerd_pid).read_text().rsplit(")", 1)[1].split()[1])
    os.kill(run_sh, signal.SIGKILL)
    proc.kill()
    proc.wait(timeout=10)
    try:
        again = subprocess.run(["bash", str(ROOT / "scripts" / "run.sh")], env=dict(
            {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")},
            LEDGERD=str(LEDGERD), LEDGER_RUN_DIR=str(run_dir)),
            capture_output=True, text=True, timeout=60)
        assert again.returncode == 1, again.stderr
        assert "the ledgerd of an earlier make run is still running (pid %d)" % ledgerd_pid \
            in again.stderr and "kill %d" % ledgerd_pid in again.stderr, again.stderr
        os.kill(ledgerd_pid, signal.SIGTERM)
        deadline = time.time() + 30
        while alive(ledgerd_pid) and time.time() < deadline:
            time.sleep(0.05)
        again = subprocess.run(["bash", str(ROOT / "scripts" / "run.sh")], env=dict(
            {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")},
            LEDGERD=str(LEDGERD), LEDGER_RUN_DIR=str(run_dir)),
            capture_output=True, text=True, timeout=60)
        assert again.returncode == 1, again.stderr
        told = re.search(r"still running \(pid %d\); stop it first:\n.*?    (.*pg_ctl .* stop)\n"
                         % postmaster, again.stderr)
        assert told, again.stderr
        # The command it names stops the cluster.
        subprocess.run(told.group(1), shell=True, check=True, timeout=60)
        assert postmaster_of(run_dir) is None and not alive(postmaster)
    finally:
        for pid in (ledgerd_pid, postmaster):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
