/*
 * tests/unit/test_http.c: the wire's HTTP/1.1 parser (api/wire/http.c),
 * table-driven: request heads (the request line, the fields, the framing
 * a head declares, each refusal with its status and code), chunked bodies
 * fed whole and one byte at a time (the data, where the body ends, each
 * refusal), and the response head the wire writes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/wire/http.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* --- heads --- */

/* One head: what the parser must make of it. */
struct head_row {
	const char *name;
	const char *raw;  /* from the first byte to the empty line, or beyond */
	unsigned status;  /* 0: parsed; else the refusal's status ... */
	const char *code; /* ... and code */
	/* Parsed: */
	const char *method, *target;
	unsigned minor;
	enum wire_http_body body;
	uint64_t length;
	bool keep_alive, expect_continue;
};

#define GOOD(n, r, m, t, mi, b, l, ka, ex)                                                         \
	{                                                                                          \
		n, r, 0, NULL, m, t, mi, b, l, ka, ex                                              \
	}
#define BAD(n, r, s, c)                                                                            \
	{                                                                                          \
		n, r, s, c, NULL, NULL, 0, WIRE_HTTP_BODY_NONE, 0, false, false                    \
	}
#define MALFORMED(n, r) BAD(n, r, 400, "malformed_request")
#define H "Host: h\r\n"

