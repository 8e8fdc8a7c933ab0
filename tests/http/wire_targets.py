"""The three servers on the project's HTTP/1.1 layer (api/wire/), as the wire
cases of test_wire.py see them: ledgerd itself, ledger-gateway in front of a
replica, and ledger-mcp in front of a plain HTTP upstream. Each target says
where it listens and which requests of its own play each part in a case: a
GET answered 200, a path that does not exist, a POST whose body is read,
and a request whose answer waits on something slower than the wire.
"""

import http.server
import json
import os
import subprocess
import threading
import time
from pathlib import Path

from conftest import LEDGERD
from gatewayproc import Gateway, Replica

LEDGER_MCP = Path(os.environ.get("LEDGER_MCP", LEDGERD.parent / "ledger-mcp")).resolve()

# How long the slow answer of each target waits on its upstream.
SLOW_S = 1.5


class Target:
    """What a wire case needs of a server."""

    def __init__(self, name, host, port, pid, body_target, body_headers, body, body_status,
                 max_body, slow):
        self.name = name
        self.host = host
        self.port = port
        self.pid = pid
        self.ok_target = "/healthz"      # GET: 200, small, with a Content-Length
        self.missing_target = "/nope"    # GET: 404
        self._body_target = body_target  # POST: the body is read before the answer ({n}: new)
        self.body_headers = body_headers
        self.body = body                 # a body that target answers body_status
        self.body_status = body_status
        self.max_body = max_body         # bytes of body it reads; more: 413
        self.slow = slow                 # (raw request, status): its answer waits SLOW_S
        self._n = 0

    def body_path(self):
        """The POST target, with a key no earlier case used."""
        self._n += 1
        return self._body_target.replace("{n}", "%d-%d" % (os.getpid(), self._n))


class _Upstream(http.server.BaseHTTPRequestHandler):
    """ledger-mcp's upstream: /healthz 200, /slow 200 after SLOW_S, a POST
    answered with the length of its body, anything else 404."""

    protocol_version = "HTTP/1.1"

    def _answer(self, status, doc, body=True):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self):
        if self.path == "/slow":
            time.sleep(SLOW_S)
        if self.path in ("/healthz", "/slow"):
            self._answer(200, {"ok": True})
        else:
            self._answer(404, {"error": "no such path"})

    def do_HEAD(self):
        self._answer(200 if self.path == "/healthz" else 404, {"ok": True}, body=False)

    def do_POST(self):
        n = len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self._answer(200, {"read": n})

    def log_message(self, *args):
        pass


class Upstream:
    def __init__(self):
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()


class McpProxy:
    """build/ledger-mcp http in front of @upstream_url."""

    def __init__(self, upstream_url, ledger_url, token, log_path):
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [str(LEDGER_MCP), "http", "--listen", "127.0.0.1:0", "--upstream", upstream_url,
             "--ledger-url", ledger_url, "--token", token],
            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in self.proc.stderr:
            self._log.write(line)
            entry = json.loads(line)
            if entry.get("msg") == "listening":
                self.host, port = entry["address"].rsplit(":", 1)
                self.port = int(port)
                break
        else:
            raise AssertionError("ledger-mcp exited %s" % self.proc.wait())
        self._pump = threading.Thread(target=self._copy, daemon=True)
        self._pump.start()

    def _copy(self):
        for line in self.proc.stderr:
            self._log.write(line)
            self._log.flush()

    def close(self):
        self.proc.terminate()
        rc = self.proc.wait(timeout=20)
        self._pump.join(timeout=5)
        self._log.close()
        assert rc == 0, "ledger-mcp exited %s on SIGTERM" % rc


def raw_post(target, body, headers=()):
    lines = ["POST %s HTTP/1.1" % target, "Host: ledgerd", "Content-Length: %d" % len(body)]
    lines += ["%s: %s" % h for h in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def ledger_url(service):
    return "http://%s:%d" % (service.ledgerd.host, service.ledgerd.port)


def ledgerd_target(service):
    led, token = service.ledgerd, service.token()
    auth = [("Authorization", "Bearer " + token)]
    return Target("ledgerd", led.host, led.port, led.proc.pid,
                  body_target="/v1/requests/wire-{n}/tool-calls/call_01/claim",
                  body_headers=auth,
                  body=b'{"claim_id": "0123456789abcdef0123"}', body_status=201,
                  max_body=1 << 20, slow=None)


def start(name, service, tmp):
    """The target @name, started for @service's ledgerd; returns (target, close)."""
    if name == "ledgerd":
        return ledgerd_target(service), lambda: None
    if name == "ledger-gateway":
        replica = Replica(slow_s=SLOW_S)
        gw = Gateway(ledger_url(service), service.token("router"), replica.url)
        slow = raw_post("/v1/chat/completions",
                        b'{"model": "m", "messages": ["slow"], "stream": true}')

        def close():
            gw.close()
            replica.close()
        return Target(name, gw.address[0], gw.address[1], gw.proc.pid,
                      body_target="/v1/chat/completions", body_headers=[],
                      body=b'{"stream": "no"}', body_status=400, max_body=1 << 20, slow=(slow, 200)), close
    upstream = Upstream()
    mcp = McpProxy("http://127.0.0.1:%d/mcp" % upstream.port, ledger_url(service),
                   service.token(), tmp / "ledger-mcp.log")
    slow = b"GET /slow HTTP/1.1\r\nHost: ledgerd\r\n\r\n"

    def close():
        mcp.close()
        upstream.close()
    return Target(name, mcp.host, mcp.port, mcp.proc.pid, body_target="/echo",
                  body_headers=[], body=b"{}", body_status=200, max_body=32 << 20,
                  slow=(slow, 200)), close
