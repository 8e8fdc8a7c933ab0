/**
 * Running a tool's side effect at most once per idempotency key.
 *
 * One invocation claims `{requestId}:{toolCallId}` right before the side
 * effect, runs the tool while a timer renews the claim, and records the
 * outcome; a later invocation of the same key (a rerun on another replica, a
 * retried request) gets the recorded result back instead of running the
 * tool again. A result too large to keep (over maxResultBytes, or refused
 * by ledgerd as too large a body) is recorded as the length and SHA-256 of
 * its JSON text: the completion is never lost to its size, and a rerun gets
 * ResultNotKeptError instead of the result. The contract is the Python
 * client's ToolCall (sdk/python/ledger_client/toolcall.py).
 */

import { createHash, randomBytes } from "node:crypto";

import {
  ArgsMismatch, AttemptFenced, InProgress, isObject, LedgerError, NotExecuted, Retryable,
} from "./errors.js";
import { Heartbeat } from "./heartbeat.js";
import { type Answer, Backoff, jsonBody, quoteId, sleep, type Transport } from "./http.js";
import { argsSha256, canonicalize } from "./jcs.js";
import type { Attempt } from "./router.js";
import { type TraceContext, ToolSpan } from "./tracing.js";

/** A tool's side effect: gets the claim's fencing token and the idempotency key. */
export type ToolFunction<T> = (fencingToken: number, idempotencyKey: string) => T | Promise<T>;

export interface ToolCallOptions {
  requestId: string;
  toolCallId: string;
  /** The tool's name, recorded; another name on a later claim is ArgsMismatch. */
  tool?: string;
  /** The call's arguments (any JSON value; bigint for exact integers). Their fingerprint is sent. */
  args?: unknown;
  /** The router attempt the call is made under (required once the request has attempts). */
  attemptId?: string;
  /** The same as an object: it is marked `revoked` when ledgerd fences it or the rerun diverges. */
  attempt?: Attempt;
  /** The tool itself honours the idempotency key: it may run again after an unknown outcome. */
  dedupes?: boolean;
  /** How long the claim holds between renewals, in ms (ledgerd's default: 30000). */
  lease?: number;
  /** Who executes, for incident review (`billing-agent@pod-7`). */
  owner?: string;
  /** Also send the arguments themselves (their canonical text), kept for review. */
  storeArgs?: boolean;
  /** How long to wait while another holder has the key, in ms (default 0). */
  waitMs?: number;
  /** Stops waiting (for another holder, for ledgerd); never a running tool or its record. */
  signal?: AbortSignal;
  /**
   * This call's longest result sent whole, in bytes of its JSON text (UTF-8);
   * a longer one is recorded as its length and SHA-256 only (default: the
   * client's maxResultBytes).
   */
  maxResultBytes?: number;
  /**
   * The W3C trace context this call descends from (default: the client's
   * `trace`, else OpenTelemetry's active context); a malformed one is not sent.
   */
  trace?: TraceContext;
}

export interface ToolCallResult<T> {
  /** This invocation ran the tool function. */
  executed: boolean;
  /** The call had already finished: its recorded result came back, the tool did not run. */
  replayed: boolean;
  /**
   * `succeeded`; `failed` (on a replay: the run that executed threw); or
   * `unrecorded`: the tool ran and returned but ledgerd could not record it
   * within completeRetryMs (see completionError).
   */
  outcome: "succeeded" | "failed" | "unrecorded";
  /** The result as a JSON value (JSON.parse of resultJson), executed or replayed alike. */
  result: T | unknown;
  /** The result's JSON text, byte for byte what ledgerd stores and replays. */
  resultJson: string;
  idempotencyKey: string;
  /** The token the tool received; null on a replay. */
  fencingToken: number | null;
  /** When ledgerd recorded the outcome (RFC 3339); null when unrecorded. */
  completedAt: string | null;
  /** ledgerd holds this outcome (false only when unrecorded). */
  recorded: boolean;
  /** Why the outcome is unrecorded, else null. */
  completionError: LedgerError | null;
  /**
   * False when ledgerd recorded the result as the length and SHA-256 of
   * resultJson only (it was too large to keep): a rerun of the key throws
   * ResultNotKeptError. True otherwise.
   */
  resultKept: boolean;
}

/** What the client gives every call: its retry budgets and its bound of a result sent whole. */
export interface ToolCallDefaults {
  retryMs: number;
  completeRetryMs: number;
  maxResultBytes: number;
  /** The client's explicit trace context, if any. */
  trace?: TraceContext;
}

// Polling a key another holder has: its completion may come at any moment,
// so the wait between two claims never grows past this.
const IN_PROGRESS_POLL_CAP_MS = 1000;
const REASON_MAX_BYTES = 256;