static const struct head_row heads[] = {
	/* Request lines. */
	GOOD("get", "GET / HTTP/1.1\r\n" H "\r\n", "GET", "/", 1, WIRE_HTTP_BODY_NONE, 0, true,
	     false),
	GOOD("target kept encoded", "GET /a%2Fb?x=1&y HTTP/1.1\r\n" H "\r\n", "GET", "/a%2Fb?x=1&y",
	     1, WIRE_HTTP_BODY_NONE, 0, true, false),
	GOOD("any token method", "PURGE /x HTTP/1.1\r\n" H "\r\n", "PURGE", "/x", 1,
	     WIRE_HTTP_BODY_NONE, 0, true, false),
	GOOD("http/1.0 closes", "GET / HTTP/1.0\r\n\r\n", "GET", "/", 0, WIRE_HTTP_BODY_NONE, 0,
	     false, false),
	GOOD("http/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", "GET", "/",
	     0, WIRE_HTTP_BODY_NONE, 0, true, false),
	GOOD("connection close", "GET / HTTP/1.1\r\n" H "Connection: foo, close\r\n\r\n", "GET",
	     "/", 1, WIRE_HTTP_BODY_NONE, 0, false, false),
	GOOD("empty lines first", "\r\n\r\nGET / HTTP/1.1\r\n" H "\r\n", "GET", "/", 1,
	     WIRE_HTTP_BODY_NONE, 0, true, false),
	MALFORMED("no version", "GET /\r\n" H "\r\n"),
	MALFORMED("two spaces", "GET  / HTTP/1.1\r\n" H "\r\n"),
	MALFORMED("trailing space", "GET / HTTP/1.1 \r\n" H "\r\n"),
	MALFORMED("method not a token", "G@T / HTTP/1.1\r\n" H "\r\n"),
	MALFORMED("no method", " / HTTP/1.1\r\n" H "\r\n"),
	MALFORMED("relative target", "GET x HTTP/1.1\r\n" H "\r\n"),
	GOOD("absolute form", "GET http://h:80/a?x HTTP/1.1\r\n" H "\r\n", "GET", "/a?x", 1,
	     WIRE_HTTP_BODY_NONE, 0, true, false),
	GOOD("absolute form, no path", "GET HTTPS://h HTTP/1.1\r\n" H "\r\n", "GET", "/", 1,
	     WIRE_HTTP_BODY_NONE, 0, true, false),
	GOOD("absolute form, a query alone", "GET http://h?q HTTP/1.1\r\n" H "\r\n", "GET", "/?q",
	     1, WIRE_HTTP_BODY_NONE, 0, true, false),
	MALFORMED("absolute form with userinfo", "GET http://u@h/ HTTP/1.1\r\n" H "\r\n"),
	MALFORMED("absolute form, no host", "GET http:///a HTTP/1.1\r\n" H "\r\n"),
	MALFORMED("another scheme", "GET ftp://h/ HTTP/1.1\r\n" H "\r\n"),
	MALFORMED("asterisk form", "OPTIONS * HTTP/1.1\r\n" H "\r\n"),
	MALFORMED("del in target", "GET /a\x7f HTTP/1.1\r\n" H "\r\n"),
	MALFORMED("not http", "GET / HTTX/1.1\r\n" H "\r\n"),
	MALFORMED("long minor", "GET / HTTP/1.10\r\n" H "\r\n"),
	MALFORMED("lower case http", "GET / http/1.1\r\n" H "\r\n"),
	BAD("http/2.0", "GET / HTTP/2.0\r\n" H "\r\n", 505, "http_version_not_supported"),
	BAD("http/1.2", "GET / HTTP/1.2\r\n" H "\r\n", 505, "http_version_not_supported"),
	BAD("http/0.9", "GET / HTTP/0.9\r\n" H "\r\n", 505, "http_version_not_supported"),
	/* Fields. */
	GOOD("value trimmed", "GET / HTTP/1.1\r\nHost:   h \t\r\nConnection:\tclose \r\n\r\n",
	     "GET", "/", 1, WIRE_HTTP_BODY_NONE, 0, false, false),
	GOOD("obs-text in a value", "GET / HTTP/1.1\r\n" H "X-A: caf\xc3\xa9\r\n\r\n", "GET", "/",
	     1, WIRE_HTTP_BODY_NONE, 0, true, false),
	MALFORMED("obs-fold", "GET / HTTP/1.1\r\n" H "X-A: 1\r\n folded\r\n\r\n"),
	MALFORMED("bare lf", "GET / HTTP/1.1\n" H "\r\n"),
	MALFORMED("bare cr", "GET / HTTP/1.1\r\n" H "X-A: a\rb\r\n\r\n"),
	MALFORMED("control in a value", "GET / HTTP/1.1\r\n" H "X-A: a\x01"
					"b\r\n\r\n"),
	MALFORMED("no colon", "GET / HTTP/1.1\r\n" H "no colon\r\n\r\n"),
	MALFORMED("no name", "GET / HTTP/1.1\r\n" H ": v\r\n\r\n"),
	MALFORMED("bad name", "GET / HTTP/1.1\r\n" H "X(A): 1\r\n\r\n"),
	MALFORMED("space before colon", "GET / HTTP/1.1\r\n" H "X-A : 1\r\n\r\n"),
	MALFORMED("no host in 1.1", "GET / HTTP/1.1\r\n\r\n"),
	MALFORMED("host twice", "GET / HTTP/1.1\r\n" H H "\r\n"),
	MALFORMED("authorization twice",
		  "GET / HTTP/1.1\r\n" H "Authorization: a\r\nAuthorization: b\r\n\r\n"),
	MALFORMED("content-type twice",
		  "GET / HTTP/1.1\r\n" H "Content-Type: a\r\nContent-Type: b\r\n\r\n"),
	/* The framing a head declares. */
	GOOD("content-length", "POST / HTTP/1.1\r\n" H "Content-Length: 42\r\n\r\n", "POST", "/", 1,
	     WIRE_HTTP_BODY_LENGTH, 42, true, false),
	GOOD("content-length 0", "POST / HTTP/1.1\r\n" H "Content-Length: 0\r\n\r\n", "POST", "/",
	     1, WIRE_HTTP_BODY_NONE, 0, true, false),
	GOOD("content-length past 2^64",
	     "POST / HTTP/1.1\r\n" H "Content-Length: 99999999999999999999999\r\n\r\n", "POST", "/",
	     1, WIRE_HTTP_BODY_LENGTH, UINT64_MAX, true, false),
	GOOD("chunked", "POST / HTTP/1.1\r\n" H "Transfer-Encoding: Chunked\r\n\r\n", "POST", "/",
	     1, WIRE_HTTP_BODY_CHUNKED, 0, true, false),
	GOOD("100-continue",
	     "POST / HTTP/1.1\r\n" H "Expect: 100-Continue\r\nContent-Length: 1\r\n\r\n", "POST",
	     "/", 1, WIRE_HTTP_BODY_LENGTH, 1, true, true),
	GOOD("100-continue ignored in 1.0",
	     "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", "POST", "/", 0,
	     WIRE_HTTP_BODY_LENGTH, 1, false, false),
	MALFORMED("two lengths",
		  "POST / HTTP/1.1\r\n" H "Content-Length: 2\r\nContent-Length: 2\r\n\r\n"),
	MALFORMED("length beside coding",
		  "POST / HTTP/1.1\r\n" H
		  "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"),
	MALFORMED("signed length", "POST / HTTP/1.1\r\n" H "Content-Length: +2\r\n\r\n"),
	MALFORMED("listed length", "POST / HTTP/1.1\r\n" H "Content-Length: 2, 2\r\n\r\n"),
	MALFORMED("hex length", "POST / HTTP/1.1\r\n" H "Content-Length: 0x2\r\n\r\n"),
	MALFORMED("empty length", "POST / HTTP/1.1\r\n" H "Content-Length:\r\n\r\n"),
	MALFORMED("coding not ending in chunked",
		  "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked, gzip\r\n\r\n"),
	MALFORMED("chunked twice",
		  "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked, chunked\r\n\r\n"),
	MALFORMED("identity", "POST / HTTP/1.1\r\n" H "Transfer-Encoding: identity\r\n\r\n"),
	MALFORMED("no coding", "POST / HTTP/1.1\r\n" H "Transfer-Encoding: ,\r\n\r\n"),
	MALFORMED("coding in 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
	BAD("coding before chunked",
	    "POST / HTTP/1.1\r\n" H "Transfer-Encoding: gzip, chunked\r\n\r\n", 501,
	    "not_implemented"),
	BAD("another expectation", "POST / HTTP/1.1\r\n" H "Expect: 200-ok\r\n\r\n", 417,
	    "expectation_failed"),
};

/* Finds and parses @p raw as the wire does. @return the verdict; @p err on refusal */
static enum wire_http_verdict parse_raw(const char *raw, char **copy, struct wire_http_head *head,
					struct wire_http_error *err)
{
	size_t scanned = 0, start = 0, end = 0, len = strlen(raw);
	enum wire_http_verdict v = wire_http_find_head(raw, len, &scanned, &start, &end, err);

	*copy = NULL;
	if (v != WIRE_HTTP_DONE) {
		/* A head followed by bytes is parsed with them: they must be refused. */
		end = len - start;
	}
	*copy = malloc(end + 1);
	assert_non_null(*copy);
	memcpy(*copy, raw + start, end);
	(*copy)[end] = '\0';
	return wire_http_parse_head(*copy, end, head, err);
}

/* What of the parse differs from row @p r, or NULL. */
static const char *head_mismatch(const struct head_row *r, enum wire_http_verdict v,
				 const struct wire_http_head *h, const struct wire_http_error *err)
{
	if (r->status != 0) {
		if (v != WIRE_HTTP_REFUSED)
			return "not refused";
		if (err->status != r->status || strcmp(err->code, r->code) != 0)
			return err->code;
		return err->message == NULL ? "no message" : NULL;
	}
	if (v != WIRE_HTTP_DONE)
		return err->message;
	if (strcmp(h->method, r->method) != 0 || strcmp(h->target, r->target) != 0 ||
	    h->minor != r->minor)
		return "request line";
	if (h->body != r->body ||
	    (r->body == WIRE_HTTP_BODY_LENGTH && h->content_length != r->length))
		return "framing";
	if (h->keep_alive != r->keep_alive || h->expect_continue != r->expect_continue)
		return "keep-alive or expect";
	return NULL;
}

static void test_http_head_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(heads); i++) {
		const struct head_row *r = &heads[i];
		struct wire_http_error err = {0};
		struct wire_http_head head;
		char *copy = NULL;
		enum wire_http_verdict v = parse_raw(r->raw, &copy, &head, &err);
		const char *why = head_mismatch(r, v, &head, &err);

		free(copy);
		if (why != NULL)
			fail_msg("head row %zu (%s): %s", i, r->name, why);
	}
}

