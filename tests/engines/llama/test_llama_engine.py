"""The real llama.cpp engine the gateway's tests put behind ledger-gateway
(server.mjs, README.md): a deterministic model file, llama-server's answers
and errors, its API key, each fault hook killing the process where it says,
and generation stopping once the client has gone."""

import hashlib
import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from llama_engine import HERE, LlamaEngine, model, wait_until

HELLO = [{"role": "user", "content": "hello world, the ledger"}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("llama")


@pytest.fixture(scope="module")
def engine(folder):
    with LlamaEngine(folder / "engine.log") as e:
        yield e


def started(folder, name, *flags, **kw):
    return LlamaEngine(folder / (name + ".log"), *flags, **kw)


def test_the_model_file_is_the_same_bytes_on_every_run(tmp_path, engine):
    digests = set()
    for name in ("a.gguf", "b.gguf"):
        subprocess.run([sys.executable, HERE / "make_gguf.py", tmp_path / name], check=True,
                       capture_output=True, timeout=60)
        digests.add(hashlib.sha256((tmp_path / name).read_bytes()).hexdigest())
    path, sha256 = model()
    assert digests == {sha256}
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    # The engine loaded that very file.
    assert engine.lines("loaded")[0]["sha256"] == sha256


def test_health_props_models_and_lora_adapters_answer_as_llama_server(engine):
    assert engine.get_json("/health") == (200, {"status": "ok"})
    status, props = engine.get_json("/props")
    assert status == 200
    assert props["model_path"] == str(model()[0])
    assert props["total_slots"] == 4
    assert "<|im_start|>" in props["chat_template"]
    assert props["default_generation_settings"]["n_ctx"] == 512
    assert props["build_info"].startswith("llama.cpp ")
    status, models = engine.get_json("/v1/models")
    assert status == 200 and models["object"] == "list"
    (entry,) = models["data"]
    assert {k: entry[k] for k in ("id", "object", "owned_by")} == {
        "id": "tiny-llama", "object": "model", "owned_by": "llamacpp"}
    assert isinstance(entry["created"], int)
    assert entry["meta"]["n_vocab"] == 432 and entry["meta"]["n_ctx_train"] == 512
    assert entry["meta"]["n_embd"] == 64 and entry["meta"]["vocab_type"] == 1
    assert entry["meta"]["n_params"] > 0 and entry["meta"]["size"] > 0
    assert engine.get_json("/lora-adapters") == (200, [])
    status, body = engine.get_json("/no/such/route")
    assert (status, body) == (404, {"error": {"message": "File Not Found", "type": "not_found_error",
                                              "code": 404}})


def test_a_stream_and_a_whole_answer_carry_the_same_text_on_every_run(engine, folder):
    body = {"model": "whatever-the-client-names", "messages": HELLO, "max_tokens": 16, "seed": 7}
    first = engine.stream(body)
    assert first.status == 200 and first.complete
    assert first.headers["content-type"] == "text/event-stream"
    # llama-server's chunks: the role, one per token, the finish, then [DONE].
    assert first.events[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert len(first.contents) == 16
    last = first.events[-2]
    assert last["choices"][0] == {"finish_reason": "length", "index": 0, "delta": {}}
    assert first.events[-1] == "[DONE]"
    assert {e["object"] for e in first.events[:-1]} == {"chat.completion.chunk"}
    assert {e["id"] for e in first.events[:-1]} == {first.events[0]["id"]}
    assert first.events[0]["id"].startswith("chatcmpl-")
    assert first.events[0]["model"] == "whatever-the-client-names"

    assert engine.stream(body).text == first.text
    status, whole = engine.chat(body)
    assert status == 200 and whole["object"] == "chat.completion"
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": first.text}
    assert whole["choices"][0]["finish_reason"] == "length"
    assert whole["usage"]["completion_tokens"] == 16
    assert whole["usage"]["total_tokens"] == 16 + whole["usage"]["prompt_tokens"]
    # Greedy decoding gives one text whatever the seed; another process gives the same.
    greedy = dict(body, temperature=0, seed=1)
    text = engine.chat(greedy)[1]["choices"][0]["message"]["content"]
    assert engine.chat(dict(greedy, seed=2))[1]["choices"][0]["message"]["content"] == text
    with started(folder, "second") as again:
        assert again.chat(greedy)[1]["choices"][0]["message"]["content"] == text
        assert again.stream(body).text == first.text


def test_each_token_is_logged_with_its_text_and_the_decode_rate_is_measured(engine):
    answer = engine.stream({"messages": HELLO, "max_tokens": 200, "temperature": 0})
    rid = engine.last_request_id()
    engine.wait_line("done", rid)
    tokens = engine.lines("token", rid)
    assert [t["index"] for t in tokens] == list(range(200))
    assert "".join(t["text"] for t in tokens) == answer.text
    writes = engine.lines("write", rid)
    assert [w["kind"] for w in writes] == ["role"] + ["content"] * 200 + ["finish", "done"]
    rate = engine.lines("done", rid)[0]["predicted_per_second"]
    print("decode rate: %.0f tokens/s" % rate)
    assert rate > 50  # ~1000/s on one thread; the floor leaves room for a loaded machine


def test_a_prompt_over_the_context_is_refused_400_as_llama_server_does(engine):
    long = [{"role": "user", "content": "ledger " * 600}]
    for stream in (False, True):
        status, _, data = engine.request("POST", "/v1/chat/completions",
                                         {"messages": long, "stream": stream})
        body = json.loads(data)
        assert status == 400
        error = body["error"]
        assert error["code"] == 400 and error["type"] == "exceed_context_size_error"
        assert "exceeds the available context size (512 tokens)" in error["message"]
        assert error["n_ctx"] == 512 and error["n_prompt_tokens"] > 512


def test_bad_requests_get_llama_servers_errors(engine):
    status, body = engine.chat({"messages": "hello"})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, _, data = engine.request("POST", "/v1/chat/completions", b"{not json")
    assert status == 500 and b"server_error" in data


def test_with_an_api_key_every_endpoint_but_health_and_models_wants_it(folder):
    with started(folder, "keyed", api_key="sk-engine") as e:
        unauthorized = {"error": {"message": "Invalid API Key", "type": "authentication_error",
                                  "code": 401}}
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            for path in ("/props", "/lora-adapters"):
                assert e.get_json(path, headers=headers) == (401, unauthorized)
            status, _, data = e.request("POST", "/v1/chat/completions",
                                        {"messages": HELLO, "max_tokens": 2}, headers=headers)
            assert status == 401 and json.loads(data) == unauthorized
        # As llama-server ships: /health and /v1/models are public.
        assert e.get_json("/health", headers={})[0] == 200
        assert e.get_json("/v1/models", headers={})[0] == 200
        assert e.chat({"messages": HELLO, "max_tokens": 2})[0] == 200
        assert e.get_json("/props", headers={"X-Api-Key": "sk-engine"})[0] == 200


def test_health_answers_503_while_the_model_loads(folder):
    with started(folder, "slow-load", "--load-delay-ms", "1000", wait_healthy=False) as e:
        assert e.get_json("/health") == (503, {"error": {"message": "Loading model",
                                                         "type": "unavailable_error", "code": 503}})
        assert e.get_json("/v1/models")[0] == 503
        e.wait_line("loaded", timeout_s=30)
        assert e.get_json("/health") == (200, {"status": "ok"})


def killed(e, body):
    """A streamed request to @e, which dies on it: what the client got, and the request's log."""
    answer = e.stream(body)
    assert e.wait_exit() == -signal.SIGKILL
    rid = e.last_request_id()
    return answer, rid


def test_after_compute_kills_once_token_n_is_computed_before_its_event_is_written(folder):
    with started(folder, "after-compute", "--fault", "after_compute:3") as e:
        answer, rid = killed(e, {"messages": HELLO, "max_tokens": 10})
        assert answer.status == 200 and not answer.complete
        assert len(answer.contents) == 3
        assert [t["index"] for t in e.lines("token", rid)] == [0, 1, 2, 3]
        assert [w["token_index"] for w in e.lines("write", rid) if w["kind"] == "content"] == [0, 1, 2]
        fault = e.lines("fault", rid)[0]
        assert (fault["phase"], fault["token_index"]) == ("after_compute", 3)


def test_after_send_kills_right_after_token_ns_event_was_written(folder):
    with started(folder, "after-send", "--fault", "after_send:3") as e:
        answer, rid = killed(e, {"messages": HELLO, "max_tokens": 10})
        assert answer.status == 200 and not answer.complete
        assert len(answer.contents) == 4
        tokens = e.lines("token", rid)
        assert [t["index"] for t in tokens] == [0, 1, 2, 3]
        assert answer.contents == [t["text"] for t in tokens]
        assert e.lines("fault", rid)[0]["phase"] == "after_send"


def test_after_compute_of_token_0_sends_nothing_not_even_the_head(folder):
    with started(folder, "first-token", "--fault", "after_compute:0") as e:
        answer, rid = killed(e, {"messages": HELLO, "max_tokens": 10})
        assert answer.status is None and answer.events == []
        assert [t["index"] for t in e.lines("token", rid)] == [0]


def test_prefill_kills_before_any_token(folder):
    with started(folder, "prefill") as e:
        assert e.set_fault("prefill") == {"phase": "prefill", "at": 0, "every": False}
        answer, rid = killed(e, {"messages": HELLO, "max_tokens": 10})
        assert answer.status is None and answer.events == []
        assert e.lines("prefill", rid) and e.lines("token", rid) == []
        assert e.lines("fault", rid)[0]["phase"] == "prefill"


def test_a_one_shot_hook_is_the_next_requests_and_every_waits_for_one_that_reaches_n(folder):
    with started(folder, "one-shot") as e:
        e.set_fault("after_send", at=5)
        short = e.stream({"messages": HELLO, "max_tokens": 3})
        assert short.complete and e.alive()
        assert e.get_json("/fault")[1] == {"fault": None}
        assert e.stream({"messages": HELLO, "max_tokens": 8}).complete
        e.set_fault("after_send", at=5, every=True)
        assert e.stream({"messages": HELLO, "max_tokens": 3}).complete
        answer, _ = killed(e, {"messages": HELLO, "max_tokens": 8})
        assert len(answer.contents) == 6


def test_a_client_that_leaves_mid_stream_stops_the_generation_at_once(folder):
    """The only token that may follow the close is the one whose llama_decode was
    already running on llama.cpp's thread when the close was seen (a decode cannot
    be interrupted); it is logged, never sent, and no decode starts after it."""
    with started(folder, "leaver", "--delay-ms-per-token", "20") as e:
        answer = e.stream({"messages": HELLO, "max_tokens": 400}, close_after_events=5)
        assert len(answer.contents) >= 5 and not answer.complete
        rid = e.last_request_id()
        aborted = e.wait_line("aborted", rid)
        closed = e.lines("client_closed", rid)[0]
        lines = e.lines(request_id=rid)
        after_close = lines[lines.index(closed):]
        late = [t for t in after_close if t["event"] == "token"]
        assert len(late) == (1 if closed["decode_in_flight"] else 0)
        assert aborted["tokens_computed"] == closed["tokens_computed"] + len(late)
        assert aborted["tokens_computed"] < 100  # 20 ms a token: stopped within the 400
        # Nothing was written after the close was seen; the engine serves on.
        assert [x for x in after_close if x["event"] == "write"] == []
        time.sleep(0.2)
        assert len(e.lines("token", rid)) == aborted["tokens_computed"]
        assert e.stream({"messages": HELLO, "max_tokens": 2}).complete
        # A client waiting for a whole answer that leaves stops it as well.
        e.abandon({"messages": HELLO, "max_tokens": 400}, after_s=0.15)
        rid = e.last_request_id()
        aborted = e.wait_line("aborted", rid)
        assert aborted["tokens_computed"] < 100 and e.lines("write", rid) == []


def test_a_stopped_engine_sends_nothing_until_it_is_continued(folder):
    with started(folder, "frozen", "--delay-ms-per-token", "20") as e:
        result = {}
        reader = threading.Thread(target=lambda: result.setdefault(
            "answer", e.stream({"messages": HELLO, "max_tokens": 30})))
        reader.start()
        assert wait_until(lambda: len(e.lines("token")) >= 3, 10)
        rid = e.last_request_id()
        e.signal(signal.SIGSTOP)
        assert wait_until(lambda: e.process.state() == "T", 5)
        frozen_at = len(e.lines("token", rid))
        time.sleep(0.3)
        assert len(e.lines("token", rid)) == frozen_at
        e.signal(signal.SIGCONT)
        reader.join(timeout=30)
        assert result["answer"].complete and len(result["answer"].contents) == 30