/** The default bound of a result sent whole: ledgerd's default --max-result-bytes. */
export const MAX_RESULT_BYTES = 1 << 20;

/** `value` as a bound of the result sent whole; a RangeError unless an integer >= 0. */
export function checkMaxResultBytes(value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`maxResultBytes is an integer >= 0, not ${String(value)}`);
  }
  return value;
}

/** What a completion sends instead of `resultJson`: the length and SHA-256 of its UTF-8 bytes. */
function notKept(resultJson: string): { bytes: number; sha256: string } {
  const data = Buffer.from(resultJson, "utf8");
  return { bytes: data.length, sha256: createHash("sha256").update(data).digest("hex") };
}

/**
 * The id of the k-th tool call (from 0) of a logical request: `call_00`,
 * `call_01`... The ordinal is what stays the same when the request runs again
 * on another replica; the id a model engine gives a call changes with every
 * decode and must not be used.
 */
export function stableToolCallId(k: number): string {
  if (!Number.isSafeInteger(k) || k < 0) {
    throw new RangeError(`a tool call's ordinal is an integer >= 0, not ${String(k)}`);
  }
  return "call_" + String(k).padStart(2, "0");
}

/** Hands out stableToolCallId ids in order; one per logical request and attempt. */
export class ToolCallCounter {
  constructor(private n = 0) {}

  next(): string {
    return stableToolCallId(this.n++);
  }
}

/** The tool's value as JSON text; what JSON cannot carry is an error, as in Python. */
function dumpJson(value: unknown): string {
  const text = JSON.stringify(value === undefined ? null : value, (_key, v: unknown) => {
    if (typeof v === "number" && !Number.isFinite(v)) {
      throw new TypeError(`a tool's result holds ${v}, which JSON cannot carry`);
    }
    return v;
  }) as string | undefined;
  if (text === undefined) throw new TypeError(`a tool's result of type ${typeof value} is not JSON`);
  return text;
}

/** The error name a failed call's recorded result holds (`{"error", "message"}`), else "failed". */
function recordedErrorName(result: unknown): string {
  const name = isObject(result) ? result.error : undefined;
  return typeof name === "string" && name !== "" ? name : "failed";
}

function failureResult(e: unknown): string {
  return e instanceof Error
    ? JSON.stringify({ error: e.name, message: e.message })
    : JSON.stringify({ error: typeof e, message: String(e) });
}

/** The reason of a release, cut to ledgerd's 256 bytes without splitting a character. */
function releaseReason(e: NotExecuted): string | undefined {
  const bytes = Buffer.from(e.message, "utf8");
  let cut = Math.min(bytes.length, REASON_MAX_BYTES);
  while (cut < bytes.length && (bytes[cut] & 0xc0) === 0x80) cut--; // not inside a character
  return cut > 0 ? bytes.subarray(0, cut).toString("utf8") : undefined;
}

const SPACE = /[ \t\n\r]*/y;

/** The index just past the JSON value that starts at `i` (the text is valid JSON). */
function skipValue(text: string, i: number): number {
  let depth = 0;
  do {
    const c = text[i];
    if (c === '"') {
      for (i++; text[i] !== '"'; i++) if (text[i] === "\\") i++;
      i++;
    } else if (c === "{" || c === "[") {
      depth++;
      i++;
    } else if (c === "}" || c === "]") {
      depth--;
      i++;
    } else {
      const start = i;
      while (i < text.length && !/[,:\]} \t\n\r]/.test(text[i])) i++;
      if (i === start) i++; // a comma, colon or space inside an array or object
    }
  } while (depth > 0);
  return i;
}

/**
 * The JSON text of the member `name` of the object in `text`, exactly as
 * written: ledgerd replays a stored result byte for byte, and re-serialising
 * the parsed value could change its spelling (`2.50`, big integers).
 */
export function rawMember(text: string, name: string): string | undefined {
  const space = (i: number) => {
    SPACE.lastIndex = i;
    SPACE.exec(text);
    return SPACE.lastIndex;
  };
  let i = space(0) + 1; // past the "{"
  for (;;) {
    i = space(i);
    if (text[i] !== '"') return undefined;
    const keyEnd = skipValue(text, i);
    const key = JSON.parse(text.slice(i, keyEnd)) as string;
    const start = space(space(keyEnd) + 1); // past the ":"
    const end = skipValue(text, start);
    if (key === name) return text.slice(start, end);
    i = space(end) + 1; // past the ","
  }
}

function unexpected(answer: Answer): LedgerError {
  return new LedgerError(answer.status, { error: { code: "unexpected_answer", message: answer.text.slice(0, 200) } });
}

