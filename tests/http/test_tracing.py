"""ledgerd's spans, as an OTLP/HTTP receiver gets them (docs/tracing-ledgerd.md).

Each protocol (http/json, http/protobuf) gets its own receiver
(tests/otel/receiver.py) and its own ledgerd exporting to it, with one
database worker, so that calls held behind a row lock go to the database
together, in one transaction. What is checked: the SERVER span of a call
continues the caller's trace and follows the HTTP server conventions; the
store's transaction is a CLIENT span under it; a replay from memory has
none; refusals carry the API's code as error.type; a malformed traceparent
starts a new trace and is never refused; batched calls say so; the log
lines carry the span's ids; /metrics counts the tracer's work; and with
tracing not configured, or disabled, no span is sent.
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import Ledgerd, claim_id, hold_request_lock, new_id
from http_helpers import assert_error, key, path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "otel"))
from receiver import Receiver  # noqa: E402 (tests/otel/receiver.py)

# make test runs tests/http again with the fast paths off: then no answer
# comes from the replay cache and no call shares a transaction, and the tests
# of those say what the locked path does instead.
FAST_PATHS = os.environ.get("LEDGER_FAST_PATHS", "on") != "off"

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = ROOT / "scripts" / "promtool.sh"

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = "00-%s-%s-01" % (TRACE_ID, PARENT_ID)

SERVER, CLIENT = 2, 3  # OTLP's SpanKind
STATUS_UNSET, STATUS_ERROR = 0, 2

CLAIM_ROUTE = "/v1/requests/{rid}/tool-calls/{cid}/claim"


# --- the receiver and what it got ---------------------------------------------


def attrs(span):
    return span.attributes


def status_code(span):
    return span.status["code"]


class Traced:
    """A receiver and a ledgerd exporting to it with @protocol."""

    def __init__(self, service, tmp, protocol, extra_env=None, extra_args=()):
        self.receiver = Receiver()
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.receiver.url + "/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol,
            "OTEL_BSP_SCHEDULE_DELAY": "20",
        }
        env.update(extra_env or {})
        self.led = Ledgerd(service.database_url, tmp / ("ledgerd-%s.log" % protocol.replace("/", "-")),
                           extra_args=list(extra_args), extra_env=env)

    def spans(self):
        with self.receiver._cond:
            return list(self.receiver.spans)

    def wait(self, pred, timeout=10, what="spans"):
        """The spans once @pred(spans) holds; fails after @timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.spans()
            if pred(got):
                return got
            assert time.monotonic() < deadline, "no %s arrived; got %s" % (what, got)
            time.sleep(0.05)

    def server_span(self, pred, timeout=10):
        """The one SERVER span for which @pred(span, attrs) holds, once it arrived."""
        def found(spans):
            return [s for s in spans if s.kind == SERVER and pred(s, attrs(s))]
        got = found(self.wait(lambda spans: found(spans), timeout, "matching server span"))
        assert len(got) == 1, got
        return got[0]

    def children(self, span):
        return [s for s in self.spans() if s.parent_span_id == span.span_id
                and s.trace_id == span.trace_id]

    def close(self):
        if self.led.proc is not None:
            self.led.stop()
        self.receiver.stop()


@pytest.fixture(scope="module", params=["http/json", "http/protobuf"])
def traced(service, request, tmp_path_factory):
    t = Traced(service, tmp_path_factory.mktemp("traced"), request.param,
               extra_args=["--workers", "1"])
    yield t
    t.close()


def claim_body(**extra):
    return dict({"claim_id": claim_id(), "tool": "mail", "args": {"to": "a@example.com"}},
                **extra)


def of_path(p):
    return lambda s, a: a.get("url.path") == p


# --- a call's spans -----------------------------------------------------------


