node docs/guides/agent-mcp.mjs req-mcp-1    # creates the entity through ledger-mcp
node docs/guides/agent-mcp.mjs req-mcp-1    # a rerun: the recorded answer; the server is not called