/** One invocation of a tool under its idempotency key: claim, run, record. */
export class ToolCall<T> {
  private readonly path: string;
  private readonly claimBody: string;
  private readonly maxResultBytes: number;
  private readonly attemptId: string | undefined;
  // Set by run: the span whose children the calls to ledgerd are.
  private span: ToolSpan | null = null;
  // The tool threw (its failure was recorded), as opposed to ledgerd refusing.
  private toolThrew = false;

  constructor(private readonly transport: Transport, private readonly options: ToolCallOptions,
              private readonly defaults: ToolCallDefaults) {
    const { requestId, toolCallId, args, attempt } = options;
    let attemptId = options.attemptId;
    if (attempt !== undefined) {
      if (attemptId !== undefined && attemptId !== attempt.attemptId) {
        throw new TypeError("attemptId and attempt name different attempts");
      }
      attemptId = attempt.attemptId;
    }
    this.attemptId = attemptId;
    this.maxResultBytes = checkMaxResultBytes(options.maxResultBytes ?? defaults.maxResultBytes);
    this.path = `/v1/requests/${quoteId(requestId)}/tool-calls/${quoteId(toolCallId)}/`;
    const raw: Record<string, string> = {};
    let fingerprint: string | undefined;
    if (options.storeArgs) {
      if (args === undefined) throw new TypeError("storeArgs needs args");
      // The arguments go out as their canonical text, which ledgerd
      // fingerprints to the very bytes hashed here (JSON.stringify could
      // not send a bigint); with the fingerprint beside them, a client and
      // a server that ever disagreed would get a 400, not two fingerprints.
      raw.args = canonicalize(args);
      fingerprint = argsSha256(args);
    } else if (args !== undefined) {
      fingerprint = argsSha256(args);
    }
    // The identity of this invocation, in every claim it sends: when the
    // answer to a claim is lost and the transport sends it again, ledgerd
    // recognises the holder it already made (200, the same token).
    this.claimBody = jsonBody({
      claim_id: randomBytes(16).toString("hex"),
      tool_dedupes: options.dedupes ?? false,
      tool: options.tool,
      args_sha256: fingerprint,
      store_args: options.storeArgs ? true : undefined,
      attempt_id: attemptId,
      owner: options.owner,
      lease_ms: options.lease,
    }, raw);
  }

  private post(action: string, body: string, retryMs: number, signal?: AbortSignal): Promise<Answer> {
    return this.transport.call("POST", this.path + action, body, { retryMs, signal, trace: this.span?.headers });
  }

  /** Claims the key, then replays the recorded result or runs `fn` and records it. */
  async run(fn: ToolFunction<T>): Promise<ToolCallResult<T>> {
    const { requestId, toolCallId, tool } = this.options;
    const span = await ToolSpan.start({ requestId, toolCallId, tool, attemptId: this.attemptId },
                                      this.options.trace, this.defaults.trace);
    this.span = span;
    let done: ToolCallResult<T>;
    try {
      done = await this.claimAndRun(fn);
    } catch (e) {
      if (this.options.attempt !== undefined && (e instanceof ArgsMismatch || e instanceof AttemptFenced)) {
        this.options.attempt.revoked = true;
      }
      const recordedFailed = this.toolThrew && !(e instanceof Retryable) && !(e instanceof NotExecuted);
      span.fail(e, recordedFailed ? "failed" : undefined,
                !this.toolThrew && e instanceof LedgerError ? e.code : undefined);
      throw e;
    }
    span.finish({
      outcome: done.outcome, replayed: done.replayed, executed: done.executed, idempotencyKey: done.idempotencyKey,
      replayedError: done.replayed && done.outcome === "failed" ? recordedErrorName(done.result) : undefined,
    });
    return done;
  }

  private async claimAndRun(fn: ToolFunction<T>): Promise<ToolCallResult<T>> {
    const { signal } = this.options;
    signal?.throwIfAborted();
    const answer = await this.claim();
    const body = isObject(answer.body) ? answer.body : {};
    if (body.status === "completed") {
      const resultJson = rawMember(answer.text, "result") ?? "null";
      return {
        executed: false, replayed: true, outcome: body.outcome === "failed" ? "failed" : "succeeded",
        result: JSON.parse(resultJson), resultJson, idempotencyKey: String(body.idempotency_key),
        fencingToken: null, completedAt: typeof body.completed_at === "string" ? body.completed_at : null,
        recorded: true, completionError: null, resultKept: true,
      };
    }
    if (body.status !== "claimed") throw unexpected(answer);
    const key = String(body.idempotency_key);
    const token = Number(body.fencing_token);
    this.span?.claimed(key, token);
    if (signal?.aborted) {
      // Aborted while the claim was in flight: the tool has not run, so
      // saying so frees the key now rather than leaving it to run out unknown.
      await this.post("release", jsonBody({ fencing_token: token, reason: "aborted before the tool ran" }),
                      this.defaults.completeRetryMs);
      throw signal.reason;
    }
    return this.execute(fn, key, token, this.options.lease ?? Number(body.lease_ms));
  }

