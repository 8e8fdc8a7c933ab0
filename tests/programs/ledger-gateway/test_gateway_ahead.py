"""ledger-gateway asks the engine while ledgerd begins the attempt (the
README's "The engine asked ahead of the begin"), and publishes nothing of
it before the begin and the first deliver are confirmed.

A small proxy stands between the gateway and the module's ledgerd: it
passes every call on, and on command answers the begin itself (a refusal
that never reaches ledgerd) or holds ledgerd's answer to a begin or a
deliver for a while. It notes when it sent each answer, so that the
client's first byte can be set against the answers it needed. The engines
are the stand-in vLLM of tests/engines/fakes/ (no X-Ledger-* headers: asked
ahead) and one declared `runs_tools: true` (asked only once the attempt
exists).
"""

import http.client
import json
import re
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_gateway_engines import (TIMING, VLLM_MODEL, Setup, content, sse_data,  # noqa: F401
                                  stack, wait_state)
from stack import wait_until

BEGIN = re.compile(r"^/v1/requests/[^/]+/attempts$")
DELIVER = re.compile(r"^/v1/requests/[^/]+/attempts/[^/]+/deliver$")
# API.md's refusal of a begin when the pool's retry budget is spent (a 503 the
# client retries would be retried by the gateway's client first).
POOL_SPENT = (409, {"error": {"code": "retry_budget_exhausted", "message": "spent",
                              "budget": "pool", "retry_after_ms": 2000}})


class LedgerProxy:
    """ledgerd behind a proxy that can refuse or hold a begin, and hold a deliver."""

    def __init__(self, ledger_url):
        target = urllib.parse.urlsplit(ledger_url)
        self.lock = threading.Lock()
        self.refuse_begin = None  # (status, body) answered to POST .../attempts
        self.hold = {"begin": 0.0, "deliver": 0.0}  # seconds ledgerd's answer is held
        self.answered = []  # (what, status, monotonic time the answer went out)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _pass_on(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                path = self.path.split("?", 1)[0]
                what = ("begin" if self.command == "POST" and BEGIN.match(path) else
                        "deliver" if self.command == "POST" and DELIVER.match(path) else
                        "other")
                with proxy.lock:
                    refusal = proxy.refuse_begin if what == "begin" else None
                    hold = proxy.hold.get(what, 0.0)
                if refusal is not None:
                    status, data = refusal[0], json.dumps(refusal[1]).encode()
                    ctype = "application/json"
                else:
                    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in ("host", "connection", "content-length")}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    r = conn.getresponse()
                    status, data = r.status, r.read()
                    ctype = r.getheader("Content-Type") or "application/json"
                    conn.close()
                    if hold:
                        time.sleep(hold)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                with proxy.lock:
                    proxy.answered.append((what, status, time.monotonic()))

            do_GET = do_POST = do_PUT = do_DELETE = _pass_on

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answers(self, what):
        with self.lock:
            return [(status, t) for w, status, t in self.answered if w == what]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def setup(stack, tmp_path):
    s = Setup(stack, tmp_path)
    proxy = LedgerProxy(stack.ledger_url)
    # The gateway talks to ledgerd through the proxy.
    s.stack = type("Via", (), {"ledger_url": proxy.url})()
    s.proxy = proxy
    s.real_ledger_url = stack.ledger_url
    yield s
    s.close()
    proxy.close()


def timeline(setup, rid):
    from stack import http_json
    status, body = http_json(setup.real_ledger_url, path="/v1/requests/" + rid,
                             token=setup.token)
    return body if status == 200 else None


def stream_timed(gw, headers=None, **fields):
    """POSTs a streamed chat; returns (status, headers, raw body, monotonic time of its
    first byte)."""
    body = json.dumps({"model": VLLM_MODEL, "messages": [{"role": "user", "content": "hi"}],
                       "stream": True, "max_tokens": 8, **fields}).encode()
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body))
    for k, v in (headers or {}).items():
        head += "%s: %s\r\n" % (k, v)
    s = socket.create_connection((gw.host, gw.port), timeout=30)
    first = None
    raw = b""
    try:
        s.sendall(head.encode() + b"\r\n" + body)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            if first is None:
                first = time.monotonic()
            raw += chunk
    finally:
        s.close()
    head_text, _, rest = raw.partition(b"\r\n\r\n")
    lines = head_text.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    if hdrs.get("transfer-encoding") == "chunked":
        body_bytes, rest_ = b"", rest
        while rest_:
            size_line, _, rest_ = rest_.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            body_bytes += rest_[:size]
            rest_ = rest_[size + 2:]
        rest = body_bytes
    return status, hdrs, rest, first


def engine_chats(engine):
    """The chat requests @engine was asked, in order."""
    return engine.requests()


