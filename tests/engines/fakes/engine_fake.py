#!/usr/bin/env python3
"""A stand-in vLLM or SGLang server for ledger-gateway's tests.

Neither engine runs here (no GPU, no PyPI), so the gateway's tests talk to
this server instead. It answers the endpoints the gateway uses, in each
engine's own shapes, as read in the engines' sources (README.md beside this
file names the file and version behind every endpoint and field), and fails
on command.

    engine_fake.py --kind vllm|sglang [--host 127.0.0.1] [--port 0] [--api-key KEY]
                   [--model NAME] [--model-path PATH] [--max-model-len N] [--version V]
                   [--tokenizer-path P] [--quantization Q] [--kv-cache-dtype D]
                   [--chat-template T] [--tp-size N] [--pp-size N] [--weight-version V]
                   [--lora NAME=PATH]... [--answer-tokens N] [--chunk-delay-ms N]
                   [--vllm-error-shape current|legacy] [--enable-metrics] [--log PATH]

Once listening it writes one JSON line with "address" on stderr, as every
test process of this repository does. Each request it served (the control
endpoints aside) is a JSON line in --log and in GET /_fake/requests:
{"t", "kind", "method", "path", "status", "headers" (authorization,
x-request-id, idempotency-key and every x-ledger-* header, lower case),
"model", "stream", "chunks" (content chunks written), "outcome",
"client_closed", "peer_port" (the client's port: one per connection)}.

The knobs (POST /_fake/control, a JSON object; keys left out keep their
value; the answer is the resulting state, also at GET /_fake/state):
  "identity": {model, model_path, tokenizer_path, quantization, kv_cache_dtype,
               chat_template, tp_size, pp_size, weight_version, loras: {name: path},
               max_model_len, version}     what the endpoints serve (a replica "drifts")
  "health": "ok" | "fail" | "loading"      fail: the health endpoint answers 503;
               loading: SGLang's health answers 503 (status Starting), vLLM closes
               every connection unanswered (it listens only once loaded)
  "fail": {"status": S, "count": N, "message"?} | null
               the next N chat requests are answered S (400: the context-length
               error; 401, 403: the auth middleware's answer; 408, 429, 500, 503)
  "stream_error": {"after": K, "count": N, "done": true, "message"?} | null
               the next N streams send the engine's error event after K content
               chunks, then "data: [DONE]" unless done is false
  "stream_cut": {"after": K, "count": N} | null
               the next N streams are cut (the socket closed) after K content chunks
  "chunk_delay_ms": N                      a pause before each content chunk
  "answer_tokens": N                       the length of the answer when max_tokens allows
POST /_fake/reset puts back the command line's state and empties the log.
The control endpoints need no key: they are the test's, never an engine's.

The answer is deterministic: token k of the answer to a request with seed s
is WORDS[(7 s + 3 k) mod 32]; a prompt counts one token a word of its
messages' text plus three a message.
"""

import argparse
import copy
import hashlib
import json
import select
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KINDS = ("vllm", "sglang")
WORDS = (
    "amber", "basalt", "cedar", "delta", "ember", "fjord", "granite", "harbor",
    "indigo", "juniper", "kelp", "lagoon", "meadow", "nectar", "obsidian", "prairie",
    "quartz", "river", "saffron", "tundra", "umber", "valley", "willow", "xenon",
    "yarrow", "zephyr", "aspen", "birch", "coral", "dune", "estuary", "fern",
)
DEFAULT_VERSION = {"vllm": "0.11.0", "sglang": "0.5.4"}
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
EOS_TOKEN_ID = 128009  # Llama 3's <|eot_id|>: SGLang's matched_stop on a natural stop
FAIL_STATUSES = (400, 401, 403, 408, 429, 500, 503)
# vLLM's AuthenticationMiddleware guards these prefixes only (vllm/entrypoints/
# serve/middleware/authenticate.py, GUARDED_PREFIX).
VLLM_GUARDED = ("/v1", "/v2", "/inference", "/cohere")
LOGGED_HEADERS = ("authorization", "x-request-id", "idempotency-key")


