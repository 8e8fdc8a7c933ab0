npm ci --prefix sdk/js                      # the client's pinned TypeScript; builds sdk/js/dist
npm ci --prefix docs/guides --ignore-scripts  # links the client; the MCP SDK for the next part
node docs/guides/agent.mjs req-js-1         # sends the three emails
node docs/guides/agent.mjs req-js-1         # a rerun: replays all three, sends nothing
