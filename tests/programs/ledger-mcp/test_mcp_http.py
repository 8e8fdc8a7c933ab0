"""ledger-mcp http as an HTTP proxy, spoken to with raw requests: any method
and path reaches the upstream with its query, headers but the hop-by-hop
ones, and body; only a POSTed tools/call on the upstream's own path is
intercepted; a batch holding one is refused by the proxy itself.
"""

import http.client
import json
import urllib.parse

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_http"))


@pytest.fixture(scope="module")
def stack(env):
    counts = env.counts()
    bodies = env.tmp / "bodies.jsonl"
    server = env.http_server(counts, json_answers=True,
                             extra_env={"MCP_TEST_BODIES_FILE": str(bodies)})
    proxy = env.http_proxy(server.url)
    yield server, proxy, counts, bodies
    assert proxy.stop() == 0
    server.stop()


def send(url, method, path, body=None, headers=None):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        conn.close()


def received(bodies):
    return [e for e in map(json.loads, bodies.read_text().splitlines()) if e["dir"] == "request"]


def session(url):
    status, headers, _ = send(url, "POST", "/mcp", json.dumps(INIT), ACCEPT)
    assert status == 200, (status, headers)
    return headers["mcp-session-id"]


def test_any_path_and_query_reaches_the_upstream(stack):
    server, proxy, _, bodies = stack
    direct = send(server.url, "GET", "/elsewhere/x?q=1&r=%20")
    via = send(proxy.url, "GET", "/elsewhere/x?q=1&r=%20")
    assert via[0] == direct[0] == 404
    assert via[2] == direct[2]
    assert via[1]["content-type"] == direct[1]["content-type"]
    urls = [e["url"] for e in received(bodies) if e["method"] == "GET"]
    assert urls[-2:] == ["/elsewhere/x?q=1&r=%20"] * 2


def test_headers_cross_but_hop_by_hop_ones(stack):
    server, proxy, _, bodies = stack
    headers = dict(ACCEPT, **{"X-Test": "kept as it is", "TE": "trailers",
                              "Keep-Alive": "timeout=5", "Proxy-Authorization": "Basic eDp5"})
    status, answer, _ = send(proxy.url, "POST", "/mcp", json.dumps(INIT), headers)
    assert status == 200
    got = received(bodies)[-1]["headers"]
    assert got["x-test"] == "kept as it is"
    for hop in ("te", "keep-alive", "proxy-authorization"):
        assert hop not in got, got
    assert got["host"] == "127.0.0.1:%d" % server.port  # set anew, for the upstream
    assert answer["x-test-reply"].startswith("seq-"), answer  # and back
    assert answer.get("mcp-session-id"), answer


def test_a_body_that_is_not_json_passes_through(stack):
    server, proxy, _, bodies = stack
    direct = send(server.url, "POST", "/mcp", "{not json", ACCEPT)
    via = send(proxy.url, "POST", "/mcp", "{not json", ACCEPT)
    assert via[0] == direct[0] == 400
    assert via[2] == direct[2]
    assert received(bodies)[-1]["body"] == "{not json"


def test_a_tools_call_to_another_path_is_not_intercepted(env, stack):
    server, proxy, counts, bodies = stack
    meta = mcp.keys()
    body = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                       "params": {"name": "charge", "arguments": {"order": "o", "cents": 1},
                                  "_meta": meta}})
    status, _, text = send(proxy.url, "POST", "/other", body, ACCEPT)
    assert status == 404, text  # the server's answer for a path it does not serve
    assert received(bodies)[-1]["url"] == "/other"
    assert received(bodies)[-1]["body"] == body
    assert env.state(meta) is None


def test_a_batch_holding_a_tools_call_is_refused_by_the_proxy(env, stack):
    server, proxy, counts, bodies = stack
    sid = session(proxy.url)
    meta = mcp.keys()
    before = len(received(bodies))
    batch = json.dumps([{"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                         "params": {"name": "charge", "arguments": {"order": "o", "cents": 1},
                                    "_meta": meta}},
                        {"jsonrpc": "2.0", "id": 7, "method": "ping"}])
    status, headers, text = send(proxy.url, "POST", "/mcp", batch,
                                 dict(ACCEPT, **{"Mcp-Session-Id": sid,
                                                 "MCP-Protocol-Version": "2025-06-18"}))
    assert status == 200, text
    assert headers["content-type"].startswith("application/json")
    answer = json.loads(text)
    assert answer["id"] is None and answer["error"]["code"] == mcp.BATCH, answer
    assert answer["error"]["data"]["code"] == "batch_with_tool_call"
    assert len(received(bodies)) == before  # never forwarded
    assert counts.started() == 0 and env.state(meta) is None


def test_a_keyed_call_answered_by_the_proxy_is_200_json(env, stack):
    """A refusal (here args_mismatch) is the proxy's own answer: 200, application/json."""
    server, proxy, counts, _ = stack
    sid = session(proxy.url)
    meta = mcp.keys()
    h = dict(ACCEPT, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"})
    send(proxy.url, "POST", "/mcp", json.dumps({"jsonrpc": "2.0",
                                                "method": "notifications/initialized"}), h)

    def tool_call(i, cents):
        return json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                           "params": {"name": "charge", "arguments": {"order": "o", "cents": cents},
                                      "_meta": meta}})

    first = send(proxy.url, "POST", "/mcp", tool_call(1, 1), h)
    assert first[0] == 200 and "result" in json.loads(first[2]), first
    refused = send(proxy.url, "POST", "/mcp", tool_call(2, 2), h)
    assert refused[0] == 200 and refused[1]["content-type"].startswith("application/json")
    assert json.loads(refused[2])["error"]["code"] == mcp.ARGS_MISMATCH, refused
    replay = send(proxy.url, "POST", "/mcp", tool_call("three", 1), h)
    assert replay[0] == 200 and replay[1]["content-type"].startswith("application/json")
    assert json.loads(replay[2]) == {"jsonrpc": "2.0", "id": "three",
                                     "result": mcp.with_replayed(json.loads(first[2])["result"])}
    assert counts.started(meta=meta) == 1
