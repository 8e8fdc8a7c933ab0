"""ledger-mcp SIGKILLed between forwarding a call and recording its answer.

The call reached the server (its "started" marker is in the count file) and
the tool is still running when the proxy dies; a new proxy on the same
ledgerd takes the retry. Whatever the retry gets (a replay, a wait and then
a replay, -32010 in_progress or -32011 outcome_unknown), the server never
runs the call a second time. Leases are 1 s, so the dead proxy's claim
runs out quickly.
"""

import os
import signal

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402

FLAGS = ("--lease-ms", "1000", "--wait-ms", "4000")
SLEEP_MS = 2500


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_proxy_crash"))


def never_ran_twice(line, first_answer):
    """The retry's answer is one the spec allows after a crash, never a new execution."""
    if line["ok"]:
        assert mcp.is_replay(line["raw"]["result"]), line
        if first_answer is not None:
            assert line["raw"]["result"] == mcp.with_replayed(first_answer), line
    else:
        assert line["error"]["code"] in (mcp.IN_PROGRESS, mcp.OUTCOME_UNKNOWN), line
        assert line["error"]["data"]["server_called"] is False, line


def check_retries(env, s, meta, args, transport):
    """Retries now, while the dead proxy's claim may still run, and after the tool ended."""
    first = mcp.run_client({"transport": transport(), "steps": [call("charge", args, meta)]})
    never_ran_twice(first.calls()[0], None)
    s.counts.wait_for("executed", meta=meta, timeout=10)  # the orphaned call ended
    answered = s.counts.answered(meta=meta)
    later = mcp.run_client({"transport": transport(), "steps": [call("charge", args, meta)]})
    never_ran_twice(later.calls()[0], answered[0] if answered else None)
    assert s.counts.started(meta=meta) == 1, s.counts.path.read_text()
    assert s.counts.executed(meta=meta) == 1
    assert env.state(meta) in ("in_progress", "unknown", "succeeded")


def test_http_proxy_killed_mid_call(env):
    s = mcp.Stack(env, "http-sse", *FLAGS)
    second = None
    try:
        meta = mcp.keys()
        args = {"order": "o-crash", "cents": 990, "sleep_ms": SLEEP_MS}
        client = mcp.ClientProc({"transport": s.transport(), "timeout_ms": 15000,
                                 "steps": [call("charge", args, meta)]})
        try:
            s.counts.wait_for("started", meta=meta, timeout=15)
            s.proxy.kill()
        finally:
            client.kill()
        assert env.state(meta) == "in_progress"  # the claim outlives its holder for a lease
        second = env.http_proxy(s.server.url, *FLAGS)
        check_retries(env, s, meta, args, lambda: {"type": "http", "url": second.url})
    finally:
        if second is not None:
            assert second.stop() == 0
        s.close()


def test_stdio_proxy_killed_mid_call(env):
    s = mcp.Stack(env, "stdio", *FLAGS)
    meta = mcp.keys()
    args = {"order": "o-crash-stdio", "cents": 991, "sleep_ms": SLEEP_MS}
    client = mcp.ClientProc({"transport": s.transport(), "timeout_ms": 15000,
                             "steps": [call("charge", args, meta)]})
    try:
        connected = client.wait_line(lambda line: line.get("op") == "connect")
        s.counts.wait_for("started", meta=meta, timeout=15)
        # The client's child is ledger-mcp itself; its server lives on, orphaned.
        os.kill(connected["pid"], signal.SIGKILL)
        lost = client.wait_line(lambda line: line.get("op") == "call")
        assert lost["ok"] is False, lost
    finally:
        client.kill()
    assert env.state(meta) == "in_progress"
    check_retries(env, s, meta, args, s.transport)
