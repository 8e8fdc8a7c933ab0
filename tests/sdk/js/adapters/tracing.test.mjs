// The framework adapters' tool calls as spans: through ledgerd/ai (the AI
// SDK's scripted MockLanguageModelV3), each tool call is an execute_tool
// span of the core's toolCall, child of the span active when the agent
// ran, with OpenTelemetry's own SDK registered from sdk/js's pinned
// devDependencies (the package imports @opentelemetry/api from there).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";
import { ledgerTools, stopOnLedgerError } from "ledgerd/ai";
import { decodeId, ledger, newId, SideEffects } from "./helpers.mjs";

const otel = createRequire(new URL("../../../../sdk/js/package.json", import.meta.url));
const { context, propagation, trace, SpanKind } = otel("@opentelemetry/api");
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = otel("@opentelemetry/sdk-trace-base");
const { W3CTraceContextPropagator } = otel("@opentelemetry/core");
const { AsyncLocalStorageContextManager } = otel("@opentelemetry/context-async-hooks");

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
trace.setGlobalTracerProvider(provider);
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A model that plays @script, one step per call: a list of tool calls, then a final text. */
function scriptedModel(script) {
  let step = 0;
  return new MockLanguageModelV3({
    doGenerate: async () => {
      const calls = script[step++];
      if (!calls) {
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: "stop" },
                 usage, warnings: [] };
      }
      return {
        content: calls.map(([toolName, input]) => ({
          type: "tool-call", toolCallId: decodeId(), toolName, input: JSON.stringify(input) })),
        finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [],
      };
    },
  });
}

const SCRIPT = [[["send_email", { to: "ana" }]], [["create_ticket", { title: "cid" }]]];

/** One run of the agent under an active span "agent turn"; returns that span's context. */
async function turn(requestId, effects) {
  const tracer = trace.getTracer("test");
  return tracer.startActiveSpan("agent turn", async (span) => {
    await generateText({
      model: scriptedModel(SCRIPT),
      tools: ledgerTools({ ledger: ledger(), requestId }, {
        send_email: tool({ description: "send an email", inputSchema: z.object({ to: z.string() }),
                           execute: async (args) => effects.run("send_email", args) }),
        create_ticket: tool({ description: "open a ticket", inputSchema: z.object({ title: z.string() }),
                              execute: async (args) => effects.run("create_ticket", args) }),
      }),
      prompt: "write to ana, then open a ticket",
      stopWhen: [stepCountIs(4), stopOnLedgerError],
    });
    span.end();
    return span.spanContext();
  });
}

async function toolSpans() {
  await provider.forceFlush();
  return exporter.getFinishedSpans().filter((s) => s.name.startsWith("execute_tool"));
}

test("each tool call of an adapter is an execute_tool span under the agent's span; a rerun's replay too", async () => {
  const requestId = newId("ai-trace");
  const effects = new SideEffects();
  for (const [run, executed] of [["first", true], ["rerun", false]]) {
    exporter.reset();
    const parent = await turn(requestId, effects);
    assert.equal(effects.count, 2, run);
    const spans = await toolSpans();
    assert.deepEqual(spans.map((s) => s.name), ["execute_tool send_email", "execute_tool create_ticket"], run);
    spans.forEach((s, k) => {
      assert.equal(s.kind, SpanKind.INTERNAL);
      assert.equal(s.spanContext().traceId, parent.traceId, run);
      assert.equal((s.parentSpanContext ?? { spanId: s.parentSpanId }).spanId, parent.spanId, run);
      assert.equal(s.attributes["gen_ai.operation.name"], "execute_tool");
      assert.equal(s.attributes["gen_ai.tool.call.id"], `call_0${k}`);
      assert.equal(s.attributes["ledger.request_id"], requestId);
      assert.equal(s.attributes["ledger.outcome"], "succeeded");
      assert.equal(s.attributes["ledger.executed"], executed, run);
      assert.equal(s.attributes["ledger.replayed"], !executed, run);
    });
  }
});
