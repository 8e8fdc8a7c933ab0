// tests/programs/ledger-mcp/node/server.mjs: the MCP server behind ledger-mcp in tests/programs/ledger-mcp,
// written with the official SDK so that the proxy is judged against what a
// real server sends. Every execution of a tool is appended to a count file,
// which is how a test tells one execution from two; `behave` makes a call
// die, hang, break its HTTP stream or stream progress, at the point a test
// needs.
//
//   node server.mjs stdio
//   node server.mjs http PORT [--json]    (127.0.0.1; PORT 0 binds a free one;
//                                          prints "listening PORT" on stdout)
//
// Environment:
//   MCP_TEST_COUNT_FILE   one JSON line per event: {"event": "started" | "executed" |
//                         "answered" | "cancelled" | "refused" (a JSON-RPC error
//                         before running), tool, args, request_id, tool_call_id,
//                         traceparent, tracestate (of its _meta, or null),
//                         jsonrpc_id, session, pid, time}; "answered" adds the result
//                         the tool returned (which the SDK does not send for a call
//                         it aborted on notifications/cancelled)
//   MCP_TEST_BEHAVE       the behaviour of a call whose arguments name none (every tool
//                         takes "behave" in its arguments): normal, die, hang, break,
//                         progress, ping_client; and, as arguments only,
//                         invalid_params (the JSON-RPC error -32602, before running) and
//                         rpc_error (the JSON-RPC error -32603, after running)
//   MCP_TEST_BEHAVE_FILE  a file holding that behaviour, read at every call (wins over
//                         MCP_TEST_BEHAVE), so a test can change it while the server runs
//   MCP_TEST_IGNORE_CANCEL  1: notifications/cancelled is noted, and the call still answers
//                         (the SDK's default is to abort it and never answer)
//   MCP_TEST_STRICT       1: an unknown tool is the JSON-RPC error -32602, as many servers
//                         answer it (the SDK's McpServer answers an isError result)
//   MCP_TEST_BODIES_FILE  http: one JSON line per request body received and per
//                         response body sent, exactly as on the wire
import fs from "node:fs";
import http from "node:http";
import { randomUUID } from "node:crypto";

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  CancelledNotificationSchema, EmptyResultSchema, ErrorCode, McpError,
} from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const COUNT_FILE = process.env.MCP_TEST_COUNT_FILE;
const BODIES_FILE = process.env.MCP_TEST_BODIES_FILE;

// Open requests of the HTTP mode by session and JSON-RPC id: "break" destroys
// the socket of the POST that carried its call.
const openPosts = new Map();

function note(event, tool, args, extra, more = {}) {
  if (!COUNT_FILE) return;
  const meta = extra?._meta ?? {};
  const line = JSON.stringify({
    event, tool, args: args ?? null,
    request_id: meta["io.ledgerd/request_id"] ?? null,
    tool_call_id: meta["io.ledgerd/tool_call_id"] ?? null,
    traceparent: meta.traceparent ?? null, tracestate: meta.tracestate ?? null,
    jsonrpc_id: extra?.requestId ?? null,
    session: extra?.sessionId ?? null,
    pid: process.pid, time: Date.now() / 1000, ...more,
  });
  // One write(2) with O_APPEND: lines of concurrent processes never interleave.
  fs.appendFileSync(COUNT_FILE, line + "\n");
}

