"""What a server that fails mid-call leaves behind.

Once a call was forwarded, a server that dies, a stream that breaks, a call
that outlives --call-timeout-ms or a JSON-RPC error the proxy cannot judge
answer -32019 outcome_left_unknown (data.server_called true) and leave the
claim to run out into outcome_unknown: the next call gets -32011 until
`ledgerctl resolve` settles it, and then the resolved result. A -32602 from
the server passes through and releases the key (the tool never ran); a
server that cannot be reached at all answers -32020 and releases it too.
notifications/cancelled is forwarded and releases nothing.

Leases are 1 s (--lease-ms 1000), so an outcome turns unknown quickly.
"""

import json

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402

LEASE = ("--lease-ms", "1000")


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_server_errors"))


def order(name, **more):
    return dict({"order": name, "cents": 250}, **more)


def resolve(env, meta, outcome, result):
    r = env.ctl("resolve", mcp.rid_of(meta), mcp.cid_of(meta), "--as", outcome,
                "--result", result, "--note", "checked the payment provider")
    assert r.returncode == 0, (r.stdout, r.stderr)


def test_a_server_that_dies_mid_call_leaves_the_outcome_unknown_until_resolved(env):
    s = mcp.Stack(env, "stdio", *LEASE)
    meta = mcp.keys()
    args = order("o-die", behave="die")
    died = s.run([call("charge", args, meta)]).calls()[0]
    mcp.assert_proxy_error(died, mcp.LEFT_UNKNOWN, "outcome_left_unknown", meta, server_called=True)
    assert s.counts.executed(meta=meta) == 1
    # Not released: the charge may have happened.
    assert env.state(meta) in ("in_progress", "unknown")
    env.wait_state(meta, "unknown")
    unknown = s.run([call("charge", args, meta)]).calls()[0]
    data = mcp.assert_proxy_error(unknown, mcp.OUTCOME_UNKNOWN, "outcome_unknown", meta)
    assert data["ledgerd"]["code"] == "outcome_unknown", data
    assert s.counts.started(meta=meta) == 1
    # A person checks the provider's records and settles it.
    resolved = {"content": [{"type": "text", "text": "charged 250 cents for o-die (by hand)"}]}
    resolve(env, meta, "succeeded", json.dumps(resolved))
    run = s.run([call("charge", args, meta, repeat=2)])
    for line in run.calls():
        assert line["ok"], run
        assert line["raw"]["result"] == mcp.with_replayed(resolved)
    assert s.counts.started(meta=meta) == 1
    assert s.counts.executed(meta=meta) == 1


def test_a_result_resolved_as_a_non_object_is_replayed_as_text(env):
    s = mcp.Stack(env, "stdio", *LEASE)
    meta = mcp.keys()
    args = order("o-die-2", behave="die")
    died = s.run([call("charge", args, meta)]).calls()[0]
    mcp.assert_proxy_error(died, mcp.LEFT_UNKNOWN, "outcome_left_unknown", meta, server_called=True)
    env.wait_state(meta, "unknown")
    resolve(env, meta, "failed", '"refund sent"')
    replay = s.run([call("charge", args, meta)]).calls()[0]
    assert replay["ok"], replay
    assert replay["raw"]["result"] == {"_meta": {mcp.REPLAYED: True},
                                       "content": [{"type": "text", "text": '"refund sent"'}],
                                       "isError": True}


def test_a_server_that_dies_over_http_answers_left_unknown(env):
    s = mcp.Stack(env, "http-json", *LEASE)
    try:
        meta = mcp.keys()
        died = s.run([call("charge", order("o-http-die", behave="die"), meta)]).calls()[0]
        mcp.assert_proxy_error(died, mcp.LEFT_UNKNOWN, "outcome_left_unknown", meta,
                               server_called=True)
        assert s.counts.executed(meta=meta) == 1
        assert env.state(meta) in ("in_progress", "unknown")
        env.wait_state(meta, "unknown")
    finally:
        s.close()


def bodies_of(record, method="tools/call"):
    """The responses client.mjs recorded for POSTs of @method: (headers, body) pairs."""
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    posts = {e["seq"] for e in entries if e["dir"] == "request" and e["body"]
             and json.loads(e["body"]).get("method") == method}
    return [(e["headers"], e["body"]) for e in entries
            if e["dir"] == "response" and e["seq"] in posts]


