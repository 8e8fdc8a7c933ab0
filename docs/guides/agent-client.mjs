// docs/guides/agent-client.mjs: an agent whose loop runs on the client side,
// a client of ledger-gateway (docs/guide-agent.md, "Two topologies").
//
//   LEDGER_URL=... LEDGER_TOKEN=... node docs/guides/agent-client.mjs RUN_ID
//
// The agent asks the model through the gateway (GATEWAY_URL, by default
// http://127.0.0.1:8000/v1) with the official openai client, and runs the
// tool the model asks for, send_email, itself: its side effect is a line in
// var/outbox.txt (OUTBOX names another file). RUN_ID names the run; whoever
// starts the run gives the same RUN_ID to its restarts. Each inference call
// carries the key RUN_ID:STEP, and each tool call is claimed in ledgerd under
// the request id RUN_ID, so a restart replays what the run did before: the
// gateway replays the model's answers, ledgerd the tools' results.
import fs from "node:fs";

import OpenAI from "openai";
import { Ledger, LedgerError, stableToolCallId } from "ledgerd";

const runId = process.argv[2];
if (!runId) {
  console.error("usage: LEDGER_URL=... LEDGER_TOKEN=... node docs/guides/agent-client.mjs RUN_ID");
  process.exit(2);
}
const ledger = new Ledger({ url: process.env.LEDGER_URL, token: process.env.LEDGER_TOKEN });
const outbox = process.env.OUTBOX ?? "var/outbox.txt";
// The API key goes out as Authorization, which is the scope of the keys
// (--client-scope-header): one client's keys never meet another's.
const openai = new OpenAI({
  baseURL: process.env.GATEWAY_URL ?? "http://127.0.0.1:8000/v1",
  apiKey: process.env.GATEWAY_API_KEY ?? "team-a",
});
const tools = [{
  type: "function",
  function: {
    name: "send_email",
    description: "Sends an e-mail.",
    parameters: {
      type: "object",
      properties: { to: { type: "string" }, subject: { type: "string" } },
      required: ["to", "subject"],
    },
  },
}];

// The side effect. A real mail API would take idempotencyKey as its own key.
function sendEmail({ to, subject }, idempotencyKey) {
  fs.appendFileSync(outbox, `${idempotencyKey} ${to} ${subject}\n`);
  return { message_id: `m-${idempotencyKey}` };
}

// One inference call, streamed: resolves to the model's message. The key names
// the call: a retry of it, by the client itself (maxRetries, 2 by default) or
// by a restart of the run, is the same logical request to the gateway.
async function infer(messages) {
  // STEP is the number of the model's answers before this call, counted from the
  // conversation, not by a counter of the process: a restart counts the same.
  const step = messages.filter((m) => m.role === "assistant").length;
  const { data: stream, response } = await openai.chat.completions
    .create({ model: "stand-in", messages, tools, stream: true },
      { headers: { "Idempotency-Key": `${runId}:${step}` } })
    .withResponse();
  let content = "";
  const calls = [];
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta ?? {};
    content += delta.content ?? "";
    for (const part of delta.tool_calls ?? []) {
      calls[part.index] ??= { id: part.id, type: "function", function: { name: "", arguments: "" } };
      calls[part.index].function.name += part.function?.name ?? "";
      calls[part.index].function.arguments += part.function?.arguments ?? "";
    }
  }
  const replayed = response.headers.get("idempotent-replayed") === "true";
  console.log(`step ${step} ${response.headers.get("x-request-id")}${replayed ? " replayed" : ""}`);
  return calls.length > 0
    ? { role: "assistant", content: content || null, tool_calls: calls }
    : { role: "assistant", content };
}

// Runs the k-th tool call of the run at most once; resolves to its result's JSON text.
async function callTool(k, call) {
  if (call.function.name !== "send_email") throw new Error(`no tool ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  const toolCallId = stableToolCallId(k);
  const r = await ledger.toolCall(
    { requestId: runId, toolCallId, tool: "send_email", args, waitMs: 10000 },
    (fencingToken, idempotencyKey) => sendEmail(args, idempotencyKey));
  // executed: it ran now. replayed: an earlier run ran it; this is its recorded result.
  console.log(toolCallId, r.replayed ? "replayed" : "executed", r.resultJson);
  return r.resultJson;
}

const messages = [{ role: "user", content: "Refund order 829, then tell ana@example.com." }];
try {
  for (;;) {
    const made = messages.reduce((n, m) => n + (m.tool_calls?.length ?? 0), 0);
    const message = await infer(messages);
    messages.push(message);
    if (!message.tool_calls) {
      console.log(message.content);
      break;
    }
    // The k-th tool call of the run is call_<k>, numbered in the model's order.
    for (const [i, call] of message.tool_calls.entries()) {
      messages.push({ role: "tool", tool_call_id: call.id, content: await callTool(made + i, call) });
    }
  }
} catch (e) {
  if (e instanceof OpenAI.APIError) {
    // 422 idempotency_key_reused: this run's conversation is not the one its key
    // first named; an error event after the first byte (upstream_decode_interrupted):
    // the answer was cut, and its key replays the cut answer from now on.
    console.log(`gateway: ${e.code ?? "error"}: ${e.message}`);
  } else if (e instanceof LedgerError) { // outcome_unknown, args_mismatch, in_progress...
    console.log(`ledger: ${e.message}`);
  } else {
    throw e;
  }
  process.exitCode = 3;
}
