"""The two guides, run: docs/guide-agent.md and docs/guide-router.md.

Every code block of a guide comes right after a line `<!-- file: PATH -->`
and is byte for byte that file of docs/guides/, so a guide cannot drift
from the code run here. Each program then runs against a live ledgerd (the
`service` fixture), and each test checks what the guide says it does: a
first run executes the side effect (a line in an outbox file, counted), a
rerun with the same ids, under another attempt too, replays it and
executes nothing, a fenced attempt runs nothing, an unknown outcome stops
the run, and failover answers the action the guide describes.

The shell blocks (*.sh) run with bash from the repository's root as a
reader runs them, with LEDGER_URL and LEDGER_TOKEN set as env.sh sets them
and OUTBOX in a temporary directory; env.sh itself, which reads `make
run`'s token from var/, is not run. The JavaScript programs need node
packages: tests/sdk/js/js_build.py builds sdk/js and tests/programs/ledger-mcp/mcp_helpers.py
installs the MCP SDK and its memory server, each once under its own lock.
A program runs as a byte-identical copy in a temporary directory whose
node_modules links to those installs (docs/guides/node_modules is the
reader's own `npm ci`, whose lock file must pin the very packages tested).
So of agent-js.sh and agent-mcp.sh, the `npm ci` lines are those installs
and the `node` lines run the copies.
"""

import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import claim_id, new_id

ROOT = Path(__file__).resolve().parents[2]
GUIDES = (ROOT / "docs" / "guide-agent.md", ROOT / "docs" / "guide-router.md")
CODE = ROOT / "docs" / "guides"
sys.path.insert(0, str(ROOT / "tests" / "sdk" / "js"))
sys.path.insert(0, str(ROOT / "tests" / "programs" / "ledger-mcp"))
import js_build  # noqa: E402
import mcp_helpers  # noqa: E402

sys.path.insert(0, str(ROOT / "sdk" / "python"))
from ledger_client import args_sha256  # noqa: E402

MARKER = re.compile(r"<!-- file: (\S+) -->")
# Shown in no guide: the lock file, and what keeps the reader's node_modules out of git.
NOT_SHOWN = {"package-lock.json", ".gitignore"}
EMAILS = [("ana@example.com", "Your refund"), ("bob@example.com", "Your refund"),
          ("ana@example.com", "Refund sent")]
WORDS = ["Your", " refund", " is", " on", " its", " way."]


# --- the guides' text against the files ----------------------------------------


def code_blocks(guide):
    """[(path named by the marker, the block's text)] of @guide; fails on an unmarked block."""
    lines = guide.read_text().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            marker = MARKER.fullmatch(lines[i - 1]) if i > 0 else None
            assert marker, "%s:%d: a code block with no <!-- file: ... --> line before it" % (
                guide.name, i + 1)
            end = lines.index("```", i + 1)
            blocks.append((marker.group(1), "\n".join(lines[i + 1:end]) + "\n"))
            i = end + 1
        else:
            assert not MARKER.fullmatch(lines[i]) or lines[i + 1].startswith("```"), (
                "%s:%d: a file marker with no code block after it" % (guide.name, i + 1))
            i += 1
    return blocks


@pytest.mark.parametrize("guide", GUIDES, ids=lambda g: g.name)
def test_every_code_block_is_the_file_it_names(guide):
    blocks = code_blocks(guide)
    assert blocks
    for path, text in blocks:
        assert path.startswith("docs/guides/"), path
        assert (ROOT / path).read_text() == text, (
            "%s: the block of %s differs from the file (scripts/sync_guides.py copies it in)"
            % (guide.name, path))


def test_every_file_of_the_guides_is_shown():
    shown = {path for g in GUIDES for path, _ in code_blocks(g)}
    files = {"docs/guides/" + p.name for p in CODE.iterdir()
             if p.is_file() and p.name not in NOT_SHOWN}
    assert files == shown


# Where each package docs/guides/package.json pins is pinned and tested too: the
# MCP SDK and its server by tests/programs/ledger-mcp, openai by the gateway's
# fault scenarios, the frameworks by sdk/js's adapter tests. Only the two OpenAI
# providers of the frameworks are pinned here alone, and tested here.
PINNED_ELSEWHERE = {
    mcp_helpers.NODE_DIR: ("@modelcontextprotocol/sdk", "@modelcontextprotocol/server-memory",
                           "zod"),
    ROOT / "tests" / "faults" / "openai_client": ("openai",),
    ROOT / "tests" / "sdk" / "js" / "adapters": ("ai", "@langchain/core", "@openai/agents"),
}
PINNED_HERE = ("@ai-sdk/openai", "@langchain/openai")


def test_the_guides_npm_install_is_the_tested_one():
    """docs/guides pins, exactly, what the tests install, and links sdk/js: the reader runs
    what ran here."""
    ours = json.loads((CODE / "package.json").read_text())["dependencies"]
    lock = json.loads((CODE / "package-lock.json").read_text())["packages"]
    assert lock[""]["dependencies"] == ours
    assert ours.pop("ledgerd") == "file:../../sdk/js"
    assert lock["node_modules/ledgerd"] == {"resolved": "../../sdk/js", "link": True}
    elsewhere = {}
    for folder, names in PINNED_ELSEWHERE.items():
        theirs = json.loads((folder / "package.json").read_text())["dependencies"]
        elsewhere.update({n: theirs[n] for n in names})
    assert sorted(ours) == sorted(list(elsewhere) + list(PINNED_HERE))
    for name, version in ours.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), (name, version)  # exact pins
        assert lock["node_modules/" + name]["version"] == version, name
        assert elsewhere.get(name, version) == version, name


# --- running them ------------------------------------------------------------------


