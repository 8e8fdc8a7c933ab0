/*
 * api/wire/http.h: HTTP/1.1 on the wire (RFC 9112), strictly. Pure functions
 * over bytes, no I/O: find and parse a request head, decode a chunked
 * body, write a response head. Anything a front proxy could read another
 * way than the server does (two lengths, a length beside a transfer coding,
 * whitespace before a colon, a folded line, a bare CR or LF, a missing
 * Host) is refused, so that no request can be smuggled through a server on it.
 */
#ifndef WIRE_HTTP_H
#define WIRE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The most a request head may take: request line, fields and every line end. */
#define WIRE_HTTP_MAX_HEAD 16384
/* The most header fields a head may have. */
#define WIRE_HTTP_MAX_FIELDS 100

/* Why a request was refused on the wire: its status, error code and message. */
struct wire_http_error {
	unsigned status;
	const char *code;
	const char *message;
};

struct wire_http_field {
	const char *name; /* NUL-terminated, in the head's buffer */
	const char *value;
};

enum wire_http_body {
	WIRE_HTTP_BODY_NONE,
	WIRE_HTTP_BODY_LENGTH,  /* Content-Length */
	WIRE_HTTP_BODY_CHUNKED, /* Transfer-Encoding: chunked */
};

/* A parsed head; its strings point into the buffer it was parsed from. */
struct wire_http_head {
	const char *method;
	const char *target; /* as sent: path and query, still percent-encoded */
	unsigned minor;     /* HTTP/1.<minor>: 0 or 1 */
	struct wire_http_field fields[WIRE_HTTP_MAX_FIELDS];
	unsigned nfields;
	enum wire_http_body body;
	uint64_t content_length; /* WIRE_HTTP_BODY_LENGTH; UINT64_MAX if past it */
	bool keep_alive;         /* the client may send another request after this one */
	bool expect_continue;    /* Expect: 100-continue */
};

enum wire_http_verdict {
	WIRE_HTTP_INCOMPLETE, /* more bytes are needed */
	WIRE_HTTP_DONE,       /* parsed */
	WIRE_HTTP_REFUSED,    /* malformed: answer the error and close */
};

/**
 * Looks for the end of a head in @p buf, skipping the empty lines RFC 9112
 * allows before a request line.
 * @param scanned bytes already searched (in and out): each byte is looked at once
 * @param start receives where the request line begins
 * @param end receives the length of the head, final empty line included
 * @return DONE, INCOMPLETE, or REFUSED (431) once the head is too long
 */
enum wire_http_verdict wire_http_find_head(const char *buf, size_t len, size_t *scanned,
					 size_t *start, size_t *end, struct wire_http_error *err);

/**
 * Parses the head @p buf[0, @p len) (as wire_http_find_head() found it,
 * from its request line), in place: line ends and colons become NULs.
 * @return DONE or REFUSED with @p err set
 */
enum wire_http_verdict wire_http_parse_head(char *buf, size_t len, struct wire_http_head *head,
					  struct wire_http_error *err);

/** The value of field @p name (case-insensitive), or NULL. */
const char *wire_http_field(const struct wire_http_head *head, const char *name);

/** How many fields named @p name (case-insensitive) the head has. */
unsigned wire_http_field_count(const struct wire_http_head *head, const char *name);

/* The state of a chunked body being decoded. */
struct wire_http_chunked {
	int state;
	uint64_t left; /* bytes left of the current chunk */
	unsigned digits;
	size_t line; /* bytes of the current extension or trailer line */
	size_t trailer;
};

/**
 * Decodes the chunked body in @p in, one step: consumes framing bytes, or
 * gives back a span of data (pointing into @p in).
 * @param used receives how much of @p in was consumed
 * @param data receives the data span's start, @p data_len its length (0: none)
 * @return INCOMPLETE (feed more), DONE (the body ended; bytes after it are
 *         the next request's), or REFUSED with @p err set
 */
enum wire_http_verdict wire_http_chunked_step(struct wire_http_chunked *d, const char *in, size_t len,
					    size_t *used, const char **data, size_t *data_len,
					    struct wire_http_error *err);

/** The value of the hexadecimal digit @p c, or -1. */
int wire_http_hex_value(char c);

/** The reason phrase of @p status ("Bad Request"), "" for none. */
const char *wire_http_reason(unsigned status);

/** True when a response of @p status has no body, whatever its framing says (1xx, 204, 304). */
bool wire_http_bodiless(unsigned status);

/**
 * Writes a response head into @p out: the status line, a Date of @p now,
 * @p framing (a "Content-Length: N\r\n" or "Transfer-Encoding: chunked\r\n"
 * line, or NULL), @p headers (whole lines, or NULL), a Connection field of
 * @p connection unless it is NULL, and the empty line.
 * @return the head's length, or 0 when it does not fit in @p cap bytes
 */
size_t wire_http_format_head(char *out, size_t cap, unsigned status, time_t now,
			     const char *framing, const char *headers, const char *connection);

#endif
