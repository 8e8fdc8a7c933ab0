/*
 * sdk/programs/ledger-mcp/stdio.h: ledger-mcp between a client and the server it runs as
 * its child, over stdio: one JSON-RPC message per line each way.
 */
#ifndef MCP_STDIO_H
#define MCP_STDIO_H

#include "sdk/programs/ledger-mcp/proxy.h"

/**
 * Starts the server (p->set->server_argv), forwards every line both ways
 * and intercepts tools/call until the client closes stdin or the server
 * exits; calls in flight are answered before it returns.
 * @return the exit status for main(): the server's, or 1 when it could
 *         not be started
 */
int mcp_stdio_run(struct mcp_proxy *p);

#endif
