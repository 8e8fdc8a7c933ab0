"""What the tests of ledger-mcp share: the pinned node packages, the test
server (node/server.mjs) and its count file, ledger-mcp in both modes, the
SDK client driver (node/client.mjs), and ledgerd as the proxy sees it.

Every test file gets its own ledgerd on a fresh database from the
`service` fixture of tests/conftest.py, wrapped by `Env` below; the count
file is how a test tells one execution of a tool from two.
"""

import base64
import fcntl
import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import LEDGERD, new_id

HERE = Path(__file__).resolve().parent
NODE_DIR = HERE / "node"
SERVER = NODE_DIR / "server.mjs"
CLIENT = NODE_DIR / "client.mjs"
MEMORY_SERVER = (NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist"
                 / "index.js")
TAP = HERE / "tap.py"
LEDGER_MCP = Path(os.environ.get("LEDGER_MCP", LEDGERD.parent / "ledger-mcp")).resolve()
LEDGERCTL = Path(os.environ.get("LEDGERCTL", LEDGERD.parent / "ledgerctl")).resolve()

PINNED = ("@modelcontextprotocol/sdk", "@modelcontextprotocol/server-memory", "zod")
REPLAYED = "io.ledgerd/replayed"

# ledger-mcp's JSON-RPC error codes (the spec's table).
IN_PROGRESS = -32010
OUTCOME_UNKNOWN = -32011
ARGS_MISMATCH = -32012
ATTEMPT_FENCED = -32013
REFUSED = -32015
LEDGER_UNAVAILABLE = -32016
KEY_REQUIRED = -32017
INVALID_KEY = -32018
LEFT_UNKNOWN = -32019
SERVER_UNREACHABLE = -32020
BATCH = -32021
RESULT_NOT_KEPT = -32022

_installed = False


def install_node_packages():
    """`npm ci` the pinned packages into node/node_modules unless they are there.

    Once per process; several xdist workers may start at once, so the check
    and the install run under an exclusive lock on a file beside them.
    """
    global _installed
    if _installed:
        return
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    with open(NODE_DIR / ".install.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            pinned = {name: lock["packages"]["node_modules/" + name]["version"] for name in PINNED}
            if any(_installed_version(name) != version for name, version in pinned.items()):
                subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                               cwd=NODE_DIR, check=True, capture_output=True, text=True,
                               timeout=300)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    _installed = True


def _installed_version(name):
    manifest = NODE_DIR / "node_modules" / name / "package.json"
    try:
        return json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def require_built():
    missing = [str(p) for p in (LEDGER_MCP, LEDGERCTL) if not p.exists()]
    assert not missing, "missing %s: make build/ledger-mcp build/ledgerctl" % ", ".join(missing)


def clean_env():
    """The environment ledger-mcp runs in: none of its own variables, none of the server's."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("LEDGER_") and not k.startswith("MCP_TEST_")}


def keys(request_id=None, tool_call_id="call_01", attempt_id=None):
    """The _meta that names a ledger key (a fresh request id unless given)."""
    meta = {"io.ledgerd/request_id": request_id or new_id("r"),
            "io.ledgerd/tool_call_id": tool_call_id}
    if attempt_id is not None:
        meta["io.ledgerd/attempt_id"] = attempt_id
    return meta


def rid_of(meta):
    return meta["io.ledgerd/request_id"]


def cid_of(meta):
    return meta["io.ledgerd/tool_call_id"]


def with_replayed(result):
    """@result as a replay of it must read: "io.ledgerd/replayed": true in its _meta."""
    out = json.loads(json.dumps(result))
    out.setdefault("_meta", {})[REPLAYED] = True
    return out


def is_replay(result):
    return isinstance(result.get("_meta"), dict) and result["_meta"].get(REPLAYED) is True


def assert_proxy_error(line, code, data_code, meta=None, server_called=False):
    """@line (a client.mjs step) is ledger-mcp's error @code with data.code @data_code."""
    assert line["ok"] is False, "expected error %d, got %s" % (code, json.dumps(line)[:800])
    err = line["error"]
    assert err["code"] == code, err
    # The SDK prefixes "MCP error CODE: " to the message it received.
    message = err["message"]
    if message.startswith("MCP error"):
        message = message.split(": ", 1)[1]
    assert message.startswith("ledger-mcp: "), err
    data = err["data"]
    assert isinstance(data, dict), err
    assert data["code"] == data_code, err
    assert data["server_called"] is server_called, err
    assert isinstance(data.get("action"), str) and data["action"], err
    if meta is not None:
        assert data["request_id"] == rid_of(meta), err
        assert data["tool_call_id"] == cid_of(meta), err
        assert data["idempotency_key"] == "%s:%s" % (rid_of(meta), cid_of(meta)), err
    # The raw answer, before the SDK saw it, is the same error object.
    if "raw" in line:
        assert line["raw"]["error"]["code"] == code
        assert line["raw"]["error"]["data"] == data
    return data


