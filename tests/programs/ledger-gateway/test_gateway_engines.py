"""ledger-gateway in front of engines as they ship (GATEWAY.md, "The engine
side"): the stand-in vLLM and SGLang servers of tests/engines/fakes/, which
answer only their engine's own endpoints, and the real llama.cpp engine of
tests/engines/llama/.

Each test starts a gateway with nothing but `--replica NAME=URL` (or a
--config file) in front of them, on a ledgerd of the module, and judges
what the client got, what each engine was asked (its request log) and what
ledgerd recorded.
"""

import http.client
import json
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "faults"))
sys.path.insert(0, str(ROOT / "tests" / "engines" / "llama"))

from stack import GATEWAY, Process, Stack, Timing, clean_env, http_json, wait_until  # noqa: E402

FAKE = ROOT / "tests" / "engines" / "fakes" / "engine_fake.py"
TIMING = Timing(lease_ms=2000, soft_timeout_ms=1500, stall_timeout_ms=3000)
PROBE_MS = "200"
VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("engines"), TIMING)
    yield s
    s.close()


class Engine(Process):
    """An engine_fake.py process: its URL, its knobs and its request log."""

    def __init__(self, folder, name, kind, *args):
        self.name = name
        self.log_path = Path(folder) / ("%s.jsonl" % name)
        super().__init__([sys.executable, FAKE, "--kind", kind, "--log", self.log_path,
                          *[str(a) for a in args]], Path(folder) / ("%s.stderr" % name))
        self.wait_ready()

    def control(self, **knobs):
        status, body = http_json(self.url, "POST", "/_fake/control", knobs)
        assert status == 200, body
        return body

    def requests(self, path="/v1/chat/completions"):
        status, body = http_json(self.url, "GET", "/_fake/requests")
        assert status == 200, body
        return [r for r in body["requests"] if path is None or r["path"] == path]


class Setup:
    """A tenant of the module's ledgerd, engines, and a gateway in front of them."""

    def __init__(self, stack, folder):
        self.stack = stack
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.token = stack.new_tenant_token()
        self.processes = []
        self.gateway = None

    def engine(self, name, kind, *args):
        e = Engine(self.folder, name, kind, *args)
        self.processes.append(e)
        return e

    def start_gateway(self, *args, env=None, probe_ms=PROBE_MS):
        argv = [GATEWAY, "--listen", "127.0.0.1:0", "--ledger-url", self.stack.ledger_url,
                "--ledger-token", self.token, "--lease-ms", str(TIMING.lease_ms),
                "--soft-timeout-ms", str(TIMING.soft_timeout_ms),
                "--stall-timeout-ms", str(TIMING.stall_timeout_ms),
                "--probe-interval-ms", probe_ms, *[str(a) for a in args]]
        variables = clean_env()
        variables.update(env or {})
        self.gateway = Process(argv, self.folder / "gateway.log", env=variables).wait_ready()
        self.processes.append(self.gateway)
        return self.gateway

    def config(self, replicas):
        """A --config file of @replicas (a list of dicts), written as YAML (JSON is YAML)."""
        path = self.folder / "gateway.yaml"
        path.write_text(json.dumps({"replicas": replicas}, indent=2))
        return path

    def timeline(self, rid):
        status, body = http_json(self.stack.ledger_url, path="/v1/requests/" + rid,
                                 token=self.token)
        return body if status == 200 else None

    def answer(self, rid):
        status, body = http_json(self.stack.ledger_url, path="/v1/requests/%s/answer" % rid,
                                 token=self.token)
        return body if status == 200 else None

    def close(self):
        for p in reversed(self.processes):
            p.stop()


@pytest.fixture
def setup(stack, request, tmp_path):
    s = Setup(stack, tmp_path)
    yield s
    s.close()


# --- talking to the gateway --------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(gw, method, path, body=None, headers=None, timeout=30):
    """One request; returns (status, lower-cased headers, body bytes)."""
    conn = http.client.HTTPConnection(gw.host, gw.port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def chat(gw, model=VLLM_MODEL, stream=True, headers=None, **fields):
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}],
            "stream": stream, "max_tokens": 8, **fields}
    return call(gw, "POST", "/v1/chat/completions", body, headers)


def sse_data(raw):
    """The data of each SSE event of @raw, in order ("[DONE]" as is)."""
    return [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]


