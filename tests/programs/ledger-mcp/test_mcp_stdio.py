"""The stdio transport's own promises: intercepted calls of one session run
at once and each answer is written once, to its own id; a key raced inside
one session runs once; a client that closes stdin still gets the answers
of the calls in flight, recorded.
"""

import json
import select
import subprocess
from collections import Counter

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_stdio"))


def test_calls_of_one_session_run_at_once_and_are_answered_once(env):
    counts = env.counts()
    client_log, server_log = env.tmp / "tap-c.jsonl", env.tmp / "tap-s.jsonl"
    a, b = mcp.keys(), mcp.keys()
    run = mcp.run_client({"transport": env.tapped_stdio(counts, client_log, server_log),
                          "steps": [{"op": "parallel", "steps": [
                              call("charge", {"order": "o-a", "cents": 1, "sleep_ms": 900}, a),
                              call("charge", {"order": "o-b", "cents": 2, "sleep_ms": 300}, b),
                              call("charge", {"order": "o-c", "cents": 3, "sleep_ms": 100}),
                              {"op": "ping"}]}]})
    lines = {line["sub"]: line for line in run.steps if "sub" in line}
    assert all(line["ok"] for line in lines.values()), run
    for sub, order in ((0, "o-a"), (1, "o-b"), (2, "o-c")):
        assert lines[sub]["result"]["content"][0]["text"].startswith(
            "charged %d cents for %s" % (sub + 1, order)), lines[sub]
    # At once: b ran at the server while a ran, and the ping and b were answered
    # before a (the client prints each line as its answer comes).
    (start_a,), (end_a,) = ([e["time"] for e in counts.events(ev, meta=a)]
                            for ev in ("started", "executed"))
    (start_b,), (end_b,) = ([e["time"] for e in counts.events(ev, meta=b)]
                            for ev in ("started", "executed"))
    assert max(start_a, start_b) < min(end_a, end_b), (start_a, start_b, end_b, end_a)
    order = [line.get("sub") for line in run.steps]
    assert order.index(3) < order.index(0) and order.index(1) < order.index(0), order
    # Every request got exactly one answer line.
    answered = Counter(json.loads(line).get("id") for line in mcp.tap_lines(client_log, "out")
                       if "method" not in json.loads(line))
    assert all(n == 1 for n in answered.values()), answered
    assert {lines[s]["id"] for s in lines} <= set(answered)
    assert env.state(a) == "succeeded" and env.state(b) == "succeeded"


def test_one_key_raced_inside_one_session_runs_once(env):
    counts = env.counts()
    meta = mcp.keys()
    args = {"order": "o-twice", "cents": 5, "sleep_ms": 700}
    run = mcp.run_client({"transport": env.stdio(counts), "steps": [
        {"op": "parallel", "steps": [call("charge", args, meta), call("charge", args, meta)]}]})
    lines = [line for line in run.steps if "sub" in line]
    assert all(line["ok"] for line in lines), run
    results = [line["raw"]["result"] for line in lines]
    (first,) = [r for r in results if not mcp.is_replay(r)]
    assert [r for r in results if mcp.is_replay(r)] == [mcp.with_replayed(first)], results
    assert counts.started(meta=meta) == 1


def test_closing_stdin_finishes_the_calls_in_flight(env):
    counts = env.counts()
    meta = mcp.keys()
    request = {"jsonrpc": "2.0", "id": "slow-1", "method": "tools/call",
               "params": {"name": "charge", "arguments": {"order": "o-eof", "cents": 9,
                                                          "sleep_ms": 700}, "_meta": meta}}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}
    text = "".join(json.dumps(m) + "\n" for m in (
        init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, request))
    # The whole input at once, then EOF while the call runs.
    p = subprocess.run(env.stdio_proxy_argv(), input=text, text=True, capture_output=True,
                       timeout=30, env=dict(env.proxy_env(), MCP_TEST_COUNT_FILE=str(counts.path)))
    assert p.returncode == 0, p.stderr
    answers = {json.loads(line)["id"]: json.loads(line) for line in p.stdout.splitlines()}
    assert set(answers) == {0, "slow-1"}, p.stdout
    result = answers["slow-1"]["result"]
    assert result["content"][0]["text"].startswith("charged 9 cents for o-eof"), result
    assert env.state(meta) == "succeeded"
    assert env.tool_call(meta).json["result"] == result
    assert counts.executed(meta=meta) == 1


