// The TypeScript client's toolCall (sdk/js) against a live ledgerd: every
// outcome and every error, the renewal of a long tool's claim, a lost answer
// retried with the same claim_id, a completion retried across a ledgerd
// stopped and started, and an AbortSignal that stops a wait. Run by
// tests/sdk/js/test_js_client.py, which started the ledgerd.

import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";

import {
  ArgsMismatch, argsSha256, AttemptFenced, InProgress, Ledger, LedgerError, LedgerUnavailable,
  NotExecuted, OutcomeUnknown, ResultExpired, Retryable, stableToolCallId, ToolCallCounter,
} from "../../../sdk/js/dist/index.js";
import {
  AGENT_TOKEN, agent, control, countingTool, eventTypes, key, mustNotRun, newId, rawClaim, rawPost,
  rejection, reviewer, router, sleep, toolPath,
} from "./helpers.mjs";

test("executed: the tool runs once and its result is recorded as succeeded", async () => {
  const [rid, cid] = key();
  const tool = countingTool({ message_id: "m-1", n: [1, 2] });
  const r = await agent().toolCall({ requestId: rid, toolCallId: cid, tool: "send_email", args: { to: "a" },
                                     owner: "mailer@pod-7" }, tool);
  assert.deepEqual(tool.calls, [[`${rid}:${cid}`, 1]]);
  assert.deepEqual([r.executed, r.replayed, r.outcome, r.recorded], [true, false, "succeeded", true]);
  assert.deepEqual(r.result, { message_id: "m-1", n: [1, 2] });
  assert.equal(r.resultJson, '{"message_id":"m-1","n":[1,2]}');
  assert.equal(r.idempotencyKey, `${rid}:${cid}`);
  assert.equal(r.fencingToken, 1);
  assert.match(r.completedAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  const call = await agent().getToolCall(rid, cid);
  assert.equal(call.state, "succeeded");
  assert.deepEqual(call.result, r.result);
  assert.equal(call.tool, "send_email");
  assert.equal(call.args_sha256, argsSha256({ to: "a" }));
  assert.deepEqual(await eventTypes(rid), ["claimed", "completed"]);
});

test("replayed: the stored text comes back byte for byte and the tool does not run", async () => {
  let [rid, cid] = key();
  const first = await agent().toolCall({ requestId: rid, toolCallId: cid, tool: "t", args: { a: 1 } },
                                       countingTool({ id: 7 }));
  const r = await agent().toolCall({ requestId: rid, toolCallId: cid, tool: "t", args: { a: 1 } }, mustNotRun);
  assert.deepEqual([r.executed, r.replayed, r.outcome, r.recorded], [false, true, "succeeded", true]);
  assert.deepEqual(r.result, { id: 7 });
  assert.equal(r.resultJson, first.resultJson);
  assert.equal(r.fencingToken, null);
  assert.equal(r.completedAt, first.completedAt);
  // However it was spelt, and with an integer past 2^53 that JSON.parse would round.
  [rid, cid] = key();
  const { json } = await rawClaim(rid, cid);
  const stored = '{ "b" :[1,  2.50, "\\u00e9"], "a":1E2, "id": 9007199254740993 }';
  const done = await rawPost(toolPath(rid, cid, "complete"),
                             `{"fencing_token": ${json.fencing_token}, "outcome": "succeeded", "result": ${stored}}`);
  assert.equal(done.status, 200);
  const again = await agent().toolCall({ requestId: rid, toolCallId: cid }, mustNotRun);
  assert.equal(again.resultJson, stored);
  assert.deepEqual(again.result, { b: [1, 2.5, "é"], a: 100, id: 9007199254740992 });
});

test("failed: the error is recorded, rethrown, then replayed as failed", async () => {
  const [rid, cid] = key();
  const tool = countingTool(null, new RangeError("mailbox full"));
  const e = await rejection(agent().toolCall({ requestId: rid, toolCallId: cid, tool: "send_email" }, tool),
                            RangeError);
  assert.equal(e.message, "mailbox full");
  assert.equal(tool.calls.length, 1);
  const call = await agent().getToolCall(rid, cid);
  assert.equal(call.state, "failed");
  assert.deepEqual(call.result, { error: "RangeError", message: "mailbox full" });
  const r = await agent().toolCall({ requestId: rid, toolCallId: cid, tool: "send_email" }, mustNotRun);
  assert.deepEqual([r.executed, r.replayed, r.outcome], [false, true, "failed"]);
  assert.deepEqual(r.result, { error: "RangeError", message: "mailbox full" });
});

test("failed: a result JSON cannot carry is a recorded failure", async () => {
  const [rid, cid] = key();
  await rejection(agent().toolCall({ requestId: rid, toolCallId: cid }, () => ({ ratio: NaN })), TypeError);
  const call = await agent().getToolCall(rid, cid);
  assert.equal(call.state, "failed");
  assert.equal(call.result.error, "TypeError");
});

test("retryable: the key is released and the next holder runs with a higher token", async () => {
  const [rid, cid] = key();
  await rejection(agent().toolCall({ requestId: rid, toolCallId: cid }, countingTool(null, new Retryable("smtp timeout"))),
                  Retryable);
  assert.equal((await agent().getToolCall(rid, cid)).state, "released");
  const tool = countingTool({ sent: true });
  const r = await agent().toolCall({ requestId: rid, toolCallId: cid }, tool);
  assert.equal(tool.calls[0][1], 2);
  assert.ok(r.executed && r.outcome === "succeeded");
  assert.deepEqual(await eventTypes(rid), ["claimed", "released", "claimed", "completed"]);
});

test("not executed: the key is released with the reason, and the error rethrown", async () => {
  const [rid, cid] = key();
  const e = await rejection(agent().toolCall({ requestId: rid, toolCallId: cid },
                                             countingTool(null, new NotExecuted("invalid address"))), NotExecuted);
  assert.equal(e.message, "invalid address");
  assert.equal((await agent().getToolCall(rid, cid)).state, "released");
  const events = (await (await reviewer()).getRequest(rid)).events;
  assert.deepEqual(events.map((ev) => ev.type), ["claimed", "released"]);
  assert.equal(events[1].detail.reason, "invalid address");
  const r = await agent().toolCall({ requestId: rid, toolCallId: cid }, countingTool("done"));
  assert.ok(r.executed && r.result === "done" && r.fencingToken === 2);
});

test("in progress: without waiting it throws at once with the retry hint", async () => {
  const [rid, cid] = key();
  assert.equal((await rawClaim(rid, cid, { owner: "other@pod-2", lease_ms: 10000 })).status, 201);
  const started = performance.now();
  const e = await rejection(agent().toolCall({ requestId: rid, toolCallId: cid }, mustNotRun), InProgress);
  assert.ok(performance.now() - started < 1000);
  assert.equal(e.status, 409);
  assert.equal(e.code, "in_progress");
  assert.ok(e.retryAfterMs > 0 && e.retryAfterMs <= 10000, String(e.retryAfterMs));
  assert.equal(e.retryAfterMs, e.body.error.retry_after_ms);
  assert.equal(e.details.holder.owner, "other@pod-2");
  assert.ok(e instanceof LedgerError);
});

test("in progress: waitMs waits the holder out and replays its result", async () => {
  const [rid, cid] = key();
  const held = await rawClaim(rid, cid, { tool: "t", args: { a: 1 }, lease_ms: 10000 });
  assert.equal(held.status, 201);
  const holder = sleep(1000).then(() => rawPost(toolPath(rid, cid, "complete"), {
    fencing_token: held.json.fencing_token, outcome: "succeeded", result: { by: "other" } }));
  const started = performance.now();
  const r = await agent().toolCall({ requestId: rid, toolCallId: cid, tool: "t", args: { a: 1 }, waitMs: 3000 },
                                   mustNotRun);
  const elapsed = performance.now() - started;
  assert.equal((await holder).status, 200);
  assert.ok(elapsed > 900 && elapsed < 3000, String(elapsed));
  assert.ok(r.replayed);
  assert.deepEqual(r.result, { by: "other" });
});

test("an AbortSignal stops the wait for another holder, and nothing runs", async () => {
  const [rid, cid] = key();
  assert.equal((await rawClaim(rid, cid, { lease_ms: 30000 })).status, 201);
  const started = performance.now();
  const e = await rejection(agent().toolCall({ requestId: rid, toolCallId: cid, waitMs: 20000,
                                               signal: AbortSignal.timeout(300) }, mustNotRun), DOMException);
  assert.equal(e.name, "TimeoutError");
  assert.ok(performance.now() - started < 2000);
  const aborted = new AbortController();
  aborted.abort(new Error("the user went away"));
  const before = await rejection(agent().toolCall({ requestId: rid, toolCallId: cid, signal: aborted.signal },
                                                  mustNotRun), Error);
  assert.equal(before.message, "the user went away");
  assert.equal((await agent().getToolCall(rid, cid)).fencing_token, 1);
});

test("outcome unknown: the holder's lease ran out with no completion", async () => {
  const [rid, cid] = key();
  assert.equal((await rawClaim(rid, cid, { lease_ms: 100 })).status, 201);
  await sleep(300);
  const e = await rejection(agent().toolCall({ requestId: rid, toolCallId: cid, waitMs: 2000 }, mustNotRun),
                            OutcomeUnknown);
  assert.deepEqual([e.status, e.code], [409, "outcome_unknown"]);
});

test("args mismatch: other arguments on the same key", async () => {
  const [rid, cid] = key();
  await agent().toolCall({ requestId: rid, toolCallId: cid, tool: "pay", args: { amount: 100 } }, countingTool(1));
  const e = await rejection(agent().toolCall({ requestId: rid, toolCallId: cid, tool: "pay", args: { amount: 200 } },
                                             mustNotRun), ArgsMismatch);
  assert.equal(e.status, 422);
  assert.equal(e.details.field, "args");
  assert.equal(e.details.expected_args_sha256, argsSha256({ amount: 100 }));
  assert.equal(e.details.got_args_sha256, argsSha256({ amount: 200 }));
});

test("attempt fenced: a claim under a cancelled attempt, which is marked revoked", async () => {
  const led = await router();
  const rid = newId("r");
  const a1 = await led.beginAttempt({ requestId: rid, attemptId: newId("a") });
  // Cancelled behind this object's back, as another router would.
  await (await led.beginAttempt({ requestId: rid, attemptId: a1.attemptId })).cancel("zombie");
  assert.equal(a1.revoked, false);
  const e = await rejection(led.toolCall({ requestId: rid, toolCallId: "call_00", attempt: a1 }, mustNotRun),
                            AttemptFenced);
  assert.equal(e.status, 409);
  assert.equal(a1.revoked, true);
  await rejection(led.toolCall({ requestId: rid, toolCallId: "call_00", attemptId: a1.attemptId }, mustNotRun),
                  AttemptFenced);
});

test("result expired: a settled call that retention removed", async () => {
  const [rid, cid] = key();
  await control("tombstone", { rid, cid });
  const e = await rejection(agent().toolCall({ requestId: rid, toolCallId: cid }, mustNotRun), ResultExpired);
  assert.equal(e.status, 410);
  assert.equal(e.details.outcome, "succeeded");
});

test("attempt required: a request with attempts refuses a claim without one, as a plain LedgerError", async () => {
  const led = await router();
  const rid = newId("r");
  await led.beginAttempt({ requestId: rid, attemptId: newId("a") });
  const e = await rejection(led.toolCall({ requestId: rid, toolCallId: "call_00" }, mustNotRun), LedgerError);
  assert.equal(e.constructor, LedgerError);
  assert.deepEqual([e.status, e.code], [409, "attempt_required"]);
});

async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

test("ledger unavailable: nobody answers, the budget runs out, and the tool never runs", async () => {
  const led = new Ledger({ url: `http://127.0.0.1:${await freePort()}`, token: AGENT_TOKEN, retryMs: 500 });
  const started = performance.now();
  const e = await rejection(led.toolCall({ requestId: newId("r"), toolCallId: "c" }, mustNotRun), LedgerUnavailable);
  const elapsed = performance.now() - started;
  assert.ok(elapsed > 400 && elapsed < 3000, String(elapsed));
  assert.deepEqual([e.status, e.code], [null, "unreachable"]);
  assert.ok(e instanceof LedgerError);
});

test("renewal keeps a long tool's claim: lease 300 ms, the tool takes 1 s", async () => {
  const [rid, cid] = key();
  let seen;
  const r = await agent().toolCall({ requestId: rid, toolCallId: cid, lease: 300 }, async () => {
    await sleep(600); // twice the lease
    seen = await rawClaim(rid, cid);
    await sleep(400);
    return { slow: true };
  });
  assert.equal(seen.status, 409);
  assert.equal(seen.json.error.code, "in_progress");
  assert.ok(r.outcome === "succeeded" && r.recorded);
  assert.equal((await agent().getToolCall(rid, cid)).state, "succeeded");
  const types = await eventTypes(rid);
  assert.ok(!types.includes("late_completion"), types.join());
  assert.equal(types.at(-1), "completed");
});

test("lost answers: the claim and the completion are sent again and ledgerd knows them", async () => {
  const thief = await control("thief", { actions: "claim,complete" });
  const [rid, cid] = key();
  const tool = countingTool({ sent: 1 });
  const r = await new Ledger({ url: thief.url, token: AGENT_TOKEN }).toolCall({ requestId: rid, toolCallId: cid }, tool);
  // ledgerd acted on both calls whose answers were lost...
  assert.deepEqual((await control("stolen", { id: thief.id })).stolen,
                   [["claim", "HTTP/1.1 201 Created"], ["complete", "HTTP/1.1 200 OK"]]);
  // ...and the retried claim found its own holder again: one run, one token.
  assert.deepEqual(tool.calls, [[`${rid}:${cid}`, 1]]);
  assert.ok(r.outcome === "succeeded" && r.recorded);
  assert.deepEqual(await eventTypes(rid), ["claimed", "completed"]);
});

test("ledgerd stopped and started mid-call: the completion is retried until it lands", async () => {
  const [rid, cid] = key();
  let restarted;
  try {
    const r = await agent().toolCall({ requestId: rid, toolCallId: cid }, async () => {
      await control("stop");
      restarted = sleep(1000).then(() => control("start"));
      return { sent: true };
    });
    assert.deepEqual([r.executed, r.outcome, r.recorded], [true, "succeeded", true]);
  } finally {
    await restarted;
    await control("start"); // a no-op when it runs
  }
  const call = await agent().getToolCall(rid, cid);
  assert.equal(call.state, "succeeded");
  assert.deepEqual(call.result, { sent: true });
});

test("unrecorded: ledgerd stays away past completeRetryMs, the result is still returned", async () => {
  const [rid, cid] = key();
  let r;
  try {
    const started = performance.now();
    r = await agent({ completeRetryMs: 1000 }).toolCall({ requestId: rid, toolCallId: cid }, async () => {
      await control("stop");
      return { sent: true };
    });
    assert.ok(performance.now() - started < 5000);
  } finally {
    await control("start");
  }
  assert.deepEqual([r.executed, r.replayed, r.outcome, r.recorded], [true, false, "unrecorded", false]);
  assert.deepEqual(r.result, { sent: true });
  assert.ok(r.completionError instanceof LedgerUnavailable);
  assert.equal((await agent().getToolCall(rid, cid)).state, "in_progress");
});

test("stable tool call ids", () => {
  assert.deepEqual([0, 7, 42, 100].map(stableToolCallId), ["call_00", "call_07", "call_42", "call_100"]);
  for (const bad of [-1, 1.5, NaN, "3"]) assert.throws(() => stableToolCallId(bad), RangeError);
  const counter = new ToolCallCounter();
  assert.deepEqual([counter.next(), counter.next(), counter.next()], ["call_00", "call_01", "call_02"]);
});