class ControlError(ValueError):
    """A control body the fake cannot obey."""


def token_text(seed, k):
    word = WORDS[(7 * seed + 3 * k) % len(WORDS)]
    return word if k == 0 else " " + word


def prompt_tokens(messages):
    """One token a word of the messages' text, three a message."""
    count = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        count += 3 + len(content.split()) if isinstance(content, str) else 3
    return count


def initial_state(args):
    identity = {
        "model": args.model,
        "model_path": args.model_path or args.model,
        "tokenizer_path": args.tokenizer_path or args.model_path or args.model,
        "quantization": args.quantization,
        "kv_cache_dtype": args.kv_cache_dtype,
        "chat_template": args.chat_template,
        "tp_size": args.tp_size,
        "pp_size": args.pp_size,
        "weight_version": args.weight_version,
        "loras": dict(args.lora),
        "max_model_len": args.max_model_len,
        "version": args.version or DEFAULT_VERSION[args.kind],
    }
    return {"identity": identity, "health": "ok", "fail": None, "stream_error": None,
            "stream_cut": None, "chunk_delay_ms": args.chunk_delay_ms,
            "answer_tokens": args.answer_tokens}


def checked_count(knob, name):
    value = knob.get(name, 1)
    if not isinstance(value, int) or value < 0:
        raise ControlError("%s must be an integer >= 0" % name)
    return value


def parse_control(body, state):
    """Applies a control body to a copy of @state; returns the copy."""
    if not isinstance(body, dict):
        raise ControlError("the body must be an object")
    state = copy.deepcopy(state)
    unknown = set(body) - {"identity", "health", "fail", "stream_error", "stream_cut",
                           "chunk_delay_ms", "answer_tokens"}
    if unknown:
        raise ControlError("unknown keys: %s" % ", ".join(sorted(unknown)))
    if "identity" in body:
        identity = body["identity"]
        if not isinstance(identity, dict) or set(identity) - set(state["identity"]):
            raise ControlError("identity takes the keys %s" % ", ".join(state["identity"]))
        if "loras" in identity and not isinstance(identity["loras"], dict):
            raise ControlError("identity.loras must be an object {name: path}")
        state["identity"].update(identity)
    if "health" in body:
        if body["health"] not in ("ok", "fail", "loading"):
            raise ControlError("health must be ok, fail or loading")
        state["health"] = body["health"]
    for name in ("chunk_delay_ms", "answer_tokens"):
        if name in body:
            if not isinstance(body[name], int) or body[name] < 0:
                raise ControlError("%s must be an integer >= 0" % name)
            state[name] = body[name]
    if "fail" in body:
        knob = body["fail"]
        if knob is not None:
            if not isinstance(knob, dict) or knob.get("status") not in FAIL_STATUSES:
                raise ControlError("fail.status must be one of %s" % list(FAIL_STATUSES))
            knob = {"status": knob["status"], "count": checked_count(knob, "count"),
                    "message": knob.get("message")}
        state["fail"] = knob
    for name in ("stream_error", "stream_cut"):
        if name in body:
            knob = body[name]
            if knob is not None:
                if not isinstance(knob, dict):
                    raise ControlError("%s must be an object or null" % name)
                knob = {"after": checked_count(knob, "after"),
                        "count": checked_count(knob, "count"),
                        "done": bool(knob.get("done", True)), "message": knob.get("message")}
            state[name] = knob
    return state


