/**
 * The TypeScript client of ledgerd: exactly-once side effects for LLM agents.
 *
 *   const ledger = new Ledger({ url: "http://127.0.0.1:8080", token });
 *   const r = await ledger.toolCall(
 *     { requestId, toolCallId: stableToolCallId(0), tool: "send_email", args },
 *     (fencingToken, key) => mailer.send(args, { idempotencyKey: key }));
 *
 * A rerun of the request (on another replica, after a failover) gets the
 * recorded result back instead of sending a second email. Every public name
 * is exported here; the framework adapters have entry points of their own.
 */

export { Ledger, type LedgerOptions } from "./client.js";
export {
  ArgsMismatch, AttemptFenced, type ErrorEnvelope, InProgress, type JsonObject, LedgerError,
  LedgerUnavailable, NotExecuted, OutcomeUnknown, RequestClosed, ResultExpired, ResultNotKeptError,
  Retryable, TLSVerificationFailed,
} from "./errors.js";
export { VERSION } from "./http.js";
export { argsSha256, canonicalize, canonicalizeText, type JsonValue } from "./jcs.js";
export {
  Attempt, type BeginAttemptOptions, type FailoverAction, type FailoverDecision, type FailoverOptions,
  type FailoverSignal, type NextAttemptOptions, type SettledToolCall,
} from "./router.js";
export { type TraceContext } from "./tracing.js";
export {
  stableToolCallId, ToolCallCounter, type ToolCallOptions, type ToolCallResult, type ToolFunction,
} from "./toolcall.js";