static void test_http_fields_are_found_by_any_case(void **state)
{
	char raw[] = "GET / HTTP/1.1\r\nHost: h\r\nX-One: 1\r\nx-one: 2\r\nX-Two:\r\n\r\n";
	struct wire_http_error err;
	struct wire_http_head head;

	(void)state;
	assert_int_equal(wire_http_parse_head(raw, strlen(raw), &head, &err), WIRE_HTTP_DONE);
	assert_int_equal(head.nfields, 4);
	assert_string_equal(wire_http_field(&head, "X-ONE"), "1");
	assert_int_equal(wire_http_field_count(&head, "x-One"), 2);
	assert_string_equal(wire_http_field(&head, "x-two"), "");
	assert_null(wire_http_field(&head, "X-Three"));
	/* Handed more than its head, the parser refuses what follows the empty line. */
	{
		char more[] = "GET / HTTP/1.1\r\nHost: h\r\n\r\nX";

		assert_int_equal(wire_http_parse_head(more, strlen(more), &head, &err),
				 WIRE_HTTP_REFUSED);
		assert_int_equal(err.status, 400);
	}
}

/* A head of @p total bytes with @p fields fields (Host one of them). */
static char *sized_head(size_t total, unsigned fields)
{
	char *raw = malloc(total + 1);
	size_t n;

	assert_non_null(raw);
	n = (size_t)sprintf(raw, "GET / HTTP/1.1\r\nHost: h\r\n");
	for (unsigned i = 1; i < fields; i++)
		n += (size_t)sprintf(raw + n, "X-%u: v\r\n", i);
	n += (size_t)sprintf(raw + n, "X-Pad: ");
	memset(raw + n, 'a', total - n - 4);
	memcpy(raw + total - 4, "\r\n\r\n", 5);
	return raw;
}

