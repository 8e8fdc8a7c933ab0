// The OpenAI Agents SDK adapter end to end with ledger-mcp: an agent whose
// MCP server (MCPServerStdio) is build/ledger-mcp in front of the test
// server of tests/programs/ledger-mcp (tests/programs/ledger-mcp/node/server.mjs), with
// toolMetaResolver: ledgerToolMetaResolver. A failed-over rerun of the same
// logical request, with a new model, a new MCP connection and a new proxy
// process, gets the recorded answer: the tool ran once.
//
// Environment (from tests/sdk/js/test_js_adapters.py): LEDGER_URL, LEDGER_TOKEN,
// LEDGER_MCP (the proxy binary) and MCP_TEST_SERVER (server.mjs).
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Agent, MCPServerStdio, Runner } from "@openai/agents";
import { ledgerRun, ledgerToolMetaResolver } from "ledgerd/openai-agents";
import { ledger, newId } from "./helpers.mjs";
import { ScriptedModel } from "./agents_model.mjs";


function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} must be set (tests/sdk/js/test_js_adapters.py sets it)`);
  return value;
}

/** The proxy in front of the test server, as the agent launches it. */
function proxied(countFile) {
  return new MCPServerStdio({
    name: "payments",
    command: env("LEDGER_MCP"),
    args: ["stdio", "--ledger-url", env("LEDGER_URL"), "--lease-ms", "1000", "--",
           "node", env("MCP_TEST_SERVER"), "stdio"],
    // The SDK's transport gives the child only a default environment unless told.
    env: { ...process.env, LEDGER_TOKEN: env("LEDGER_TOKEN"), MCP_TEST_COUNT_FILE: countFile },
    toolMetaResolver: ledgerToolMetaResolver,
    cacheToolsList: false,
  });
}

/** One run of @requestId: a fresh model, MCP connection and proxy process. */
async function runOnce(requestId, countFile, script) {
  const server = proxied(countFile);
  await server.connect();
  try {
    const agent = new Agent({ name: "assistant", instructions: "help",
                              model: new ScriptedModel(script), mcpServers: [server] });
    const runner = new Runner({ tracingDisabled: true });
    return await runner.run(agent, "charge order o-1 for 1250 cents",
                            ledgerRun({ ledger: ledger(), requestId }, { maxTurns: 4 }));
  } finally {
    await server.close();
  }
}

const outputs = (result) => result.newItems.filter((i) => i.type === "tool_call_output_item")
  .map((i) => i.output);

function events(countFile, event) {
  const text = fs.existsSync(countFile) ? fs.readFileSync(countFile, "utf8") : "";
  return text.split("\n").filter(Boolean).map((l) => JSON.parse(l)).filter((e) => e.event === event);
}

const SCRIPT = [[["charge", { order: "o-1", cents: 1250 }]]];

test("a failed-over rerun through ledger-mcp replays the MCP call: one charge, the same output", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "oa-mcp-"));
  const countFile = path.join(dir, "counts.jsonl");
  try {
    const requestId = newId("oa-mcp");
    const first = await runOnce(requestId, countFile, SCRIPT);
    const executed = events(countFile, "executed");
    assert.equal(executed.length, 1);
    // The keys the resolver gave reached the server through the proxy.
    assert.equal(executed[0].request_id, requestId);
    assert.equal(executed[0].tool_call_id, "call_00");   // the request's first call
    assert.deepEqual(executed[0].args, { order: "o-1", cents: 1250 });
    assert.equal(outputs(first).length, 1);
    assert.match(JSON.stringify(outputs(first)[0]), /charged 1250 cents for o-1 \(charge ch_/);

    const second = await runOnce(requestId, countFile, SCRIPT);   // a new model instance, the same script
    assert.equal(events(countFile, "executed").length, 1, "the rerun charged again");
    assert.equal(events(countFile, "started").length, 1, "the rerun reached the server");
    assert.deepEqual(outputs(second), outputs(first));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
