/*
 * api/wire/http.c: the wire format behind api/wire/http.h. Every rule here is one
 * of RFC 9112's, read in its strict direction: where the RFC lets a
 * recipient accept a sloppy message, the wire refuses it, because a proxy
 * in front of it may have read the same bytes another way.
 */
#include "api/wire/http.h"

#include <string.h>
#include <strings.h>

static const struct wire_http_error head_too_large = {
	431, "headers_too_large", "the request line and header fields exceed 16384 bytes"};

static bool refuse(struct wire_http_error *err, unsigned status, const char *code,
		   const char *message)
{
	err->status = status;
	err->code = code;
	err->message = message;
	return false;
}

#define MALFORMED(err, msg) refuse((err), 400, "malformed_request", (msg))

/* RFC 9110 tchar: the characters of a token (a method, a field name). */
static bool is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A field value's characters: visible, obs-text, space and tab; never a control. */
static bool is_value_char(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

enum wire_http_verdict wire_http_find_head(const char *buf, size_t len, size_t *scanned,
					   size_t *start, size_t *end, struct wire_http_error *err)
{
	size_t s = 0, i;

	/* RFC 9112 2.2: empty lines before the request line are ignored. */
	while (s + 1 < len && buf[s] == '\r' && buf[s + 1] == '\n')
		s += 2;
	*start = s;
	i = *scanned > s + 3 ? *scanned - 3 : s;
	for (; i + 3 < len; i++) {
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' &&
		    buf[i + 3] == '\n') {
			if (i + 4 - s > WIRE_HTTP_MAX_HEAD)
				break;
			*end = i + 4 - s;
			return WIRE_HTTP_DONE;
		}
	}
	*scanned = len;
	if (len - s >= WIRE_HTTP_MAX_HEAD || s >= WIRE_HTTP_MAX_HEAD) {
		*err = head_too_large;
		return WIRE_HTTP_REFUSED;
	}
	return WIRE_HTTP_INCOMPLETE;
}

/* Splits off the line at @p *p (ending in CRLF, no bare CR or LF inside). */
static char *take_line(char **p, char *end, struct wire_http_error *err)
{
	char *line = *p;

	for (char *q = line; q + 1 < end; q++) {
		if (q[0] == '\r' && q[1] == '\n') {
			*q = '\0';
			*p = q + 2;
			return line;
		}
		if (q[0] == '\r' || q[0] == '\n' || q[0] == '\0') {
			MALFORMED(err, "a line of the head holds a bare CR, LF or NUL");
			return NULL;
		}
	}
	MALFORMED(err, "a line of the head does not end in CRLF");
	return NULL;
}

/*
 * An absolute-form target (RFC 9112 3.2.2: a server must accept it), such
 * as a proxy sends: "http://host:port/path?query". @p *at (the space before
 * the target) moves so that at[1] starts the origin form, "/path?query"
 * ("/" when there is no path; "/?query"). The authority must be a host
 * with no userinfo; it is otherwise ignored, as Host is: this server is
 * every name it is reached by. @return false: no such URI
 */
static bool absolute_to_origin(char *target, char **at)
{
	size_t scheme = strncasecmp(target, "http://", 7) == 0    ? 7
			: strncasecmp(target, "https://", 8) == 0 ? 8
								  : 0;
	char *authority = target + scheme, *end;

	if (scheme == 0)
		return false;
	end = authority + strcspn(authority, "/?#");
	if (end == authority || memchr(authority, '@', (size_t)(end - authority)) != NULL ||
	    *end == '#')
		return false;
	if (*end == '/') {
		*at = end - 1;
	} else {
		end[-1] = '/'; /* the authority's last byte, no longer needed */
		*at = end - 2;
	}
	return true;
}

