// docs/guides/agent-mcp.mjs: a tool of an MCP server, run at most once per
// logical request through ledger-mcp (docs/guide-agent.md). The client is
// the official MCP SDK; the server, @modelcontextprotocol/server-memory,
// is not changed.
//
//   LEDGER_URL=... LEDGER_TOKEN=... node docs/guides/agent-mcp.mjs REQUEST_ID [ATTEMPT_ID]
//
// The tool is create_entities; its side effect is the memory server's file,
// var/memory.jsonl (MEMORY_FILE_PATH names another). Run it again with the
// same REQUEST_ID: the call never reaches the server again, and gets the
// first answer back.
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [requestId, attemptId] = process.argv.slice(2);
const server = fileURLToPath(new URL("node_modules/.bin/mcp-server-memory", import.meta.url));

// Where the client would start the server, it starts ledger-mcp, with the
// server's command after "--". ledger-mcp reads the token from LEDGER_TOKEN.
const transport = new StdioClientTransport({
  command: "build/ledger-mcp",
  args: ["stdio", "--ledger-url", process.env.LEDGER_URL, "--", server],
  env: {
    PATH: process.env.PATH,
    LEDGER_TOKEN: process.env.LEDGER_TOKEN,
    MEMORY_FILE_PATH: path.resolve(process.env.MEMORY_FILE_PATH ?? "var/memory.jsonl"),
  },
});
const client = new Client({ name: "guide-agent", version: "1.0.0" });
await client.connect(transport);

// The key: the logical request, and the call's ordinal in the conversation
// (this is its first tool call). Under a router, the attempt as well.
const meta = { "io.ledgerd/request_id": requestId, "io.ledgerd/tool_call_id": "call_00" };
if (attemptId) meta["io.ledgerd/attempt_id"] = attemptId;
try {
  const result = await client.callTool({
    name: "create_entities",
    arguments: { entities: [{ name: "Ana", entityType: "person", observations: ["refund sent"] }] },
    _meta: meta,
  });
  // replayed: an earlier run's answer, recorded by ledger-mcp; the server was not called.
  const replayed = result._meta?.["io.ledgerd/replayed"] === true;
  console.log("call_00", replayed ? "replayed" : "executed",
    result.isError ? "failed" : "succeeded", JSON.stringify(result.structuredContent));
} catch (e) {
  // -32011 outcome_unknown, -32013 attempt_fenced, -32012 args_mismatch, ...:
  // the server was not called unless e.data.server_called says so.
  console.log("call_00", `${e.data?.code ?? e.code}: ${e.data?.action ?? e.message}`);
  process.exitCode = 3;
} finally {
  await client.close();
}
