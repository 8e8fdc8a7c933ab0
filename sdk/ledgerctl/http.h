/*
 * sdk/ledgerctl/http.h: ledgerctl's HTTP transport to ledgerd over libcurl:
 * one connection reused for every page of an answer, bounded in time and
 * size, with the token sent only in the Authorization header and never
 * kept anywhere it could be printed from.
 */
#ifndef LEDGERCTL_HTTP_H
#define LEDGERCTL_HTTP_H

#include <stddef.h>

#include "ledger/common/err.h"

#define LEDGERCTL_HTTP_MAX_BODY (16u << 20) /* the largest answer read, in bytes */

/* Why no HTTP answer came back. */
enum ledgerctl_http_failure {
	LEDGERCTL_HTTP_ANSWERED,    /* an answer arrived: see its status */
	LEDGERCTL_HTTP_UNREACHABLE, /* refused, unresolvable, timed out, cut off */
	LEDGERCTL_HTTP_BAD_URL,     /* the base URL cannot be used */
	LEDGERCTL_HTTP_TOO_LARGE,   /* the answer exceeded LEDGERCTL_HTTP_MAX_BODY */
	LEDGERCTL_HTTP_FAILED,      /* anything else libcurl reports */
};

struct ledgerctl_answer {
	enum ledgerctl_http_failure failure;
	long status;     /* the HTTP status when ANSWERED */
	char *body;      /* owned, NUL-terminated (possibly empty) when ANSWERED */
	size_t len;      /* body length in bytes */
	char error[256]; /* libcurl's reason when not ANSWERED */
};

struct ledgerctl_http; /* opaque: one CURL handle and its settings */

/**
 * Prepares a client of the ledgerd at @p base_url (http or https; a
 * trailing '/' is ignored). @p token, if not NULL, is copied into the
 * Authorization header only; the copy is wiped on close.
 * @param out on LEDGER_OK, a new client; free with ledgerctl_http_close()
 * @return LEDGER_OK, LEDGER_ERR_INVALID (a URL of another scheme) or
 *         LEDGER_ERR_NOMEM / LEDGER_ERR_INTERNAL (libcurl would not start)
 */
LEDGER_MUSTCHECK enum ledger_err ledgerctl_http_open(const char *base_url, const char *token,
						     struct ledgerctl_http **out);

/** Closes the connection and wipes the token. NULL-safe. */
void ledgerctl_http_close(struct ledgerctl_http *h);

/**
 * Sends one request: GET when @p body is NULL, else POST with
 * Content-Type: application/json. @p path starts with '/' and is appended
 * to the base URL; its ids must already be escaped (ledgerctl_http_escape()).
 * @param answer filled in; release with ledgerctl_answer_clear()
 * @return LEDGER_OK whether or not an answer came (see answer->failure),
 *         LEDGER_ERR_NOMEM when out of memory
 */
LEDGER_MUSTCHECK enum ledger_err ledgerctl_http_send(struct ledgerctl_http *h, const char *path,
						     const char *body, size_t body_len,
						     struct ledgerctl_answer *answer);

/** Frees the body of @p a and zeroes it. NULL-safe. */
void ledgerctl_answer_clear(struct ledgerctl_answer *a);

/**
 * Percent-encodes every byte of @p s outside RFC 3986's unreserved set
 * (A-Z a-z 0-9 - . _ ~), and the dots of an id that is "." or "..", so an
 * id can never change the path it is put in.
 * @return a new string (caller frees with free()), or NULL when out of memory
 */
char *ledgerctl_http_escape(const char *s);

#endif