static void test_http_head_limits(void **state)
{
	struct wire_http_error err = {0};
	struct wire_http_head head;
	size_t scanned = 0, start = 0, end = 0;
	char *raw = sized_head(WIRE_HTTP_MAX_HEAD, 1), *copy = NULL;

	(void)state;
	/* 16384 bytes: found and parsed. */
	assert_int_equal(parse_raw(raw, &copy, &head, &err), WIRE_HTTP_DONE);
	free(copy);
	free(raw);
	/* One more: 431, without waiting for the end. */
	raw = sized_head(WIRE_HTTP_MAX_HEAD + 1, 1);
	assert_int_equal(wire_http_find_head(raw, strlen(raw), &scanned, &start, &end, &err),
			 WIRE_HTTP_REFUSED);
	assert_int_equal(err.status, 431);
	assert_string_equal(err.code, "headers_too_large");
	free(raw);
	/* A head still coming is incomplete, and each byte is scanned once. */
	scanned = 0;
	assert_int_equal(wire_http_find_head("GET / HTTP/1.1\r\nHost: h\r\n", 25, &scanned, &start,
					     &end, &err),
			 WIRE_HTTP_INCOMPLETE);
	assert_int_equal(scanned, 25);
	/* 100 fields are served; the 101st is 431. */
	raw = sized_head(4096, 99); /* Host, 98 more and X-Pad */
	assert_int_equal(parse_raw(raw, &copy, &head, &err), WIRE_HTTP_DONE);
	assert_int_equal(head.nfields, 100);
	free(copy);
	free(raw);
	raw = sized_head(4096, 100);
	assert_int_equal(parse_raw(raw, &copy, &head, &err), WIRE_HTTP_REFUSED);
	assert_int_equal(err.status, 431);
	assert_string_equal(err.code, "headers_too_large");
	free(copy);
	free(raw);
}

/* --- chunked bodies --- */

struct chunk_row {
	const char *name;
	const char *in;
	size_t len; /* 0: strlen(in) */
	enum wire_http_verdict want;
	const char *data; /* the body decoded, when DONE or INCOMPLETE */
	size_t rest;      /* DONE: bytes left after the body's end */
};

#define CHUNK(n, in, w, d, r)                                                                      \
	{                                                                                          \
		n, in, 0, w, d, r                                                                  \
	}

