"""The stand-in engines serve what vLLM and SGLang serve, and every knob works.

These tests pin the shapes README.md traces to the engines' sources: a
change to engine_fake.py that drifts from the real engines fails here, not
later in a gateway test that trusted it. Each server is a process, started
as the gateway's tests start it (the "address" line on stderr).
"""

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAKE = Path(__file__).resolve().parent / "engine_fake.py"
KEY = "engine-secret"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LORA = ("support-bot", "/loras/support-bot")


class Engine:
    """One engine_fake.py process and an HTTP client for it."""

    def __init__(self, kind, *args, log=None):
        argv = [sys.executable, str(FAKE), "--kind", kind] + [str(a) for a in args]
        if log is not None:
            argv += ["--log", str(log)]
        self.kind = kind
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        line = self.proc.stderr.readline()
        if not line:
            raise RuntimeError("engine_fake.py exited (%s)" % self.proc.wait())
        self.host, port = json.loads(line)["address"].rsplit(":", 1)
        self.port = int(port)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc.stderr.close()

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=10)

    def request(self, method, path, body=None, key=KEY, headers=None):
        """One request on a new connection; returns (status, headers, body bytes)."""
        conn = self.conn()
        try:
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            if key is not None:
                hdrs["Authorization"] = "Bearer " + key
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers=hdrs)
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def get_json(self, path, key=KEY):
        status, _, body = self.request("GET", path, key=key)
        return status, json.loads(body)

    def control(self, **knobs):
        status, _, body = self.request("POST", "/_fake/control", knobs, key=None)
        assert status == 200, body
        return json.loads(body)

    def log(self):
        return self.get_json("/_fake/requests", key=None)[1]["requests"]

    def chat(self, messages=None, key=KEY, headers=None, **fields):
        body = {"model": MODEL, "messages": messages or [{"role": "user", "content": "hi"}]}
        body.update(fields)
        return self.request("POST", "/v1/chat/completions", body, key=key, headers=headers)

    def stream(self, key=KEY, headers=None, **fields):
        """Opens a streamed chat; returns (connection, response) for the caller to read."""
        conn = self.conn()
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
        body.update(fields)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json",
                              "Authorization": "Bearer " + key, **(headers or {})})
        return conn, conn.getresponse()


def events(response):
    """The `data:` payloads of an SSE response, JSON-decoded but for [DONE]."""
    found = []
    for raw in response.read().decode().split("\n\n"):
        if raw.strip():
            assert raw.startswith("data: "), raw
            payload = raw[len("data: "):]
            found.append(payload if payload == "[DONE]" else json.loads(payload))
    return found