def test_a_claim_continues_the_callers_trace_with_a_server_and_a_database_span(service, traced):
    led = traced.led
    token = service.token("agent")
    rid, cid = key()
    p = path(rid, cid, "claim")
    started = time.time_ns()
    r = led.post(p, claim_body(), token=token,
                 headers={"traceparent": TRACEPARENT, "tracestate": "vendor=opaque,b=2",
                          "User-Agent": "tracing-test/1"})
    ended = time.time_ns()
    assert r.status == 201, r

    span = traced.server_span(of_path(p))
    a = attrs(span)
    assert span.trace_id == TRACE_ID
    assert span.parent_span_id == PARENT_ID
    assert span.span_id != PARENT_ID and len(span.span_id) == 16
    assert span.name == "POST " + CLAIM_ROUTE, json.dumps(a)
    assert span.trace_state == "vendor=opaque,b=2"
    assert status_code(span) == STATUS_UNSET
    assert started <= span.start_ns <= span.end_ns <= ended
    assert a == {
        "http.request.method": "POST",
        "url.path": p,
        "url.scheme": "http",
        "http.route": CLAIM_ROUTE,
        "http.response.status_code": 201,
        "network.protocol.version": "1.1",
        "server.address": "127.0.0.1",
        "server.port": led.port,
        "client.address": "127.0.0.1",
        "user_agent.original": "tracing-test/1",
        "ledger.request_id": rid,
        "ledger.tool_call_id": cid,
        "ledger.outcome": "claimed",
        "ledger.replayed": False,
        "ledger.fencing_token": 1,
        "ledger.batched": False,
        "ledger.batch_size": 1,
    }, a

    # The store's transaction, under the call's span and within it.
    db = traced.wait(lambda spans: [s for s in spans if s.parent_span_id == span.span_id
                                    and attrs(s).get("db.operation.name") == "claim"])
    db = [s for s in db if s.parent_span_id == span.span_id
          and attrs(s).get("db.operation.name") == "claim"]
    assert len(db) == 1, db
    db = db[0]
    assert db.trace_id == TRACE_ID
    assert db.kind == CLIENT
    assert db.name == "claim"
    assert db.trace_state == "vendor=opaque,b=2"  # the trace's, as its parent's
    assert attrs(db) == {"db.system.name": "postgresql", "db.operation.name": "claim"}
    assert status_code(db) == STATUS_UNSET
    assert span.start_ns <= db.start_ns <= db.end_ns <= span.end_ns
    # Every other child is a database span too: the token's lookup.
    for child in traced.children(span):
        assert child.kind == CLIENT and attrs(child)["db.operation.name"] in (
            "claim", "token_lookup"), child

    # The lines ledgerd logged while serving it carry the span's ids.
    lines = [json.loads(line) for line in led.log_text().splitlines() if rid in line]
    assert lines, "no log line names the call"
    for line in lines:
        assert line.get("trace_id") == TRACE_ID, line
        assert line.get("span_id") == span.span_id, line


def test_a_replay_from_memory_says_replayed_and_has_no_database_span(service, traced):
    led = traced.led
    token = service.token("agent")
    rid, cid = key()
    assert led.post(path(rid, cid, "claim"), claim_body(), token=token).status == 201
    assert led.post(path(rid, cid, "complete"), {"fencing_token": 1, "outcome": "succeeded",
                                                 "result": {"sent": True}},
                    token=token).status == 200
    before = metric(led, "ledger_replay_cache_hits_total")
    r = led.post(path(rid, cid, "claim"), claim_body(), token=token,
                 headers={"traceparent": "00-%s-%s-01" % ("ab" * 16, "cd" * 8)})
    assert r.status == 200 and r.json["replayed"] is True, r
    assert metric(led, "ledger_replay_cache_hits_total") == before + (1 if FAST_PATHS else 0)

    span = traced.server_span(lambda s, a: s.trace_id == "ab" * 16)
    a = attrs(span)
    assert a["ledger.replayed"] is True
    assert a["ledger.outcome"] == "completed"
    assert "ledger.fencing_token" not in a  # a replay's body carries none
    assert a["http.response.status_code"] == 200
    assert "error.type" not in a
    if not FAST_PATHS:
        # The locked path reads the stored result in a transaction of its own.
        assert a["ledger.batched"] is False
        traced.wait(lambda got: traced.children(span), what="database span")
        assert [attrs(c)["db.operation.name"] for c in traced.children(span)] == ["claim"]
        return
    assert "ledger.batched" not in a
    # Given time to arrive, no span is its child: no transaction ran.
    traced.wait(lambda spans: any(s.name == "POST /v1/requests/{rid}/tool-calls/{cid}/complete"
                                  and attrs(s)["ledger.request_id"] == rid for s in spans))
    time.sleep(0.3)
    assert traced.children(span) == []


