"""ledgerd cannot be reached: a keyed tools/call answers -32016
ledger_unavailable once the C SDK's retry window is spent, and the server is
never called (nothing may run that could not be recorded). Calls without
keys, and every other message, still pass.

The proxy's ledger URL is a loopback port nothing listens on; a claim is
re-sent for --ledger-retry-ms (1 s here, 10 s by default).
"""

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from conftest import free_port  # noqa: E402
from mcp_helpers import call  # noqa: E402


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_ledger_down"))


def test_ledgerd_unreachable_answers_ledger_unavailable(env):
    counts = env.counts()
    closed = "http://127.0.0.1:%d" % free_port()
    meta = mcp.keys()
    transport = env.stdio(counts, "--ledger-retry-ms", "1000", ledger_url=closed)
    run = mcp.run_client({"transport": transport, "timeout_ms": 60000, "steps": [
        {"op": "list_tools"},
        call("charge", {"order": "o-down", "cents": 1}),
        call("charge", {"order": "o-down", "cents": 1}, meta)]})
    listed, unkeyed, keyed = run.steps
    assert listed["ok"] and unkeyed["ok"], run
    data = mcp.assert_proxy_error(keyed, mcp.LEDGER_UNAVAILABLE, "ledger_unavailable", meta)
    assert "ledgerd" not in data or data["ledgerd"] is None, data
    assert 1000 <= keyed["ms"] < 20000, keyed  # retried for its window, then given up
    assert counts.started(meta=meta) == 0
    assert counts.started() == 1  # the call without keys