def content(raw):
    """The text a stream carried."""
    text = ""
    for data in sse_data(raw):
        if data == "[DONE]":
            continue
        for choice in json.loads(data).get("choices", []):
            text += (choice.get("delta") or {}).get("content") or ""
    return text


def readiness(gw):
    status, _, body = call(gw, "GET", "/readyz")
    return status, json.loads(body)


def replica_state(gw, name):
    return next(r for r in readiness(gw)[1]["replicas"] if r["name"] == name)


def wait_state(gw, name, state, timeout_s=10):
    return wait_until(lambda: replica_state(gw, name)["state"] == state, timeout_s)


def identity_of(setup, rid, attempt="a1"):
    """The identity ledgerd recorded with an attempt's creation."""
    for e in setup.timeline(rid)["events"]:
        if e["type"] == "attempt_created" and e.get("attempt_id") == attempt:
            return e["detail"].get("identity")
    return None


# --- each kind, as it ships --------------------------------------------------

@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_stream_through_each_kind_detected_and_read(setup, kind):
    extra = (["--kv-cache-dtype", "fp8_e4m3", "--enable-metrics"] if kind == "vllm" else
             ["--quantization", "fp8", "--tp-size", "2", "--weight-version", "v7",
              "--chat-template", "chatml"])
    e = setup.engine("e1", kind, "--model", VLLM_MODEL, *extra)
    gw = setup.start_gateway("--replica", "e1=" + e.url)
    assert wait_state(gw, "e1", "healthy")
    assert replica_state(gw, "e1")["kind"] == kind
    status, headers, raw = chat(gw)
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), raw
    assert sse_data(raw)[-1] == "[DONE]" and content(raw)
    rid = headers["x-request-id"]
    assert setup.timeline(rid)["request"]["status"] == "completed"
    identity = identity_of(setup, rid)
    assert identity["model"] == VLLM_MODEL
    if kind == "vllm":
        assert identity["kv_cache_dtype"] == "fp8_e4m3"  # from /metrics
        assert identity["quantization"] == "unknown"      # vLLM serves none: declare it
    else:
        assert (identity["quantization"], identity["parallel_layout"],
                identity["weights_revision"]) == ("fp8", "tp2", "v7")
        assert identity["chat_template"].startswith("sha256:")
    # The engine got the client's request and nothing of ledgerd's: it runs no tools.
    asked = e.requests()
    assert len(asked) == 1 and not any(k.startswith("x-ledger") for k in asked[0]["headers"])


def test_the_real_llama_cpp_engine_streams_and_answers_whole(setup):
    import llama_engine

    llama_engine.install()
    engine = llama_engine.LlamaEngine(setup.folder / "llama.log")
    try:
        gw = setup.start_gateway("--replica", "l1=" + engine.url)
        assert wait_state(gw, "l1", "healthy")
        assert replica_state(gw, "l1")["kind"] == "llama.cpp"
        status, headers, raw = chat(gw, model="anything")  # one model, any name
        assert status == 200 and sse_data(raw)[-1] == "[DONE]" and content(raw), raw
        identity = identity_of(setup, headers["x-request-id"])
        assert identity["model"] == "tiny-llama" and identity["tokenizer"]["n_vocab"] > 0
        status, headers, raw = chat(gw, model="anything", stream=False)
        assert status == 200 and headers["content-type"].startswith("application/json")
        whole = json.loads(raw)
        assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["content"]
    finally:
        engine.stop()


def test_non_streaming_is_one_answer_kept_as_sent(setup):
    e = setup.engine("e1", "vllm")
    gw = setup.start_gateway("--replica", "e1=" + e.url, env={"GATEWAY_KEY_SECRET": "s" * 32})
    status, headers, raw = chat(gw, stream=False, headers={"Idempotency-Key": "whole-1"})
    assert status == 200 and headers["content-type"].startswith("application/json"), raw
    answer = json.loads(raw)
    assert answer["object"] == "chat.completion"
    rid = headers["x-request-id"]
    view = setup.timeline(rid)["request"]
    assert view["status"] == "completed"
    assert view["delivered_output_tokens"] == answer["usage"]["completion_tokens"]
    kept = setup.answer(rid)
    assert kept["kept"] and kept["status"] == 200
    import base64
    assert base64.b64decode(kept["body_b64"]) == raw
    assert e.requests()[0]["stream"] is False