def test_a_completion_its_database_span_and_its_outcome(service, traced):
    led = traced.led
    token = service.token("agent")
    rid, cid = key()
    assert led.post(path(rid, cid, "claim"), claim_body(), token=token).status == 201
    r = led.post(path(rid, cid, "complete"), {"fencing_token": 1, "outcome": "failed",
                                              "retryable": True}, token=token)
    assert r.status == 200 and r.json["status"] == "released", r
    span = traced.server_span(lambda s, a: a.get("url.path") == path(rid, cid, "complete"))
    a = attrs(span)
    assert span.name == "POST /v1/requests/{rid}/tool-calls/{cid}/complete"
    assert a["ledger.outcome"] == "released" and a["ledger.fencing_token"] == 1
    assert "ledger.replayed" not in a
    traced.wait(lambda spans: any(s.parent_span_id == span.span_id for s in spans))
    db, = traced.children(span)
    assert attrs(db)["db.operation.name"] == "complete"


def test_a_call_the_caller_did_not_sample_sends_no_span_but_logs_its_trace(service, traced):
    """parentbased_always_on follows the caller's flag: a call of an unsampled
    trace is not exported, and its log lines still name the trace."""
    led = traced.led
    token = service.token("agent")
    rid, cid = key()
    unsampled = "%032x" % (int(TRACE_ID, 16) ^ 1)
    r = led.post(path(rid, cid, "claim"), claim_body(), token=token,
                 headers={"traceparent": "00-%s-%s-00" % (unsampled, PARENT_ID)})
    assert r.status == 201, r
    marker = "after-" + rid
    assert led.get("/v1/whoami", token=token, headers={"User-Agent": marker}).status == 200
    traced.server_span(lambda s, a: a.get("user_agent.original") == marker)
    assert [s for s in traced.spans() if s.trace_id == unsampled] == []
    lines = [json.loads(line) for line in led.log_text().splitlines() if rid in line]
    assert lines and all(line.get("trace_id") == unsampled and len(line.get("span_id", "")) == 16
                         for line in lines), lines


def test_an_attempts_call_names_its_attempt(service, traced):
    led = traced.led
    router = service.token("router")
    rid = new_id()
    assert led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1"},
                    token=router).status == 201
    p = "/v1/requests/%s/attempts/a1/renew" % rid
    assert led.post(p, {"lease_ms": 5000}, token=router).status == 200
    span = traced.server_span(of_path(p))
    a = span.attributes
    assert span.name == "POST /v1/requests/{rid}/attempts/{aid}/renew"
    assert a["ledger.request_id"] == rid and a["ledger.attempt_id"] == "a1"
    assert "ledger.tool_call_id" not in a and "ledger.replayed" not in a
    traced.wait(lambda spans: any(s.parent_span_id == span.span_id for s in spans))
    assert [c.name for c in traced.children(span)
            if c.attributes["db.operation.name"] != "token_lookup"] == ["attempt_call"]


@pytest.mark.parametrize("case", ["in_progress", "unauthorized", "invalid_field", "not_found"])
def test_a_refusal_names_its_code_as_error_type_and_leaves_the_status_unset(service, traced, case):
    led = traced.led
    token = service.token("agent")
    rid, cid = key()
    p = path(rid, cid, "claim")
    tp = "00-%s-%s-01" % (new_id("")[1:].ljust(32, "0")[:32], PARENT_ID)
    headers = {"traceparent": tp}
    if case == "in_progress":
        assert led.post(p, claim_body(), token=token).status == 201
        r = led.post(p, claim_body(), token=token, headers=headers)
        status, route = 409, CLAIM_ROUTE
    elif case == "unauthorized":
        r = led.post(p, claim_body(), token="not-a-token", headers=headers)
        status, route = 401, CLAIM_ROUTE
    elif case == "invalid_field":
        r = led.post(p, claim_body(lease_ms="long"), token=token, headers=headers)
        status, route = 400, CLAIM_ROUTE
    else:
        p = "/v1/nowhere/" + rid
        r = led.get(p, token=token, headers=headers)
        status, route = 404, None
    assert_error(r, status, case)

    span = traced.server_span(lambda s, a: s.trace_id == tp[3:35])
    a = attrs(span)
    assert a["error.type"] == case
    assert a["http.response.status_code"] == status
    assert status_code(span) == STATUS_UNSET  # a 4xx is the client's, not the server's
    assert "ledger.outcome" not in a
    if route is None:
        assert span.name == "GET" and "http.route" not in a
    else:
        assert span.name == "POST " + route and a["http.route"] == route


