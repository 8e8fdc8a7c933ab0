// The router's side of the TypeScript client (sdk/js) against a live
// ledgerd: begin, heartbeat, deliver, cancel, cancel-ack, finish, and the
// failover decisions with their SSE event, the old handle revoked. Each test
// works in a tenant of its own: the pool-wide retry budget is per tenant.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ArgsMismatch, argsSha256, AttemptFenced, RequestClosed } from "../../../sdk/js/dist/index.js";
import { countingTool, mustNotRun, newId, rejection, router, sleep } from "./helpers.mjs";

async function attemptState(led, rid, aid) {
  return (await led.getRequest(rid)).attempts.find((a) => a.attempt_id === aid).state;
}

test("begin: a repeat is the same attempt, and a retried one renews with the lease asked", async () => {
  const led = await router();
  const rid = newId("r");
  const aid = newId("a");
  const a1 = await led.beginAttempt({ requestId: rid, attemptId: aid, replica: "gpu-1", modelRevision: "m1", leaseMs: 1000 });
  // A lease long enough that a loaded machine's answer never arrives after it.
  assert.deepEqual([a1.epoch, a1.attemptNumber, a1.revoked, a1.leaseMs], [1, 1, false, 1000]);
  assert.ok(a1.leaseMsLeft > 0 && a1.leaseMsLeft <= 1000);
  assert.equal(a1.request.request_id, rid);
  assert.equal(a1.request.status, "open");
  await sleep(1200);
  const again = await led.beginAttempt({ requestId: rid, attemptId: aid, replica: "gpu-1", modelRevision: "m1", leaseMs: 1000 });
  assert.deepEqual([again.epoch, again.leaseMsLeft, again.leaseMs], [1, 0, 1000]);
});

test("failover from a dead replica reruns, then a delta makes the stream end with its SSE error", async () => {
  const led = await router();
  const rid = newId("r");
  const a1 = await led.beginAttempt({ requestId: rid, attemptId: newId("a"), replica: "gpu-1", leaseMs: 5000 });
  const first = await led.toolCall({ requestId: rid, toolCallId: "call_00", tool: "weather", args: { city: "Oslo" },
                                     attempt: a1 }, countingTool({ temp: 21 }));
  assert.ok(first.executed);
  a1.startHeartbeat(100);
  await sleep(300);
  await a1.stopHeartbeat();
  assert.equal(a1.revoked, false);

  const a2Id = newId("a");
  const d = await led.failover(a1, "replica_exited", { retryPrefillTokens: 100,
                                                       next: { attemptId: a2Id, replica: "gpu-2", leaseMs: 6000 } });
  assert.equal(d.action, "retry_prefill");
  assert.deepEqual([d.clientError, d.sseEvent, d.retryAfterMs], [null, null, null]);
  assert.deepEqual(d.settledToolCalls, [{ tool_call_id: "call_00", tool: "weather",
                                          args_sha256: argsSha256({ city: "Oslo" }), outcome: "succeeded" }]);
  assert.equal(d.body.source_state, "dead");
  assert.equal(a1.revoked, true); // the old handle, at once
  const a2 = d.next;
  assert.deepEqual([a2.attemptId, a2.epoch, a2.attemptNumber, a2.leaseMs], [a2Id, 2, 2, 6000]);

  // The old replica is a zombie: it may not publish.
  await rejection(a1.deliver(1), AttemptFenced);
  // The rerun gets the settled call replayed, then publishes.
  const again = await led.toolCall({ requestId: rid, toolCallId: "call_00", tool: "weather", args: { city: "Oslo" },
                                     attempt: a2 }, mustNotRun);
  assert.ok(again.replayed);
  assert.deepEqual(again.result, { temp: 21 });
  const delivered = await a2.deliver(1);
  assert.deepEqual([delivered.first_delta_sent, delivered.phase], [true, "decode"]);
  assert.equal((await a2.deliver(9)).delivered_output_tokens, 9);

  // After a delta the stream can only end with an explicit error.
  const end = await led.failover(a2, "upstream_closed", { next: { attemptId: newId("a") } });
  assert.equal(end.action, "terminate_stream");
  assert.equal(end.next, undefined);
  assert.equal(a2.revoked, true);
  const error = end.clientError.error;
  assert.deepEqual([error.code, error.delivered_output_tokens, error.retryable], ["upstream_decode_interrupted", 9, false]);
  assert.ok(end.sseEvent.startsWith('data: {"error":{') && end.sseEvent.endsWith("}\n\n"), end.sseEvent);
  assert.deepEqual(JSON.parse(end.sseEvent.slice("data: ".length)), end.clientError);

  const closed = await rejection(led.failover(a2, "network_error"), RequestClosed);
  assert.equal(closed.code, "request_closed");
  assert.deepEqual(closed.clientError, end.clientError);
  const fenced = await rejection(led.failover(a1, "network_error"), AttemptFenced);
  assert.equal(fenced.details.current_attempt_id, a2Id);
  const never = await rejection(led.beginAttempt({ requestId: rid, attemptId: newId("a") }), RequestClosed);
  assert.equal(never.code, "first_delta_sent");
  assert.deepEqual(never.clientError, end.clientError);
  await rejection(a2.finish("completed"), AttemptFenced);
  assert.equal((await led.getRequest(rid)).request.status, "terminated");
});