def test_a_refused_begin_cuts_the_engine_asked_ahead_and_answers_as_before(setup):
    e = setup.engine("e1", "vllm", "--chunk-delay-ms", "300")
    gw = setup.start_gateway("--replica", "e1=" + e.url)
    assert wait_state(gw, "e1", "healthy")
    setup.proxy.refuse_begin = POOL_SPENT
    status, headers, raw, _ = stream_timed(gw)
    # The answer to a refused begin, as it always was: nothing of the engine's.
    assert status == 503, raw
    error = json.loads(raw)["error"]
    assert error["code"] == "retry_budget_exhausted" and error["retryable"] is True
    assert headers["x-should-retry"] == "true" and int(headers["retry-after"]) >= 1
    assert b"data:" not in raw
    # The engine was asked before the begin came back, and its stream was cut unread.
    chats = engine_chats(e)
    assert len(chats) == 1
    assert wait_until(lambda: engine_chats(e)[0]["outcome"] == "client_closed", 10), \
        engine_chats(e)
    assert engine_chats(e)[0]["chunks"] < 8
    assert len(setup.proxy.answers("begin")) == 1
    assert timeline(setup, headers["x-request-id"]) is None  # ledgerd never heard of it


def test_a_keyed_request_refused_by_its_budget_keeps_its_answer(setup):
    e = setup.engine("e1", "vllm", "--chunk-delay-ms", "300")
    gw = setup.start_gateway("--replica", "e1=" + e.url,
                             env={"GATEWAY_KEY_SECRET": "s" * 32})
    assert wait_state(gw, "e1", "healthy")
    setup.proxy.refuse_begin = (409, {"error": {"code": "retry_budget_exhausted",
                                                "message": "spent", "budget": "request"}})
    status, headers, raw, _ = stream_timed(gw, headers={"Idempotency-Key": "ahead-1"})
    assert status == 503, raw
    assert json.loads(raw)["error"]["code"] == "retry_budget_exhausted"
    assert headers["x-should-retry"] == "false"
    assert b"data:" not in raw
    assert wait_until(lambda: all(c["outcome"] == "client_closed" for c in engine_chats(e)),
                      10), engine_chats(e)
    assert len(engine_chats(e)) == 1


def test_a_slow_begin_and_deliver_hold_the_first_byte_while_the_engine_is_asked_at_once(setup):
    e = setup.engine("e1", "vllm")
    gw = setup.start_gateway("--replica", "e1=" + e.url)
    assert wait_state(gw, "e1", "healthy")
    setup.proxy.hold["begin"] = 1.0
    setup.proxy.hold["deliver"] = 0.5
    wall, mono = time.time(), time.monotonic()
    status, headers, raw, first = stream_timed(gw)
    assert status == 200, raw
    assert sse_data(raw)[-1] == "[DONE]" and content(raw)
    (begin_status, begun_at), = setup.proxy.answers("begin")
    (deliver_status, delivered_at), = setup.proxy.answers("deliver")
    assert begin_status == 201 and deliver_status == 200
    # No byte before the begin and the first deliver were confirmed.
    assert first >= delivered_at > begun_at
    # The engine had the request long before the begin's answer: asked ahead.
    chat = engine_chats(e)[0]
    asked_at = mono + (chat["t"] - wall)
    assert asked_at < begun_at - 0.5, (asked_at, begun_at)
    rid = headers["x-request-id"]
    request = timeline(setup, rid)["request"]
    assert request["status"] == "completed" and request["first_delta_sent"] is True


def test_a_replica_that_runs_tools_is_asked_only_once_the_attempt_exists(setup):
    e = setup.engine("e1", "vllm")
    config = setup.config([{"name": "e1", "url": e.url, "kind": "vllm", "runs_tools": True}])
    gw = setup.start_gateway("--config", config)
    assert wait_state(gw, "e1", "healthy")
    setup.proxy.refuse_begin = POOL_SPENT
    status, _, raw, _ = stream_timed(gw)
    assert status == 503, raw
    assert engine_chats(e) == []  # its X-Ledger-* headers need the attempt: never asked
    setup.proxy.refuse_begin = None
    setup.proxy.hold["begin"] = 0.8
    status, headers, raw, _ = stream_timed(gw)
    assert status == 200, raw
    chat = engine_chats(e)[0]
    assert chat["headers"]["x-ledger-attempt-id"] == "a1"
    assert chat["headers"]["x-ledger-request-id"] == headers["x-request-id"]


def test_a_begin_slower_than_the_stall_timeout_is_not_the_engines_silence(setup):
    e = setup.engine("e1", "vllm")
    # A lease that outlasts the begin's wait, a stall timeout that does not (the last
    # flag wins).
    gw = setup.start_gateway("--replica", "e1=" + e.url, "--lease-ms", "10000",
                             "--soft-timeout-ms", "500", "--stall-timeout-ms", "1000")
    assert wait_state(gw, "e1", "healthy")
    # The engine answered at once; ledgerd took longer than the stall timeout to begin.
    setup.proxy.hold["begin"] = 1.5
    status, headers, raw, _ = stream_timed(gw)
    assert status == 200, raw
    assert sse_data(raw)[-1] == "[DONE]" and content(raw)
    assert len(engine_chats(e)) == 1  # no rerun: the replica was never thought silent
    assert wait_state(gw, "e1", "healthy")
    request = timeline(setup, headers["x-request-id"])["request"]
    assert request["status"] == "completed" and request["attempts"] == 1
