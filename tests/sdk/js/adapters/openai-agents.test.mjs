// The OpenAI Agents SDK adapter (ledgerd/openai-agents) with a scripted
// Model: a failed-over rerun replays, a diverged rerun gets ArgsMismatch,
// and an MCP server's toolMetaResolver names the call for ledger-mcp.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Agent, Runner, tool } from "@openai/agents";
import { z } from "zod";
import { ArgsMismatch } from "ledgerd";
import { findLedgerError, ledgerErrorFunction, ledgerExecute, ledgerRun, ledgerToolMetaResolver } from "ledgerd/openai-agents";
import { findCause, ledger, newId, SideEffects } from "./helpers.mjs";
import { ScriptedModel } from "./agents_model.mjs";


function appAgent(effects, script) {
  const fnTool = (name, parameters) => tool({
    name, description: name, parameters,
    execute: ledgerExecute(async (args) => effects.run(name, args)),
    errorFunction: ledgerErrorFunction,
  });
  return new Agent({
    name: "assistant", instructions: "help", model: new ScriptedModel(script),
    tools: [fnTool("send_email", z.object({ to: z.string() })),
            fnTool("create_ticket", z.object({ title: z.string() }))],
  });
}

async function runOnce(requestId, effects, script) {
  const runner = new Runner({ tracingDisabled: true });
  return runner.run(appAgent(effects, script), "write to ana and bob, then to cid",
                    ledgerRun({ ledger: ledger(), requestId }, { maxTurns: 6 }));
}

const outputs = (result) => result.newItems.filter((i) => i.type === "tool_call_output_item")
  .map((i) => i.output);

const SCRIPT = [[["send_email", { to: "ana" }], ["send_email", { to: "bob" }]],
                [["create_ticket", { title: "cid" }]]];

test("a failed-over rerun replays every call: each side effect once, the same results", async () => {
  const requestId = newId("oa");
  const effects = new SideEffects();
  const first = await runOnce(requestId, effects, SCRIPT);
  assert.equal(effects.count, 3);
  // The two calls of the first turn run in parallel: in either order.
    assert.deepEqual(effects.executions.map((e) => JSON.stringify(e.args)).sort(),
                     ['{"title":"cid"}', '{"to":"ana"}', '{"to":"bob"}']);
  assert.equal(outputs(first).length, 3);
  const second = await runOnce(requestId, effects, SCRIPT);   // a new model instance, the same script
  assert.equal(effects.count, 3, "the rerun executed a side effect again");
  assert.deepEqual(outputs(second), outputs(first));
});

test("a rerun whose model calls another tool or other args under the same ordinal gets ArgsMismatch", async () => {
  const requestId = newId("oa");
  const effects = new SideEffects();
  await runOnce(requestId, effects, [[["send_email", { to: "ana" }]]]);
  assert.equal(effects.count, 1);
  for (const diverged of [[["send_email", { to: "eve" }]], [["create_ticket", { title: "ana" }]]]) {
    await assert.rejects(runOnce(requestId, effects, [diverged]), (e) => {
      assert.ok(findCause(e, ArgsMismatch), `expected ArgsMismatch, got ${e}`);
      assert.ok(findLedgerError(e) instanceof ArgsMismatch);
      return true;
    });
    assert.equal(effects.count, 1, "a diverged rerun executed its tool");
  }
});

test("toolMetaResolver gives an MCP call the keys of its request and ordinal", async () => {
  const requestId = newId("oa");
  const options = ledgerRun({ ledger: ledger(), requestId });
  const runContext = { context: options.context };
  await options.callModelInputFilter({ modelData: { input: [
    { type: "message", role: "user", content: "hi" },
    { type: "function_call", callId: "x", name: "a", arguments: "{}" },
    { type: "function_call_result", callId: "x", name: "a", output: "ok" }] }, agent: null,
    context: options.context });
  const meta = (name) => ledgerToolMetaResolver({ runContext, serverName: "s", toolName: name, arguments: {} });
  assert.deepEqual(meta("charge"), { "io.ledgerd/request_id": requestId, "io.ledgerd/tool_call_id": "call_01" });
  assert.deepEqual(meta("refund"), { "io.ledgerd/request_id": requestId, "io.ledgerd/tool_call_id": "call_02" });
  assert.throws(() => ledgerToolMetaResolver({ runContext: { context: {} }, serverName: "s", toolName: "x",
                                               arguments: {} }), /ledgerRun/);
});