def wait_for(predicate, timeout_s=5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm") / "requests.jsonl"
    engine = Engine("vllm", "--api-key", KEY, "--model", MODEL, "--model-path",
                    "/models/llama-3.1-8b", "--lora", "%s=%s" % LORA, log=log)
    engine.log_path = log
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def sglang():
    engine = Engine("sglang", "--api-key", KEY, "--model", MODEL, "--quantization", "fp8",
                    "--kv-cache-dtype", "fp8_e4m3", "--tp-size", "2", "--chat-template",
                    "llama-3-instruct", "--lora", "%s=%s" % LORA)
    yield engine
    engine.stop()


@pytest.fixture(params=["vllm", "sglang"])
def engine(request, vllm, sglang):
    return {"vllm": vllm, "sglang": sglang}[request.param]


@pytest.fixture(autouse=True)
def fresh(request):
    """Each test meets the command line's state and an empty log."""
    for name in ("vllm", "sglang"):
        if name in request.fixturenames:
            request.getfixturevalue(name).request("POST", "/_fake/reset", {}, key=None)
    yield


# --- vLLM's shapes -------------------------------------------------------------

def test_vllm_health_version_and_metrics_need_no_key(vllm):
    status, _, body = vllm.request("GET", "/health", key=None)
    assert (status, body) == (200, b"")
    assert vllm.get_json("/version", key=None) == (200, {"version": "0.11.0"})
    status, headers, body = vllm.request("GET", "/metrics", key=None)
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    line = next(x for x in body.decode().splitlines()
                if x.startswith("vllm:cache_config_info{"))
    assert line.endswith("} 1.0")
    labels = line[len("vllm:cache_config_info{"):-len("} 1.0")].split(",")
    names = [label.split("=", 1)[0] for label in labels]
    assert names == sorted(names), "prometheus_client writes labels sorted"
    assert 'cache_dtype="auto"' in labels and 'engine="0"' in labels
    assert {"block_size", "gpu_memory_utilization", "enable_prefix_caching"} <= set(names)


def test_vllm_guards_only_its_prefixes_with_the_middlewares_answer(vllm):
    for key in (None, "wrong"):
        status, _, body = vllm.request("GET", "/v1/models", key=key)
        assert (status, json.loads(body)) == (401, {"error": "Unauthorized"})
        status, _, body = vllm.chat(key=key)
        assert (status, json.loads(body)) == (401, {"error": "Unauthorized"})
    assert vllm.request("GET", "/health", key="wrong")[0] == 200
    assert vllm.request("GET", "/version", key="wrong")[0] == 200


def test_vllm_models_lists_the_base_and_its_adapters(vllm):
    status, listing = vllm.get_json("/v1/models")
    assert status == 200 and listing["object"] == "list"
    base, adapter = listing["data"]
    assert set(base) == {"id", "object", "created", "owned_by", "root", "parent",
                         "max_model_len", "permission"}
    assert (base["id"], base["object"], base["owned_by"], base["root"], base["parent"],
            base["max_model_len"]) == (MODEL, "model", "vllm", "/models/llama-3.1-8b", None, 4096)
    assert base["permission"][0]["object"] == "model_permission"
    assert base["permission"][0]["id"].startswith("modelperm-")
    assert (adapter["id"], adapter["root"], adapter["parent"], adapter["max_model_len"]) == \
        (LORA[0], LORA[1], MODEL, None)


def test_vllm_stream_role_content_finish_usage_done(vllm):
    conn, response = vllm.stream(headers={"X-Request-Id": "abc"}, seed=1,
                                 stream_options={"include_usage": True})
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/event-stream; charset=utf-8"
    assert response.getheader("Transfer-Encoding") == "chunked"
    got = events(response)
    conn.close()
    first, *content, finish, usage, done = got
    assert done == "[DONE]"
    assert first["id"] == "chatcmpl-abc" and first["object"] == "chat.completion.chunk"
    assert first["prompt_token_ids"] is None
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None}]
    assert len(content) == 8
    assert content[0]["choices"][0] == {"index": 0, "delta": {"content": "harbor"},
                                        "logprobs": None, "finish_reason": None,
                                        "token_ids": None}
    assert "".join(c["choices"][0]["delta"]["content"] for c in content).split()[:2] == \
        ["harbor", "kelp"]
    assert finish["choices"][0] == {"index": 0, "delta": {"content": ""}, "logprobs": None,
                                    "finish_reason": "stop", "stop_reason": None,
                                    "token_ids": None}
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 4, "total_tokens": 12, "completion_tokens": 8}


def test_vllm_stream_cut_short_by_max_tokens_ends_on_length(vllm):
    conn, response = vllm.stream(max_tokens=2)
    got = events(response)
    conn.close()
    assert [c["choices"][0]["finish_reason"] for c in got[:-1]] == [None, None, "length"]
    assert got[-1] == "[DONE]"


def test_vllm_whole_answer(vllm):
    status, _, body = vllm.chat(seed=1)
    answer = json.loads(body)
    assert status == 200 and answer["object"] == "chat.completion"
    assert answer["id"].startswith("chatcmpl-") and answer["model"] == MODEL
    choice = answer["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"].startswith("harbor kelp")
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", None)
    assert answer["usage"] == {"prompt_tokens": 4, "total_tokens": 12, "completion_tokens": 8,
                               "prompt_tokens_details": None}


def test_vllm_an_adapter_is_a_model_and_a_stranger_is_404(vllm):
    status, _, body = vllm.chat(model=LORA[0])
    assert status == 200 and json.loads(body)["model"] == LORA[0]
    status, _, body = vllm.chat(model="other/model")
    assert (status, json.loads(body)) == (404, {"error": {
        "message": "The model `other/model` does not exist.", "type": "NotFoundError",
        "param": "model", "code": 404}})


