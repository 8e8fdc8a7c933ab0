/**
 * RFC 8785 (JCS) canonical JSON with exact numbers, and the argument fingerprint.
 *
 * ledgerd recognises "the same tool call" by the SHA-256 of its arguments in
 * canonical form, so every client must produce the same bytes as the server
 * for the same JSON value, whatever key order, spacing or number spelling it
 * started from:
 *
 * - objects: members sorted by their keys' UTF-16 code units, no whitespace;
 * - strings: escaping only `"`, `\` and control characters below U+0020
 *   (`\b \t \n \f \r` short, the rest `\u00xx`); a lone surrogate is refused;
 * - numbers: laid out as ECMAScript's Number::toString lays out a double,
 *   but with the number's own exact significant digits (the exact-number
 *   rule of the API's "Fingerprints"). A JS number is a double, and
 *   `String(n)` is exactly JCS's text of it; a bigint keeps all its digits
 *   (`9007199254740993n` is not the double 2^53); a JSON text given to
 *   canonicalizeText keeps each number's digits (`1.10` is `1.1`, `1e400`
 *   beyond the double range is refused, `1e-400` below it kept).
 */

import { createHash } from "node:crypto";

/** A JSON value canonicalize() can write (bigint for integers past 2^53). */
export type JsonValue =
  | null
  | boolean
  | number
  | bigint
  | string
  | JsonValue[]
  | { [key: string]: JsonValue | undefined };

const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r",
};
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
// Every double is below 10^309: a value 0.D x 10^point with point >= 310 is
// beyond the range; at 309 only its nearest double tells.
const POINT_MAX = 309n;

function writeString(s: string): string {
  if (LONE_SURROGATE.test(s)) {
    throw new RangeError("a string has a lone surrogate, which UTF-8 cannot carry");
  }
  return '"' + s.replace(/["\\\u0000-\u001f]/g, (c) =>
    SHORT_ESCAPES[c] ?? "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")) + '"';
}

/** ECMAScript's Number::toString layout of -?0.DIGITS x 10^point (DIGITS without leading or trailing 0). */
function layout(negative: boolean, digits: string, point: bigint): string {
  const sign = negative ? "-" : "";
  const k = BigInt(digits.length);
  if (k <= point && point <= 21n) return sign + digits + "0".repeat(Number(point - k));
  if (0n < point && point <= 21n) {
    const p = Number(point);
    return sign + digits.slice(0, p) + "." + digits.slice(p);
  }
  if (-6n < point && point <= 0n) return sign + "0." + "0".repeat(Number(-point)) + digits;
  const head = digits[0] + (digits.length > 1 ? "." + digits.slice(1) : "");
  const e = point - 1n;
  return `${sign}${head}e${e >= 0n ? "+" : "-"}${e >= 0n ? e : -e}`;
}

function checkRange(digits: string, point: bigint, what: string): void {
  if (point > POINT_MAX ||
      (point === POINT_MAX && !Number.isFinite(Number(`0.${digits}e${point}`)))) {
    throw new RangeError(`a number beyond the double range has no canonical form: ${what}`);
  }
}

const NUMBER_TEXT = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/;

/** The canonical form of a JSON number's text, from its exact digits. */
function formatText(text: string): string {
  const m = NUMBER_TEXT.exec(text);
  if (m === null) throw new SyntaxError(`not a JSON number: ${text.slice(0, 40)}`);
  const [, sign, whole, fraction = "", exponent = "0"] = m;
  const mantissa = whole + fraction;
  const stripped = mantissa.replace(/^0+/, "");
  if (stripped === "") return "0"; // -0 too, whatever the exponent
  // The value is 0.DIGITS x 10^point; BigInt keeps an exponent of any length exact.
  const point = BigInt(whole.length - (mantissa.length - stripped.length)) + BigInt(exponent);
  const digits = stripped.replace(/0+$/, "");
  checkRange(digits, point, text.slice(0, 40));
  return layout(sign === "-", digits, point);
}

function formatNumber(n: number): string {
  if (!Number.isFinite(n)) throw new RangeError(`JCS has no form for ${n}`);
  // The shortest digits that read back as n, laid out as JCS asks: also the
  // digits JSON.stringify sends, so what is sent is what is hashed. -0 is "0".
  return String(n);
}

function formatBigint(b: bigint): string {
  if (!Number.isFinite(Number(b))) {
    throw new RangeError("a number beyond the double range has no canonical form: a bigint");
  }
  if (b === 0n) return "0";
  const text = (b < 0n ? -b : b).toString();
  return layout(b < 0n, text.replace(/0+$/, ""), BigInt(text.length));
}

function sortedMembers(members: [string, string][]): string {
  // Plain string comparison in JS is by UTF-16 code units, as RFC 8785 sorts.
  members.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return "{" + members.map(([k, v]) => writeString(k) + ":" + v).join(",") + "}";
}