def test_a_database_that_does_not_answer_in_time_is_an_error_on_both_spans(service, tmp_path):
    """A 503: the call's span is ERROR with store_unavailable, and its
    transaction's span says what the database did."""
    t = Traced(service, tmp_path, "http/json", extra_args=["--db-timeout", "300ms"])
    try:
        token = service.token("agent")
        rid, cid = key()
        assert t.led.post(path(rid, "c0", "claim"), claim_body(), token=token).status == 201
        lock = hold_request_lock(service.sql, rid, 1.5)
        r = t.led.post(path(rid, cid, "claim"), claim_body(), token=token)
        lock.join()
        assert_error(r, 503, "store_unavailable")
        span = t.server_span(of_path(path(rid, cid, "claim")))
        a = attrs(span)
        assert status_code(span) == STATUS_ERROR
        assert a["error.type"] == "store_unavailable"
        assert a["http.response.status_code"] == 503
        t.wait(lambda spans: any(s.parent_span_id == span.span_id for s in spans))
        db = [s for s in t.children(span) if attrs(s)["db.operation.name"] == "claim"]
        assert len(db) == 1, t.children(span)
        assert status_code(db[0]) == STATUS_ERROR
        assert attrs(db[0])["error.type"] in ("unavailable", "conflict")
        # The database worker's lines about the call carry its trace as the
        # HTTP thread's do: the ids travel with the call's job.
        lines = [json.loads(line) for line in t.led.log_text().splitlines() if cid in line]
        assert any(line["msg"] != "tool_call_claim" for line in lines), lines
        for line in lines:
            assert (line.get("trace_id"), line.get("span_id")) == (span.trace_id, span.span_id)
    finally:
        t.close()


MALFORMED = {
    "short": "00-%s-%s-0" % (TRACE_ID, PARENT_ID),
    "zero trace id": "00-%s-%s-01" % ("0" * 32, PARENT_ID),
    "zero span id": "00-%s-%s-01" % (TRACE_ID, "0" * 16),
    "upper case": "00-%s-%s-01" % (TRACE_ID.upper(), PARENT_ID),
    "version ff": "ff-%s-%s-01" % (TRACE_ID, PARENT_ID),
    "version 00 with more": "00-%s-%s-01-extra" % (TRACE_ID, PARENT_ID),
    "not hex": "00-%s-%s-01" % ("g" * 32, PARENT_ID),
    "garbage": "\x01zz",
    "empty": "",
}


@pytest.mark.parametrize("kind", sorted(MALFORMED) + ["twice"])
def test_a_malformed_traceparent_starts_a_new_trace_and_is_served(service, traced, kind):
    led = traced.led
    ua = "malformed-%s-%s" % (kind.replace(" ", "-"), new_id(""))
    if kind == "twice":
        # http.client sends both fields: two traceparents are no one parent.
        conn = __import__("http.client").client.HTTPConnection(led.host, led.port, timeout=10)
        conn.putrequest("GET", "/v1/whoami")
        conn.putheader("Authorization", "Bearer " + service.token("agent"))
        conn.putheader("traceparent", TRACEPARENT)
        conn.putheader("traceparent", "00-%s-%s-01" % (TRACE_ID, "11" * 8))
        conn.putheader("User-Agent", ua)
        conn.endheaders()
        status = conn.getresponse().status
        conn.close()
    else:
        value = MALFORMED[kind]
        raw = ("GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
               "traceparent: %s\r\ntracestate: a=1\r\nUser-Agent: %s\r\nConnection: close\r\n\r\n"
               % (service.token("agent"), value, ua))
        status = raw_status(led, raw.encode("latin-1"))
    if kind == "garbage":
        # A control byte in a field is refused by the wire before any call
        # begins: 400, no span. Everything else is served.
        assert status == 400
        return
    assert status == 200
    span = traced.server_span(lambda s, a: a.get("user_agent.original") == ua)
    assert span.trace_id not in (TRACE_ID, TRACE_ID.upper(), "0" * 32)
    assert len(span.trace_id) == 32 and int(span.trace_id, 16) != 0
    assert not span.parent_span_id
    assert not span.trace_state  # no parent: its tracestate is not taken either
    assert span.name == "GET /v1/whoami"