static bool parse_request_line(char *line, struct wire_http_head *h, struct wire_http_error *err)
{
	char *sp1 = strchr(line, ' '), *sp2 = NULL, *v = NULL;

	if (sp1 == NULL || sp1 == line)
		return MALFORMED(err, "the request line is not METHOD TARGET HTTP/1.x");
	*sp1 = '\0';
	for (const char *c = line; *c != '\0'; c++) {
		if (!is_tchar((unsigned char)*c))
			return MALFORMED(err, "the method is not a token");
	}
	sp2 = strchr(sp1 + 1, ' ');
	if (sp2 == NULL || sp2 == sp1 + 1)
		return MALFORMED(err, "the request line is not METHOD TARGET HTTP/1.x");
	*sp2 = '\0';
	for (const char *c = sp1 + 1; *c != '\0'; c++) {
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
			return MALFORMED(err, "the request target holds a space or a control");
	}
	if (sp1[1] != '/' && !absolute_to_origin(sp1 + 1, &sp1))
		return MALFORMED(err, "the request target is not a path or an http(s) URI");
	v = sp2 + 1;
	if (strncmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' ||
	    v[7] > '9' || v[8] != '\0')
		return MALFORMED(err, "the request line is not METHOD TARGET HTTP/1.x");
	if (v[5] != '1' || v[7] > '1')
		return refuse(err, 505, "http_version_not_supported",
			      "this server speaks HTTP/1.1 and HTTP/1.0");
	h->method = line;
	h->target = sp1 + 1;
	h->minor = (unsigned)(v[7] - '0');
	return true;
}

static bool parse_field(char *line, struct wire_http_head *h, struct wire_http_error *err)
{
	char *colon = line, *v, *e;

	if (*line == ' ' || *line == '\t')
		return MALFORMED(err, "a header field is folded over lines (obs-fold)");
	while (is_tchar((unsigned char)*colon))
		colon++;
	if (*colon != ':') {
		if (*colon == ' ' || *colon == '\t')
			return MALFORMED(err, "whitespace between a field name and its colon");
		return MALFORMED(err, "a header field is not NAME: VALUE");
	}
	if (colon == line)
		return MALFORMED(err, "a header field has no name");
	*colon = '\0';
	v = colon + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	e = v + strlen(v);
	while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	*e = '\0';
	for (const char *c = v; *c != '\0'; c++) {
		if (!is_value_char((unsigned char)*c))
			return MALFORMED(err, "a header field's value holds a control character");
	}
	if (h->nfields == WIRE_HTTP_MAX_FIELDS)
		return refuse(err, 431, "headers_too_large",
			      "the request has more than 100 header fields");
	h->fields[h->nfields].name = line;
	h->fields[h->nfields].value = v;
	h->nfields++;
	return true;
}

const char *wire_http_field(const struct wire_http_head *head, const char *name)
{
	for (unsigned i = 0; i < head->nfields; i++) {
		if (strcasecmp(head->fields[i].name, name) == 0)
			return head->fields[i].value;
	}
	return NULL;
}

unsigned wire_http_field_count(const struct wire_http_head *head, const char *name)
{
	unsigned n = 0;

	for (unsigned i = 0; i < head->nfields; i++)
		n += strcasecmp(head->fields[i].name, name) == 0;
	return n;
}

/* True when the comma-separated list @p list holds @p token (case-insensitive). */
static bool list_has(const char *list, const char *token)
{
	size_t n = strlen(token);

	while (*list != '\0') {
		const char *e;

		while (*list == ' ' || *list == '\t' || *list == ',')
			list++;
		e = list;
		while (*e != '\0' && *e != ',')
			e++;
		{
			const char *t = e;
			while (t > list && (t[-1] == ' ' || t[-1] == '\t'))
				t--;
			if ((size_t)(t - list) == n && strncasecmp(list, token, n) == 0)
				return true;
		}
		list = e;
	}
	return false;
}

/* Content-Length: one field, 1*DIGIT, nothing else (no sign, no list, no space). */
static bool parse_length(const struct wire_http_head *h, uint64_t *out, struct wire_http_error *err)
{
	const char *v = wire_http_field(h, "Content-Length");
	uint64_t n = 0;

	if (wire_http_field_count(h, "Content-Length") > 1)
		return MALFORMED(err, "Content-Length is given more than once");
	if (*v == '\0')
		return MALFORMED(err, "Content-Length is not a number of bytes");
	for (const char *c = v; *c != '\0'; c++) {
		if (*c < '0' || *c > '9')
			return MALFORMED(err, "Content-Length is not a number of bytes");
		n = n > (UINT64_MAX - 9) / 10 ? UINT64_MAX : n * 10 + (uint64_t)(*c - '0');
	}
	*out = n;
	return true;
}

