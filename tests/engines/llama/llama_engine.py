"""The real llama.cpp engine (server.mjs on node-llama-cpp) as a test's process.

What a test needs before it starts one: node-llama-cpp installed at the
versions of package-lock.json (`npm ci`, once, under js_build's lock,
build/js.lock, since several pytest workers start at once), and the tiny
model written by make_gguf.py into build/engines/ (once, under a lock of
its own). Then `LlamaEngine(log_path, ...)` starts server.mjs on a free
loopback port: it announces its address on stderr as every test process of
the project does (tests/faults/stack.py's Process, which this reuses), the
rest of its stderr (one JSON line per event) goes to @log_path, and the
constructor waits until /health answers 200.
"""

import fcntl
import hashlib
import http.client
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SERVER = HERE / "server.mjs"
MODEL = ROOT / "build" / "engines" / "tiny-llama.gguf"
MODEL_LOCK = ROOT / "build" / "engines" / "model.lock"

sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "faults"))
sys.path.insert(0, str(ROOT / "tests" / "sdk" / "js"))
import js_build  # noqa: E402  (tests/sdk/js: locked(), npm ci, the lock file's pins)
import make_gguf  # noqa: E402
from stack import Process, read_json_lines, wait_until  # noqa: E402

# The packages that must be at the lock file's versions: the library and its
# Linux x64 CPU build, the only one of its prebuilt binaries installed.
PINNED = ("node-llama-cpp", "@node-llama-cpp/linux-x64")

# --omit=optional: node-llama-cpp lists every platform's and GPU's build as an
# optional dependency (CUDA and Vulkan among them, hundreds of MB); package.json
# names the CPU one as a dependency of its own, so it alone is installed.
# --ignore-scripts: node-llama-cpp's postinstall would look for a binary to
# download or build; the variable keeps it from that should it ever run.
NPM_CI = js_build.NPM_CI + ["--omit=optional", "--ignore-scripts"]

_installed = False
_model_sha256 = None


def install():
    """node-llama-cpp in node_modules/ beside this file; once per process."""
    global _installed
    if _installed:
        return
    with js_build.locked():
        if js_build.needs_install(HERE, PINNED):
            env = dict(os.environ, NODE_LLAMA_CPP_SKIP_DOWNLOAD="true")
            js_build.run(NPM_CI, HERE, 600, env=env)
    _installed = True


