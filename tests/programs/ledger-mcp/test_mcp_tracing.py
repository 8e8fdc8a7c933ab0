"""ledger-mcp traced: a keyed tools/call is the C SDK's execute_tool span, a
child of the client's params._meta.traceparent (over HTTP, of its
traceparent header when _meta has none), and the server gets _meta (and,
over HTTP, the W3C headers) rewritten to that span's context, every other
byte of the message the client's. A replay is a span that says so, and the
server is not called. Without tracing the server gets the client's bytes.

The spans are read from tests/otel/receiver.py; what the server received
from server.mjs's count file (its _meta) and from the exact bytes tap.py
(stdio) and server.mjs's bodies file (HTTP) logged. End to end, a ledgerd
that traces too puts its span of the claim under the same execute_tool
span; under valgrind, traced, the proxy leaks nothing in either mode.
"""

import json
import os
import re
import shutil
import sys
import time

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from conftest import ROOT, Ledgerd  # noqa: E402
from mcp_helpers import call  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "otel"))
from receiver import Receiver  # noqa: E402

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = "00-%s-%s-01" % (TRACE_ID, PARENT_ID)
TRACESTATE = "congo=t61rcWkgMzE"
TP_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_tracing"))


@pytest.fixture
def rx():
    with Receiver() as r:
        yield r


def otel(rx, protocol="http/protobuf"):
    return {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.url + "/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol,
            "OTEL_BSP_SCHEDULE_DELAY": "100"}


class Traced:
    """The test server behind ledger-mcp, with @otel as ledger-mcp's OTEL_*
    variables, and the exact bytes of every message: tap.py's logs over
    stdio, client.mjs's record and server.mjs's bodies file over HTTP."""

    def __init__(self, env, kind, otel_env):
        self.env, self.kind, self.otel = env, kind, otel_env
        self.counts = env.counts()
        tag = "%s-%s" % (kind, self.counts.path.stem)
        self.server_log = env.tmp / ("server-%s.jsonl" % tag)
        self.client_log = env.tmp / ("client-%s.jsonl" % tag)
        self.server = self.proxy = None
        if kind != "stdio":
            self.server = env.http_server(self.counts, json_answers=kind == "http-json",
                                          extra_env={"MCP_TEST_BODIES_FILE":
                                                     str(self.server_log)})
            self.proxy = env.http_proxy(self.server.url, extra_env=otel_env)

    def run(self, steps, headers=None):
        if self.kind == "stdio":
            transport = self.env.tapped_stdio(self.counts, self.client_log, self.server_log,
                                              extra_env=self.otel)
        else:
            transport = {"type": "http", "url": self.proxy.url, "record": str(self.client_log)}
            if headers:
                transport["headers"] = headers
        return mcp.run_client({"transport": transport, "steps": steps})

    def tool_calls(self, log, direction):
        """The exact bytes of every tools/call in @log (stdio: a tap's; http: a record)."""
        if self.kind == "stdio":
            lines = mcp.tap_lines(log, direction)
        else:
            lines = [json.loads(line) for line in log.read_text().splitlines()]
            lines = [e["body"].encode() for e in lines
                     if e["dir"] == "request" and e.get("method") == "POST" and e.get("body")]
        return [b for b in lines if b'"tools/call"' in b]

    def sent(self):
        return self.tool_calls(self.client_log, "in")

    def received(self):
        return self.tool_calls(self.server_log, "in")

    def server_headers(self):
        """HTTP: the W3C headers of each tools/call POST the server received."""
        out = []
        for line in self.server_log.read_text().splitlines():
            e = json.loads(line)
            if e["dir"] == "request" and '"tools/call"' in (e.get("body") or ""):
                out.append({k: v for k, v in e["headers"].items() if k.startswith("trace")})
        return out

    def close(self):
        for p in (self.proxy, self.server):
            if p is not None:
                p.stop()  # ledger-mcp sends its queued spans as it stops


@pytest.fixture(params=mcp.Stack.KINDS)
def kind(request):
    return request.param


