"""The C SDK traced: tests/sdk/c/trace_agent.c, built on the static library,
runs tool calls and an attempt's life against ledgerd behind a recording
proxy, with its OTEL_* variables pointed at the OTLP receiver of
tests/otel/receiver.py. What is checked is what leaves the process: the
execute_tool span (name, kind, parent, trace id, GenAI and ledger
attributes, error.type) in http/json and http/protobuf, and the
traceparent and tracestate headers of every call to ledgerd; end to end,
a ledgerd that traces too puts its SERVER spans under the execute_tool
span; under valgrind nothing leaks.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from answer_thief import LoopbackProxy
from conftest import ROOT, LEDGERD, Ledgerd, new_id

sys.path.insert(0, str(ROOT / "tests" / "otel"))
from receiver import Receiver, otel_env  # noqa: E402

BUILD = LEDGERD.parent
AGENT = BUILD / "tests" / "c_trace_agent"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = "00-%s-%s-01" % (TRACE_ID, PARENT_ID)
TRACESTATE = "vendor=abc,other=1"
TP_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@pytest.fixture(scope="module")
def agent():
    """trace_agent.c on the static library, as tests/chaos builds its C agent."""
    subprocess.run(["make", "-s", str((BUILD / "libledger_client.a").relative_to(ROOT))],
                   cwd=ROOT, check=True, timeout=600)
    libs = subprocess.run(["pkg-config", "--libs", "libcurl", "libcrypto"], check=True,
                          capture_output=True, text=True).stdout.split()
    AGENT.parent.mkdir(parents=True, exist_ok=True)
    # Built under a name of this process's, then renamed: another process may
    # be running the agent a previous build left.
    tmp = AGENT.with_name("%s.%d" % (AGENT.name, os.getpid()))
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "sdk" / "c"),
                    str(ROOT / "tests" / "sdk" / "c" / "trace_agent.c"),
                    str(BUILD / "libledger_client.a")] + libs + ["-pthread", "-lm", "-o",
                                                                  str(tmp)],
                   check=True, timeout=120)
    os.replace(tmp, AGENT)
    return AGENT


class Recorder(LoopbackProxy):
    """A proxy in front of ledgerd that keeps each request's path and headers."""

    def __init__(self, led):
        self.seen = []  # (method, path, {lowercase header: value})
        self.lock = threading.Lock()
        super().__init__((led.host, led.port))

    def _serve(self, client):
        with client, socket.create_connection(self.upstream) as upstream:
            buffered = b""
            while True:
                request, buffered = self._read_message(client, buffered)
                if request is None:
                    return
                head = request.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
                method, path, _ = head[0].split(" ", 2)
                headers = {}
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                with self.lock:
                    self.seen.append((method, path, headers))
                upstream.sendall(request)
                answer, _ = self._read_message(upstream, b"")
                client.sendall(answer)

    def close(self):
        self.listener.close()

    def requests(self, part=""):
        with self.lock:
            return [r for r in self.seen if part in r[1]]


@pytest.fixture
def recorder(service):
    r = Recorder(service.ledgerd)
    yield r
    r.close()


@pytest.fixture
def rx():
    with Receiver() as r:
        yield r


def env_for(service, recorder, **otel):
    e = otel_env(**otel)
    e.update({"LEDGER_URL": recorder.url,
              "LEDGER_AGENT_TOKEN": service.token("agent"),
              "LEDGER_ROUTER_TOKEN": service.token("router")})
    return e


def traced(rx, protocol="http/json"):
    return {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.url + "/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol,
            "OTEL_SERVICE_NAME": "c-agent-test"}


def call(agent, env, rid, tcid="call_00", tool="send_email", args='{"to":"a@b.c"}',
         traceparent=TRACEPARENT, tracestate=TRACESTATE, mode="ok"):
    done = subprocess.run([str(agent), "call", rid, tcid, tool, args, traceparent, tracestate,
                           mode], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def parts(traceparent):
    m = TP_RE.match(traceparent or "")
    assert m, "not a traceparent: %r" % traceparent
    return m.group(1), m.group(2)


def span_of(rx, rid):
    return rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == rid)[0]