class Fake(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, args):
        super().__init__((args.host, args.port), Handler)
        self.kind = args.kind
        self.api_key = args.api_key
        self.legacy_errors = args.kind == "vllm" and args.vllm_error_shape == "legacy"
        self.enable_metrics = args.enable_metrics
        self.args = args
        self.lock = threading.Lock()
        self.state = initial_state(args)
        self.requests = []
        self.in_flight = 0  # requests begun and not yet recorded
        self.recorded = threading.Condition(self.lock)
        self.serial = 0
        self.log_file = open(args.log, "a", encoding="utf-8") if args.log else None

    def snapshot(self):
        with self.lock:
            return copy.deepcopy(self.state)

    def take(self, name):
        """Consumes one use of the one-shot knob @name; returns it, or None."""
        with self.lock:
            knob = self.state[name]
            if knob is None or knob["count"] == 0:
                return None
            knob["count"] -= 1
            return dict(knob)

    def next_id(self):
        with self.lock:
            self.serial += 1
            return hashlib.sha256(b"%s-%d" % (self.kind.encode(), self.serial)).hexdigest()[:32]

    def begin(self):
        with self.lock:
            self.in_flight += 1

    def record(self, entry):
        line = json.dumps(entry)
        with self.lock:
            self.in_flight -= 1
            self.requests.append(entry)
            if self.log_file is not None:
                self.log_file.write(line + "\n")
                self.log_file.flush()
            self.recorded.notify_all()

    def settled_requests(self, timeout_s=2.0):
        """The log once no request is between its answer and its record, in the order
        the requests came: a client that read an answer finds it logged (within
        @timeout_s, for one still streaming), after those it sent before."""
        with self.lock:
            self.recorded.wait_for(lambda: self.in_flight == 0, timeout_s)
            return sorted(self.requests, key=lambda r: r["t"])  # in the order they came


# --- the engines' error shapes -------------------------------------------------

def error_object(fake, status, message, err_type, param=None):
    """The JSON error answer of the fake's engine (not the auth middleware's)."""
    if fake.kind == "vllm" and not fake.legacy_errors:
        # vLLM >= 0.10.1: ErrorResponse{error: ErrorInfo} (engine/protocol.py)
        return {"error": {"message": message, "type": err_type, "param": param,
                          "code": status}}
    # SGLang's ErrorResponse, and vLLM's before 0.10.1: flat, object "error"
    return {"object": "error", "message": message, "type": err_type, "param": param,
            "code": status}


def stream_error_object(fake, status, message, err_type):
    """The error event inside a stream: both engines wrap it in {"error": ...}."""
    body = error_object(fake, status, message, err_type)
    return body if "error" in body else {"error": body}


def auth_object(status):
    """Both engines' auth middleware answers a bare string, not their envelope."""
    return {"error": "Unauthorized" if status == 401 else "Forbidden"}


def context_error(fake, n_prompt, max_tokens):
    """The engine's message for a prompt (or prompt and max_tokens) over the context."""
    limit = fake.snapshot()["identity"]["max_model_len"]
    if fake.kind == "sglang":
        return ("The input (%d tokens) is longer than the model's context length "
                "(%d tokens)." % (n_prompt, limit)), None
    if n_prompt >= limit:
        return ("This model's maximum context length is %d tokens. However, your request "
                "has %d input tokens. Please reduce the length of the input messages."
                % (limit, n_prompt)), "input_tokens"
    return ("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum "
            "context length is %d tokens and your request has %d input tokens (%d > %d - %d)."
            % (max_tokens, limit, n_prompt, max_tokens, limit, n_prompt)), "max_tokens"


# --- the engines' model listings and info ---------------------------------------