function behaviour(args) {
  if (args?.behave) return args.behave;
  const file = process.env.MCP_TEST_BEHAVE_FILE;
  if (file) {
    try {
      const text = fs.readFileSync(file, "utf8").trim();
      if (text) return text;
    } catch { /* no file: the environment's behaviour */ }
  }
  return process.env.MCP_TEST_BEHAVE || "normal";
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Runs one tool call: started, the behaviours before the side effect, the
// optional sleep, executed (the side effect), then the behaviours after it.
// Behaviours combine with "+": "progress+break" streams events, then breaks.
async function run(tool, args, extra, answer) {
  note("started", tool, args, extra);
  extra.signal.addEventListener("abort", () => note("cancelled", tool, args, extra));
  const hows = behaviour(args).split("+");
  if (hows.includes("progress")) {
    const token = extra._meta?.progressToken;
    for (let i = 1; i <= 2; i++) {
      if (token !== undefined) {
        await extra.sendNotification({ method: "notifications/progress",
          params: { progressToken: token, progress: i, total: 2, message: `step ${i}` } });
      }
      await extra.sendNotification({ method: "notifications/message",
        params: { level: "info", logger: "test-server", data: `step ${i} of ${tool}` } });
      await sleep(150);
    }
  }
  if (hows.includes("ping_client")) await extra.sendRequest({ method: "ping" }, EmptyResultSchema);
  if (args?.sleep_ms) await sleep(args.sleep_ms);
  note("executed", tool, args, extra);
  if (hows.includes("die")) process.exit(3);
  if (hows.includes("hang")) await new Promise(() => {});
  if (hows.includes("break")) {
    const res = openPosts.get(`${extra.sessionId}|${JSON.stringify(extra.requestId)}`);
    if (!res) throw new Error("break: no open HTTP request for this call (stdio?)");
    res.socket?.destroy();
    await new Promise(() => {});
  }
  const result = answer();
  note("answered", tool, args, extra, { result });
  return result;
}

function makeServer() {
  const server = new McpServer({ name: "ledgerd-test-server", version: "1.0.0" },
    { capabilities: { logging: {} } });

  server.registerTool("charge", {
    description: "Charges an order: the side effect that must happen once",
    inputSchema: {
      order: z.string(), cents: z.number(),
      sleep_ms: z.number().optional(), fail: z.boolean().optional(),
      behave: z.string().optional(),
    },
  }, (args, extra) => run("charge", args, extra, () => {
    if (args.fail) {
      return { content: [{ type: "text", text: `card declined for ${args.order}` }],
        isError: true };
    }
    // A fresh id per execution: a second execution never answers like the first.
    return { content: [{ type: "text",
      text: `charged ${args.cents} cents for ${args.order} (charge ch_${randomUUID()})` }] };
  }));

  server.registerTool("read_balance", {
    description: "Reads a balance; changes nothing",
    inputSchema: { account: z.string(), behave: z.string().optional() },
    annotations: { readOnlyHint: true },
  }, (args, extra) => run("read_balance", args, extra, () => ({
    content: [{ type: "text", text: `balance of ${args.account}: 1234 (read ${randomUUID()})` }],
  })));

  server.registerTool("sync", {
    description: "Syncs a record; running it twice is harmless",
    inputSchema: {
      what: z.string(), sleep_ms: z.number().optional(), behave: z.string().optional(),
    },
    annotations: { idempotentHint: true },
  }, (args, extra) => run("sync", args, extra, () => ({
    // A result with a _meta of its own: a replay adds its marker beside this one.
    _meta: { "test/sync_id": randomUUID() },
    content: [{ type: "text", text: `synced ${args.what}` }],
  })));

  server.registerTool("export", {
    description: "Exports a report and answers it whole: a side effect with a large result",
    inputSchema: { report: z.string(), bytes: z.number(), behave: z.string().optional() },
  }, (args, extra) => run("export", args, extra, () => {
    // A fresh id per execution, then "x" up to `bytes` characters of text.
    const head = `report ${args.report} (export ex_${randomUUID()}) `;
    return { content: [{ type: "text",
      text: head + "x".repeat(Math.max(0, args.bytes - head.length)) }] };
  }));

  server.registerResource("greeting", "test://greeting",
    { description: "A fixed text", mimeType: "text/plain" },
    async (uri) => ({ contents: [{ uri: uri.href, text: "hello from the test server" }] }));

  server.registerPrompt("hello", { description: "A fixed prompt", argsSchema: { who: z.string() } },
    ({ who }) => ({
      messages: [{ role: "user", content: { type: "text", text: `say hello to ${who}` } }],
    }));

  // JSON-RPC errors around the SDK's tools/call handler, which itself turns every
  // error into an isError result. (_requestHandlers is the SDK's private map: the
  // version is pinned in package-lock.json.)
  const handlers = server.server._requestHandlers;
  const inner = handlers.get("tools/call");
  handlers.set("tools/call", async (request, extra) => {
    const { name, arguments: args } = request.params ?? {};
    if (process.env.MCP_TEST_STRICT === "1" && !["charge", "read_balance", "sync", "export"].includes(name)) {
      note("refused", name, args, extra);
      throw new McpError(ErrorCode.InvalidParams, `Tool ${name} not found`);
    }
    if (args?.behave === "invalid_params") {
      note("refused", name, args, extra);
      throw new McpError(ErrorCode.InvalidParams, "invalid params: refused before running");
    }
    const result = await inner(request, extra);
    if (args?.behave === "rpc_error") {
      throw new McpError(ErrorCode.InternalError, "internal error after the side effect");
    }
    return result;
  });

  if (process.env.MCP_TEST_IGNORE_CANCEL === "1") {
    server.server.setNotificationHandler(CancelledNotificationSchema, (n) => {
      note("cancelled", null, null, null, { cancelled_request: n.params.requestId });
    });
  }

  return server;
}

function record(entry) {
  if (BODIES_FILE) fs.appendFileSync(BODIES_FILE, JSON.stringify(entry) + "\n");
}

// What a test compares across the proxy: MCP's headers, a custom one, Host, and
// hop-by-hop ones that must not cross it.
const RECORDED_HEADERS = ["content-type", "mcp-session-id", "mcp-protocol-version", "accept",
  "last-event-id", "x-test", "x-test-reply", "host", "te", "keep-alive", "proxy-authorization",
  "traceparent", "tracestate"];

function pick(headers) {
  const out = {};
  for (const name of RECORDED_HEADERS) if (headers[name] !== undefined) out[name] = headers[name];
  return out;
}

// Records the response body exactly as written to the socket.
function recordResponse(seq, req, res) {
  const chunks = [];
  const grab = (chunk, encoding) => {
    if (chunk === undefined || chunk === null || typeof chunk === "function") return;
    chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk,
      typeof encoding === "string" ? encoding : "utf8"));
  };
  let head = {};
  const writeHead = res.writeHead.bind(res);
  res.writeHead = (status, ...rest) => {
    const h = rest.find((r) => r && typeof r === "object") ?? {};
    head = Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), String(v)]));
    return writeHead(status, ...rest);
  };
  const write = res.write.bind(res);
  const end = res.end.bind(res);
  res.write = (chunk, ...rest) => { grab(chunk, rest[0]); return write(chunk, ...rest); };
  res.end = (chunk, ...rest) => { grab(chunk, rest[0]); return end(chunk, ...rest); };
  res.on("close", () => {
    record({ dir: "response", seq, method: req.method, status: res.statusCode,
      headers: pick({ ...Object.fromEntries(Object.entries(res.getHeaders()).map(
        ([k, v]) => [k.toLowerCase(), String(v)])), ...head }),
      body: Buffer.concat(chunks).toString("utf8"), complete: res.writableFinished });
  });
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function plainError(res, status, code, message) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
}

