#!/usr/bin/env node
// A real llama.cpp engine for the gateway's tests: llama-server's HTTP API
// (the routes, bodies, SSE chunks and errors that server ships) over
// node-llama-cpp, which carries the same llama.cpp, on a loopback port.
// Every step of a request is a JSON line on stderr, so that a test can judge
// what the engine computed; fault hooks kill the process at a chosen token.
// README.md beside this file lists the flags, the hooks and the log lines.

import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { parseArgs } from "node:util";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const NODE_LLAMA_CPP_VERSION = "3.21.1";

// llama-server's default template when the model carries none (ChatML).
const CHATML_TEMPLATE =
  "{%- for message in messages -%}\n" +
  "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n" +
  "{%- endfor -%}\n" +
  "{%- if add_generation_prompt -%}\n" +
  "  {{- '<|im_start|>assistant\\n' -}}\n" +
  "{%- endif -%}";

const PHASES = ["prefill", "after_compute", "after_send"];

function usage(message) {
  process.stderr.write(
    (message ? message + "\n" : "") +
      "usage: server.mjs -m MODEL [--alias NAME] [--host 127.0.0.1] [--port 0]\n" +
      "       [-c CTX] [-np SLOTS] [--api-key KEY] [--seed N] [--temp T]\n" +
      "       [--delay-ms-per-token MS] [--load-delay-ms MS]\n" +
      "       [--fault PHASE[:N]] [--fault-every]   (PHASE: prefill, after_compute, after_send)\n",
  );
  process.exit(2);
}

function parseSettings(argv) {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        model: { type: "string", short: "m" },
        alias: { type: "string", short: "a" },
        host: { type: "string", default: "127.0.0.1" },
        port: { type: "string", default: "0" },
        "ctx-size": { type: "string", short: "c", default: "0" },
        parallel: { type: "string", default: "4" },
        np: { type: "string" },
        "api-key": { type: "string" },
        seed: { type: "string", default: "42" },
        temp: { type: "string", default: "0.8" },
        "delay-ms-per-token": { type: "string", default: "0" },
        "load-delay-ms": { type: "string", default: "0" },
        fault: { type: "string" },
        "fault-every": { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
    });
  } catch (err) {
    usage(err.message);
  }
  const v = parsed.values;
  if (v.help) usage();
  if (!v.model) usage("--model is required");
  const int = (name, value, min) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) usage(`--${name}: an integer >= ${min}, not ${value}`);
    return n;
  };
  // Loopback only: the tests' engines are never reachable from elsewhere.
  if (!["127.0.0.1", "::1", "localhost"].includes(v.host) && !v.host.startsWith("127.")) {
    usage(`--host: a loopback address, not ${v.host}`);
  }
  const temp = Number(v.temp);
  if (!Number.isFinite(temp) || temp < 0) usage(`--temp: a number >= 0, not ${v.temp}`);
  const settings = {
    model: path.resolve(v.model),
    alias: v.alias ?? null,
    host: v.host,
    port: int("port", v.port, 0),
    ctxSize: int("ctx-size", v["ctx-size"], 0),
    slots: int("parallel", v.np ?? v.parallel, 1),
    apiKey: v["api-key"] ?? null,
    seed: int("seed", v.seed, 0),
    temp,
    delayMsPerToken: int("delay-ms-per-token", v["delay-ms-per-token"], 0),
    loadDelayMs: int("load-delay-ms", v["load-delay-ms"], 0),
    fault: null,
  };
  if (v.fault !== undefined) {
    settings.fault = parseFault(v.fault, v["fault-every"]);
    if (settings.fault === null) usage(`--fault: PHASE[:N] with PHASE one of ${PHASES.join(", ")}`);
  } else if (v["fault-every"]) {
    usage("--fault-every needs --fault");
  }
  return settings;
}

/** "after_send:3" -> {phase, at, every}; null when it does not parse. */
function parseFault(text, every) {
  const [phase, at = "0"] = String(text).split(":");
  const n = Number(at);
  if (!PHASES.includes(phase) || !Number.isInteger(n) || n < 0) return null;
  return { phase, at: phase === "prefill" ? 0 : n, every: Boolean(every) };
}

const settings = parseSettings(process.argv.slice(2));

