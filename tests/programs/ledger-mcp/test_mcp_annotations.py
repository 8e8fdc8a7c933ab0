"""--trust-annotations: what the server said of its tools in tools/list.

With the flag, a tool listed with readOnlyHint: true is never claimed (it
runs every time, and ledgerd never hears of it), and one listed with
idempotentHint: true is claimed with tool_dedupes, so that a claim of it
that ran out runs again instead of becoming outcome_unknown. Without the
flag, or for a tool not listed yet, annotations change nothing.
"""

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402

LEASE = ("--lease-ms", "1000")


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_annotations"))


@pytest.fixture(params=["stdio", "http-json"])
def kind(request):
    return request.param


def test_trusted_read_only_tool_is_never_claimed(env, kind):
    s = mcp.Stack(env, kind, "--trust-annotations")
    try:
        meta = mcp.keys()
        run = s.run([{"op": "list_tools"},
                     call("read_balance", {"account": "acc-1"}, meta, repeat=2)])
        first, second = run.calls()
        assert first["ok"] and second["ok"], run
        assert not mcp.is_replay(first["result"]) and not mcp.is_replay(second["result"])
        assert first["result"] != second["result"]  # two reads
        assert s.counts.executed(tool="read_balance", meta=meta) == 2
        assert env.tool_call(meta).status == 404
    finally:
        s.close()


def test_trusted_idempotent_tool_is_claimed_with_tool_dedupes(env, kind):
    s = mcp.Stack(env, kind, "--trust-annotations")
    try:
        meta = mcp.keys()
        run = s.run([{"op": "list_tools"}, call("sync", {"what": "acc-1"}, meta, repeat=2)])
        first, second = run.calls()
        assert first["ok"] and second["ok"], run
        assert second["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
        assert s.counts.executed(tool="sync", meta=meta) == 1
        r = env.tool_call(meta)
        assert r.status == 200, r
        assert r.json["tool_dedupes"] is True, r.json
        assert r.json["state"] == "succeeded"
    finally:
        s.close()


def test_without_the_flag_annotations_change_nothing(env, kind):
    s = mcp.Stack(env, kind)
    try:
        read, sync = mcp.keys(), mcp.keys()
        run = s.run([{"op": "list_tools"},
                     call("read_balance", {"account": "acc-2"}, read, repeat=2),
                     call("sync", {"what": "acc-2"}, sync)])
        r1, r2, synced = run.calls()
        assert r1["ok"] and r2["ok"] and synced["ok"], run
        assert r2["raw"]["result"] == mcp.with_replayed(r1["raw"]["result"])
        assert s.counts.executed(tool="read_balance", meta=read) == 1
        for meta in (read, sync):
            r = env.tool_call(meta)
            assert r.status == 200, r
            assert r.json["tool_dedupes"] is False, r.json
    finally:
        s.close()


def test_a_tool_not_listed_yet_is_claimed(env):
    """The hints come from a tools/list answer: before one, nothing is trusted."""
    s = mcp.Stack(env, "stdio", "--trust-annotations")
    meta = mcp.keys()
    run = s.run([call("read_balance", {"account": "acc-3"}, meta, repeat=2)])
    first, second = run.calls()
    assert first["ok"] and second["ok"], run
    assert second["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
    assert s.counts.executed(tool="read_balance", meta=meta) == 1
    assert env.tool_call(meta).json["tool_dedupes"] is False


def test_a_lapsed_claim_of_a_deduping_tool_runs_again(env):
    """The server died mid-sync: the key is not left unknown; the retry runs it again."""
    behave = env.tmp / "behave-dedupe"
    behave.write_text("die")  # the same arguments die, then, once the file says so, run
    s = mcp.Stack(env, "stdio", "--trust-annotations", *LEASE,
                  extra_env={"MCP_TEST_BEHAVE_FILE": str(behave)})
    meta = mcp.keys()
    args = {"what": "acc-4"}
    died = s.run([{"op": "list_tools"}, call("sync", args, meta)]).calls()[0]
    mcp.assert_proxy_error(died, mcp.LEFT_UNKNOWN, "outcome_left_unknown", meta, server_called=True)
    behave.write_text("normal")
    # Past the lease the key is claimable again: the tool dedupes by itself.
    env.wait_state(meta, "unknown", timeout=10)
    again = s.run([{"op": "list_tools"}, call("sync", args, meta, repeat=2)])
    ran, replay = again.calls()
    assert ran["ok"] and not mcp.is_replay(ran["result"]), again
    assert replay["raw"]["result"] == mcp.with_replayed(ran["raw"]["result"]), again
    assert s.counts.started(tool="sync", meta=meta) == 2
    assert env.state(meta) == "succeeded"


def test_a_lapsed_claim_of_an_ordinary_tool_stays_unknown(env):
    s = mcp.Stack(env, "stdio", *LEASE)
    meta = mcp.keys()
    args = {"what": "acc-5", "behave": "die"}
    died = s.run([{"op": "list_tools"}, call("sync", args, meta)]).calls()[0]
    mcp.assert_proxy_error(died, mcp.LEFT_UNKNOWN, "outcome_left_unknown", meta, server_called=True)
    env.wait_state(meta, "unknown", timeout=10)
    retry = s.run([{"op": "list_tools"}, call("sync", args, meta)]).calls()[0]
    mcp.assert_proxy_error(retry, mcp.OUTCOME_UNKNOWN, "outcome_unknown", meta)
    assert s.counts.started(tool="sync", meta=meta) == 1
