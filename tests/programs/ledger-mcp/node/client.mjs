// tests/programs/ledger-mcp/node/client.mjs: an MCP client of the official SDK, driven by a
// JSON script, so that tests/programs/ledger-mcp judges ledger-mcp by what a real client
// gets: the SDK's Client over stdio (the proxy, or a server directly, as its
// child) or over Streamable HTTP (a URL).
//
//   node client.mjs SCRIPT_JSON | node client.mjs - (the script on stdin)
//
// The script:
//   {"transport": {"type": "stdio", "command": "...", "args": [...], "env": {...}, "cwd": "..."}
//               | {"type": "http", "url": "http://127.0.0.1:PORT/mcp", "record": "PATH"?,
//                  "urls": [...]? (client i connects to urls[i % length] instead),
//                  "headers": {...}? (sent with every request)},
//    "clients": N (default 1: N clients, each its own connection, run the steps at once),
//    "timeout_ms": 60000 (every request's, unless a step says otherwise),
//    "steps": [{"op": "list_tools"}, {"op": "ping"}, {"op": "list_resources"},
//              {"op": "read_resource", "uri": "..."}, {"op": "list_prompts"},
//              {"op": "get_prompt", "name": "...", "arguments": {...}},
//              {"op": "call", "name": "...", "arguments": {...}, "meta": {...}?,
//               "repeat": N?, "timeout_ms": N?, "progress": true?, "cancel_after_ms": N?},
//              {"op": "parallel", "steps": [...]} (at once on this connection; each prints
//              its own line, with "sub": its index),
//              {"op": "sleep", "ms": N}, {"op": "wait_file", "path": "..."} (until it
//              exists: the test says when to go on), {"op": "terminate"}]}
//
// Prints one JSON line per step (per repetition), at once: {"client", "step", "rep", "op",
// "ok", "result"? (as the SDK parsed it), "raw"? (the JSON-RPC response as it arrived,
// before any schema), "error"? ({"code", "message", "data"} of a JSON-RPC error, or
// {"code": null, "message", "kind"} when the transport failed), "notifications" (those
// received during the step, with "at_ms"), "ms"}. The first line is {"op": "connect", "pid"}
// (stdio: the child's pid). With "record", every HTTP request sent and every response
// body received is appended to that file as a JSON line.
import fs from "node:fs";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, McpError } from "@modelcontextprotocol/sdk/types.js";

const arg = process.argv[2];
if (!arg) {
  process.stderr.write("usage: node client.mjs SCRIPT_JSON | -\n");
  process.exit(2);
}
const script = JSON.parse(arg === "-" ? fs.readFileSync(0, "utf8") : arg);
const TIMEOUT_MS = script.timeout_ms ?? 60000;

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

// Records what the HTTP transport sends and receives, byte for byte.
function recordingFetch(path) {
  const pending = new Set();
  let seq = 0;
  const fetchFn = async (url, init) => {
    const n = ++seq;
    const headers = Object.fromEntries(new Headers(init?.headers ?? {}).entries());
    const body = typeof init?.body === "string" ? init.body : (init?.body ?? null);
    fs.appendFileSync(path, JSON.stringify({ dir: "request", seq: n, method: init?.method ?? "GET",
      url: String(url), headers, body: body === null ? null : String(body) }) + "\n");
    const res = await fetch(url, init);
    const copy = res.clone();
    const done = copy.text().then((text) => ({ text, complete: true }),
      (e) => ({ text: null, complete: false, error: String(e) })).then((r) => {
      fs.appendFileSync(path, JSON.stringify({ dir: "response", seq: n,
        method: init?.method ?? "GET", status: res.status,
        headers: Object.fromEntries(res.headers.entries()),
        body: r.text, complete: r.complete, error: r.error }) + "\n");
    });
    pending.add(done);
    done.finally(() => pending.delete(done));
    return res;
  };
  return { fetchFn, pending };
}

function makeTransport(t, recorder, index) {
  if (t.type === "stdio") {
    return new StdioClientTransport({
      command: t.command, args: t.args ?? [], cwd: t.cwd,
      env: { ...process.env, ...(t.env ?? {}) }, stderr: "inherit",
    });
  }
  if (t.type === "http") {
    const url = t.urls ? t.urls[index % t.urls.length] : t.url;
    const opts = recorder ? { fetch: recorder.fetchFn } : {};
    if (t.headers) opts.requestInit = { headers: t.headers };
    return new StreamableHTTPClientTransport(new URL(url), opts);
  }
  throw new Error(`unknown transport ${t.type}`);
}

function errorOf(e) {
  if (e instanceof McpError) return { code: e.code, message: e.message, data: e.data ?? null };
  return { code: null, message: String(e?.message ?? e), kind: e?.name ?? "Error" };
}