// One JSON object per line on stderr. Writes to a pipe or a file are
// synchronous on Linux, so a line is out before a SIGKILL that follows it.
function log(event, fields = {}) {
  process.stderr.write(JSON.stringify({ ts: Date.now() / 1000, event, ...fields }) + "\n");
}

const engine = {
  ready: false,
  llama: null,
  model: null,
  slots: [], // {id, context, sequence, busy}
  waiting: [], // resolvers of requests queued for a slot, first come first served
  nCtx: 0,
  buildInfo: "",
  created: Math.floor(Date.now() / 1000),
  fault: settings.fault, // armed fault hook, or null
  nextRequest: 1,
};

function modelId() {
  return settings.alias ?? settings.model;
}

async function load() {
  const started = Date.now();
  if (settings.loadDelayMs > 0) await sleep(settings.loadDelayMs);
  // gpu: false and build: "never": the CPU binary of @node-llama-cpp/linux-x64
  // or an error, never a download or a compile.
  engine.llama = await getLlama({
    gpu: false,
    build: "never",
    skipDownload: true,
    progressLogs: false,
    logLevel: LlamaLogLevel.warn,
    logger: (level, message) => log("llama_log", { level, message: String(message).trimEnd() }),
  });
  engine.model = await engine.llama.loadModel({ modelPath: settings.model });
  engine.nCtx = settings.ctxSize || engine.model.trainContextSize;
  // One context per slot, one thread each: the default thread count is
  // hundreds of times slower for a model this small on a shared machine.
  for (let id = 0; id < settings.slots; id++) {
    const context = await engine.model.createContext({
      contextSize: engine.nCtx,
      threads: 1,
      sequences: 1,
      batchSize: engine.nCtx,
    });
    engine.slots.push({ id, context, sequence: context.getSequence(), busy: false });
  }
  const release = engine.llama.llamaCppRelease;
  engine.buildInfo = `llama.cpp ${release.release} (node-llama-cpp ${NODE_LLAMA_CPP_VERSION})`;
  const sha256 = crypto.createHash("sha256").update(fs.readFileSync(settings.model)).digest("hex");
  engine.ready = true;
  log("loaded", {
    model_path: settings.model,
    sha256,
    n_vocab: vocabSize(),
    n_ctx: engine.nCtx,
    slots: settings.slots,
    build_info: engine.buildInfo,
    load_ms: Date.now() - started,
  });
}

function vocabSize() {
  return engine.model.fileInfo.metadata.tokenizer.ggml.tokens.length;
}

function modelMeta() {
  let nParams = 0;
  for (const t of engine.model.fileInfo.tensorInfo ?? []) {
    nParams += t.dimensions.reduce((a, d) => a * Number(d), 1);
  }
  return {
    vocab_type: 1, // LLAMA_VOCAB_TYPE_SPM
    n_vocab: vocabSize(),
    n_ctx_train: engine.model.trainContextSize,
    n_embd: engine.model.embeddingVectorSize,
    n_params: nParams,
    size: engine.model.size,
  };
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const timer = setTimeout(() => resolve(true), ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve(false);
    }, { once: true });
  });
}

// --- HTTP --------------------------------------------------------------

/** llama-server's error envelope of a handler (format_error_response). */
function errorBody(code, message, type, extra = {}) {
  return { error: { code, message, type, ...extra } };
}

function sendJson(res, status, body, rid) {
  const data = JSON.stringify(body);
  res.writeHead(status, {
    "Content-Type": "application/json; charset=utf-8",
    "Content-Length": Buffer.byteLength(data),
  });
  res.end(data, () => {
    if (rid !== undefined) log("write", { request_id: rid, kind: "json", status });
  });
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > 8 << 20) {
        reject(new Error("request body too large"));
        req.destroy();
      } else {
        chunks.push(c);
      }
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

// Endpoints that need no key, as llama-server's middleware has them.
const PUBLIC_PATHS = new Set(["/health", "/v1/health", "/models", "/v1/models", "/"]);

function authorized(req) {
  if (settings.apiKey === null) return true;
  let key = req.headers["authorization"] || req.headers["x-api-key"] || "";
  if (key.startsWith("Bearer ")) key = key.slice("Bearer ".length);
  const a = Buffer.from(key);
  const b = Buffer.from(settings.apiKey);
  return a.length === b.length && crypto.timingSafeEqual(a, b);
}