@pytest.mark.parametrize("kind,behave", [("http-json", "break"), ("http-sse", "progress+break")])
def test_a_stream_broken_mid_call_answers_left_unknown(env, kind, behave):
    s = mcp.Stack(env, kind, *LEASE)
    try:
        meta = mcp.keys()
        record = env.tmp / ("record-break-%s.jsonl" % kind)
        transport = dict(s.transport(), record=str(record))
        run = mcp.run_client({"transport": transport, "timeout_ms": 20000,
                              "steps": [call("charge", order("o-break", behave=behave), meta),
                                        call("charge", order("o-break", behave=behave), meta)]})
        broken, after = run.calls()
        mcp.assert_proxy_error(broken, mcp.LEFT_UNKNOWN, "outcome_left_unknown", meta,
                               server_called=True)
        assert s.counts.executed(meta=meta) == 1
        (headers, body), _ = bodies_of(record)
        if kind == "http-sse":
            # The answer was an SSE stream already: the error is its last event.
            assert headers["content-type"].startswith("text/event-stream"), headers
            assert len(broken["notifications"]) >= 1, broken  # what came before the break
            last = body.rstrip("\n").split("\n\n")[-1]
            assert last.startswith("event: message\ndata: "), body
            assert json.loads(last.split("data: ", 1)[1])["error"]["code"] == mcp.LEFT_UNKNOWN
        else:
            assert headers["content-type"].startswith("application/json"), headers
            assert json.loads(body)["error"]["code"] == mcp.LEFT_UNKNOWN
        # The claim was not released: the next call waits it out, then finds it unknown.
        assert after["ok"] is False and after["error"]["code"] in (mcp.IN_PROGRESS,
                                                                   mcp.OUTCOME_UNKNOWN), after
        env.wait_state(meta, "unknown")
        assert s.counts.started(meta=meta) == 1
    finally:
        s.close()


def test_a_call_past_call_timeout_answers_left_unknown(env):
    s = mcp.Stack(env, "stdio", *LEASE, "--call-timeout-ms", "600")
    meta = mcp.keys()
    hung = s.run([call("charge", order("o-hang", behave="hang"), meta)]).calls()[0]
    mcp.assert_proxy_error(hung, mcp.LEFT_UNKNOWN, "outcome_left_unknown", meta, server_called=True)
    assert 600 <= hung["ms"] < 10000, hung
    env.wait_state(meta, "unknown")
    assert s.counts.started(meta=meta) == 1


def test_a_json_rpc_error_after_running_answers_left_unknown(env):
    s = mcp.Stack(env, "stdio", *LEASE)
    meta = mcp.keys()
    failed = s.run([call("charge", order("o-rpc", behave="rpc_error"), meta)]).calls()[0]
    mcp.assert_proxy_error(failed, mcp.LEFT_UNKNOWN, "outcome_left_unknown", meta,
                           server_called=True)
    assert s.counts.executed(meta=meta) == 1
    env.wait_state(meta, "unknown")


@pytest.mark.parametrize("kind", ["stdio", "http-json"])
def test_invalid_params_from_the_server_pass_through_and_release_the_key(env, kind):
    s = mcp.Stack(env, kind, *LEASE, extra_env={"MCP_TEST_STRICT": "1"})
    try:
        unknown_tool, bad_args = mcp.keys(), mcp.keys()
        run = s.run([call("chrage", order("o-typo"), unknown_tool),
                     call("charge", order("o-bad", behave="invalid_params"), bad_args),
                     call("chrage", order("o-typo"), unknown_tool)])
        first, bad, again = run.calls()
        # Passed through unchanged: the server's own error (the SDK's McpError puts
        # "MCP error -32602: " before its message), nothing of the proxy's added.
        assert first["raw"]["error"] == {
            "code": -32602, "message": "MCP error -32602: Tool chrage not found"}, first
        assert again["raw"]["error"] == first["raw"]["error"], again
        assert bad["raw"]["error"] == {
            "code": -32602,
            "message": "MCP error -32602: invalid params: refused before running"}, bad
        assert env.state(unknown_tool) == "released"
        assert env.state(bad_args) == "released"
        # Released: the second call reached the server again.
        assert len(s.counts.events("refused", meta=unknown_tool)) == 2
        assert s.counts.started() == 0
    finally:
        s.close()