def parts(traceparent):
    m = TP_RE.match(traceparent or "")
    assert m, "not a traceparent: %r" % traceparent
    return m.group(1), m.group(2)


def charge(order):
    return {"order": order, "cents": 250}


def test_the_server_runs_under_the_execute_tool_span(env, rx, kind):
    stack = Traced(env, kind, otel(rx))
    meta = dict(mcp.keys(), traceparent=TRACEPARENT, tracestate=TRACESTATE)
    try:
        run = stack.run([call("charge", charge("o-t1"), meta, repeat=2)])
        sent, received = stack.sent(), stack.received()
    finally:
        stack.close()
    first, again = run.calls()
    assert first["ok"] and again["ok"], run
    assert mcp.is_replay(again["result"]) and not mcp.is_replay(first["result"])
    assert stack.counts.started(meta=meta) == 1  # the replay never reached the server

    spans = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == mcp.rid_of(meta),
                        count=2)
    executed = [s for s in spans if s.attributes["ledger.outcome"] == "executed"]
    replayed = [s for s in spans if s.attributes["ledger.outcome"] == "replayed"]
    assert len(executed) == 1 and len(replayed) == 1, [s.attributes for s in spans]
    span = executed[0]
    assert span.name == "execute_tool charge" and span.kind == 1
    assert span.trace_id == TRACE_ID and span.parent_span_id == PARENT_ID
    assert span.trace_state == TRACESTATE
    assert span.resource.get("service.name") == "ledger-mcp"
    assert span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert span.attributes["gen_ai.tool.name"] == "charge"
    assert span.attributes["gen_ai.tool.call.id"] == mcp.cid_of(meta)
    assert span.attributes["ledger.replayed"] is False
    assert replayed[0].attributes["ledger.replayed"] is True
    assert replayed[0].trace_id == TRACE_ID and replayed[0].parent_span_id == PARENT_ID

    # The server was told the span's context, in the client's trace.
    got = stack.counts.events("started", meta=meta)[0]
    assert parts(got["traceparent"]) == (TRACE_ID, span.span_id)
    assert got["tracestate"] == TRACESTATE
    # Byte for byte, the message is the client's but for that one value.
    assert len(sent) == 2 and len(received) == 1, (sent, received)
    assert received[0] == sent[0].replace(TRACEPARENT.encode(), got["traceparent"].encode())
    if kind != "stdio":
        # The HTTP request's own W3C header says the same as its _meta.
        assert stack.server_headers() == [{"traceparent": got["traceparent"],
                                           "tracestate": TRACESTATE}]
        # Its log lines about each call carry the call's span: executed, then replayed.
        lines = [json.loads(line) for line in stack.proxy.log_text().splitlines()
                 if line.startswith("{") and '"tool call charge:' in line]
        assert [(e["msg"], e.get("trace_id"), e.get("span_id")) for e in lines] == [
            ("tool call charge: executed", TRACE_ID, span.span_id),
            ("tool call charge: replayed", TRACE_ID, replayed[0].span_id)], lines


def test_a_call_without_a_context_starts_a_trace_the_server_joins(env, rx, kind):
    stack = Traced(env, kind, otel(rx, "http/json"))
    meta = mcp.keys()
    try:
        run = stack.run([call("charge", charge("o-t2"), meta)])
        sent, received = stack.sent(), stack.received()
    finally:
        stack.close()
    assert run.calls()[0]["ok"], run
    span = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == mcp.rid_of(meta))[0]
    assert span.parent_span_id == ""
    got = stack.counts.events("started", meta=meta)[0]
    assert parts(got["traceparent"]) == (span.trace_id, span.span_id)
    assert got["tracestate"] is None
    # The one change: "traceparent" put first in the client's _meta.
    inserted = sent[0].replace(b'"_meta":{', b'"_meta":{"traceparent":"%s",'
                               % got["traceparent"].encode(), 1)
    assert received == [inserted]
    json.loads(received[0])


