/*
 * sdk/programs/ledger-mcp/call.h: one intercepted tools/call of the Streamable HTTP
 * transport, run on a thread of its own (claimed, forwarded, recorded)
 * while the connection that asked for it reads the bytes of its answer as
 * they come. A client that goes away stops neither the call nor its
 * recording. http.c answers the client; this module knows no HTTP server.
 */
#ifndef MCP_CALL_H
#define MCP_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "ledger/common/buf.h"
#include "sdk/programs/ledger-mcp/message.h"
#include "sdk/programs/ledger-mcp/proxy.h"
#include "sdk/programs/ledger-mcp/upstream.h"

struct mcp_call; /* opaque; reference-counted */

/* What the client's answer starts with, once it is known. */
struct mcp_call_head {
	bool stream;                      /* an event stream: read it with mcp_call_read() */
	long status;                      /* the server's when it frames the answer, else 200 */
	const struct mcp_header *headers; /* the server's, when it frames the answer; NULL:
	                                     the proxy's own JSON answer */
	size_t n_headers;
	const char *body; /* not a stream: the whole answer, borrowed from the call */
	size_t len;
};

/**
 * Starts the keyed tools/call @p msg (mcp_intercept_plan() said CLAIM) on a
 * thread of its own, to be forwarded to @p url with @p headers and @p body.
 * Takes all four (the message borrows the body's bytes): on success they
 * are the call's, and the caller holds one reference.
 * @return the call, or NULL (nothing was claimed or sent; the four are
 *         freed) when memory or a thread is lacking
 */
struct mcp_call *mcp_call_start(struct mcp_proxy *p, char *url, struct mcp_header *headers,
				size_t n_headers, struct ledger_buf *body, struct mcp_message *msg);

/**
 * Waits until the answer's start is known and fills @p out (borrowed from
 * @p c while the caller holds its reference).
 * @return false when it could not be kept (out of memory)
 */
bool mcp_call_head(struct mcp_call *c, struct mcp_call_head *out);

/**
 * Reads up to @p max bytes of a streamed answer, waiting for them.
 * @return the count, 0 at the end, -1 when the stream cannot be whole
 */
ssize_t mcp_call_read(struct mcp_call *c, char *buf, size_t max);

/** Takes one more reference. */
void mcp_call_hold(struct mcp_call *c);

/** Drops one reference; the last frees the call. NULL-safe. */
void mcp_call_release(struct mcp_call *c);

/** The client's request is over: nothing more is queued for it; the call goes on. */
void mcp_call_client_gone(struct mcp_call *c);

/**
 * The notifications/cancelled @p m, sent with @p headers: the call of that
 * id in the same Mcp-Session-Id waits for the server's answer one lease
 * more, then gives up (its claim stays: a cancellation is no proof that
 * nothing ran).
 */
void mcp_call_cancel(const struct mcp_header *headers, size_t n_headers,
		     const struct mcp_message *m);

/**
 * Stopping: a call whose answer was given stops passing the rest of the
 * server's stream on, and this waits, without a bound, until every call
 * has ended: each one's outcome must be recorded.
 */
void mcp_call_drain(void);

#endif