function write(value: unknown, seen: Set<object>): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean": return value ? "true" : "false";
    case "number": return formatNumber(value);
    case "bigint": return formatBigint(value);
    case "string": return writeString(value);
    case "object": break;
    default: throw new TypeError(`${typeof value} is not a JSON value`);
  }
  const obj = value as Record<string, unknown>;
  // A Date (any toJSON) is what JSON.stringify would send: fingerprint that.
  if (typeof obj.toJSON === "function") return write(obj.toJSON(), seen);
  if (seen.has(obj)) throw new TypeError("a cyclic structure is not a JSON value");
  seen.add(obj);
  try {
    if (Array.isArray(obj)) return "[" + obj.map((v) => write(v, seen)).join(",") + "]";
    // Members left undefined are absent, as JSON.stringify leaves them out.
    return sortedMembers(Object.keys(obj).filter((k) => obj[k] !== undefined)
      .map((k): [string, string] => [k, write(obj[k], seen)]));
  } finally {
    seen.delete(obj);
  }
}

/**
 * The canonical form of a JSON value, as a string (hash its UTF-8 bytes).
 *
 * @throws RangeError for NaN, the infinities, a bigint beyond the double
 *   range, or a string with a lone surrogate; TypeError for a value JSON
 *   has no form for (a function, a symbol, undefined, a cycle).
 */
export function canonicalize(value: unknown): string {
  return write(value, new Set());
}

const JSON_NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const JSON_STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;

/** A strict JSON reader that writes each value's canonical form as it goes. */
class Canonicalizer {
  private i = 0;
  constructor(private readonly text: string) {}

  document(): string {
    const out = this.value();
    this.space();
    if (this.i < this.text.length) this.fail("text after the JSON value");
    return out;
  }

  private fail(what: string): never {
    throw new SyntaxError(`not JSON: ${what} at offset ${this.i}`);
  }

  private match(pattern: RegExp): RegExpExecArray | null {
    pattern.lastIndex = this.i; // sticky: matches here, without copying the rest of the text
    return pattern.exec(this.text);
  }

  private space(): void {
    while (/[ \t\n\r]/.test(this.text[this.i] ?? "")) this.i++;
  }

  private expect(c: string): void {
    this.space();
    if (this.text[this.i] !== c) this.fail(`expected '${c}'`);
    this.i++;
  }

  private value(): string {
    this.space();
    const c = this.text[this.i];
    if (c === "{") return this.object();
    if (c === "[") return this.array();
    if (c === '"') return writeString(this.string());
    for (const word of ["true", "false", "null"]) {
      if (this.text.startsWith(word, this.i)) {
        this.i += word.length;
        return word;
      }
    }
    const m = this.match(JSON_NUMBER) ?? this.fail("expected a value");
    this.i += m[0].length;
    return formatText(m[0]);
  }

  private string(): string {
    const m = this.match(JSON_STRING) ?? this.fail("a malformed string");
    this.i += m[0].length;
    return JSON.parse(m[0]) as string;
  }

  private array(): string {
    this.i++;
    const items: string[] = [];
    this.space();
    if (this.text[this.i] === "]") {
      this.i++;
      return "[]";
    }
    for (;;) {
      items.push(this.value());
      this.space();
      if (this.text[this.i] === "]") break;
      this.expect(",");
    }
    this.i++;
    return "[" + items.join(",") + "]";
  }

  private object(): string {
    this.i++;
    const members: [string, string][] = [];
    const keys = new Set<string>();
    this.space();
    if (this.text[this.i] === "}") {
      this.i++;
      return "{}";
    }
    for (;;) {
      this.space();
      if (this.text[this.i] !== '"') this.fail("expected a key");
      const key = this.string();
      if (keys.has(key)) this.fail(`duplicate key ${JSON.stringify(key)}`);
      keys.add(key);
      this.expect(":");
      members.push([key, this.value()]);
      this.space();
      if (this.text[this.i] === "}") break;
      this.expect(",");
    }
    this.i++;
    return sortedMembers(members);
  }
}

/**
 * The canonical form of a JSON text, exactly as ledgerd computes it: every
 * number keeps the exact digits of its text. Duplicate keys, NaN and
 * Infinity, and bytes that are not UTF-8 are refused.
 *
 * @throws SyntaxError when the text is not JSON; RangeError for a number
 *   beyond the double range or a lone surrogate.
 */
export function canonicalizeText(text: string | Uint8Array): string {
  const s = typeof text === "string" ? text : new TextDecoder("utf-8", { fatal: true }).decode(text);
  return new Canonicalizer(s).document();
}

/**
 * The fingerprint ledgerd keeps of a tool call's arguments: SHA-256 of the
 * UTF-8 bytes of canonicalize(value), 64 lowercase hex digits.
 */
export function argsSha256(value: unknown): string {
  return createHash("sha256").update(canonicalize(value), "utf8").digest("hex");
}