class Reader:
    """The reader's second terminal: env.sh's two variables, an outbox, the repository's root.

    Each has a tenant of its own: the guides' fixed request ids never meet, and
    one test's reruns do not spend another's retry budget (20% of the tenant's
    attempts over 10 s, at least 3).
    """

    def __init__(self, service, tmp, role):
        self.service = service
        self.led = service.ledgerd
        self.tmp = tmp
        self.tenant = new_id("t")
        self.outbox = tmp / ("outbox-%s.txt" % new_id("o"))
        self.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp),
                    "LEDGER_URL": "http://%s:%d" % (self.led.host, self.led.port),
                    "LEDGER_TOKEN": service.token(role, self.tenant),
                    "OUTBOX": str(self.outbox),
                    "MEMORY_FILE_PATH": str(tmp / ("memory-%s.jsonl" % new_id("m")))}

    def token(self, role):
        return self.service.token(role, self.tenant)

    def run(self, argv, timeout=120):
        return subprocess.run([str(a) for a in argv], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def python(self, program, *args):
        """docs/guides/@program run as agent-python.sh runs it (PYTHONPATH=sdk/python)."""
        return subprocess.run(["python3", CODE / program] + [str(a) for a in args], cwd=ROOT,
                              env=dict(self.env, PYTHONPATH="sdk/python"), capture_output=True,
                              text=True, timeout=120)

    def sh(self, name, after=None):
        """One of the guides' shell blocks, as it is, with bash: its CompletedProcess.

        @after: a block run before it in the same terminal, whose exports it inherits.
        """
        script = "" if after is None else "source %s >/dev/null\n" % (CODE / after)
        done = self.run(["bash", "-c", script + "source %s" % (CODE / name)])
        assert "command not found" not in done.stderr, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def sent(self):
        """The outbox: one line per execution of the tool."""
        return self.outbox.read_text().splitlines() if self.outbox.exists() else []

    def router(self, path, body):
        r = self.led.post(path, body, token=self.token("router"))
        assert r.status in (200, 201), r
        return r.json

    def request(self, rid):
        r = self.led.get("/v1/requests/%s" % rid, token=self.token("router"))
        assert r.status == 200, r
        return r.json

    def abandoned_claim(self, rid, k):
        """The k-th call claimed as the programs claim it, by a holder that then vanished:
        its key is outcome_unknown from now on."""
        to, subject = EMAILS[k]
        r = self.led.post("/v1/requests/%s/tool-calls/call_%02d/claim" % (rid, k),
                          {"claim_id": claim_id(), "tool": "send_email", "lease_ms": 100,
                           "args": {"to": to, "subject": subject}},
                          token=self.token("agent"))
        assert r.status == 201, r
        time.sleep(0.3)

    def fenced_attempt(self, rid):
        """a1 of @rid, failed over to a2 before it ran anything: a1 is a zombie."""
        self.router("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1", "replica": "gpu-1"})
        d = self.router("/v1/requests/%s/failover" % rid,
                        {"attempt_id": "a1", "signal": "replica_exited",
                         "next_attempt": {"attempt_id": "a2", "replica": "gpu-2"}})
        assert d["action"] == "retry_prefill", d


@pytest.fixture
def reader(service, tmp_path):
    return Reader(service, tmp_path, "agent")


@pytest.fixture
def router_reader(service, tmp_path):
    return Reader(service, tmp_path, "router")


def calls(stdout):
    """{tool_call_id: (outcome word, the rest of the line)} of an agent program's lines."""
    out = {}
    for line in stdout.splitlines():
        cid, word, *rest = line.split(" ", 2)
        assert cid not in out, stdout
        out[cid] = (word.rstrip(":"), rest[0] if rest else "")
    return out


def outbox_of(rid, ids=(0, 1, 2)):
    return sorted("%s:call_%02d %s %s" % (rid, k, *EMAILS[k]) for k in ids)


def assert_ran_all(stdout, rid, word):
    got = calls(stdout)
    assert sorted(got) == ["call_00", "call_01", "call_02"], stdout
    for k in range(3):
        cid = "call_%02d" % k
        assert got[cid][0] == word, stdout
        assert got[cid][1] == 'succeeded {"message_id":"m-%s:%s"}' % (rid, cid), stdout


def assert_recorded(reader, rid):
    """ledgerd holds each call with the arguments of its ordinal: the numbering is by position."""
    for k in range(3):
        r = reader.led.get("/v1/requests/%s/tool-calls/call_%02d" % (rid, k),
                           token=reader.token("router"))
        assert r.status == 200, r
        to, subject = EMAILS[k]
        assert (r.json["state"], r.json["tool"]) == ("succeeded", "send_email"), r.json
        assert r.json["args_sha256"] == args_sha256({"to": to, "subject": subject}), r.json


def run_twice_and_check(reader, done, rid):
    """@done ran the first run and a rerun of @rid: executed, then replayed, one email each."""
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert len(lines) == 6, done.stdout
    assert_ran_all("\n".join(lines[:3]), rid, "executed")
    assert_ran_all("\n".join(lines[3:]), rid, "replayed")
    assert sorted(reader.sent()) == outbox_of(rid)
    assert_recorded(reader, rid)


# --- the agent guide: Python ----------------------------------------------------------


def test_python_agent_sends_once_then_replays(reader):
    done = reader.sh("agent-python.sh")
    run_twice_and_check(reader, done, "req-py-1")


def test_python_agent_under_attempts_is_fenced_then_runs_then_replays(router_reader):
    reader = router_reader
    done = reader.sh("agent-attempts.sh", after="agent-python.sh")
    out = done.stdout.splitlines()
    created, first, zombie1, zombie2 = (json.loads(out[0]), json.loads(out[1]), out[2], out[3])
    assert created["attempt_id"] == "a1" and created["request"]["max_attempts"] == 3
    assert first["action"] == "retry_prefill" and first["settled_tool_calls"] == []
    # a1 was failed over before it ran: both calls of its first turn refused, no second turn.
    assert sorted([zombie1, zombie2]) == [
        "call_00 attempt_fenced: this attempt was replaced; stop, publish nothing",
        "call_01 attempt_fenced: this attempt was replaced; stop, publish nothing"]
    assert_ran_all("\n".join(out[4:7]), "req-py-2", "executed")
    second = json.loads(out[7])
    assert second["action"] == "retry_prefill" and second["attempt"]["attempt_id"] == "a3"
    assert sorted(c["tool_call_id"] for c in second["settled_tool_calls"]) == [
        "call_00", "call_01", "call_02"]
    assert all(c["outcome"] == "succeeded" for c in second["settled_tool_calls"])
    assert_ran_all("\n".join(out[8:11]), "req-py-2", "replayed")
    # agent-python.sh ran first, in the same terminal: its three, and these three.
    assert sorted(reader.sent()) == sorted(outbox_of("req-py-1") + outbox_of("req-py-2"))
    # What ledgerctl show prints, as the guide says.
    show = "\n".join(out[11:])
    assert re.search(r"^a1 +1 +gpu-1 +dead ", show, re.M), show
    assert re.search(r"^a2 +2 +gpu-2 +dead ", show, re.M), show
    assert re.search(r"^a3 +3 +gpu-3 +live ", show, re.M), show
    assert len(re.findall(r"^call_0[012] +send_email +succeeded +1 ", show, re.M)) == 3, show
    assert len(re.findall(r"refused: attempt_fenced", show)) == 2, show
    states = {a["attempt_id"]: a["state"] for a in reader.request("req-py-2")["attempts"]}
    assert states == {"a1": "dead", "a2": "dead", "a3": "live"}


