"""Everything but an intercepted tools/call passes ledger-mcp byte for byte.

stdio: a tap between the client and the proxy and one between the proxy
and the server record every line both ways; with the tools/call requests
and their answers taken out, the two recordings are equal, and the
forwarded tools/call lines and their answers are equal too. http: what the
SDK client sent and received (its fetch records it) against what the server
received and sent. A hand-written server with unusual bytes (raw_server.py)
shows that a recorded and replayed result keeps its exact text.
"""

import json
import subprocess
import sys

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402

RAW_SERVER = mcp.HERE / "raw_server.py"


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_passthrough"))


def session_steps(meta):
    """A session touching every kind of message, with one claimed call and its replay."""
    return [
        {"op": "list_tools"}, {"op": "ping"}, {"op": "list_resources"},
        {"op": "read_resource", "uri": "test://greeting"}, {"op": "list_prompts"},
        {"op": "get_prompt", "name": "hello", "arguments": {"who": "Ana"}},
        call("charge", {"order": "o-pass", "cents": 1, "behave": "progress"}, progress=True),
        call("charge", {"order": "o-keyed", "cents": 2, "behave": "progress+ping_client"}, meta,
             progress=True),
        call("charge", {"order": "o-keyed", "cents": 2, "behave": "progress+ping_client"}, meta,
             progress=True),
        {"op": "ping"},
    ]


def parsed(lines):
    return [json.loads(line) for line in lines]


def tool_call_ids(lines):
    return {m["id"] for m in parsed(lines)
            if isinstance(m, dict) and m.get("method") == "tools/call"}


def without(lines, ids, answers):
    """@lines without the tools/call requests (answers=False) or their answers."""
    keep = []
    for line, m in zip(lines, parsed(lines)):
        if answers and "method" not in m and m.get("id") in ids:
            continue
        if not answers and m.get("method") == "tools/call":
            continue
        keep.append(line)
    return keep


def test_stdio_every_other_line_passes_byte_for_byte(env):
    counts = env.counts()
    client_log, server_log = env.tmp / "tap-client.jsonl", env.tmp / "tap-server.jsonl"
    meta = mcp.keys()
    run = mcp.run_client({"transport": env.tapped_stdio(counts, client_log, server_log),
                          "steps": session_steps(meta)})
    assert all(s["ok"] for s in run.steps), run
    keyed, replay = run.calls()[1:]
    assert replay["raw"]["result"] == mcp.with_replayed(keyed["raw"]["result"])
    assert counts.executed(meta=meta) == 1
    # The server's ping to the client, and the client's answer, crossed the proxy.
    to_client, from_client = mcp.tap_lines(client_log, "out"), mcp.tap_lines(client_log, "in")
    to_server, from_server = mcp.tap_lines(server_log, "in"), mcp.tap_lines(server_log, "out")
    assert any(m.get("method") == "ping" and "id" in m for m in parsed(from_server))

    # Every line on the proxy's stdout is a JSON-RPC message: no log went there.
    for m in parsed(to_client):
        assert isinstance(m, dict) and m.get("jsonrpc") == "2.0", m

    ids = tool_call_ids(from_client)
    assert len(ids) == 3
    assert without(from_client, ids, answers=False) == without(to_server, ids, answers=False)
    assert without(from_server, ids, answers=True) == without(to_client, ids, answers=True)

    # The tools/call lines the server got are the client's, byte for byte (keys and
    # all), and their answers reached the client unchanged; the replayed one never
    # reached the server.
    calls_in = [line for line in from_client if json.loads(line).get("method") == "tools/call"]
    calls_out = [line for line in to_server if json.loads(line).get("method") == "tools/call"]
    assert calls_out == calls_in[:2]
    answers = {json.loads(line)["id"]: line for line in from_server
               if "method" not in json.loads(line) and json.loads(line).get("id") in ids}
    delivered = {json.loads(line)["id"]: line for line in to_client
                 if "method" not in json.loads(line) and json.loads(line).get("id") in ids}
    assert len(answers) == 2 and len(delivered) == 3
    for i, line in answers.items():
        assert delivered[i] == line


def http_records(path):
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    requests = {e["seq"]: e for e in entries if e["dir"] == "request"}
    responses = {e["seq"]: e for e in entries if e["dir"] == "response"}
    return [(requests[s], responses.get(s)) for s in sorted(requests)]


def is_tool_call(request):
    if not request["body"]:
        return False
    return json.loads(request["body"]).get("method") == "tools/call"