test("failover: a slow replica keeps waiting and its handle keeps its rights", async () => {
  const led = await router();
  const rid = newId("r");
  const a = await led.beginAttempt({ requestId: rid, attemptId: newId("a") });
  const d = await led.failover(a, "overloaded", { next: { attemptId: newId("a") } });
  assert.equal(d.action, "keep_waiting");
  assert.equal(a.revoked, false);
  await a.deliver(0);
});

test("failover with liveness uncertain waits for the fence, then reruns after the cancel-ack", async () => {
  const led = await router();
  const rid = newId("r");
  const a1 = await led.beginAttempt({ requestId: rid, attemptId: newId("a"), leaseMs: 1900 });
  const a2Id = newId("a");
  let d = await led.failover(a1, "heartbeat_timeout", { next: { attemptId: a2Id } });
  assert.equal(d.action, "wait_for_fence");
  assert.equal(d.next, undefined);
  assert.ok(d.retryAfterMs > 1000 && d.retryAfterMs <= 1900, String(d.retryAfterMs));
  assert.equal(a1.revoked, true);
  assert.equal((await a1.cancelAck()).state, "cancelled");
  d = await led.failover(a1, "heartbeat_timeout", { next: { attemptId: a2Id } });
  assert.equal(d.action, "retry_prefill");
  assert.equal(d.next.attemptId, a2Id);
});

test("failover: the client went away before any delta, the upstream is cancelled", async () => {
  const led = await router();
  const rid = newId("r");
  const a = await led.beginAttempt({ requestId: rid, attemptId: newId("a") });
  const d = await led.failover(a, "client_disconnected");
  assert.equal(d.action, "cancel_upstream");
  assert.equal(a.revoked, true);
  assert.equal((await led.getRequest(rid)).request.status, "abandoned");
});

test("finish completed closes the request", async () => {
  const led = await router();
  const rid = newId("r");
  const a = await led.beginAttempt({ requestId: rid, attemptId: newId("a") });
  await a.deliver(0);
  const done = await a.finish("completed", 120, "stop");
  assert.deepEqual([done.state, done.request.status], ["finished", "completed"]);
  const view = (await led.getRequest(rid)).request;
  assert.deepEqual([view.status, view.delivered_output_tokens], ["completed", 120]);
});

test("finish failed leaves the request to a failover", async () => {
  const led = await router();
  const rid = newId("r");
  const a1 = await led.beginAttempt({ requestId: rid, attemptId: newId("a") });
  assert.equal((await a1.finish("failed", undefined, "oom")).request.status, "open");
  const d = await led.failover(a1, "replica_exited", { next: { attemptId: newId("a") } });
  assert.equal(d.action, "retry_prefill");
  assert.equal(d.body.source_state, "failed");
  const renewed = await d.next.renew(20000);
  assert.ok(renewed.lease_ms > 18000 && renewed.lease_ms <= 20000);
});

test("cancel revokes at once, cancel-ack ends the attempt", async () => {
  const led = await router();
  const rid = newId("r");
  const a = await led.beginAttempt({ requestId: rid, attemptId: newId("a") });
  assert.equal((await a.cancel("client went away")).state, "cancel_requested");
  assert.equal(a.revoked, true);
  await rejection(a.deliver(0), AttemptFenced);
  assert.equal((await a.cancelAck()).state, "cancelled");
  assert.equal(await attemptState(led, rid, a.attemptId), "cancelled");
});

test("the heartbeat keeps the attempt alive past its lease; without it the lease runs out", async () => {
  const led = await router();
  const rid = newId("r");
  const a = await led.beginAttempt({ requestId: rid, attemptId: newId("a"), leaseMs: 800 });
  a.startHeartbeat(150);
  try {
    await sleep(2000);
    assert.equal(await attemptState(led, rid, a.attemptId), "live");
  } finally {
    await a.stopHeartbeat();
  }
  await sleep(1000);
  assert.equal(await attemptState(led, rid, a.attemptId), "expired");
  assert.equal(a.revoked, false);
  await rejection(a.renew(), AttemptFenced);
  assert.equal(a.revoked, true);
});

test("the heartbeat sets revoked when the attempt is cancelled elsewhere", async () => {
  const led = await router();
  const rid = newId("r");
  const a = await led.beginAttempt({ requestId: rid, attemptId: newId("a"), leaseMs: 3000 });
  a.startHeartbeat(100);
  try {
    await (await led.beginAttempt({ requestId: rid, attemptId: a.attemptId, leaseMs: 3000 })).cancel("operator");
    for (let waited = 0; !a.revoked && waited < 3000; waited += 50) await sleep(50);
    assert.equal(a.revoked, true);
  } finally {
    await a.stopHeartbeat();
  }
});

test("a rerun's diverging tool call is refused, its attempt revoked, the request failed", async () => {
  const led = await router();
  const rid = newId("r");
  const a = await led.beginAttempt({ requestId: rid, attemptId: newId("a") });
  await led.toolCall({ requestId: rid, toolCallId: "call_00", tool: "pay", args: { amount: 1 }, attempt: a }, countingTool(1));
  await rejection(led.toolCall({ requestId: rid, toolCallId: "call_00", tool: "pay", args: { amount: 2 }, attempt: a },
                               mustNotRun), ArgsMismatch);
  assert.equal(a.revoked, true);
  const view = await led.getRequest(rid);
  assert.equal(view.request.status, "failed");
  assert.equal(view.request.client_error.error.code, "tool_call_divergence");
});
