#!/usr/bin/env node
// What the TypeScript client's toolCall adds to a tool, against calling the
// bare function: a new key each time (claim, run, complete: two durable
// commits) and the same key again (a replay: one round trip, the tool not
// run). One call at a time, each timed on the monotonic clock; the three
// kinds interleaved in rounds so the machine's noise falls on all alike.
// Not a test: prints a table of medians and p99s.
//
//   LEDGER_URL=http://127.0.0.1:8080 LEDGER_TOKEN=... [JS_CALLS=500] \
//     node tests/bench/js_toolcall_latency.mjs        (after: npm ci --prefix sdk/js)

import { randomBytes } from "node:crypto";

import { Ledger } from "../../sdk/js/dist/index.js";

const url = process.env.LEDGER_URL;
const token = process.env.LEDGER_TOKEN;
if (!url || !token) {
  console.error("usage: LEDGER_URL=... LEDGER_TOKEN=<an agent token> node tests/bench/js_toolcall_latency.mjs");
  process.exit(2);
}
const calls = Number(process.env.JS_CALLS ?? 500);
const ledger = new Ledger({ url, token });
const requestId = `bench-js-${randomBytes(6).toString("hex")}`;

// The tool: an async function doing nothing, so that the figure is the client's and ledgerd's.
const tool = async (fencingToken, idempotencyKey) => ({ ok: true, fencingToken, idempotencyKey });
const args = { to: "ana@example.com", subject: "Your refund", amount: 12.5 };

async function timed(fn) {
  const started = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - started) / 1e6;
}

const samples = { bare: [], fresh: [], replay: [] };
// A few rounds first, unmeasured: connections opened, code compiled.
for (let i = -20; i < calls; i++) {
  const toolCallId = `call_${String(i + 20).padStart(5, "0")}`;
  const options = { requestId, toolCallId, tool: "send_email", args };
  const bare = await timed(() => tool(1, `${requestId}:${toolCallId}`));
  const fresh = await timed(async () => {
    if (!(await ledger.toolCall(options, tool)).executed) throw new Error("a new key was not executed");
  });
  const replay = await timed(async () => {
    if (!(await ledger.toolCall(options, tool)).replayed) throw new Error("the same key was not replayed");
  });
  if (i >= 0) {
    samples.bare.push(bare);
    samples.fresh.push(fresh);
    samples.replay.push(replay);
  }
}

function quantile(values, q) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

const median = (values) => quantile(values, 0.5);
const ms = (value) => value.toFixed(3).padStart(9);
console.log(`toolCall against the bare function, ${calls} calls each, ${url}`);
console.log("                         median ms   p99 ms   added (median)");
for (const [name, label] of [["bare", "bare function"], ["fresh", "toolCall, new key"], ["replay", "toolCall, replay"]]) {
  const added = name === "bare" ? "" : ms(median(samples[name]) - median(samples.bare));
  console.log(`${label.padEnd(22)}${ms(median(samples[name]))}${ms(quantile(samples[name], 0.99))}   ${added}`);
}