class Counts:
    """The test server's count file: one JSON line per started/executed/answered call."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.touch()

    def events(self, event=None, tool=None, meta=None):
        out = []
        for line in self.path.read_text().splitlines():
            e = json.loads(line)
            if event is not None and e["event"] != event:
                continue
            if tool is not None and e["tool"] != tool:
                continue
            if meta is not None and (e["request_id"], e["tool_call_id"]) != (rid_of(meta),
                                                                             cid_of(meta)):
                continue
            out.append(e)
        return out

    def started(self, **kw):
        return len(self.events("started", **kw))

    def executed(self, **kw):
        return len(self.events("executed", **kw))

    def answered(self, **kw):
        return [e["result"] for e in self.events("answered", **kw)]

    def wait_for(self, event, n=1, timeout=15, **kw):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.events(event, **kw)) >= n:
                return
            time.sleep(0.02)
        raise AssertionError("no %d %r events in %s:\n%s" % (n, event, self.path,
                                                              self.path.read_text()))


class Proc:
    """A process whose stderr is copied to a log file; stop() and kill() by its pid only."""

    def __init__(self, argv, log_path, env=None, stdout=subprocess.DEVNULL):
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=stdout,
                                     stderr=subprocess.PIPE, env=env)
        self.lines = queue.Queue()
        self._pump = threading.Thread(target=self._copy, daemon=True)
        self._pump.start()

    def _copy(self):
        for line in self.proc.stderr:
            self.log.write(line)
            self.log.flush()
            self.lines.put(line)
        self.lines.put(None)

    def wait_log(self, pred, timeout=15):
        """The first stderr line (parsed JSON) for which @pred holds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no such log line of %s in %ss:\n%s"
                                     % (self.argv[:2], timeout, self.log_text()))
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError("%s exited %s:\n%s" % (self.argv[:2], self.proc.wait(),
                                                             self.log_text()))
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if pred(entry):
                return entry

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._pump.join(timeout=5)
        return rc

    def kill(self):
        return self.stop(signal.SIGKILL)

    def log_text(self):
        self.log.flush()
        return self.log_path.read_text(errors="replace")


class HttpServer(Proc):
    """node server.mjs http 0: the test server over Streamable HTTP."""

    def __init__(self, env, counts, json_answers=False, log_name=None, extra_env=None, port=0):
        e = dict(os.environ)
        e["MCP_TEST_COUNT_FILE"] = str(counts.path)
        e.update(extra_env or {})
        argv = ["node", SERVER, "http", str(port)] + (["--json"] if json_answers else [])
        super().__init__(argv, env.tmp / (log_name or "server-%s.log" % secrets.token_hex(3)),
                         env=e, stdout=subprocess.PIPE)
        line = self.proc.stdout.readline().decode()
        assert line.startswith("listening "), "server.mjs: %r\n%s" % (line, self.log_text())
        self.port = int(line.split()[1])
        self.url = "http://127.0.0.1:%d/mcp" % self.port


class HttpProxy(Proc):
    """ledger-mcp http in front of @upstream; url is the proxy's /mcp endpoint."""

    def __init__(self, env, upstream, *flags, listen="127.0.0.1:0", ledger_url=None, token=None,
                 extra_env=None):
        argv = [LEDGER_MCP, "http", "--listen", listen, "--upstream", upstream,
                "--ledger-url", ledger_url or env.url, "--token", token or env.agent,
                "--log-level", "debug"] + list(flags)
        super().__init__(argv, env.tmp / ("ledger-mcp-http-%s.log" % secrets.token_hex(3)),
                         env=dict(env.proxy_env(), **(extra_env or {})))
        entry = self.wait_log(lambda e: e.get("msg") == "listening" and "address" in e)
        self.address = entry["address"]
        self.url = "http://%s/mcp" % self.address