static const struct chunk_row chunks[] = {
	CHUNK("empty body", "0\r\n\r\n", WIRE_HTTP_DONE, "", 0),
	CHUNK("one chunk", "2\r\n{}\r\n0\r\n\r\n", WIRE_HTTP_DONE, "{}", 0),
	CHUNK("two chunks", "3\r\nabc\r\nA\r\n0123456789\r\n0\r\n\r\n", WIRE_HTTP_DONE,
	      "abc0123456789", 0),
	CHUNK("upper-case hex", "B\r\nhello world\r\n0\r\n\r\n", WIRE_HTTP_DONE, "hello world", 0),
	CHUNK("extensions", "2;a=1;b\r\n{}\r\n0;x=\"y\"\r\n\r\n", WIRE_HTTP_DONE, "{}", 0),
	CHUNK("trailers", "2\r\n{}\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n", WIRE_HTTP_DONE, "{}", 0),
	CHUNK("the next request is left", "2\r\n{}\r\n0\r\n\r\nGET / HTTP/1.1\r\n", WIRE_HTTP_DONE,
	      "{}", 16),
	CHUNK("no last chunk yet", "2\r\n{}\r\n", WIRE_HTTP_INCOMPLETE, "{}", 0),
	CHUNK("no final line yet", "2\r\n{}\r\n0\r\n", WIRE_HTTP_INCOMPLETE, "{}", 0),
	CHUNK("size not hex", "zz\r\n{}\r\n0\r\n\r\n", WIRE_HTTP_REFUSED, NULL, 0),
	CHUNK("no size", ";ext\r\n", WIRE_HTTP_REFUSED, NULL, 0),
	CHUNK("space after the size", "2 \r\n{}\r\n0\r\n\r\n", WIRE_HTTP_REFUSED, NULL, 0),
	CHUNK("size with 16 digits", "0000000000000002\r\n{}\r\n0\r\n\r\n", WIRE_HTTP_REFUSED, NULL,
	      0),
	CHUNK("data without crlf", "2\r\n{}0\r\n\r\n", WIRE_HTTP_REFUSED, NULL, 0),
	CHUNK("size line bare lf", "2\n{}\r\n0\r\n\r\n", WIRE_HTTP_REFUSED, NULL, 0),
	CHUNK("data then bare lf", "2\r\n{}\n0\r\n\r\n", WIRE_HTTP_REFUSED, NULL, 0),
	CHUNK("extension bare lf", "2;e\n{}\r\n0\r\n\r\n", WIRE_HTTP_REFUSED, NULL, 0),
	CHUNK("trailer bare lf", "2\r\n{}\r\n0\r\nX-T: 1\n\r\n", WIRE_HTTP_REFUSED, NULL, 0),
	CHUNK("final line bare lf", "0\r\n\n", WIRE_HTTP_REFUSED, NULL, 0),
	{"nul in an extension", "2;a\0b\r\n{}\r\n0\r\n\r\n", 16, WIRE_HTTP_REFUSED, NULL, 0},
};

/*
 * Feeds @p in to a decoder @p step bytes at a time (0: all at once), as
 * conn.c does: what a step leaves unconsumed is offered again with more.
 */
static enum wire_http_verdict decode(const char *in, size_t len, size_t step, char *out,
				     size_t *out_len, size_t *rest)
{
	struct wire_http_chunked d;
	enum wire_http_verdict v = WIRE_HTTP_INCOMPLETE;
	size_t off = 0, have = step == 0 ? len : 0;

	memset(&d, 0, sizeof(d));
	*out_len = 0;
	while (off < have || have < len) {
		const char *data = NULL;
		size_t used = 0, dlen = 0;
		struct wire_http_error err;

		if (off == have) {
			have += step;
			if (have > len)
				have = len;
		}
		v = wire_http_chunked_step(&d, in + off, have - off, &used, &data, &dlen, &err);
		if (v == WIRE_HTTP_REFUSED) {
			assert_int_equal(err.status, 400);
			assert_string_equal(err.code, "malformed_request");
			return v;
		}
		memcpy(out + *out_len, data, dlen);
		*out_len += dlen;
		off += used;
		if (v == WIRE_HTTP_DONE) {
			*rest = len - off;
			return v;
		}
	}
	return v;
}

