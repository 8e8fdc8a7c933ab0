"""ledgerd's OTLP exporter (ledger/common/trace.c) read against the official
OpenTelemetry JS SDK's: the same spans, made once by the JS SDK with its own
exporters and once by the C tracer (build/tests/trace_emit), in http/json and
http/protobuf, decode (protobuf with the official schema) to the same
structure. Then how the exporter fails: an endpoint that is down or hangs
costs span calls nothing and shutdown at most the export timeout; a 503 is
retried, then counted failed; a full queue drops and counts; the headers,
the samplers and the endpoint variables do what docs/tracing.md says.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tlsutil import make_pki  # noqa: E402
from receiver import NODE_DIR, ROOT, Receiver, _locked, decoder, node_ready, otel_env  # noqa: E402

# TRACE_EMIT: another build of it (a sanitizer's, say), used as it is.
EMIT = Path(os.environ.get("TRACE_EMIT", ROOT / "build" / "tests" / "trace_emit"))
SERVICE = "otel-compare"
REMOTE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

# Every kind, every attribute type, events with attributes, each status;
# a remote parent (REMOTE), a local parent, a root.
SCRIPT = "\n".join("\t".join(f) for f in [
    ("span", "server", "POST /v1/tool-calls", "2", REMOTE),
    ("attr", "server", "http.request.method", "s", "POST"),
    ("attr", "server", "http.response.status_code", "i", "201"),
    ("attr", "server", "ledger.negative", "i", "-7"),
    ("attr", "server", "ledger.replayed", "b", "false"),
    ("attr", "server", "ledger.ratio", "d", "0.25"),
    ("attr", "server", "ledger.text", "s", "h\u00e9llo \u2713 \"quoted\"\\"),
    ("span", "client", "SELECT ledger", "3", "server"),
    ("attr", "client", "db.system.name", "s", "postgresql"),
    ("event", "client", "retry", "attempt", "i", "2", "reason", "s", "serialization", "ok", "b", "true"),
    ("event", "client", "plain"),
    ("status", "client", "2", "connection refused"),
    ("end", "client"),
    ("span", "inner", "decide", "1", "server"),
    ("status", "inner", "1"),
    ("end", "inner"),
    ("end", "server"),
    ("span", "root", "gc", "1", "-"),
    ("attr", "root", "ledger.deleted", "i", "9007199254740991"),
    ("end", "root"),
]) + "\n"


@pytest.fixture(scope="module")
def emit_built():
    if "TRACE_EMIT" not in os.environ:
        with _locked(ROOT / "build" / "otel-make.lock"):
            done = subprocess.run(["make", "-s", str(EMIT.relative_to(ROOT))], cwd=ROOT,
                                  capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    node_ready()
    return EMIT


def emit_c(script, timeout=60, **otel):
    """Runs trace_emit with @otel as its OTEL_* variables; its JSON line and stderr."""
    done = subprocess.run([str(EMIT)], input=script, env=otel_env(**otel), capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def emit_js(script, protocol, url):
    done = subprocess.run(["node", str(NODE_DIR / "emit.mjs"), protocol, url, SERVICE],
                          input=script, cwd=NODE_DIR, env=otel_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def structure(spans):
    """What both exporters must agree on, ids replaced by the names they stand for."""
    by_id = {s.span_id: s.name for s in spans}
    out = {}
    for s in spans:
        assert len(s.trace_id) == 32 and int(s.trace_id, 16) != 0, s
        assert len(s.span_id) == 16 and int(s.span_id, 16) != 0, s
        assert s.end_ns >= s.start_ns > 1_600_000_000 * 10**9, s
        parent = by_id.get(s.parent_span_id, s.parent_span_id)
        out[s.name] = {
            "kind": s.kind,
            "parent": parent,
            # the type of each value is part of what is compared: 1 is not 1.0 nor True
            "attributes": {k: (type(v).__name__, v) for k, v in s.attributes.items()},
            "events": [(e["name"], {k: (type(v).__name__, v) for k, v in e["attributes"].items()})
                       for e in s.events],
            "status": s.status,
            "service": s.resource.get("service.name"),
            "trace": s.trace_id if s.name != "gc" else "random",
        }
    return out


EXPECTED = {
    "POST /v1/tool-calls": {
        "kind": 2, "parent": "00f067aa0ba902b7",
        "attributes": {"http.request.method": ("str", "POST"),
                       "http.response.status_code": ("int", 201),
                       "ledger.negative": ("int", -7),
                       "ledger.replayed": ("bool", False),
                       "ledger.ratio": ("float", 0.25),
                       "ledger.text": ("str", "h\u00e9llo \u2713 \"quoted\"\\")},
        "events": [], "status": {"code": 0, "message": ""}, "service": SERVICE,
        "trace": "4bf92f3577b34da6a3ce929d0e0e4736"},
    "SELECT ledger": {
        "kind": 3, "parent": "POST /v1/tool-calls",
        "attributes": {"db.system.name": ("str", "postgresql")},
        "events": [("retry", {"attempt": ("int", 2), "reason": ("str", "serialization"),
                              "ok": ("bool", True)}),
                   ("plain", {})],
        "status": {"code": 2, "message": "connection refused"}, "service": SERVICE,
        "trace": "4bf92f3577b34da6a3ce929d0e0e4736"},
    "decide": {
        "kind": 1, "parent": "POST /v1/tool-calls", "attributes": {}, "events": [],
        "status": {"code": 1, "message": ""}, "service": SERVICE,
        "trace": "4bf92f3577b34da6a3ce929d0e0e4736"},
    "gc": {
        "kind": 1, "parent": "", "attributes": {"ledger.deleted": ("int", 9007199254740991)},
        "events": [], "status": {"code": 0, "message": ""}, "service": SERVICE,
        "trace": "random"},
}


@pytest.mark.parametrize("protocol", ["http/json", "http/protobuf"])
def test_the_js_sdks_exporter_and_ledgerds_are_read_alike(emit_built, protocol):
    with Receiver() as js_rx, Receiver() as c_rx:
        emit_js(SCRIPT, protocol, js_rx.url + "/v1/traces")
        js = js_rx.wait_for(count=4)
        out, _ = emit_c(SCRIPT, OTEL_EXPORTER_OTLP_ENDPOINT=c_rx.url,
                        OTEL_EXPORTER_OTLP_PROTOCOL=protocol, OTEL_SERVICE_NAME=SERVICE)
        c = c_rx.wait_for(count=4)
    assert {s.protocol for s in js} == {s.protocol for s in c} == {protocol}
    assert structure(js) == EXPECTED
    assert structure(c) == EXPECTED
    assert out["exported"] == 4 and out["failed"] == out["dropped"] == 0
    # The C tracer's resource and scope, beyond what the JS SDK shares.
    assert c[0].resource["telemetry.sdk.language"] == "c"
    assert c[0].resource["telemetry.sdk.name"] == "ledgerd"
    assert c[0].resource["service.version"] == "1.2.3"
    assert c[0].scope["name"] == "ledgerd"
    # The ids the program saw are the ids that were exported.
    contexts = {v.split("-")[2]: k for k, v in out["contexts"].items()}
    assert {contexts[s.span_id] for s in c} == {"server", "client", "inner", "root"}
    assert all(s.flags & 0xff == 1 for s in c)


def test_the_traces_variables_and_resource_attributes_are_read(emit_built):
    """The signal's own variables, and service.name from OTEL_RESOURCE_ATTRIBUTES
    (percent-decoded) where OTEL_SERVICE_NAME is unset."""
    for protocol in ("http/json", "http/protobuf"):
        with Receiver() as rx:
            out, _ = emit_c(SCRIPT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=rx.url + "/v1/traces",
                            OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
                            OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=protocol,
                            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                            OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=te%2Cst,"
                                                     "service.name=otel-compare")
            spans = rx.wait_for(count=4)
        assert out["exported"] == 4
        assert {s.protocol for s in spans} == {protocol}
        assert structure(spans) == EXPECTED
        assert spans[0].resource["deployment.environment.name"] == "te,st"
    with Receiver() as rx:
        # A malformed OTEL_RESOURCE_ATTRIBUTES is dropped whole, with a warning.
        out, err = emit_c("spam\t1\tx\n", OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
                          OTEL_RESOURCE_ATTRIBUTES="service.name=kept-not,broken")
        (span,) = rx.wait_for(count=1)
    assert span.resource["service.name"] == "trace-emit"
    assert "OTEL_RESOURCE_ATTRIBUTES" in err


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_endpoint_that_is_down_costs_span_calls_nothing(emit_built):
    out, err = emit_c("spam\t300\tlost\n", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:%d" % free_port(),
                      OTEL_EXPORTER_OTLP_TIMEOUT="1500", OTEL_BSP_SCHEDULE_DELAY="10")
    # A span call never waits on the network: far under the export timeout,
    # with room for a loaded machine's scheduling.
    assert out["max_call_ns"] < 250_000_000, out
    assert out["shutdown_ns"] < 1_500_000_000 + 500_000_000, out
    assert out["exported"] == 0
    assert out["failed"] + out["dropped"] == 300
    assert out["exports_failed"] >= 1
    # Warned once, however many exports failed.
    assert err.count("trace export to") == 1, err


def test_a_collector_that_hangs_holds_shutdown_to_the_export_timeout(emit_built):
    """Connections are taken (the listen backlog) and never answered."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        url = "http://127.0.0.1:%d" % s.getsockname()[1]
        start = time.monotonic()
        out, _ = emit_c("spam\t50\thung\n", OTEL_EXPORTER_OTLP_ENDPOINT=url,
                        OTEL_EXPORTER_OTLP_TIMEOUT="1000", OTEL_BSP_SCHEDULE_DELAY="5000")
        took = time.monotonic() - start
    assert out["max_call_ns"] < 250_000_000, out
    assert 0.9 < out["shutdown_ns"] / 1e9 < 1.8, out
    assert took < 3, took
    assert out["failed"] == 50 and out["exported"] == 0