// One client: its connection, and what arrived on it before any schema saw it.
async function connect(index, recorder) {
  const transport = makeTransport(script.transport, recorder, index);
  const client = new Client({ name: "ledgerd-test-client", version: "1.0.0" },
    { capabilities: {} });
  // active: the lines of the steps running now (several in a "parallel" step), each
  // given the notifications that arrive while it runs; tagNext: the line whose request
  // the SDK sends next (it sends synchronously inside request()), to learn its id.
  const state = { client, transport, index, raw: new Map(), active: new Set(), tagNext: null };
  client.onerror = () => {}; // a broken stream is a step's error, not the process's
  await client.connect(transport, { timeout: TIMEOUT_MS });
  const onmessage = transport.onmessage;
  transport.onmessage = (msg, extra) => {
    if (msg && msg.id !== undefined && msg.method === undefined) state.raw.set(msg.id, msg);
    if (msg && msg.method && msg.id === undefined) {
      for (const line of state.active) {
        line.notifications.push({ at_ms: Date.now() - line.start, message: msg });
      }
    }
    onmessage?.(msg, extra);
  };
  const send = transport.send.bind(transport);
  transport.send = (msg, options) => {
    if (msg && msg.method && msg.id !== undefined && state.tagNext) {
      state.tagNext.id = msg.id;
      state.tagNext = null;
    }
    return send(msg, options);
  };
  return state;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function runStep(st, step, i, rep, sub) {
  const { client } = st;
  const line = { client: st.index, step: i, rep, op: step.op };
  if (sub !== undefined) line.sub = sub;
  const start = Date.now();
  Object.defineProperty(line, "start", { value: start, enumerable: false });
  line.notifications = [];
  st.active.add(line);
  const options = { timeout: step.timeout_ms ?? TIMEOUT_MS };
  let method = null;
  st.tagNext = line;
  try {
    switch (step.op) {
      case "sleep":
        await sleep(step.ms);
        line.result = null;
        break;
      case "list_tools":
        method = "tools/list"; line.result = await client.listTools({}, options); break;
      case "ping": method = "ping"; line.result = await client.ping(options); break;
      case "list_resources":
        method = "resources/list"; line.result = await client.listResources({}, options); break;
      case "read_resource":
        method = "resources/read";
        line.result = await client.readResource({ uri: step.uri }, options);
        break;
      case "list_prompts":
        method = "prompts/list"; line.result = await client.listPrompts({}, options); break;
      case "get_prompt":
        method = "prompts/get";
        line.result = await client.getPrompt({ name: step.name, arguments: step.arguments ?? {} },
          options);
        break;
      case "wait_file":
        while (!fs.existsSync(step.path)) await sleep(20);
        line.result = null;
        break;
      case "terminate":
        await st.transport.terminateSession();
        line.result = null;
        break;
      case "call": {
        method = "tools/call";
        const params = { name: step.name, arguments: step.arguments ?? {} };
        if (step.meta) params._meta = step.meta;
        if (step.progress) {
          options.onprogress = (p) => line.notifications.push({ at_ms: Date.now() - start,
            progress: p });
        }
        if (step.cancel_after_ms !== undefined) {
          const ac = new AbortController();
          options.signal = ac.signal;
          setTimeout(() => ac.abort("cancelled by the test"), step.cancel_after_ms);
        }
        // client.request, not callTool: no output-schema check stands between the
        // answer and the test.
        line.result = await client.request({ method: "tools/call", params }, CallToolResultSchema,
          options);
        break;
      }
      case "parallel":
        // The inner steps at once, on this connection: each prints its own line.
        st.tagNext = null;
        await Promise.all(step.steps.map((inner, k) => runStep(st, inner, i, rep, k)));
        line.result = null;
        break;
      default:
        throw new Error(`unknown op ${step.op}`);
    }
    line.ok = true;
  } catch (e) {
    line.ok = false;
    line.error = errorOf(e);
  }
  if (st.tagNext === line) st.tagNext = null;
  st.active.delete(line);
  if (method) {
    line.id ??= null;
    if (line.id !== null && st.raw.has(line.id)) line.raw = st.raw.get(line.id);
  } else {
    delete line.id;
  }
  line.ms = Date.now() - start;
  out(line);
}

async function runClient(st) {
  for (const [i, step] of script.steps.entries()) {
    for (let rep = 0; rep < (step.repeat ?? 1); rep++) await runStep(st, step, i, rep);
  }
}

const recorder = script.transport.record ? recordingFetch(script.transport.record) : null;
const n = script.clients ?? 1;
let states;
try {
  // Every client connects first, then all run their steps at once: a race.
  states = await Promise.all(Array.from({ length: n }, (_, i) => connect(i, recorder)));
} catch (e) {
  out({ op: "connect", ok: false, error: errorOf(e) });
  process.exit(3);
}
for (const st of states) {
  out({ client: st.index, op: "connect", ok: true, pid: st.transport.pid ?? null });
}
await Promise.all(states.map(runClient));
await Promise.all(states.map((st) => st.client.close().catch(() => {})));
if (recorder) {
  // Bodies still being read when the connections closed are recorded as they ended.
  await Promise.race([Promise.allSettled([...recorder.pending]), sleep(2000)]);
}
// process.exit() drops what a pipe has not yet taken, and a step's line may be
// megabytes long: exit once stdout has taken the last line.
process.stdout.write("", () => process.exit(0));