static void test_http_chunked_table(void **state)
{
	static const size_t steps[] = {0, 1, 3};
	char out[256];

	(void)state;
	for (size_t i = 0; i < COUNT(chunks); i++) {
		const struct chunk_row *r = &chunks[i];
		size_t len = r->len != 0 ? r->len : strlen(r->in);

		for (size_t s = 0; s < COUNT(steps); s++) {
			size_t out_len = 0, rest = 0;
			enum wire_http_verdict v =
				decode(r->in, len, steps[s], out, &out_len, &rest);

			if (v != r->want)
				fail_msg("chunked row %zu (%s), %zu at a time: verdict %d, want %d",
					 i, r->name, steps[s], v, r->want);
			if (r->data != NULL &&
			    (out_len != strlen(r->data) || memcmp(out, r->data, out_len) != 0))
				fail_msg("chunked row %zu (%s), %zu at a time: data", i, r->name,
					 steps[s]);
			if (v == WIRE_HTTP_DONE && rest != r->rest)
				fail_msg(
					"chunked row %zu (%s), %zu at a time: %zu bytes left, want %zu",
					i, r->name, steps[s], rest, r->rest);
		}
	}
}

static void test_http_chunked_bounds_extensions_and_trailers(void **state)
{
	char buf[10000], out[16];
	size_t out_len = 0, rest = 0;

	(void)state;
	/* Extensions of 4096 bytes after the ';' are read; 4097 are refused. */
	memcpy(buf, "1;", 2);
	memset(buf + 2, 'e', 4096);
	memcpy(buf + 4098, "\r\nx\r\n0\r\n\r\n", 11);
	assert_int_equal(decode(buf, strlen(buf), 0, out, &out_len, &rest), WIRE_HTTP_DONE);
	memcpy(buf, "1;", 2);
	memset(buf + 2, 'e', 4097);
	memcpy(buf + 4099, "\r\nx\r\n0\r\n\r\n", 11);
	assert_int_equal(decode(buf, strlen(buf), 0, out, &out_len, &rest), WIRE_HTTP_REFUSED);
	/* Trailers of 8192 bytes are read; more are refused. */
	memcpy(buf, "0\r\nX: ", 6);
	memset(buf + 6, 't', 8189);
	memcpy(buf + 8195, "\r\n\r\n", 5);
	assert_int_equal(decode(buf, strlen(buf), 0, out, &out_len, &rest), WIRE_HTTP_DONE);
	memcpy(buf, "0\r\nX: ", 6);
	memset(buf + 6, 't', 8190);
	memcpy(buf + 8196, "\r\n\r\n", 5);
	assert_int_equal(decode(buf, strlen(buf), 0, out, &out_len, &rest), WIRE_HTTP_REFUSED);
}

/* --- what the wire writes --- */

static void test_http_response_heads(void **state)
{
	char out[512];
	size_t n;

	(void)state;
	n = wire_http_format_head(out, sizeof(out), 201, 0, "Content-Length: 2\r\n",
				  "Content-Type: application/json\r\n", NULL);
	assert_int_equal(n, strlen(out));
	assert_string_equal(out, "HTTP/1.1 201 Created\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
				 "Content-Length: 2\r\nContent-Type: application/json\r\n\r\n");
	n = wire_http_format_head(out, sizeof(out), 299, 0, NULL, NULL, "close");
	assert_string_equal(out, "HTTP/1.1 299 \r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
				 "Connection: close\r\n\r\n");
	assert_int_equal(wire_http_format_head(out, 20, 200, 0, NULL, NULL, NULL), 0);
	assert_true(wire_http_bodiless(101) && wire_http_bodiless(204) && wire_http_bodiless(304));
	assert_false(wire_http_bodiless(200) || wire_http_bodiless(404));
	assert_string_equal(wire_http_reason(413), "Content Too Large");
	assert_string_equal(wire_http_reason(599), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_http_head_table),
		cmocka_unit_test(test_http_fields_are_found_by_any_case),
		cmocka_unit_test(test_http_head_limits),
		cmocka_unit_test(test_http_chunked_table),
		cmocka_unit_test(test_http_chunked_bounds_extensions_and_trailers),
		cmocka_unit_test(test_http_response_heads),
	};

	return cmocka_run_group_tests_name("http", tests, NULL, NULL);
}
