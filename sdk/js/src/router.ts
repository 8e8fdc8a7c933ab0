/**
 * The router's side: attempts, their leases, and failover decisions.
 *
 * An attempt is one try of a logical request on one replica. While it is the
 * live attempt within its lease it may claim tool calls, deliver to the
 * client and finish; a router keeps its lease alive with a heartbeat and
 * asks ledgerd, whenever a replica fails, what it may do next. The contract
 * is the Python client's (sdk/python/ledger_client/router.py).
 */

import { AttemptFenced, type JsonObject, isObject, LedgerError, RequestClosed } from "./errors.js";
import { Heartbeat } from "./heartbeat.js";
import { jsonBody, quoteId, type Transport } from "./http.js";

// ledgerd's least lease_ms by default: what a renewal asks at least.
const MIN_LEASE_MS = 100;

export interface BeginAttemptOptions {
  requestId: string;
  attemptId: string;
  replica?: string;
  modelRevision?: string;
  leaseMs?: number;
  maxAttempts?: number;
}

/** The attempt a failover creates when its answer is retry_prefill. */
export interface NextAttemptOptions {
  attemptId: string;
  replica?: string;
  modelRevision?: string;
  leaseMs?: number;
}

export type FailoverSignal = "replica_exited" | "pod_lost" | "upstream_closed" | "network_error"
  | "heartbeat_timeout" | "overloaded" | "client_disconnected";

export type FailoverAction = "retry_prefill" | "wait_for_fence" | "keep_waiting" | "terminate_stream"
  | "reject" | "cancel_upstream";

export interface FailoverOptions {
  /** What a rerun would cost to prefill, checked against the policy. */
  retryPrefillTokens?: number;
  /** The attempt to create if the answer is retry_prefill; it comes back as `next`. */
  next?: NextAttemptOptions;
}

export interface SettledToolCall {
  tool_call_id: string;
  tool: string | null;
  args_sha256: string | null;
  outcome: "succeeded" | "failed";
}

/** What the router may do after a failure of the live attempt. */
export interface FailoverDecision {
  action: FailoverAction;
  /** For wait_for_fence: ask again after this long (or after the source's cancel-ack). */
  retryAfterMs: number | null;
  /** The error to send the client, when the request ended. */
  clientError: JsonObject | null;
  /** clientError as the final SSE event of a stream: `data: {...}` and a blank line, no [DONE]. */
  sseEvent: string | null;
  /** For retry_prefill with `next`: the new live attempt, created in the same transaction. */
  next?: Attempt;
  /** For retry_prefill: the calls already settled, which the rerun gets replayed. */
  settledToolCalls: SettledToolCall[];
  /** ledgerd's whole answer. */
  body: JsonObject;
}

/**
 * One attempt of a logical request, as `POST attempts` (or a failover) made
 * it. Every call that needs the attempt's rights throws AttemptFenced once it
 * has none, and sets `revoked`: the replica must stop, publish nothing more,
 * and start no side effect.
 */
export class Attempt {
  readonly requestId: string;
  readonly attemptId: string;
  /** The attempt's fencing token; it grows with every attempt of the request. */
  readonly epoch: number;
  /** 1 for the first attempt of the request, and so on. */
  readonly attemptNumber: number;
  /** The lease renewals ask: the one asked at creation, else the one granted. */
  readonly leaseMs: number;
  /** What was left of the lease when ledgerd answered the creation. */
  readonly leaseMsLeft: number;
  /** The request as ledgerd described it at creation. */
  readonly request: JsonObject;
  /** ledgerd said this attempt has no rights any more (fenced, cancelled, failed over). */
  revoked = false;
  private readonly path: string;
  private heartbeat: Heartbeat | null = null;

  constructor(private readonly transport: Transport, requestId: string, created: JsonObject,
              private readonly retryMs: number, askedLeaseMs?: number) {
    this.requestId = requestId;
    this.attemptId = String(created.attempt_id);
    this.epoch = Number(created.epoch);
    this.attemptNumber = Number(created.attempt_number);
    this.leaseMsLeft = Number(created.lease_ms);
    // A retried creation answers with what is left, possibly 0: never renew with that.
    this.leaseMs = askedLeaseMs ?? Math.max(this.leaseMsLeft, MIN_LEASE_MS);
    this.request = isObject(created.request) ? created.request : {};
    this.path = `/v1/requests/${quoteId(requestId)}/attempts/${quoteId(this.attemptId)}/`;
  }

  private async post(action: string, fields: Record<string, unknown>, retryMs = this.retryMs): Promise<JsonObject> {
    try {
      const answer = await this.transport.call("POST", this.path + action, jsonBody(fields), { retryMs });
      return isObject(answer.body) ? answer.body : {};
    } catch (e) {
      if (e instanceof AttemptFenced) this.revoked = true;
      throw e;
    }
  }

  /** Extends the lease to ledgerd's now plus `leaseMs` (default: the attempt's lease). */
  renew(leaseMs = this.leaseMs): Promise<JsonObject> {
    return this.post("renew", { lease_ms: leaseMs });
  }