async function route(req, res) {
  const rid = "r" + engine.nextRequest++;
  const url = new URL(req.url, "http://engine");
  log("request", {
    request_id: rid,
    method: req.method,
    path: url.pathname,
    x_request_id: req.headers["x-request-id"] ?? null,
  });
  res.setHeader("Server", "llama.cpp");
  if (req.headers.origin) res.setHeader("Access-Control-Allow-Origin", req.headers.origin);

  // llama-server's middlewares: the loading state first, then the key.
  if (!engine.ready) {
    return sendJson(res, 503, { error: { message: "Loading model", type: "unavailable_error", code: 503 } }, rid);
  }
  if (!PUBLIC_PATHS.has(url.pathname) && !authorized(req)) {
    return sendJson(res, 401, { error: { message: "Invalid API Key", type: "authentication_error", code: 401 } }, rid);
  }
  const key = `${req.method} ${url.pathname}`;
  switch (key) {
    case "GET /health":
    case "GET /v1/health":
      return sendJson(res, 200, { status: "ok" }, rid);
    case "GET /props":
      return sendJson(res, 200, props(), rid);
    case "GET /models":
    case "GET /v1/models":
      return sendJson(res, 200, models(), rid);
    case "GET /lora-adapters":
      return sendJson(res, 200, [], rid);
    case "GET /fault":
      return sendJson(res, 200, { fault: engine.fault }, rid);
    case "POST /fault":
      return setFault(req, res, rid);
    case "POST /chat/completions":
    case "POST /v1/chat/completions":
      return chatCompletions(req, res, rid);
    default:
      return sendJson(res, 404, { error: { message: "File Not Found", type: "not_found_error", code: 404 } }, rid);
  }
}

function defaultParams() {
  return {
    n_predict: -1,
    seed: settings.seed,
    temperature: settings.temp,
    dynatemp_range: 0.0,
    dynatemp_exponent: 1.0,
    top_k: 40,
    top_p: 0.95,
    min_p: 0.05,
    typical_p: 1.0,
    repeat_last_n: 64,
    repeat_penalty: 1.0,
    presence_penalty: 0.0,
    frequency_penalty: 0.0,
    stop: [],
    max_tokens: -1,
    n_keep: 0,
    n_discard: 0,
    ignore_eos: false,
    stream: true,
    n_probs: 0,
    min_keep: 0,
    samplers: ["top_k", "top_p", "min_p", "temperature"],
    timings_per_token: false,
  };
}

function props() {
  return {
    default_generation_settings: {
      id: 0,
      id_task: -1,
      n_ctx: engine.nCtx,
      speculative: false,
      is_processing: false,
      params: defaultParams(),
      prompt: "",
      next_token: { has_next_token: true, has_new_line: false, n_remain: -1, n_decoded: 0, stopping_word: "" },
    },
    total_slots: settings.slots,
    model_path: settings.model,
    chat_template: CHATML_TEMPLATE,
    chat_template_caps: {},
    modalities: { vision: false, audio: false },
    build_info: engine.buildInfo,
    is_sleeping: false,
  };
}

function models() {
  const id = modelId();
  return {
    // llama-server answers Ollama's shape beside OpenAI's.
    models: [{
      name: id,
      model: id,
      modified_at: "",
      size: "",
      digest: "",
      type: "model",
      description: "",
      tags: [""],
      capabilities: ["completion"],
      parameters: "",
      details: { parent_model: "", format: "gguf", family: "", families: [""], parameter_size: "", quantization_level: "" },
    }],
    object: "list",
    data: [{ id, object: "model", created: engine.created, owned_by: "llamacpp", meta: modelMeta() }],
  };
}

/** POST /fault {"phase": P, "at": N, "every": bool} arms a hook; {"phase": null} disarms. */
async function setFault(req, res, rid) {
  let body;
  try {
    body = JSON.parse(await readBody(req));
  } catch (err) {
    return sendJson(res, 400, errorBody(400, String(err.message), "invalid_request_error"), rid);
  }
  if (body === null || typeof body !== "object") {
    return sendJson(res, 400, errorBody(400, "a JSON object", "invalid_request_error"), rid);
  }
  if (body.phase === null) {
    engine.fault = null;
  } else {
    const fault = parseFault(`${body.phase}:${body.at ?? 0}`, body.every);
    if (fault === null) {
      return sendJson(res, 400, errorBody(400, `phase: one of ${PHASES.join(", ")}; at: an integer >= 0`,
        "invalid_request_error"), rid);
    }
    engine.fault = fault;
  }
  log("fault_armed", { request_id: rid, fault: engine.fault });
  return sendJson(res, 200, { fault: engine.fault }, rid);
}