class Raw:
    """ledger-mcp stdio before the test server, spoken to in raw lines."""

    def __init__(self, env, counts):
        self.proc = subprocess.Popen(env.stdio_proxy_argv(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=dict(env.proxy_env(),
                                              MCP_TEST_COUNT_FILE=str(counts.path)))
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "raw", "version": "1"}}})
        assert json.loads(self.proc.stdout.readline())["id"] == 0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.proc.stdin.write((msg if isinstance(msg, str) else json.dumps(msg)).encode() + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout_s=20):
        """The next line the proxy writes, parsed; fails after @timeout_s without one."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        assert ready, "no answer within %d s" % timeout_s
        return json.loads(self.proc.stdout.readline())


def test_sigterm_finishes_the_calls_in_flight(env):
    counts = env.counts()
    meta = mcp.keys()
    raw = Raw(env, counts)
    raw.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
              "params": {"name": "charge", "arguments": {"order": "o-term", "cents": 4,
                                                         "sleep_ms": 700}, "_meta": meta}})
    counts.wait_for("started", meta=meta)
    raw.proc.terminate()
    answer = raw.read()
    assert answer["id"] == 7 and "result" in answer, answer
    assert raw.proc.wait(timeout=20) == 0
    assert env.state(meta) == "succeeded"
    assert env.tool_call(meta).json["result"] == answer["result"]


def test_arguments_that_cannot_be_fingerprinted_never_reach_the_server(env):
    """1e400 has no canonical form (docs/api.md, Fingerprints): the call is refused.
    The spec names no code for it: ledgerd's refusal (-32015) or the proxy's own."""
    counts = env.counts()
    meta = mcp.keys()
    raw = Raw(env, counts)
    try:
        raw.send('{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"charge",'
                 '"arguments":{"order":"o-inf","cents":1e400},"_meta":%s}}' % json.dumps(meta))
        answer = raw.read()
        assert answer["id"] == 8 and answer["error"]["code"] in (-32602, mcp.REFUSED), answer
        assert answer["error"]["data"]["server_called"] is False, answer
        assert counts.started() == 0
        assert env.state(meta) is None
    finally:
        raw.proc.stdin.close()
        raw.proc.wait(timeout=20)


@pytest.mark.parametrize("line", [
    b'{"jsonrpc":"2.0","id":9,"method":"tools/list"',            # cut short
    b'{"jsonrpc":"2.0","id":9,"method":"tools/\xff\xfelist"}',    # not UTF-8
    b'{"jsonrpc":"2.0","id":9,\x00"method":"tools/list"}',        # a NUL
    b'not json at all',
], ids=["truncated", "invalid-utf8", "nul", "text"])
def test_a_line_that_is_not_json_gets_a_parse_error_not_silence(env, line):
    """JSON-RPC 2.0, section 5: a request that cannot be parsed is answered
    -32700 with id null. The session goes on: the next request is answered."""
    counts = env.counts()
    raw = Raw(env, counts)
    try:
        raw.proc.stdin.write(line + b"\n")
        raw.proc.stdin.flush()
        answer = raw.read()
        assert answer["jsonrpc"] == "2.0" and answer["id"] is None, answer
        assert answer["error"]["code"] == -32700, answer
        raw.send({"jsonrpc": "2.0", "id": 10, "method": "tools/list"})
        assert raw.read()["id"] == 10
    finally:
        raw.proc.stdin.close()
        raw.proc.wait(timeout=20)


def test_a_batch_holding_a_tools_call_gets_its_refusal(env):
    """A batch with a tools/call is refused as README.md documents (-32021
    batch_with_tool_call, id null: a batch has no one id), and nothing runs."""
    counts = env.counts()
    meta = mcp.keys()
    raw = Raw(env, counts)
    try:
        raw.send([{"jsonrpc": "2.0", "id": 11, "method": "tools/call",
                   "params": {"name": "charge", "arguments": {"order": "o-batch", "cents": 2},
                              "_meta": meta}},
                  {"jsonrpc": "2.0", "id": 12, "method": "tools/list"}])
        answer = raw.read()
        assert answer["error"]["code"] == -32021, answer
        assert answer["error"]["data"]["code"] == "batch_with_tool_call", answer
        assert counts.started() == 0 and env.state(meta) is None
    finally:
        raw.proc.stdin.close()
        raw.proc.wait(timeout=20)