@pytest.mark.parametrize("stream", [True, False])
def test_a_keyless_answer_is_not_kept(setup, stream):
    """Nothing can repeat a request without a key: its finish keeps no answer."""
    e = setup.engine("e1", "vllm")
    gw = setup.start_gateway("--replica", "e1=" + e.url)
    status, headers, raw = chat(gw, stream=stream)
    assert status == 200, raw
    rid = headers["x-request-id"]
    assert setup.timeline(rid)["request"]["status"] == "completed"
    status, body = http_json(setup.stack.ledger_url, path="/v1/requests/%s/answer" % rid,
                             token=setup.token)
    assert status == 404 and body["error"]["code"] == "answer_not_found", body


def cut_after_first_event(gw):
    """A streamed chat whose client reads the head and one event, then closes."""
    sock = socket.create_connection((gw.host, gw.port), timeout=30)
    body = json.dumps({"model": VLLM_MODEL, "stream": True, "max_tokens": 8,
                       "messages": [{"role": "user", "content": "hello there"}]}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    got = b""
    while b"data: " not in got:
        more = sock.recv(4096)
        assert more, got
        got += more
    sock.close()
    return got


def test_whole_answers_share_a_connection_and_a_cut_stream_closes_its_own(setup):
    e = setup.engine("e1", "vllm", "--chunk-delay-ms", "100")
    gw = setup.start_gateway("--replica", "e1=" + e.url)
    for _ in range(3):
        status, _, raw = chat(gw)
        assert status == 200 and sse_data(raw)[-1] == "[DONE]", raw
    ports = [r["peer_port"] for r in e.requests()]
    assert len(ports) == 3 and len(set(ports)) == 1, e.requests()
    # A stream cut short is never handed on: the engine sees its connection
    # close, and the next request comes on a new one.
    assert cut_after_first_event(gw).startswith(b"HTTP/1.1 200")
    assert wait_until(lambda: len(e.requests()) == 4 and
                      e.requests()[3]["outcome"] == "client_closed", 10), e.requests()
    status, _, raw = chat(gw)
    assert status == 200 and sse_data(raw)[-1] == "[DONE]", raw
    after = e.requests()[4]["peer_port"]
    assert after not in ports and after != e.requests()[3]["peer_port"], e.requests()


def test_models_lists_the_healthy_replicas_and_routes_by_model(setup):
    a = setup.engine("a", "vllm", "--model", "model-a")
    b = setup.engine("b", "sglang", "--model", "model-b")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "b=" + b.url)
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    status, _, raw = call(gw, "GET", "/v1/models")
    listed = json.loads(raw)
    assert status == 200 and listed["object"] == "list"
    assert sorted(m["id"] for m in listed["data"]) == ["model-a", "model-b"]
    for model, engine, other in (("model-a", a, b), ("model-b", b, a)):
        for _ in range(2):
            status, _, raw = chat(gw, model=model)
            assert status == 200, raw
    assert len(a.requests()) == 2 and len(b.requests()) == 2
    status, headers, raw = chat(gw, model="model-c")
    assert status == 404 and json.loads(raw)["error"]["code"] == "model_not_found"
    assert headers["x-should-retry"] == "false"
    # A replica down is listed no more.
    b.control(health="fail")
    assert wait_state(gw, "b", "down")
    assert [m["id"] for m in json.loads(call(gw, "GET", "/v1/models")[2])["data"]] == ["model-a"]


# --- what an engine answers ----------------------------------------------------

@pytest.mark.parametrize("stream", [True, False])
def test_an_engines_400_is_the_clients_error_passed_on_and_the_pool_stays_up(setup, stream):
    a = setup.engine("a", "vllm")
    b = setup.engine("b", "vllm")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "b=" + b.url)
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    a.control(fail={"status": 400, "count": 1})
    b.control(fail={"status": 400, "count": 1})
    status, headers, raw = chat(gw, stream=stream)
    assert status == 400, raw
    engine_body = json.loads(raw)
    assert "maximum context length" in json.dumps(engine_body)  # the engine's own words
    assert headers["x-should-retry"] == "false"
    rid = headers["x-request-id"]
    view = setup.timeline(rid)
    assert view["request"]["status"] == "failed" and len(view["attempts"]) == 1
    assert view["request"]["client_error"]["error"] == engine_body["error"]
    # No rerun: one engine was asked once; and both stay in the pool.
    assert len(a.requests()) + len(b.requests()) == 1
    assert [r["state"] for r in readiness(gw)[1]["replicas"]] == ["healthy", "healthy"]
    statuses = [chat(gw, stream=stream)[0] for _ in range(4)]
    assert statuses.count(200) == 3 and statuses.count(400) == 1  # the other armed 400


