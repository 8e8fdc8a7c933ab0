// RFC 8785 fingerprints of the TypeScript client (sdk/js): the published
// vectors and the 30,000 doubles of tests/data/jcs, the exact-number rule's
// cases (exact_numbers.txt, read by the C and Python tests too), JS values,
// and fingerprints equal to the one the live ledgerd computes.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, existsSync } from "node:fs";
import { test } from "node:test";

import { argsSha256, canonicalize, canonicalizeText } from "../../../sdk/js/dist/index.js";
import { agent, key, rawPost, toolPath } from "./helpers.mjs";

const JCS = new URL("../../data/jcs/", import.meta.url);
const read = (name) => readFileSync(new URL(name, JCS));
const sha256 = (text) => createHash("sha256").update(text, "utf8").digest("hex");

test("the RFC 8785 vector files", () => {
  const names = readdirSync(new URL("input/", JCS)).filter((n) => n.endsWith(".json"));
  assert.ok(names.length >= 6);
  for (const name of names) {
    // exact_output/ holds the vectors the exact-number rule changes (tests/data/jcs/README.md).
    const expected = existsSync(new URL(`exact_output/${name}`, JCS)) ? `exact_output/${name}` : `output/${name}`;
    assert.equal(canonicalizeText(read(`input/${name}`)), read(expected).toString("utf8"), name);
  }
});

test("the 30,000 doubles of numbers.txt, as values and as texts", () => {
  const lines = read("numbers.txt").toString().split("\n").filter(Boolean);
  assert.ok(lines.length > 30000);
  const wrong = [];
  for (const line of lines) {
    const [pattern, want] = line.split(",");
    const got = canonicalize(Buffer.from(pattern, "hex").readDoubleBE(0));
    const again = canonicalizeText(want);
    if (got !== want || again !== want) wrong.push([pattern, want, got, again]);
  }
  assert.deepEqual(wrong, []);
});

test("the exact-number rule: every case of exact_numbers.txt", () => {
  const cases = read("exact_numbers.txt").toString().split("\n")
    .filter((line) => line && !line.startsWith("#")).map((line) => line.split("\t"));
  assert.ok(cases.length >= 100);
  const wrong = [];
  for (const [text, want] of cases) {
    let got;
    try {
      got = canonicalizeText(text);
    } catch (e) {
      got = e instanceof RangeError ? "refused" : String(e);
    }
    if (got !== want || (want !== "refused" && canonicalizeText(want) !== want)) wrong.push([text, want, got]);
  }
  assert.deepEqual(wrong, []);
});

test("JS values: bigints keep their digits, doubles are written as JCS writes them", () => {
  assert.equal(canonicalize({ b: [1, 2.5, true, null], a: "x" }), '{"a":"x","b":[1,2.5,true,null]}');
  assert.equal(canonicalize(-0), "0");
  assert.equal(canonicalize(1e21), "1e+21");
  assert.equal(canonicalize(1.5e-7), "1.5e-7");
  assert.equal(canonicalize(0.000001), "0.000001");
  assert.equal(canonicalize(0.1 + 0.2), "0.30000000000000004");
  assert.equal(canonicalize(2n ** 53n + 1n), "9007199254740993");
  assert.equal(canonicalize(-(2n ** 64n) - 1n), "-18446744073709551617");
  assert.equal(canonicalize(10n ** 21n), "1e+21");
  assert.equal(canonicalize(10n ** 22n + 1n), "1.0000000000000000000001e+22");
  // What JSON.stringify would send: undefined members left out, toJSON applied.
  assert.equal(canonicalize({ a: undefined, d: new Date(0) }), '{"d":"1970-01-01T00:00:00.000Z"}');
  assert.equal(canonicalize("\u2028\x7f\x1f\b\"\\/"), '"\u2028\x7f\\u001f\\b\\"\\\\/"');
  // UTF-16 order: U+1F600 (surrogates D83D..) sorts before U+E000.
  assert.equal(canonicalize({ "\ue000": 1, "\u{1f600}": 2 }), '{"\u{1f600}":2,"\ue000":1}');
  for (const bad of [NaN, Infinity, -Infinity, 10n ** 400n, "\ud800", { k: "\udc00" }]) {
    assert.throws(() => canonicalize(bad), RangeError, String(bad));
  }
  const cyclic = {};
  cyclic.self = cyclic;
  for (const bad of [undefined, () => 1, Symbol("s"), [undefined], cyclic]) {
    assert.throws(() => canonicalize(bad), TypeError);
  }
  assert.equal(argsSha256({ a: 1 }), sha256('{"a":1}'));
});

