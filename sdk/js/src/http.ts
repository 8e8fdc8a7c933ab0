/**
 * HTTP transport to ledgerd: Node's own fetch, a timeout per exchange, retries.
 *
 * Every mutating call of ledgerd is idempotent under HTTP retry: the same
 * request sent again returns the same outcome and changes nothing more. So
 * when an answer is lost (a timeout, a broken connection) or ledgerd says
 * 503 (its database is away), the transport sends the very same bytes
 * again (a claim keeps its claim_id), after a capped, jittered, exponential
 * back-off, until an answer comes or the call's retry budget is spent.
 */

import {
  type ErrorEnvelope, errorFromAnswer, isObject, LedgerError, LedgerUnavailable,
  TLSVerificationFailed,
} from "./errors.js";
import { type TraceContext, type TraceHeaders, traceHeaders } from "./tracing.js";

export const VERSION = "0.1.0";

// Answers that mean "not now" rather than "no": ledgerd's own 503, and the
// 502/504 a proxy in front of it gives while it is away.
const UNAVAILABLE = new Set([502, 503, 504]);

// Node's codes for a certificate that failed verification: asking again
// would fail the same way, so these are not retried.
const TLS_CODES = new Set([
  "CERT_HAS_EXPIRED", "CERT_NOT_YET_VALID", "DEPTH_ZERO_SELF_SIGNED_CERT",
  "ERR_TLS_CERT_ALTNAME_INVALID", "SELF_SIGNED_CERT_IN_CHAIN", "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY", "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
]);

/**
 * Capped, jittered exponential delays, so that retries spread out and never
 * herd: the n-th delay is drawn from [d/2, d] with d = min(cap, first * 2^n).
 */
export class Backoff {
  private n = 0;
  constructor(private readonly firstMs = 50, private readonly capMs = 2000) {}

  nextDelay(): number {
    const d = Math.min(this.capMs, this.firstMs * 2 ** this.n);
    this.n = Math.min(this.n + 1, 32);
    return d / 2 + Math.random() * (d / 2);
  }
}

/** Waits `ms`; an abort of `signal` ends the wait at once with the signal's reason. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** One answer of ledgerd: status, raw body text, and the body parsed (null if not JSON). */
export interface Answer {
  status: number;
  text: string;
  body: unknown;
}

/**
 * Encodes a request body; members of `raw` are JSON texts inserted
 * verbatim, so that a tool's result goes out exactly as the text the client
 * keeps and ledgerd stores it byte for byte. Members left undefined are absent.
 */
export function jsonBody(fields: Record<string, unknown>, raw: Record<string, string> = {}): string {
  const members = Object.entries(fields).filter(([, v]) => v !== undefined)
    .map(([k, v]) => JSON.stringify(k) + ":" + JSON.stringify(v));
  for (const [k, v] of Object.entries(raw)) members.push(JSON.stringify(k) + ":" + v);
  return "{" + members.join(",") + "}";
}

/** An id as one path segment: one ledgerd would refuse stays a single segment. */
export function quoteId(id: string): string {
  return encodeURIComponent(id);
}

export interface TransportOptions {
  timeoutMs: number;
  userAgent?: string;
  /** The trace context of every call that has none of its own (see tracing.ts). */
  trace?: TraceContext;
}

export interface CallOptions {
  /** How long a lost answer or a 503 is retried; 0: a single try. */
  retryMs: number;
  /** Stops the waits between retries (never an exchange in flight: see send). */
  signal?: AbortSignal;
  /**
   * The trace headers of this call (a tool call's span's); by default, the
   * active context's, or the client's explicit one.
   */
  trace?: TraceHeaders;
}

function envelope(answer: Answer): ErrorEnvelope {
  if (isObject(answer.body) && isObject(answer.body.error)) return answer.body as unknown as ErrorEnvelope;
  return { error: { code: `http_${answer.status}`, message: answer.text.slice(0, 200) } };
}

function tlsCode(e: unknown): string | undefined {
  // fetch wraps the socket's error: TypeError("fetch failed", {cause}).
  for (let c = e, depth = 0; c instanceof Error && depth < 4; c = c.cause, depth++) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === "string" && TLS_CODES.has(code)) return code;
  }
  return undefined;
}

function describe(e: unknown): string {
  const parts: string[] = [];
  for (let c: unknown = e; c instanceof Error && parts.length < 4; c = c.cause) parts.push(c.message);
  return parts.join(": ") || String(e);
}

/** Sends calls to one ledgerd with one token. */
export class Transport {
  private readonly base: string;
  private readonly headers: Record<string, string>;

  constructor(url: string, token: string, private readonly options: TransportOptions) {
    const parsed = new URL(url);
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new TypeError(`ledgerd's URL must be http(s)://host[:port][/prefix]: ${url}`);
    }
    this.base = parsed.origin + parsed.pathname.replace(/\/+$/, "");
    this.headers = {
      authorization: "Bearer " + token,
      accept: "application/json",
      "content-type": "application/json",
      "user-agent": options.userAgent ?? `ledgerd-js/${VERSION}`,
    };
  }

  /**
   * One exchange. The caller's signal is not passed to fetch on purpose: a
   * claim cut off in flight may have landed, and only its answer says so.
   */
  private async send(method: string, path: string, body: string | null, trace: TraceHeaders): Promise<Answer> {
    const response = await fetch(this.base + path, {
      method, headers: { ...trace, ...this.headers }, body, signal: AbortSignal.timeout(this.options.timeoutMs),
    });
    const text = await response.text();
    let parsed: unknown = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // Not JSON (a proxy's error page): the status alone is the answer.
    }
    return { status: response.status, text, body: parsed };
  }

  /**
   * Sends one call; resolves with ledgerd's answer below 400, or rejects.
   *
   * @throws TLSVerificationFailed at once; LedgerUnavailable when still no
   *   answer, or still 502/503/504, at the end of `retryMs`; the LedgerError
   *   subclass of any other error answer; the signal's reason once aborted.
   */
  async call(method: string, path: string, body: string | null, options: CallOptions): Promise<Answer> {
    const deadline = performance.now() + options.retryMs;
    const backoff = new Backoff();
    // Taken once: a retry is the same call, in the same trace.
    const trace = options.trace ?? await traceHeaders(this.options.trace);
    for (;;) {
      let failure: LedgerError;
      let hintMs = 0;
      try {
        const answer = await this.send(method, path, body, trace);
        if (answer.status < 400) return answer;
        if (!UNAVAILABLE.has(answer.status)) throw errorFromAnswer(answer.status, envelope(answer));
        failure = new LedgerUnavailable(answer.status, envelope(answer));
        hintMs = failure.retryAfterMs ?? 0;
      } catch (e) {
        if (e instanceof LedgerError) throw e;
        const tls = tlsCode(e);
        if (tls !== undefined) {
          throw new TLSVerificationFailed(null, { error: {
            code: "tls_verification_failed",
            message: `ledgerd's certificate failed verification: ${tls}` } }, { cause: e });
        }
        failure = new LedgerUnavailable(null, { error: {
          code: "unreachable", message: `no answer from ledgerd: ${describe(e)}` } }, { cause: e });
      }
      const left = deadline - performance.now();
      if (left <= 0) throw failure;
      await sleep(Math.min(left, Math.max(hintMs, backoff.nextDelay())), options.signal);
    }
  }
}