def test_sglangs_400_inside_a_stream_before_any_delta_is_the_clients_error(setup):
    a = setup.engine("a", "sglang")
    b = setup.engine("b", "sglang")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "b=" + b.url)
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    long_prompt = [{"role": "user", "content": "word " * 5000}]
    status, headers, raw = call(gw, "POST", "/v1/chat/completions",
                                {"model": VLLM_MODEL, "messages": long_prompt, "stream": True})
    assert status == 400, raw
    assert json.loads(raw)["error"]["code"] == 400
    assert len(a.requests()) + len(b.requests()) == 1
    assert setup.timeline(headers["x-request-id"])["request"]["status"] == "failed"


def test_401_quarantines_the_replica_and_the_request_goes_elsewhere(setup):
    a = setup.engine("a", "vllm")
    b = setup.engine("b", "vllm")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "b=" + b.url,
                             probe_ms="60000")
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    a.control(fail={"status": 401, "count": 5})
    b.control(fail={"status": 401, "count": 5})
    # The first request meets a 401 on one replica, then the other: its attempts are spent.
    status, headers, raw = chat(gw)
    assert status == 503 and json.loads(raw)["error"]["code"] in (
        "retry_budget_exhausted", "no_replica_available"), raw
    assert len(setup.timeline(headers["x-request-id"])["attempts"]) == 2
    states = {r["name"]: (r["state"], r["reason"]) for r in readiness(gw)[1]["replicas"]}
    assert states == {"a": ("quarantined", "unauthorized"), "b": ("quarantined", "unauthorized")}
    assert readiness(gw)[0] == 503


def test_busy_engines_send_the_request_elsewhere_and_are_not_marked_down(setup):
    a = setup.engine("a", "vllm")
    b = setup.engine("b", "vllm")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "b=" + b.url,
                             probe_ms="60000")
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    for busy in (429, 503, 408):
        a.control(fail={"status": busy, "count": 1})
        b.control(fail={"status": busy, "count": 1})
        status, headers, raw = chat(gw)
        # One replica said busy, the other too (each armed once): or it answered.
        rid = headers["x-request-id"]
        attempts = setup.timeline(rid)["attempts"]
        assert status in (200, 503), raw
        assert len(attempts) >= 2 or status == 200
        for r in readiness(gw)[1]["replicas"]:
            assert r["state"] in ("healthy", "slow"), r  # never down for being busy
        a.control(fail=None)
        b.control(fail=None)


def test_an_error_event_before_the_first_delta_reruns_elsewhere(setup):
    a = setup.engine("a", "vllm")
    b = setup.engine("b", "vllm")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "b=" + b.url)
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    # vLLM opens a stream with a chunk that holds only the role: held back, it lets the
    # error event after it be a failure before the first output, rerun unseen.
    a.control(stream_error={"after": 0, "count": 1, "done": True})
    reruns = []
    for _ in range(2):  # ties go round robin: one of the two starts on a
        status, headers, raw = chat(gw)
        assert status == 200 and sse_data(raw)[-1] == "[DONE]", raw
        assert "error" not in raw.decode()  # the failed attempt's event never reached it
        roles = [d for d in sse_data(raw)[:-1] if "role" in json.loads(d)["choices"][0]["delta"]]
        assert len(roles) == 1, raw  # one attempt's opening, not two
        attempts = setup.timeline(headers["x-request-id"])["attempts"]
        reruns.append([(x["attempt_id"], x["replica"]) for x in attempts])
    assert sorted(reruns, key=len) == [[("a1", "b")], [("a1", "a"), ("a2", "b")]], reruns