def model():
    """The model file, written on first use; returns (path, sha256)."""
    global _model_sha256
    if _model_sha256 is None:
        want = hashlib.sha256(make_gguf.model_bytes()).hexdigest()
        MODEL_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with open(MODEL_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                have = hashlib.sha256(MODEL.read_bytes()).hexdigest() if MODEL.exists() else None
                if have != want:
                    make_gguf.write(MODEL)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        _model_sha256 = want
    return MODEL, _model_sha256


class LlamaEngine:
    """server.mjs on a free loopback port, serving the tiny model.

    @flags are server.mjs's own (README.md): `--delay-ms-per-token 20`,
    `--fault after_send:3`, `--api-key K`, ... @wait_healthy: return only once
    /health answers 200 (the model is loaded).
    """

    def __init__(self, log_path, *flags, alias="tiny-llama", api_key=None, wait_healthy=True,
                 timeout_s=60):
        install()
        path, self.model_sha256 = model()
        self.log_path = Path(log_path)
        self.api_key = api_key
        argv = ["node", SERVER, "--model", path, "--port", 0]
        if alias is not None:
            argv += ["--alias", alias]
        if api_key is not None:
            argv += ["--api-key", api_key]
        argv += list(flags)
        # Only PATH and HOME (the log's folder): nothing of ours leaks into it.
        env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
               "HOME": str(self.log_path.parent), "NODE_LLAMA_CPP_SKIP_DOWNLOAD": "true"}
        self.process = Process(argv, self.log_path, env=env)
        try:
            self.process.wait_ready()
            if wait_healthy and not wait_until(self._healthy, timeout_s, 0.05):
                raise RuntimeError("the engine did not load its model within %ds; see %s"
                                   % (timeout_s, self.log_path))
        except BaseException:
            self.process.stop()
            raise

    @property
    def pid(self):
        return self.process.pid

    @property
    def host(self):
        return self.process.host

    @property
    def port(self):
        return self.process.port

    @property
    def url(self):
        return self.process.url

    def _healthy(self):
        if not self.process.alive():
            raise RuntimeError("the engine exited (%s); see %s"
                               % (self.process.proc.poll(), self.log_path))
        try:
            return self.request("GET", "/health", timeout=2)[0] == 200
        except OSError:
            return False

    def headers(self, extra=None):
        h = {"Content-Type": "application/json"}
        if self.api_key is not None:
            h["Authorization"] = "Bearer " + self.api_key
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, headers=None, timeout=30):
        """One request on a new connection; returns (status, headers, body bytes)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = None if body is None else (body if isinstance(body, bytes)
                                              else json.dumps(body).encode())
            conn.request(method, path, body=data,
                         headers=self.headers() if headers is None else headers)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def get_json(self, path, headers=None):
        status, _, body = self.request("GET", path, headers=headers)
        return status, json.loads(body)

    def chat(self, body, headers=None, timeout=60):
        """A non-streaming completion; returns (status, parsed body)."""
        status, _, data = self.request("POST", "/v1/chat/completions", dict(body, stream=False),
                                       headers, timeout)
        return status, json.loads(data)

    def stream(self, body, close_after_events=None, timeout=60):
        """A streaming completion read off a raw socket, tolerant of a cut.

        Returns an `SseAnswer`. With @close_after_events, the socket is closed
        as soon as that many content events have arrived.
        """
        return SseAnswer.read(self.host, self.port, dict(body, stream=True), self.headers(),
                              close_after_events, timeout)

    def abandon(self, body, after_s):
        """Sends a completion request and closes the connection @after_s seconds later."""
        data = json.dumps(body).encode()
        head = "POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\n" % (
            self.host, self.port, len(data))
        head += "".join("%s: %s\r\n" % kv for kv in self.headers().items()) + "\r\n"
        with socket.create_connection((self.host, self.port), timeout=10) as sock:
            sock.sendall(head.encode() + data)
            time.sleep(after_s)

    def set_fault(self, phase, at=0, every=False):
        """Arms a fault hook through POST /fault (phase None disarms)."""
        status, _, data = self.request("POST", "/fault", {"phase": phase, "at": at, "every": every})
        assert status == 200, data
        return json.loads(data)["fault"]

    def lines(self, event=None, request_id=None):
        """The engine's JSON log lines so far (those of @event and @request_id)."""
        return [e for e in read_json_lines(self.log_path)
                if (event is None or e.get("event") == event)
                and (request_id is None or e.get("request_id") == request_id)]

    def wait_line(self, event, request_id=None, timeout_s=10):
        found = wait_until(lambda: self.lines(event, request_id), timeout_s)
        assert found, "no %r line in %s" % (event, self.log_path)
        return found[0]

    def last_request_id(self, path="/v1/chat/completions"):
        return [e for e in self.lines("request") if e["path"] == path][-1]["request_id"]

    def wait_exit(self, timeout_s=10):
        """The process's exit status once it is gone (-9: SIGKILL); the log is then complete."""
        rc = self.process.proc.wait(timeout=timeout_s)
        if self.process._pump is not None:
            self.process._pump.join(timeout=5)
        return rc

    def alive(self):
        return self.process.alive()

    def signal(self, sig):
        self.process.signal(sig)

    def kill(self):
        self.signal(signal.SIGKILL)

    def stop(self):
        """Ends the process (SIGCONT first, should it be stopped); returns its exit status."""
        return self.process.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class SseAnswer:
    """What a client got of a streamed answer: status, SSE events, and whether it ended."""

    def __init__(self):
        self.status = None
        self.headers = {}
        self.events = []       # the data of each event, "[DONE]" or parsed JSON
        self.complete = False  # the chunked body's last chunk arrived

    @property
    def contents(self):
        return [e["choices"][0]["delta"]["content"] for e in self.events
                if isinstance(e, dict) and e.get("choices")
                and "content" in e["choices"][0]["delta"]
                and e["choices"][0]["delta"]["content"] is not None]

    @property
    def text(self):
        return "".join(self.contents)

    @classmethod
    def read(cls, host, port, body, headers, close_after_events, timeout):
        answer = cls()
        data = json.dumps(body).encode()
        head = "POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\n" % (
            host, port, len(data))
        head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
        sock = socket.create_connection((host, port), timeout=timeout)
        raw, body_at, decoded, chunks_at = b"", None, b"", 0
        try:
            sock.sendall(head.encode() + data)
            while True:
                try:
                    got = sock.recv(65536)
                except ConnectionResetError:
                    got = b""
                if not got:
                    break
                raw += got
                if body_at is None and b"\r\n\r\n" in raw:
                    body_at = raw.index(b"\r\n\r\n") + 4
                    answer._head(raw[:body_at])
                    chunks_at = body_at
                if body_at is not None:
                    more, chunks_at, last = _dechunk(raw, chunks_at)
                    decoded += more
                    answer._events(decoded)
                    if last:
                        answer.complete = True
                        break
                    if close_after_events is not None and len(answer.contents) >= close_after_events:
                        break
        finally:
            sock.close()
        return answer

    def _head(self, head):
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                self.headers[k.strip().lower()] = v.strip()

    def _events(self, decoded):
        self.events = []
        for block in decoded.decode("utf-8", "replace").split("\n\n")[:-1]:
            for line in block.split("\n"):
                if line.startswith("data: "):
                    payload = line[len("data: "):]
                    self.events.append(payload if payload == "[DONE]" else json.loads(payload))


def _dechunk(raw, at):
    """The whole chunks of @raw from @at: (their data, where the next one starts, saw the last)."""
    out = b""
    while True:
        end = raw.find(b"\r\n", at)
        if end < 0:
            return out, at, False
        size = int(raw[at:end].split(b";")[0], 16)
        if size == 0:
            return out, end + 2, True
        if len(raw) < end + 2 + size + 2:
            return out, at, False
        out += raw[end + 2:end + 2 + size]
        at = end + 2 + size + 2

