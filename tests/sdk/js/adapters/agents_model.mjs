// The Agents SDK's side of the adapter tests: a Model that plays a script, so no
// network is needed; each call gets a fresh per-decode id, as an engine gives it.
import { Usage } from "@openai/agents";
import { decodeId } from "./helpers.mjs";

/** A Model that plays @script, one turn per call: a list of tool calls, or a final message. */
export class ScriptedModel {
  constructor(script) { this.script = script; this.turn = 0; }
  async getResponse() {
    const calls = this.script[this.turn++];
    const output = calls
      ? calls.map(([name, args]) => ({ type: "function_call", callId: decodeId(), name,
                                        arguments: JSON.stringify(args), status: "completed" }))
      : [{ type: "message", role: "assistant", status: "completed",
           content: [{ type: "output_text", text: "done" }] }];
    return { usage: new Usage(), output, responseId: decodeId() };
  }
  async *getStreamedResponse() { throw new Error("not scripted"); }
}
