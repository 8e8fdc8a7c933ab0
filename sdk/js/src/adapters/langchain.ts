/**
 * The LangChain.js v1 adapter: `ledgerMiddleware({ledger, requestId})` is a
 * `createAgent` middleware whose `wrapToolCall` claims every tool call in
 * ledgerd under `requestId:call_NN`: the tool runs only when the ledger
 * says so, and a rerun of the request gets the recorded ToolMessage.
 *
 * The ordinal NN of a call is counted from the agent's messages, which the
 * middleware is handed: the tool calls of the AI messages before the one
 * that made the call, plus the call's index in that message's `tool_calls`.
 * It depends on nothing but the conversation; the model's tool-call id is
 * used only to find the call in its message, never as the key.
 *
 * Nothing is imported from `langchain` (the package builds without it). A
 * replay hands LangChain's own handler a stand-in tool that returns the
 * recorded content, so LangChain builds the ToolMessage as it always does.
 */

import { LedgerError } from "../index.js";
import { claimCall } from "./common.js";
import type { LedgerToolOptions } from "./common.js";

export { ReplayedToolError, findLedgerError, isLedgerError } from "./common.js";

/** The parts of LangChain's ToolCallRequest the middleware reads. */
export interface ToolCallRequestLike {
  toolCall: { id?: string; name: string; args: unknown };
  tool?: unknown;
  state?: { messages?: readonly unknown[] } & Record<string, unknown>;
  runtime?: { context?: unknown; signal?: AbortSignal } & Record<string, unknown>;
}

/** The middleware, as `createAgent({middleware})` takes it. */
export interface LedgerMiddleware {
  name: string;
  wrapToolCall: (request: any, handler: (request: any) => any) => Promise<any>;
}

/** The options of the middleware: the core's, with the request id fixed or read from each call. */
export interface LedgerMiddlewareOptions extends Omit<LedgerToolOptions, "requestId"> {
  /**
   * The logical request: a string (an agent made per request), or a function
   * of the call (an agent shared by requests), e.g.
   * `(r) => r.runtime.context.requestId`. Default: `runtime.context.requestId`.
   */
  requestId?: string | ((request: ToolCallRequestLike) => string);
}

interface CallLike { id?: string; name: string; args: unknown }

function toolCallsOf(message: unknown): CallLike[] {
  const calls = (message as { tool_calls?: unknown } | null)?.tool_calls;
  return Array.isArray(calls) ? calls as CallLike[] : [];
}

function sameCall(a: CallLike, b: CallLike): boolean {
  return a.name === b.name && JSON.stringify(a.args) === JSON.stringify(b.args);
}

/**
 * The stable ordinal of @call in @messages: the tool calls of the messages
 * before the (last) message that holds it, plus its index there.
 */
export function ordinalOf(messages: readonly unknown[], call: CallLike): number {
  for (let m = messages.length - 1; m >= 0; m--) {
    const calls = toolCallsOf(messages[m]);
    let i = call.id !== undefined ? calls.findIndex((c) => c.id === call.id) : -1;
    if (i < 0) i = calls.findIndex((c) => c === call);
    if (i < 0 && call.id === undefined) i = calls.findIndex((c) => sameCall(c, call));
    if (i < 0) continue;
    let k = i;
    for (let p = 0; p < m; p++) k += toolCallsOf(messages[p]).length;
    return k;
  }
  throw new LedgerError(null, { error: {
    code: "tool_call_not_in_conversation",
    message: `the tool call ${call.id ?? call.name} is in none of the agent's messages: no stable ordinal` } });
}

/** What is recorded of a ToolMessage. */
interface Recorded { content: unknown }

interface ToolMessageLike { content: unknown; tool_call_id: string }

function isToolMessage(value: unknown): value is ToolMessageLike {
  return value !== null && typeof value === "object" && "tool_call_id" in value && "content" in value
    && typeof (value as { _getType?: unknown })._getType === "function";
}

function requestIdOf(o: LedgerMiddlewareOptions, request: ToolCallRequestLike): string {
  if (typeof o.requestId === "string") return o.requestId;
  if (typeof o.requestId === "function") return o.requestId(request);
  const id = (request.runtime?.context as { requestId?: unknown } | undefined)?.requestId;
  if (typeof id !== "string") {
    throw new TypeError("ledgerMiddleware: no request id (pass requestId, or invoke with context: {requestId})");
  }
  return id;
}

/**
 * The middleware. Put it in `createAgent({middleware: [ledgerMiddleware(...)]})`.
 * A ledger refusal (ArgsMismatch when a rerun's model diverged) is thrown
 * out of `agent.invoke()`, as LangChain does with every middleware error.
 */
export function ledgerMiddleware(o: LedgerMiddlewareOptions): LedgerMiddleware {
  const middleware = {
    [Symbol.for("AgentMiddleware")]: true,
    name: "LedgerdMiddleware",
    wrapToolCall: async (request: ToolCallRequestLike,
                         handler: (r: ToolCallRequestLike) => unknown): Promise<unknown> => {
      const call = request.toolCall as CallLike;
      const k = ordinalOf(request.state?.messages ?? [], call);
      let live: unknown;
      const result = await claimCall({ ...o, requestId: requestIdOf(o, request) }, k, call.name, call.args,
        async () => {
          live = await handler(request);
          if (!isToolMessage(live)) {
            throw new TypeError("ledgerMiddleware: a tool that returns a Command cannot be replayed");
          }
          const recorded: Recorded = { content: live.content };
          return recorded;
        }, request.runtime?.signal);
      if (live !== undefined) return live;
      // The replay: LangChain's handler runs a stand-in that returns the
      // recorded content (a string as the first run's ToolMessage had it)
      // and wraps it in a ToolMessage as it wraps any tool's output.
      const content = (result as Recorded | null)?.content;
      const replay = { name: call.name, invoke: async () => content };
      return handler({ ...request, tool: replay });
    },
  };
  return middleware;
}
