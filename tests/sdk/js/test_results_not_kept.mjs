// Results not kept, in the TypeScript client's toolCall (sdk/js) against a
// live ledgerd: a result longer than maxResultBytes (default 1 MiB, ledgerd's
// default --max-result-bytes) is completed as the length and SHA-256 of its
// exact JSON text, and a whole completion refused as too large a body (413)
// is sent again at once that way. The caller gets its result; a rerun throws
// ResultNotKeptError and runs nothing, through the adapters' claimCall too;
// a result within the bound is kept whole, as before. Run by
// tests/sdk/js/test_js_client.py, whose ledgerd has the default --max-body
// (1 MiB). Contract: docs/api.md, "Results not kept"; sdk/js/README.md.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";

import { claimCall, findLedgerError } from "../../../sdk/js/dist/adapters/common.js";
import {
  Ledger, LedgerError, NotExecuted, ResultNotKeptError, Retryable, stableToolCallId,
} from "../../../sdk/js/dist/index.js";
import { agent, AGENT_TOKEN, countingTool, key, mustNotRun, newId, rejection, URL } from "./helpers.mjs";

const MIB = 1 << 20;

/** The body of every completion `led` sends from now on, in order. */
function completionsSent(led) {
  const bodies = [];
  const transport = led.transport;
  const call = transport.call.bind(transport);
  transport.call = (method, path, body, options) => {
    if (path.endsWith("/complete")) bodies.push(JSON.parse(body));
    return call(method, path, body, options);
  };
  return bodies;
}

/** The length and SHA-256 of the exact JSON text the client sends of `value` (UTF-8). */
function digestOf(value) {
  const text = Buffer.from(JSON.stringify(value), "utf8");
  return { bytes: text.length, sha256: createHash("sha256").update(text).digest("hex") };
}

/** ledgerd's view of the call: settled in `state`, its result kept as `digest` only. */
async function assertNotKept(rid, cid, state, digest) {
  const call = await agent().getToolCall(rid, cid);
  assert.equal(call.state, state);
  assert.equal(call.result_kept, false);
  assert.deepEqual([call.result_bytes, call.result_sha256], [digest.bytes, digest.sha256]);
  assert.ok(!("result" in call));
}

/**
 * A rerun of the key (the same call: `same` has its tool and args) throws
 * ResultNotKeptError with the stored digest; the tool does not run.
 */
async function assertRerunIsResultNotKept(rid, cid, outcome, digest, same = {}) {
  const e = await rejection(agent().toolCall({ requestId: rid, toolCallId: cid, waitMs: 5000, ...same }, mustNotRun),
                            ResultNotKeptError);
  assert.ok(e instanceof LedgerError);
  assert.equal(e.name, "ResultNotKeptError");
  assert.deepEqual([e.status, e.code], [409, "result_not_kept"]);
  assert.equal(e.outcome, outcome);
  assert.deepEqual([e.resultBytes, e.resultSha256], [digest.bytes, digest.sha256]);
  assert.equal(e.details.idempotency_key, `${rid}:${cid}`);
  assert.equal(typeof e.details.completed_at, "string");
}

// A report of 1.2 MB in 600,000 characters: over the default bound in UTF-8
// bytes, under it in UTF-16 code units.
const REPORT = { report: "\u00e9".repeat(600_000) };

test("over the bound: completed as its length and SHA-256, and a rerun is ResultNotKeptError", async () => {
  const [rid, cid] = key();
  const led = agent();
  const sent = completionsSent(led);
  const tool = countingTool(REPORT);
  const r = await led.toolCall({ requestId: rid, toolCallId: cid, tool: "fetch_report", args: { id: 42 } }, tool);
  const digest = digestOf(REPORT);
  assert.ok(digest.bytes > MIB && MIB > REPORT.report.length);
  // The tool's caller has its result, and ledgerd recorded the completion.
  assert.deepEqual([r.executed, r.replayed, r.outcome, r.recorded], [true, false, "succeeded", true]);
  assert.deepEqual(r.result, REPORT);
  assert.equal(r.resultJson, JSON.stringify(REPORT));
  assert.equal(r.resultKept, false);
  assert.equal(r.completionError, null);
  assert.match(r.completedAt, /^\d{4}-\d\d-\d\dT/);
  // Only the digest went out: the whole text was never sent.
  assert.deepEqual(sent, [{ fencing_token: 1, outcome: "succeeded", result_not_kept: digest }]);
  await assertNotKept(rid, cid, "succeeded", digest);
  await assertRerunIsResultNotKept(rid, cid, "succeeded", digest, { tool: "fetch_report", args: { id: 42 } });
  assert.equal(tool.calls.length, 1);
});

test("a whole completion refused as 413 body_too_large is sent again as its digest", async () => {
  // The client's bound above ledgerd's --max-body: the whole text goes out first.
  const [rid, cid] = key();
  const led = agent({ maxResultBytes: 4 * MIB });
  const sent = completionsSent(led);
  const value = { rows: "r".repeat(MIB + MIB / 2) };
  const digest = digestOf(value);
  const tool = countingTool(value);
  const r = await led.toolCall({ requestId: rid, toolCallId: cid, tool: "fetch_report", args: { id: 42 } }, tool);
  assert.deepEqual([r.executed, r.outcome, r.recorded, r.resultKept], [true, "succeeded", true, false]);
  assert.deepEqual(r.result, value);
  assert.deepEqual(sent.map((b) => Object.keys(b).sort()),
                   [["fencing_token", "outcome", "result"], ["fencing_token", "outcome", "result_not_kept"]]);
  assert.deepEqual(sent[1].result_not_kept, digest);
  await assertNotKept(rid, cid, "succeeded", digest);
  await assertRerunIsResultNotKept(rid, cid, "succeeded", digest, { tool: "fetch_report", args: { id: 42 } });
  assert.equal(tool.calls.length, 1);
});

