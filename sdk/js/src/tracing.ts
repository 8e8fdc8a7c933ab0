/**
 * W3C trace context on every call to ledgerd, and a span per tool call.
 *
 * OpenTelemetry is optional: `@opentelemetry/api` is loaded once, by a
 * dynamic import, and when it is not installed everything here is a no-op
 * but for a trace context the caller gave explicitly (`trace`), which is
 * sent as it is. When it is installed, each call carries the headers the
 * registered propagator writes for the active context (`traceparent`,
 * `tracestate`), and each toolCall writes an `execute_tool {tool}` span of
 * OpenTelemetry's GenAI semantic conventions (v1.37.0) whose children are
 * the calls to ledgerd it makes. The API's types are not imported: the
 * package's declarations must compile where it is absent.
 */

/** A trace context given by hand, as W3C Trace Context headers (for callers without OpenTelemetry). */
export interface TraceContext {
  /** `00-{32 hex trace id}-{16 hex parent id}-{2 hex flags}`; a malformed one is not sent. */
  traceparent: string;
  /** The vendors' entries; sent only with a well-formed traceparent. */
  tracestate?: string;
}

/** Headers to add to one exchange with ledgerd. */
export type TraceHeaders = Record<string, string>;

// The parts of @opentelemetry/api this file uses, by their documented shapes.
type Context = object;
interface SpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
  traceState?: unknown;
}
type Attributes = Record<string, string | number | boolean>;
interface Span {
  setAttributes(attributes: Attributes): unknown;
  setStatus(status: { code: number }): unknown;
  end(): void;
}
interface Api {
  context: {
    active(): Context;
    with<R>(context: Context, fn: () => R): R;
  };
  trace: {
    getTracer(name: string, version?: string): {
      startSpan(name: string, options: { kind: number; attributes: Attributes }, context: Context): Span;
    };
    setSpan(context: Context, span: Span): Context;
    setSpanContext(context: Context, spanContext: SpanContext): Context;
  };
  propagation: { inject(context: Context, carrier: TraceHeaders): void };
  createTraceState?: (raw: string) => unknown;
  SpanKind: { INTERNAL: number };
  SpanStatusCode: { ERROR: number };
}

// A variable, not a literal: neither tsc nor a bundler goes looking for it.
const API = "@opentelemetry/api";
const TRACER = "ledgerd";
let loading: Promise<Api | null> | undefined;