@pytest.mark.parametrize("json_answers", [False, True], ids=["sse", "json"])
def test_http_every_other_body_passes_byte_for_byte(env, json_answers):
    counts = env.counts()
    bodies = env.tmp / ("bodies-%s.jsonl" % json_answers)
    record = env.tmp / ("record-%s.jsonl" % json_answers)
    server = env.http_server(counts, json_answers=json_answers,
                             extra_env={"MCP_TEST_BODIES_FILE": str(bodies)})
    proxy = env.http_proxy(server.url)
    try:
        meta = mcp.keys()
        steps = session_steps(meta)
        if json_answers:  # a JSON answer carries no server-to-client request
            steps = [dict(s, arguments=dict(s["arguments"], behave="progress"))
                     if s.get("name") == "charge" and "meta" in s else s for s in steps]
        run = mcp.run_client({"transport": {"type": "http", "url": proxy.url,
                                            "record": str(record)},
                              "steps": steps + [{"op": "terminate"}]})
        assert all(s["ok"] for s in run.steps), run
        keyed, replay = run.calls()[1:]
        assert replay["raw"]["result"] == mcp.with_replayed(keyed["raw"]["result"])
        assert counts.executed(meta=meta) == 1
    finally:
        assert proxy.stop() == 0
        server.stop()

    sent = http_records(record)      # (request, response) as the client saw them
    received = http_records(bodies)  # as the server saw them
    # The standalone GET stream is opened beside the POSTs: compare it apart.
    assert [r["headers"].get("mcp-session-id") for r, _ in sent if r["method"] == "GET"] == \
        [r["headers"].get("mcp-session-id") for r, _ in received if r["method"] == "GET"]
    sent = [(q, a) for q, a in sent if q["method"] != "GET" and not is_tool_call(q)]
    received = [(q, a) for q, a in received if q["method"] != "GET" and not is_tool_call(q)]
    assert [q["method"] for q, _ in sent] == [q["method"] for q, _ in received]
    for (q_c, a_c), (q_s, a_s) in zip(sent, received):
        assert (q_c["body"] or "") == (q_s["body"] or ""), (q_c, q_s)
        for h in ("mcp-session-id", "mcp-protocol-version", "content-type"):
            assert q_c["headers"].get(h) == q_s["headers"].get(h), (h, q_c, q_s)
        assert a_c is not None and a_s is not None, (q_c, a_c, a_s)
        assert a_c["status"] == a_s["status"], (a_c, a_s)
        assert a_c["body"] == a_s["body"], (a_c, a_s)
        for h in ("mcp-session-id", "content-type"):
            assert a_c["headers"].get(h) == a_s["headers"].get(h), (h, a_c, a_s)

    # The forwarded tools/call bodies are the client's, byte for byte; so are their
    # answers (the replay never reached the server).
    calls_c = [(q, a) for q, a in http_records(record) if is_tool_call(q)]
    calls_s = [(q, a) for q, a in http_records(bodies) if is_tool_call(q)]
    assert len(calls_c) == 3 and len(calls_s) == 2
    for (q_c, a_c), (q_s, a_s) in zip(calls_c, calls_s):
        assert q_c["body"] == q_s["body"]
        assert a_c["body"] == a_s["body"]
        assert a_c["headers"].get("content-type") == a_s["headers"].get("content-type")
        assert a_c["headers"].get("mcp-session-id") == a_s["headers"].get("mcp-session-id")
    replay_answer = calls_c[2][1]
    assert replay_answer["status"] == 200
    assert replay_answer["headers"]["content-type"].startswith("application/json")


class RawSession:
    """ledger-mcp stdio in front of raw_server.py, spoken to line by line."""

    def __init__(self, env, server_log):
        argv = env.stdio_proxy_argv(server=[sys.executable, str(RAW_SERVER), str(server_log)])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env.proxy_env())

    def ask(self, text):
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().decode()

    def close(self):
        self.proc.stdin.close()
        return self.proc.wait(timeout=20)


def test_a_recorded_result_keeps_its_exact_bytes(env):
    server_log = env.tmp / "raw-server.jsonl"
    s = RawSession(env, server_log)
    try:
        s.ask('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
              '"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}')
        s.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        for variant in ("plain", "meta"):
            meta = mcp.keys()
            request = ('{"jsonrpc":"2.0","id":%%s,"method":"tools/call","params":{"name":"charge",'
                       '"arguments":{"variant":"%s"},"_meta":%s}}' % (variant, json.dumps(meta)))
            first = s.ask(request % "1")
            # Passed on unchanged: the server's line, byte for byte.
            written = mcp.tap_lines(server_log, "out")[-1].decode()
            assert first == written
            stored_text = mcp.member_text(first, "result")
            # ... and stored unchanged: ledgerd answers the result's text as sent.
            r = env.tool_call(meta)
            assert r.status == 200, r
            assert mcp.member_text(r.body, "result") == stored_text
            # The replay: the stored bytes, plus the marker in _meta.
            replay = s.ask(request % '"again-1"')
            assert mcp.member_text(replay, "id") == '"again-1"'
            assert json.loads(replay)["jsonrpc"] == "2.0"
            replayed_text = mcp.member_text(replay, "result")
            expected = json.loads(stored_text)
            assert json.loads(replayed_text) == mcp.with_replayed(expected)
            if variant == "plain":
                # "_meta" added at the start, the rest as it was.
                spans = mcp.members(replayed_text)
                assert list(spans)[0] == "_meta"
                rest = replayed_text[spans["_meta"][1]:].lstrip()
                assert rest.startswith(",")
                assert rest[1:].lstrip() == stored_text[1:].lstrip()
            else:
                # Outside _meta nothing moved; inside it, the old members keep their text.
                old, new = mcp.members(stored_text)["_meta"], mcp.members(replayed_text)["_meta"]
                assert replayed_text[:new[0]] == stored_text[:old[0]]
                assert replayed_text[new[1]:] == stored_text[old[1]:]
                meta_text = replayed_text[new[0]:new[1]]
                assert '"trace": "t-1"' in meta_text and '"n": 1.50' in meta_text
    finally:
        assert s.close() == 0