def test_a_503_is_retried_then_counted_failed(emit_built):
    with Receiver() as rx:
        rx.status = 503
        out, err = emit_c("spam\t10\trefused\n", OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
                          OTEL_EXPORTER_OTLP_TIMEOUT="2000")
        assert len(rx.requests) >= 2, rx.requests  # retried within the timeout
        assert all(status == 503 for _, _, status in rx.requests)
    assert out["failed"] == 10 and out["exported"] == 0 and out["exports_failed"] == 1
    assert out["shutdown_ns"] < 2_500_000_000
    assert "HTTP status 503" in err


def test_a_collector_that_recovers_gets_what_comes_after(emit_built):
    """A 503, then 200: the retry delivers the same batch, and what comes after."""
    with Receiver() as rx:
        rx.status = 503
        proc = subprocess.Popen([str(EMIT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=otel_env(OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
                                             OTEL_EXPORTER_OTLP_TIMEOUT="5000",
                                             OTEL_BSP_SCHEDULE_DELAY="10"))
        proc.stdin.write("spam\t3\tlater\n")
        proc.stdin.flush()
        rx.wait_requests(1)
        rx.status = 200
        proc.stdin.write("spam\t2\tafter\n")
        stdout, err = proc.communicate(timeout=30)
        out = json.loads(stdout)
        assert len(rx.wait_for(lambda s: s.name == "later", count=3)) == 3
    assert out["exported"] == 5 and out["failed"] == 0
    assert out["exports_failed"] == 0  # a retry that succeeds is no failed export
    assert err.count("trace export to") == 0, err


def test_a_full_queue_drops_and_counts(emit_built):
    with Receiver() as rx:
        out, _ = emit_c("spam\t2000\tflood\n", OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
                        OTEL_BSP_MAX_QUEUE_SIZE="8", OTEL_BSP_MAX_EXPORT_BATCH_SIZE="8")
        received = len(rx.spans)
    assert out["dropped"] > 0, out
    assert out["exported"] + out["dropped"] + out["failed"] == 2000, out
    assert received == out["exported"]


def test_the_headers_variables_arrive_as_headers(emit_built):
    with Receiver() as rx:
        emit_c("spam\t1\tx\n", OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
               OTEL_EXPORTER_OTLP_HEADERS="x-api-key=abc%20def%2C1, x-tenant = general",
               OTEL_EXPORTER_OTLP_TRACES_HEADERS="X-Tenant=traces,bad-no-equals")
        (span,) = rx.wait_for(count=1)
    assert span.headers["x-api-key"] == "abc def,1"
    assert span.headers["x-tenant"] == "traces"  # the traces variable wins over the general one


def test_always_off_exports_nothing(emit_built):
    with Receiver() as rx:
        out, _ = emit_c(SCRIPT, OTEL_EXPORTER_OTLP_ENDPOINT=rx.url, OTEL_TRACES_SAMPLER="always_off")
        assert rx.requests == []
    assert out["exported"] == 0 and out["failed"] == 0 and out["dropped"] == 0
    # Not sampled, a span still has its ids: its context goes on, unsampled.
    assert out["contexts"]["server"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert out["contexts"]["server"].endswith("-00")


def test_parentbased_follows_the_parents_sampled_flag(emit_built):
    script = "\n".join([
        "span\tno\tunsampled\t2\t00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        "end\tno",
        "span\tyes\tsampled\t2\t00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "end\tyes",
        "span\troot\tnew-root\t1\t-",
        "end\troot",
    ]) + "\n"
    with Receiver() as rx:
        out, _ = emit_c(script, OTEL_EXPORTER_OTLP_ENDPOINT=rx.url)  # the default sampler
        names = sorted(s.name for s in rx.wait_for(count=2))
    assert names == ["new-root", "sampled"]
    assert out["contexts"]["no"].endswith("-00") and out["contexts"]["yes"].endswith("-01")
    with Receiver() as rx:
        emit_c(script, OTEL_EXPORTER_OTLP_ENDPOINT=rx.url, OTEL_TRACES_SAMPLER="parentbased_always_off")
        names = sorted(s.name for s in rx.wait_for(count=1))
    assert names == ["sampled"]


def test_disabled_or_none_sends_nothing(emit_built):
    for otel in ({"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}, {}):
        with Receiver() as rx:
            if otel:
                otel["OTEL_EXPORTER_OTLP_ENDPOINT"] = rx.url
            out, _ = emit_c("spam\t5\tx\n", **otel)
            assert rx.requests == []
        assert out["exported"] == 0 and out["contexts"] == {}


def test_an_endpoint_variable_with_a_path_is_used_as_given(emit_built):
    with Receiver() as rx:
        # The general variable gets /v1/traces; the traces one is the whole URL.
        out, _ = emit_c("spam\t1\tx\n", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=rx.url + "/elsewhere")
        assert [status for _, _, status in rx.requests] == [404]
        assert out["failed"] == 1
        out, _ = emit_c("spam\t1\ty\n", OTEL_EXPORTER_OTLP_ENDPOINT=rx.url + "/")
        assert rx.wait_for(lambda s: s.name == "y")
        assert out["exported"] == 1


def test_https_with_the_ca_the_certificate_variable_names(emit_built, tmp_path):
    pki = make_pki(tmp_path)
    with Receiver(tls=(pki.server.cert, pki.server.key)) as rx:
        # Not trusted by the system's CAs: refused and counted, within the timeout.
        out, err = emit_c("spam\t1\tuntrusted\n", OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
                          OTEL_EXPORTER_OTLP_TIMEOUT="3000")
        assert out["failed"] == 1 and out["exported"] == 0
        assert out["shutdown_ns"] < 3_500_000_000
        out, err = emit_c("spam\t1\ttrusted\n", OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
                          OTEL_EXPORTER_OTLP_CERTIFICATE=str(pki.ca))
        assert out["exported"] == 1, err
        assert [s.name for s in rx.spans] == ["trusted"]
        # Another CA's: refused.
        out, _ = emit_c("spam\t1\tother\n", OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
                        OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=str(pki.other_ca),
                        OTEL_EXPORTER_OTLP_TIMEOUT="3000")
        assert out["failed"] == 1


def test_failing_then_recovering_is_logged_once_each(emit_built):
    """Exports that fail are warned of once, not per span or per export;
    the first that succeeds again says so, once."""
    with Receiver() as rx:
        rx.status = 400  # not retried: each export fails at once
        proc = subprocess.Popen([str(EMIT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=otel_env(OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
                                             OTEL_BSP_MAX_EXPORT_BATCH_SIZE="1",
                                             OTEL_BSP_SCHEDULE_DELAY="0"))
        proc.stdin.write("spam\t5\tlost\n")
        proc.stdin.flush()
        rx.wait_requests(5)
        rx.status = 200
        proc.stdin.write("spam\t3\tkept\n")
        stdout, err = proc.communicate(timeout=30)
        assert len(rx.wait_for(lambda s: s.name == "kept", count=3)) == 3
    out = json.loads(stdout)
    assert out["failed"] == 5 and out["exports_failed"] == 5 and out["exported"] == 3
    assert err.count("trace export to") == 1, err
    assert "HTTP status 400" in err
    assert err.count("recovered") == 1, err


def _without_empty(v):
    """proto3 writes no empty list; OTLP/JSON may."""
    if isinstance(v, dict):
        return {k: _without_empty(x) for k, x in v.items() if x != []}
    if isinstance(v, list):
        return [_without_empty(x) for x in v]
    return v


def test_ledgerds_json_is_all_the_schemas(emit_built):
    """Every field of ledgerd's OTLP/JSON is one the official schema knows, with
    the value's type it has: read into the schema's message and back, nothing
    is lost or changed (a misspelt or unknown field would vanish)."""
    script = SCRIPT + "\n".join([
        "span\tbusy\tbusy\t1\t00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\trojo=1,congo=2",
    ] + ["attr\tbusy\tk%d\ti\t%d" % (i, i) for i in range(130)] + [
        "end\tbusy",
    ]) + "\n"
    with Receiver() as rx:
        out, _ = emit_c(script, OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
                        OTEL_EXPORTER_OTLP_PROTOCOL="http/json")
        rx.wait_for(count=5)
        bodies = [b for ctype, b in rx.bodies if ctype == "application/json"]
    assert out["exported"] == 5
    for body in bodies:
        sent = json.loads(body)
        assert _without_empty(decoder().decode(body, b"j")) == _without_empty(sent)
    # The same fields in protobuf, as the official decoder reads them.
    with Receiver() as rx:
        out, _ = emit_c(script, OTEL_EXPORTER_OTLP_ENDPOINT=rx.url)
        rx.wait_for(count=5)
        decoded = [decoder().decode(b) for ctype, b in rx.bodies]
    spans = [s for d in decoded for rs in d["resourceSpans"] for ss in rs["scopeSpans"]
             for s in ss["spans"]]
    (busy,) = [s for s in spans if s["name"] == "busy"]
    assert busy["traceState"] == "rojo=1,congo=2"
    assert busy["droppedAttributesCount"] == 2 and len(busy["attributes"]) == 128
    assert busy["flags"] == 1
    version = (ROOT / "VERSION").read_text().strip()
    assert decoded[0]["resourceSpans"][0]["scopeSpans"][0]["scope"] == {"name": "ledgerd",
                                                                       "version": version}
    # What the check had to carry: the fields the JS comparison does not.
    text = b"".join(bodies).decode()
    for field in ('"traceState":"rojo=1,congo=2"', '"flags":1', '"droppedAttributesCount":2',
                  '"version":"%s"' % version, '"intValue":"-7"', '"doubleValue":0.25'):
        assert field in text, field