def test_a_malformed_traceparent_is_replaced_and_its_tracestate_dropped(env, rx):
    stack = Traced(env, "stdio", otel(rx))
    meta = dict(mcp.keys(), traceparent="00-%s-%s-01" % (TRACE_ID.upper(), PARENT_ID),
                tracestate=TRACESTATE)
    try:
        run = stack.run([call("charge", charge("o-t3"), meta)])
        received = stack.received()
    finally:
        stack.close()
    assert run.calls()[0]["ok"], run
    span = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == mcp.rid_of(meta))[0]
    assert span.parent_span_id == "" and span.trace_id != TRACE_ID
    got = stack.counts.events("started", meta=meta)[0]
    assert parts(got["traceparent"]) == (span.trace_id, span.span_id)
    # A tracestate goes only with the traceparent it came with.
    assert got["tracestate"] is None
    assert b"tracestate" not in received[0]
    json.loads(received[0])


def test_over_http_the_traceparent_header_is_the_parent_when_meta_has_none(env, rx):
    stack = Traced(env, "http-json", otel(rx))
    meta = mcp.keys()
    try:
        run = stack.run([call("charge", charge("o-t4"), meta)],
                        headers={"traceparent": TRACEPARENT, "tracestate": TRACESTATE})
    finally:
        stack.close()
    assert run.calls()[0]["ok"], run
    span = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == mcp.rid_of(meta))[0]
    assert span.trace_id == TRACE_ID and span.parent_span_id == PARENT_ID
    got = stack.counts.events("started", meta=meta)[0]
    assert parts(got["traceparent"]) == (TRACE_ID, span.span_id)
    assert got["tracestate"] == TRACESTATE
    assert stack.server_headers() == [{"traceparent": got["traceparent"],
                                       "tracestate": TRACESTATE}]


def test_without_tracing_the_server_gets_the_clients_bytes(env, rx, kind):
    stack = Traced(env, kind, {})
    meta = dict(mcp.keys(), traceparent=TRACEPARENT, tracestate=TRACESTATE)
    try:
        run = stack.run([call("charge", charge("o-t5"), meta, repeat=2)],
                        headers={"traceparent": TRACEPARENT})
        sent, received = stack.sent(), stack.received()
    finally:
        stack.close()
    first, again = run.calls()
    assert first["ok"] and mcp.is_replay(again["result"]), run
    got = stack.counts.events("started", meta=meta)
    assert [(e["traceparent"], e["tracestate"]) for e in got] == [(TRACEPARENT, TRACESTATE)]
    assert received == sent[:1]
    if kind != "stdio":
        assert stack.server_headers() == [{"traceparent": TRACEPARENT}]
    time.sleep(0.3)
    assert rx.requests == []


def test_without_tracing_a_later_version_of_traceparent_is_left_as_it_is(env):
    """Tracing off, a traceparent of a later W3C version (read by its first four
    fields) is not rewritten in the version-00 form the tracer writes."""
    stack = Traced(env, "stdio", {})
    future = "01-%s-%s-01-later" % (TRACE_ID, PARENT_ID)
    meta = dict(mcp.keys(), traceparent=future)
    try:
        run = stack.run([call("charge", charge("o-t6"), meta)])
        sent, received = stack.sent(), stack.received()
    finally:
        stack.close()
    assert run.calls()[0]["ok"], run
    assert received == sent
    assert stack.counts.events("started", meta=meta)[0]["traceparent"] == future


def test_traced_ledger_mcp_leaks_nothing(env, rx):
    """ledger-mcp stdio under valgrind, traced: a call rewritten for the server,
    its replay, and the exit that sends the spans."""
    if shutil.which("valgrind") is None:
        pytest.fail("valgrind is missing: scripts/deps.sh test installs it")
    counts = env.counts()
    log = env.tmp / ("valgrind-%s.log" % counts.path.stem)
    argv = ["valgrind", "--quiet", "--leak-check=full", "--show-leak-kinds=definite,indirect",
            "--errors-for-leak-kinds=definite,indirect", "--log-file=%s" % log] + \
        env.stdio_proxy_argv()
    e = dict(otel(rx), MCP_TEST_COUNT_FILE=str(counts.path))
    meta = dict(mcp.keys(), traceparent=TRACEPARENT, tracestate=TRACESTATE)
    run = mcp.run_client({"transport": {"type": "stdio", "command": argv[0], "args": argv[1:],
                                        "env": e},
                          "timeout_ms": 120000,
                          "steps": [call("charge", charge("o-vg"), meta, repeat=2)]})
    assert [c["ok"] for c in run.calls()] == [True, True], run
    pid = run.lines[0]["pid"]
    deadline = time.monotonic() + 60
    while os.path.exists("/proc/%d" % pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists("/proc/%d" % pid), "ledger-mcp did not exit"
    assert log.read_text() == ""
    spans = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == mcp.rid_of(meta),
                        count=2)
    assert sorted(s.attributes["ledger.outcome"] for s in spans) == ["executed", "replayed"]
    got = counts.events("started", meta=meta)[0]
    assert parts(got["traceparent"])[0] == TRACE_ID


