// The LangChain.js adapter (ledgerd/langchain) with langchain's own
// FakeToolCallingModel: a failed-over rerun replays, a diverged rerun gets
// ArgsMismatch out of agent.invoke().
import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeToolCallingModel, ToolMessage, createAgent, tool } from "langchain";
import { z } from "zod";
import { ArgsMismatch } from "ledgerd";
import { findLedgerError, ledgerMiddleware, ordinalOf } from "ledgerd/langchain";
import { decodeId, ledger, newId, SideEffects } from "./helpers.mjs";

/** The fake model's script: one list of tool calls per turn, then a turn without. */
function scriptedModel(script) {
  return new FakeToolCallingModel({
    toolCalls: [...script.map((calls) => calls.map(([name, args]) => ({ name, args, id: decodeId() }))), []],
  });
}

function appAgent(effects, script, middleware) {
  const fnTool = (name, schema) => tool(async (args) => JSON.stringify(effects.run(name, args)),
                                        { name, description: name, schema });
  return createAgent({
    model: scriptedModel(script),
    tools: [fnTool("send_email", z.object({ to: z.string() })),
            fnTool("create_ticket", z.object({ title: z.string() }))],
    middleware: [middleware],
  });
}

async function runOnce(requestId, effects, script, byContext = false) {
  const middleware = byContext ? ledgerMiddleware({ ledger: ledger() })
    : ledgerMiddleware({ ledger: ledger(), requestId });
  const agent = appAgent(effects, script, middleware);
  return agent.invoke({ messages: [{ role: "user", content: "write to ana and bob, then to cid" }] },
                      byContext ? { context: { requestId } } : undefined);
}

const outputs = (result) => result.messages.filter((m) => ToolMessage.isInstance(m)).map((m) => m.content);

const SCRIPT = [[["send_email", { to: "ana" }], ["send_email", { to: "bob" }]],
                [["create_ticket", { title: "cid" }]]];

test("a failed-over rerun replays every call: each side effect once, the same results", async () => {
  for (const byContext of [false, true]) {
    const requestId = newId("lc");
    const effects = new SideEffects();
    const first = await runOnce(requestId, effects, SCRIPT, byContext);
    assert.equal(effects.count, 3);
    // The two calls of the first turn run in parallel: in either order.
    assert.deepEqual(effects.executions.map((e) => JSON.stringify(e.args)).sort(),
                     ['{"title":"cid"}', '{"to":"ana"}', '{"to":"bob"}']);
    assert.equal(outputs(first).length, 3);
    const second = await runOnce(requestId, effects, SCRIPT, byContext);   // a new model, the same script
    assert.equal(effects.count, 3, "the rerun executed a side effect again");
    assert.deepEqual(outputs(second), outputs(first));
  }
});

test("a rerun whose model calls another tool or other args under the same ordinal gets ArgsMismatch", async () => {
  const requestId = newId("lc");
  const effects = new SideEffects();
  await runOnce(requestId, effects, [[["send_email", { to: "ana" }]]]);
  assert.equal(effects.count, 1);
  for (const diverged of [[["send_email", { to: "eve" }]], [["create_ticket", { title: "ana" }]]]) {
    await assert.rejects(runOnce(requestId, effects, [diverged]), (e) => {
      assert.ok(findLedgerError(e) instanceof ArgsMismatch, `expected ArgsMismatch, got ${e}`);
      return true;
    });
    assert.equal(effects.count, 1, "a diverged rerun executed its tool");
  }
});

test("the ordinal counts the calls of the messages before the call's own, then its index", () => {
  const ai = (...ids) => ({ type: "ai", tool_calls: ids.map((id) => ({ id, name: "t", args: {} })) });
  const messages = [{ type: "human" }, ai("a", "b"), { type: "tool" }, { type: "tool" }, ai("x", "y", "a")];
  assert.equal(ordinalOf(messages, { id: "a", name: "t", args: {} }), 4);   // the last message holding "a"
  assert.equal(ordinalOf(messages, { id: "y", name: "t", args: {} }), 3);
  assert.throws(() => ordinalOf(messages, { id: "z", name: "t", args: {} }), /no stable ordinal/);
});
