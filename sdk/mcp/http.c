/*
 * sdk/mcp/http.c: the Streamable HTTP transport. Until it lands, http mode
 * says so and exits 2; stdio mode is complete without it.
 */
#include <stdio.h>

#include "sdk/mcp/http.h"

int mcp_http_run(struct mcp_proxy *p)
{
	(void)p;
	fprintf(stderr, "ledger-mcp: http mode is not in this build yet\n");
	return 2;
}