// --- chat completions ---------------------------------------------------

class InvalidRequest extends Error {}

function messageText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => {
      if (part && part.type === "text" && typeof part.text === "string") return part.text;
      throw new InvalidRequest("unsupported content[].type");
    }).join("");
  }
  throw new InvalidRequest("Invalid 'content' type");
}

/** The prompt as llama-server renders it with its ChatML default. */
function renderPrompt(messages) {
  if (!Array.isArray(messages)) throw new InvalidRequest("Expected 'messages' to be an array");
  if (messages.length === 0) throw new InvalidRequest("'messages' must not be empty");
  let text = "";
  for (const m of messages) {
    if (m === null || typeof m !== "object" || typeof m.role !== "string") {
      throw new InvalidRequest("Each message must be an object with a 'role'");
    }
    text += `<|im_start|>${m.role}\n${messageText(m.content)}<|im_end|>\n`;
  }
  return text + "<|im_start|>assistant\n";
}

function numberOr(value, fallback) {
  return typeof value === "number" && Number.isFinite(value) ? value : fallback;
}

function parseCompletion(body) {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new InvalidRequest("the request body must be a JSON object");
  }
  if ((body.n ?? 1) !== 1) throw new InvalidRequest("Only one completion choice is allowed");
  const prompt = renderPrompt(body.messages);
  const nPredict = numberOr(body.n_predict, numberOr(body.max_completion_tokens, numberOr(body.max_tokens, -1)));
  let seed = numberOr(body.seed, settings.seed);
  if (seed < 0 || seed >= 2 ** 32) seed = crypto.randomInt(2 ** 32 - 1); // llama-server's -1: a random seed
  return {
    prompt,
    stream: body.stream === true,
    includeUsage: body.stream_options?.include_usage === true,
    nPredict: Math.trunc(nPredict),
    model: typeof body.model === "string" ? body.model : modelId(),
    sampling: {
      temperature: Math.max(0, numberOr(body.temperature, settings.temp)),
      topK: numberOr(body.top_k, 40),
      topP: numberOr(body.top_p, 0.95),
      minP: numberOr(body.min_p, 0.05),
      seed: Math.trunc(seed),
    },
  };
}

function acquireSlot(signal) {
  const free = engine.slots.find((s) => !s.busy);
  if (free) {
    free.busy = true;
    return Promise.resolve(free);
  }
  return new Promise((resolve) => {
    const waiter = (slot) => resolve(slot);
    engine.waiting.push(waiter);
    signal.addEventListener("abort", () => {
      const i = engine.waiting.indexOf(waiter);
      if (i >= 0) {
        engine.waiting.splice(i, 1);
        resolve(null);
      }
    }, { once: true });
  });
}

function releaseSlot(slot) {
  const next = engine.waiting.shift();
  if (next) next(slot);
  else slot.busy = false;
}

function die(rid, phase, tokenIndex) {
  log("fault", { request_id: rid, phase, token_index: tokenIndex });
  process.kill(process.pid, "SIGKILL");
}