/*
 * Transfer-Encoding: RFC 9112 6.1 and 6.3. Its codings, over every field
 * of that name, must end in exactly one "chunked"; no other is decoded.
 */
static bool parse_coding(const struct wire_http_head *h, struct wire_http_error *err)
{
	const char *last = NULL;
	unsigned chunked = 0, codings = 0;

	if (h->minor == 0)
		return MALFORMED(err, "Transfer-Encoding in an HTTP/1.0 request");
	for (unsigned i = 0; i < h->nfields; i++) {
		const char *p = h->fields[i].value;

		if (strcasecmp(h->fields[i].name, "Transfer-Encoding") != 0)
			continue;
		while (*p != '\0') {
			const char *e;
			size_t n;

			while (*p == ' ' || *p == '\t' || *p == ',')
				p++;
			if (*p == '\0')
				break;
			e = p;
			while (*e != '\0' && *e != ',')
				e++;
			n = (size_t)(e - p);
			while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
				n--;
			codings++;
			last = p;
			if (n == 7 && strncasecmp(p, "chunked", 7) == 0)
				chunked++;
			p = e;
		}
	}
	if (codings == 0)
		return MALFORMED(err, "Transfer-Encoding names no coding");
	if (last == NULL || strncasecmp(last, "chunked", 7) != 0 ||
	    (last[7] != '\0' && last[7] != ',' && last[7] != ' ' && last[7] != '\t') ||
	    chunked != 1)
		return MALFORMED(err, "Transfer-Encoding must end in one chunked");
	if (codings > 1)
		return refuse(err, 501, "not_implemented",
			      "the only transfer coding this server decodes is chunked");
	return true;
}

static bool check_framing(struct wire_http_head *h, struct wire_http_error *err)
{
	bool te = wire_http_field(h, "Transfer-Encoding") != NULL;
	bool cl = wire_http_field(h, "Content-Length") != NULL;
	const char *conn = wire_http_field(h, "Connection");
	const char *expect = wire_http_field(h, "Expect");
	const char *singletons[] = {"Host", "Authorization", "Content-Type", "Expect"};

	/* RFC 9112 6.3: both is smuggling or a broken proxy; either way, no. */
	if (te && cl)
		return MALFORMED(err, "both Content-Length and Transfer-Encoding");
	if (te) {
		if (!parse_coding(h, err))
			return false;
		h->body = WIRE_HTTP_BODY_CHUNKED;
	} else if (cl) {
		if (!parse_length(h, &h->content_length, err))
			return false;
		h->body = h->content_length > 0 ? WIRE_HTTP_BODY_LENGTH : WIRE_HTTP_BODY_NONE;
	}
	/* RFC 9112 3.2: an HTTP/1.1 request has exactly one Host. */
	if (h->minor == 1 && wire_http_field(h, "Host") == NULL)
		return MALFORMED(err, "an HTTP/1.1 request without Host");
	for (size_t i = 0; i < sizeof(singletons) / sizeof(singletons[0]); i++) {
		if (wire_http_field_count(h, singletons[i]) > 1)
			return MALFORMED(err, "a header field that may appear once appears twice");
	}
	h->keep_alive = h->minor == 1;
	if (conn != NULL && list_has(conn, "close"))
		h->keep_alive = false;
	else if (conn != NULL && h->minor == 0 && list_has(conn, "keep-alive"))
		h->keep_alive = true;
	if (expect != NULL) {
		if (strcasecmp(expect, "100-continue") != 0)
			return refuse(err, 417, "expectation_failed",
				      "the only expectation this server meets is 100-continue");
		h->expect_continue = h->minor == 1;
	}
	return true;
}

