/**
 * The OpenAI Agents SDK (`@openai/agents`) adapter.
 *
 * - `ledgerRun(opts, runOptions?)` gives `run()` the options of one run of
 *   a logical request: a `context` that names the request and a
 *   `callModelInputFilter` that counts, before every model call, the tool
 *   calls in the items the SDK sends the model;
 * - `ledgerExecute(fn)` wraps a function tool's `execute` so that it is
 *   claimed in ledgerd under `requestId:call_NN`;
 * - `ledgerErrorFunction` is the tool's `errorFunction` that lets a ledger
 *   refusal (ArgsMismatch on a diverged rerun) end the run instead of
 *   being handed to the model as text;
 * - `ledgerToolMetaResolver` is an MCP server's `toolMetaResolver`: every
 *   MCP tool call carries `_meta` {"io.ledgerd/request_id",
 *   "io.ledgerd/tool_call_id"} for a `ledger-mcp` proxy in front of it.
 *
 * The ordinal NN of a call: the number of tool calls (items whose type ends
 * in `_call`) in the model input of the turn that made it, at least the
 * previous turn's ordinals plus its calls (so a server-managed conversation,
 * whose input holds only the new items, still counts up), plus the call's
 * place among the turn's calls in the order the SDK starts them. The
 * model's `callId` is never used.
 *
 * Nothing is imported from `@openai/agents`, not even its types (the
 * package builds without it): the shapes below are the parts of its types
 * the adapter reads.
 */

import { LedgerError, stableToolCallId } from "../index.js";
import { claimCall, isLedgerError } from "./common.js";
import type { LedgerToolOptions } from "./common.js";

export { ReplayedToolError, findLedgerError, isLedgerError } from "./common.js";
export type { LedgerToolOptions } from "./common.js";

/** An input item (the SDK's AgentInputItem). */
export type AgentInputItemLike = unknown;

/** The SDK's RunContext: `context` is the object given to run(). */
export interface RunContextLike {
  context: unknown;
}

/** The SDK's ToolCallDetails. */
export interface ToolCallDetailsLike {
  toolCall?: { callId?: string; name?: string };
  signal?: AbortSignal;
}

/** The SDK's ModelInputData and CallModelInputFilter. */
export interface ModelInputDataLike {
  input: AgentInputItemLike[];
  instructions?: string;
}
export type CallModelInputFilterLike = (args: {
  modelData: ModelInputDataLike; agent: any; context: any;
}) => ModelInputDataLike | Promise<ModelInputDataLike>;

/** The SDK's MCPToolMetaContext. */
export interface MCPToolMetaContextLike {
  runContext: RunContextLike;
  serverName: string;
  toolName: string;
  arguments: Record<string, unknown> | null;
}

/** The tool calls among @items: every item whose type ends in `_call` (function, computer, hosted, shell...). */
export function countToolCalls(items: readonly AgentInputItemLike[]): number {
  let n = 0;
  for (const item of items) {
    const type = (item as { type?: unknown }).type;
    if (typeof type === "string" && type.endsWith("_call")) n++;
  }
  return n;
}

/** The numbering of one run's tool calls. */
class RunCalls {
  private base = 0;
  private inTurn = new Map<unknown, number>();

  constructor(readonly opts: LedgerToolOptions) {}

  /** A model call is about to be made with @items as its input. */
  turn(items: readonly AgentInputItemLike[]): void {
    this.base = Math.max(countToolCalls(items), this.base + this.inTurn.size);
    this.inTurn = new Map();
  }

  /** The ordinal of the call @key of the current turn (a call met again keeps its ordinal). */
  ordinal(key: unknown): number {
    let i = this.inTurn.get(key);
    if (i === undefined) {
      i = this.inTurn.size;
      this.inTurn.set(key, i);
    }
    return this.base + i;
  }
}

const runs = new WeakMap<object, RunCalls>();

function refusal(message: string): LedgerError {
  return new LedgerError(null, { error: { code: "ledger_run_missing", message } });
}

function runOf(runContext: RunContextLike | undefined): RunCalls {
  const context = runContext?.context;
  const calls = context !== null && typeof context === "object" ? runs.get(context) : undefined;
  if (calls === undefined) {
    throw refusal("this run was not started with ledgerRun(): run(agent, input, ledgerRun({ledger, requestId}))");
  }
  return calls;
}

/**
 * The options of one run of the logical request `opts.requestId`: @runOptions
 * (if any) with a `context` the adapter knows the run by (yours, which must
 * be an object used by this run only, or a fresh `{}`) and a
 * `callModelInputFilter` that counts the tool calls of each turn's input
 * before it calls yours. Make them anew for every run; a rerun makes its own.
 */
export function ledgerRun<O extends { context?: unknown; callModelInputFilter?: CallModelInputFilterLike }>(
  opts: LedgerToolOptions, runOptions?: O): O & { context: object; callModelInputFilter: CallModelInputFilterLike } {
  const given = runOptions?.context;
  if (given !== undefined && (given === null || typeof given !== "object")) {
    throw new TypeError("ledgerRun: the run's context must be an object");
  }
  const context = (given ?? {}) as object;
  const calls = new RunCalls(opts);
  runs.set(context, calls);
  const inner = runOptions?.callModelInputFilter;
  const callModelInputFilter: CallModelInputFilterLike = async (args) => {
    calls.turn(args.modelData.input);
    return inner ? await inner(args) : args.modelData;
  };
  return { ...(runOptions ?? {}), context, callModelInputFilter } as O & {
    context: object; callModelInputFilter: CallModelInputFilterLike };
}

/**
 * @fn, a function tool's `execute`, claimed in ledgerd: it runs only when
 * the ledger says so; a rerun gets the recorded result. The tool's name in
 * the ledger is the name the model called it by.
 */
export function ledgerExecute<F extends (input: any, context?: any, details?: any) => unknown>(fn: F): F {
  const claimed = async (input: unknown, context?: RunContextLike, details?: ToolCallDetailsLike) => {
    const calls = runOf(context);
    const call = details?.toolCall;
    const k = calls.ordinal(call?.callId ?? Symbol("call"));
    const result = await claimCall(calls.opts, k, call?.name ?? fn.name, input,
                                   () => fn(input, context, details), details?.signal);
    return result;
  };
  return claimed as unknown as F;
}

/**
 * A function tool's `errorFunction`: a ledger refusal (ArgsMismatch,
 * OutcomeUnknown, ...) is thrown out of `run()`; any other error is handed
 * to the model as the SDK's default does.
 */
export function ledgerErrorFunction(_context: unknown, error: unknown): string {
  if (isLedgerError(error)) throw error;
  return "An error occurred while running the tool. Please try again.";
}

/**
 * An MCP server's `toolMetaResolver` (MCPServerStdio, MCPServerStreamableHttp,
 * MCPServerSSE): the `_meta` that names the call for a `ledger-mcp` proxy.
 */
export function ledgerToolMetaResolver(ctx: MCPToolMetaContextLike): Record<string, unknown> {
  const calls = runOf(ctx.runContext);
  const meta: Record<string, unknown> = {
    "io.ledgerd/request_id": calls.opts.requestId,
    "io.ledgerd/tool_call_id": stableToolCallId(calls.ordinal(Symbol(ctx.toolName))),
  };
  if (calls.opts.attemptId !== undefined) meta["io.ledgerd/attempt_id"] = calls.opts.attemptId;
  return meta;
}
