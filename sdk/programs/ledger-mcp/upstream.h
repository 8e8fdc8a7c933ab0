/*
 * sdk/programs/ledger-mcp/upstream.h: one request forwarded to the MCP server, through a
 * libcurl transfer its reader drives. The reader pulls the answer's head
 * and body bytes as they come, so a stream is passed on at the server's
 * pace, and learns at the end whether anything was sent at all: a server
 * never reached certainly ran nothing. On the transfer: the forward of an
 * intercepted tools/call, which finds the server's response in its answer,
 * and the reading of a passed-through tools/list answer for tool hints.
 */
#ifndef MCP_UPSTREAM_H
#define MCP_UPSTREAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/buf.h"
#include "ledger/common/err.h"
#include "sdk/programs/ledger-mcp/intercept.h"
#include "sdk/programs/ledger-mcp/proxy.h"
#include "sdk/programs/ledger-mcp/sse.h"

/* One header field; an array of them owns its strings. */
struct mcp_header {
	char *name;
	char *value;
};

struct mcp_upstream_request {
	const char *method;               /* borrowed for the call */
	const char *url;                  /* borrowed for the call */
	const struct mcp_header *headers; /* sent as they are; borrowed for the call */
	size_t n_headers;
	const char *body; /* borrowed until mcp_upstream_close(); may be NULL */
	size_t body_len;
};

enum mcp_upstream_end {
	MCP_UPSTREAM_RUNNING,     /* the answer is still coming */
	MCP_UPSTREAM_COMPLETE,    /* the whole answer came */
	MCP_UPSTREAM_UNREACHABLE, /* no byte was sent: no such host, connection refused, TLS */
	MCP_UPSTREAM_BROKEN,      /* sent, and the answer broke off or never came */
};

struct mcp_upstream; /* opaque: a libcurl transfer and the answer's bytes not yet read */

/**
 * Starts sending @p req. Nothing is read before mcp_upstream_pump().
 * libcurl's own defaults (Accept, Expect, a form Content-Type) are not
 * added: the server gets the headers given and the body's length.
 * @param out on LEDGER_OK a new transfer; close it with mcp_upstream_close()
 * @return LEDGER_OK or LEDGER_ERR_NOMEM (libcurl refused the transfer)
 */
LEDGER_MUSTCHECK enum ledger_err mcp_upstream_open(const struct mcp_upstream_request *req,
						   struct mcp_upstream **out);

/**
 * Runs the transfer until something new came (head, bytes, its end) or
 * @p wait_ms passed. Not thread-safe: one thread reads a transfer.
 */
void mcp_upstream_pump(struct mcp_upstream *u, int wait_ms);

/**
 * Whether the answer's head is in; then @p status (if not NULL) is its
 * status. Once in, the head never changes: another thread may read it
 * (with mcp_upstream_headers()) after learning so under a lock.
 */
bool mcp_upstream_head(const struct mcp_upstream *u, long *status);

/** The answer's header fields, as the server sent them; borrowed from @p u. */
const struct mcp_header *mcp_upstream_headers(const struct mcp_upstream *u, size_t *n);

/** The value of header @p name (case-insensitive), borrowed, or NULL. */
const char *mcp_upstream_header(const struct mcp_upstream *u, const char *name);

/** The answer's Content-Length, or -1 when it gave none (chunked, until close). */
long long mcp_upstream_length(const struct mcp_upstream *u);

/** The body bytes received and not yet consumed, borrowed until the next call on @p u. */
const char *mcp_upstream_bytes(const struct mcp_upstream *u, size_t *len);

/** Marks the first @p n bytes mcp_upstream_bytes() gave as read. */
void mcp_upstream_consume(struct mcp_upstream *u, size_t n);

/**
 * How the transfer ended (MCP_UPSTREAM_RUNNING while it runs); @p why,
 * @p why_len bytes, receives libcurl's reason for a failure.
 */
enum mcp_upstream_end mcp_upstream_outcome(const struct mcp_upstream *u, char *why, size_t why_len);

/** Cuts the transfer if it still runs and frees it. NULL-safe. */
void mcp_upstream_close(struct mcp_upstream *u);

/**
 * Whether header @p name is hop-by-hop (Connection, Keep-Alive, TE,
 * Trailer, Transfer-Encoding, Upgrade, Proxy-*, or one the message's
 * @p connection header, NULL if none, names) or framing that each hop
 * sets anew (Host, Content-Length): never forwarded either way.
 */
bool mcp_upstream_hop_by_hop(const char *name, const char *connection);

/**
 * Appends a copy of a field to the array @p h of @p n fields with room for
 * @p cap, which it grows. @return false when out of memory (nothing added)
 */