def test_a_rerun_goes_only_to_a_replica_of_the_same_identity(setup):
    """GATEWAY.md: the identity is what must match before a rerun may use
    another replica (and ledgerd's policy refuses a rerun on another model
    revision). b serves the same model with another KV cache dtype; a, its
    twin c. a's stream is cut before the first delta: the rerun skips b,
    next in turn, and goes to c."""
    a = setup.engine("a", "vllm", "--kv-cache-dtype", "auto", "--enable-metrics")
    b = setup.engine("b", "vllm", "--kv-cache-dtype", "fp8_e4m3", "--enable-metrics")
    c = setup.engine("c", "vllm", "--kv-cache-dtype", "auto", "--enable-metrics")
    a.control(stream_cut={"after": 0, "count": 1})
    gw = setup.start_gateway(*[x for e in (a, b, c)
                               for x in ("--replica", "%s=%s" % (e.name, e.url))])
    for e in (a, b, c):
        assert wait_state(gw, e.name, "healthy")
    # A fresh gateway's first request goes to its first replica.
    status, headers, raw = chat(gw)
    assert status == 200 and sse_data(raw)[-1] == "[DONE]", raw
    attempts = setup.timeline(headers["x-request-id"])["attempts"]
    assert [(x["attempt_id"], x["replica"]) for x in attempts] == [("a1", "a"), ("a2", "c")]
    assert attempts[0]["model_revision"] == attempts[1]["model_revision"]
    assert b.requests() == []


def test_an_error_event_after_the_first_delta_ends_the_stream(setup):
    a = setup.engine("a", "vllm")
    gw = setup.start_gateway("--replica", "a=" + a.url)
    assert wait_state(gw, "a", "healthy")
    a.control(stream_error={"after": 3, "count": 1, "done": True})
    status, headers, raw = chat(gw)
    events = sse_data(raw)
    assert status == 200 and events[-1] != "[DONE]", events
    assert json.loads(events[-1])["error"]["code"] == "upstream_decode_interrupted"
    view = setup.timeline(headers["x-request-id"])
    assert view["request"]["status"] == "terminated" and len(view["attempts"]) == 1


# --- identity, keys, headers ----------------------------------------------------

def test_a_declared_identity_quarantines_a_replica_that_serves_otherwise(setup):
    a = setup.engine("a", "sglang", "--quantization", "fp8", "--model", "m")
    b = setup.engine("b", "sglang", "--quantization", "fp8", "--model", "m")
    cfg = setup.config([
        {"name": "a", "url": a.url, "identity": {"quantization": "fp8",
                                                   "weights_revision": "r1"}},
        {"name": "b", "url": b.url, "kind": "sglang",
         "identity": {"quantization": "fp8", "weights_revision": "r1"}},
    ])
    gw = setup.start_gateway("--config", cfg)
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    status, headers, _ = chat(gw, model="m")
    identity = identity_of(setup, headers["x-request-id"])
    assert identity["weights_revision"] == "r1"  # SGLang serves "default": the declaration
    # b's engine now serves another quantization: quarantined at its next probe.
    b.control(identity={"quantization": "awq"})
    assert wait_state(gw, "b", "quarantined")
    state = replica_state(gw, "b")
    assert (state["reason"], state["field"]) == ("identity_mismatch", "quantization")
    before = len(b.requests())
    for _ in range(3):
        assert chat(gw, model="m")[0] == 200
    assert len(b.requests()) == before  # no attempt on it
    b.control(identity={"quantization": "fp8"})
    assert wait_state(gw, "b", "healthy")  # readmitted by a good probe


def test_api_keys_go_to_the_replica_on_every_request_and_the_clients_never(setup):
    a = setup.engine("a", "vllm", "--api-key", "engine-key-a")
    cfg = setup.config([{"name": "a", "url": a.url, "api_key_env": "A_KEY"}])
    gw = setup.start_gateway("--config", cfg, env={"A_KEY": "engine-key-a"})
    assert wait_state(gw, "a", "healthy")
    status, _, raw = chat(gw, headers={"Authorization": "Bearer the-clients-own"})
    assert status == 200, raw
    everything = a.requests(path=None)
    assert any(r["path"] == "/v1/models" for r in everything)  # the probes asked too
    assert {r["headers"].get("authorization") for r in everything
            if r["path"].startswith("/v1/")} == {"Bearer engine-key-a"}


