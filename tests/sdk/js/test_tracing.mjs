// Trace context in the TypeScript client (sdk/js/src/tracing.ts) against a
// live ledgerd, with OpenTelemetry's own SDK registered (sdk/js's pinned
// devDependencies): the execute_tool span of a tool call, its attributes
// and parent, and the traceparent each call to ledgerd carries, read by a
// recording proxy on loopback in front of ledgerd (ledgerd echoes none).
// Then a copy of the built package where @opentelemetry/api cannot be
// found: it works, and sends only a trace context given by hand. Run by
// tests/sdk/js/test_js_client.py (and on Node 18 by test_js_node18.py).

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request, createServer } from "node:http";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, beforeEach, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";

import { ArgsMismatch, InProgress, Ledger, NotExecuted } from "../../../sdk/js/dist/index.js";
import { AGENT_TOKEN, URL as LEDGER_URL, key, mustNotRun, rawClaim, rejection, sleep } from "./helpers.mjs";

// OpenTelemetry as an application sets it up, from sdk/js's node_modules.
const PACKAGE = new URL("../../../sdk/js/", import.meta.url);
const otelRequire = createRequire(new URL("package.json", PACKAGE));
const { context, propagation, trace, createTraceState, ROOT_CONTEXT, SpanKind, SpanStatusCode } =
  otelRequire("@opentelemetry/api");
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } =
  otelRequire("@opentelemetry/sdk-trace-base");
const { W3CTraceContextPropagator } = otelRequire("@opentelemetry/core");
const { AsyncLocalStorageContextManager } = otelRequire("@opentelemetry/context-async-hooks");

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
trace.setGlobalTracerProvider(provider);
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const tracer = trace.getTracer("test");

/**
 * A loopback HTTP proxy in front of ledgerd that keeps the head of every
 * request it forwards: {method, path, headers}.
 */
function recordingProxy() {
  const target = new globalThis.URL(LEDGER_URL);
  const seen = [];
  const server = createServer((req, res) => {
    seen.push({ method: req.method, path: req.url, headers: { ...req.headers } });
    const upstream = request({
      host: target.hostname, port: target.port, method: req.method, path: req.url,
      headers: { ...req.headers, host: target.host },
    }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", (e) => res.destroy(e));
    req.pipe(upstream);
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      resolve({ url: `http://127.0.0.1:${server.address().port}`, seen,
                close: () => new Promise((done) => { server.closeAllConnections?.(); server.close(done); }) });
    });
  });
}

let proxy;
before(async () => { proxy = await recordingProxy(); });
after(async () => { await proxy.close(); });
beforeEach(() => { exporter.reset(); proxy.seen.length = 0; });

const viaProxy = (options = {}) => new Ledger({ url: proxy.url, token: AGENT_TOKEN, ...options });

/** The finished spans named @name. */
async function spans(name) {
  await provider.forceFlush();
  return exporter.getFinishedSpans().filter((s) => s.name === name);
}

/** The one finished span named @name. */
async function only(name) {
  const found = await spans(name);
  assert.equal(found.length, 1, `spans named ${name}: ${exporter.getFinishedSpans().map((s) => s.name)}`);
  return found[0];
}

const parentOf = (span) => (span.parentSpanContext ?? { spanId: span.parentSpanId })?.spanId;
const traceparentOf = (span) => `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`;

/** The tool-call actions the proxy saw for key @rid/@cid, with their traceparent and tracestate. */
function calls(rid, cid) {
  return proxy.seen.filter((r) => r.path.startsWith(`/v1/requests/${rid}/tool-calls/${cid}/`))
    .map((r) => [r.path.split("/").pop(), r.headers.traceparent, r.headers.tracestate]);
}