bool mcp_upstream_headers_add(struct mcp_header **h, size_t *n, size_t *cap, const char *name,
			      size_t name_len, const char *value, size_t value_len);

/** Removes (and frees) every header named @p name of the @p n at @p h. @return how many stay */
size_t mcp_upstream_headers_drop(struct mcp_header *h, size_t n, const char *name);

/** Frees @p n headers at @p h and the array. NULL-safe. */
void mcp_upstream_headers_free(struct mcp_header *h, size_t n);

/**
 * Splits the http(s) URL @p url into its origin (scheme://host[:port],
 * where every request goes) and its path ("/" when it has none).
 * @param origin, path new strings (free with free()) on true
 * @return false when it is not an http(s) URL with a host, or no memory
 */
bool mcp_upstream_split(const char *url, char **origin, char **path);

/* --- an intercepted tools/call: its forward for mcp_intercept_run() --- */

/* What the server's answer was, for the client's answer. */
enum mcp_upstream_answer {
	MCP_UPSTREAM_ANSWER_NONE,    /* nothing of the server's to show */
	MCP_UPSTREAM_ANSWER_JSON,    /* a 2xx JSON response: its head frames the client's answer */
	MCP_UPSTREAM_ANSWER_STREAM,  /* an event stream: the response was one of its events */
	MCP_UPSTREAM_ANSWER_REFUSAL, /* a whole 4xx: the server's own refusal, in refusal */
};

/* What the forward tells the side that answers the client, on the forward's thread. */
struct mcp_upstream_sink {
	void *ctx;
	/* The answer is an event stream (head in call->up): the client's answer may start. */
	void (*stream)(void *ctx);
	/* An event of the stream that is not the response: @p n bytes, as they came. */
	void (*event)(void *ctx, const char *raw, size_t n);
};

struct mcp_upstream_call {
	struct mcp_upstream_request req; /* the client's request, sent byte for byte */
	const char *id_key;              /* mcp_message_id_key() of its id; borrowed */
	uint32_t timeout_ms;             /* --call-timeout-ms: 0, no bound */
	uint32_t cancel_grace_ms;      /* how long a cancelled call's answer is still waited for */
	_Atomic uint64_t cancelled_ms; /* when the client cancelled it (monotonic ms); 0: not */
	struct mcp_upstream_sink sink;
	/* set by mcp_upstream_forward(); freed by mcp_upstream_call_free() */
	struct mcp_upstream *up; /* the transfer: a stream goes on past its response */
	enum mcp_upstream_answer answer;
	struct mcp_sse events;        /* STREAM: the bytes after the response event */
	struct ledger_buf event_head; /* STREAM: the response event's id: and event: lines */
	struct ledger_buf refusal;    /* REFUSAL: the server's body */
};

/**
 * Sends @p c->req and waits for the response to it: a 2xx JSON body, or
 * the event of a 2xx event stream whose data is a response with the call's
 * id (every other event goes to the sink as it comes). A server never
 * reached, or one that answered 4xx, did not run it (MCP_SENT_REFUSED);
 * any other end (5xx, a cut, no response in @p c->timeout_ms, or none in
 * @p c->cancel_grace_ms once cancelled) may have run it (MCP_SENT_LOST).
 * @param out zeroed; filled as mcp_forward_fn says
 */
void mcp_upstream_forward(struct mcp_upstream_call *c, struct mcp_forward *out);

/** Frees what mcp_upstream_forward() set in @p c, and closes its transfer. NULL-safe. */
void mcp_upstream_call_free(struct mcp_upstream_call *c);

/* --- a passed-through tools/list answer, read for the hints of its tools --- */

struct mcp_upstream_tap {
	bool on;     /* read the answer: --trust-annotations and a tools/list */
	bool sse;    /* it is an event stream, else one JSON body */
	bool broken; /* unreadable or too long: given up */
	struct mcp_sse events;
	struct ledger_buf json;
};

/** The head of @p up is in: reads a 2xx answer only, as JSON or events. */
void mcp_upstream_tap_start(struct mcp_upstream_tap *t, const struct mcp_upstream *up);

/** Reads @p n more bytes of the answer; each response in it goes to mcp_intercept_note_tools(). */
void mcp_upstream_tap_feed(struct mcp_upstream_tap *t, struct mcp_proxy *p, const char *bytes,
			   size_t n);

/** The answer ended whole: a JSON body is read now. */
void mcp_upstream_tap_end(struct mcp_upstream_tap *t, struct mcp_proxy *p);

/** Frees what @p t holds. NULL-safe. */
void mcp_upstream_tap_free(struct mcp_upstream_tap *t);

#endif
