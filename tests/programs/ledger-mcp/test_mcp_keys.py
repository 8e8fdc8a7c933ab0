"""Which tools/call ledger-mcp intercepts, and the refusals that never reach
the server: no key (passed through, or -32017 with --require-key), bad keys
(-32018), other arguments or another tool under a used key (-32012), an
attempt that lost its rights (-32013) or none named where the request has
attempts (-32015 attempt_required), and a batch holding a tools/call (-32021).
"""

import json
import subprocess
import time

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402

ORDER = {"order": "o-1", "cents": 500}


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_keys"))


@pytest.fixture(scope="module", params=["stdio", "http-sse"])
def stack(env, request):
    s = mcp.Stack(env, request.param)
    yield s
    s.close()


def test_a_call_without_keys_passes_through_and_runs_every_time(stack):
    before = stack.counts.executed(tool="charge")
    run = stack.run([call("charge", {"order": "o-nokey", "cents": 1}, repeat=2)])
    first, second = run.calls()
    assert first["ok"] and second["ok"], run
    assert not mcp.is_replay(first["result"]) and not mcp.is_replay(second["result"])
    assert first["result"] != second["result"]  # two charges, two charge ids
    assert stack.counts.executed(tool="charge") == before + 2


@pytest.mark.parametrize("kind", ["stdio", "http-json"])
def test_require_key_refuses_a_call_without_keys(env, kind):
    s = mcp.Stack(env, kind, "--require-key")
    try:
        meta = mcp.keys()
        run = s.run([{"op": "list_tools"}, call("charge", ORDER), call("charge", ORDER, meta)])
        listed, refused, keyed = run.steps
        assert listed["ok"], run  # everything but tools/call still passes
        mcp.assert_proxy_error(refused, mcp.KEY_REQUIRED, "key_required")
        assert keyed["ok"] and not mcp.is_replay(keyed["result"]), run
        assert s.counts.started() == 1  # only the keyed call reached the server
    finally:
        s.close()


BAD_KEYS = [
    {"io.ledgerd/request_id": "r-only"},
    {"io.ledgerd/tool_call_id": "call_01"},
    {"io.ledgerd/request_id": 17, "io.ledgerd/tool_call_id": "call_01"},
    {"io.ledgerd/request_id": "r-x", "io.ledgerd/tool_call_id": None},
    {"io.ledgerd/request_id": "r:x", "io.ledgerd/tool_call_id": "call_01"},
    {"io.ledgerd/request_id": "r/x", "io.ledgerd/tool_call_id": "call_01"},
    {"io.ledgerd/request_id": "", "io.ledgerd/tool_call_id": "call_01"},
    {"io.ledgerd/request_id": "r" * 129, "io.ledgerd/tool_call_id": "call_01"},
    {"io.ledgerd/request_id": "r-é", "io.ledgerd/tool_call_id": "call_01"},
    {"io.ledgerd/request_id": "r-x", "io.ledgerd/tool_call_id": "call 01"},
    {"io.ledgerd/request_id": "r-x", "io.ledgerd/tool_call_id": "call_01",
     "io.ledgerd/attempt_id": "att 1"},
    {"io.ledgerd/request_id": "r-x", "io.ledgerd/tool_call_id": "call_01",
     "io.ledgerd/attempt_id": 3},
]


def test_bad_keys_are_refused_before_the_server(stack):
    before = stack.counts.started()
    run = stack.run([call("charge", ORDER, meta) for meta in BAD_KEYS])
    for line in run.calls():
        mcp.assert_proxy_error(line, mcp.INVALID_KEY, "invalid_key")
    assert stack.counts.started() == before
    # The longest id there is, and every character an id may hold, are keys.
    meta = mcp.keys((mcp.new_id("r") + "x" * 128)[:128], "A-Za-z0-9._~-")
    ok = stack.run([call("charge", ORDER, meta)]).calls()[0]
    assert ok["ok"] and not mcp.is_replay(ok["result"]), ok
    assert stack.env.state(meta) == "succeeded"


