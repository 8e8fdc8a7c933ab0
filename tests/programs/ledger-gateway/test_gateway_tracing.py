"""ledger-gateway's spans as an OTLP/HTTP receiver gets them
(docs/tracing-gateway.md), and one trace across the whole path.

A module's PostgreSQL and a ledgerd exporting to the same receivers as the
gateway; two stand-in engines of kind `ledger` in the test's own process,
which record the headers of every completion they are asked and do what
the test plans: cut the connection before any byte (a failover), or claim
a tool call with ledgerd under the traceparent the gateway sent them, as a
replica that runs tools would. What is checked: the request's SERVER span
continues its client's trace; each attempt is a CLIENT span under it whose
context the engine got in traceparent and ledgerd's spans of the
attempt's calls hang under; first_delta and failover events; refusals and
repeats (a replay, a resume, the next attempt of an abandoned request, a
take-over of a dead gateway's attempt);
whole answers; the log lines' ids; the tracer's counters on /metrics;
tracing off, the client's context passed on as it came. And the
issue's own test: a span of the official OpenTelemetry JS SDK, the
official openai client calling the gateway inside it, an engine's claim,
ledgerd's claim and its database span, all one trace, each span the child
of the one before.
"""

import fcntl
import http.client
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1]
sys.path.insert(0, str(TESTS / "faults"))
sys.path.insert(0, str(TESTS / "otel"))

from pgcluster import Cluster  # noqa: E402
from receiver import Receiver  # noqa: E402 (tests/otel/receiver.py)
from stack import (GATEWAY, LEDGERD, POLICY, POLICY_YAML, Process, clean_env,  # noqa: E402
                   ledgerd, read_json_lines, wait_until)

NODE_DIR = HERE / "otel-node"
NODE_LOCK = TESTS.parent / "build" / "gateway-otel-node.lock"

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = "00-%s-%s-01" % (TRACE_ID, PARENT_ID)
TRACESTATE = "vendor=opaque"
SECRET = "a secret of the pool, 32 bytes.."

SERVER, CLIENT = 2, 3  # OTLP's SpanKind
STATUS_ERROR = 2
CHAT_ROUTE = "POST /v1/chat/completions"


def otel_env(receiver, protocol):
    return {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url + "/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol,
            "OTEL_BSP_SCHEDULE_DELAY": "20"}


def env_without_otel():
    return {k: v for k, v in clean_env().items() if not k.startswith("OTEL_")}


# --- the stand-in engines ------------------------------------------------------