def test_without_its_key_a_replica_is_quarantined_unauthorized(setup):
    a = setup.engine("a", "sglang", "--api-key", "right")
    cfg = setup.config([{"name": "a", "url": a.url, "kind": "sglang",
                         "api_key_env": "A_KEY"}])
    gw = setup.start_gateway("--config", cfg, env={"A_KEY": "wrong"})
    assert wait_state(gw, "a", "quarantined")
    assert replica_state(gw, "a")["reason"] == "unauthorized"
    assert readiness(gw)[0] == 503
    assert chat(gw)[0] == 503


def test_ledger_headers_go_only_to_a_replica_that_runs_tools(setup):
    a = setup.engine("a", "vllm")
    b = setup.engine("b", "vllm")
    cfg = setup.config([{"name": "a", "url": a.url, "runs_tools": True},
                        {"name": "b", "url": b.url}])
    gw = setup.start_gateway("--config", cfg)
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    for _ in range(4):
        assert chat(gw)[0] == 200
    got_a, got_b = a.requests(), b.requests()
    assert got_a and got_b
    assert all("x-ledger-request-id" in r["headers"] and "x-ledger-attempt-id" in r["headers"]
               for r in got_a)
    assert not any(k.startswith("x-ledger") for r in got_b for k in r["headers"])


def test_settled_tool_calls_over_4_kib_are_cut_and_the_rest_counted(setup):
    """GATEWAY.md: X-Ledger-Settled-Tool-Calls is capped at 4 KiB, with
    X-Ledger-Settled-Tool-Calls-Omitted: n beyond. a1's replica settles 40
    tool calls (about 140 bytes each in the array) before its first delta,
    then dies; the rerun's replica gets the first calls that fit, and the
    count of the rest."""
    sys.path.insert(0, str(ROOT / "sdk" / "python"))
    from ledger_client import Ledger
    engines = {n: setup.engine(n, "vllm") for n in ("a", "b")}
    for e in engines.values():
        e.control(chunk_delay_ms=1200)
    cfg = setup.config([{"name": n, "url": e.url, "runs_tools": True}
                        for n, e in engines.items()])
    gw = setup.start_gateway("--config", cfg)
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    got = {}
    asking = threading.Thread(target=lambda: got.update(answer=chat(gw)))
    asking.start()

    def first_attempt():
        status, page = http_json(setup.stack.ledger_url, path="/v1/requests?status=open",
                                 token=setup.token)
        for item in page["items"] if status == 200 else []:
            attempts = (setup.timeline(item["request_id"]) or {}).get("attempts") or []
            if attempts:
                return item["request_id"], attempts[0]
        return None
    found = wait_until(first_attempt, 5, 0.01)
    assert found, "no attempt in ledgerd"
    rid, a1 = found
    ledger = Ledger(setup.stack.ledger_url, setup.token)
    for n in range(40):
        ledger.tool_call(rid, "call_%02d" % n, lambda key, token: {"ok": True},
                         attempt_id=a1["attempt_id"], tool="create_ticket", args={"n": n})
    first, other = engines[a1["replica"]], engines["b" if a1["replica"] == "a" else "a"]
    other.control(chunk_delay_ms=0)
    first.signal(signal.SIGKILL)
    asking.join(timeout=20)
    assert got["answer"][0] == 200, got
    rerun = other.requests()[-1]["headers"]
    header = rerun["x-ledger-settled-tool-calls"]
    kept = json.loads(header)
    assert len(header.encode()) <= 4096 < len(header.encode()) + 150, len(header)
    assert [c["tool_call_id"] for c in kept] == ["call_%02d" % n for n in range(len(kept))]
    assert int(rerun["x-ledger-settled-tool-calls-omitted"]) == 40 - len(kept) > 0
    assert setup.timeline(rid)["request"]["status"] == "completed"


@pytest.mark.parametrize("content,problem", [
    ("replicas: [{name: a}]", "without its name and url"),
    ("replicas: [{name: a, url: 'http://127.0.0.1:9', kind: tgi}]", "kind other than"),
    ("replicas: [{name: a, url: 'http://127.0.0.1:9', identity: {colour: red}}]",
     "identity field"),
    ("replicas: [{name: a, url: 'http://127.0.0.1:9', api_key_env: NOT_SET_HERE}]",
     "is not set"),
    ("replicas: [{name: a, url: 'http://127.0.0.1:9', extra: 1}]", "unknown key"),
    ("other: 1", "one key, replicas"),
    ("replicas: [", "not YAML"),
])
def test_a_bad_config_stops_start_up_with_one_line(setup, content, problem):
    import subprocess

    path = setup.folder / "bad.yaml"
    path.write_text(content)
    p = subprocess.run([str(GATEWAY), "--ledger-url", "http://127.0.0.1:9", "--ledger-token",
                        "t", "--config", str(path)], capture_output=True, text=True,
                       env=clean_env(), timeout=10)
    assert p.returncode == 2 and problem in p.stderr.splitlines()[0], p.stderr


