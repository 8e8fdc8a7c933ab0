/**
 * Errors: those ledgerd's answers turn into, and those tools throw.
 *
 * Every refusal of ledgerd arrives as one envelope,
 * `{"error": {"code", "message", ...details}}`; it becomes a LedgerError, or
 * the subclass for the codes a caller branches on. The names are the Python
 * client's (sdk/python/ledger_client/errors.py), so code and runbooks read
 * the same in both languages; ResultNotKeptError is Python's ResultNotKept.
 *
 * Retryable and NotExecuted go the other way: a tool function throws them to
 * tell the client what its failure means for the idempotency key.
 */

export type JsonObject = Record<string, unknown>;

/** The body of an error answer: `{"error": {"code", "message", ...}}`. */
export interface ErrorEnvelope {
  error: JsonObject;
}

/** ledgerd refused a call, or could not be reached. */
export class LedgerError extends Error {
  /** The HTTP status, or null when no answer came at all. */
  readonly status: number | null;
  /** The whole error envelope as ledgerd sent it. */
  readonly body: ErrorEnvelope;

  constructor(status: number | null, body: ErrorEnvelope, options?: { cause?: unknown }) {
    const code = String(body.error.code ?? "unknown_error");
    super(`${code}: ${String(body.error.message ?? "")}`, options);
    this.name = new.target.name;
    this.status = status;
    this.body = body;
  }

  /** The `error` object of the envelope: code, message and the details. */
  get details(): JsonObject {
    return this.body.error;
  }

  /** The machine-readable code, e.g. `"attempt_required"`. */
  get code(): string {
    return String(this.details.code ?? "unknown_error");
  }

  /** How long to wait before asking again, when the answer says so. */
  get retryAfterMs(): number | null {
    const value = this.details.retry_after_ms;
    return typeof value === "number" && Number.isInteger(value) ? value : null;
  }
}

/**
 * `409 in_progress`: another holder's lease on the key is running.
 * `retryAfterMs` is the lease it has left; `details.holder` names its
 * attempt and owner.
 */
export class InProgress extends LedgerError {}

/**
 * `409 outcome_unknown`: a holder's lease ran out with no completion. The
 * side effect may or may not have happened; only an operator's `resolve`
 * (after checking the tool's own records) moves the key on.
 */
export class OutcomeUnknown extends LedgerError {}

/**
 * `409 attempt_fenced`: the attempt has no rights any more. A zombie
 * replica must neither start a side effect nor publish. From a failover,
 * `details.current_attempt_id` names the newest attempt.
 */
export class AttemptFenced extends LedgerError {}

/**
 * `422 args_mismatch`: the key was first claimed for another call (other
 * args, tool or dedupes: `details.field`). Under a live attempt the rerun
 * diverged: ledgerd revoked the attempt and failed the request.
 */
export class ArgsMismatch extends LedgerError {}

/**
 * `410 result_expired`: settled long ago, its result removed by retention.
 * It must not run again; `details` keeps its `outcome` and `completed_at`.
 */
export class ResultExpired extends LedgerError {}

/**
 * `409 result_not_kept`: the call finished, and its result was too large to
 * keep: ledgerd holds only the length and SHA-256 of its JSON text. It must
 * not run again, and its result cannot be replayed; only the run that
 * executed it had the result.
 */
export class ResultNotKeptError extends LedgerError {
  /** How the call ended: `succeeded` or `failed`. */
  get outcome(): string | null {
    const value = this.details.outcome;
    return typeof value === "string" ? value : null;
  }

  /** The length in bytes of the result's exact JSON text. */
  get resultBytes(): number | null {
    const value = this.details.result_bytes;
    return typeof value === "number" && Number.isSafeInteger(value) ? value : null;
  }

  /** The SHA-256 of that text, 64 lowercase hex digits. */
  get resultSha256(): string | null {
    const value = this.details.result_sha256;
    return typeof value === "string" ? value : null;
  }
}

/**
 * The logical request is over for the router: `409 request_closed` or, when
 * creating an attempt, `409 first_delta_sent`. No new attempt, ever.
 */
export class RequestClosed extends LedgerError {
  /** The error the router sends its client, if the request recorded one. */
  get clientError(): JsonObject | null {
    const value = this.details.client_error;
    return isObject(value) ? value : null;
  }
}

/**
 * ledgerd did not answer, or answered 502/503/504, for as long as the call
 * could retry. After a 503 the body is ledgerd's (`store_unavailable`);
 * without any answer `status` is null and the code `unreachable`.
 */
export class LedgerUnavailable extends LedgerError {}

/**
 * ledgerd's certificate failed verification, so ledgerd was not asked.
 * Thrown at once, never retried: it would fail the same way until a person
 * fixes the CA (NODE_EXTRA_CA_CERTS) or the certificate. Code
 * `tls_verification_failed`.
 */
export class TLSVerificationFailed extends LedgerUnavailable {}

const BY_CODE: Record<string, typeof LedgerError> = {
  in_progress: InProgress,
  outcome_unknown: OutcomeUnknown,
  attempt_fenced: AttemptFenced,
  args_mismatch: ArgsMismatch,
  result_expired: ResultExpired,
  result_not_kept: ResultNotKeptError,
  request_closed: RequestClosed,
  first_delta_sent: RequestClosed,
};

/** The error for an error answer: the subclass its code calls for. */
export function errorFromAnswer(status: number | null, body: ErrorEnvelope): LedgerError {
  const kind = BY_CODE[String(body.error.code)] ?? LedgerError;
  return new kind(status, body);
}

/**
 * Thrown by a tool: it failed, and running it again is safe. The client
 * records a retryable failure, which makes the key claimable again (the
 * failure stays in the history), then rethrows. Throw it only when the side
 * effect certainly did not happen, or when the tool dedupes by its key.
 */
export class Retryable extends Error {
  constructor(message?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "Retryable";
  }
}

/**
 * Thrown by a tool: it decided not to act, and the side effect did not
 * happen. The client releases the key (the message is the reason kept in
 * the history), then rethrows.
 */
export class NotExecuted extends Error {
  constructor(reason?: string, options?: { cause?: unknown }) {
    super(reason, options);
    this.name = "NotExecuted";
  }
}

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