class Plan:
    """What the engines do and what they saw, shared by both."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cut = 0          # the next completions to cut before any byte
        self.claim = None     # (ledger url, token): claim a tool call before answering
        self.delay_s = 0      # before the first byte
        self.seen = []        # {"engine", "headers"} per completion asked
        self.claims = []      # (status, body) of the claims made

    def completions(self, rid=None):
        with self.lock:
            return [s for s in self.seen
                    if rid is None or s["headers"].get("x-ledger-request-id") == rid]


class _Engine(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        # /v1/replica/info makes it of kind ledger: it gets the X-Ledger-* headers.
        self._json(200, {"weights_revision": "w1", "tokenizer": "t1"})

    def do_POST(self):
        asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        plan = self.server.plan
        headers = {k.lower(): v for k, v in self.headers.items()}
        with plan.lock:
            plan.seen.append({"engine": self.server.name, "headers": headers})
            cut = plan.cut > 0
            plan.cut -= cut
            claim = plan.claim
            delay = plan.delay_s
        time.sleep(delay)
        if cut:  # a replica that died before its first byte
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if claim is not None:
            plan.claims.append(self._claim(claim, headers))
        if not asked.get("stream"):
            self._json(200, {"id": "c1", "object": "chat.completion", "model": "m",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant",
                                                      "content": "hello traced"}}],
                             "usage": {"completion_tokens": 2}})
            return
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for delta in ({"role": "assistant"}, {"content": "hello "}, {"content": "traced"}):
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                     "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _claim(self, claim, headers):
        """Claims a tool call of the attempt with ledgerd, in the trace the gateway sent."""
        ledger_url, token = claim
        parts = urllib.parse.urlsplit(ledger_url)
        rid, aid = headers["x-ledger-request-id"], headers["x-ledger-attempt-id"]
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        try:
            conn.request("POST", "/v1/requests/%s/tool-calls/send-1/claim" % rid,
                         body=json.dumps({"claim_id": uuid.uuid4().hex, "tool": "send_email",
                                          "args": {"to": "a@example.com"}, "attempt_id": aid}),
                         headers={"Content-Type": "application/json",
                                  "Authorization": "Bearer " + token,
                                  "traceparent": headers["traceparent"],
                                  "tracestate": headers.get("tracestate", "")})
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            conn.close()


class Engine:
    def __init__(self, name, plan):
        self.name = name
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
        self._server.daemon_threads = True
        self._server.plan = plan
        self._server.name = name
        self.port = self._server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()


# --- the stack -----------------------------------------------------------------


class Stack:
    """PostgreSQL, a ledgerd and a gateway in front of two engines, the two
    programs exporting to one receiver with @protocol."""

    def __init__(self, folder, protocol):
        self.folder = Path(folder)
        self.protocol = protocol
        self.receiver = Receiver()
        self.plan = Plan()
        self.engines = [Engine("gpu-1", self.plan), Engine("gpu-2", self.plan)]
        self.postgres = Cluster.new({"fsync": "off", "synchronous_commit": "off"},
                                    prefix="ledgerd-gwtrace-pg-")
        self.ledgerd = self.gateway = None
        try:
            database_url = self.postgres.create_db("ledger")
            ledgerd("migrate", "--database-url", database_url)
            policy = self.folder / "policy.yaml"
            policy.write_text(POLICY_YAML.format(**POLICY))
            env = env_without_otel()
            env.update(otel_env(self.receiver, protocol))
            self.ledgerd = Process([LEDGERD, "serve", "--database-url", database_url,
                                    "--listen", "127.0.0.1:0", "--policy", policy],
                                   self.folder / "ledgerd.log", env=env).wait_ready()
            self.token = ledgerd("token", "create", "--tenant", "gwtrace", "--role", "router",
                                 "--database-url", database_url)
            env["GATEWAY_KEY_SECRET"] = SECRET
            self.gateway = self.start_gateway(env)
        except BaseException:
            self.close()
            raise

    def start_gateway(self, env, name="gateway.log", extra=()):
        argv = [GATEWAY, "--listen", "127.0.0.1:0", "--ledger-url", self.ledgerd.url,
                "--ledger-token", self.token, "--lease-ms", 3000, "--soft-timeout-ms", 1000,
                "--stall-timeout-ms", 5000, "--probe-interval-ms", 200, *extra]
        for e in self.engines:
            argv += ["--replica", "%s=%s" % (e.name, e.url)]
        return Process(argv, self.folder / name, env=env).wait_ready()

    def traced_env(self):
        env = env_without_otel()
        env.update(otel_env(self.receiver, self.protocol))
        env["GATEWAY_KEY_SECRET"] = SECRET
        return env

    def post(self, headers=None, body=None, gateway=None):
        """One streamed completion: (status, lower-cased headers, body text)."""
        gw = gateway or self.gateway
        conn = http.client.HTTPConnection(gw.host, gw.port, timeout=30)
        try:
            conn.request("POST", "/v1/chat/completions",
                         body=json.dumps(body or {"model": "m", "messages": [], "stream": True}),
                         headers={"Content-Type": "application/json", **(headers or {})})
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
        finally:
            conn.close()

    def spans(self):
        with self.receiver._cond:
            return list(self.receiver.spans)

    def wait(self, pred, what, timeout=10):
        """The spans once @pred(spans) is true; fails after @timeout seconds."""
        got = wait_until(lambda: pred(self.spans()) and self.spans(), timeout)
        assert got, "no %s arrived; got %s" % (what, [(s.name, s.resource.get("service.name"))
                                                     for s in self.spans()])
        return got

    def close(self):
        for p in (self.gateway, self.ledgerd):
            if p is not None:
                p.stop()
        for e in self.engines:
            e.close()
        self.postgres.destroy()
        self.receiver.stop()


@pytest.fixture(scope="module", params=["http/json", "http/protobuf"])
def stack(request, tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("gwtrace"), request.param)
    yield s
    s.close()


@pytest.fixture
def json_stack(stack):
    if stack.protocol != "http/json":
        pytest.skip("once, over http/json")
    return stack


@pytest.fixture(autouse=True)
def reset_plan(stack):
    with stack.plan.lock:
        stack.plan.cut = 0
        stack.plan.claim = None
        stack.plan.delay_s = 0
    yield


# --- what the spans say --------------------------------------------------------


def service(span):
    return span.resource.get("service.name")


def gateway_spans(spans, rid):
    return [s for s in spans if service(s) == "ledger-gateway"
            and (s.attributes.get("ledger.request_id") == rid or s.kind == CLIENT)]


def server_span(spans, rid):
    found = [s for s in spans if service(s) == "ledger-gateway" and s.kind == SERVER
             and s.attributes.get("ledger.request_id") == rid]
    assert len(found) == 1, found
    return found[0]


def attempt_spans(spans, parent):
    return sorted((s for s in spans if service(s) == "ledger-gateway" and s.kind == CLIENT
                   and s.parent_span_id == parent.span_id),
                  key=lambda s: s.attributes["ledger.attempt_id"])


def ledgerd_spans(spans, rid):
    return [s for s in spans if service(s) == "ledgerd" and s.kind == SERVER
            and s.attributes.get("ledger.request_id") == rid]


def events(span, name):
    return [e for e in span.events if e["name"] == name]


def traceparent_of(span):
    return "00-%s-%s-01" % (span.trace_id, span.span_id)


def request_done(stack, rid, attempts):
    """The request's SERVER span and its @attempts attempt spans, all ended and exported."""
    def ready(spans):
        mine = [s for s in spans if service(s) == "ledger-gateway" and s.kind == SERVER
                and s.attributes.get("ledger.request_id") == rid]
        return mine and len(attempt_spans(spans, mine[0])) >= attempts
    spans = stack.wait(ready, "the request's spans")
    server = server_span(spans, rid)
    return spans, server, attempt_spans(spans, server)


