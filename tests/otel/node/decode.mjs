// tests/otel/node/decode.mjs: OTLP trace requests read with the official
// schema: the code @opentelemetry/otlp-transformer generated from
// opentelemetry-proto. A long-lived filter: each frame on stdin (a 4-byte
// big-endian length, a kind byte, the body) gives one line on stdout,
// {"ok": <the request as OTLP/JSON>} or {"error": "..."}. Kind "p": the body
// is an ExportTraceServiceRequest in protobuf. Kind "j": it is OTLP/JSON,
// read into the schema's message, written as protobuf and read back, so
// any field the schema does not know is missing from the answer.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const root = require('./node_modules/@opentelemetry/otlp-transformer/build/src/generated/root.js');
const Request = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

// OTLP/JSON writes ids as hex; toObject gives them as byte arrays.
const ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId']);

function hexIds(value, key) {
  if (Array.isArray(value) && ID_FIELDS.has(key)) {
    return Buffer.from(value).toString('hex');
  }
  if (Array.isArray(value)) return value.map((v) => hexIds(v, null));
  if (value && typeof value === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = hexIds(v, k);
    return out;
  }
  return value;
}

function decode(body) {
  const message = Request.decode(body);
  const object = Request.toObject(message, { longs: String, enums: Number, bytes: Array });
  return hexIds(object, null);
}

// OTLP/JSON's hex ids as the bytes fromObject wants (it reads strings as base64).
function idBytes(value, key) {
  if (typeof value === 'string' && ID_FIELDS.has(key)) return Buffer.from(value, 'hex');
  if (Array.isArray(value)) return value.map((v) => idBytes(v, null));
  if (value && typeof value === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = idBytes(v, k);
    return out;
  }
  return value;
}

function throughSchema(text) {
  const message = Request.fromObject(idBytes(JSON.parse(text), null));
  return decode(Request.encode(message).finish());
}

let pending = Buffer.alloc(0);
process.stdin.on('data', (chunk) => {
  pending = Buffer.concat([pending, chunk]);
  while (pending.length >= 4) {
    const len = pending.readUInt32BE(0);
    if (pending.length < 4 + len) break;
    const kind = String.fromCharCode(pending[4]);
    const body = pending.subarray(5, 4 + len);
    pending = pending.subarray(4 + len);
    let line;
    try {
      const ok = kind === 'j' ? throughSchema(body.toString('utf8')) : decode(body);
      line = JSON.stringify({ ok });
    } catch (err) {
      line = JSON.stringify({ error: String(err && err.message ? err.message : err) });
    }
    process.stdout.write(line + '\n');
  }
});
process.stdin.on('end', () => process.exit(0));
