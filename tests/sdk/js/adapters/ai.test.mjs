// The Vercel AI SDK adapter (ledgerd/ai) with ai's own MockLanguageModelV3:
// a failed-over rerun replays, a diverged rerun gets ArgsMismatch.
import { test } from "node:test";
import assert from "node:assert/strict";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";
import { ArgsMismatch } from "ledgerd";
import { ledgerTools, stopOnLedgerError, throwIfLedgerError } from "ledgerd/ai";
import { decodeId, ledger, newId, SideEffects } from "./helpers.mjs";

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A model that plays @script, one step per call: a list of tool calls, or a final text. */
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

function appTools(effects) {
  return {
    send_email: tool({ description: "send an email", inputSchema: z.object({ to: z.string() }),
                       execute: async (args) => effects.run("send_email", args) }),
    create_ticket: tool({ description: "open a ticket", inputSchema: z.object({ title: z.string() }),
                          execute: async (args) => effects.run("create_ticket", args) }),
  };
}

async function runOnce(requestId, effects, script) {
  return generateText({
    model: scriptedModel(script),
    tools: ledgerTools({ ledger: ledger(), requestId }, appTools(effects)),
    prompt: "write to ana and bob, then to cid",
    stopWhen: [stepCountIs(6), stopOnLedgerError],
  });
}

const outputs = (result) => result.steps.flatMap((s) => s.toolResults.map((r) => r.output));

const SCRIPT = [[["send_email", { to: "ana" }], ["send_email", { to: "bob" }]],
                [["create_ticket", { title: "cid" }]]];

test("a failed-over rerun replays every call: each side effect once, the same results", async () => {
  const requestId = newId("ai");
  const effects = new SideEffects();
  const first = await runOnce(requestId, effects, SCRIPT);
  assert.equal(effects.count, 3);
  assert.deepEqual(outputs(first).map((o) => o.args), [{ to: "ana" }, { to: "bob" }, { title: "cid" }]);
  const second = await runOnce(requestId, effects, SCRIPT);   // a new model instance, the same script
  assert.equal(effects.count, 3, "the rerun executed a side effect again");
  assert.deepEqual(outputs(second), outputs(first));
  throwIfLedgerError(second);
});

test("a rerun whose model calls another tool or other args under the same ordinal gets ArgsMismatch", async () => {
  const requestId = newId("ai");
  const effects = new SideEffects();
  await runOnce(requestId, effects, [[["send_email", { to: "ana" }]]]);
  assert.equal(effects.count, 1);
  for (const diverged of [[["send_email", { to: "eve" }]], [["create_ticket", { title: "ana" }]]]) {
    const rerun = await runOnce(requestId, effects, [diverged]);
    assert.equal(effects.count, 1, "a diverged rerun executed its tool");
    assert.equal(rerun.steps.length, 1, "stopOnLedgerError did not stop the loop");
    const error = rerun.steps[0].content.find((p) => p.type === "tool-error")?.error;
    assert.ok(error instanceof ArgsMismatch, `expected ArgsMismatch, got ${error}`);
    assert.throws(() => throwIfLedgerError(rerun), ArgsMismatch);
  }
});