def test_python_agent_stops_on_an_unknown_outcome(reader):
    rid = new_id("req")
    reader.abandoned_claim(rid, 0)
    done = reader.python("agent.py", rid)
    assert done.returncode == 3, done
    got = calls(done.stdout)
    assert got["call_00"][0] == "outcome_unknown", done.stdout
    assert got["call_01"][0] == "executed", done.stdout  # the parallel call is its own key
    assert "call_02" not in got, done.stdout  # the run stopped after the turn
    assert reader.sent() == outbox_of(rid, [1])


def test_python_agent_stops_when_the_rerun_diverges(reader):
    rid = new_id("req")
    r = reader.led.post("/v1/requests/%s/tool-calls/call_01/claim" % rid,
                        {"claim_id": claim_id(), "tool": "send_email",
                         "args": {"to": "eve@example.com", "subject": "Your refund"}},
                        token=reader.token("agent"))
    assert r.status == 201, r
    done = reader.python("agent.py", rid)
    assert done.returncode == 3, done
    got = calls(done.stdout)
    assert got["call_01"][0] == "args_mismatch", done.stdout
    assert reader.sent() == outbox_of(rid, [0])


# --- the agent guide: Python, async ---------------------------------------------------


def test_async_agent_sends_once_replays_and_the_blocking_agent_replays_too(reader):
    done = reader.sh("agent-async.sh")
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert len(lines) == 9, done.stdout
    assert_ran_all("\n".join(lines[:3]), "req-aio-1", "executed")
    assert_ran_all("\n".join(lines[3:6]), "req-aio-1", "replayed")
    assert_ran_all("\n".join(lines[6:]), "req-aio-1", "replayed")
    assert sorted(reader.sent()) == outbox_of("req-aio-1")
    assert_recorded(reader, "req-aio-1")


def test_async_agent_stops_on_an_unknown_outcome(reader):
    rid = new_id("req")
    reader.abandoned_claim(rid, 0)
    done = reader.python("agent_async.py", rid)
    assert done.returncode == 3, done
    got = calls(done.stdout)
    assert got["call_00"][0] == "outcome_unknown", done.stdout
    assert got["call_01"][0] == "executed", done.stdout  # the parallel call is its own key
    assert "call_02" not in got, done.stdout
    assert reader.sent() == outbox_of(rid, [1])


def test_async_agent_under_a_replaced_attempt_is_fenced(router_reader):
    reader = router_reader
    rid = new_id("req")
    reader.router("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1", "max_attempts": 3})
    reader.router("/v1/requests/%s/failover" % rid,
                  {"attempt_id": "a1", "signal": "replica_exited",
                   "next_attempt": {"attempt_id": "a2"}})
    done = reader.python("agent_async.py", rid, "a1")
    assert done.returncode == 3, done
    assert sorted(done.stdout.splitlines()) == [
        "call_00 attempt_fenced: this attempt was replaced; stop, publish nothing",
        "call_01 attempt_fenced: this attempt was replaced; stop, publish nothing"]
    done = reader.python("agent_async.py", rid, "a2")
    assert done.returncode == 0, done
    assert_ran_all(done.stdout, rid, "executed")
    assert sorted(reader.sent()) == outbox_of(rid)


# --- the agent guide: C --------------------------------------------------------------


def test_c_agent_builds_sends_once_then_replays(reader):
    done = reader.sh("agent-c.sh")
    run_twice_and_check(reader, done, "req-c-1")


def test_c_agent_is_fenced_runs_under_the_new_attempt_and_stops_on_unknown(reader):
    program = ROOT / "build" / "guide-agent"
    if not program.exists():
        assert reader.sh("agent-c.sh").returncode == 0
    rid = new_id("req")
    reader.fenced_attempt(rid)
    done = reader.run([program, rid, "a1"])
    assert done.returncode == 3, done
    assert {c: w for c, (w, _) in calls(done.stdout).items()} == {
        "call_00": "attempt_fenced", "call_01": "attempt_fenced"}, done.stdout
    assert reader.sent() == []
    done = reader.run([program, rid, "a2"])
    assert done.returncode == 0, done
    assert_ran_all(done.stdout, rid, "executed")

    other = new_id("req")
    reader.abandoned_claim(other, 1)
    done = reader.run([program, other])
    assert done.returncode == 3, done
    got = calls(done.stdout)
    assert (got["call_00"][0], got["call_01"][0]) == ("executed", "outcome_unknown"), done.stdout
    assert "call_02" not in got
    assert sorted(reader.sent()) == sorted(outbox_of(rid) + outbox_of(other, [0]))


# --- the agent guide: TypeScript and MCP ---------------------------------------------


