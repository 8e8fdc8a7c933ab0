"""What Portkey's gateway (portkey_proc.py) does to a request and its answer,
probed against a fake OpenAI-compatible upstream, not ledger-gateway: the
tests that put Portkey in front of ledger-gateway rely on each behaviour here,
so a new Portkey that changes one fails here first, with the cause in view.

Found with @portkey-ai/gateway 1.15.2: it passes on only the client headers
its config names, as sent; it retries with the same Idempotency-Key, 1 s then
2 s apart, and no setting shortens that; it rewrites the request body and the
last error; it streams the upstream's bytes as they are; and it ends its
client's stream cleanly when the upstream's connection is cut mid-stream.
"""

import http.server
import json
import signal
import socket
import struct
import threading
import time

import pytest

import portkey_proc
from pgcluster import wait_for

KEY = "idem-4f0c/Key=Mixed.Case"           # an Idempotency-Key, kept as sent
CLIENT_AUTH = "Bearer ledger-Tok.3n/AbC=="  # the client's scope header
MESSAGES = [{"role": "user", "content": "hi"}]

FIRST = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n'
# A stream whose framing a re-framing proxy would change: a comment, a named
# event, CRLF line ends, and a final error event with no [DONE] after it.
ERROR_STREAM = [
    b": keep-alive\n\n",
    FIRST,
    b'event: message\r\ndata: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":null}]}\r\n\r\n',
    b'data: {"error":{"message":"the replica was lost","type":"server_error","code":"replica_lost","request_id":"r-1","retryable":true}}\n\n',
]
STREAM_ERROR = "Error during stream processing: openai TypeError: terminated"
BUSY = {"error": {"message": "busy", "type": "server_error", "code": "busy",
                  "request_id": "r-1", "retryable": True, "partial_output": ""}}