@pytest.mark.parametrize("protocol", ["http/json", "http/protobuf"])
def test_a_tool_call_is_an_execute_tool_span_the_parent_of_its_calls(
        service, agent, recorder, rx, protocol):
    rid = new_id()
    got = call(agent, env_for(service, recorder, **traced(rx, protocol)), rid, mode="slow")
    assert got["rc"] == "ok" and got["outcome"] == "executed", got
    span = span_of(rx, rid)
    assert span.protocol == protocol
    assert span.name == "execute_tool send_email"
    assert span.kind == 1  # INTERNAL
    assert span.trace_id == TRACE_ID
    assert span.parent_span_id == PARENT_ID
    assert span.trace_state == TRACESTATE
    assert span.resource.get("service.name") == "c-agent-test"
    a = span.attributes
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["gen_ai.tool.name"] == "send_email"
    assert a["gen_ai.tool.call.id"] == "call_00"
    assert a["ledger.request_id"] == rid and a["ledger.tool_call_id"] == "call_00"
    assert a["ledger.outcome"] == "executed"
    assert a["ledger.replayed"] is False and a["ledger.executed"] is True
    assert a["ledger.idempotency_key"] == "%s:call_00" % rid
    assert a["ledger.fencing_token"] == got["fencing_token"] == 1
    assert "error.type" not in a and "ledger.attempt_id" not in a
    assert "ledger.error_code" not in a
    assert span.status["code"] == 0

    # Claim, renewals and completion: each a child of the span, the tracestate passed on.
    sent = recorder.requests("/v1/requests/%s/" % rid)
    actions = [path.rsplit("/", 1)[-1] for _, path, _ in sent]
    assert actions[0] == "claim" and actions[-1] == "complete", actions
    assert actions.count("renew") >= 2, actions
    for _, path, headers in sent:
        assert parts(headers.get("traceparent")) == (TRACE_ID, span.span_id), path
        assert headers.get("tracestate") == TRACESTATE, path
    # The tool itself was given the span's context to pass on; outside it, none.
    assert parts(got["tool_traceparent"]) == (TRACE_ID, span.span_id)
    assert got["tool_tracestate"] == TRACESTATE
    assert got["outside"] is None


def test_a_replay_is_a_span_that_says_replayed(service, agent, recorder, rx):
    rid = new_id()
    env = env_for(service, recorder, **traced(rx))
    first = call(agent, env, rid)
    again = call(agent, env, rid)
    assert first["outcome"] == "executed" and again["outcome"] == "replayed", again
    assert again["tool_calls"] == 0
    spans = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == rid, count=2)
    replay = [s for s in spans if s.attributes["ledger.outcome"] == "replayed"]
    assert len(replay) == 1, [s.attributes for s in spans]
    a = replay[0].attributes
    assert a["ledger.replayed"] is True and a["ledger.executed"] is False
    assert "ledger.fencing_token" not in a and "error.type" not in a
    assert replay[0].parent_span_id == PARENT_ID and replay[0].trace_id == TRACE_ID
    # Its one call, the claim, is the replay span's child.
    claims = recorder.requests("/v1/requests/%s/" % rid)
    assert len(claims) == 3  # claim and complete, then the replay's claim
    assert parts(claims[-1][2]["traceparent"]) == (TRACE_ID, replay[0].span_id)


def test_a_refused_call_says_why_in_error_type(service, agent, recorder, rx):
    rid = new_id()
    env = env_for(service, recorder, **traced(rx))
    call(agent, env, rid, args='{"to":"a@b.c"}')
    other = call(agent, env, rid, args='{"to":"x@y.z"}')
    assert other["outcome"] == "args_mismatch" and other["tool_calls"] == 0, other
    spans = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == rid, count=2)
    refused = [s for s in spans if s.attributes["ledger.outcome"] == "args_mismatch"]
    assert len(refused) == 1
    assert refused[0].attributes["error.type"] == "args_mismatch"
    assert refused[0].attributes["ledger.error_code"] == "args_mismatch"
    assert refused[0].attributes["ledger.replayed"] is False
    assert refused[0].attributes["ledger.executed"] is False
    # ERROR, and no error text: a span carries none, as the other SDKs' do.
    assert refused[0].status == {"code": 2, "message": ""}