# --- a request and its attempt -------------------------------------------------


def test_a_request_is_a_server_span_of_its_clients_trace_and_its_attempt_a_client_span(stack):
    status, headers, body = stack.post({"traceparent": TRACEPARENT, "tracestate": TRACESTATE,
                                        "User-Agent": "tracing-test/1"})
    assert status == 200 and "traced" in body and body.rstrip().endswith("data: [DONE]"), body
    rid = headers["x-request-id"]
    spans, server, attempts = request_done(stack, rid, 1)

    # The request: the client's trace, its span the parent; the HTTP server conventions.
    assert (server.trace_id, server.parent_span_id) == (TRACE_ID, PARENT_ID)
    assert server.name == CHAT_ROUTE and server.kind == SERVER
    a = server.attributes
    assert a["http.request.method"] == "POST" and a["http.route"] == "/v1/chat/completions"
    assert a["url.path"] == "/v1/chat/completions" and a["url.scheme"] == "http"
    assert a["http.response.status_code"] == 200 and "error.type" not in a
    assert a["server.port"] == stack.gateway.port and a["user_agent.original"] == "tracing-test/1"
    assert a["client.address"] == "127.0.0.1"
    # GenAI (v1.37.0) and the ledger's own.
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "m"
    assert a["ledger.keyed"] is False and a["ledger.outcome"] == "completed"
    assert a["ledger.attempts"] == 1
    assert server.trace_state == TRACESTATE

    # One attempt, a GenAI inference CLIENT span toward its engine.
    assert len(attempts) == 1
    at = attempts[0]
    assert at.trace_id == TRACE_ID and at.name == "chat m"
    b = at.attributes
    assert b["ledger.attempt_id"] == "a1" and b["gen_ai.operation.name"] == "chat"
    assert b["gen_ai.provider.name"] == "ledger" and b["gen_ai.request.model"] == "m"
    engine = next(e for e in stack.engines if e.name == b["ledger.replica"])
    assert b["server.address"] == "127.0.0.1" and b["server.port"] == engine.port
    assert b["ledger.epoch"] >= 1 and b["ledger.attempt.outcome"] == "finished"
    assert server.start_ns <= at.start_ns and at.end_ns <= server.end_ns

    # The point of no retry, on both.
    assert [e["attributes"] for e in events(at, "first_delta")] == [{"ledger.attempt_id": "a1"}]
    assert len(events(server, "first_delta")) == 1
    assert not events(server, "client_disconnected")  # it got the whole answer

    # The engine was asked in the attempt's context, tracestate passed on.
    [asked] = stack.plan.completions(rid)
    assert asked["engine"] == engine.name
    assert asked["headers"]["traceparent"] == traceparent_of(at)
    assert asked["headers"]["tracestate"] == TRACESTATE

    # ledgerd's spans of the attempt's calls (begin, deliver, finish) hang under it.
    calls = stack.wait(lambda s: {"POST /v1/requests/{rid}/attempts",
                                  "POST /v1/requests/{rid}/attempts/{aid}/deliver",
                                  "POST /v1/requests/{rid}/attempts/{aid}/finish"}
                       <= {x.name for x in ledgerd_spans(s, rid)}, "ledgerd's attempt spans")
    for call in ledgerd_spans(calls, rid):
        assert (call.trace_id, call.parent_span_id) == (TRACE_ID, at.span_id), call