async function chatCompletions(req, res, rid) {
  let job;
  try {
    const text = await readBody(req);
    let body;
    try {
      body = JSON.parse(text);
    } catch (err) {
      // llama-server answers a body that is no JSON from its catch-all: 500.
      return sendJson(res, 500, errorBody(500, `[json.exception.parse_error.101] ${err.message}`, "server_error"), rid);
    }
    job = parseCompletion(body);
  } catch (err) {
    if (err instanceof InvalidRequest) {
      return sendJson(res, 400, errorBody(400, err.message, "invalid_request_error"), rid);
    }
    return sendJson(res, 500, errorBody(500, String(err.message), "server_error"), rid);
  }

  const model = engine.model;
  const promptTokens = [model.tokens.bos, ...model.tokenize(job.prompt, true)];
  const nPrompt = promptTokens.length;
  log("prompt", { request_id: rid, n_prompt_tokens: nPrompt, stream: job.stream, n_predict: job.nPredict,
    temperature: job.sampling.temperature, seed: job.sampling.seed });
  if (nPrompt >= engine.nCtx) {
    return sendJson(res, 400, errorBody(400,
      `request (${nPrompt} tokens) exceeds the available context size (${engine.nCtx} tokens), try increasing it`,
      "exceed_context_size_error", { n_prompt_tokens: nPrompt, n_ctx: engine.nCtx }), rid);
  }

  // A one-shot hook belongs to the next completion request, whatever it reaches.
  const fault = engine.fault;
  if (fault !== null && !fault.every) engine.fault = null;

  const abort = new AbortController();
  const state = { closed: false, decoding: false, computed: 0, events: 0 };
  const closed = () => {
    if (res.writableEnded || state.closed) return; // the answer was whole: no abort
    state.closed = true;
    log("client_closed", { request_id: rid, tokens_computed: state.computed, decode_in_flight: state.decoding });
    abort.abort();
  };
  res.on("close", closed);
  if (res.socket === null || res.socket.destroyed) closed(); // it left while the prompt was read

  const slot = await acquireSlot(abort.signal);
  if (slot === null) {
    log("aborted", { request_id: rid, tokens_computed: 0, reason: "client_closed" });
    log("done", { request_id: rid, status: null, finish_reason: null, tokens_computed: 0, events_written: 0 });
    return;
  }
  try {
    await generate(job, rid, slot, promptTokens, fault, state, abort.signal, res);
  } finally {
    releaseSlot(slot);
  }
}

/** Runs @start(done) (a write or an end) and resolves once its data left, or the connection closed. */
function flushed(res, start) {
  return new Promise((resolve) => {
    const done = () => {
      res.off("close", done);
      resolve();
    };
    res.on("close", done);
    start(done);
  });
}

function chunk(id, created, model, delta, finishReason) {
  return {
    choices: [{ finish_reason: finishReason, index: 0, delta }],
    created,
    id,
    model,
    system_fingerprint: engine.buildInfo,
    object: "chat.completion.chunk",
  };
}