enum wire_http_verdict wire_http_parse_head(char *buf, size_t len, struct wire_http_head *head,
					    struct wire_http_error *err)
{
	char *p = buf, *end = buf + len, *line;

	memset(head, 0, sizeof(*head));
	if (len > WIRE_HTTP_MAX_HEAD) {
		*err = head_too_large;
		return WIRE_HTTP_REFUSED;
	}
	line = take_line(&p, end, err);
	if (line == NULL || !parse_request_line(line, head, err))
		return WIRE_HTTP_REFUSED;
	for (;;) {
		line = take_line(&p, end, err);
		if (line == NULL)
			return WIRE_HTTP_REFUSED;
		if (*line == '\0')
			break;
		if (!parse_field(line, head, err))
			return WIRE_HTTP_REFUSED;
	}
	if (p != end) {
		MALFORMED(err, "bytes after the head's empty line");
		return WIRE_HTTP_REFUSED;
	}
	return check_framing(head, err) ? WIRE_HTTP_DONE : WIRE_HTTP_REFUSED;
}

/* --- chunked bodies (RFC 9112 7.1) --- */

enum {
	CH_SIZE,    /* chunk-size digits */
	CH_EXT,     /* ; chunk-ext, up to CR */
	CH_SIZE_LF, /* the LF after the size line's CR */
	CH_DATA,    /* chunk-data */
	CH_DATA_CR, /* CRLF after the data */
	CH_DATA_LF,
	CH_TRAILER,    /* a trailer field line, or the final empty line */
	CH_TRAILER_LF, /* the LF after a trailer line's CR */
	CH_DONE,
};

/* Extensions and trailer fields are read and dropped, within these bounds. */
#define CH_MAX_LINE 4096
#define CH_MAX_TRAILER 8192
#define CH_MAX_DIGITS 15 /* 2^60 bytes: any larger is refused as too large anyway */

int wire_http_hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static enum wire_http_verdict chunk_refused(struct wire_http_error *err, const char *message)
{
	MALFORMED(err, message);
	return WIRE_HTTP_REFUSED;
}

/*
 * Takes one framing byte @p c in any state but CH_DATA and CH_DONE.
 * @return INCOMPLETE to go on, DONE once the body ended, or REFUSED
 */
static enum wire_http_verdict chunk_byte(struct wire_http_chunked *d, char c,
					 struct wire_http_error *err)
{
	switch (d->state) {
	case CH_SIZE:
		if (wire_http_hex_value(c) >= 0) {
			if (++d->digits > CH_MAX_DIGITS)
				return chunk_refused(err, "a chunk size has too many digits");
			d->left = d->left * 16 + (uint64_t)wire_http_hex_value(c);
			return WIRE_HTTP_INCOMPLETE;
		}
		if (d->digits == 0 || (c != ';' && c != '\r'))
			return chunk_refused(err, "a chunk size is not hexadecimal digits");
		d->state = c == ';' ? CH_EXT : CH_SIZE_LF;
		d->line = 0;
		return WIRE_HTTP_INCOMPLETE;
	case CH_EXT:
		if (c == '\r')
			d->state = CH_SIZE_LF;
		else if (c == '\n' || c == '\0' || ++d->line > CH_MAX_LINE)
			return chunk_refused(err, "a chunk extension is malformed or too long");
		return WIRE_HTTP_INCOMPLETE;
	case CH_SIZE_LF:
		if (c != '\n')
			return chunk_refused(err, "a chunk size line does not end in CRLF");
		d->digits = 0;
		d->line = 0;
		d->state = d->left == 0 ? CH_TRAILER : CH_DATA;
		return WIRE_HTTP_INCOMPLETE;
	case CH_DATA_CR:
	case CH_DATA_LF:
		if (c != (d->state == CH_DATA_CR ? '\r' : '\n'))
			return chunk_refused(err, "a chunk's data does not end in CRLF");
		d->state = d->state == CH_DATA_CR ? CH_DATA_LF : CH_SIZE;
		return WIRE_HTTP_INCOMPLETE;
	case CH_TRAILER:
		if (c == '\r')
			d->state = CH_TRAILER_LF;
		else if (c == '\n' || c == '\0' || ++d->trailer > CH_MAX_TRAILER)
			return chunk_refused(err,
					     "the chunked body's trailer is malformed or too long");
		else
			d->line++;
		return WIRE_HTTP_INCOMPLETE;
	case CH_TRAILER_LF:
		if (c != '\n')
			return chunk_refused(err, "a trailer line does not end in CRLF");
		if (d->line == 0) {
			d->state = CH_DONE;
			return WIRE_HTTP_DONE;
		}
		d->line = 0;
		d->state = CH_TRAILER;
		return WIRE_HTTP_INCOMPLETE;
	default:
		return WIRE_HTTP_DONE;
	}
}