def test_vllm_over_long_prompts_are_400_before_any_stream(vllm):
    long = [{"role": "user", "content": "word " * 4096}]
    for stream in (False, True):
        status, _, body = vllm.chat(messages=long, stream=stream)
        error = json.loads(body)["error"]
        assert status == 400 and set(error) == {"message", "type", "param", "code"}
        assert (error["type"], error["param"], error["code"]) == \
            ("BadRequestError", "input_tokens", 400)
        assert error["message"].startswith("This model's maximum context length is 4096 tokens."
                                           " However, your request has 4099 input tokens.")
    status, _, body = vllm.chat(max_tokens=4095)
    error = json.loads(body)["error"]
    assert (status, error["param"]) == (400, "max_tokens")
    assert error["message"].startswith("'max_tokens' or 'max_completion_tokens' is too large")


def test_vllm_before_0_10_1_answers_the_flat_error():
    engine = Engine("vllm", "--vllm-error-shape", "legacy", "--max-model-len", "8")
    try:
        status, _, body = engine.chat(messages=[{"role": "user", "content": "a b c d e"}],
                                      key=None)
        assert status == 400
        assert set(json.loads(body)) == {"object", "message", "type", "param", "code"}
        assert json.loads(body)["object"] == "error"
        engine.control(stream_error={"after": 0})
        conn, response = engine.stream(key="")
        error = events(response)[1]
        conn.close()
        assert error["error"]["object"] == "error" and error["error"]["code"] == 500
    finally:
        engine.stop()


# --- SGLang's shapes -----------------------------------------------------------

def test_sglang_health_and_metrics_need_no_key_everything_else_does(sglang):
    for path in ("/health", "/health_generate"):
        status, _, body = sglang.request("GET", path, key=None)
        assert (status, body) == (200, b"")
    assert sglang.request("GET", "/metrics", key=None)[0] == 404, "metrics off by default"
    for path in ("/get_model_info", "/model_info", "/server_info", "/v1/models", "/nowhere"):
        status, _, body = sglang.request("GET", path, key="wrong")
        assert (status, json.loads(body)) == (401, {"error": "Unauthorized"}), path


def test_sglang_model_info_and_server_info(sglang):
    for path in ("/get_model_info", "/model_info"):
        status, info = sglang.get_json(path)
        assert status == 200
        assert set(info) == {"model_path", "tokenizer_path", "is_generation",
                             "preferred_sampling_params", "weight_version",
                             "has_image_understanding", "has_audio_understanding",
                             "model_type", "architectures"}
        assert (info["model_path"], info["tokenizer_path"], info["weight_version"]) == \
            (MODEL, MODEL, "default")
    for path in ("/get_server_info", "/server_info"):
        status, info = sglang.get_json(path)
        assert status == 200
        assert {k: info[k] for k in ("model_path", "tokenizer_path", "served_model_name",
                                     "quantization", "kv_cache_dtype", "tp_size", "pp_size",
                                     "chat_template", "lora_paths", "weight_version")} == {
            "model_path": MODEL, "tokenizer_path": MODEL, "served_model_name": MODEL,
            "quantization": "fp8", "kv_cache_dtype": "fp8_e4m3", "tp_size": 2, "pp_size": 1,
            "chat_template": "llama-3-instruct", "lora_paths": ["%s=%s" % LORA],
            "weight_version": "default"}
        assert info["version"] == "0.5.4" and info["api_key"] == KEY, \
            "SGLang serves its server args unredacted"


def test_sglang_models_root_is_the_served_name(sglang):
    status, listing = sglang.get_json("/v1/models")
    base, adapter = listing["data"]
    assert set(base) == {"id", "object", "created", "owned_by", "root", "parent",
                         "max_model_len"}
    assert (base["id"], base["owned_by"], base["root"], base["parent"],
            base["max_model_len"]) == (MODEL, "sglang", MODEL, None, 4096)
    assert (adapter["id"], adapter["parent"], adapter["max_model_len"]) == \
        (LORA[0], MODEL, None)