def test_the_log_lines_of_a_traced_request_name_its_trace(stack):
    status, headers, _ = stack.post({"traceparent": TRACEPARENT})
    rid = headers["x-request-id"]
    _, server, [at] = request_done(stack, rid, 1)
    lines = wait_until(lambda: [x for x in read_json_lines(stack.gateway.log_path)
                                if x.get("request_id") == rid
                                and x.get("msg") == "attempt started"], 5)
    assert lines, "no log line of the attempt"
    assert (lines[0]["trace_id"], lines[0]["span_id"]) == (TRACE_ID, at.span_id)


def test_a_failover_before_the_first_delta_is_two_attempts_and_an_event(stack):
    with stack.plan.lock:
        stack.plan.cut = 1
    status, headers, body = stack.post({"traceparent": TRACEPARENT})
    assert status == 200 and "traced" in body, body
    rid = headers["x-request-id"]
    spans, server, attempts = request_done(stack, rid, 2)

    assert [s.attributes["ledger.attempt_id"] for s in attempts] == ["a1", "a2"]
    first, second = attempts
    assert first.attributes["ledger.attempt.outcome"] == "failed"
    assert first.attributes["error.type"] in ("upstream_closed", "replica_exited")
    assert first.status["code"] == STATUS_ERROR
    assert second.attributes["ledger.attempt.outcome"] == "finished"
    assert first.attributes["ledger.replica"] != second.attributes["ledger.replica"]
    assert not events(first, "first_delta") and len(events(second, "first_delta")) == 1

    [failover] = events(server, "failover")
    assert failover["attributes"] == {"ledger.signal": first.attributes["error.type"],
                                      "ledger.action": "retry_prefill",
                                      "ledger.attempt_id": "a1",
                                      "ledger.next_attempt_id": "a2"}
    assert server.attributes["ledger.attempts"] == 2
    assert server.attributes["ledger.outcome"] == "completed"

    # Each engine was asked in its own attempt's context.
    asked = stack.plan.completions(rid)
    assert [a["headers"]["traceparent"] for a in asked] == [traceparent_of(s) for s in attempts]

    # ledgerd's failover is a call on a1; a2's calls hang under a2.
    def named(spans, suffix):
        return [s for s in ledgerd_spans(spans, rid) if s.name.endswith(suffix)]
    spans = stack.wait(lambda s: named(s, "/failover") and named(s, "/finish"), "ledgerd's spans")
    assert {s.parent_span_id for s in named(spans, "/failover")} == {first.span_id}
    assert {s.parent_span_id for s in named(spans, "/finish")} == {second.span_id}


def post_raw(stack, fields):
    """A streamed completion whose head has exactly @fields beside its own (repeats too);
    returns (status, x-request-id, body)."""
    gw = stack.gateway
    body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    head = ["POST /v1/chat/completions HTTP/1.1", "Host: gw", "Connection: close",
            "Content-Type: application/json", "Content-Length: %d" % len(body), *fields]
    with socket.create_connection((gw.host, gw.port), timeout=30) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    rid = next(x.split(":", 1)[1].strip() for x in lines if x.lower().startswith("x-request-id:"))
    return int(lines[0].split()[1]), rid, rest.decode("utf-8", "replace")