async function generate(job, rid, slot, promptTokens, fault, state, signal, res) {
  const model = engine.model;
  const nPrompt = promptTokens.length;
  const cmplId = "chatcmpl-" + crypto.randomBytes(24).toString("base64url").slice(0, 32);
  const created = Math.floor(Date.now() / 1000);
  // Without a context shift (llama-server's default) generation stops at the context's end.
  const room = engine.nCtx - nPrompt;
  const limit = job.nPredict >= 0 ? Math.min(job.nPredict, room) : room;
  const faultAt = (phase, index) => fault !== null && fault.phase === phase && fault.at === index;

  /** Writes SSE events (each [kind, json-or-string, tokenIndex]) in one write; resolves once it left. */
  const writeEvents = (events) => {
    if (!res.headersSent) {
      res.writeHead(200, { "Content-Type": "text/event-stream", "X-Accel-Buffering": "no" });
    }
    const data = events.map(([, payload]) =>
      "data: " + (typeof payload === "string" ? payload : JSON.stringify(payload)) + "\n\n").join("");
    const written = flushed(res, (done) => res.write(data, done));
    for (const [kind, , tokenIndex] of events) {
      log("write", { request_id: rid, seq: state.events++, kind, token_index: tokenIndex });
    }
    return written;
  };

  await slot.sequence.clearHistory();
  // llama.cpp's own time: the prompt's decode, then the tokens' (no delay, no write).
  let promptMs = 0;
  let predictedMs = 0;
  const generated = [];
  let text = "";
  let finishReason = "length";

  log("prefill", { request_id: rid, slot: slot.id, n_prompt_tokens: nPrompt });
  const iterator = slot.sequence.evaluate(promptTokens, { ...job.sampling });
  try {
    while (generated.length < limit) {
      if (state.closed) break;
      state.decoding = true;
      const t = performance.now();
      const pending = iterator.next();
      if (generated.length === 0 && faultAt("prefill", 0)) die(rid, "prefill", 0);
      const step = await pending;
      state.decoding = false;
      if (generated.length === 0) promptMs += performance.now() - t;
      else predictedMs += performance.now() - t;
      if (step.done) {
        finishReason = "stop"; // an end-of-generation token
        break;
      }
      const token = step.value;
      const index = generated.length;
      const piece = model.detokenize([token], false, [...promptTokens, ...generated]);
      generated.push(token);
      state.computed = generated.length;
      log("token", { request_id: rid, index, token_id: token, text: piece });
      text += piece;
      if (state.closed) break; // computed while the close was on its way: not sent
      if (faultAt("after_compute", index)) die(rid, "after_compute", index);
      if (job.stream) {
        const events = [];
        if (index === 0) events.push(["role", chunk(cmplId, created, job.model, { role: "assistant", content: null }, null), index]);
        if (piece !== "") events.push(["content", chunk(cmplId, created, job.model, { content: piece }, null), index]);
        if (events.length > 0) await writeEvents(events);
        if (faultAt("after_send", index)) die(rid, "after_send", index);
      }
      if (settings.delayMsPerToken > 0 && generated.length < limit) {
        await sleep(settings.delayMsPerToken, signal);
      }
    }
  } finally {
    state.decoding = false;
    await iterator.return();
  }

  const n = generated.length;
  if (state.closed) {
    log("aborted", { request_id: rid, tokens_computed: n, reason: "client_closed" });
    log("done", { request_id: rid, status: res.headersSent ? 200 : null, finish_reason: null, tokens_computed: n,
      events_written: state.events });
    return;
  }

  const timings = {
    cache_n: 0,
    prompt_n: nPrompt,
    prompt_ms: promptMs,
    prompt_per_token_ms: promptMs / nPrompt,
    prompt_per_second: nPrompt / (promptMs / 1000),
    predicted_n: n,
    predicted_ms: predictedMs,
    predicted_per_token_ms: n > 1 ? predictedMs / (n - 1) : 0,
    predicted_per_second: n > 1 ? (n - 1) / (predictedMs / 1000) : 0,
  };
  const usage = { completion_tokens: n, prompt_tokens: nPrompt, total_tokens: n + nPrompt };

  if (job.stream) {
    const events = [];
    if (n === 0) events.push(["role", chunk(cmplId, created, job.model, { role: "assistant", content: null }, null), null]);
    const last = chunk(cmplId, created, job.model, {}, finishReason);
    events.push(["finish", last, null]);
    if (job.includeUsage) {
      const u = { ...chunk(cmplId, created, job.model, null, null), choices: [], usage };
      events.push(["usage", u, null]);
    }
    events[events.length - 1][1].timings = timings;
    events.push(["done", "[DONE]", null]);
    await writeEvents(events);
    await flushed(res, (done) => res.end(done));
  } else {
    const body = {
      choices: [{ finish_reason: finishReason, index: 0, message: { role: "assistant", content: text } }],
      created,
      model: job.model,
      system_fingerprint: engine.buildInfo,
      object: "chat.completion",
      usage,
      id: cmplId,
      timings,
    };
    const data = JSON.stringify(body);
    res.writeHead(200, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(data) });
    await flushed(res, (done) => res.end(data, done));
    log("write", { request_id: rid, seq: state.events++, kind: "json", status: 200 });
    // A whole answer is one write: after_send fires once it left, whatever N.
    if (fault !== null && fault.phase === "after_send") die(rid, "after_send", n - 1);
  }
  log("done", { request_id: rid, status: 200, finish_reason: finishReason, tokens_computed: n,
    events_written: state.events, predicted_per_second: timings.predicted_per_second });
}

// --- start ----------------------------------------------------------------

const server = http.createServer((req, res) => {
  route(req, res).catch((err) => {
    log("handler_error", { message: String(err && err.stack ? err.stack : err) });
    if (!res.headersSent) sendJson(res, 500, errorBody(500, String(err.message), "server_error"));
    else res.destroy();
  });
});
server.keepAliveTimeout = 5000;
server.listen(settings.port, settings.host, () => {
  const { address, port } = server.address();
  const host = address.includes(":") ? `[${address}]` : address;
  // The line a test waits for (tests/faults/stack.py's Process): then the log.
  log("listening", { address: `${host}:${port}`, pid: process.pid });
  load().catch((err) => {
    log("load_failed", { message: String(err && err.stack ? err.stack : err) });
    process.exit(1);
  });
});