# --- choosing, probing -----------------------------------------------------------

def test_the_fewest_in_flight_wins_ties_round_robin(setup):
    a = setup.engine("a", "vllm", "--chunk-delay-ms", "300")
    b = setup.engine("b", "vllm", "--chunk-delay-ms", "300")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "b=" + b.url)
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    import threading

    results = []
    slow = threading.Thread(target=lambda: results.append(chat(gw, max_tokens=8)))
    slow.start()
    assert wait_until(lambda: sum(r["in_flight"] for r in readiness(gw)[1]["replicas"]) == 1, 5)
    busy = next(r["name"] for r in readiness(gw)[1]["replicas"] if r["in_flight"] == 1)
    idle, busy_engine = (b, a) if busy == "a" else (a, b)
    # The busy one stays slow (its stream lasts 2.4 s) while the other answers at once:
    # while one is busy, every request goes to the other.
    idle.control(chunk_delay_ms=0)
    for _ in range(3):
        assert chat(gw)[0] == 200
    busy_engine.control(chunk_delay_ms=0)
    slow.join(30)
    assert len(idle.requests()) == 3
    # Idle again: ties alternate.
    before = (len(a.requests()), len(b.requests()))
    for _ in range(4):
        assert chat(gw)[0] == 200
    assert (len(a.requests()) - before[0], len(b.requests()) - before[1]) == (2, 2)


def test_probes_eject_a_failing_replica_and_readmit_it(setup):
    a = setup.engine("a", "vllm")
    b = setup.engine("b", "vllm")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "b=" + b.url)
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    a.control(health="fail")
    assert wait_state(gw, "a", "down")
    assert replica_state(gw, "a")["reason"] == "unhealthy"
    before = len(a.requests())
    for _ in range(3):
        assert chat(gw)[0] == 200
    assert len(a.requests()) == before
    assert readiness(gw)[0] == 200  # one healthy replica is enough
    a.control(health="ok")
    assert wait_state(gw, "a", "healthy")


def test_a_loading_engine_is_slow_not_down(setup):
    import llama_engine

    llama_engine.install()
    engine = llama_engine.LlamaEngine(setup.folder / "llama.log", "--load-delay-ms", "3000",
                                      wait_healthy=False)
    try:
        gw = setup.start_gateway("--replica", "l1=" + engine.url)
        # llama-server answers 503 "Loading model" until its model is in: slow, then healthy.
        assert wait_state(gw, "l1", "slow", 3)
        assert replica_state(gw, "l1")["reason"] == "loading"
        assert wait_state(gw, "l1", "healthy", 15)
        assert chat(gw, model="x")[0] == 200
    finally:
        engine.stop()


def test_an_sglang_engine_that_fails_its_health_once_up_is_down(setup):
    a = setup.engine("a", "sglang")
    gw = setup.start_gateway("--replica", "a=" + a.url)
    assert wait_state(gw, "a", "healthy")
    a.control(health="fail")
    assert wait_state(gw, "a", "down")
    assert replica_state(gw, "a")["reason"] == "unhealthy"


def test_a_replica_that_stops_answering_fails_over_and_is_ejected(setup):
    a = setup.engine("a", "vllm")
    b = setup.engine("b", "vllm")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "b=" + b.url,
                             probe_ms="60000")
    assert wait_state(gw, "a", "healthy") and wait_state(gw, "b", "healthy")
    a.control(stream_cut={"after": 0, "count": 5})
    b.control(stream_cut={"after": 0, "count": 0})
    statuses = [chat(gw)[0] for _ in range(3)]
    assert statuses == [200, 200, 200]
    assert replica_state(gw, "a")["state"] == "down" or len(a.requests()) == 0


# --- readiness and metrics ---------------------------------------------------------