  /** Claims, waiting up to waitMs while another holder has the key. */
  private async claim(): Promise<Answer> {
    const { waitMs = 0, signal } = this.options;
    const deadline = performance.now() + waitMs;
    const backoff = new Backoff(50, IN_PROGRESS_POLL_CAP_MS);
    for (;;) {
      try {
        return await this.post("claim", this.claimBody, this.defaults.retryMs, signal);
      } catch (e) {
        const left = deadline - performance.now();
        if (!(e instanceof InProgress) || left <= 0) throw e;
        // The holder's completion may come at any moment; its lease ends
        // at retryAfterMs at the latest: never wait past that.
        await sleep(Math.min(backoff.nextDelay(), e.retryAfterMs ?? Infinity, left), signal);
      }
    }
  }

  private async execute(fn: ToolFunction<T>, key: string, token: number, leaseMs: number): Promise<ToolCallResult<T>> {
    const renew = jsonBody({ fencing_token: token, lease_ms: this.options.lease });
    const heartbeat = new Heartbeat(leaseMs / 3, () => this.post("renew", renew, 0), (e) => {
      console.warn(`ledgerd: the claim of ${key} was lost while its tool ran: ${String(e)}`);
    });
    heartbeat.start();
    let resultJson: string;
    try {
      try {
        const span = this.span;
        resultJson = dumpJson(await (span !== null ? span.run(() => fn(token, key)) : fn(token, key)));
      } finally {
        await heartbeat.stop();
      }
    } catch (e) {
      this.toolThrew = true;
      await this.recordFailure(key, token, e);
      throw e;
    }
    return this.recordSuccess(key, token, resultJson);
  }

  /** Records what the tool's error means for the key; says so on the console if that failed. */
  private async recordFailure(key: string, token: number, e: unknown): Promise<void> {
    try {
      if (e instanceof NotExecuted) {
        await this.post("release", jsonBody({ fencing_token: token, reason: releaseReason(e) }),
                        this.defaults.completeRetryMs);
      } else {
        await this.complete(key, { fencing_token: token, outcome: "failed", retryable: e instanceof Retryable },
                            failureResult(e));
      }
    } catch (failure) {
      console.warn(`ledgerd: ${key}: the tool's failure was not recorded: ${String(failure)}`);
    }
  }

  private async recordSuccess(key: string, token: number, resultJson: string): Promise<ToolCallResult<T>> {
    const done: ToolCallResult<T> = {
      executed: true, replayed: false, outcome: "succeeded", result: JSON.parse(resultJson), resultJson,
      idempotencyKey: key, fencingToken: token, completedAt: null, recorded: true, completionError: null,
      resultKept: true,
    };
    try {
      const answer = await this.complete(key, { fencing_token: token, outcome: "succeeded" }, resultJson);
      const body = isObject(answer.body) ? answer.body : {};
      done.completedAt = typeof body.completed_at === "string" ? body.completed_at : null;
      done.resultKept = body.result_kept !== false;
    } catch (e) {
      if (!(e instanceof LedgerError)) throw e;
      console.error(`ledgerd: ${key}: the tool ran but its result was not recorded: ${e.message}`);
      Object.assign(done, { outcome: "unrecorded", recorded: false, completionError: e });
    }
    return done;
  }

  /**
   * Records a completion whose result is `resultJson`, whatever its size.
   * Within maxResultBytes the text goes out whole; over it, or refused whole
   * as too large a body (413: a ledgerd whose --max-body is below the
   * client's bound), the completion sends the text's length and SHA-256
   * instead, which ledgerd records as a result not kept. A completion lost
   * to its size would leave the key in_progress, then outcome_unknown,
   * though the effect happened. A retryable failure keeps no result, so it
   * goes without one.
   */
  private async complete(key: string, fields: Record<string, unknown>, resultJson: string): Promise<Answer> {
    const size = Buffer.byteLength(resultJson, "utf8");
    if (size <= this.maxResultBytes) {
      try {
        return await this.post("complete", jsonBody(fields, { result: resultJson }), this.defaults.completeRetryMs);
      } catch (e) {
        if (!(e instanceof LedgerError) || e.status !== 413) throw e;
        console.warn(`ledgerd: ${key}: a result of ${size} bytes is too large a body for ledgerd; `
                     + "completing with its length and SHA-256");
      }
    }
    const body = fields.retryable === true ? jsonBody(fields)
      : jsonBody({ ...fields, result_not_kept: notKept(resultJson) });
    return this.post("complete", body, this.defaults.completeRetryMs);
  }
}