async function serveHttp(port, json) {
  const sessions = new Map(); // Mcp-Session-Id -> transport
  let seq = 0;
  const httpServer = http.createServer(async (req, res) => {
    const n = ++seq;
    recordResponse(n, req, res);
    res.setHeader("X-Test-Reply", `seq-${n}`); // a custom header every answer carries
    try {
      const body = req.method === "POST" ? await readBody(req) : Buffer.alloc(0);
      record({ dir: "request", seq: n, method: req.method, url: req.url,
        headers: pick(req.headers), body: body.toString("utf8") });
      if (!req.url.startsWith("/mcp")) return plainError(res, 404, -32000, "not found");
      const sid = req.headers["mcp-session-id"];
      let transport = sid ? sessions.get(sid) : undefined;
      if (sid && !transport) return plainError(res, 404, -32001, "Session not found");
      let parsed;
      if (req.method === "POST") {
        try {
          parsed = JSON.parse(body.toString("utf8"));
        } catch {
          return plainError(res, 400, -32700, "Parse error");
        }
        for (const m of Array.isArray(parsed) ? parsed : [parsed]) {
          if (m && m.method && m.id !== undefined) {
            const key = `${sid}|${JSON.stringify(m.id)}`;
            openPosts.set(key, res);
            res.on("close", () => { if (openPosts.get(key) === res) openPosts.delete(key); });
          }
        }
        if (!transport) {
          const first = Array.isArray(parsed) ? parsed[0] : parsed;
          if (first?.method !== "initialize") {
            return plainError(res, 400, -32000, "Bad Request: no session");
          }
          transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            enableJsonResponse: json,
            onsessioninitialized: (id) => sessions.set(id, transport),
          });
          transport.onclose = () => {
            if (transport.sessionId) sessions.delete(transport.sessionId);
          };
          await makeServer().connect(transport);
        }
      } else if (!transport) {
        return plainError(res, 400, -32000, "Bad Request: no session");
      }
      await transport.handleRequest(req, res, parsed);
    } catch (e) {
      process.stderr.write(`test server: ${e.stack || e}\n`);
      if (!res.headersSent) plainError(res, 500, -32603, String(e));
    }
  });
  // Requests that outlive node's defaults: a call may sleep longer than its timeouts.
  httpServer.requestTimeout = 0;
  httpServer.headersTimeout = 0;
  httpServer.keepAliveTimeout = 60000;
  httpServer.listen(port, "127.0.0.1", () => {
    process.stdout.write(`listening ${httpServer.address().port}\n`);
  });
  const stop = () => httpServer.close(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

const [mode, portArg, ...flags] = process.argv.slice(2);
if (mode === "stdio") {
  await makeServer().connect(new StdioServerTransport());
} else if (mode === "http") {
  await serveHttp(Number(portArg ?? 0), flags.includes("--json"));
} else {
  process.stderr.write("usage: node server.mjs stdio | http PORT [--json]\n");
  process.exit(2);
}
