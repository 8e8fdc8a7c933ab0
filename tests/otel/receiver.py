"""An OTLP/HTTP trace receiver for tests: a threaded HTTP server on
127.0.0.1 that takes POST /v1/traces as http/json (application/json) and
http/protobuf (application/x-protobuf), the protobuf read with the official
schema (tests/otel/node/decode.mjs, the code @opentelemetry/otlp-transformer
generated from opentelemetry-proto), and keeps every span it decoded.

    with Receiver() as rx:
        ... point OTEL_EXPORTER_OTLP_ENDPOINT at rx.url ...
        spans = rx.wait_for(lambda s: s.name == "GET /v1/x", timeout=10)

rx.status = 503 makes it refuse every request from then on; rx.stop() makes
the endpoint vanish. Both encodings are normalized alike: ids as lowercase
hex, attributes as a dict of Python values whose types are OTLP's (str,
int, bool, float), so a test compares what the two carry, not how.
"""

import fcntl
import gzip
import json
import os
import ssl
import struct
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / "otel" / "node"
LOCK = ROOT / "build" / "otel-node.lock"
NPM_CI = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]


@contextmanager
def _locked(path=LOCK):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _installed_matches_lock():
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    for path, entry in lock["packages"].items():
        if not path.startswith("node_modules/") or "version" not in entry:
            continue
        try:
            got = json.loads((NODE_DIR / path / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            return False
        if got != entry["version"]:
            return False
    return True


def node_ready():
    """tests/otel/node's pinned packages installed (npm ci, once, under a lock)."""
    with _locked():
        if not _installed_matches_lock():
            done = subprocess.run(NPM_CI, cwd=NODE_DIR, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 0, "npm ci in %s failed:\n%s\n%s" % (
                NODE_DIR, done.stdout[-4000:], done.stderr[-4000:])


class ProtobufDecoder:
    """One long-lived `node decode.mjs`: a frame in, a line of JSON out."""

    def __init__(self):
        node_ready()
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(["node", str(NODE_DIR / "decode.mjs")], cwd=NODE_DIR,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def decode(self, body, kind=b"p"):
        """@body (protobuf, or with kind b"j" OTLP/JSON) as the schema reads it."""
        with self._lock:
            self._proc.stdin.write(struct.pack(">I", len(body) + 1) + kind + body)
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("decode.mjs ended")
        answer = json.loads(line)
        if "error" in answer:
            raise ValueError(answer["error"])
        return answer["ok"]

    def close(self):
        self._proc.stdin.close()
        self._proc.wait(timeout=10)


_decoder = None
_decoder_lock = threading.Lock()


def decoder():
    """The process's one decoder, started on first use."""
    global _decoder
    with _decoder_lock:
        if _decoder is None:
            _decoder = ProtobufDecoder()
        return _decoder


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root
    trace_state: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict
    events: list  # [{"name", "time_ns", "attributes"}]
    status: dict  # {"code": int, "message": str}
    flags: int
    resource: dict = field(default_factory=dict)
    scope: dict = field(default_factory=dict)
    protocol: str = ""
    headers: dict = field(default_factory=dict)


def _value(v):
    """An OTLP AnyValue (JSON mapping) as a Python value of its type."""
    if "stringValue" in v:
        return v["stringValue"]
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "intValue" in v:
        return int(v["intValue"])  # a string in OTLP/JSON; a number is allowed too
    if "doubleValue" in v:
        d = v["doubleValue"]
        return float(d) if not isinstance(d, str) else float(d.replace("Infinity", "inf"))
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return _attrs(v["kvlistValue"].get("values", []))
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def _attrs(kvs):
    return {kv["key"]: _value(kv.get("value") or {}) for kv in kvs or []}


def _hex(v):
    # OTLP/JSON says lowercase hex; a decoder that gave base64 would show here.
    return (v or "").lower() if isinstance(v, str) else ""


def spans_of(request, protocol="", headers=None):
    """The spans of one ExportTraceServiceRequest in its JSON mapping."""
    out = []
    for rs in request.get("resourceSpans", []) or []:
        resource = _attrs((rs.get("resource") or {}).get("attributes"))
        for ss in rs.get("scopeSpans", []) or []:
            scope = ss.get("scope") or {}
            for s in ss.get("spans", []) or []:
                status = s.get("status") or {}
                out.append(Span(
                    trace_id=_hex(s.get("traceId")),
                    span_id=_hex(s.get("spanId")),
                    parent_span_id=_hex(s.get("parentSpanId")),
                    trace_state=s.get("traceState") or "",
                    name=s.get("name") or "",
                    kind=int(s.get("kind") or 0),
                    start_ns=int(s.get("startTimeUnixNano") or 0),
                    end_ns=int(s.get("endTimeUnixNano") or 0),
                    attributes=_attrs(s.get("attributes")),
                    events=[{"name": e.get("name") or "", "time_ns": int(e.get("timeUnixNano") or 0),
                             "attributes": _attrs(e.get("attributes"))}
                            for e in s.get("events", []) or []],
                    status={"code": int(status.get("code") or 0),
                            "message": status.get("message") or ""},
                    flags=int(s.get("flags") or 0),
                    resource=resource,
                    scope={"name": scope.get("name") or "", "version": scope.get("version") or ""},
                    protocol=protocol,
                    headers=dict(headers or {}),
                ))
    return out


class Receiver:
    """The server; a context manager that stops it on exit."""

    def __init__(self, tls=None):
        """@tls: None, or (certificate, key) PEM files: then it serves https."""
        # The protobuf decoder is made ready before any export can come: started
        # by the first one (npm ci, node), a loaded machine could take longer than
        # the exporter waits, and the spans would be counted failed.
        decoder()
        self.spans = []
        self.requests = []  # (content type, headers, status answered)
        self.bodies = []    # (content type, body) of each request taken
        self.errors = []    # bodies that could not be read, with why
        self.status = 200
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    body = self._chunked()
                else:
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                    body = gzip.decompress(body)
                receiver._take(self, body)

            def _chunked(self):
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.port)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _reply(self, handler, status, body=b""):
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(body)))
        if body:
            handler.send_header("Content-Type", handler.headers.get("Content-Type") or "")
        handler.end_headers()
        handler.wfile.write(body)

    def _take(self, handler, body):
        ctype = (handler.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        headers = {k.lower(): v for k, v in handler.headers.items()}
        status = self.status
        if handler.path != "/v1/traces":
            status = 404
        elif status == 200:
            try:
                if ctype == "application/json":
                    got = spans_of(json.loads(body), "http/json", headers)
                elif ctype == "application/x-protobuf":
                    got = spans_of(decoder().decode(body), "http/protobuf", headers)
                else:
                    raise ValueError("content type %r" % ctype)
            except (ValueError, RuntimeError) as e:
                got = None
                status = 400
                with self._cond:
                    self.errors.append((ctype, repr(e), body))
            if got is not None:
                with self._cond:
                    self.spans.extend(got)
        with self._cond:
            self.requests.append((ctype, headers, status))
            self.bodies.append((ctype, body))
            self._cond.notify_all()
        # An empty ExportTraceServiceResponse: {} in JSON, no bytes in protobuf.
        self._reply(handler, status, b"{}" if status == 200 and ctype == "application/json" else b"")

    def wait_for(self, pred=lambda s: True, count=1, timeout=10.0):
        """The spans matching @pred once there are @count of them; fails after @timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = [s for s in self.spans if pred(s)]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                assert left > 0, "%d of %d spans after %.1f s; have %r; errors %r" % (
                    len(got), count, timeout, [s.name for s in self.spans], self.errors)
                self._cond.wait(left)

    def wait_requests(self, count, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                assert left > 0, "%d of %d requests after %.1f s" % (
                    len(self.requests), count, timeout)
                self._cond.wait(left)
            return list(self.requests)

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _env_without_otel():
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def otel_env(**otel):
    """The environment with no OTEL_* of the caller's, and @otel added."""
    env = _env_without_otel()
    env.update({k: str(v) for k, v in otel.items()})
    return env
