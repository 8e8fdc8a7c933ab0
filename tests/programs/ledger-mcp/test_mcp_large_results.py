"""A keyed tools/call whose answer is larger than ledgerd keeps: over stdio and
over Streamable HTTP with JSON and with SSE answers.

The server answers 2 MiB. The client gets that answer whole; ledger-mcp
records the completion as a result not kept, the length and SHA-256 of the
exact bytes of the server's "result"; nothing is left in_progress, nothing
turns outcome_unknown. A retry of the key, in any session, gets ledger-mcp's
error -32022 result_not_kept with the stored outcome and digest, and never
reaches the server.
"""

import hashlib
import json
import time

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402

MIB = 1 << 20


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_large_results"))


class Tapped:
    """The test server behind ledger-mcp, with the exact bytes of every answer
    the server sent: tap.py's log over stdio (and of what the client got),
    server.mjs's bodies file over HTTP."""

    def __init__(self, env, kind, *flags):
        self.env, self.kind, self.flags = env, kind, [str(f) for f in flags]
        self.counts = env.counts()
        tag = "%s-%s" % (kind, self.counts.path.stem)
        self.server_log = env.tmp / ("server-%s.jsonl" % tag)
        self.client_log = env.tmp / ("client-%s.jsonl" % tag)
        self.server = self.proxy = None
        if kind != "stdio":
            self.server = env.http_server(self.counts, json_answers=kind == "http-json",
                                          extra_env={"MCP_TEST_BODIES_FILE":
                                                     str(self.server_log)})
            self.proxy = env.http_proxy(self.server.url, *self.flags)

    def run(self, steps):
        if self.kind == "stdio":
            transport = self.env.tapped_stdio(self.counts, self.client_log, self.server_log,
                                              *self.flags)
        else:
            transport = {"type": "http", "url": self.proxy.url}
        return mcp.run_client({"transport": transport, "steps": steps})

    def server_answer(self, text_start, timeout=15):
        """The server's one answer whose result's text starts with @text_start, as
        (parsed, exact text). Over HTTP the server writes its record once the
        response has ended, which may be after the client has read it: wait."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.kind == "stdio":
                    lines = mcp.tap_lines(self.server_log, "out")
                else:
                    lines = http_messages(self.server_log)
                return the_answer(answers_among(lines), text_start)
            except (AssertionError, ValueError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def client_answer(self, text_start):
        """stdio: the answer the client got, as (parsed, exact text)."""
        assert self.kind == "stdio"
        return the_answer(answers_among(mcp.tap_lines(self.client_log, "out")), text_start)

    def close(self):
        for p in (self.proxy, self.server):
            if p is not None:
                p.stop()


def http_messages(path):
    """The messages of every POST's response body in server.mjs's bodies file: a JSON
    body, or the data line of each event of an SSE stream."""
    lines = []
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if e["dir"] != "response" or e["method"] != "POST" or not e.get("body"):
            continue
        body = e["body"]
        if body.startswith("{"):
            lines.append(body.encode())
        else:
            lines += [d[len("data: "):].encode() for d in body.split("\n")
                      if d.startswith("data: ")]
    return lines


def answers_among(lines):
    """The JSON-RPC responses among @lines (bytes), as (parsed, exact text)."""
    out = []
    for line in lines:
        text = line.decode()
        m = json.loads(text)
        if isinstance(m, dict) and "method" not in m and ("result" in m or "error" in m):
            out.append((m, text))
    return out


@pytest.fixture(params=mcp.Stack.KINDS)
def tapped(env, request):
    t = Tapped(env, request.param)
    yield t
    t.close()


def export(report, nbytes):
    return {"report": report, "bytes": nbytes}


def the_answer(answers, text_start):
    """The one answer whose result's text starts with @text_start: (parsed, exact text)."""
    found = [(m, t) for m, t in answers if "result" in m
             and m["result"].get("content", [{}])[0].get("text", "").startswith(text_start)]
    assert len(found) == 1, [t[:200] for _, t in answers]
    return found[0]


def digest_of(answer_text):
    """The length and SHA-256 of the exact bytes of @answer_text's "result"."""
    exact = mcp.member_text(answer_text, "result").encode()
    return len(exact), hashlib.sha256(exact).hexdigest()


def assert_not_kept(env, meta, nbytes, sha):
    r = env.tool_call(meta)
    assert r.status == 200, r
    c = r.json
    assert c["state"] == "succeeded" and c["outcome"] == "succeeded", c
    assert c["result_kept"] is False, c
    assert c["result_bytes"] == nbytes and c["result_sha256"] == sha, c
    assert "result" not in c, sorted(c)