def vllm_models(identity, created):
    def permission():
        return {"id": "modelperm-" + hashlib.sha256(b"perm").hexdigest()[:32],
                "object": "model_permission", "created": created,
                "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                "organization": "*", "group": None, "is_blocking": False}
    cards = [{"id": identity["model"], "object": "model", "created": created,
              "owned_by": "vllm", "root": identity["model_path"], "parent": None,
              "max_model_len": identity["max_model_len"], "permission": [permission()]}]
    for name, path in identity["loras"].items():
        cards.append({"id": name, "object": "model", "created": created, "owned_by": "vllm",
                      "root": path, "parent": identity["model"], "max_model_len": None,
                      "permission": [permission()]})
    return {"object": "list", "data": cards}


def sglang_models(identity, created):
    cards = [{"id": identity["model"], "object": "model", "created": created,
              "owned_by": "sglang", "root": identity["model"], "parent": None,
              "max_model_len": identity["max_model_len"]}]
    for name, path in identity["loras"].items():
        cards.append({"id": name, "object": "model", "created": created, "owned_by": "sglang",
                      "root": path, "parent": identity["model"], "max_model_len": None})
    return {"object": "list", "data": cards}


def sglang_model_info(identity):
    return {"model_path": identity["model_path"], "tokenizer_path": identity["tokenizer_path"],
            "is_generation": True, "preferred_sampling_params": None,
            "weight_version": identity["weight_version"], "has_image_understanding": False,
            "has_audio_understanding": False, "model_type": "llama",
            "architectures": ["LlamaForCausalLM"]}


def sglang_server_info(fake, identity):
    """A part of ServerArgs as dataclasses.asdict gives it, with what the scheduler adds."""
    loras = identity["loras"]
    return {"model_path": identity["model_path"], "tokenizer_path": identity["tokenizer_path"],
            "tokenizer_mode": "auto", "skip_tokenizer_init": False, "load_format": "auto",
            "trust_remote_code": False, "context_length": None, "is_embedding": False,
            "revision": None, "host": fake.args.host, "port": fake.server_address[1],
            "dtype": "auto", "quantization": identity["quantization"],
            "kv_cache_dtype": identity["kv_cache_dtype"], "mem_fraction_static": 0.88,
            "max_running_requests": 128, "chunked_prefill_size": 8192, "page_size": 1,
            "device": "cuda", "tp_size": identity["tp_size"], "pp_size": identity["pp_size"],
            "stream_interval": 1, "random_seed": 0, "log_level": "info",
            "api_key": fake.api_key, "admin_api_key": None,
            "served_model_name": identity["model"],
            "weight_version": identity["weight_version"],
            "chat_template": identity["chat_template"], "completion_template": None,
            "reasoning_parser": None, "tool_call_parser": None, "dp_size": 1,
            "enable_lora": True if loras else None,
            "lora_paths": ["%s=%s" % (n, p) for n, p in loras.items()] or None,
            "max_loras_per_batch": 8, "allow_auto_truncate": False,
            "max_total_num_tokens": 20480, "max_req_input_len": identity["max_model_len"] - 5,
            "internal_states": [{"avg_spec_accept_length": None,
                                 "last_gen_throughput": 0.0}],
            "version": identity["version"]}


def vllm_metrics(identity):
    """Prometheus text with vllm:cache_config_info: CacheConfig.metrics_info() (every
    field as str) plus engine, labels sorted as prometheus_client writes them."""
    labels = {
        "block_size": "16", "gpu_memory_utilization": "0.9", "swap_space": "4",
        "cache_dtype": identity["kv_cache_dtype"], "is_attention_free": "False",
        "num_gpu_blocks_override": "None", "sliding_window": "None",
        "enable_prefix_caching": "True", "prefix_caching_hash_algo": "sha256",
        "cpu_offload_gb": "0", "calculate_kv_scales": "False",
        "cpu_kvcache_space_bytes": "None", "mamba_page_size_padded": "None",
        "mamba_block_size": "None", "mamba_cache_dtype": "auto",
        "mamba_ssm_cache_dtype": "auto", "num_gpu_blocks": "2048", "num_cpu_blocks": "0",
        "kv_sharing_fast_prefill": "False", "kv_cache_memory_bytes": "None",
        "kv_offloading_size": "None", "kv_offloading_backend": "None", "engine": "0",
    }
    labelstr = ",".join('%s="%s"' % (k, v.replace("\\", r"\\").replace('"', r'\"'))
                        for k, v in sorted(labels.items()))
    model = identity["model"].replace('"', r'\"')
    return ("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="%s"} 0.0\n'
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="%s"} 0.0\n'
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n"
            "vllm:cache_config_info{%s} 1.0\n" % (model, model, labelstr))


