// The official openai client consuming one streamed completion from the gateway.
//
//   node client.mjs GATEWAY_URL SEED MAX_TOKENS [OPTIONS]
//
// OPTIONS, a JSON object, sets the client as a user would: "maxRetries"
// (default 0 here), "timeout" in ms (default 30000) and "headers", sent with
// the request through the create() call's own headers option (an
// Idempotency-Key, say).
//
// Prints one JSON line: {"request_id", "text", "attempt_ids", "error",
// "http_requests"}, where "text" is the content the client received,
// "attempt_ids" the distinct system_fingerprint values of its chunks (the
// fake replicas put the attempt id there), "error" null or {"code",
// "message", "status"} as the client raised it (an SSE event whose JSON has
// an "error" key raises an APIError whose .code is that error's code), and
// "http_requests" the HTTP requests the client made, its own retries
// included.
import OpenAI from "openai";

const [gatewayUrl, seed, maxTokens, optionsText] = process.argv.slice(2);
const options = optionsText ? JSON.parse(optionsText) : {};
let httpRequests = 0;
const client = new OpenAI({
  baseURL: gatewayUrl + "/v1",
  apiKey: "unused",
  maxRetries: options.maxRetries ?? 0,
  timeout: options.timeout ?? 30000,
  fetch: (url, init) => {
    httpRequests += 1;
    return fetch(url, init);
  },
});

const result = { request_id: null, text: "", attempt_ids: [], error: null, http_requests: 0 };
try {
  const { data: stream, response } = await client.chat.completions
    .create(
      {
        model: "fake",
        messages: [{ role: "user", content: "Open a ticket for the fault drill." }],
        stream: true,
        seed: Number(seed),
        max_tokens: Number(maxTokens),
      },
      { headers: options.headers ?? {} },
    )
    .withResponse();
  result.request_id = response.headers.get("x-request-id");
  for await (const chunk of stream) {
    if (!result.attempt_ids.includes(chunk.system_fingerprint)) {
      result.attempt_ids.push(chunk.system_fingerprint);
    }
    result.text += chunk.choices[0]?.delta?.content ?? "";
  }
} catch (e) {
  result.request_id ??= e.requestID ?? e.headers?.get?.("x-request-id") ?? null;
  result.error = { code: e.code ?? null, message: String(e.message), status: e.status ?? null };
}
result.http_requests = httpRequests;
console.log(JSON.stringify(result));