@pytest.mark.parametrize("fields", [
    ["traceparent: 00-%s-%s-01" % (TRACE_ID.upper(), PARENT_ID)],
    ["traceparent: " + TRACEPARENT, "traceparent: " + TRACEPARENT],
    ["traceparent: 00-%s-%s-01" % ("0" * 32, PARENT_ID)],
    ["traceparent: ff-%s-%s-01" % (TRACE_ID, PARENT_ID)],
    ["traceparent: 00-%s-%s-01-extra" % (TRACE_ID, PARENT_ID)],
], ids=["upper-case", "twice", "zero-trace", "version-ff", "version-00-longer"])
def test_a_malformed_traceparent_starts_a_new_trace_and_is_never_refused(stack, fields):
    status, rid, body = post_raw(stack, fields)
    assert status == 200 and "traced" in body, body
    _, server, [at] = request_done(stack, rid, 1)
    assert server.parent_span_id == "" and server.trace_id not in (TRACE_ID, "0" * 32)
    assert at.trace_id == server.trace_id
    [asked] = stack.plan.completions(rid)
    assert asked["headers"]["traceparent"] == traceparent_of(at)


def test_a_refusal_names_its_code_as_error_type(stack):
    status, headers, body = stack.post({"traceparent": TRACEPARENT,
                                        "Idempotency-Key": "two words"})
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_idempotency_key"
    rid = headers["x-request-id"]
    spans = stack.wait(lambda s: any(x.attributes.get("ledger.request_id") == rid
                                     for x in s), "the refusal's span")
    server = server_span(spans, rid)
    assert server.attributes["http.response.status_code"] == 400
    assert server.attributes["error.type"] == "invalid_idempotency_key"
    assert server.status["code"] != STATUS_ERROR  # a 4xx is the client's, not the server's
    assert server.parent_span_id == PARENT_ID
    assert stack.plan.completions(rid) == []
    # The polling thread's line of the refusal names the request's span.
    lines = wait_until(lambda: [x for x in read_json_lines(stack.gateway.log_path)
                                if x.get("request_id") == rid and x.get("msg") == "refused"], 5)
    assert lines and (lines[0]["trace_id"], lines[0]["span_id"]) == (TRACE_ID, server.span_id)


def test_a_repeat_of_a_key_is_a_span_of_its_own_that_says_which_row_answered(json_stack):
    stack = json_stack
    key = "order-%s" % uuid.uuid4().hex
    status, headers, first = stack.post({"traceparent": TRACEPARENT, "Idempotency-Key": key})
    assert status == 200
    rid = headers["x-request-id"]
    request_done(stack, rid, 1)
    again_parent = "00-%s-%s-01" % ("ab" * 16, "cd" * 8)
    status, headers, again = stack.post({"traceparent": again_parent, "Idempotency-Key": key})
    assert status == 200 and headers["idempotent-replayed"] == "true" and again == first
    spans = stack.wait(lambda s: len([x for x in s if service(x) == "ledger-gateway"
                                      and x.kind == SERVER
                                      and x.attributes.get("ledger.request_id") == rid]) == 2,
                       "the repeat's span")
    repeat = next(x for x in spans if x.trace_id == "ab" * 16 and x.kind == SERVER
                  and service(x) == "ledger-gateway")
    assert repeat.attributes["ledger.repeat"] is True
    assert repeat.attributes["ledger.repeat.row"] == 2
    assert repeat.attributes["ledger.keyed"] is True
    assert repeat.attributes["ledger.outcome"] == "completed"
    assert repeat.attributes["ledger.attempts"] == 1
    assert attempt_spans(spans, repeat) == []  # nothing ran again
    # The key is a secret: never an attribute.
    assert all(key not in json.dumps(x.attributes) for x in spans)