@pytest.fixture(scope="module")
def node_copies(tmp_path_factory):
    """The guides' .mjs files, byte for byte, where their imports find the tested installs."""
    with js_build.locked():
        js_build.build_core()
    mcp_helpers.install_node_packages()
    mcp_helpers.require_built()
    base = tmp_path_factory.mktemp("guides_node")
    # agent.mjs imports "ledgerd": sdk/js, as docs/guides/package.json links it.
    (base / "agent" / "node_modules").mkdir(parents=True)
    (base / "agent" / "node_modules" / "ledgerd").symlink_to(ROOT / "sdk" / "js")
    # agent-mcp.mjs imports the MCP SDK and starts node_modules/.bin/mcp-server-memory.
    (base / "agent-mcp").mkdir()
    (base / "agent-mcp" / "node_modules").symlink_to(mcp_helpers.NODE_DIR / "node_modules")
    copies = {}
    for name in ("agent.mjs", "agent-mcp.mjs"):
        copies["docs/guides/" + name] = base / name[:-len(".mjs")] / name
        shutil.copyfile(CODE / name, copies["docs/guides/" + name])
    return copies


def run_node_block(reader, name, copies):
    """The lines of the shell block @name: npm ci as done by the fixture, node on the copies."""
    out = []
    for line in (CODE / name).read_text().splitlines():
        command = line.split("#", 1)[0].split()
        if command[:2] == ["npm", "ci"]:
            assert command[2:4] in (["--prefix", "sdk/js"], ["--prefix", "docs/guides"]), line
            continue
        assert command[0] == "node" and command[1] in copies, line
        done = reader.run(["node", copies[command[1]]] + command[2:])
        assert done.returncode == 0, done
        out.append(done.stdout)
    return out


def test_js_agent_sends_once_then_replays(reader, node_copies):
    first, second = run_node_block(reader, "agent-js.sh", node_copies)
    assert_ran_all(first, "req-js-1", "executed")
    assert_ran_all(second, "req-js-1", "replayed")
    assert sorted(reader.sent()) == outbox_of("req-js-1")
    assert_recorded(reader, "req-js-1")


def test_js_agent_is_fenced_and_the_sdks_share_their_keys(reader, node_copies):
    program = node_copies["docs/guides/agent.mjs"]
    rid = new_id("req")
    reader.fenced_attempt(rid)
    done = reader.run(["node", program, rid, "a1"])
    assert done.returncode == 3, done
    assert {c: w for c, (w, _) in calls(done.stdout).items()} == {
        "call_00": "attempt_fenced", "call_01": "attempt_fenced"}, done.stdout
    assert reader.sent() == []
    # Python runs the request; the TypeScript rerun replays it: same keys, same fingerprints.
    other = new_id("req")
    assert reader.python("agent.py", other).returncode == 0
    done = reader.run(["node", program, other])
    assert done.returncode == 0, done
    assert_ran_all(done.stdout, other, "replayed")
    assert sorted(reader.sent()) == outbox_of(other)


def memory_entities(reader):
    path = Path(reader.env["MEMORY_FILE_PATH"])
    if not path.exists():
        return []
    return [json.loads(line)["name"] for line in path.read_text().splitlines()
            if line.strip() and json.loads(line).get("type") == "entity"]


def test_mcp_agent_reaches_the_server_once_then_replays(reader, node_copies):
    first, second = run_node_block(reader, "agent-mcp.sh", node_copies)
    entity = {"entities": [{"name": "Ana", "entityType": "person",
                            "observations": ["refund sent"]}]}
    assert first == "call_00 executed succeeded %s\n" % json.dumps(entity, separators=(",", ":"))
    # The server would answer {"entities":[]} for an entity it has: this is the recorded answer.
    assert second == first.replace(" executed ", " replayed ")
    assert memory_entities(reader) == ["Ana"]
    r = reader.led.get("/v1/requests/req-mcp-1/tool-calls/call_00",
                       token=reader.token("router"))
    assert (r.json["state"], r.json["tool"]) == ("succeeded", "create_entities"), r.json


def test_mcp_agent_under_a_fenced_attempt_never_reaches_the_server(reader, node_copies):
    rid = new_id("req")
    reader.fenced_attempt(rid)
    done = reader.run(["node", node_copies["docs/guides/agent-mcp.mjs"], rid, "a1"])
    assert done.returncode == 3, done
    assert done.stdout.startswith("call_00 attempt_fenced: "), done.stdout
    assert memory_entities(reader) == []
    done = reader.run(["node", node_copies["docs/guides/agent-mcp.mjs"], rid, "a2"])
    assert done.returncode == 0 and " executed succeeded " in done.stdout, done
    assert memory_entities(reader) == ["Ana"]


# --- the router guide ------------------------------------------------------------------


def answer(events_of_words):
    return "".join("data: %s\n\n" % json.dumps({"choices": [{"delta": {"content": w}}]})
                   for w in events_of_words)


FULL = answer(WORDS) + "data: [DONE]\n\n"


def error_event(text):
    """The client_error of the final SSE event @text; asserts its form."""
    assert text.startswith("data: ") and text.endswith("\n\n") and "[DONE]" not in text, text
    return json.loads(text[len("data: "):])


def settled_seen(stderr, replica):
    """What the router handed @replica as settled_tool_calls, from its log line."""
    m = re.search(r"^router: %s runs a\d; settled before it: (.*)$" % replica, stderr, re.M)
    assert m, stderr
    return json.loads(m.group(1))


def runs(stderr):
    """The router's log, one piece per run of the program (each begins with a1 on gpu-1)."""
    return [piece for piece in re.split(r"(?m)^(?=router: gpu-1 runs a1;)", stderr) if piece]


def check_rerun(reader, rid, stderr, signal):
    """@rid was rerun on gpu-2 after @signal; returns {attempt: (replica, state)}."""
    assert "failover a1 %s: retry_prefill" % signal in stderr, stderr
    assert settled_seen(stderr, "gpu-1") == []
    assert settled_seen(stderr, "gpu-2") == [{"tool_call_id": "call_00", "tool": "send_email", "outcome": "succeeded",
                        "args_sha256": args_sha256({"to": "ana@example.com"})}]
    assert re.search(r"gpu-2: call_00 send_email replayed", stderr), stderr
    view = reader.request(rid)
    assert view["request"]["status"] == "completed"
    assert view["request"]["delivered_output_tokens"] == len(WORDS)
    return {a["attempt_id"]: (a["replica"], a["state"]) for a in view["attempts"]}


