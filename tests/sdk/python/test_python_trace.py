"""W3C trace context from the Python clients (ledger_client/_trace.py), blocking and asyncio.

ledgerd echoes no traceparent, so the clients talk to a live ledgerd
through a recording proxy on loopback that keeps the head of every request.
A traceparent given per call or per client reaches ledgerd on every call a
tool call makes (claim, renewals from the heartbeat's thread or task,
completion), and a malformed one does not. OpenTelemetry cannot be
installed here: a fake ``opentelemetry`` package put on sys.path by the
test stands in for it, its ``propagate.inject`` writing the traceparent of
a context variable, as OpenTelemetry's context is one; with it the current
context is sent, taken in the caller's thread or task. Without it (an
``opentelemetry`` that fails to import), no trace header at all.
"""

import asyncio
import http.client
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import new_id

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "sdk" / "python"))

from ledger_client import Ledger  # noqa: E402
from ledger_client import _trace  # noqa: E402
from ledger_client.aio import AsyncLedger  # noqa: E402

GIVEN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
MALFORMED = [
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
    "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero parent id
    GIVEN + "\n",  # a line break: `$` would let it by
    GIVEN + "\r\nx-evil: 1",
    "",
]

# A stand-in for OpenTelemetry's API: the current context is a context
# variable (as OpenTelemetry's is), which the test sets.
FAKE_PROPAGATE = '''
import contextvars

current = contextvars.ContextVar("current", default=None)
extra = {}


def inject(carrier, context=None, setter=None):
    value = current.get()
    if value is not None:
        carrier["traceparent"], state = value
        if state is not None:
            carrier["tracestate"] = state
    carrier.update(extra)
'''


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _forward(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        self.server.seen.append({
            "path": self.path,
            "traceparent": self.headers.get_all("traceparent") or [],
            "tracestate": self.headers.get_all("tracestate") or [],
            "names": [k.lower() for k in self.headers.keys()],
        })
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        try:
            conn.request(self.command, self.path, body=body, headers={
                k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")})
            answer = conn.getresponse()
            data = answer.read()
        finally:
            conn.close()
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _forward

    def log_message(self, *args):
        pass


class Recorder(ThreadingHTTPServer):
    """A loopback proxy in front of ledgerd keeping each request's trace headers."""

    daemon_threads = True

    def __init__(self, service):
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = (service.ledgerd.host, service.ledgerd.port)
        self.seen = []
        self.url = "http://127.0.0.1:%d" % self.server_address[1]

    def calls(self, rid, cid):
        """[action, traceparents, tracestates] of each request of key rid:cid."""
        prefix = "/v1/requests/%s/tool-calls/%s/" % (rid, cid)
        return [[s["path"][len(prefix):], s["traceparent"], s["tracestate"]]
                for s in self.seen if s["path"].startswith(prefix)]


@pytest.fixture(scope="module")
def recorder(service):
    server = Recorder(service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _otel_modules():
    return [n for n in sys.modules if n == "opentelemetry" or n.startswith("opentelemetry.")]


def _forget_opentelemetry(monkeypatch):
    """The client tries its import again; a module imported before is put back after the test."""
    monkeypatch.setattr(_trace, "_propagate", _trace._UNSET)
    for name in _otel_modules():
        monkeypatch.delitem(sys.modules, name)


def _purge():
    """The test's own opentelemetry modules gone for good (monkeypatch would not know them)."""
    for name in _otel_modules():
        del sys.modules[name]


@pytest.fixture
def no_otel(tmp_path, monkeypatch):
    """An ``opentelemetry`` whose import fails, as where it is not installed."""
    (tmp_path / "opentelemetry").mkdir()
    (tmp_path / "opentelemetry" / "__init__.py").write_text(
        "raise ImportError('opentelemetry is not installed here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget_opentelemetry(monkeypatch)
    yield
    _purge()


@pytest.fixture
def fake_otel(tmp_path, monkeypatch):
    """The fake opentelemetry on sys.path; yields its propagate module."""
    (tmp_path / "opentelemetry").mkdir()
    (tmp_path / "opentelemetry" / "__init__.py").write_text("")
    (tmp_path / "opentelemetry" / "propagate.py").write_text(FAKE_PROPAGATE)
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget_opentelemetry(monkeypatch)
    from opentelemetry import propagate
    yield propagate
    _purge()


def key():
    return new_id("r"), new_id("c")


def sync_client(service, recorder, **kw):
    return Ledger(recorder.url, service.token("agent"), **kw)


def run_async(coro):
    return asyncio.run(coro)


async def async_tool_call(service, recorder, rid, cid, client_kw=None, **kw):
    async with AsyncLedger(recorder.url, service.token("agent"), **(client_kw or {})) as ledger:
        async def tool(key, token):
            return {"ok": token}
        return await ledger.tool_call(rid, cid, tool, **kw)


def tool_call(kind, service, recorder, rid, cid, client_kw=None, **kw):
    """One tool call through the blocking or the asyncio client."""
    if kind == "sync":
        return sync_client(service, recorder, **(client_kw or {})).tool_call(
            rid, cid, lambda key, token: {"ok": token}, **kw)
    return run_async(async_tool_call(service, recorder, rid, cid, client_kw, **kw))


KINDS = ["sync", "async"]


# --- a trace context given by hand ------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_given_per_call_reaches_ledgerd_on_every_call(kind, service, recorder, no_otel):
    rid, cid = key()
    r = tool_call(kind, service, recorder, rid, cid, traceparent=GIVEN, tracestate="congo=t61rcWkgMzE")
    assert r.executed
    assert recorder.calls(rid, cid) == [["claim", [GIVEN], ["congo=t61rcWkgMzE"]],
                                        ["complete", [GIVEN], ["congo=t61rcWkgMzE"]]]


@pytest.mark.parametrize("kind", KINDS)
def test_given_per_client_and_the_call_s_own_wins(kind, service, recorder, no_otel):
    rid, cid = key()
    tool_call(kind, service, recorder, rid, cid, client_kw={"traceparent": OTHER})
    assert recorder.calls(rid, cid) == [["claim", [OTHER], []], ["complete", [OTHER], []]]
    rid, cid = key()
    tool_call(kind, service, recorder, rid, cid, client_kw={"traceparent": OTHER, "tracestate": "a=1"},
              traceparent=GIVEN)
    assert recorder.calls(rid, cid) == [["claim", [GIVEN], []], ["complete", [GIVEN], []]]
    # A malformed one of the call's own leaves the client's.
    rid, cid = key()
    tool_call(kind, service, recorder, rid, cid, client_kw={"traceparent": OTHER},
              traceparent="garbage")
    assert [c[1] for c in recorder.calls(rid, cid)] == [[OTHER], [OTHER]]


def test_given_per_client_goes_on_the_other_calls_too(service, recorder, no_otel):
    rid, cid = key()
    tool_call("sync", service, recorder, rid, cid)
    del recorder.seen[:]
    sync_client(service, recorder, traceparent=GIVEN).get_tool_call(rid, cid)
    assert recorder.seen[-1]["traceparent"] == [GIVEN]

    async def read():
        async with AsyncLedger(recorder.url, service.token("agent"), traceparent=OTHER) as ledger:
            await ledger.get_tool_call(rid, cid)
    run_async(read())
    assert recorder.seen[-1]["traceparent"] == [OTHER]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", MALFORMED)
def test_a_malformed_traceparent_is_not_sent(kind, bad, service, recorder, no_otel):
    rid, cid = key()
    r = tool_call(kind, service, recorder, rid, cid, traceparent=bad, tracestate="a=1")
    assert r.executed
    assert recorder.calls(rid, cid) == [["claim", [], []], ["complete", [], []]]


@pytest.mark.parametrize("kind", KINDS)
def test_a_tracestate_that_is_not_one_header_value_is_dropped(kind, service, recorder, no_otel):
    rid, cid = key()
    tool_call(kind, service, recorder, rid, cid, traceparent=GIVEN, tracestate="a=1\r\nx-evil: 1")
    assert recorder.calls(rid, cid) == [["claim", [GIVEN], []], ["complete", [GIVEN], []]]
    assert all("x-evil" not in s["names"] for s in recorder.seen)


@pytest.mark.parametrize("kind", KINDS)
def test_renewals_carry_the_tool_call_s_context(kind, service, recorder, no_otel):
    """The heartbeat renews from a thread (a task) of its own: it carries the claim's context."""
    rid, cid = key()
    if kind == "sync":
        def tool(key, token):
            time.sleep(0.5)
            return 1
        sync_client(service, recorder).tool_call(rid, cid, tool, lease_ms=300, traceparent=GIVEN)
    else:
        async def main():
            async with AsyncLedger(recorder.url, service.token("agent")) as ledger:
                async def tool(key, token):
                    await asyncio.sleep(0.5)
                    return 1
                await ledger.tool_call(rid, cid, tool, lease_ms=300, traceparent=GIVEN)
        run_async(main())
    calls = recorder.calls(rid, cid)
    assert [c[0] for c in calls].count("renew") >= 2, calls
    assert all(c[1] == [GIVEN] for c in calls), calls


# --- OpenTelemetry's current context ---------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_without_opentelemetry_no_trace_header(kind, service, recorder, no_otel):
    rid, cid = key()
    assert tool_call(kind, service, recorder, rid, cid).executed
    assert recorder.calls(rid, cid) == [["claim", [], []], ["complete", [], []]]
    assert _trace._propagate is None


@pytest.mark.parametrize("kind", KINDS)
def test_with_opentelemetry_its_current_context_is_sent(kind, service, recorder, fake_otel):
    rid, cid = key()
    # No current context: the propagator writes nothing, nothing is sent.
    tool_call(kind, service, recorder, rid, cid)
    assert recorder.calls(rid, cid) == [["claim", [], []], ["complete", [], []]]
    rid, cid = key()
    reset = fake_otel.current.set((OTHER, "rojo=00f067aa0ba902b7"))
    try:
        tool_call(kind, service, recorder, rid, cid)
        assert recorder.calls(rid, cid) == [["claim", [OTHER], ["rojo=00f067aa0ba902b7"]],
                                            ["complete", [OTHER], ["rojo=00f067aa0ba902b7"]]]
        # One given by hand wins over the current context.
        rid, cid = key()
        tool_call(kind, service, recorder, rid, cid, traceparent=GIVEN)
        assert recorder.calls(rid, cid) == [["claim", [GIVEN], []], ["complete", [GIVEN], []]]
        # And the client's other calls carry the current context.
        del recorder.seen[:]
        sync_client(service, recorder).get_tool_call(rid, cid)
        assert recorder.seen[-1]["traceparent"] == [OTHER]
    finally:
        fake_otel.current.reset(reset)


def test_the_propagator_writes_no_header_of_the_transport_s_nor_a_broken_one(
        service, recorder, fake_otel, monkeypatch):
    monkeypatch.setattr(fake_otel, "extra", {"Authorization": "Bearer stolen", "baggage": "k=v",
                                             "x-bad": "a\r\nx-evil: 1", "bad name": "v"})
    token = fake_otel.current.set((OTHER, None))
    try:
        for kind in KINDS:
            rid, cid = key()
            assert tool_call(kind, service, recorder, rid, cid).executed  # a stolen token would be 401
            seen = [s for s in recorder.seen if rid in s["path"]]
            assert seen and all(s["traceparent"] == [OTHER] for s in seen)
            for s in seen:
                assert "baggage" in s["names"]  # what a propagator adds beside the trace context
                assert "x-bad" not in s["names"] and "x-evil" not in s["names"]
                assert "bad name" not in s["names"]
                assert s["names"].count("authorization") == 1
    finally:
        fake_otel.current.reset(token)


def test_a_propagator_that_raises_fails_no_call(service, recorder, fake_otel, monkeypatch):
    def inject(carrier, context=None, setter=None):
        raise RuntimeError("a broken propagator")
    monkeypatch.setattr(fake_otel, "inject", inject)
    for kind in KINDS:
        rid, cid = key()
        assert tool_call(kind, service, recorder, rid, cid).executed
        assert recorder.calls(rid, cid) == [["claim", [], []], ["complete", [], []]]


def test_renewals_from_the_heartbeat_thread_carry_the_caller_s_context(service, recorder, fake_otel):
    """The heartbeat's thread has no context of its own (contextvars stay in their thread)."""
    rid, cid = key()
    token = fake_otel.current.set((OTHER, None))
    try:
        def tool(key, token):
            time.sleep(0.5)
            return 1
        sync_client(service, recorder).tool_call(rid, cid, tool, lease_ms=300)
    finally:
        fake_otel.current.reset(token)
    calls = recorder.calls(rid, cid)
    assert [c[0] for c in calls].count("renew") >= 2, calls
    assert all(c[1] == [OTHER] for c in calls), calls


def test_concurrent_tasks_each_send_their_own_context(service, recorder, fake_otel):
    """Many coroutines of one AsyncLedger at once, each in a context of its own."""
    n = 20
    keys = [key() for _ in range(n)]
    parents = ["00-%032x-%016x-01" % (i + 1, i + 1) for i in range(n)]

    async def one(ledger, i):
        fake_otel.current.set((parents[i], None))  # this task's context only

        async def tool(key, token):
            await asyncio.sleep(0.05)
            return i
        await ledger.tool_call(*keys[i], tool)

    async def main():
        async with AsyncLedger(recorder.url, service.token("agent")) as ledger:
            await asyncio.gather(*(one(ledger, i) for i in range(n)))
    run_async(main())
    for i, (rid, cid) in enumerate(keys):
        assert recorder.calls(rid, cid) == [["claim", [parents[i]], []],
                                            ["complete", [parents[i]], []]], i