def test_a_resume_is_the_repeats_span_and_the_run_goes_on_under_the_first(json_stack):
    stack = json_stack
    key = "resume-%s" % uuid.uuid4().hex
    with stack.plan.lock:
        stack.plan.delay_s = 1.5
    # The first client leaves before the first byte; its run goes on for the hold.
    gw = stack.gateway
    body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    s = socket.create_connection((gw.host, gw.port))
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
               "Content-Type: application/json\r\nContent-Length: %d\r\n"
               "Idempotency-Key: %s\r\ntraceparent: %s\r\n\r\n"
               % (len(body), key, TRACEPARENT)).encode() + body)
    time.sleep(0.4)
    s.close()
    time.sleep(0.3)
    again_parent = "00-%s-%s-01" % ("ef" * 16, "12" * 8)
    status, headers, text = stack.post({"traceparent": again_parent, "Idempotency-Key": key})
    assert status == 200 and "traced" in text, text
    rid = headers["x-request-id"]
    spans = stack.wait(lambda s: len([x for x in s if service(x) == "ledger-gateway"
                                      and x.kind == SERVER
                                      and x.attributes.get("ledger.request_id") == rid]) == 2
                       and len([x for x in s if x.kind == CLIENT and x.trace_id == TRACE_ID
                                and x.attributes.get("ledger.attempt.outcome")]) >= 1,
                       "both requests' spans")
    servers = [x for x in spans if service(x) == "ledger-gateway" and x.kind == SERVER
               and x.attributes.get("ledger.request_id") == rid]
    first = next(x for x in servers if x.trace_id == TRACE_ID)
    repeat = next(x for x in servers if x.trace_id == "ef" * 16)
    # The first left before any answer: its span says so.
    assert first.attributes["error.type"] == "connection_closed"
    assert first.status["code"] == STATUS_ERROR and events(first, "client_disconnected")
    # The repeat attached to its run (row 4) and names the span it attached to.
    assert repeat.attributes["ledger.repeat.row"] == 4
    assert (repeat.attributes["ledger.original.trace_id"],
            repeat.attributes["ledger.original.span_id"]) == (TRACE_ID, first.span_id)
    assert events(repeat, "resumed") and not events(repeat, "client_disconnected")
    # One attempt, under the first request's span; the run's events went to the repeat's.
    [attempt] = attempt_spans(spans, first)
    assert attempt_spans(spans, repeat) == []
    assert events(repeat, "first_delta") and not events(first, "first_delta")
    assert repeat.attributes["ledger.outcome"] == "completed"
    assert len(stack.plan.completions(rid)) == 1


def leave_before_first_byte(gw, key, traceparent, after_s):
    """A keyed streamed completion whose client closes its connection after @after_s."""
    body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    s = socket.create_connection((gw.host, gw.port))
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
               "Content-Type: application/json\r\nContent-Length: %d\r\n"
               "Idempotency-Key: %s\r\ntraceparent: %s\r\n\r\n"
               % (len(body), key, traceparent)).encode() + body)
    time.sleep(after_s)
    s.close()


def test_a_repeat_of_an_abandoned_request_runs_its_next_attempt_under_its_own_span(json_stack):
    stack = json_stack
    gw = stack.start_gateway(stack.traced_env(), "gateway-short-hold.log",
                             ("--first-byte-hold-ms", 200))
    try:
        key = "abandoned-%s" % uuid.uuid4().hex
        first_trace, again_trace = "a1" * 16, "b2" * 16
        with stack.plan.lock:
            stack.plan.delay_s = 1.0
        leave_before_first_byte(gw, key, "00-%s-%s-01" % (first_trace, "01" * 8), 0.2)
        # Its hold ran out: the attempt was cancelled, the request abandoned.
        def gateway_attempts(spans, trace_id):
            return [x for x in spans if x.trace_id == trace_id and x.kind == CLIENT
                    and service(x) == "ledger-gateway"]
        spans = stack.wait(lambda s: gateway_attempts(s, first_trace),
                           "the abandoned attempt's span")
        [a1] = gateway_attempts(spans, first_trace)
        assert a1.attributes["ledger.attempt.outcome"] == "cancelled"
        assert a1.attributes["ledger.attempt_id"] == "a1" and not events(a1, "first_delta")
        with stack.plan.lock:
            stack.plan.delay_s = 0
        status, headers, text = stack.post(
            {"traceparent": "00-%s-%s-01" % (again_trace, "02" * 8), "Idempotency-Key": key},
            gateway=gw)
        assert status == 200 and "traced" in text, text
        rid = headers["x-request-id"]
        spans = stack.wait(lambda s: gateway_attempts(s, again_trace), "the repeat's attempt")
        repeat = server_span([x for x in spans if x.trace_id == again_trace], rid)
        assert repeat.attributes["ledger.repeat.row"] == 9
        [a2] = attempt_spans(spans, repeat)
        assert a2.attributes["ledger.attempt_id"] == "a2"
        assert a2.attributes["ledger.attempt.outcome"] == "finished"
        assert repeat.attributes["ledger.attempts"] == 2
        assert repeat.attributes["ledger.outcome"] == "completed"
        first = server_span([x for x in spans if x.trace_id == first_trace], rid)
        assert a1.parent_span_id == first.span_id and events(first, "client_disconnected")
    finally:
        gw.stop()


