// docs/guides/agent-frameworks.mjs: the key of an inference call, sent through
// the OpenAI model providers of the AI SDK, LangChain.js and the OpenAI Agents
// SDK (docs/guide-agent.md, "Through a framework").
//
//   node docs/guides/agent-frameworks.mjs ai|langchain|agents RUN_ID
//
// Each asks the model once through the gateway (GATEWAY_URL, by default
// http://127.0.0.1:8000/v1), with the key RUN_ID:0, and prints the answer.
// Run it again with the same RUN_ID: the gateway replays the answer, and the
// model is not asked again.
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { Agent, OpenAIChatCompletionsModel, run, setTracingDisabled } from "@openai/agents";
import { streamText } from "ai";
import OpenAI from "openai";

const [framework, runId] = process.argv.slice(2);
const baseURL = process.env.GATEWAY_URL ?? "http://127.0.0.1:8000/v1";
const apiKey = process.env.GATEWAY_API_KEY ?? "team-a"; // Authorization: the scope of the keys
const key = { "Idempotency-Key": `${runId}:0` };
const prompt = "Where is my refund?";

// The AI SDK: `headers` of the call (those of createOpenAI go with every call).
// provider.chat() is the Chat Completions API; provider() would be the
// Responses API, which the gateway does not serve.
async function withAiSdk() {
  const provider = createOpenAI({ baseURL, apiKey });
  const result = streamText({ model: provider.chat("stand-in"), prompt, headers: key });
  return await result.text;
}

// LangChain.js: the defaultHeaders of the model's openai client, so one model
// per key. (A call's `options.headers` reaches only an unstreamed call in
// @langchain/openai 1.6.0: a streamed one drops it.)
async function withLangChain() {
  const model = new ChatOpenAI({
    model: "stand-in", apiKey, configuration: { baseURL, defaultHeaders: key },
  });
  let text = "";
  for await (const chunk of await model.stream(prompt)) {
    text += chunk.content;
  }
  return text;
}

// The OpenAI Agents SDK: the defaultHeaders of the openai client its model uses
// (or setDefaultOpenAIClient(client) with setOpenAIAPI("chat_completions")).
// The gateway serves streamed requests only: run with stream: true.
async function withAgentsSdk() {
  setTracingDisabled(true); // no traces sent to OpenAI's platform
  const client = new OpenAI({ baseURL, apiKey, defaultHeaders: key });
  const agent = new Agent({
    name: "support",
    instructions: "Answer the customer.",
    model: new OpenAIChatCompletionsModel(client, "stand-in"),
  });
  const result = await run(agent, prompt, { stream: true });
  await result.completed;
  return result.finalOutput;
}

const ask = { ai: withAiSdk, langchain: withLangChain, agents: withAgentsSdk }[framework];
if (ask === undefined || !runId) {
  console.error("usage: node docs/guides/agent-frameworks.mjs ai|langchain|agents RUN_ID");
  process.exit(2);
}
console.log(framework, await ask());