def test_a_tool_that_failed_is_an_error_span(service, agent, recorder, rx):
    rid = new_id()
    got = call(agent, env_for(service, recorder, **traced(rx)), rid, mode="fail")
    assert got["outcome"] == "executed", got
    span = span_of(rx, rid)
    assert span.attributes["error.type"] == "tool_failed"
    assert span.attributes["ledger.outcome"] == "executed"
    assert span.attributes["ledger.executed"] is True
    assert span.status["code"] == 2


def test_a_call_without_a_tool_name_is_execute_tool(service, agent, recorder, rx):
    rid = new_id()
    call(agent, env_for(service, recorder, **traced(rx)), rid, tool="-")
    span = span_of(rx, rid)
    assert span.name == "execute_tool"
    assert "gen_ai.tool.name" not in span.attributes


@pytest.mark.parametrize("bad", ["00-%s-%s-01" % (TRACE_ID.upper(), PARENT_ID),
                                 "00-%s-0000000000000000-01" % TRACE_ID, "garbage"])
def test_a_malformed_traceparent_starts_a_new_trace(service, agent, recorder, rx, bad):
    rid = new_id()
    got = call(agent, env_for(service, recorder, **traced(rx)), rid, traceparent=bad)
    assert got["rc"] == "ok" and got["outcome"] == "executed", got
    span = span_of(rx, rid)
    assert span.parent_span_id == "" and span.trace_id != TRACE_ID.lower()
    assert span.trace_state == ""  # a tracestate goes only with its traceparent
    for _, path, headers in recorder.requests("/v1/requests/%s/" % rid):
        assert parts(headers["traceparent"]) == (span.trace_id, span.span_id), path
        assert "tracestate" not in headers


def test_tracing_off_passes_the_callers_context_on_unchanged(service, agent, recorder, rx):
    rid = new_id()
    # An endpoint, but the SDK disabled: nothing may reach it.
    off = dict(traced(rx), OTEL_SDK_DISABLED="true")
    got = call(agent, env_for(service, recorder, **off), rid)
    assert got["outcome"] == "executed", got
    sent = recorder.requests("/v1/requests/%s/" % rid)
    assert [p.rsplit("/", 1)[-1] for _, p, _ in sent] == ["claim", "complete"]
    for _, path, headers in sent:
        assert headers.get("traceparent") == TRACEPARENT, path
        assert headers.get("tracestate") == TRACESTATE, path
    assert got["tool_traceparent"] == TRACEPARENT
    # And without a context of the caller's, no header at all.
    rid2 = new_id()
    got = call(agent, env_for(service, recorder, **off), rid2, traceparent="-", tracestate="-")
    for _, path, headers in recorder.requests("/v1/requests/%s/" % rid2):
        assert "traceparent" not in headers and "tracestate" not in headers, path
    assert got["tool_traceparent"] == ""
    time.sleep(0.5)
    assert rx.requests == [] and rx.spans == []


