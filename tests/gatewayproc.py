"""The reference gateway as a test's process, and the smallest replica it can
stream from: what tests/sdk/test_tls_clients.py and
tests/integration/test_tls.py share to drive build/ledger-gateway through one
completion. (tests/faults/ has the full fake replica, with its faults.)
"""

import http.client
import http.server
import json
import os
import subprocess
import threading
import time

from conftest import LEDGERD

GATEWAY = LEDGERD.parent / "ledger-gateway"

REPLY = "hello over a verified ledger"


class _Replica(http.server.BaseHTTPRequestHandler):
    """Tells what it runs (GET /v1/replica/info) and streams one chunk of REPLY,
    then [DONE]. It keeps the ledger headers of every completion it served."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b'{"weights_revision": "w1", "tokenizer": "t1"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if b'"slow"' in body:  # a prompt that takes a while before its first token
            time.sleep(self.server.slow_s)
        self.server.served.append((self.headers.get("X-Ledger-Request-Id"),
                                   self.headers.get("X-Ledger-Attempt-Id")))
        chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake",
                 "choices": [{"index": 0, "delta": {"content": REPLY},
                              "finish_reason": None}]}
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def log_message(self, *args):
        pass


class Replica:
    """A _Replica on a free loopback port; .url, .served; close() when done. A
    completion whose body says "slow" waits @slow_s before its first event."""

    def __init__(self, slow_s=0):
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Replica)
        self._server.daemon_threads = True
        self._server.served = []
        self._server.slow_s = slow_s
        self.url = "http://127.0.0.1:%d" % self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def served(self):
        return list(self._server.served)

    def close(self):
        self._server.shutdown()
        self._server.server_close()


class Gateway:
    """build/ledger-gateway in front of one replica, asking the ledger at @ledger_url
    with @token; @args are more flags, @env the whole environment."""

    def __init__(self, ledger_url, token, replica_url, args=(), env=None):
        self.lines = []
        self.proc = subprocess.Popen(
            [str(GATEWAY), "--listen", "127.0.0.1:0", "--ledger-url", ledger_url,
             "--ledger-token", token, "--replica", "r1=" + replica_url]
            + [str(a) for a in args],
            env=env if env is not None else dict(os.environ), stderr=subprocess.PIPE,
            text=True)
        for line in self.proc.stderr:
            entry = json.loads(line)
            self.lines.append(entry)
            if "address" in entry:
                self.listening = entry
                host, port = entry["address"].rsplit(":", 1)
                self.address = (host, int(port))
                break
        else:
            raise AssertionError("the gateway exited %s" % self.proc.wait())
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(json.loads(line))

    def complete(self):
        """One streamed completion: (status, headers as a lowercase dict, body text)."""
        conn = http.client.HTTPConnection(*self.address, timeout=60)
        try:
            conn.request("POST", "/v1/chat/completions",
                         body=json.dumps({"model": "m", "messages": [], "stream": True}),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            headers = {k.lower(): v for k, v in r.getheaders()}
            return r.status, headers, r.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def close(self):
        self.proc.terminate()
        rc = self.proc.wait(timeout=10)
        self._pump.join(timeout=5)
        assert rc == 0, "the gateway exited %s on SIGTERM" % rc