def raw_status(led, data):
    import socket
    with socket.create_connection((led.host, led.port), timeout=10) as s:
        s.sendall(data)
        got = b""
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    return int(got.split(b" ", 2)[1])


def test_a_call_the_wire_ends_ends_its_span(service, traced):
    """A body the wire refuses (malformed chunks) is a 4xx of the wire's: the
    span says so and leaves the status unset. A client that leaves before
    its body is whole got no status: the span is an error."""
    import socket
    led = traced.led
    token = service.token("agent")
    rid, cid = key()
    refused_ua, left_ua = "refused-" + rid, "left-" + rid
    head = ("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            "User-Agent: %%s\r\n%%s\r\n" % (path(rid, cid, "claim"), token))
    assert raw_status(led, (head % (refused_ua, "Transfer-Encoding: chunked\r\n")
                            + "zz\r\n").encode()) == 400
    with socket.create_connection((led.host, led.port), timeout=10) as s:
        s.sendall((head % (left_ua, "Content-Length: 100\r\n") + "{").encode())
        time.sleep(0.3)
    refused = traced.server_span(lambda s, a: a.get("user_agent.original") == refused_ua)
    assert refused.name == "POST " + CLAIM_ROUTE
    assert refused.attributes["error.type"] == "wire_refusal"
    assert status_code(refused) == STATUS_UNSET
    left = traced.server_span(lambda s, a: a.get("user_agent.original") == left_ua)
    assert left.name == "POST " + CLAIM_ROUTE
    assert left.attributes["error.type"] == "connection_closed"
    assert "http.response.status_code" not in left.attributes
    assert status_code(left) == STATUS_ERROR


def test_calls_that_share_a_transaction_say_so(service, traced):
    """Claims that arrive while the one worker is held go to the database
    together: their spans say batched, how many, and their database spans
    are the one transaction."""
    led = traced.led
    token = service.token("agent")
    blocker = new_id()
    assert led.post(path(blocker, "c0", "claim"), claim_body(), token=token).status == 201
    lock = hold_request_lock(service.sql, blocker, 1.0)
    held = threading.Thread(target=led.post, args=(path(blocker, "c1", "claim"), claim_body()),
                            kwargs={"token": token})
    held.start()
    time.sleep(0.2)
    keys = [key() for _ in range(12)]
    answers = {}

    def one(rid, cid):
        answers[rid] = led.post(path(rid, cid, "claim"), claim_body(), token=token).status

    threads = [threading.Thread(target=one, args=k) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held.join()
    lock.join()
    assert sorted(answers.values()) == [201] * len(keys)

    rids = {rid for rid, _ in keys}
    spans = traced.wait(lambda got: len([s for s in got if s.kind == SERVER
                                         and attrs(s).get("ledger.request_id") in rids])
                        == len(keys))
    ours = [s for s in spans if s.kind == SERVER and attrs(s).get("ledger.request_id") in rids]
    batched = [s for s in ours if attrs(s)["ledger.batched"]]
    if not FAST_PATHS:
        # Each call in a transaction of its own, and its span says so.
        assert batched == [] and all(attrs(s)["ledger.batch_size"] == 1 for s in ours)
        return
    assert batched, [attrs(s) for s in ours]
    for s in ours:
        a = attrs(s)
        assert a["ledger.batched"] == (a["ledger.batch_size"] > 1), a
    traced.wait(lambda got: all(traced.children(s) for s in batched), what="database spans")
    windows = {}
    for s in batched:
        db = [c for c in traced.children(s) if attrs(c)["db.operation.name"] == "claim"]
        assert len(db) == 1, traced.children(s)
        assert attrs(db[0])["db.operation.batch.size"] == attrs(s)["ledger.batch_size"]
        windows.setdefault((db[0].start_ns, db[0].end_ns), []).append(s)
    # The calls of one transaction share its times, as many as it had.
    for members in windows.values():
        assert len(members) <= attrs(members[0])["ledger.batch_size"]
    assert any(len(m) > 1 for m in windows.values()), windows


def test_probes_and_the_page_get_no_span(service, traced):
    led = traced.led
    ua = "probe-" + new_id("")
    for p in ("/healthz", "/readyz", "/metrics", "/ui/", "/ui"):
        led.get(p, headers={"User-Agent": ua, "traceparent": TRACEPARENT})
    # A call after them, on the same path to the receiver: once it is there, they would be.
    marker = "after-" + ua
    assert led.get("/v1/whoami", token=service.token("agent"),
                   headers={"User-Agent": marker}).status == 200
    traced.server_span(lambda s, a: a.get("user_agent.original") == marker)
    assert [s for s in traced.spans() if attrs(s).get("user_agent.original") == ua] == []


def metric(led, name):
    for line in led.get("/metrics").body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric " + name)


def test_metrics_count_the_spans_exported_and_pass_promtool(service, traced):
    led = traced.led
    before = metric(led, "ledger_trace_spans_exported_total")
    assert led.get("/v1/whoami", token=service.token("agent")).status == 200
    deadline = time.monotonic() + 10
    while metric(led, "ledger_trace_spans_exported_total") <= before:
        assert time.monotonic() < deadline, "the exported spans were not counted"
        time.sleep(0.05)
    text = led.get("/metrics").body
    for name in ("ledger_trace_spans_exported_total", "ledger_trace_spans_dropped_total",
                 "ledger_trace_spans_failed_total", "ledger_trace_exports_failed_total"):
        assert "# TYPE %s counter" % name in text, name
    assert metric(led, "ledger_trace_spans_failed_total") == 0
    assert metric(led, "ledger_trace_exports_failed_total") == 0
    check = subprocess.run([str(PROMTOOL), "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_unreachable_collector_costs_the_calls_nothing_and_is_counted(service, tmp_path):
    """The sender retries a batch for the export timeout while the calls go
    on: what does not fit the queue (two spans) is dropped, not waited for."""
    from conftest import free_port
    led = Ledgerd(service.database_url, tmp_path / "unreachable.log", extra_env={
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:%d/v1/traces" % free_port(),
        "OTEL_BSP_SCHEDULE_DELAY": "20", "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
        "OTEL_BSP_MAX_QUEUE_SIZE": "2", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1"})
    try:
        token = service.token("agent")
        for _ in range(10):
            rid, cid = key()
            assert led.post(path(rid, cid, "claim"), claim_body(), token=token).status == 201
        assert metric(led, "ledger_trace_spans_dropped_total") > 0
        deadline = time.monotonic() + 15
        while metric(led, "ledger_trace_exports_failed_total") < 1:
            assert time.monotonic() < deadline, led.get("/metrics").body
            time.sleep(0.1)
        assert metric(led, "ledger_trace_spans_failed_total") >= 1
        assert metric(led, "ledger_trace_spans_exported_total") == 0
    finally:
        led.stop()


@pytest.mark.parametrize("env", [{}, {"OTEL_SDK_DISABLED": "true"}],
                         ids=["not configured", "disabled"])
def test_without_tracing_no_span_is_sent_and_calls_work(service, tmp_path, env):
    receiver = Receiver()
    full = dict(env)
    if env:
        full["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = receiver.url + "/v1/traces"
    full["OTEL_BSP_SCHEDULE_DELAY"] = "20"
    led = Ledgerd(service.database_url, tmp_path / "untraced.log", extra_env=full)
    try:
        token = service.token("agent")
        rid, cid = key()
        r = led.post(path(rid, cid, "claim"), claim_body(), token=token,
                     headers={"traceparent": TRACEPARENT})
        assert r.status == 201, r
        time.sleep(0.5)
        assert receiver.spans == [] and receiver.requests == []
        lines = [json.loads(line) for line in led.log_text().splitlines() if rid in line]
        assert lines and all("trace_id" not in line for line in lines), lines
        assert metric(led, "ledger_trace_spans_exported_total") == 0
    finally:
        led.stop()
        receiver.stop()