def test_traced_ledger_mcp_http_leaks_nothing(env, rx):
    """The same in http mode, where the W3C headers are swapped for the span's too."""
    if shutil.which("valgrind") is None:
        pytest.fail("valgrind is missing: scripts/deps.sh test installs it")
    counts = env.counts()
    server = env.http_server(counts)
    log = env.tmp / ("valgrind-http-%s.log" % counts.path.stem)
    argv = ["valgrind", "--quiet", "--leak-check=full", "--show-leak-kinds=definite,indirect",
            "--errors-for-leak-kinds=definite,indirect", "--log-file=%s" % log,
            mcp.LEDGER_MCP, "http", "--listen", "127.0.0.1:0", "--upstream", server.url,
            "--ledger-url", env.url, "--token", env.agent]
    proxy = mcp.Proc(argv, env.tmp / ("ledger-mcp-vg-%s.log" % counts.path.stem),
                     env=dict(env.proxy_env(), **otel(rx)))
    meta = mcp.keys()
    try:
        entry = proxy.wait_log(lambda e: e.get("msg") == "listening" and "address" in e,
                               timeout=60)
        run = mcp.run_client({"transport": {"type": "http",
                                            "url": "http://%s/mcp" % entry["address"],
                                            "headers": {"traceparent": TRACEPARENT,
                                                        "tracestate": TRACESTATE}},
                              "timeout_ms": 120000,
                              "steps": [call("charge", charge("o-vgh"), meta, repeat=2)]})
    finally:
        assert proxy.stop(timeout=60) == 0
        server.stop()
    assert [c["ok"] for c in run.calls()] == [True, True], run
    assert log.read_text() == ""
    spans = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == mcp.rid_of(meta),
                        count=2)
    assert all(s.parent_span_id == PARENT_ID for s in spans)
    got = counts.events("started", meta=meta)[0]
    assert parts(got["traceparent"])[0] == TRACE_ID


def test_ledgerd_and_the_server_are_both_under_the_execute_tool_span(env, rx, tmp_path):
    """End to end, ledgerd tracing to the same receiver: its span of the claim
    and the server's context are the execute_tool span's children."""
    led = Ledgerd(env.service.database_url, tmp_path / "ledgerd-traced.log",
                  extra_env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.url + "/v1/traces",
                             "OTEL_BSP_SCHEDULE_DELAY": "100"})
    counts = env.counts()
    meta = dict(mcp.keys(), traceparent=TRACEPARENT)
    try:
        transport = env.stdio(counts, ledger_url="http://%s:%d" % (led.host, led.port),
                              extra_env=otel(rx))
        run = mcp.run_client({"transport": transport,
                              "steps": [call("charge", charge("o-t7"), meta)]})
        assert run.calls()[0]["ok"], run
        span = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == mcp.rid_of(meta)
                           and s.name.startswith("execute_tool"))[0]
        claim = rx.wait_for(lambda s: s.kind == 2 and s.name.endswith("/claim")
                            and s.trace_id == TRACE_ID)[0]
        assert claim.parent_span_id == span.span_id
        assert span.parent_span_id == PARENT_ID
        got = counts.events("started", meta=meta)[0]
        assert parts(got["traceparent"]) == (TRACE_ID, span.span_id)
    finally:
        led.stop()
