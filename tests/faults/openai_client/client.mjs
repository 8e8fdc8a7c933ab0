// The official openai client consuming one streamed completion from the gateway.
//
//   node client.mjs GATEWAY_URL SEED MAX_TOKENS
//
// Prints one JSON line: {"request_id", "text", "attempt_ids", "error"}, where
// "text" is the content the client received, "attempt_ids" the distinct
// system_fingerprint values of its chunks (the fake replicas put the attempt id
// there), and "error" null or {"code", "message", "status"} as the client
// raised it (an SSE event whose JSON has an "error" key raises an APIError
// whose .code is that error's code).
import OpenAI from "openai";

const [gatewayUrl, seed, maxTokens] = process.argv.slice(2);
const client = new OpenAI({
  baseURL: gatewayUrl + "/v1",
  apiKey: "unused",
  maxRetries: 0,
  timeout: 30000,
});

const result = { request_id: null, text: "", attempt_ids: [], error: null };
try {
  const { data: stream, response } = await client.chat.completions
    .create({
      model: "fake",
      messages: [{ role: "user", content: "Open a ticket for the fault drill." }],
      stream: true,
      seed: Number(seed),
      max_tokens: Number(maxTokens),
    })
    .withResponse();
  result.request_id = response.headers.get("x-request-id");
  for await (const chunk of stream) {
    if (!result.attempt_ids.includes(chunk.system_fingerprint)) {
      result.attempt_ids.push(chunk.system_fingerprint);
    }
    result.text += chunk.choices[0]?.delta?.content ?? "";
  }
} catch (e) {
  result.request_id ??= e.requestID ?? null;
  result.error = { code: e.code ?? null, message: String(e.message), status: e.status ?? null };
}
console.log(JSON.stringify(result));
