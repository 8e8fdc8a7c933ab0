"""A keyed tools/call runs once and every retry gets its answer back: over
stdio and over Streamable HTTP with JSON and with SSE answers.

The first call is forwarded and its answer passed on unchanged, after it was
recorded in ledgerd (succeeded, or failed for an isError result); every
retry with the same key, in the same session or a new one, gets that answer
with "io.ledgerd/replayed": true in its _meta and never reaches the server.
Each intercepted call is a tool call of its request in ledgerd, with the
tool's name and the proxy's owner.
"""

import json

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_replay"))


@pytest.fixture(params=mcp.Stack.KINDS)
def stack(env, request):
    s = mcp.Stack(env, request.param)
    yield s
    s.close()


def charge(order="o-1", cents=500, **more):
    return dict({"order": order, "cents": cents}, **more)


def test_a_retried_call_executes_once(stack):
    meta = mcp.keys()
    run = stack.run([{"op": "list_tools"}, call("charge", charge(), meta, repeat=3)])
    first, *retries = run.calls()
    assert first["ok"], run
    assert not mcp.is_replay(first["result"])
    assert first["result"]["content"][0]["text"].startswith("charged 500 cents for o-1")
    for retry in retries:
        assert retry["ok"], run
        assert retry["raw"]["result"] == mcp.with_replayed(first["raw"]["result"]), run
        assert retry["raw"]["id"] == retry["id"]
    assert stack.counts.executed(meta=meta) == 1
    assert stack.counts.started(meta=meta) == 1
    # What the client got first is what the server answered, unchanged.
    assert stack.counts.answered(meta=meta) == [first["raw"]["result"]]
    # A new session (a failed-over agent's) gets the same answer, and the server
    # is still not called.
    again = stack.run([call("charge", charge(), meta)]).calls()[0]
    assert again["ok"], again
    assert again["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
    assert stack.counts.started(meta=meta) == 1


def test_the_answer_is_recorded_before_it_is_given(stack):
    """Once the client has the answer, ledgerd has it: stored byte for byte."""
    meta = mcp.keys()
    first = stack.run([call("charge", charge("o-rec", 7), meta)]).calls()[0]
    assert first["ok"], first
    r = stack.env.tool_call(meta)
    assert r.status == 200, r
    assert r.json["state"] == "succeeded"
    assert r.json["outcome"] == "succeeded"
    assert r.json["tool"] == "charge"
    assert r.json["result"] == first["raw"]["result"]


def test_a_failed_result_is_recorded_failed_and_replayed_as_failed(stack):
    meta = mcp.keys()
    run = stack.run([call("charge", charge("o-declined", fail=True), meta, repeat=2)])
    first, second = run.calls()
    assert first["ok"] and second["ok"], run
    assert first["raw"]["result"]["isError"] is True
    assert first["raw"]["result"]["content"][0]["text"] == "card declined for o-declined"
    assert second["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
    assert second["raw"]["result"]["isError"] is True
    r = stack.env.tool_call(meta)
    assert (r.json["state"], r.json["outcome"]) == ("failed", "failed"), r
    assert stack.counts.executed(meta=meta) == 1


def test_a_result_with_its_own_meta_keeps_it_in_the_replay(stack):
    meta = mcp.keys()
    run = stack.run([call("sync", {"what": "ledger"}, meta, repeat=2)])
    first, second = run.calls()
    assert first["ok"] and second["ok"], run
    assert set(first["raw"]["result"]["_meta"]) == {"test/sync_id"}
    assert second["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
    assert second["raw"]["result"]["_meta"]["test/sync_id"] == \
        first["raw"]["result"]["_meta"]["test/sync_id"]
    assert stack.counts.executed(meta=meta) == 1


def test_calls_of_one_request_are_separate_keys(stack):
    rid = mcp.new_id("r")
    a, b = mcp.keys(rid, "call_01"), mcp.keys(rid, "call_02")
    run = stack.run([call("charge", charge("o-a"), a), call("charge", charge("o-a"), b),
                     call("charge", charge("o-a"), a)])
    one, two, again = run.calls()
    assert one["ok"] and two["ok"] and again["ok"], run
    assert not mcp.is_replay(two["result"])
    assert two["result"] != one["result"]  # a second charge: its own charge id
    assert again["raw"]["result"] == mcp.with_replayed(one["raw"]["result"])
    assert stack.counts.executed(meta=a) == 1 and stack.counts.executed(meta=b) == 1


def test_progress_of_a_claimed_call_streams_before_its_answer(env):
    """Over SSE the server's events of an intercepted call reach the client as they
    come, before the response event; a replay answers at once, without them."""
    s = mcp.Stack(env, "http-sse")
    try:
        meta = mcp.keys()
        run = s.run([call("charge", charge("o-progress", behave="progress"), meta, progress=True,
                          repeat=2)])
        first, second = run.calls()
        assert first["ok"] and second["ok"], run
        progress = [n for n in first["notifications"] if "progress" in n]
        assert [n["progress"]["progress"] for n in progress] == [1, 2], first
        logs = [n for n in first["notifications"]
                if n.get("message", {}).get("method") == "notifications/message"]
        assert len(logs) == 2, first
        # The server sleeps 150 ms after each step: the first event came well
        # before the answer, so the proxy did not hold the stream back.
        assert first["ms"] - progress[0]["at_ms"] >= 200, first
        assert second["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
        assert second["notifications"] == []
        assert s.counts.executed(meta=meta) == 1
    finally:
        s.close()


@pytest.mark.parametrize("kind", ["http-json", "http-sse"])
def test_a_client_gone_mid_call_does_not_cancel_it(env, kind):
    """The HTTP client goes away while the tool runs: the proxy still records the
    server's answer, and the client's retry gets it."""
    s = mcp.Stack(env, kind)
    try:
        meta = mcp.keys()
        args = charge("o-gone", sleep_ms=800)
        client = mcp.ClientProc({"transport": s.transport(), "steps": [call("charge", args, meta)]})
        try:
            s.counts.wait_for("started", meta=meta)
        finally:
            client.kill()
        s.counts.wait_for("answered", meta=meta, timeout=10)
        env.wait_state(meta, "succeeded", timeout=10)
        (answered,) = s.counts.answered(meta=meta)
        retry = s.run([call("charge", args, meta)]).calls()[0]
        assert retry["ok"] and retry["raw"]["result"] == mcp.with_replayed(answered), retry
        assert s.counts.started(meta=meta) == 1
    finally:
        s.close()


def test_each_intercepted_call_shows_in_ledgerctl_show(env):
    rid = mcp.new_id("r")
    s = mcp.Stack(env, "stdio", "--owner", "billing-agent@pod-7")
    run = s.run([call("charge", charge("o-show"), mcp.keys(rid, "call_01")),
                 call("sync", {"what": "o-show"}, mcp.keys(rid, "call_02")),
                 call("charge", charge("o-show"), mcp.keys(rid, "call_01"))])
    assert all(c["ok"] for c in run.calls()), run
    shown = env.ctl("show", rid)
    assert shown.returncode == 0, shown
    lines = shown.stdout.splitlines()
    assert any("call_01" in line and "charge" in line for line in lines), shown.stdout
    assert any("call_02" in line and "sync" in line for line in lines), shown.stdout
    # The holder named in review is --owner.
    doc = json.loads(env.ctl("--json", "show", rid).stdout)
    calls = {c["tool_call_id"]: c for c in doc["tool_calls"]}
    assert (calls["call_01"]["tool"], calls["call_01"]["state"]) == ("charge", "succeeded")
    assert (calls["call_02"]["tool"], calls["call_02"]["state"]) == ("sync", "succeeded")
    claims = [e for e in doc["events"] if e["type"] == "claimed"]
    assert len(claims) == 2, doc["events"]
    assert {e["detail"]["owner"] for e in claims} == {"billing-agent@pod-7"}


def test_the_default_owner_is_ledger_mcp_at_the_host(env):
    meta = mcp.keys()
    s = mcp.Stack(env, "stdio")
    assert s.run([call("charge", charge("o-owner"), meta)]).calls()[0]["ok"]
    doc = env.led.get("/v1/requests/%s" % mcp.rid_of(meta), token=env.router).json
    (claim,) = [e for e in doc["events"] if e["type"] == "claimed"]
    assert claim["detail"]["owner"].startswith("ledger-mcp@"), claim


@pytest.mark.parametrize("store", [False, True])
def test_arguments_reach_ledgerd_only_with_store_args(env, store):
    meta = mcp.keys()
    args = charge("o-args", 901)
    s = mcp.Stack(env, "stdio", *(["--store-args"] if store else []))
    assert s.run([call("charge", args, meta)]).calls()[0]["ok"]
    r = env.tool_call(meta)
    assert r.status == 200, r
    assert r.json.get("args") == (args if store else None), r.json