enum wire_http_verdict wire_http_chunked_step(struct wire_http_chunked *d, const char *in,
					      size_t len, size_t *used, const char **data,
					      size_t *data_len, struct wire_http_error *err)
{
	size_t i = 0;

	*data = NULL;
	*data_len = 0;
	while (i < len) {
		enum wire_http_verdict v;

		if (d->state == CH_DONE) {
			*used = i;
			return WIRE_HTTP_DONE;
		}
		if (d->state == CH_DATA) {
			size_t n = len - i;

			if ((uint64_t)n > d->left)
				n = (size_t)d->left;
			*data = in + i;
			*data_len = n;
			d->left -= n;
			if (d->left == 0)
				d->state = CH_DATA_CR;
			*used = i + n;
			return WIRE_HTTP_INCOMPLETE;
		}
		v = chunk_byte(d, in[i++], err);
		if (v != WIRE_HTTP_INCOMPLETE) {
			*used = i;
			return v;
		}
	}
	*used = i;
	return WIRE_HTTP_INCOMPLETE;
}

const char *wire_http_reason(unsigned status)
{
	switch (status) {
	case 100:
		return "Continue";
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 202:
		return "Accepted";
	case 204:
		return "No Content";
	case 206:
		return "Partial Content";
	case 301:
		return "Moved Permanently";
	case 302:
		return "Found";
	case 303:
		return "See Other";
	case 304:
		return "Not Modified";
	case 307:
		return "Temporary Redirect";
	case 308:
		return "Permanent Redirect";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 409:
		return "Conflict";
	case 410:
		return "Gone";
	case 413:
		return "Content Too Large";
	case 417:
		return "Expectation Failed";
	case 422:
		return "Unprocessable Content";
	case 429:
		return "Too Many Requests";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "";
	}
}

bool wire_http_bodiless(unsigned status)
{
	return status < 200 || status == 204 || status == 304;
}

/* Appends @p s to out[*n, cap), or marks *n past cap: a head is written on every reply. */
static void put(char *out, size_t cap, size_t *n, const char *s)
{
	size_t len = strlen(s);

	if (*n < cap && cap - *n > len)
		memcpy(out + *n, s, len);
	*n += len;
}

size_t wire_http_format_head(char *out, size_t cap, unsigned status, time_t now,
			     const char *framing, const char *headers, const char *connection)
{
	char line[16] = "HTTP/1.1 000 ", date[48];
	struct tm tm;
	size_t n = 0;

	line[9] = (char)('0' + status / 100 % 10);
	line[10] = (char)('0' + status / 10 % 10);
	line[11] = (char)('0' + status % 10);
	gmtime_r(&now, &tm);
	strftime(date, sizeof(date), "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
	put(out, cap, &n, line);
	put(out, cap, &n, wire_http_reason(status));
	put(out, cap, &n, "\r\n");
	put(out, cap, &n, date);
	put(out, cap, &n, framing != NULL ? framing : "");
	put(out, cap, &n, headers != NULL ? headers : "");
	if (connection != NULL) {
		put(out, cap, &n, "Connection: ");
		put(out, cap, &n, connection);
		put(out, cap, &n, "\r\n");
	}
	put(out, cap, &n, "\r\n");
	if (n >= cap)
		return 0;
	out[n] = '\0';
	return n;
}
