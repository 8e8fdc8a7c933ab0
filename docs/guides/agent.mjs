// docs/guides/agent.mjs: one tool of an agent, run at most once per logical
// request (docs/guide-agent.md).
//
//   LEDGER_URL=... LEDGER_TOKEN=... node docs/guides/agent.mjs REQUEST_ID [ATTEMPT_ID]
//
// The tool is send_email. Its side effect appends a line to var/outbox.txt
// (OUTBOX names another file). Run it again with the same REQUEST_ID: every
// call gets the first run's result back and nothing is sent twice.
import fs from "node:fs";

import { AttemptFenced, Ledger, LedgerError, OutcomeUnknown, stableToolCallId } from "ledgerd";

const ledger = new Ledger({ url: process.env.LEDGER_URL, token: process.env.LEDGER_TOKEN });
const outbox = process.env.OUTBOX ?? "var/outbox.txt";

// What the model asks for, turn by turn: two calls at once, then one more.
// A real agent gets them from the model; a faithful rerun gets the same.
const modelTurns = [
  [{ to: "ana@example.com", subject: "Your refund" },
   { to: "bob@example.com", subject: "Your refund" }],
  [{ to: "ana@example.com", subject: "Refund sent" }],
];

// The side effect. A real mail API would take idempotencyKey as its own key.
function sendEmail({ to, subject }, idempotencyKey) {
  fs.appendFileSync(outbox, `${idempotencyKey} ${to} ${subject}\n`);
  return { message_id: `m-${idempotencyKey}` };
}

// Runs one call of send_email at most once. Resolves to its result, or null: stop the run.
async function callTool(requestId, attemptId, toolCallId, args) {
  try {
    const r = await ledger.toolCall(
      { requestId, attemptId, toolCallId, tool: "send_email", args, waitMs: 10000 },
      (fencingToken, idempotencyKey) => sendEmail(args, idempotencyKey));
    // executed: it ran now. replayed: an earlier run ran it; this is its recorded result.
    console.log(toolCallId, r.replayed ? "replayed" : "executed", r.outcome, r.resultJson);
    return r.result;
  } catch (e) {
    if (e instanceof AttemptFenced) {
      console.log(toolCallId, "attempt_fenced: this attempt was replaced; stop, publish nothing");
    } else if (e instanceof OutcomeUnknown) {
      console.log(toolCallId, "outcome_unknown: it may have run; a person resolves it first");
    } else if (e instanceof LedgerError) { // args_mismatch (the rerun diverged), in_progress...
      console.log(toolCallId, e.message); // "code: message"
    } else {
      throw e; // the tool itself failed: recorded as failed, and replayed as such
    }
    return null;
  }
}

// A model server gets these from the router, in the X-Ledger-Request-Id and
// X-Ledger-Attempt-Id headers of the request it serves.
const [requestId, attemptId] = process.argv.slice(2);
const messages = [{ role: "user", content: "Refund order 829, then tell Ana and Bob." }];
for (const turn of modelTurns) {
  // The k-th tool call of the conversation is call_<k>: count the calls made
  // before this turn, then number this turn's calls in the model's order.
  const made = messages.reduce((n, m) => n + (m.tool_calls?.length ?? 0), 0);
  const ids = turn.map((_, i) => stableToolCallId(made + i));
  messages.push({ role: "assistant", tool_calls: turn });
  // Parallel calls keep the ids given above, whichever finishes first.
  const results = await Promise.all(
    turn.map((args, i) => callTool(requestId, attemptId, ids[i], args)));
  if (results.includes(null)) {
    process.exitCode = 3;
    break;
  }
  messages.push(...results.map((r) => ({ role: "tool", content: JSON.stringify(r) })));
}
