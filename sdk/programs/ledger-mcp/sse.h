/*
 * sdk/programs/ledger-mcp/sse.h: a strict reader of text/event-stream (WHATWG HTML,
 * "Server-sent events"), fed as bytes arrive. ledger-mcp passes an SSE
 * stream on event by event and must find, among its events, the one whose
 * data is the response to a tools/call: it reads events, and hands back
 * each one's exact bytes with its data.
 */
#ifndef MCP_SSE_H
#define MCP_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "ledger/common/buf.h"

/* An event longer than this is a broken stream, never buffered further. */
#define MCP_SSE_MAX_EVENT (64u << 20)

struct mcp_sse {
	struct ledger_buf buf;  /* bytes fed: the event being read first, then what follows */
	size_t pos;             /* the bytes of buf before this were read as lines */
	size_t end;             /* the first event's length once it is complete, else 0 */
	bool skip_lf;           /* the last line ended in CR: a LF right after belongs to it */
	bool started;           /* a byte of the stream was read (a leading BOM is skipped) */
	struct ledger_buf data; /* the event's data lines, each value and "\n" */
	struct ledger_buf head; /* the event's "id" and "event" lines as sent, each and "\n" */
	bool has_data;          /* the event has a data line */
	bool broken;            /* over MCP_SSE_MAX_EVENT or out of memory: nothing more is read */
};

/* One event, every pointer borrowed from the reader until mcp_sse_take(). */
struct mcp_sse_event {
	const char *raw; /* its bytes as they came, the blank line that ends it included */
	size_t raw_len;
	const char *data; /* its data lines' values joined by "\n"; "" when it has none */
	size_t data_len;
	bool has_data;    /* false: a comment, an id alone, ...: no message */
	const char *head; /* its "id:" and "event:" lines, each ending in "\n"; "" when none */
	size_t head_len;
};

enum mcp_sse_read {
	MCP_SSE_EVENT,  /* an event is complete: see it, then mcp_sse_take() it */
	MCP_SSE_MORE,   /* the bytes so far end inside an event */
	MCP_SSE_BROKEN, /* an event over MCP_SSE_MAX_EVENT, or out of memory */
};

/** Starts a reader at the beginning of a stream. */
void mcp_sse_init(struct mcp_sse *s);

/** Appends @p n bytes at @p bytes (copied) to what the reader holds. */
void mcp_sse_feed(struct mcp_sse *s, const char *bytes, size_t n);

/**
 * Reads lines until the first event held is complete. Calling it again
 * before mcp_sse_take() returns the same event.
 * @param ev on MCP_SSE_EVENT, filled with views into @p s
 */
enum mcp_sse_read mcp_sse_next(struct mcp_sse *s, struct mcp_sse_event *ev);

/** Drops the event mcp_sse_next() returned; the bytes after it stay held. */
void mcp_sse_take(struct mcp_sse *s);

/**
 * The bytes held and not taken as events (the start of the next event),
 * borrowed until the next call on @p s. @p len receives their count.
 */
const char *mcp_sse_held(const struct mcp_sse *s, size_t *len);

/**
 * Appends to @p out an event carrying @p text (@p len bytes): the lines at
 * @p head (@p head_len bytes of "id:" and "event:" lines, each ending in
 * "\n"), a "data: " line per line of the text, and the blank line. Check
 * out->oom.
 */
void mcp_sse_write(struct ledger_buf *out, const char *head, size_t head_len, const char *text,
		   size_t len);

/** Frees what @p s holds. NULL-safe. */
void mcp_sse_free(struct mcp_sse *s);

#endif