class _Handler(http.server.BaseHTTPRequestHandler):
    """Records every request, then answers as the server's .answer says."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append({"at": time.monotonic(), "path": self.path, "body": body,
                                 "headers": {k.lower(): v for k, v in self.headers.items()}})
        getattr(self, "_" + self.server.answer.replace("-", "_"))()

    def _send(self, status, body, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _completion(self):
        self._send(200, json.dumps({
            "id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                         "finish_reason": "stop"}]}).encode())

    def _busy(self):
        # x-should-retry: false asks OpenAI's own clients not to retry.
        self._send(503, json.dumps(BUSY).encode(), [("x-should-retry", "false")])

    def _slow_down(self):
        self._send(429, b'{"error":{"message":"slow down","type":"rate_limit"}}',
                   [("retry-after-ms", "10")])

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream_head(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _error_stream(self):
        self._stream_head()
        for event in ERROR_STREAM:
            self._chunk(event)
            time.sleep(0.05)
        self.wfile.write(b"0\r\n\r\n")

    def _cut(self, rst):
        """One event, then the connection ends before the chunked body does."""
        self._stream_head()
        self._chunk(FIRST)
        time.sleep(0.2)
        if rst:  # SO_LINGER 0: close() sends a reset
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _cut_fin(self):
        self._cut(False)

    def _cut_rst(self):
        self._cut(True)

    def log_message(self, *args):
        pass


class Upstream:
    """A fake OpenAI-compatible API on a free loopback port: .url (its /v1),
    .seen (the requests it got), .answer (how it answers: a _Handler method's name)."""

    def __init__(self):
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.seen = []
        self._server.answer = "completion"
        self.url = "http://127.0.0.1:%d/v1" % self._server.server_address[1]
        # A short poll: shutdown() waits for it, at every test's end.
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    @property
    def seen(self):
        return list(self._server.seen)

    @property
    def answer(self):
        return self._server.answer

    @answer.setter
    def answer(self, value):
        self._server.answer = value

    def close(self):
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def portkey(tmp_path_factory):
    pk = portkey_proc.Portkey(tmp_path_factory.mktemp("portkey") / "portkey.log")
    yield pk
    assert pk.stop() == -signal.SIGTERM, pk.log_tail()


@pytest.fixture
def upstream():
    up = Upstream()
    yield up
    up.close()


def only_request(upstream):
    seen = upstream.seen
    assert len(seen) == 1, seen
    assert seen[0]["path"] == "/v1/chat/completions", seen[0]
    return seen[0]


# (config's forward_headers, the request's x-portkey-forward-headers,
#  whether the key reaches the upstream, the Authorization it gets)
FORWARDING = [
    (None, None, False, "Bearer " + portkey_proc.CONFIG_API_KEY),
    (["Idempotency-Key"], None, True, "Bearer " + portkey_proc.CONFIG_API_KEY),
    (["idempotency-key", "authorization"], None, True, CLIENT_AUTH),
    # The request's list replaces the config's: authorization is no longer in it.
    (["authorization"], "idempotency-key", True, "Bearer " + portkey_proc.CONFIG_API_KEY),
    (["idempotency-key"], "idempotency-key, authorization", True, CLIENT_AUTH),
]


@pytest.mark.parametrize("config_list,request_list,key_forwarded,auth", FORWARDING,
                         ids=["none", "key", "key+auth", "request-replaces", "request-adds-auth"])
def test_only_the_forwarded_headers_reach_the_upstream_as_sent(
        portkey, upstream, config_list, request_list, key_forwarded, auth):
    headers = {"Idempotency-Key": KEY, "Authorization": CLIENT_AUTH, "X-Ledger-Scope": "s1"}
    if request_list is not None:
        headers["x-portkey-forward-headers"] = request_list
    status, _, body = portkey.chat({"model": "m", "messages": MESSAGES},
                                   portkey_proc.config(upstream.url, config_list), headers)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "ok", body
    got = only_request(upstream)["headers"]
    assert got.get("idempotency-key") == (KEY if key_forwarded else None), got
    assert got["authorization"] == auth, got
    # Every other client header is dropped, and Portkey's own (its config
    # carries the api_key) do not travel on.
    assert "x-ledger-scope" not in got, got
    assert not [k for k in got if k.startswith("x-portkey")], got


def test_retries_resend_the_same_key_after_1_then_2_seconds(portkey, upstream):
    upstream.answer = "busy"
    cfg = portkey_proc.config(upstream.url, ["idempotency-key"], retry_attempts=2, retry_on=[503])
    status, headers, body = portkey.chat({"model": "m", "messages": MESSAGES}, cfg,
                                         {"Idempotency-Key": KEY})
    seen = upstream.seen
    # attempts: 2 is 2 retries after the first request, though the upstream
    # said x-should-retry: false; each one carries the key as sent.
    assert len(seen) == 3, seen
    assert [s["headers"].get("idempotency-key") for s in seen] == [KEY] * 3
    assert len({s["body"] for s in seen}) == 1, seen
    # async-retry's defaults: 1 s, then twice the last wait; no setting of
    # Portkey's retry config changes them.
    gaps = [b["at"] - a["at"] for a, b in zip(seen, seen[1:])]
    assert 0.95 <= gaps[0] <= 2.0 and 1.95 <= gaps[1] <= 3.0, gaps
    # The client gets the last answer, rewritten: the message prefixed, the
    # error's other fields dropped.
    assert status == 503, body
    error = json.loads(body)["error"]
    assert error["message"] == "openai error: busy", body
    assert "request_id" not in error and "retryable" not in error, body
    assert "partial_output" not in error, body
    assert headers["x-portkey-retry-attempt-count"] == "-1", headers  # "retries exhausted"


def test_use_retry_after_header_fails_instead_of_shortening_the_wait(portkey, upstream):
    """The only setting that could shorten a wait, use_retry_after_header (on
    a 429 with retry-after-ms), throws in 1.15.2 as published: it sets a field
    of an object async-retry 1.3.3 never passes (a patch Portkey's repository
    applies and its package does not ship). The waits stay 1 s, 2 s, ...; the
    last 429 reaches the client as a 500."""
    upstream.answer = "slow_down"
    cfg = json.loads(portkey_proc.config(upstream.url, ["idempotency-key"], retry_attempts=1,
                                         retry_on=[429]))
    cfg["retry"]["use_retry_after_header"] = True
    status, _, body = portkey.chat({"model": "m", "messages": MESSAGES}, json.dumps(cfg),
                                   {"Idempotency-Key": KEY})
    seen = upstream.seen
    assert len(seen) == 2, seen
    assert [s["headers"].get("idempotency-key") for s in seen] == [KEY] * 2
    assert 0.95 <= seen[1]["at"] - seen[0]["at"] <= 2.0, seen
    assert status == 500 and b"Cannot set properties of undefined" in body, body


def test_the_request_body_is_rewritten(portkey, upstream):
    """What the upstream gets is Portkey's serialisation of the parameters it
    knows for OpenAI, not the client's bytes: compact, in its own order, and
    without unknown fields (a fingerprint of the client's body will not match)."""
    raw = (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false, '
           b'"ledger_extra": {"a": 1}, "metadata": {"b": 2}, "user": "u"}')
    status, _, body = portkey.request("POST", "/v1/chat/completions", raw, {
        "Content-Type": "application/json", "x-portkey-config": portkey_proc.config(upstream.url)})
    assert status == 200, body
    got = only_request(upstream)["body"]
    assert got == (b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,'
                   b'"user":"u","metadata":{"b":2}}'), got


def test_a_final_error_event_reaches_the_client_byte_for_byte(portkey, upstream):
    upstream.answer = "error_stream"
    status, headers, body = portkey.chat({"model": "m", "messages": MESSAGES, "stream": True},
                                         portkey_proc.config(upstream.url))
    assert status == 200, body
    assert headers["content-type"].startswith("text/event-stream"), headers
    assert body == b"".join(ERROR_STREAM)
    assert json.loads(only_request(upstream)["body"])["stream"] is True


@pytest.mark.parametrize("answer", ["cut_fin", "cut_rst"])
def test_a_cut_stream_ends_cleanly_for_the_client(portkey, upstream, answer):
    """Portkey's behaviour, not a contract: when the upstream's connection ends
    (closed, or reset) before its chunked body does, Portkey ends its own
    chunked body normally. Its client reads a complete 200 stream with no
    error event and no [DONE]; only Portkey's log tells it happened."""
    upstream.answer = answer
    logged = portkey.log_tail(None).count(STREAM_ERROR)
    # request() reads the chunked body to its last chunk, or raises IncompleteRead.
    status, headers, body = portkey.chat({"model": "m", "messages": MESSAGES, "stream": True},
                                         portkey_proc.config(upstream.url))
    assert status == 200, body
    assert headers.get("transfer-encoding") == "chunked", headers
    assert body == FIRST
    # Portkey did see the cut (the fake cut the stream, rather than ending it).
    wait_for(lambda: portkey.log_tail(None).count(STREAM_ERROR) == logged + 1, 5,
             "Portkey's log to report the cut")