def check_terminated(reader, rid, event):
    err = error_event(event)["error"]
    assert err["code"] == "upstream_decode_interrupted", err
    assert (err["request_id"], err["partial_output"], err["delivered_output_tokens"],
            err["retryable"]) == (rid, True, 2, False), err
    view = reader.request(rid)
    assert view["request"]["status"] == "terminated"
    assert view["request"]["client_error"] == {"error": err}
    return err


def test_python_router_reruns_fences_and_terminates(router_reader):
    reader = router_reader
    done = reader.sh("router-python.sh")
    assert done.returncode == 0, done
    exit_late = (CODE / "router-exit-late.txt").read_text()
    streams = FULL + FULL + exit_late
    assert done.stdout.startswith(streams), done.stdout[:3000]
    # exit-late: the two deltas, then the error event the guide shows, byte for byte.
    assert exit_late.startswith(answer(WORDS[:2]))
    check_terminated(reader, "req-r-3", exit_late[len(answer(WORDS[:2])):])
    early_log, stall_log, late_log = runs(done.stderr)
    assert "failover a1 upstream_closed: terminate_stream" in late_log, late_log
    # exit-early and stall rerun on gpu-2; the stall is fenced first.
    assert check_rerun(reader, "req-r-1", early_log, "replica_exited") == {
        "a1": ("gpu-1", "dead"), "a2": ("gpu-2", "finished")}
    assert "failover a1 heartbeat_timeout: wait_for_fence" in stall_log, stall_log
    assert check_rerun(reader, "req-r-2", stall_log, "heartbeat_timeout") == {
        "a1": ("gpu-1", "superseded"), "a2": ("gpu-2", "finished")}
    # One email per request, whatever happened.
    assert sorted(reader.sent()) == ["req-r-%d:call_00 ana@example.com Your refund" % n
                                     for n in (1, 2, 3)]
    show = done.stdout[len(streams):]
    assert re.search(r"^a1 +1 +gpu-1 +dead ", show, re.M), show
    assert re.search(r"^a2 +2 +gpu-2 +finished ", show, re.M), show
    assert "failover_decision" in show and "first_delta" in show, show


def test_python_router_without_a_failure_and_with_a_reject(router_reader):
    reader = router_reader
    rid = new_id("req")
    done = reader.python("router.py", rid, "none")
    assert (done.returncode, done.stdout) == (0, FULL), done
    assert [a["state"] for a in reader.request(rid)["attempts"]] == ["finished"]
    # A call of the request whose outcome is unknown: a rerun could repeat it, so reject,
    # and since nothing was sent, an error answer rather than an event.
    rid = new_id("req")
    reader.router("/v1/requests/%s/attempts" % rid,
                  {"attempt_id": "a1", "replica": "gpu-1", "lease_ms": 3000})
    r = reader.led.post("/v1/requests/%s/tool-calls/call_05/claim" % rid,
                        {"claim_id": claim_id(), "tool": "charge", "attempt_id": "a1",
                         "lease_ms": 100}, token=reader.token("router"))
    assert r.status == 201, r
    time.sleep(0.3)
    done = reader.python("router.py", rid, "exit-early")
    assert done.returncode == 0, done
    assert "failover a1 replica_exited: reject" in done.stderr, done.stderr
    status, body = done.stdout.split(" ", 2)[1:]
    assert status == "503", done.stdout
    assert json.loads(body)["error"]["code"] == "tool_outcome_unknown", body
    assert reader.request(rid)["request"]["status"] == "failed"


def test_c_router_reruns_fences_and_terminates(router_reader):
    reader = router_reader
    done = reader.sh("router-c.sh")
    assert done.returncode == 0, done
    # The Python router's events; only the error event's JSON is written without spaces.
    assert done.stdout.startswith(FULL + answer(WORDS[:2])), done.stdout
    rest = done.stdout[len(FULL + answer(WORDS[:2])):]
    assert '": ' not in rest, rest
    err = check_terminated(reader, "req-rc-2", rest)
    # The same client error as the Python router's, but for the request id.
    python_err = error_event((CODE / "router-exit-late.txt").read_text()[
        len(answer(WORDS[:2])):])["error"]
    assert err == dict(python_err, request_id="req-rc-2")
    early_log, late_log = runs(done.stderr)
    assert check_rerun(reader, "req-rc-1", early_log, "replica_exited") == {
        "a1": ("gpu-1", "dead"), "a2": ("gpu-2", "finished")}
    assert "failover a1 upstream_closed: terminate_stream" in late_log, late_log
    rid = new_id("req")
    stalled = reader.run([ROOT / "build" / "guide-router", rid, "stall"])
    assert (stalled.returncode, stalled.stdout) == (0, FULL), stalled
    assert "failover a1 heartbeat_timeout: wait_for_fence" in stalled.stderr, stalled.stderr
    assert check_rerun(reader, rid, stalled.stderr, "heartbeat_timeout") == {
        "a1": ("gpu-1", "superseded"), "a2": ("gpu-2", "finished")}
    assert len(reader.sent()) == 3


# --- ledger-gateway: the router with keys, and agents as its clients -----------------
#
# gateway.sh starts the stand-in model server (model.py) and build/ledger-gateway
# in the background of the reader's terminal; the other blocks talk to them. They
# run as they are but for two things, rewritten in the text run: the addresses
# (free ports instead of 127.0.0.1:8000 and 127.0.0.1:9001; the programs get the
# gateway's in GATEWAY_URL) and var/ (the test's own directory, where the pool's
# secret, the logs and the outbox go).

sys.path.insert(0, str(ROOT / "tests" / "programs" / "ledger-gateway"))
import portkey_proc  # noqa: E402

SEPARATOR = "==== next block ===="


def rid_of(secret, key, scope):
    """The request id GATEWAY.md derives from a key in a scope."""
    s, mac_key = scope.encode(), secret.encode()
    mac = hmac.new(mac_key, struct.pack(">I", len(s)) + s + key.encode(), hashlib.sha256)
    return "k-" + base64.b32encode(mac.digest()).decode().lower().rstrip("=")[:32]


