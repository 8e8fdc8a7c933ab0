// The client end of test_gateway_tracing.py's one trace: an agent's span,
// made by the official OpenTelemetry JS SDK and exported over OTLP/HTTP
// (JSON), inside which the official openai client streams a completion
// from ledger-gateway with the span's context injected as traceparent by
// the W3C propagator.
//
//   node client.mjs GATEWAY_URL OTLP_TRACES_URL
//
// Prints one JSON line: {"trace_id", "span_id", "text", "request_id"}.
import { context, propagation, trace, SpanKind } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import OpenAI from "openai";

const [gateway, otlp] = process.argv.slice(2);

const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ "service.name": "agent" }),
  spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: otlp }))],
});
trace.setGlobalTracerProvider(provider);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());

const tracer = trace.getTracer("gateway-tracing-test");
const out = await tracer.startActiveSpan("agent turn", { kind: SpanKind.CLIENT }, async (span) => {
  // What an instrumented fetch would add: the active context, as W3C headers.
  const headers = {};
  propagation.inject(context.active(), headers);
  const client = new OpenAI({ baseURL: gateway + "/v1", apiKey: "not-checked", maxRetries: 0 });
  let text = "";
  const { data: stream, response } = await client.chat.completions
    .create({ model: "m", messages: [{ role: "user", content: "run the tool" }], stream: true },
            { headers })
    .withResponse();
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
  span.end();
  const ctx = span.spanContext();
  return { trace_id: ctx.traceId, span_id: ctx.spanId, text,
           request_id: response.headers.get("x-request-id") };
});
await provider.forceFlush();
await provider.shutdown();
console.log(JSON.stringify(out));