def test_readiness_names_every_replica_and_metrics_count(setup):
    a = setup.engine("a", "vllm")
    gw = setup.start_gateway("--replica", "a=" + a.url, "--replica", "gone=http://127.0.0.1:9")
    assert wait_state(gw, "a", "healthy")
    status, body = readiness(gw)
    assert status == 200 and body["ledger"] is True
    gone = replica_state(gw, "gone")
    assert gone["state"] == "down" and gone["reason"] in ("unreachable", "kind_unknown")
    assert chat(gw)[0] == 200
    status, _, raw = call(gw, "GET", "/metrics")
    text = raw.decode()
    assert status == 200
    for name in ("ledger_gateway_requests_total{outcome=\"completed\"} 1",
                 "ledger_gateway_attempts_total 1",
                 "ledger_gateway_replicas{state=\"healthy\"} 1",
                 "ledger_gateway_replicas{state=\"down\"} 1",
                 "ledger_gateway_added_first_byte_seconds_count 1",
                 "ledger_gateway_resumes_total 0",
                 "ledger_gateway_replays_total{row=\"1\"} 0",
                 "ledger_gateway_failovers_total{action=\"retry_prefill\"} 0"):
        assert name in text, name


def test_ops_listen_serves_health_readiness_and_metrics_apart(setup):
    """--ops-listen (GATEWAY.md, "Command line"): health, readiness and metrics
    on an address of their own, and no metrics on the clients' listener; the
    operations listener serves nothing else."""
    a = setup.engine("a", "vllm")
    ops_port = free_port()
    gw = setup.start_gateway("--replica", "a=" + a.url, "--ops-listen",
                             "127.0.0.1:%d" % ops_port)
    assert wait_state(gw, "a", "healthy")
    ops = type("Ops", (), {"host": "127.0.0.1", "port": ops_port})
    assert call(ops, "GET", "/healthz")[0] == 200
    status, _, raw = call(ops, "GET", "/readyz")
    assert status == 200 and json.loads(raw)["replicas"][0]["name"] == "a"
    status, _, raw = call(ops, "GET", "/metrics")
    assert status == 200 and b"ledger_gateway_attempts_total" in raw
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions")):
        status, _, raw = call(ops, method, path, {"model": VLLM_MODEL, "messages": []})
        assert status == 404 and json.loads(raw)["error"]["code"] == "not_found", (path, raw)
    status, _, raw = call(gw, "GET", "/metrics")
    assert status == 404 and json.loads(raw)["error"]["code"] == "not_found"
    assert call(gw, "GET", "/healthz")[0] == 200 and readiness(gw)[0] == 200
    assert chat(gw)[0] == 200
    # HEAD wherever GET is (RFC 9110 9.3.2): the same head, no body.
    for target, path in ((ops, "/readyz"), (ops, "/healthz"), (gw, "/v1/models")):
        got, head = call(target, "GET", path), call(target, "HEAD", path)
        assert head[0] == got[0] == 200 and head[2] == b"", (path, head)
        assert head[1]["content-length"] == str(len(got[2])), (path, head[1])
    # An address that cannot be bound stops start-up.
    taken = Process([GATEWAY, "--listen", "127.0.0.1:0", "--ledger-url",
                     setup.stack.ledger_url, "--replica", "a=" + a.url,
                     "--ops-listen", "127.0.0.1:%d" % ops_port],
                    setup.folder / "taken.log", env=dict(clean_env(), LEDGER_TOKEN=setup.token))
    assert taken.proc.wait(timeout=10) == 1
    assert b"--ops-listen" in taken.proc.stderr.read()


def test_a_keyed_whole_answer_is_replayed_byte_for_byte(setup):
    e = setup.engine("e1", "vllm")
    gw = setup.start_gateway("--replica", "e1=" + e.url,
                             env={"GATEWAY_KEY_SECRET": "s" * 32})
    key = {"Idempotency-Key": "whole-1", "Authorization": "Bearer c"}
    first = chat(gw, stream=False, headers=key)
    again = chat(gw, stream=False, headers=key)
    assert first[0] == again[0] == 200 and first[2] == again[2], (first, again)
    assert again[1].get("idempotent-replayed") == "true"
    assert again[1]["content-type"] == first[1]["content-type"]
    assert len(e.requests()) == 1
    # Another body under the key is refused, as for a stream.
    status, _, raw = chat(gw, stream=False, headers=key, max_tokens=3)
    assert status == 422 and json.loads(raw)["error"]["code"] == "idempotency_key_reused"