def free_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % s.getsockname()[1]


class Terminal:
    """A reader's terminal with gateway.sh run in it: the gateway, the model server, var/."""

    def __init__(self, service, tmp, token_delay_ms=200):
        self.led = service.ledgerd
        self.var = tmp / "var"
        self.var.mkdir()
        self.tenant = new_id("t")
        self.token = service.token("router", self.tenant)
        self.gateway, self.model = free_address(), free_address()
        self.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp),
                    "LEDGER_URL": "http://%s:%d" % (self.led.host, self.led.port),
                    "LEDGER_TOKEN": self.token, "OUTBOX": str(self.var / "outbox.txt"),
                    "GATEWAY_URL": "http://%s/v1" % self.gateway,
                    "TOKEN_DELAY_MS": str(token_delay_ms)}
        self.background = self._start("gateway.sh", "wait")
        deadline = time.time() + 20
        while not self._healthy():
            if self.background.poll() is not None or time.time() > deadline:
                _kill_group(self.background)
                raise AssertionError("gateway.sh: %s" % (self.var / "gateway.log").read_text())
            time.sleep(0.1)
        self.secret = (self.var / "gateway-key-secret").read_text().strip()

    def _healthy(self):
        try:
            with socket.create_connection(self.gateway.split(":"), timeout=1) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
                return s.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def localized(self, name):
        """The block @name as run here: its addresses and var/ rewritten."""
        text = (CODE / name).read_text().replace("127.0.0.1:8000", self.gateway)
        text = text.replace("127.0.0.1:9001", self.model)
        text = re.sub(r"\bvar/", str(self.var) + "/", text)
        path = self.var / ("block-" + name)
        path.write_text(text)
        return path

    def _start(self, *blocks):
        script = "\n".join("echo %s; source %s" % (SEPARATOR, self.localized(b))
                           if b.endswith(".sh") else b for b in blocks)
        # Bytes, not text: curl's answers keep their CRLFs.
        return subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)

    def run(self, *blocks, timeout=120):
        """The blocks, in order, in one shell: the stdout of each, and the stderr of all."""
        proc = self._start(*blocks)
        try:
            out, err = (b.decode() for b in proc.communicate(timeout=timeout))
        finally:
            _kill_group(proc)
        assert "command not found" not in err and "Traceback" not in err, err
        return out.split(SEPARATOR + "\n")[1:], err

    def rid(self, key, scope="Bearer team-a"):
        return rid_of(self.secret, key, scope)

    def completions(self, rid=None):
        """What the model server was asked: its log lines (of @rid)."""
        path = self.var / "model.log"
        lines = [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []
        return [l for l in lines if rid is None or l["request_id"] == rid]

    def gateway_log(self, msg, rid):
        return [l for l in map(json.loads, (self.var / "gateway.log").read_text().splitlines())
                if l.get("msg") == msg and l.get("request_id") == rid]

    def sent(self):
        path = self.var / "outbox.txt"
        return path.read_text().splitlines() if path.exists() else []

    def view(self, rid):
        r = self.led.get("/v1/requests/%s" % rid, token=self.token)
        assert r.status == 200, r
        return r.json

    def close(self):
        _kill_group(self.background)


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


@pytest.fixture
def terminal(service, tmp_path):
    t = Terminal(service, tmp_path)
    yield t
    t.close()


class Answer:
    """One answer curl -D - printed: status, headers (lower-cased names), body, events."""

    def __init__(self, text):
        head, _, self.body = text.partition("\r\n\r\n")
        lines = head.split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip() for k, v in
                        (line.split(":", 1) for line in lines[1:])}
        self.events = events_in(self.body)
        self.rid = self.headers.get("x-request-id")
        self.replayed = self.headers.get("idempotent-replayed") == "true"

    @property
    def sse(self):
        """The events as written: what a replay must repeat byte for byte."""
        return "".join("id: %d\ndata: %s\n\n" % e for e in self.events)

    @property
    def text(self):
        return "".join((json.loads(d)["choices"][0]["delta"].get("content") or "")
                       for _, d in self.events if d != "[DONE]")

    @property
    def error(self):
        return json.loads(self.body)["error"]


def events_in(text):
    """The SSE events at the start of @text, up to [DONE] or anything else: [(id, data)]."""
    events = []
    for block in text.split("\n\n"):
        m = re.fullmatch(r"id: (\d+)\ndata: (.*)", block.strip("\n"), re.S)
        if not m:
            break
        events.append((int(m.group(1)), m.group(2)))
        if m.group(2) == "[DONE]":
            break
    return events


def answers(out):
    return [Answer(a) for a in re.split(r"(?m)^(?=HTTP/1\.1 \d{3} )", out) if a.strip()]