def test_a_take_over_reports_the_dead_gateways_attempt_in_the_repeats_trace(json_stack):
    stack = json_stack
    dead = stack.start_gateway(stack.traced_env(), "gateway-killed.log")
    key = "taken-over-%s" % uuid.uuid4().hex
    with stack.plan.lock:
        stack.plan.delay_s = 2.0
    try:
        leave_before_first_byte(dead, key, TRACEPARENT, 0.5)
        dead.proc.kill()  # its attempt stays live in ledgerd until its lease runs out
    finally:
        dead.stop()
    with stack.plan.lock:
        stack.plan.delay_s = 0
    again = "c3" * 16
    # Row 5 until the dead gateway's lease ran out, then row 6.
    deadline = time.monotonic() + 15
    while True:
        status, headers, text = stack.post({"traceparent": "00-%s-%s-01" % (again, "03" * 8),
                                            "Idempotency-Key": key})
        if status != 409 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert status == 200 and "traced" in text, text
    rid = headers["x-request-id"]

    def repeat_of(spans):
        return [x for x in spans if x.trace_id == again and service(x) == "ledger-gateway"
                and x.kind == SERVER and x.attributes.get("ledger.repeat.row") == 6]
    spans = stack.wait(lambda s: repeat_of(s) and attempt_spans(s, repeat_of(s)[0])
                       and [x for x in ledgerd_spans(s, rid) if x.name.endswith("/failover")],
                       "the take-over's spans")
    [repeat] = repeat_of(spans)
    [failover] = events(repeat, "failover")
    assert failover["attributes"] == {"ledger.signal": "heartbeat_timeout",
                                      "ledger.action": "retry_prefill",
                                      "ledger.attempt_id": "a1",
                                      "ledger.next_attempt_id": "a2"}
    [a2] = attempt_spans(spans, repeat)
    assert a2.attributes["ledger.attempt_id"] == "a2"
    assert repeat.attributes["ledger.attempts"] == 2
    # ledgerd's span of the dead gateway's failover is in the repeat's trace, under its span.
    [reported] = [x for x in ledgerd_spans(spans, rid) if x.name.endswith("/failover")]
    assert (reported.trace_id, reported.parent_span_id) == (again, repeat.span_id)


def test_a_whole_answer_is_traced_as_a_stream_is(stack):
    status, headers, body = stack.post({"traceparent": TRACEPARENT},
                                       body={"model": "m", "messages": [], "stream": False})
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "hello traced"
    rid = headers["x-request-id"]
    _, server, [at] = request_done(stack, rid, 1)
    assert server.attributes["http.response.status_code"] == 200
    assert at.attributes["ledger.attempt.outcome"] == "finished"
    assert server.attributes["ledger.outcome"] == "completed"
    assert len(events(at, "first_delta")) == 1 and len(events(server, "first_delta")) == 1
    assert [a["headers"]["traceparent"] for a in stack.plan.completions(rid)] == [
        traceparent_of(at)]