# --- the chat completion -------------------------------------------------------

class Chat:
    """One POST /v1/chat/completions: its checks, then the answer whole or streamed."""

    def __init__(self, handler, body, entry):
        self.h = handler
        self.fake = handler.server
        self.body = body
        self.entry = entry
        self.state = self.fake.snapshot()
        self.identity = self.state["identity"]
        self.created = int(time.time())
        request_id = handler.headers.get("X-Request-Id")
        if self.fake.kind == "vllm":
            # vLLM takes X-Request-Id as the base of its id (engine/serving.py)
            self.id = "chatcmpl-" + (request_id or self.fake.next_id())
            self.model = self.identity["model"] if not body.get("model") else body["model"]
        else:
            # SGLang's id is its request's rid, and it echoes the request's model
            self.id = self.fake.next_id()
            self.model = body.get("model") or self.identity["model"]

    def run(self):
        messages = self.body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self.h.reply_error(400, "messages: Field required", "Bad Request")
        knob = self.fake.take("fail")
        if knob is not None:
            self.entry["outcome"] = "failed_on_command"
            return self.fail_on_command(knob)
        if self.fake.kind == "vllm" and self.body.get("model") and \
                self.body["model"] != self.identity["model"] and \
                self.body["model"] not in self.identity["loras"]:
            return self.h.reply_error(404, "The model `%s` does not exist." % self.body["model"],
                                      "NotFoundError", param="model")
        self.n_prompt = prompt_tokens(messages)
        limit = self.body.get("max_completion_tokens") or self.body.get("max_tokens")
        natural = self.state["answer_tokens"]
        self.n_answer = min(natural, limit) if limit else natural
        self.finish = "length" if limit and limit < natural else "stop"
        stream = bool(self.body.get("stream"))
        # vLLM counts max_tokens in (engine/serving.py _validate_input); the fake's
        # SGLang checks the input alone (tokenizer_manager's first check)
        over = self.n_prompt >= self.identity["max_model_len"] or \
            (self.fake.kind == "vllm" and limit
             and self.n_prompt + limit > self.identity["max_model_len"])
        if over and not (self.fake.kind == "sglang" and stream):
            message, param = context_error(self.fake, self.n_prompt, limit)
            return self.h.reply_error(400, message, "BadRequestError", param=param)
        if not stream:
            return self.whole()
        return self.streamed(over)

    def fail_on_command(self, knob):
        status = knob["status"]
        if status in (401, 403):
            return self.h.reply_json(status, auth_object(status))
        if status == 400:
            message, param = context_error(self.fake, self.fake.snapshot()["identity"]
                                           ["max_model_len"] + 1, None)
            return self.h.reply_error(400, knob["message"] or message, "BadRequestError",
                                      param=param)
        phrase = HTTPStatus(status).phrase
        return self.h.reply_error(status, knob["message"] or phrase, phrase)

    def text(self):
        seed = self.body.get("seed") if isinstance(self.body.get("seed"), int) else 0
        return [token_text(seed, k) for k in range(self.n_answer)]

    def usage(self):
        usage = {"prompt_tokens": self.n_prompt, "total_tokens": self.n_prompt + self.n_answer,
                 "completion_tokens": self.n_answer}
        if self.fake.kind == "sglang":
            usage.update({"prompt_tokens_details": None, "reasoning_tokens": 0})
        return usage

    def whole(self):
        content = "".join(self.text())
        if self.fake.kind == "vllm":
            message = {"role": "assistant", "content": content, "refusal": None,
                       "annotations": None, "audio": None, "function_call": None,
                       "tool_calls": [], "reasoning": None}
            choice = {"index": 0, "message": message, "logprobs": None,
                      "finish_reason": self.finish, "stop_reason": None, "token_ids": None}
            usage = dict(self.usage(), prompt_tokens_details=None)
            answer = {"id": self.id, "object": "chat.completion", "created": self.created,
                      "model": self.model, "choices": [choice], "service_tier": None,
                      "system_fingerprint": None, "usage": usage, "prompt_logprobs": None,
                      "prompt_token_ids": None, "kv_transfer_params": None}
        else:
            message = {"role": "assistant", "content": content, "reasoning_content": None,
                       "tool_calls": None}
            choice = {"index": 0, "message": message, "logprobs": None,
                      "finish_reason": self.finish,
                      "matched_stop": EOS_TOKEN_ID if self.finish == "stop" else None,
                      "hidden_states": None}
            answer = {"id": self.id, "object": "chat.completion", "created": self.created,
                      "model": self.model, "choices": [choice], "usage": self.usage(),
                      "metadata": {"weight_version": self.identity["weight_version"]}}
        self.h.reply_json(200, answer)
        self.entry["chunks"] = 0

    def chunk(self, choices, **extra):
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": choices}
        body.update(extra)
        return body

    def choice(self, delta, finish_reason=None, last=False):
        if self.fake.kind == "vllm":
            # model_dump_json(exclude_unset=True): the fields vLLM sets explicitly
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            if last:
                choice["stop_reason"] = None
            if "role" not in delta:
                choice["token_ids"] = None
            return choice
        # SGLang's StreamChoice: reasoning_content always serialized, None role/content omitted
        return {"index": 0, "delta": dict({"reasoning_content": None}, **delta),
                "logprobs": None, "finish_reason": finish_reason,
                "matched_stop": EOS_TOKEN_ID if finish_reason == "stop" else None}

    def streamed(self, over):
        stream = Stream(self.h, self.entry)
        if not stream.start():
            return
        if over:  # SGLang tokenizes inside the stream: the 400 comes as an event
            message, _ = context_error(self.fake, self.n_prompt, None)
            stream.event(stream_error_object(self.fake, 400, message, "BadRequestError"))
            stream.event("[DONE]")
            stream.end("context_error_event")
            return
        cut = self.fake.take("stream_cut")
        error = self.fake.take("stream_error")
        first = self.chunk([self.choice({"role": "assistant", "content": ""})])
        if self.fake.kind == "vllm":
            first["prompt_token_ids"] = None
        if not stream.event(first):
            return
        words = self.text()
        for k, word in enumerate(words + [None]):
            if cut is not None and k == cut["after"]:
                return stream.cut()
            if error is not None and k == error["after"]:
                message = error["message"] or "Internal server error"
                status, err_type = (500, "InternalServerError") if self.fake.kind == "vllm" \
                    else (400, "BadRequestError")
                stream.event(stream_error_object(self.fake, status, message, err_type))
                if error["done"]:
                    stream.event("[DONE]")
                return stream.end("error_event")
            if word is None:
                break
            if not stream.pause(self.state["chunk_delay_ms"]):
                return
            last = k == len(words) - 1 and self.finish == "length"
            choice = self.choice({"content": word}, "length" if last else None, last=last)
            if not stream.event(self.chunk([choice]), content=True):
                return
        if self.finish == "stop":
            delta = {"content": ""} if self.fake.kind == "vllm" else {}
            if not stream.event(self.chunk([self.choice(delta, "stop", last=True)])):
                return
        options = self.body.get("stream_options") or {}
        if isinstance(options, dict) and options.get("include_usage"):
            if not stream.event(self.chunk([], usage=self.usage())):
                return
        stream.event("[DONE]")
        stream.end("ok")