def test_router_keys_walkthrough_answers_as_the_guide_says(terminal):
    (keys, tools), err = terminal.run("router-keys.sh", "router-tools.sh")
    got = answers(keys)
    assert [a.status for a in got] == [200, 200, 200, 200, 422, 200, 400, 200], keys
    first, again, after3, rest, reused, other, bad, keyless = got
    where1, where2 = terminal.rid("where-1"), terminal.rid("where-2")
    # The model answers once; the repeat is its recorded bytes (the same chatcmpl id).
    assert (first.rid, first.replayed) == (where1, False)
    assert [i for i, _ in first.events] == list(range(1, 9))
    assert first.events[-1][1] == "[DONE]" and first.text == "Your refund is on its way."
    assert (again.rid, again.replayed, again.sse) == (where1, True, first.sse)
    assert (after3.replayed, after3.events) == (True, first.events[3:])
    # The client that left after two events (curl without -D: the events alone) gets
    # the rest of the same answer: from the run it left, or, had it ended, replayed.
    cut = events_in(after3.body.split("data: [DONE]\n\n", 1)[1])
    assert [i for i, _ in cut] == [1, 2], keys
    assert rest.rid == where2 and [i for i, _ in rest.events] == list(range(3, 9)), keys
    assert Answer("HTTP/1.1 200 OK\r\n\r\n" + "".join(
        "id: %d\ndata: %s\n\n" % e for e in cut + rest.events)).text == first.text
    generations = {json.loads(d)["id"] for _, d in cut + rest.events[:-1]}
    assert len(generations) == 1  # one generation, never two joined
    assert [len(terminal.completions(r)) for r in (where1, where2)] == [1, 1]
    assert terminal.view(where2)["request"]["status"] == "completed"
    shown = rest.body.split("data: [DONE]\n\n", 1)[1]  # what ledgerctl show printed
    if not rest.replayed:  # it attached to the live run: on record, with where it resumed
        assert re.search(r" client_resumed +client resumed after event 2 ", shown), shown
    # Another body under the key; the key of another client; a bad key; no key.
    assert (reused.rid, reused.error["code"], reused.headers["x-should-retry"]) == (
        where1, "idempotency_key_reused", "false")
    assert other.rid == terminal.rid("where-1", "Bearer team-b") != where1
    assert not other.replayed and other.text == first.text
    assert (bad.error["code"], bad.headers["x-should-retry"]) == (
        "invalid_idempotency_key", "false")
    assert keyless.rid.startswith("req-") and keyless.text == first.text
    # router-tools.sh: the model server ran the tool once, keyed by the x-request-id.
    ran, retried = answers(tools)
    rid = terminal.rid("refund-829")
    assert (ran.rid, ran.replayed, retried.replayed, retried.sse) == (rid, False, True, ran.sse)
    assert ran.text == 'Sent to ana@example.com: {"message_id":"m-%s:call_00"}' % rid
    assert terminal.sent() == ["%s:call_00 ana@example.com Your refund" % rid]
    assert tools.endswith(terminal.sent()[0] + "\n")
    assert [c["answer"] for c in terminal.completions(rid)] == ["ran send_email (executed)"]
    call = terminal.led.get("/v1/requests/%s/tool-calls/call_00" % rid, token=terminal.token)
    assert (call.json["state"], call.json["tool"]) == ("succeeded", "send_email"), call.json


def test_pool_and_portkey_settings_name_the_key_header():
    """The pool's configurations route by the header the gateway reads, and Portkey's is
    the one tests/programs/ledger-gateway runs Portkey with."""
    envoy = yaml.safe_load((CODE / "pool-envoy.yaml").read_text())
    hcm = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    route = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    assert route["hash_policy"] == [{"header": {"header_name": "idempotency-key"}}]
    cluster = envoy["static_resources"]["clusters"][0]
    assert cluster["name"] == route["cluster"] and cluster["lb_policy"] in ("RING_HASH", "MAGLEV")
    nginx = (CODE / "pool-nginx.conf").read_text()
    upstream = re.search(r"upstream (\w+) \{([^}]*)\}", nginx)
    assert "hash $http_idempotency_key consistent;" in upstream.group(2)
    assert "proxy_pass http://%s;" % upstream.group(1) in nginx
    shown = json.loads((CODE / "portkey-config.json").read_text())
    assert shown == json.loads(portkey_proc.config(
        "http://127.0.0.1:8000/v1", ["idempotency-key", "authorization"], retry_attempts=2,
        retry_on=[503], api_key=shown["api_key"]))


# --- in front of the engines you run ---------------------------------------------------
#
# gateway-engines.sh runs as written against stand-ins of the engines of engines.sh
# (tests/engines: two vLLM and one SGLang server, and a real llama.cpp engine
# speaking llama-server's API), each with its own API key, at the addresses of
# gateway-engines.yaml rewritten to theirs.


def test_engines_and_their_config_name_the_same_hosts_and_keys():
    """engines.sh starts each engine gateway-engines.yaml names, on its host and
    port, with the key the file's api_key_env names."""
    config = yaml.safe_load((CODE / "gateway-engines.yaml").read_text())["replicas"]
    text = (CODE / "engines.sh").read_text().replace("\\\n", " ")
    commands = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(commands) == len(config)
    for replica, command in zip(config, commands):
        host, port = re.fullmatch(r"http://([\d.]+):(\d+)", replica["url"]).groups()
        assert "--host %s --port %s " % (host, port) in command, (replica, command)
        assert command.endswith('--api-key "$%s"' % replica["api_key_env"]), command


def test_gateway_in_front_of_the_engines_answers_as_the_guide_says(service, tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "faults"))
    sys.path.insert(0, str(ROOT / "tests" / "engines" / "llama"))
    from llama_engine import LlamaEngine
    from stack import Process, http_json
    fake = ROOT / "tests" / "engines" / "fakes" / "engine_fake.py"
    model = "meta-llama/Llama-3.1-8B-Instruct"
    var = tmp_path / "var"
    var.mkdir()
    keys = {}
    for name in ("vllm", "sglang", "llama"):
        keys[name] = new_id(name)
        (var / ("%s-api-key" % name)).write_text(keys[name] + "\n")
    engines = [
        Process([sys.executable, fake, "--kind", "vllm", "--model", model,
                 "--api-key", keys["vllm"]], tmp_path / "vllm-1.log").wait_ready(),
        Process([sys.executable, fake, "--kind", "vllm", "--model", model,
                 "--api-key", keys["vllm"]], tmp_path / "vllm-2.log").wait_ready(),
        Process([sys.executable, fake, "--kind", "sglang", "--model-path", model,
                 "--api-key", keys["sglang"]], tmp_path / "sglang-1.log").wait_ready()]
    shell = None
    try:
        engines.append(LlamaEngine(tmp_path / "llama-1.log", alias="llama-3.1-8b-q8",
                                   api_key=keys["llama"]))
        config = (CODE / "gateway-engines.yaml").read_text()
        for i, e in enumerate(engines, 1):
            url = re.search(r"url: (http://10\.0\.0\.%d:\d+)" % i, config).group(1)
            config = config.replace(url, e.url)
        (var / "gateway-engines.yaml").write_text(config)
        gateway, ops = free_address(), free_address()
        script = re.sub(r"\bvar/", str(var) + "/", (CODE / "gateway-engines.sh").read_text())
        script = script.replace("docs/guides/gateway-engines.yaml",
                                str(var / "gateway-engines.yaml"))
        script = script.replace("127.0.0.1:8000", gateway).replace("127.0.0.1:9100", ops)
        tenant = new_id("t")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path),
               "LEDGER_URL": "http://%s:%d" % (service.ledgerd.host, service.ledgerd.port),
               "LEDGER_TOKEN": service.token("router", tenant)}
        # The gateway's first probes end before /readyz says ready: the kinds shown are read.
        shell = subprocess.Popen(["bash", "-c", script + "\nwait"], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True, text=True)
        lines = []
        deadline = time.time() + 60
        while len(lines) < 7 and time.time() < deadline:
            line = shell.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
        assert len(lines) == 7, (lines, shell.stderr.read() if shell.poll() is not None else "")
        ready = [json.loads(line) for line in lines[:4]]
        assert ready == [{"name": n, "kind": k, "state": "healthy", "reason": ""} for n, k in
                         (("vllm-1", "vllm"), ("vllm-2", "vllm"), ("sglang-1", "sglang"),
                          ("llama-1", "llama.cpp"))], ready
        assert sorted(json.loads(lines[4])) == sorted([model, "llama-3.1-8b-q8"]), lines[4]
        assert lines[5].startswith("data: {") and lines[6] == "data: [DONE]", lines
        got = shell.stdout.readline().strip()
        assert got == '"chat.completion"', got
        # Each engine got its own key, and every request to it carried it.
        for e, name in zip(engines, ("vllm", "vllm", "sglang")):
            requests = http_json(e.url, path="/_fake/requests")[1]["requests"]
            assert requests and all(r["headers"].get("authorization") == "Bearer " + keys[name]
                                    for r in requests), requests
    finally:
        if shell is not None:
            _kill_group(shell)
        for e in engines:
            e.stop()