  /**
   * Renews the lease every `intervalMs` (default: a third of it) until
   * stopHeartbeat, or until ledgerd refuses a renewal, having set `revoked`
   * if the attempt was fenced: check it before every publication.
   */
  startHeartbeat(intervalMs = this.leaseMs / 3): void {
    if (this.heartbeat?.running) throw new Error(`the heartbeat of ${this.attemptId} is running already`);
    this.heartbeat = new Heartbeat(intervalMs, () => this.post("renew", { lease_ms: this.leaseMs }, 0), (e) => {
      if (!(e instanceof AttemptFenced)) console.warn(`ledgerd: attempt ${this.attemptId} lost its lease: ${String(e)}`);
    });
    this.heartbeat.start();
  }

  /** Stops the heartbeat, if one runs; resolves once no renewal is in flight. */
  async stopHeartbeat(): Promise<void> {
    await this.heartbeat?.stop();
    this.heartbeat = null;
  }

  /**
   * Reports output about to reach the client: call it BEFORE writing the
   * first byte. The first call records, durably, that a delta was sent: from
   * then on the request is never rerun. AttemptFenced means: do not publish.
   */
  deliver(deliveredOutputTokens: number): Promise<JsonObject> {
    return this.post("deliver", { delivered_output_tokens: deliveredOutputTokens });
  }

  /**
   * Revokes the attempt's rights at once (`cancel_requested`). It still
   * blocks the next attempt until cancelAck or its lease runs out, since
   * its replica may not know yet. Stops the heartbeat.
   */
  async cancel(reason?: string): Promise<JsonObject> {
    await this.stopHeartbeat();
    const answer = await this.post("cancel", { reason });
    this.revoked = true;
    return answer;
  }

  /** Confirms the replica stopped: the attempt is `cancelled` and blocks nothing. */
  async cancelAck(): Promise<JsonObject> {
    await this.stopHeartbeat();
    const answer = await this.post("cancel-ack", {});
    this.revoked = true;
    return answer;
  }

  /**
   * Ends the attempt: `completed` closes the request, `failed` leaves it
   * open for a failover decision. Stops the heartbeat.
   */
  async finish(outcome: "completed" | "failed", deliveredOutputTokens?: number, reason?: string): Promise<JsonObject> {
    await this.stopHeartbeat();
    return this.post("finish", { outcome, delivered_output_tokens: deliveredOutputTokens, reason });
  }
}

export async function beginAttempt(transport: Transport, options: BeginAttemptOptions, retryMs: number): Promise<Attempt> {
  const body = jsonBody({
    attempt_id: options.attemptId, replica: options.replica, model_revision: options.modelRevision,
    lease_ms: options.leaseMs, max_attempts: options.maxAttempts,
  });
  const answer = await transport.call("POST", `/v1/requests/${quoteId(options.requestId)}/attempts`, body, { retryMs });
  return new Attempt(transport, options.requestId, answer.body as JsonObject, retryMs, options.leaseMs);
}

export async function failover(transport: Transport, attempt: Attempt, signal: FailoverSignal,
                               options: FailoverOptions, retryMs: number): Promise<FailoverDecision> {
  const { next } = options;
  const body = jsonBody({
    attempt_id: attempt.attemptId, signal, retry_prefill_tokens: options.retryPrefillTokens,
    next_attempt: next && JSON.parse(jsonBody({
      attempt_id: next.attemptId, replica: next.replica, model_revision: next.modelRevision, lease_ms: next.leaseMs,
    })),
  });
  let answer;
  try {
    answer = await transport.call("POST", `/v1/requests/${quoteId(attempt.requestId)}/failover`, body, { retryMs });
  } catch (e) {
    // Not the newest attempt, or a request that is over: no rights either way.
    if (e instanceof AttemptFenced || e instanceof RequestClosed) attempt.revoked = true;
    throw e;
  }
  const decision = answer.body;
  if (!isObject(decision) || typeof decision.action !== "string") {
    throw new LedgerError(answer.status, { error: { code: "unexpected_answer", message: answer.text.slice(0, 200) } });
  }
  // Every action but keep_waiting revoked the source, in the same transaction.
  if (decision.action !== "keep_waiting") attempt.revoked = true;
  const clientError = isObject(decision.client_error) ? decision.client_error : null;
  const created = isObject(decision.attempt) ? decision.attempt : null;
  return {
    action: decision.action as FailoverAction,
    retryAfterMs: typeof decision.retry_after_ms === "number" ? decision.retry_after_ms : null,
    clientError,
    sseEvent: clientError === null ? null : `data: ${JSON.stringify(clientError)}\n\n`,
    ...(created === null ? {} : { next: new Attempt(transport, attempt.requestId, created, retryMs, next?.leaseMs) }),
    settledToolCalls: Array.isArray(decision.settled_tool_calls) ? decision.settled_tool_calls as SettledToolCall[] : [],
    body: decision,
  };
}