test("within the bound: kept whole and replayed, as before", async () => {
  // Exactly at the client's bound.
  const led = agent({ maxResultBytes: 4096 });
  let [rid, cid] = key();
  const value = { text: "x".repeat(4096 - '{"text":""}'.length) };
  assert.equal(Buffer.byteLength(JSON.stringify(value)), 4096);
  const sent = completionsSent(led);
  const r = await led.toolCall({ requestId: rid, toolCallId: cid }, countingTool(value));
  assert.deepEqual([r.outcome, r.resultKept], ["succeeded", true]);
  assert.deepEqual(sent.map((b) => Object.keys(b).sort()), [["fencing_token", "outcome", "result"]]);
  const call = await agent().getToolCall(rid, cid);
  assert.deepEqual(call.result, value);
  assert.ok(!("result_kept" in call));
  const again = await led.toolCall({ requestId: rid, toolCallId: cid }, mustNotRun);
  assert.deepEqual([again.replayed, again.resultJson, again.resultKept], [true, r.resultJson, true]);
  // One byte more is over it.
  [rid, cid] = key();
  value.text += "x";
  const over = await led.toolCall({ requestId: rid, toolCallId: cid }, countingTool(value));
  assert.equal(over.resultKept, false);
  await assertNotKept(rid, cid, "succeeded", digestOf(value));
  // Just under the default bound, against ledgerd's default body limit: whole.
  [rid, cid] = key();
  const big = { text: "y".repeat(MIB - 100) };
  const whole = await agent().toolCall({ requestId: rid, toolCallId: cid }, countingTool(big));
  assert.deepEqual([whole.resultKept, whole.recorded], [true, true]);
  assert.deepEqual((await agent().getToolCall(rid, cid)).result, big);
});

test("one call's own bound, and a bound that is not an integer >= 0", async () => {
  const [rid, cid] = key();
  const value = { n: "z".repeat(100) };
  const r = await agent().toolCall({ requestId: rid, toolCallId: cid, maxResultBytes: 64 }, countingTool(value));
  assert.equal(r.resultKept, false);
  await assertNotKept(rid, cid, "succeeded", digestOf(value));
  for (const wrong of [-1, 1.5, "1024", NaN, true]) {
    assert.throws(() => new Ledger({ url: URL, token: AGENT_TOKEN, maxResultBytes: wrong }), RangeError);
    await assert.rejects(async () => agent().toolCall({ requestId: newId(), toolCallId: "c", maxResultBytes: wrong },
                                                      mustNotRun), RangeError);
  }
});

test("a failure over the bound is completed as its digest; a retryable one frees the key", async () => {
  const led = agent({ maxResultBytes: 1024 });
  let [rid, cid] = key();
  const error = new RangeError("upstream said: " + "q".repeat(5000));
  const tool = countingTool(null, error);
  await rejection(led.toolCall({ requestId: rid, toolCallId: cid }, tool), RangeError);
  const digest = digestOf({ error: "RangeError", message: error.message });
  await assertNotKept(rid, cid, "failed", digest);
  await assertRerunIsResultNotKept(rid, cid, "failed", digest);
  assert.equal(tool.calls.length, 1);
  // A retryable failure keeps no result: it is recorded without one.
  [rid, cid] = key();
  await rejection(led.toolCall({ requestId: rid, toolCallId: cid }, countingTool(null, new Retryable("r".repeat(5000)))),
                  Retryable);
  assert.equal((await agent().getToolCall(rid, cid)).state, "released");
  const r = await led.toolCall({ requestId: rid, toolCallId: cid }, countingTool({ sent: true }));
  assert.deepEqual([r.executed, r.fencingToken, r.resultKept], [true, 2, true]);
  // NotExecuted releases the key, with no result at all.
  [rid, cid] = key();
  await rejection(led.toolCall({ requestId: rid, toolCallId: cid }, countingTool(null, new NotExecuted("n".repeat(5000)))),
                  NotExecuted);
  assert.equal((await agent().getToolCall(rid, cid)).state, "released");
});

test("the adapters' claim: the bound passed on, and a rerun surfaced as ResultNotKeptError", async () => {
  const requestId = newId("r");
  const options = { ledger: agent(), requestId, maxResultBytes: 64 };
  let runs = 0;
  const run = () => {
    runs++;
    return { body: "w".repeat(100) };
  };
  assert.deepEqual(await claimCall(options, 0, "fetch_report", { id: 42 }, run), { body: "w".repeat(100) });
  const digest = digestOf({ body: "w".repeat(100) });
  await assertNotKept(requestId, stableToolCallId(0), "succeeded", digest);
  const e = await rejection(claimCall(options, 0, "fetch_report", { id: 42 }, run), ResultNotKeptError);
  assert.equal(findLedgerError({ error: e }), e);
  assert.deepEqual([e.outcome, e.resultBytes, e.resultSha256], ["succeeded", digest.bytes, digest.sha256]);
  assert.equal(runs, 1);
});
