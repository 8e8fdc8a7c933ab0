/**
 * What the three framework adapters share: the options a user passes, the
 * claim of one tool call under its stable ordinal, and what a replay of a
 * failed call turns into.
 *
 * No framework is imported here; each adapter imports only types from its own.
 */

import { LedgerError, stableToolCallId } from "../index.js";
import type { Ledger } from "../index.js";

/** Where a framework's tool calls are recorded: the ledger and the logical request. */
export interface LedgerToolOptions {
  /** The client (`new Ledger({url, token})`), shared by every request. */
  ledger: Ledger;
  /** The logical request: the same on every rerun of it (the router's request id). */
  requestId: string;
  /** The inference attempt the calls are made under, when a router gives one. */
  attemptId?: string;
  /** The claim's lease in ms (renewed while the tool runs). */
  lease?: number;
  /** How long to wait for another holder of the key before InProgress is thrown. */
  waitMs?: number;
  /** Declare the tool's own dedupe (see the core's toolCall). */
  dedupes?: boolean;
  /** The longest result sent whole, in bytes (see the core's toolCall; default: the ledger's). */
  maxResultBytes?: number;
}

/**
 * A replay of a call whose first run threw: the framework sees an error
 * again, with the recorded message, and the tool does not run.
 */
export class ReplayedToolError extends Error {
  /** The recorded result of the failed call (`{"error", "message"}` as the core writes it). */
  readonly result: unknown;

  constructor(result: unknown) {
    const r = (result ?? {}) as { error?: unknown; message?: unknown };
    const message = typeof r.message === "string" ? r.message
      : typeof r.error === "string" ? r.error : JSON.stringify(result);
    super(message);
    this.name = "ReplayedToolError";
    this.result = result;
  }
}

/** True when @e is one of ledgerd's refusals (ArgsMismatch, OutcomeUnknown, ...). */
export function isLedgerError(e: unknown): e is LedgerError {
  return e instanceof LedgerError;
}

/**
 * Claims the call with ordinal @k of the request under @tool and @args,
 * runs @run only when the ledger says so, and returns the tool's result,
 * the stored one on a replay. A replayed failure throws ReplayedToolError;
 * a refusal throws the core's typed error (ArgsMismatch when the rerun
 * diverged, ResultNotKeptError when the call finished but its result was
 * too large to keep) and runs nothing.
 */
export async function claimCall(o: LedgerToolOptions, k: number, tool: string, args: unknown,
                                run: () => unknown, signal?: AbortSignal): Promise<unknown> {
  const call: Parameters<Ledger["toolCall"]>[0] = {
    requestId: o.requestId,
    toolCallId: stableToolCallId(k),
    tool,
    args: args === undefined ? {} : args,
  };
  if (o.attemptId !== undefined) call.attemptId = o.attemptId;
  if (o.lease !== undefined) call.lease = o.lease;
  if (o.waitMs !== undefined) call.waitMs = o.waitMs;
  if (o.dedupes !== undefined) call.dedupes = o.dedupes;
  if (o.maxResultBytes !== undefined) call.maxResultBytes = o.maxResultBytes;
  if (signal !== undefined) call.signal = signal;
  const r = await o.ledger.toolCall(call, async () => await run());
  if (r.replayed && r.outcome === "failed") throw new ReplayedToolError(r.result);
  return r.result;
}

/** The JSON value of a tool's arguments given as JSON text (the Agents SDK's form). */
export function parseArgs(input: unknown): unknown {
  if (typeof input !== "string") return input ?? {};
  if (input.trim() === "") return {};
  try {
    return JSON.parse(input);
  } catch {
    return input;
  }
}

/**
 * The ledger refusal @e is or wraps (a framework wraps a tool's error: the
 * Agents SDK's ToolCallError in `.error`, LangChain's MiddlewareError in
 * `.cause`), or null.
 */
export function findLedgerError(e: unknown): LedgerError | null {
  for (let x: unknown = e, depth = 0; x !== null && typeof x === "object" && depth < 16; depth++) {
    if (x instanceof LedgerError) return x;
    const o = x as { error?: unknown; cause?: unknown };
    x = o.error instanceof Error ? o.error : o.cause;
  }
  return null;
}
