// tests/otel/node/emit.mjs: the spans of a script (the format of
// tests/otel/trace_emit.c, read from stdin) made with the official
// OpenTelemetry JS SDK and sent by its own OTLP exporter, so that a test
// can read them beside the C tracer's.
// Usage: node emit.mjs http/json|http/protobuf URL SERVICE_NAME < script
import { readFileSync } from 'node:fs';
import { context, trace, SpanKind, SpanStatusCode, TraceFlags } from '@opentelemetry/api';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';

const [protocol, url, service] = process.argv.slice(2);
const Exporter = protocol === 'http/json' ? JsonExporter : ProtoExporter;
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ 'service.name': service }),
  spanProcessors: [new SimpleSpanProcessor(new Exporter({ url }))],
});
const tracer = provider.getTracer('ledgerd-emit-js', '1.0.0');

// OTLP's SpanKind numbers (the script's) against the API's enum.
const KINDS = { 1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT };

function value(type, text) {
  switch (type) {
    case 's': return text;
    case 'i': return Number.parseInt(text, 10);
    case 'b': return text === 'true';
    case 'd': return Number.parseFloat(text);
    default: throw new Error(`unknown type ${type}`);
  }
}

function parentContext(parent, spans) {
  if (parent === '-') return context.active();
  if (spans.has(parent)) return trace.setSpan(context.active(), spans.get(parent));
  const [, traceId, spanId, flags] = parent.split('-');
  return trace.setSpanContext(context.active(), {
    traceId, spanId, isRemote: true,
    traceFlags: Number.parseInt(flags, 16) & 1 ? TraceFlags.SAMPLED : TraceFlags.NONE,
  });
}

const spans = new Map();
for (const line of readFileSync(0, 'utf8').split('\n')) {
  if (!line.trim()) continue;
  const f = line.split('\t');
  const span = spans.get(f[1]);
  switch (f[0]) {
    case 'span':
      spans.set(f[1], tracer.startSpan(f[2], { kind: KINDS[f[3]] }, parentContext(f[4], spans)));
      break;
    case 'attr':
      span.setAttribute(f[2], value(f[3], f[4]));
      break;
    case 'event': {
      const attrs = {};
      for (let i = 3; i + 2 < f.length; i += 3) attrs[f[i]] = value(f[i + 1], f[i + 2]);
      span.addEvent(f[2], attrs);
      break;
    }
    case 'status': {
      const code = Number.parseInt(f[2], 10);
      span.setStatus(code === 2 ? { code: SpanStatusCode.ERROR, message: f[3] } : { code });
      break;
    }
    case 'end':
      span.end();
      break;
    default:
      break; // the C program's own commands (spam, context) have no part here
  }
}
await provider.forceFlush();
await provider.shutdown();