class Stream:
    """An SSE answer in chunked transfer coding, as uvicorn writes a StreamingResponse,
    watching the connection so that a client's close is seen between chunks."""

    def __init__(self, handler, entry):
        self.h = handler
        self.entry = entry
        self.sock = handler.connection
        entry["chunks"] = 0

    def start(self):
        try:
            self.h.send_response(200)
            self.h.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.h.send_header("Transfer-Encoding", "chunked")
            self.h.end_headers()
            self.h.wfile.flush()
            self.entry["status"] = 200
            return True
        except OSError:
            return self.closed()

    def client_gone(self):
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
            return bool(readable) and self.sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def closed(self):
        self.entry.update(outcome="client_closed", client_closed=True)
        self.h.close_connection = True
        return False

    def pause(self, delay_ms):
        """Waits @delay_ms, waking at once if the client closes; False: it did."""
        deadline = time.monotonic() + delay_ms / 1000
        while True:
            if self.client_gone():
                return self.closed()
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.01))

    def event(self, data, content=False):
        """Writes one `data: ...` event; False when the client has gone."""
        if self.client_gone():
            return self.closed()
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        payload = ("data: %s\n\n" % text).encode()
        try:
            self.h.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            self.h.wfile.flush()
        except OSError:
            return self.closed()
        if content:
            self.entry["chunks"] += 1
        return True

    def end(self, outcome):
        try:
            self.h.wfile.write(b"0\r\n\r\n")
            self.h.wfile.flush()
            self.entry["outcome"] = outcome
        except OSError:
            self.closed()

    def cut(self):
        """Closes the socket mid-body: no last chunk, so the client sees a broken stream."""
        self.entry["outcome"] = "cut"
        self.h.close_connection = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# --- HTTP ----------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def version_string(self):
        return "uvicorn"

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        """Quiet: the request log is the record that matters."""

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def reply_json(self, status, body):
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.entry["status"] = status

    def reply_error(self, status, message, err_type, param=None):
        self.reply_json(status, error_object(self.server, status, message, err_type, param))

    def reply_empty(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.entry["status"] = status

    def reply_text(self, status, text, content_type):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.entry["status"] = status

    def read_body(self):
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def authorized(self, path):
        fake = self.server
        if fake.api_key is None:
            return True
        if fake.kind == "vllm":
            if not path.startswith(VLLM_GUARDED):
                return True
        elif path.startswith(("/health", "/metrics")):
            return True
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and token == fake.api_key

    def dispatch(self, method):
        path = self.path.split("?", 1)[0]
        fake = self.server
        if path.startswith("/_fake/"):
            return self.control(method, path)
        headers = {k.lower(): v for k, v in self.headers.items()
                   if k.lower() in LOGGED_HEADERS or k.lower().startswith("x-ledger-")}
        self.entry = {"t": time.time(), "kind": fake.kind, "method": method, "path": path,
                      "status": None, "headers": headers, "model": None, "stream": None,
                      "chunks": None, "outcome": "ok", "client_closed": False,
                      "peer_port": self.client_address[1]}
        fake.begin()
        try:
            body = self.read_body() if method == "POST" else b""
            state = fake.snapshot()
            if fake.kind == "vllm" and state["health"] == "loading":
                # vLLM listens only once the engine is up: nothing answers before
                self.entry["outcome"] = "not_listening"
                self.close_connection = True
                return
            if not self.authorized(path):
                self.entry["outcome"] = "unauthorized"
                return self.reply_json(401, auth_object(401))
            self.route(method, path, body, state)
        except OSError:
            self.entry.update(outcome="client_closed", client_closed=True)
            self.close_connection = True
        finally:
            fake.record(self.entry)

    def route(self, method, path, body, state):
        fake = self.server
        identity = state["identity"]
        created = int(time.time())
        if method == "POST" and path == "/v1/chat/completions":
            try:
                request = json.loads(body or b"null")
            except ValueError:
                request = None
            if not isinstance(request, dict):
                return self.reply_error(400, "JSON decode error", "Bad Request")
            self.entry.update(model=request.get("model"), stream=bool(request.get("stream")))
            return Chat(self, request, self.entry).run()
        if method != "GET":
            return self.reply_error(405, "Method Not Allowed", "Method Not Allowed")
        health = state["health"]
        if fake.kind == "vllm":
            if path == "/health":
                return self.reply_empty(503 if health == "fail" else 200)
            if path == "/version":
                return self.reply_json(200, {"version": identity["version"]})
            if path == "/v1/models":
                return self.reply_json(200, vllm_models(identity, created))
            if path == "/metrics":
                return self.reply_text(200, vllm_metrics(identity),
                                       "text/plain; version=0.0.4; charset=utf-8")
        else:
            if path in ("/health", "/health_generate"):
                return self.reply_empty(200 if health == "ok" else 503)
            if path in ("/get_model_info", "/model_info"):
                return self.reply_json(200, sglang_model_info(identity))
            if path in ("/get_server_info", "/server_info"):
                return self.reply_json(200, sglang_server_info(fake, identity))
            if path == "/v1/models":
                return self.reply_json(200, sglang_models(identity, created))
            if path == "/metrics" and fake.enable_metrics:
                model = identity["model"].replace('"', r'\"')
                return self.reply_text(
                    200, "# HELP sglang:num_running_reqs The number of running requests.\n"
                    "# TYPE sglang:num_running_reqs gauge\n"
                    'sglang:num_running_reqs{engine_type="unified",model_name="%s",'
                    'moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0\n' % model,
                    "text/plain; version=0.0.4; charset=utf-8")
        return self.reply_error(404, "Not Found", "Not Found" if fake.kind == "vllm" else "404")

    def control(self, method, path):
        fake = self.server
        self.entry = {}
        body = self.read_body() if method == "POST" else b""
        if method == "GET" and path == "/_fake/state":
            return self.reply_json(200, fake.snapshot())
        if method == "GET" and path == "/_fake/requests":
            return self.reply_json(200, {"requests": fake.settled_requests()})
        if method == "POST" and path == "/_fake/reset":
            with fake.lock:
                # A request answered but not yet recorded would land in the emptied log.
                fake.recorded.wait_for(lambda: fake.in_flight == 0, 2.0)
                fake.state = initial_state(fake.args)
                fake.requests = []
            return self.reply_json(200, fake.snapshot())
        if method == "POST" and path == "/_fake/control":
            try:
                control = json.loads(body or b"null")
                with fake.lock:
                    fake.state = parse_control(control, fake.state)
            except (ValueError, ControlError) as e:
                return self.reply_json(400, {"error": {"code": "invalid_control",
                                                       "message": str(e)}})
            return self.reply_json(200, fake.snapshot())
        return self.reply_json(404, {"error": {"code": "not_found", "message": path}})


def lora_arg(text):
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError("--lora takes NAME=PATH")
    return name, path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", help="required as a bearer where the engine requires it")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the served model name")
    parser.add_argument("--model-path", help="what the model was loaded from (default: --model)")
    parser.add_argument("--tokenizer-path")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--version", help="the engine version it reports")
    parser.add_argument("--quantization", help="SGLang's server_info quantization")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--chat-template", help="SGLang's server_info chat_template")
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--pp-size", type=int, default=1)
    parser.add_argument("--weight-version", default="default")
    parser.add_argument("--lora", type=lora_arg, action="append", default=[],
                        help="an adapter NAME=PATH (repeatable)")
    parser.add_argument("--answer-tokens", type=int, default=8)
    parser.add_argument("--chunk-delay-ms", type=int, default=0)
    parser.add_argument("--vllm-error-shape", choices=("current", "legacy"), default="current",
                        help="legacy: the flat error object of vLLM before 0.10.1")
    parser.add_argument("--enable-metrics", action="store_true",
                        help="SGLang's --enable-metrics: serve /metrics")
    parser.add_argument("--log", help="append each request as a JSON line here")
    args = parser.parse_args(argv)
    server = Fake(args)
    print(json.dumps({"address": "%s:%d" % server.server_address[:2], "kind": args.kind}),
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