class ClientRun:
    """What one run of client.mjs printed: one parsed line per step."""

    def __init__(self, lines, stderr, rc):
        self.lines = lines
        self.stderr = stderr
        self.rc = rc

    @property
    def steps(self):
        return [line for line in self.lines if line.get("op") != "connect"]

    def calls(self):
        return [line for line in self.steps if line["op"] == "call"]

    def __repr__(self):
        return "<client rc=%s %s\nstderr: %s>" % (self.rc, json.dumps(self.lines)[:3000],
                                                  self.stderr[-3000:])


class ClientProc:
    """client.mjs running in the background: its lines as they come."""

    def __init__(self, script, env=None):
        self.proc = subprocess.Popen(["node", CLIENT, json.dumps(script)], cwd=NODE_DIR,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self.lines = []
        self._q = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            line = json.loads(raw)
            self.lines.append(line)
            self._q.put(line)
        self._q.put(None)

    def wait_line(self, pred=lambda line: True, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "client.mjs: no such line in %ss: %s %s" % (
                timeout, self.lines, b"".join(self.stderr)[-2000:])
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, "client.mjs ended: %s %s" % (self.lines,
                                                                 b"".join(self.stderr)[-2000:])
            if pred(line):
                return line

    def finish(self, timeout=60):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        time.sleep(0.05)
        return ClientRun(list(self.lines), b"".join(self.stderr).decode(errors="replace"), rc)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def run_client(script, timeout=120, env=None):
    """Runs client.mjs with @script to its end; returns the ClientRun."""
    done = subprocess.run(["node", CLIENT, "-"], cwd=NODE_DIR, input=json.dumps(script),
                          capture_output=True, text=True, timeout=timeout, env=env)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    run = ClientRun(lines, done.stderr, done.returncode)
    assert done.returncode == 0, run
    return run


def call(name, arguments, meta=None, **kw):
    """A client.mjs step calling @name."""
    step = {"op": "call", "name": name, "arguments": arguments}
    if meta is not None:
        step["meta"] = meta
    step.update(kw)
    return step


class Env:
    """One test file's ledgerd, its tokens, and the ways to put ledger-mcp before a server."""

    def __init__(self, service, tmp):
        require_built()
        install_node_packages()
        self.service = service
        self.led = service.ledgerd
        self.url = "http://%s:%d" % (self.led.host, self.led.port)
        self.agent = service.token("agent")
        self.router = service.token("router")
        self.admin = service.token("admin")
        self.tmp = Path(tmp)

    def counts(self):
        return Counts(self.tmp / ("counts-%s.jsonl" % secrets.token_hex(4)))

    def proxy_env(self):
        return clean_env()

    # --- stdio ---------------------------------------------------------------------

    def server_argv(self):
        return ["node", str(SERVER), "stdio"]

    def stdio_proxy_argv(self, *flags, server=None, ledger_url=None, token=None):
        return ([str(LEDGER_MCP), "stdio", "--ledger-url", ledger_url or self.url,
                 "--token", token or self.agent, "--log-level", "debug"]
                + [str(f) for f in flags] + ["--"] + (server or self.server_argv()))

    def stdio(self, counts, *flags, server=None, extra_env=None, proxy=True, ledger_url=None):
        """client.mjs's transport: ledger-mcp stdio (or, proxy=False, the server alone)."""
        argv = self.stdio_proxy_argv(*flags, server=server, ledger_url=ledger_url) if proxy \
            else (server or self.server_argv())
        env = {"MCP_TEST_COUNT_FILE": str(counts.path)}
        env.update(extra_env or {})
        return {"type": "stdio", "command": argv[0], "args": argv[1:], "env": env}

    def tapped_stdio(self, counts, client_log, server_log, *flags, extra_env=None):
        """client -> tap -> ledger-mcp -> tap -> server, each tap logging its lines."""
        server = [sys.executable, str(TAP), str(server_log), "--"] + self.server_argv()
        argv = [sys.executable, str(TAP), str(client_log), "--"] + self.stdio_proxy_argv(
            *flags, server=server)
        env = {"MCP_TEST_COUNT_FILE": str(counts.path)}
        env.update(extra_env or {})
        return {"type": "stdio", "command": argv[0], "args": argv[1:], "env": env}

    # --- http ----------------------------------------------------------------------

    def http_server(self, counts, json_answers=False, extra_env=None, port=0):
        return HttpServer(self, counts, json_answers=json_answers, extra_env=extra_env, port=port)

    def http_proxy(self, upstream, *flags, **kw):
        return HttpProxy(self, upstream, *[str(f) for f in flags], **kw)

    # --- ledgerd ---------------------------------------------------------------------

    def tool_call(self, meta):
        """GET of the ledger key's tool call (router token): the Response."""
        return self.led.get("/v1/requests/%s/tool-calls/%s" % (rid_of(meta), cid_of(meta)),
                            token=self.router)

    def state(self, meta):
        r = self.tool_call(meta)
        if r.status == 404:
            return None
        assert r.status == 200, r
        return r.json["state"]

    def wait_state(self, meta, state, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.state(meta)
            if got == state:
                return
            time.sleep(0.05)
        raise AssertionError("%s never became %s (is %s)" % (meta, state, self.state(meta)))

    def ctl(self, *args, token=None, timeout=30):
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
        env.update({"LEDGER_URL": self.url, "LEDGER_TOKEN": token or self.admin})
        return subprocess.run([str(LEDGERCTL)] + [str(a) for a in args], env=env,
                              capture_output=True, text=True, timeout=timeout)


# --- raw JSON-RPC lines ------------------------------------------------------------


def tap_lines(path, direction):
    """The exact lines a tap recorded going @direction ("in" or "out")."""
    out = []
    for line in Path(path).read_text().splitlines():
        e = json.loads(line)
        if e["dir"] == direction:
            out.append(base64.b64decode(e["b64"]))
    return out


def members(text):
    """The top-level members of the JSON object @text, as {name: (start, end)} spans of
    their values' exact text, so that bytes can be compared without re-serialising."""
    dec = json.JSONDecoder()
    spans = {}
    i = _ws(text, 0)
    assert text[i] == "{", text[:80]
    i = _ws(text, i + 1)
    if text[i] == "}":
        return spans
    while True:
        name, i = dec.raw_decode(text, i)
        i = _ws(text, i)
        assert text[i] == ":", text[i:i + 40]
        i = _ws(text, i + 1)
        _, end = dec.raw_decode(text, i)
        spans[name] = (i, end)
        i = _ws(text, end)
        if text[i] == "}":
            return spans
        assert text[i] == ",", text[i:i + 40]
        i = _ws(text, i + 1)


def _ws(text, i):
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def member_text(text, name):
    start, end = members(text)[name]
    return text[start:end]


class Stack:
    """The test server behind ledger-mcp: over stdio (a new proxy and server for every
    client run, as an agent host starts them), or over Streamable HTTP (one server and
    one proxy for the stack's life) with JSON or SSE answers."""

    KINDS = ("stdio", "http-json", "http-sse")

    def __init__(self, env, kind, *flags, extra_env=None):
        assert kind in self.KINDS, kind
        self.env = env
        self.kind = kind
        self.flags = [str(f) for f in flags]
        self.extra_env = dict(extra_env or {})
        self.counts = env.counts()
        self.server = self.proxy = None
        if kind != "stdio":
            self.server = env.http_server(self.counts, json_answers=kind == "http-json",
                                          extra_env=self.extra_env)
            self.proxy = env.http_proxy(self.server.url, *self.flags)

    @property
    def http(self):
        return self.kind != "stdio"

    def transport(self, proxy=True):
        if not self.http:
            return self.env.stdio(self.counts, *self.flags, extra_env=self.extra_env, proxy=proxy)
        return {"type": "http", "url": self.proxy.url if proxy else self.server.url}

    def run(self, steps, proxy=True, **script):
        """One client run of @steps; returns the ClientRun."""
        script.update({"transport": self.transport(proxy), "steps": steps})
        return run_client(script)

    def close(self):
        for p in (self.proxy, self.server):
            if p is not None:
                p.stop()