def test_other_arguments_under_a_used_key_are_refused(stack):
    meta = mcp.keys()
    run = stack.run([call("charge", ORDER, meta),
                     call("charge", {"order": "o-1", "cents": 501}, meta),
                     call("charge", {"order": "o-1", "cents": 500, "fail": False}, meta),
                     call("sync", ORDER, meta),
                     call("charge", ORDER, meta)])
    first, cents, more, tool, again = run.calls()
    assert first["ok"], run
    for line in (cents, more, tool):
        data = mcp.assert_proxy_error(line, mcp.ARGS_MISMATCH, "args_mismatch", meta)
        assert data["ledgerd"]["code"] == "args_mismatch", data
    assert tool["error"]["data"]["ledgerd"]["field"] == "tool"
    assert cents["error"]["data"]["ledgerd"]["field"] == "args"
    # The key still answers its own call.
    assert again["ok"] and again["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
    assert stack.counts.started(meta=meta) == 1
    assert stack.counts.started(tool="sync", meta=meta) == 0


def test_arguments_compare_by_their_canonical_form(stack):
    """The fingerprint is ledgerd's (RFC 8785): key order does not make another call."""
    meta = mcp.keys()
    run = stack.run([call("charge", {"order": "o-2", "cents": 5}, meta),
                     call("charge", {"cents": 5, "order": "o-2"}, meta)])
    first, second = run.calls()
    assert first["ok"] and second["ok"], run
    assert second["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])


def attempt(env, rid, aid, action=None):
    if action is None:
        r = env.led.post("/v1/requests/%s/attempts" % rid, token=env.router,
                         body={"attempt_id": aid, "replica": "gpu-a/1", "model_revision": "m@1",
                               "lease_ms": 30000})
        assert r.status == 201, r
    else:
        r = env.led.post("/v1/requests/%s/attempts/%s/%s" % (rid, aid, action), token=env.router,
                         body={"reason": "failover drill"} if action == "cancel" else {})
        assert r.status == 200, r
    return r


def test_a_fenced_attempt_is_refused_and_the_live_one_runs(stack):
    env = stack.env
    rid = mcp.new_id("r")
    attempt(env, rid, "att-1")
    attempt(env, rid, "att-1", "cancel")
    attempt(env, rid, "att-1", "cancel-ack")
    attempt(env, rid, "att-2")
    fenced = mcp.keys(rid, "call_01", attempt_id="att-1")
    live = mcp.keys(rid, "call_01", attempt_id="att-2")
    bare = mcp.keys(rid, "call_02")
    unknown = mcp.keys(rid, "call_03", attempt_id="att-9")
    run = stack.run([call("charge", ORDER, fenced), call("charge", ORDER, bare),
                     call("charge", ORDER, unknown), call("charge", ORDER, live),
                     call("charge", ORDER, fenced)])
    zombie, no_attempt, no_such, ok, replay = run.calls()
    data = mcp.assert_proxy_error(zombie, mcp.ATTEMPT_FENCED, "attempt_fenced", fenced)
    assert data["ledgerd"]["code"] == "attempt_fenced"
    data = mcp.assert_proxy_error(no_attempt, mcp.REFUSED, "attempt_required", bare)
    assert data["ledgerd"]["code"] == "attempt_required"
    data = mcp.assert_proxy_error(no_such, mcp.REFUSED, "attempt_not_found", unknown)
    assert ok["ok"] and not mcp.is_replay(ok["result"]), run
    # A replay starts nothing: even the fenced attempt gets it.
    assert replay["ok"] and replay["raw"]["result"] == mcp.with_replayed(ok["raw"]["result"]), run
    assert stack.counts.started(meta=live) == 1
    assert stack.counts.started(meta=bare) == 0 and stack.counts.started(meta=unknown) == 0


def test_a_batch_holding_a_tools_call_is_refused(env):
    """The SDK sends no batches: raw lines into ledger-mcp stdio."""
    counts = env.counts()
    meta = mcp.keys()
    proc = subprocess.Popen(env.stdio_proxy_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL,
                            env=dict(env.proxy_env(), MCP_TEST_COUNT_FILE=str(counts.path)))
    try:
        def send(msg):
            proc.stdin.write(json.dumps(msg).encode() + b"\n")
            proc.stdin.flush()

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
        assert json.loads(proc.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send([{"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "charge", "arguments": ORDER, "_meta": meta}},
              {"jsonrpc": "2.0", "id": 3, "method": "ping"}])
        answer = json.loads(proc.stdout.readline())
        assert answer["id"] is None, answer
        assert answer["error"]["code"] == mcp.BATCH, answer
        assert answer["error"]["data"]["code"] == "batch_with_tool_call", answer
        assert answer["error"]["message"].startswith("ledger-mcp: "), answer
        # The session goes on, and nothing ran.
        send({"jsonrpc": "2.0", "id": 4, "method": "ping"})
        assert json.loads(proc.stdout.readline()) == {"jsonrpc": "2.0", "id": 4, "result": {}}
        time.sleep(0.2)
        assert counts.started() == 0
        assert env.state(meta) is None
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=20) == 0