def assert_retry_refused(run, meta, nbytes, sha):
    for line in run.calls():
        data = mcp.assert_proxy_error(line, mcp.RESULT_NOT_KEPT, "result_not_kept", meta)
        assert data["outcome"] == "succeeded", data
        assert data["result_bytes"] == nbytes and data["result_sha256"] == sha, data
        assert data["ledgerd"]["code"] == "result_not_kept", data
        assert data["ledgerd"]["result_sha256"] == sha, data


def test_a_2_mib_answer_is_given_whole_and_kept_as_its_digest(env, tapped):
    meta = mcp.keys()
    first = tapped.run([call("export", export("q3", 2 * MIB), meta)]).calls()[0]
    assert first["ok"], str(first)[:2000]
    assert not mcp.is_replay(first["result"])
    text = first["result"]["content"][0]["text"]
    assert len(text) == 2 * MIB and text.startswith("report q3 (export ex_")

    # The client got the server's answer whole (over stdio, byte for byte).
    sent, sent_text = tapped.server_answer("report q3 ")
    assert first["raw"]["result"] == sent["result"]
    if tapped.kind == "stdio":
        _, got_text = tapped.client_answer("report q3 ")
        assert got_text == sent_text

    # ledgerd holds its completion: the exact bytes' length and SHA-256, no result.
    nbytes, sha = digest_of(sent_text)
    assert nbytes > 2 * MIB
    assert_not_kept(env, meta, nbytes, sha)

    # A retry, in the same session and in a new one: the error, never the server.
    assert_retry_refused(tapped.run([call("export", export("q3", 2 * MIB), meta, repeat=2)]),
                         meta, nbytes, sha)
    assert tapped.counts.started(meta=meta) == 1
    assert tapped.counts.executed(meta=meta) == 1
    assert env.state(meta) == "succeeded"


def test_a_bound_over_ledgerds_body_limit_falls_back_to_the_digest(env):
    """--max-result-bytes 8MiB sends a 2 MiB answer whole; ledgerd's --max-body
    (1 MiB) refuses it as 413 body_too_large, and the proxy sends its digest."""
    t = Tapped(env, "stdio", "--max-result-bytes", "8MiB")
    meta = mcp.keys()
    try:
        first = t.run([call("export", export("q4", 2 * MIB), meta)]).calls()[0]
        assert first["ok"], str(first)[:2000]
        _, sent_text = t.server_answer("report q4 ")
        nbytes, sha = digest_of(sent_text)
        assert_not_kept(env, meta, nbytes, sha)
        refused = [json.loads(line) for line in env.led.log_text().splitlines()
                   if '"tool_call_complete"' in line and '"status":413' in line
                   and mcp.rid_of(meta) in line]
        assert len(refused) == 1, refused
        assert_retry_refused(t.run([call("export", export("q4", 2 * MIB), meta)]), meta,
                             nbytes, sha)
        assert t.counts.started(meta=meta) == 1
    finally:
        t.close()


def test_the_bound_is_the_proxys_setting(env):
    """--max-result-bytes 64KiB: an answer over it is kept as its digest, one
    under it whole, and a retry of that one is its replay."""
    t = Tapped(env, "stdio", "--max-result-bytes", "64KiB")
    rid = mcp.new_id("r")
    over, under = mcp.keys(rid, "call_01"), mcp.keys(rid, "call_02")
    try:
        run = t.run([call("export", export("over", 100000), over),
                     call("export", export("under", 60000), under, repeat=2)])
        first_over, first_under, replay = run.calls()
        assert first_over["ok"] and first_under["ok"] and replay["ok"], str(run)[:2000]
        _, sent_text = t.server_answer("report over ")
        nbytes, sha = digest_of(sent_text)
        assert 64 * 1024 < nbytes < 1 << 20
        assert_not_kept(env, over, nbytes, sha)
        assert replay["raw"]["result"] == mcp.with_replayed(first_under["raw"]["result"])
        kept = env.tool_call(under).json
        assert "result_kept" not in kept and kept["result"] == first_under["raw"]["result"]
        assert_retry_refused(t.run([call("export", export("over", 100000), over)]), over,
                             nbytes, sha)
        assert t.counts.started(meta=over) == 1 and t.counts.started(meta=under) == 1
    finally:
        t.close()
