// What the adapter tests share: the client of the live ledgerd the pytest
// wrapper started (LEDGER_URL, LEDGER_TOKEN), fresh ids, and a tool's
// side effect that counts its executions.
import { randomBytes } from "node:crypto";
import { Ledger } from "ledgerd";

export function ledger() {
  const url = process.env.LEDGER_URL, token = process.env.LEDGER_TOKEN;
  if (!url || !token) throw new Error("LEDGER_URL and LEDGER_TOKEN must name a live ledgerd");
  return new Ledger({ url, token });
}

export function newId(prefix = "r") {
  return `${prefix}-${randomBytes(8).toString("hex")}`;
}

/** A per-decode id, as a model engine gives each call: never the same twice. */
export function decodeId() {
  return `call_${randomBytes(6).toString("hex")}`;
}

/** The side effects of a test: `run(name, args)` counts one execution and returns a result naming it. */
export class SideEffects {
  constructor() { this.executions = []; }
  run(name, args) {
    this.executions.push({ name, args });
    return { done: name, n: this.executions.length, args };
  }
  get count() { return this.executions.length; }
}

/** @e or what it wraps (in `.error` or `.cause`) that is an instance of @cls. */
export function findCause(e, cls) {
  for (let x = e, i = 0; x && i < 16; x = x.error instanceof Error ? x.error : x.cause, i++) {
    if (x instanceof cls) return x;
  }
  return null;
}