def test_metrics_count_the_tracers_work(stack):
    stack.post({"traceparent": TRACEPARENT})
    stack.wait(lambda s: len(s) > 0, "a span")

    def exported():
        conn = http.client.HTTPConnection(stack.gateway.host, stack.gateway.port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        values = dict(line.rsplit(" ", 1) for line in text.splitlines()
                      if line.startswith("ledger_trace_"))
        return values if int(values["ledger_trace_spans_exported_total"]) > 0 else None
    values = wait_until(exported, 10)
    assert values, "no exported span counted"
    assert set(values) == {"ledger_trace_spans_exported_total", "ledger_trace_spans_dropped_total",
                           "ledger_trace_spans_failed_total", "ledger_trace_exports_failed_total"}
    assert values["ledger_trace_spans_dropped_total"] == "0"


def test_tracing_off_still_passes_the_clients_context_on(json_stack, tmp_path):
    stack = json_stack
    env = env_without_otel()
    env["GATEWAY_KEY_SECRET"] = SECRET
    gw = stack.start_gateway(env, "gateway-untraced.log")
    try:
        status, headers, _ = stack.post({"traceparent": TRACEPARENT}, gateway=gw)
        assert status == 200
        rid = headers["x-request-id"]
        # As it came: no span of the gateway's in between.
        [asked] = stack.plan.completions(rid)
        assert asked["headers"]["traceparent"] == TRACEPARENT
        # ledgerd's spans of the attempt are children of the client's span itself.
        spans = stack.wait(lambda s: any(x.name.endswith("/finish")
                                         for x in ledgerd_spans(s, rid)), "ledgerd's spans")
        assert {x.parent_span_id for x in ledgerd_spans(spans, rid)} == {PARENT_ID}
        time.sleep(0.3)
        assert not [x for x in stack.spans() if service(x) == "ledger-gateway"
                    and x.attributes.get("ledger.request_id") == rid]
    finally:
        gw.stop()


# --- the one trace across the whole path ---------------------------------------


def node_ready():
    """otel-node's pinned packages installed (npm ci, once, under a lock)."""
    NODE_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(NODE_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        lock = json.loads((NODE_DIR / "package-lock.json").read_text())
        def installed(path, entry):
            try:
                return json.loads((NODE_DIR / path / "package.json").read_text())[
                    "version"] == entry["version"]
            except (OSError, ValueError, KeyError):
                return False
        if not all(installed(p, e) for p, e in lock["packages"].items()
                   if p.startswith("node_modules/") and "version" in e):
            done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                                  cwd=NODE_DIR, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-4000:]


def test_one_trace_from_the_js_client_through_the_gateway_an_engines_claim_and_ledgerd(
        json_stack):
    stack = json_stack
    node_ready()
    with stack.plan.lock:
        stack.plan.claim = (stack.ledgerd.url, stack.token)
    done = subprocess.run(["node", str(NODE_DIR / "client.mjs"), stack.gateway.url,
                           stack.receiver.url + "/v1/traces"],
                          cwd=NODE_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["text"] == "hello traced"
    rid, trace_id = out["request_id"], out["trace_id"]
    [(claim_status, claim)] = stack.plan.claims
    assert claim_status == 201 and claim["status"] == "claimed", claim

    def whole(spans):
        mine = [s for s in spans if s.trace_id == trace_id]
        names = {(service(s), s.name) for s in mine}
        return (("agent", "agent turn") in names
                and ("ledgerd", "POST /v1/requests/{rid}/tool-calls/{cid}/claim") in names
                and ("ledgerd", "claim") in names
                and any(service(s) == "ledger-gateway" and s.kind == CLIENT for s in mine)
                and any(n == "POST /v1/requests/{rid}/attempts/{aid}/finish"
                        for _, n in names))
    spans = [s for s in stack.wait(whole, "the whole trace", timeout=15)
             if s.trace_id == trace_id]

    def one(pred, what):
        found = [s for s in spans if pred(s)]
        assert len(found) == 1, (what, [(service(s), s.name) for s in found])
        return found[0]

    client = one(lambda s: service(s) == "agent", "the client span")
    server = one(lambda s: service(s) == "ledger-gateway" and s.kind == SERVER, "the request")
    attempt = one(lambda s: service(s) == "ledger-gateway" and s.kind == CLIENT, "the attempt")
    claim_span = one(lambda s: service(s) == "ledgerd"
                     and s.name == "POST /v1/requests/{rid}/tool-calls/{cid}/claim", "the claim")
    db = one(lambda s: service(s) == "ledgerd" and s.name == "claim", "the claim's transaction")

    # Every span of the path is the child of the one before it, in one trace.
    assert client.span_id == out["span_id"] and client.parent_span_id == ""
    assert server.parent_span_id == client.span_id
    assert server.attributes["ledger.request_id"] == rid
    assert attempt.parent_span_id == server.span_id
    assert claim_span.parent_span_id == attempt.span_id
    assert claim_span.attributes["ledger.attempt_id"] == attempt.attributes["ledger.attempt_id"]
    assert db.parent_span_id == claim_span.span_id and db.kind == CLIENT
    assert db.attributes["db.system.name"] == "postgresql"
    # And ledgerd's spans of the attempt's own calls under the attempt.
    attempt_calls = [s for s in spans if service(s) == "ledgerd" and "/attempts" in s.name]
    assert {s.name for s in attempt_calls} >= {"POST /v1/requests/{rid}/attempts",
                                               "POST /v1/requests/{rid}/attempts/{aid}/deliver",
                                               "POST /v1/requests/{rid}/attempts/{aid}/finish"}
    assert {s.parent_span_id for s in attempt_calls} == {attempt.span_id}