# --- agents as clients of the router ---------------------------------------------------


@pytest.fixture(scope="module")
def guides_npm():
    """docs/guides/node_modules as the reader's `npm ci` makes it, once, under the js lock."""
    with js_build.locked():
        js_build.build_core()
        if js_build.needs_install(CODE):
            js_build.run(js_build.NPM_CI + ["--ignore-scripts"], CODE, 600)


def client_lines(stdout):
    return stdout.strip().split("\n")


def test_agent_client_restarted_replays_its_steps_and_sends_once(terminal, guides_npm):
    (out,), err = terminal.run("agent-client.sh")
    first, second = out.strip().split("\n")[:4], out.strip().split("\n")[4:]
    step0, step1 = terminal.rid("run-829:0"), terminal.rid("run-829:1")
    result = '{"message_id":"m-run-829:call_00"}'
    assert first == ["step 0 " + step0, "call_00 executed " + result,
                     "step 1 " + step1, "Sent: " + result], out + err
    # The restart: the same requests, replayed by the gateway; the tool's result by ledgerd.
    assert second == ["step 0 %s replayed" % step0, "call_00 replayed " + result,
                      "step 1 %s replayed" % step1, "Sent: " + result], out + err
    assert terminal.sent() == ["run-829:call_00 ana@example.com Your refund"]
    assert [c["answer"] for c in terminal.completions()] == ["tool_call", "text"]
    assert [c["request_id"] for c in terminal.completions()] == [step0, step1]


def test_agent_client_killed_mid_step_reuses_the_same_inference_request(
        service, tmp_path, guides_npm):
    t = Terminal(service, tmp_path, token_delay_ms=1000)
    try:
        step1 = t.rid("crash-1:1")
        proc = subprocess.Popen(["node", "docs/guides/agent-client.mjs", "crash-1"], cwd=ROOT,
                                env=t.env, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        deadline = time.time() + 30
        while not t.completions(step1):  # killed while the model answers step 1
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.05)
        _kill_group(proc)
        assert t.sent() == ["crash-1:call_00 ana@example.com Your refund"]
        done = subprocess.run(["node", "docs/guides/agent-client.mjs", "crash-1"], cwd=ROOT,
                              env=t.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done
        lines = client_lines(done.stdout)
        assert lines[:2] == ["step 0 %s replayed" % t.rid("crash-1:0"),
                             'call_00 replayed {"message_id":"m-crash-1:call_00"}'], done.stdout
        # Step 1 attached to the run the killed process left (held for it), or, had it
        # ended, replayed it: the model was asked once either way.
        assert re.fullmatch(r"step 1 %s( replayed)?" % step1, lines[2]), done.stdout
        assert lines[3] == 'Sent: {"message_id":"m-crash-1:call_00"}'
        assert len(t.completions(step1)) == 1
        assert len(t.sent()) == 1
    finally:
        t.close()


def test_agent_client_stops_when_its_conversation_differs_from_its_keys(terminal, guides_npm):
    """A key names one request: a run whose step 0 asks something else under the same
    key is refused (422), and the program says so and stops with status 3."""
    q = {"model": "stand-in", "stream": True,
         "messages": [{"role": "user", "content": "Something else entirely."}],
         "tools": []}
    conn = http.client.HTTPConnection(*terminal.gateway.split(":"), timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(q),
                 {"Content-Type": "application/json", "Authorization": "Bearer team-a",
                  "Idempotency-Key": "taken:0"})
    assert conn.getresponse().read().endswith(b"data: [DONE]\n\n")
    conn.close()
    done = subprocess.run(["node", "docs/guides/agent-client.mjs", "taken"], cwd=ROOT,
                          env=terminal.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done
    assert "idempotency_key_reused" in done.stdout, done.stdout
    assert terminal.sent() == []


def test_framework_providers_carry_the_key(terminal, guides_npm):
    (out,), err = terminal.run("agent-frameworks.sh")
    assert client_lines(out) == ["%s Your refund is on its way." % f
                                 for f in ("ai", "ai", "langchain", "langchain",
                                           "agents", "agents")], out + err
    for framework in ("ai", "langchain", "agents"):
        rid = terminal.rid("run-%s:0" % framework)
        assert len(terminal.completions(rid)) == 1, (framework, terminal.completions())
        assert len(terminal.gateway_log("replayed", rid)) == 1, framework
    assert len(terminal.completions()) == 3