test("a tool call is an execute_tool span, child of the active span, and ledgerd's calls are its children", async () => {
  const [rid, cid] = key();
  let inside;
  await tracer.startActiveSpan("agent turn", async (turn) => {
    await viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "send_email", args: { to: "a" } },
                              async (token, k) => {
                                inside = trace.getActiveSpan()?.spanContext().spanId;
                                return { sent: k, token };
                              });
    turn.end();
  });
  const turn = await only("agent turn");
  const span = await only("execute_tool send_email");
  assert.equal(span.kind, SpanKind.INTERNAL);
  assert.equal(span.spanContext().traceId, turn.spanContext().traceId);
  assert.equal(parentOf(span), turn.spanContext().spanId);
  assert.deepEqual(span.attributes, {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "send_email",
    "gen_ai.tool.call.id": cid,
    "ledger.request_id": rid,
    "ledger.tool_call_id": cid,
    "ledger.idempotency_key": `${rid}:${cid}`,
    "ledger.fencing_token": 1,
    "ledger.outcome": "succeeded",
    "ledger.replayed": false,
    "ledger.executed": true,
  });
  assert.notEqual(span.status.code, SpanStatusCode.ERROR);
  // The tool ran in the span's context: its own spans would be its children.
  assert.equal(inside, span.spanContext().spanId);
  // Claim and completion alike name the execute_tool span as their parent.
  assert.deepEqual(calls(rid, cid), [["claim", traceparentOf(span), undefined],
                                     ["complete", traceparentOf(span), undefined]]);
});

test("a replay is a span of its own: replayed, its outcome, no fencing token", async () => {
  const [rid, cid] = key();
  await viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t" }, async () => 7);
  exporter.reset();
  proxy.seen.length = 0;
  const r = await viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t" }, mustNotRun);
  assert.equal(r.replayed, true);
  const span = await only("execute_tool t");
  assert.equal(span.attributes["ledger.outcome"], "succeeded");
  assert.equal(span.attributes["ledger.replayed"], true);
  assert.equal(span.attributes["ledger.executed"], false);
  assert.equal(span.attributes["ledger.idempotency_key"], `${rid}:${cid}`);
  assert.equal("ledger.fencing_token" in span.attributes, false);
  assert.equal("error.type" in span.attributes, false);
  assert.deepEqual(calls(rid, cid), [["claim", traceparentOf(span), undefined]]);
});

test("the tool throws: error.type is its error, the outcome failed, and a replay says the same", async () => {
  const [rid, cid] = key();
  await rejection(viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t" }, async () => {
    throw new RangeError("no such account");
  }), RangeError);
  let span = await only("execute_tool t");
  assert.equal(span.attributes["error.type"], "RangeError");
  assert.equal(span.attributes["ledger.outcome"], "failed");
  assert.equal(span.attributes["ledger.fencing_token"], 1);
  assert.equal("ledger.error_code" in span.attributes, false);
  assert.equal(span.status.code, SpanStatusCode.ERROR);
  assert.deepEqual(calls(rid, cid).map((c) => c[0]), ["claim", "complete"]);
  exporter.reset();
  const r = await viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t" }, mustNotRun);
  assert.deepEqual([r.replayed, r.outcome], [true, "failed"]);
  span = await only("execute_tool t");
  assert.equal(span.attributes["error.type"], "RangeError");
  assert.equal(span.attributes["ledger.outcome"], "failed");
  assert.equal(span.attributes["ledger.replayed"], true);
  assert.equal(span.status.code, SpanStatusCode.ERROR);
});

test("NotExecuted releases the key: error.type names it, and no outcome is recorded", async () => {
  const [rid, cid] = key();
  await rejection(viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t" }, async () => {
    throw new NotExecuted("card declined before sending");
  }), NotExecuted);
  const span = await only("execute_tool t");
  assert.equal(span.attributes["error.type"], "NotExecuted");
  assert.equal("ledger.outcome" in span.attributes, false);
  const [, traceparent] = calls(rid, cid).find((c) => c[0] === "release");
  assert.equal(traceparent, traceparentOf(span));
});

