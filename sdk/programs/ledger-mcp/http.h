/*
 * sdk/programs/ledger-mcp/http.h: ledger-mcp in front of a Streamable HTTP server: every
 * request forwarded to it unchanged, its answers (JSON or an SSE stream)
 * streamed back, and a POSTed tools/call intercepted.
 */
#ifndef MCP_HTTP_H
#define MCP_HTTP_H

#include "sdk/programs/ledger-mcp/proxy.h"

/**
 * Listens on p->set->listen and forwards to p->set->upstream until
 * SIGTERM or SIGINT; calls in flight are answered before it returns.
 * @return the exit status for main(): 0, or 1 when it could not listen
 */
int mcp_http_run(struct mcp_proxy *p);

#endif