test("JSON texts: strict JSON, numbers by their own digits", () => {
  for (const bad of ['{"a": 1, "a": 2}', "[NaN]", '{"a": 1', "01", "[1,]", "\ufeff1", '"\t"', "1 2"]) {
    assert.throws(() => canonicalizeText(bad), SyntaxError, bad);
  }
  assert.throws(() => canonicalizeText("[1e400]"), RangeError);
  assert.throws(() => canonicalizeText('"\\ud800"'), RangeError);
  assert.throws(() => canonicalizeText(Buffer.from([0x22, 0xff, 0x22])), TypeError);
  assert.equal(canonicalizeText("123456789012345678901234567890"), "1.2345678901234567890123456789e+29");
  assert.equal(canonicalizeText(" { \"b\" : [ 1.10 , -0 , 1E+2 , 12.5e-7 ] , \"a\" : { } } "),
               '{"a":{},"b":[1.1,0,100,0.00000125]}');
  // Exponents of any length stay exact.
  assert.equal(canonicalizeText("1.5e-" + "9".repeat(5000)), "1.5e-" + "9".repeat(5000));
  assert.equal(canonicalizeText("0e" + "9".repeat(5000)), "0");
  assert.throws(() => canonicalizeText("1e" + "9".repeat(5000)), RangeError);
});

// JSON texts as an agent's framework might send them: unsorted, spaced,
// numbers past 2^53 and past 17 digits, strings JCS escapes or sorts oddly.
const FINGERPRINT_TEXTS = [
  '{"to": "ana@example.com", "subject": "Your refund", "amount": 12.5}',
  '{"z": [1, 2.0, -0.0, 1e21, 1e-7, 123456789.125], "a": {"nested": [true, false, null]}}',
  '{"\u20ac": "euro", "\ud83d\ude00": "smiley", "\ufb33": "dalet", "\\n": "newline", "ctl": "\\u0001\\u001f\u007f", "quote": "\\"\\\\/"}',
  "[333333333.33333329, 4.5, 2e-3, 1e-27, 9007199254740993]",
  '{"order_id": 1234567890123456789, "big": 1000000000000000000000000000007, "neg": -9223372036854775809}',
  '"just a string"',
];

test("fingerprints equal the server's: args_sha256 of a claimed call", async () => {
  for (const text of FINGERPRINT_TEXTS) {
    const [rid, cid] = key();
    const claimed = await rawPost(toolPath(rid, cid, "claim"), `{"claim_id": "${"a".repeat(32)}", "args": ${text}}`);
    assert.equal(claimed.status, 201, text);
    const call = await agent().getToolCall(rid, cid);
    assert.equal(call.args_sha256, sha256(canonicalizeText(text)), text);
  }
  // JS values, bigints among them, as toolCall sends them (storeArgs: the canonical text itself).
  const args = { order_id: 1234567890123456789n, amount: 12.5, note: "caf\u00e9", when: new Date(0), list: [-0, 1e-7] };
  const [rid, cid] = key();
  await agent().toolCall({ requestId: rid, toolCallId: cid, args, storeArgs: true }, () => "ok");
  const call = await agent().getToolCall(rid, cid);
  assert.equal(call.args_sha256, argsSha256(args));
  assert.equal(call.args.note, "caf\u00e9");
  const [rid2, cid2] = key();
  await agent().toolCall({ requestId: rid2, toolCallId: cid2, args }, () => "ok");
  assert.equal((await agent().getToolCall(rid2, cid2)).args_sha256, argsSha256(args));
});