test("ledgerd refuses: error.type is the client's error, ledger.error_code ledgerd's code", async () => {
  let [rid, cid] = key();
  await viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t", args: { a: 1 } }, async () => 1);
  exporter.reset();
  await rejection(viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t", args: { a: 2 } }, mustNotRun),
                  ArgsMismatch);
  let span = await only("execute_tool t");
  assert.equal(span.attributes["error.type"], "ArgsMismatch");
  assert.equal(span.attributes["ledger.error_code"], "args_mismatch");
  assert.equal("ledger.outcome" in span.attributes, false);
  assert.equal(span.status.code, SpanStatusCode.ERROR);
  // Held by another holder.
  [rid, cid] = key();
  assert.equal((await rawClaim(rid, cid, { tool: "t" })).status, 201);
  exporter.reset();
  await rejection(viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t" }, mustNotRun), InProgress);
  span = await only("execute_tool t");
  assert.equal(span.attributes["error.type"], "InProgress");
  assert.equal(span.attributes["ledger.error_code"], "in_progress");
  assert.equal("ledger.fencing_token" in span.attributes, false);
});

test("the claim's renewals while the tool runs are children of the span too", async () => {
  const [rid, cid] = key();
  await viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "slow", lease: 300 }, async () => {
    await sleep(450); // renewed every 100 ms
    return null;
  });
  const span = await only("execute_tool slow");
  const seen = calls(rid, cid);
  assert.ok(seen.filter((c) => c[0] === "renew").length >= 2, JSON.stringify(seen));
  for (const [action, traceparent] of seen) assert.equal(traceparent, traceparentOf(span), action);
});

test("an explicit trace context is the span's parent, in place of the active one; its tracestate goes on", async () => {
  const [rid, cid] = key();
  const given = { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracestate: "vendor=abc,other=1" };
  await tracer.startActiveSpan("ignored", async (outer) => {
    await viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t", trace: given }, async () => 1);
    outer.end();
  });
  const span = await only("execute_tool t");
  assert.equal(span.spanContext().traceId, "0af7651916cd43dd8448eb211c80319c");
  assert.equal(parentOf(span), "b7ad6b7169203331");
  assert.deepEqual(calls(rid, cid), [["claim", traceparentOf(span), "vendor=abc,other=1"],
                                     ["complete", traceparentOf(span), "vendor=abc,other=1"]]);
});

test("the active span's tracestate reaches ledgerd with the tool span's traceparent", async () => {
  const [rid, cid] = key();
  const remote = trace.setSpanContext(ROOT_CONTEXT, {
    traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", traceFlags: 1, isRemote: true,
    traceState: createTraceState("congo=t61rcWkgMzE"),
  });
  await context.with(remote, () => viaProxy().toolCall({ requestId: rid, toolCallId: cid, tool: "t" }, async () => 1));
  const span = await only("execute_tool t");
  assert.equal(parentOf(span), "00f067aa0ba902b7");
  assert.deepEqual(calls(rid, cid)[0], ["claim", traceparentOf(span), "congo=t61rcWkgMzE"]);
});

test("calls other than tool calls carry the active span, or the client's explicit context", async () => {
  const [rid, cid] = key();
  await viaProxy().toolCall({ requestId: rid, toolCallId: cid }, async () => 1);
  proxy.seen.length = 0;
  let active;
  await tracer.startActiveSpan("review", async (span) => {
    active = span;
    await viaProxy().getToolCall(rid, cid);
    span.end();
  });
  assert.equal(proxy.seen.at(-1).headers.traceparent, traceparentOf(active));
  // The client's own context when there is no active span...
  const given = "00-11111111111111111111111111111111-2222222222222222-01";
  await viaProxy({ trace: { traceparent: given } }).getToolCall(rid, cid);
  assert.equal(proxy.seen.at(-1).headers.traceparent, given);
  // ...and nothing at all when there is neither.
  await viaProxy().getToolCall(rid, cid);
  assert.equal(proxy.seen.at(-1).headers.traceparent, undefined);
});

