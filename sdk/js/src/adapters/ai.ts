/**
 * The Vercel AI SDK (`ai`, version 6) adapter: `ledgerTools(opts, tools)`
 * returns the same tools with each `execute` claimed in ledgerd, so that a
 * rerun of the logical request (a failover) gets the recorded result and
 * does not run the side effect again.
 *
 * The key of a call is `requestId:call_NN`, NN the call's stable ordinal:
 * the number of tool calls in the messages the SDK hands `execute` (every
 * `tool-call` part of the assistant messages before the step), plus the
 * call's place among the calls of its step that went through these tools,
 * in the order the SDK starts them (the model's order). The model's
 * `toolCallId` is never used: it changes with every decode.
 *
 * Nothing is imported from `ai`, not even its types (the package builds
 * without it): the shapes below are the parts of its types the adapter reads.
 */

import { claimCall, isLedgerError } from "./common.js";
import type { LedgerToolOptions } from "./common.js";
import type { LedgerError } from "../index.js";

export { ReplayedToolError, findLedgerError, isLedgerError } from "./common.js";
export type { LedgerToolOptions } from "./common.js";

/** A message the SDK hands `execute` (its ModelMessage). */
export interface ModelMessageLike {
  role: string;
  content: unknown;
}

/** The options the SDK hands `execute` (its ToolExecutionOptions). */
export interface ToolExecutionOptionsLike {
  toolCallId: string;
  messages: readonly ModelMessageLike[];
  abortSignal?: AbortSignal;
}

/** A tool (the SDK's Tool); only `execute` is wrapped. */
export interface ToolLike {
  execute?: ((input: any, options: any) => unknown) | undefined;
}

/** A step of a run (the SDK's StepResult). */
export interface StepLike {
  content: ReadonlyArray<{ type: string; error?: unknown }>;
}

/** How many tool calls @messages hold: the calls of the request before this step. */
export function countToolCalls(messages: readonly ModelMessageLike[]): number {
  let n = 0;
  for (const m of messages) {
    if (m.role !== "assistant" || !Array.isArray(m.content)) continue;
    for (const part of m.content) if ((part as { type?: unknown } | null)?.type === "tool-call") n++;
  }
  return n;
}

/**
 * Numbers the calls of one request. A step's calls share the `messages`
 * array the SDK hands their executes (one array per step), so a call's place
 * in its step is kept per array: a new run, or a new step, starts again at 0.
 */
class Ordinals {
  private readonly steps = new WeakMap<object, Map<string, number>>();

  of(options: ToolExecutionOptionsLike): number {
    const messages = options.messages ?? [];
    let step = this.steps.get(messages);
    if (step === undefined) {
      step = new Map();
      this.steps.set(messages, step);
    }
    let i = step.get(options.toolCallId);
    if (i === undefined) {
      i = step.size;
      step.set(options.toolCallId, i);
    }
    return countToolCalls(messages) + i;
  }
}

async function lastValue(value: unknown): Promise<unknown> {
  const v = await value;
  if (v !== null && typeof v === "object" && Symbol.asyncIterator in v) {
    let last: unknown;
    for await (const chunk of v as AsyncIterable<unknown>) last = chunk;
    return last;
  }
  return v;
}

function wrap<T extends ToolLike>(o: LedgerToolOptions, ordinals: Ordinals, name: string, t: T): T {
  const execute = t.execute;
  if (typeof execute !== "function") return t;
  const claimed = async (input: unknown, options: ToolExecutionOptionsLike): Promise<unknown> =>
    claimCall(o, ordinals.of(options), name, input,
              () => lastValue(execute.call(t, input, options)), options.abortSignal);
  return { ...t, execute: claimed } as T;
}

/**
 * The tools of @tools, each `execute` claimed under `opts.requestId` and the
 * call's stable ordinal. Make one per run of the request (a rerun makes its
 * own); pass every tool of the call through one `ledgerTools`, so that the
 * calls of a step are numbered together. A tool without `execute` is
 * returned as it is.
 */
export function ledgerTools<TOOLS extends Record<string, ToolLike>>(opts: LedgerToolOptions, tools: TOOLS): TOOLS {
  const ordinals = new Ordinals();
  const out: Record<string, ToolLike> = {};
  for (const [name, t] of Object.entries(tools)) out[name] = wrap(opts, ordinals, name, t);
  return out as TOOLS;
}

/** The first ledger refusal among the tool errors of @steps (an ArgsMismatch on a diverged rerun), or null. */
export function ledgerErrorOf(steps: ReadonlyArray<StepLike>): LedgerError | null {
  for (const step of steps) {
    for (const part of step.content) {
      if (part.type === "tool-error" && isLedgerError(part.error)) return part.error;
    }
  }
  return null;
}

/**
 * A `stopWhen` condition: stop the loop at the first step in which ledgerd
 * refused a call (the model would otherwise see the refusal as a tool error
 * and carry on). Combine it with the run's own: `stopWhen: [stepCountIs(10), stopOnLedgerError]`.
 */
export function stopOnLedgerError({ steps }: { steps: ReadonlyArray<StepLike> }): boolean {
  return ledgerErrorOf(steps) !== null;
}

/** Throws the ledger refusal a run met (see ledgerErrorOf), if any. */
export function throwIfLedgerError(result: { steps: ReadonlyArray<StepLike> }): void {
  const e = ledgerErrorOf(result.steps);
  if (e !== null) throw e;
}
