// What the node tests of sdk/js share: the live ledgerd test_js_client.py
// started, its tokens, and the control channel through which a test stops
// and starts that ledgerd, plants a tombstone or puts the answer thief
// (tests/answer_thief.py) in front of it.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";

import { Ledger } from "../../../sdk/js/dist/index.js";

export const URL = need("LEDGER_URL");
export const AGENT_TOKEN = need("LEDGER_TOKEN");
const CONTROL = need("LEDGER_CONTROL_URL");

function need(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through tests/sdk/js/test_js_client.py`);
  return value;
}

export function newId(prefix = "r") {
  return `${prefix}-${randomBytes(8).toString("hex")}`;
}

export function claimId() {
  return randomBytes(16).toString("hex");
}

export const key = () => [newId("r"), newId("c")];

/** Asks test_js_client.py to do something only it can: see Control there. */
export async function control(action, params = {}) {
  const response = await fetch(`${CONTROL}/${action}?${new URLSearchParams(params)}`, { method: "POST" });
  const text = await response.text();
  assert.equal(response.status, 200, `control ${action}: ${text}`);
  return JSON.parse(text);
}

export async function token(role, tenant = "t1") {
  return (await control("token", { role, tenant })).token;
}

export function agent(options = {}) {
  return new Ledger({ url: URL, token: AGENT_TOKEN, ...options });
}

/** A Ledger with a router token of a tenant of its own: the retry budget is per tenant. */
export async function router() {
  return new Ledger({ url: URL, token: await token("router", newId("t")) });
}

/** A Ledger that may read every request of tenant t1. */
export async function reviewer() {
  return new Ledger({ url: URL, token: await token("router") });
}

export function toolPath(rid, cid, action) {
  return `/v1/requests/${rid}/tool-calls/${cid}` + (action ? `/${action}` : "");
}

/** A plain HTTP POST, as another holder would make it; resolves {status, json}. */
export async function rawPost(path, body, tok = AGENT_TOKEN) {
  const response = await fetch(URL + path, {
    method: "POST", body: typeof body === "string" ? body : JSON.stringify(body),
    headers: { authorization: `Bearer ${tok}`, "content-type": "application/json" },
  });
  return { status: response.status, json: await response.json() };
}

export function rawClaim(rid, cid, fields = {}) {
  return rawPost(toolPath(rid, cid, "claim"), { claim_id: claimId(), ...fields });
}

export async function eventTypes(rid) {
  return (await (await reviewer()).getRequest(rid)).events.map((e) => e.type);
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function mustNotRun(_token, key) {
  assert.fail(`the tool ran again for ${key}`);
}

/** A tool function that counts its calls and returns `result` (or throws `error`). */
export function countingTool(result = null, error = null) {
  const tool = async (fencingToken, idempotencyKey) => {
    tool.calls.push([idempotencyKey, fencingToken]);
    if (error !== null) throw error;
    return result;
  };
  tool.calls = [];
  return tool;
}

/** Resolves with the error `promise` rejects with, checked to be an instance of `kind`. */
export async function rejection(promise, kind) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof kind, `expected ${kind.name}, got ${e?.stack ?? e}`);
    return e;
  }
  assert.fail(`expected ${kind.name}, but it resolved`);
}
