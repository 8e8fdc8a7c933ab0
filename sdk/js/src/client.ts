/** The client object: one ledgerd, one token, every call an SDK user makes. */

import type { JsonObject } from "./errors.js";
import { quoteId, Transport } from "./http.js";
import type { TraceContext } from "./tracing.js";
import {
  type Attempt, beginAttempt, type BeginAttemptOptions, failover, type FailoverDecision,
  type FailoverOptions, type FailoverSignal,
} from "./router.js";
import {
  checkMaxResultBytes, MAX_RESULT_BYTES, ToolCall, type ToolCallOptions, type ToolCallResult, type ToolFunction,
} from "./toolcall.js";

export interface LedgerOptions {
  /** ledgerd's base URL, e.g. `http://127.0.0.1:8080`. */
  url: string;
  /** A bearer token; its role decides the calls allowed (`agent`: tool calls; `router`: attempts too). */
  token: string;
  /** How long one HTTP exchange may take before its answer counts as lost (default 10000). */
  timeoutMs?: number;
  /** How long a call is retried while ledgerd does not answer or says 503 (default 30000). */
  retryMs?: number;
  /**
   * The same for recording a tool's outcome (default 300000): longer,
   * because the side effect already happened and losing its record would
   * leave the key outcome_unknown.
   */
  completeRetryMs?: number;
  /**
   * The longest result, in bytes of its JSON text (UTF-8), that a completion
   * sends whole (default 1048576, ledgerd's default --max-result-bytes). A
   * longer one is recorded as the text's length and SHA-256 only, and so is
   * one ledgerd refuses as too large a body: the completion is never lost to
   * its size, and a rerun of the key throws ResultNotKeptError.
   */
  maxResultBytes?: number;
  userAgent?: string;
  /**
   * A W3C trace context for every call of this client, for callers without
   * OpenTelemetry: its traceparent is sent as given (a malformed one is not
   * sent). With `@opentelemetry/api` installed, it is instead the parent of
   * the client's spans, in place of the active context. See tracing in the README.
   */
  trace?: TraceContext;
}

/** A client of one ledgerd with one token; share one per process. */
export class Ledger {
  readonly url: string;
  readonly retryMs: number;
  readonly completeRetryMs: number;
  readonly maxResultBytes: number;
  private readonly trace: TraceContext | undefined;
  private readonly transport: Transport;

  constructor(options: LedgerOptions) {
    this.url = options.url;
    this.retryMs = options.retryMs ?? 30_000;
    this.completeRetryMs = options.completeRetryMs ?? 300_000;
    this.maxResultBytes = checkMaxResultBytes(options.maxResultBytes ?? MAX_RESULT_BYTES);
    this.trace = options.trace;
    this.transport = new Transport(options.url, options.token, {
      timeoutMs: options.timeoutMs ?? 10_000, userAgent: options.userAgent, trace: options.trace,
    });
  }

  /**
   * Runs `fn(fencingToken, idempotencyKey)` at most once for the key
   * `{requestId}:{toolCallId}`, and returns what became of the call.
   *
   * - Already finished: the recorded result, `fn` not called (`replayed`).
   * - Claimed: `fn` runs while its claim is renewed every third of the
   *   lease, then: a value is recorded as `succeeded` (one too large to
   *   keep, over maxResultBytes or refused as too large a body, as its
   *   length and SHA-256: `resultKept` false; if ledgerd cannot
   *   record it within completeRetryMs, `outcome` is `unrecorded`); a thrown
   *   Retryable is recorded as a retryable failure (the key is claimable
   *   again) and rethrown; a thrown NotExecuted releases the key and is
   *   rethrown; any other error (or a value JSON cannot carry) is recorded as
   *   the final outcome `failed`, `{"error": name, "message"}`, replayed to
   *   every later invocation, and rethrown.
   * - Held by another: claims again (a jittered back-off of at most 1 s,
   *   never past the holder's lease) for up to waitMs; `signal` stops that.
   *
   * @throws InProgress, OutcomeUnknown, ArgsMismatch, AttemptFenced,
   *   ResultExpired, ResultNotKeptError (finished, its result not kept: fn
   *   not called, never again), LedgerUnavailable (fn not called),
   *   LedgerError for any other refusal (`attempt_required`...).
   *
   * With `@opentelemetry/api` installed, the call is an `execute_tool {tool}`
   * span (GenAI semantic conventions), child of `options.trace`, else of the
   * client's `trace`, else of the active context; the calls to ledgerd it
   * makes carry that span as their parent, and `fn` runs in its context.
   */
  toolCall<T>(options: ToolCallOptions, fn: ToolFunction<T>): Promise<ToolCallResult<T>> {
    const defaults = {
      retryMs: this.retryMs, completeRetryMs: this.completeRetryMs, maxResultBytes: this.maxResultBytes,
      trace: this.trace,
    };
    return new ToolCall<T>(this.transport, options, defaults).run(fn);
  }

  /**
   * Creates an attempt of the request (and the request, if new); the same
   * call again returns the same attempt. Refusals: RequestClosed
   * (`request_closed`, `first_delta_sent`: no new attempt, ever), and
   * LedgerError with `source_not_fenced`, `tool_call_in_progress` (both
   * with retryAfterMs), `tool_outcome_unknown`, `retry_budget_exhausted`,
   * `revision_mismatch`, `request_mismatch`.
   */
  beginAttempt(options: BeginAttemptOptions): Promise<Attempt> {
    return beginAttempt(this.transport, options, this.retryMs);
  }

  /**
   * Reports a failure of the live attempt; resolves with what the router
   * may do. Any decision but keep_waiting revokes `attempt`.
   *
   * @throws AttemptFenced (not the newest attempt: details.current_attempt_id),
   *   RequestClosed (the request is over: clientError).
   */
  failover(attempt: Attempt, signal: FailoverSignal, options: FailoverOptions = {}): Promise<FailoverDecision> {
    return failover(this.transport, attempt, signal, options, this.retryMs);
  }

  /** The request with its attempts, tool calls and history (`GET /v1/requests/{rid}`). */
  getRequest(requestId: string): Promise<JsonObject> {
    return this.get(`/v1/requests/${quoteId(requestId)}`);
  }

  /** One tool call: state, holder, fingerprint, outcome and result. */
  getToolCall(requestId: string, toolCallId: string): Promise<JsonObject> {
    return this.get(`/v1/requests/${quoteId(requestId)}/tool-calls/${quoteId(toolCallId)}`);
  }

  private async get(path: string): Promise<JsonObject> {
    const answer = await this.transport.call("GET", path, null, { retryMs: this.retryMs });
    return answer.body as JsonObject;
  }
}