def test_every_call_of_an_attempt_carries_its_context(service, agent, recorder, rx):
    rid = new_id()
    other_trace = "1" * 32
    tp2 = "00-%s-%s-01" % (other_trace, "2" * 16)
    env = env_for(service, recorder, **traced(rx))
    done = subprocess.run([str(agent), "attempt", rid, TRACEPARENT, TRACESTATE, tp2, "k=v"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    sent = recorder.requests("/v1/requests/%s/" % rid)
    paths = [p for _, p, _ in sent]
    for verb in ("/attempts", "/attempts/a1/renew", "/failover", "/attempts/a2/deliver",
                 "/attempts/a2/client", "/attempts/a2/finish", "/attempts/a1/cancel",
                 "/attempts/a1/cancel-ack"):
        assert any(p.endswith(verb) for p in paths), (verb, paths)
    # The heartbeat renewed a1 several times, from its own thread.
    assert sum(p.endswith("/attempts/a1/renew") for p in paths) >= 3, paths
    for _, path, headers in sent:
        adopted = path.endswith("/cancel") or path.endswith("/cancel-ack")
        assert headers.get("traceparent") == (tp2 if adopted else TRACEPARENT), path
        assert headers.get("tracestate") == ("k=v" if adopted else TRACESTATE), path
    # The library writes no span for attempts: the router does.
    time.sleep(0.5)
    assert [s.name for s in rx.spans] == []


def test_the_tracer_stays_inside_the_library(agent):
    """The tracer is linked in, and not one of its symbols is exported: a
    program with a tracer of its own (ledger-mcp, a user's) never clashes."""
    so = subprocess.run(["nm", "-D", "--defined-only", str(BUILD / "libledger_client.so")],
                        check=True, capture_output=True, text=True).stdout.split("\n")
    ar = subprocess.run(["nm", "--defined-only", str(BUILD / "libledger_client.a")],
                        check=True, capture_output=True, text=True).stdout.split("\n")
    local = [line for line in ar if re.search(r" [tdbr] ledger_trace_init$", line)]
    assert local, "the archive holds no tracer"
    for line in so + ar:
        name = line.split()[-1] if line.split() else ""
        kind = line.split()[1] if len(line.split()) == 3 else ""
        if kind.isupper() and re.match(r"ledger_(trace|span|otlp)_", name):
            raise AssertionError("exported: %s" % line)


def test_a_traced_call_and_attempt_leak_nothing(service, agent, recorder, rx):
    """Under valgrind, traced: the span, its headers, the tool's context, the
    tracer's start and stop with the client, an attempt's copied contexts."""
    if shutil.which("valgrind") is None:
        pytest.fail("valgrind is missing: scripts/deps.sh test installs it")
    vg = ["valgrind", "--quiet", "--leak-check=full", "--show-leak-kinds=definite,indirect",
          "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99"]
    env = env_for(service, recorder, **traced(rx))
    rid = new_id()
    done = subprocess.run(vg + [str(agent), "call", rid, "call_00", "send_email", "{}",
                                TRACEPARENT, TRACESTATE, "slow"],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "executed"
    assert span_of(rx, rid).parent_span_id == PARENT_ID
    done = subprocess.run(vg + [str(agent), "attempt", new_id(), TRACEPARENT, TRACESTATE,
                                TRACEPARENT, "-"],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr


def test_ledgerds_spans_are_children_of_the_execute_tool_span(service, agent, rx, tmp_path):
    """End to end, with a ledgerd that traces to the same receiver: each of its
    SERVER spans for the call (claim, renewals, complete) is the execute_tool
    span's child, in the caller's trace."""
    led = Ledgerd(service.database_url, tmp_path / "ledgerd-traced.log",
                  extra_env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.url + "/v1/traces",
                             "OTEL_BSP_SCHEDULE_DELAY": "100"})
    rec = Recorder(led)
    try:
        rid = new_id()
        got = call(agent, env_for(service, rec, **traced(rx)), rid, mode="slow")
        assert got["outcome"] == "executed", got
        span = rx.wait_for(lambda s: s.attributes.get("ledger.request_id") == rid
                           and s.name.startswith("execute_tool"))[0]
        n = len(rec.requests("/v1/requests/%s/" % rid))
        server = rx.wait_for(lambda s: s.kind == 2 and s.trace_id == TRACE_ID
                             and s.parent_span_id == span.span_id, count=n)
        routes = sorted({s.name.rsplit("/", 1)[-1] for s in server})
        assert routes == ["claim", "complete", "renew"], [s.name for s in server]
        assert all(s.resource.get("service.name") == "ledgerd" for s in server)
    finally:
        rec.close()
        led.stop()
