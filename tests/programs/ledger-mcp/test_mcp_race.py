"""Sixteen clients race one key through two ledger-mcp http processes in front
of one server: the tool runs once, and every client gets its answer.

The clients connect first and then all call at once; the tool sleeps, so
every later call arrives while the first one runs: those wait (--wait-ms)
and get the replay. The proxies share nothing but ledgerd.
"""

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402

CLIENTS = 16


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_race"))


@pytest.mark.parametrize("json_answers", [False, True], ids=["sse", "json"])
def test_sixteen_clients_two_proxies_one_execution(env, json_answers):
    counts = env.counts()
    server = env.http_server(counts, json_answers=json_answers)
    proxies = []
    try:
        proxies = [env.http_proxy(server.url, "--wait-ms", "20000") for _ in range(2)]
        meta = mcp.keys()
        args = {"order": "o-race", "cents": 4200, "sleep_ms": 1500}
        # Client i connects through proxy i % 2: eight through each.
        run = mcp.run_client({"transport": {"type": "http", "urls": [p.url for p in proxies]},
                              "clients": CLIENTS, "timeout_ms": 30000,
                              "steps": [call("charge", args, meta)]})
        calls = run.calls()
        assert len(calls) == CLIENTS, run
        assert all(c["ok"] for c in calls), run
        results = [c["raw"]["result"] for c in calls]
        firsts = [r for r in results if not mcp.is_replay(r)]
        assert len(firsts) == 1, results  # one execution answered; the rest are replays
        (first,) = firsts
        assert all(r == mcp.with_replayed(first) for r in results if r is not first), results
        assert counts.started(meta=meta) == 1
        assert counts.executed(meta=meta) == 1
        assert counts.answered(meta=meta) == [first]
    finally:
        for p in proxies:
            assert p.stop() == 0
        server.stop()


def test_four_stdio_proxies_one_execution(env):
    """Each stdio client starts its own proxy and its own server: four servers could
    each run the call, and only one does; the others wait and replay it."""
    counts = env.counts()
    meta = mcp.keys()
    args = {"order": "o-race-stdio", "cents": 4300, "sleep_ms": 1000}
    run = mcp.run_client({"transport": env.stdio(counts, "--wait-ms", "20000"), "clients": 4,
                          "timeout_ms": 30000, "steps": [call("charge", args, meta)]})
    calls = run.calls()
    assert len(calls) == 4 and all(c["ok"] for c in calls), run
    results = [c["raw"]["result"] for c in calls]
    (first,) = [r for r in results if not mcp.is_replay(r)]
    assert all(r == mcp.with_replayed(first) for r in results if r is not first), results
    assert counts.started(meta=meta) == 1
    assert len({e["pid"] for e in counts.events("started")}) == 1