def test_an_unreachable_server_answers_server_unreachable_and_releases_the_key(env):
    s = mcp.Stack(env, "http-json", *LEASE)
    try:
        meta = mcp.keys()
        go = env.tmp / "go-unreachable"
        client = mcp.ClientProc({"transport": s.transport(), "timeout_ms": 30000, "steps": [
            {"op": "list_tools"}, {"op": "wait_file", "path": str(go)},
            call("charge", order("o-gone"), meta)]})
        client.wait_line(lambda line: line.get("op") == "list_tools")
        s.server.kill()  # the session is open; now nothing listens upstream
        go.touch()
        run = client.finish()
        data = mcp.assert_proxy_error(run.calls()[0], mcp.SERVER_UNREACHABLE, "server_unreachable",
                                      meta, server_called=False)
        assert data["server_called"] is False
        assert env.state(meta) == "released"
        assert s.counts.started() == 0
    finally:
        s.close()


def test_an_http_4xx_before_running_releases_the_key(env):
    """The server restarted and forgot the session: it answers 404 before running
    anything. Nothing ran, so the key is released; if the client gets a JSON-RPC
    error of the proxy's, it is -32020 (the spec lets the HTTP transport show the
    server's own 404 instead)."""
    s = mcp.Stack(env, "http-json", *LEASE)
    restarted = None
    try:
        meta = mcp.keys()
        go = env.tmp / "go-404"
        client = mcp.ClientProc({"transport": s.transport(), "timeout_ms": 30000, "steps": [
            {"op": "list_tools"}, {"op": "wait_file", "path": str(go)},
            call("charge", order("o-404"), meta)]})
        client.wait_line(lambda line: line.get("op") == "list_tools")
        s.server.kill()
        restarted = env.http_server(s.counts, json_answers=True, port=s.server.port)
        go.touch()
        (line,) = client.finish().calls()
        assert line["ok"] is False, line
        if line["error"]["code"] is not None and line["error"].get("data"):
            mcp.assert_proxy_error(line, mcp.SERVER_UNREACHABLE, "server_unreachable", meta)
        assert env.state(meta) == "released"
        assert s.counts.started() == 0
    finally:
        if restarted is not None:
            restarted.stop()
        s.close()


@pytest.mark.parametrize("kind", ["stdio", "http-sse"])
def test_a_cancelled_call_is_forwarded_and_its_claim_runs_out(env, kind, request):
    """The SDK's server aborts a cancelled call and never answers it: nothing proves the
    charge did not happen, so the key must end unknown, never released."""
    s = mcp.Stack(env, kind, *LEASE)
    request.addfinalizer(s.close)
    meta = mcp.keys()
    go = env.tmp / ("go-cancel-%s" % kind)
    client = mcp.ClientProc({"transport": s.transport(), "steps": [
        call("charge", order("o-cancel", sleep_ms=1500), meta, cancel_after_ms=300),
        {"op": "wait_file", "path": str(go)}]})
    try:
        cancelled = client.wait_line(lambda line: line.get("op") == "call")
        assert cancelled["ok"] is False, cancelled
        s.counts.wait_for("cancelled", meta=meta, timeout=5)  # forwarded to the server
        assert env.state(meta) == "in_progress"  # and not released
        s.counts.wait_for("executed", meta=meta, timeout=5)
        env.wait_state(meta, "unknown", timeout=10)
    finally:
        go.touch()
        client.finish()
    retry = s.run([call("charge", order("o-cancel", sleep_ms=1500), meta)]).calls()[0]
    mcp.assert_proxy_error(retry, mcp.OUTCOME_UNKNOWN, "outcome_unknown", meta)
    assert s.counts.started(meta=meta) == 1


@pytest.mark.parametrize("kind", ["stdio", "http-sse"])
def test_a_cancelled_call_the_server_still_answers_is_recorded(env, kind, request):
    s = mcp.Stack(env, kind, *LEASE, extra_env={"MCP_TEST_IGNORE_CANCEL": "1"})
    request.addfinalizer(s.close)
    meta = mcp.keys()
    go = env.tmp / ("go-cancel-answered-%s" % kind)
    args = order("o-cancel-2", sleep_ms=600)
    client = mcp.ClientProc({"transport": s.transport(), "steps": [
        call("charge", args, meta, cancel_after_ms=200), {"op": "wait_file", "path": str(go)}]})
    try:
        client.wait_line(lambda line: line.get("op") == "call")
        s.counts.wait_for("cancelled", timeout=5)
        s.counts.wait_for("answered", meta=meta, timeout=5)
        env.wait_state(meta, "succeeded", timeout=5)
    finally:
        go.touch()
        client.finish()
    (answered,) = s.counts.answered(meta=meta)
    replay = s.run([call("charge", args, meta)]).calls()[0]
    assert replay["ok"] and replay["raw"]["result"] == mcp.with_replayed(answered), replay
    assert s.counts.started(meta=meta) == 1