test("without @opentelemetry/api the client works, sends no traceparent but one given by hand", async () => {
  // The built package alone, where no node_modules can be found.
  const dir = mkdtempSync(join(tmpdir(), "ledgerd-no-otel-"));
  try {
    cpSync(fileURLToPath(new URL("dist", PACKAGE)), join(dir, "dist"), { recursive: true });
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "ledgerd", type: "module" }));
    const tracing = await import(pathToFileURL(join(dir, "dist", "tracing.js")).href);
    assert.equal(await tracing.loadApi(), null);
    const { Ledger: Bare } = await import(pathToFileURL(join(dir, "dist", "index.js")).href);
    const bare = (options = {}) => new Bare({ url: proxy.url, token: AGENT_TOKEN, ...options });

    // Inside an active span of this process's OpenTelemetry: the copy cannot see it.
    let [rid, cid] = key();
    const r = await tracer.startActiveSpan("turn", async (span) => {
      const out = await bare().toolCall({ requestId: rid, toolCallId: cid, tool: "t" }, async () => ({ ok: 1 }));
      span.end();
      return out;
    });
    assert.deepEqual([r.executed, r.outcome, r.result], [true, "succeeded", { ok: 1 }]);
    assert.deepEqual(calls(rid, cid), [["claim", undefined, undefined], ["complete", undefined, undefined]]);
    assert.deepEqual(await spans("execute_tool t"), []);

    // Given by hand, per call: sent as it is.
    [rid, cid] = key();
    const given = { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracestate: "k=v" };
    await bare().toolCall({ requestId: rid, toolCallId: cid, trace: given }, async () => 1);
    assert.deepEqual(calls(rid, cid), [["claim", given.traceparent, "k=v"], ["complete", given.traceparent, "k=v"]]);

    // Given to the client: every call, the per-call one winning.
    [rid, cid] = key();
    const client = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-00";
    await bare({ trace: { traceparent: client } }).toolCall({ requestId: rid, toolCallId: cid }, async () => 1);
    assert.deepEqual(calls(rid, cid).map((c) => c[1]), [client, client]);
    [rid, cid] = key();
    await bare({ trace: { traceparent: client } }).toolCall({ requestId: rid, toolCallId: cid, trace: given },
                                                              async () => 1);
    assert.deepEqual(calls(rid, cid).map((c) => c[1]), [given.traceparent, given.traceparent]);
    // A malformed one of the call's own leaves the client's.
    [rid, cid] = key();
    await bare({ trace: { traceparent: client } }).toolCall(
      { requestId: rid, toolCallId: cid, trace: { traceparent: "garbage", tracestate: "k=v" } }, async () => 1);
    assert.deepEqual(calls(rid, cid), [["claim", client, undefined], ["complete", client, undefined]]);

    // Malformed: not sent, and the call goes on.
    for (const traceparent of [
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", // no flags
      "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", // upper case
      "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", // version ff
      "00-00000000000000000000000000000000-b7ad6b7169203331-01", // zero trace id
      "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", // zero parent id
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nx-evil: 1",
    ]) {
      [rid, cid] = key();
      await bare().toolCall({ requestId: rid, toolCallId: cid, trace: { traceparent, tracestate: "k=v" } },
                            async () => 1);
      assert.deepEqual(calls(rid, cid), [["claim", undefined, undefined], ["complete", undefined, undefined]],
                       traceparent);
    }
    // A tracestate that is not one header value is dropped, the traceparent kept.
    [rid, cid] = key();
    await bare().toolCall({ requestId: rid, toolCallId: cid,
                            trace: { traceparent: given.traceparent, tracestate: "k=v\r\nx-evil: 1" } }, async () => 1);
    assert.deepEqual(calls(rid, cid)[0], ["claim", given.traceparent, undefined]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("with @opentelemetry/api but no SDK registered, nothing is propagated but a context given by hand", async () => {
  // A process of its own: this one has an SDK registered, globally.
  const [r1, c1] = key();
  const [r2, c2] = key();
  const given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  const script = `
    import { loadApi } from ${JSON.stringify(new URL("dist/tracing.js", PACKAGE).href)};
    import { Ledger } from ${JSON.stringify(new URL("dist/index.js", PACKAGE).href)};
    const api = await loadApi();
    if (api === null) throw new Error("@opentelemetry/api did not load");
    const ledger = new Ledger({ url: process.env.PROXY_URL, token: process.env.LEDGER_TOKEN });
    await api.trace.getTracer("t").startActiveSpan("turn", async (span) => {
      await ledger.toolCall({ requestId: "${r1}", toolCallId: "${c1}", tool: "t" }, async () => 1);
      await ledger.toolCall({ requestId: "${r2}", toolCallId: "${c2}", tool: "t",
                              trace: { traceparent: "${given}", tracestate: "k=v" } }, async () => 1);
      span.end();
    });
    console.log("done");`;
  const { stdout } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script], {
    env: { ...process.env, PROXY_URL: proxy.url, LEDGER_TOKEN: AGENT_TOKEN }, timeout: 60_000,
  });
  assert.equal(stdout.trim(), "done");
  assert.deepEqual(calls(r1, c1), [["claim", undefined, undefined], ["complete", undefined, undefined]]);
  assert.deepEqual(calls(r2, c2), [["claim", given, "k=v"], ["complete", given, "k=v"]]);
});