def test_sglang_stream_carries_reasoning_content_and_matched_stop(sglang):
    conn, response = sglang.stream(model="anything", stream_options={"include_usage": True})
    got = events(response)
    conn.close()
    first, *content, finish, usage, done = got
    assert done == "[DONE]" and len(content) == 8
    assert len(first["id"]) == 32 and first["model"] == "anything", "SGLang echoes the model"
    assert first["choices"] == [{"index": 0, "delta": {"reasoning_content": None,
                                                       "role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None, "matched_stop": None}]
    assert content[0]["choices"][0]["delta"] == {"reasoning_content": None, "content": "amber"}
    assert finish["choices"][0] == {"index": 0, "delta": {"reasoning_content": None},
                                    "logprobs": None, "finish_reason": "stop",
                                    "matched_stop": 128009}
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 8


def test_sglang_whole_answer_and_flat_errors(sglang):
    status, _, body = sglang.chat(model="not-listed")
    answer = json.loads(body)
    assert status == 200 and answer["model"] == "not-listed", "SGLang checks no model name"
    assert answer["metadata"] == {"weight_version": "default"}
    assert answer["choices"][0]["matched_stop"] == 128009
    long = [{"role": "user", "content": "word " * 4096}]
    status, _, body = sglang.chat(messages=long)
    assert (status, json.loads(body)) == (400, {
        "object": "error", "message": "The input (4099 tokens) is longer than the model's "
        "context length (4096 tokens).", "type": "BadRequestError", "param": None, "code": 400})


def test_sglang_over_long_stream_is_200_with_an_error_event(sglang):
    conn, response = sglang.stream(messages=[{"role": "user", "content": "word " * 4096}])
    assert response.status == 200
    got = events(response)
    conn.close()
    assert got[1] == "[DONE]" and got[0]["error"]["code"] == 400
    assert got[0]["error"]["object"] == "error"


def test_sglang_metrics_with_the_flag():
    engine = Engine("sglang", "--enable-metrics")
    try:
        status, _, body = engine.request("GET", "/metrics", key=None)
        assert status == 200 and b"sglang:num_running_reqs{" in body
    finally:
        engine.stop()


# --- the knobs -----------------------------------------------------------------

def test_identity_drift_shows_wherever_the_engine_serves_it(vllm, sglang):
    vllm.control(identity={"model": "drifted", "model_path": "/other", "kv_cache_dtype": "fp8",
                           "loras": {}})
    listing = vllm.get_json("/v1/models")[1]["data"]
    assert [(c["id"], c["root"]) for c in listing] == [("drifted", "/other")]
    assert 'cache_dtype="fp8"' in vllm.request("GET", "/metrics", key=None)[2].decode()
    sglang.control(identity={"weight_version": "v7", "tp_size": 4, "pp_size": 2,
                             "tokenizer_path": "/tok", "chat_template": None})
    info = sglang.get_json("/server_info")[1]
    assert (info["weight_version"], info["tp_size"], info["pp_size"], info["tokenizer_path"],
            info["chat_template"]) == ("v7", 4, 2, "/tok", None)
    assert sglang.get_json("/model_info")[1]["weight_version"] == "v7"


@pytest.mark.parametrize("status", [400, 401, 403, 408, 429, 503])
def test_fail_answers_the_next_n_chats_then_recovers(engine, status):
    engine.control(fail={"status": status, "count": 2})
    for _ in range(2):
        got, _, body = engine.chat()
        assert got == status
        body = json.loads(body)
        if status in (401, 403):
            assert body == {"error": "Unauthorized" if status == 401 else "Forbidden"}
        elif engine.kind == "vllm":
            assert body["error"]["code"] == status
        else:
            assert (body["object"], body["code"]) == ("error", status)
    assert engine.chat()[0] == 200
    assert [r["outcome"] for r in engine.log()] == ["failed_on_command"] * 2 + ["ok"]


def test_fail_takes_a_message(vllm):
    vllm.control(fail={"status": 503, "message": "Loading model"})
    assert json.loads(vllm.chat()[2])["error"]["message"] == "Loading model"


@pytest.mark.parametrize("done", [True, False])
def test_stream_error_after_k_chunks(engine, done):
    engine.control(stream_error={"after": 3, "done": done, "message": "boom"})
    conn, response = engine.stream()
    got = events(response)
    conn.close()
    content = [e for e in got[1:] if isinstance(e, dict) and "choices" in e]
    assert len(content) == 3
    error = got[4]["error"]
    assert error["message"] == "boom"
    assert error["code"] == (500 if engine.kind == "vllm" else 400)
    assert got[5:] == (["[DONE]"] if done else [])
    assert engine.log()[-1]["outcome"] == "error_event"
    conn, response = engine.stream()
    assert events(response)[-1] == "[DONE]", "one stream only by default"
    conn.close()


def test_stream_cut_after_k_chunks(engine):
    engine.control(stream_cut={"after": 2})
    conn, response = engine.stream()
    with pytest.raises(http.client.IncompleteRead) as cut:
        response.read()
    conn.close()
    chunks = [c for c in cut.value.partial.decode().split("\n\n") if c.startswith("data: ")]
    assert len(chunks) == 3 and "[DONE]" not in cut.value.partial.decode()
    assert engine.log()[-1]["outcome"] == "cut" and engine.log()[-1]["chunks"] == 2


def test_health_knob(vllm, sglang):
    vllm.control(health="fail")
    sglang.control(health="fail")
    assert vllm.request("GET", "/health")[0] == 503
    assert sglang.request("GET", "/health")[0] == 503
    assert sglang.request("GET", "/health_generate")[0] == 503
    sglang.control(health="loading")
    assert sglang.request("GET", "/health")[0] == 503
    vllm.control(health="loading")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        vllm.request("GET", "/health")
    assert vllm.log()[-1]["outcome"] == "not_listening"
    vllm.control(health="ok")
    assert vllm.request("GET", "/health")[0] == 200


def test_a_client_closing_mid_stream_is_logged(engine):
    engine.control(chunk_delay_ms=200)
    conn, response = engine.stream()
    response.fp.readline()  # the first chunk's size line: the stream has begun
    conn.close()  # the socket and the response's file on it
    entry = wait_for(lambda: [r for r in engine.log() if r["client_closed"]])
    assert entry and entry[0]["outcome"] == "client_closed" and entry[0]["chunks"] < 8


def test_chunk_delay_paces_the_stream(vllm):
    vllm.control(chunk_delay_ms=30, answer_tokens=4)
    start = time.monotonic()
    conn, response = vllm.stream()
    events(response)
    conn.close()
    assert time.monotonic() - start >= 0.12


def test_the_log_holds_the_headers_of_interest(vllm):
    vllm.chat(headers={"X-Ledger-Request-Id": "r1", "X-Ledger-Attempt-Id": "a1",
                       "Idempotency-Key": "k", "X-Other": "no"})
    entry = vllm.log()[-1]
    assert entry["headers"] == {"authorization": "Bearer " + KEY, "x-ledger-request-id": "r1",
                                "x-ledger-attempt-id": "a1", "idempotency-key": "k"}
    assert (entry["method"], entry["path"], entry["status"], entry["model"], entry["stream"],
            entry["chunks"], entry["kind"]) == \
        ("POST", "/v1/chat/completions", 200, MODEL, False, 0, "vllm")
    on_disk = [json.loads(x) for x in vllm.log_path.read_text().splitlines()]
    assert on_disk[-1] == entry


def test_control_refuses_what_it_cannot_obey(vllm):
    for body in ([], {"nope": 1}, {"health": "sick"}, {"fail": {"status": 418}},
                 {"stream_cut": {"after": -1}}, {"identity": {"colour": "red"}},
                 {"chunk_delay_ms": "slow"}):
        status, _, answer = vllm.request("POST", "/_fake/control", body, key=None)
        assert status == 400 and json.loads(answer)["error"]["code"] == "invalid_control"


def test_reset_restores_the_command_line(vllm):
    vllm.control(identity={"model": "x"}, health="fail", answer_tokens=1)
    vllm.chat()
    state = vllm.request("POST", "/_fake/reset", {}, key=None)
    assert json.loads(state[2])["identity"]["model"] == MODEL
    assert vllm.log() == [] and vllm.request("GET", "/health")[0] == 200