/** The OpenTelemetry API when it is installed, else null; imported once. */
export function loadApi(): Promise<Api | null> {
  loading ??= import(API).then((m: Record<string, unknown>) => {
    const api = (m.trace !== undefined ? m : m.default) as Api | undefined;
    return api?.trace !== undefined && api.context !== undefined && api.propagation !== undefined ? api : null;
  }, () => null);
  return loading;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
// Printable ASCII without the header's own separators: list members as W3C writes them.
const TRACESTATE = /^[\x20-\x7e]{0,512}$/;

/**
 * The headers of the first well-formed explicit trace context of @given (a
 * call's own, then its client's), or null. A traceparent is malformed with
 * bad syntax, version ff, an all-zero trace or parent id: a context
 * ledgerd would discard is not sent at all.
 */
export function explicitHeaders(...given: (TraceContext | undefined)[]): TraceHeaders | null {
  for (const one of given) {
    const headers = wellFormed(one);
    if (headers !== null) return headers;
  }
  return null;
}

function wellFormed(given: TraceContext | undefined): TraceHeaders | null {
  if (given === undefined || given === null || typeof given !== "object") return null;
  const m = typeof given.traceparent === "string" ? TRACEPARENT.exec(given.traceparent) : null;
  if (m === null || m[1] === "ff" || /^0+$/.test(m[2]) || /^0+$/.test(m[3])) return null;
  const headers: TraceHeaders = { traceparent: given.traceparent };
  const state = given.tracestate;
  if (typeof state === "string" && state.trim() !== "" && TRACESTATE.test(state)) headers.tracestate = state;
  return headers;
}

/** The context an operation descends from: the explicit one, else the active one. */
function parentContext(api: Api, explicit: TraceHeaders | null): Context {
  if (explicit === null) return api.context.active();
  const [, , traceId, spanId, flags] = TRACEPARENT.exec(explicit.traceparent) as RegExpExecArray;
  const spanContext: SpanContext = { traceId, spanId, traceFlags: parseInt(flags, 16) & 1, isRemote: true };
  if (explicit.tracestate !== undefined && api.createTraceState !== undefined) {
    spanContext.traceState = api.createTraceState(explicit.tracestate);
  }
  return api.trace.setSpanContext(api.context.active(), spanContext);
}

/**
 * What the registered propagator writes for @context, only as trace headers
 * (never over the transport's own: authorization, content-type...); with
 * no propagator registered (the API alone) that is nothing, and the
 * explicit context, if any, is sent as given.
 */
function inject(api: Api, context: Context, explicit: TraceHeaders | null): TraceHeaders {
  const carrier: TraceHeaders = {};
  try {
    api.propagation.inject(context, carrier);
  } catch {
    // A propagator's bug must not fail the call it describes.
  }
  const out: TraceHeaders = {};
  for (const [k, v] of Object.entries(carrier)) {
    const name = k.toLowerCase();
    if (typeof v === "string" && !OWN_HEADERS.has(name)) out[name] = v;
  }
  return out.traceparent === undefined && explicit !== null ? { ...out, ...explicit } : out;
}

const OWN_HEADERS = new Set(["authorization", "accept", "content-type", "content-length", "user-agent", "host"]);

/** The trace headers of one call made outside a tool call's span. */
export async function traceHeaders(given: TraceContext | undefined): Promise<TraceHeaders> {
  const explicit = explicitHeaders(given);
  const api = await loadApi();
  if (api === null) return explicit ?? {};
  return inject(api, parentContext(api, explicit), explicit);
}

/** What a tool call's span records as it starts. */
export interface ToolSpanStart {
  tool?: string;
  requestId: string;
  toolCallId: string;
  attemptId?: string;
}

/** What a finished call says of itself, from the client's ToolCallResult. */
export interface ToolSpanEnd {
  outcome: string;
  replayed: boolean;
  executed: boolean;
  idempotencyKey: string;
  /** The recorded failure's error name, on a replay of a call whose first run threw. */
  replayedError?: string;
}

/**
 * One tool call's `execute_tool` span, or its stand-in when OpenTelemetry
 * is absent (then `headers` is the explicit context, or nothing).
 */
export class ToolSpan {
  private constructor(private readonly api: Api | null, private readonly span: Span | null,
                      private readonly context: Context | null, readonly headers: TraceHeaders) {}

  /** Starts the span under the first well-formed explicit context of @given, else the active one. */
  static async start(start: ToolSpanStart, ...given: (TraceContext | undefined)[]): Promise<ToolSpan> {
    const explicit = explicitHeaders(...given);
    const api = await loadApi();
    if (api === null) return new ToolSpan(null, null, null, explicit ?? {});
    try {
      return ToolSpan.open(api, start, explicit);
    } catch {
      // A tracer's bug must not fail the tool call it describes.
      return new ToolSpan(null, null, null, explicit ?? {});
    }
  }

  private static open(api: Api, start: ToolSpanStart, explicit: TraceHeaders | null): ToolSpan {
    const attributes: Attributes = {
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.call.id": start.toolCallId,
      "ledger.request_id": start.requestId,
      "ledger.tool_call_id": start.toolCallId,
    };
    if (start.tool !== undefined) attributes["gen_ai.tool.name"] = start.tool;
    if (start.attemptId !== undefined) attributes["ledger.attempt_id"] = start.attemptId;
    const parent = parentContext(api, explicit);
    const name = start.tool !== undefined ? `execute_tool ${start.tool}` : "execute_tool";
    const span = api.trace.getTracer(TRACER).startSpan(name, { kind: api.SpanKind.INTERNAL, attributes }, parent);
    const context = api.trace.setSpan(parent, span);
    return new ToolSpan(api, span, context, inject(api, context, explicit));
  }

  /** The claim is held: its key and fencing token. */
  claimed(idempotencyKey: string, fencingToken: number): void {
    this.span?.setAttributes({ "ledger.idempotency_key": idempotencyKey, "ledger.fencing_token": fencingToken });
  }

  /** Runs the tool in the span's context, so that its own spans are the span's children. */
  run<R>(fn: () => R): R {
    return this.api !== null && this.context !== null ? this.api.context.with(this.context, fn) : fn();
  }

  /** Ends the span with what became of the call. */
  finish(end: ToolSpanEnd): void {
    if (this.span === null) return;
    this.span.setAttributes({
      "ledger.outcome": end.outcome, "ledger.replayed": end.replayed, "ledger.executed": end.executed,
      "ledger.idempotency_key": end.idempotencyKey,
    });
    if (end.outcome === "failed") this.error(end.replayedError ?? "failed");
    this.span.end();
  }

  /**
   * Ends the span with the error the call throws: `error.type` is its name
   * (`InProgress`, `ArgsMismatch`, the tool's own `TypeError`...), and
   * ledgerd's error code, when it refused, is `ledger.error_code`;
   * @outcome is "failed" when the tool threw and its failure was recorded.
   */
  fail(e: unknown, outcome?: string, code?: string): void {
    if (this.span === null) return;
    const attributes: Attributes = {};
    if (outcome !== undefined) attributes["ledger.outcome"] = outcome;
    if (code !== undefined) attributes["ledger.error_code"] = code;
    this.span.setAttributes(attributes);
    this.error(e instanceof Error && e.name !== "" ? e.name : "_OTHER");
    this.span.end();
  }

  private error(type: string): void {
    this.span?.setAttributes({ "error.type": type });
    this.span?.setStatus({ code: (this.api as Api).SpanStatusCode.ERROR });
  }
}
