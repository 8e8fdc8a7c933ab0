// tests/otel/node/decode.mjs: OTLP/protobuf trace requests read with the
// official schema: the code @opentelemetry/otlp-transformer generated from
// opentelemetry-proto. A long-lived filter: each frame on stdin (a 4-byte
// big-endian length, then an ExportTraceServiceRequest) gives one line on
// stdout, {"ok": <the request as OTLP/JSON>} or {"error": "..."}.
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

let pending = Buffer.alloc(0);
process.stdin.on('data', (chunk) => {
  pending = Buffer.concat([pending, chunk]);
  while (pending.length >= 4) {
    const len = pending.readUInt32BE(0);
    if (pending.length < 4 + len) break;
    const body = pending.subarray(4, 4 + len);
    pending = pending.subarray(4 + len);
    let line;
    try {
      line = JSON.stringify({ ok: decode(body) });
    } catch (err) {
      line = JSON.stringify({ error: String(err && err.message ? err.message : err) });
    }
    process.stdout.write(line + '\n');
  }
});
process.stdin.on('end', () => process.exit(0));
