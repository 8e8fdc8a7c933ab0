/*
 * sdk/programs/ledger-mcp/upstream.c: a forwarded request as a libcurl easy handle in a
 * multi handle of its own, pumped by whoever reads it (the connection
 * passing a stream on, or the thread that runs an intercepted call), so
 * the server's pace sets the client's and nothing is buffered ahead. Then
 * what is read in the server's answers: an intercepted call's response,
 * and a tools/list's hints.
 */
#include "sdk/programs/ledger-mcp/upstream.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "ledger/common/buf.h"
#include "ledger/common/log.h"
#include "sdk/programs/ledger-mcp/message.h"

#define CONNECT_TIMEOUT_MS 10000L
#define MAX_PENDING (64u << 20) /* unread bytes past this: the reader is gone, stop */
#define MAX_TAPPED (16u << 20)  /* a tools/list answer past this is not read for hints */
#define FORWARD_POLL_MS 1000

struct mcp_upstream {
	CURLM *multi;
	CURL *easy;
	struct curl_slist *sent; /* the request's header lines */
	struct ledger_buf body;  /* answer bytes received; those before off are read */
	size_t off;
	struct mcp_header *head; /* the answer's header fields */
	size_t n_head, cap_head;
	long status;                 /* of the last status line seen */
	bool head_done;              /* the blank line after a final (non-1xx) status came */
	bool ended;                  /* libcurl is done with the transfer */
	bool overflow;               /* MAX_PENDING unread bytes: cut */
	CURLcode result;             /* how it ended */
	char error[CURL_ERROR_SIZE]; /* libcurl's words for it */
};

static const char *const HOP_BY_HOP[] = {"Connection", "Keep-Alive",        "TE",
					 "Trailer",    "Transfer-Encoding", "Upgrade",
					 "Host",       "Content-Length"};

/* Whether the comma-separated token list @p list (a Connection header) names @p name. */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	while (list != NULL && *list != '\0') {
		size_t len;

		list += strspn(list, " \t,");
		len = strcspn(list, ",");
		while (len > 0 && (list[len - 1] == ' ' || list[len - 1] == '\t'))
			len--;
		if (len == n && strncasecmp(list, name, n) == 0)
			return true;
		list += strcspn(list, ",");
	}
	return false;
}

bool mcp_upstream_hop_by_hop(const char *name, const char *connection)
{
	if (strncasecmp(name, "Proxy-", 6) == 0 || listed(connection, name))
		return true;
	for (size_t i = 0; i < sizeof(HOP_BY_HOP) / sizeof(HOP_BY_HOP[0]); i++)
		if (strcasecmp(name, HOP_BY_HOP[i]) == 0)
			return true;
	return false;
}

bool mcp_upstream_headers_add(struct mcp_header **h, size_t *n, size_t *cap, const char *name,
			      size_t name_len, const char *value, size_t value_len)
{
	struct mcp_header *grown;

	if (*n == *cap) {
		grown = realloc(*h, (*cap != 0 ? *cap * 2 : 16) * sizeof(**h));
		if (grown == NULL)
			return false;
		*h = grown;
		*cap = *cap != 0 ? *cap * 2 : 16;
	}
	(*h)[*n].name = strndup(name, name_len);
	(*h)[*n].value = strndup(value, value_len);
	if ((*h)[*n].name == NULL || (*h)[*n].value == NULL) {
		free((*h)[*n].name);
		free((*h)[*n].value);
		return false;
	}
	(*n)++;
	return true;
}

size_t mcp_upstream_headers_drop(struct mcp_header *h, size_t n, const char *name)
{
	size_t kept = 0;

	for (size_t i = 0; i < n; i++) {
		if (strcasecmp(h[i].name, name) == 0) {
			free(h[i].name);
			free(h[i].value);
		} else {
			h[kept++] = h[i];
		}
	}
	return kept;
}

bool mcp_upstream_split(const char *url, char **origin, char **path)
{
	const char *authority, *rest;
	size_t n;

	*origin = *path = NULL;
	if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)
		return false;
	authority = strstr(url, "://") + 3;
	n = strcspn(authority, "/?#");
	if (n == 0)
		return false;
	rest = authority + n;
	*origin = strndup(url, (size_t)(rest - url));
	n = strcspn(rest, "?#");
	*path = n > 0 ? strndup(rest, n) : strdup("/");
	if (*origin != NULL && *path != NULL)
		return true;
	free(*origin);
	free(*path);
	*origin = *path = NULL;
	return false;
}

void mcp_upstream_headers_free(struct mcp_header *h, size_t n)
{
	if (h == NULL)
		return;
	for (size_t i = 0; i < n; i++) {
		free(h[i].name);
		free(h[i].value);
	}
	free(h);
}

static void clear_head(struct mcp_upstream *u)
{
	for (size_t i = 0; i < u->n_head; i++) {
		free(u->head[i].name);
		free(u->head[i].value);
	}
	u->n_head = 0;
}

/* Trims spaces, tabs and the line's CRLF off both ends of @p s, @p n bytes. */
static void trim(const char **s, size_t *n)
{
	while (*n > 0 && strchr(" \t\r\n", (*s)[0]) != NULL) {
		(*s)++;
		(*n)--;
	}
	while (*n > 0 && strchr(" \t\r\n", (*s)[*n - 1]) != NULL)
		(*n)--;
}

static bool add_field(struct mcp_upstream *u, const char *line, size_t n)
{
	const char *colon = memchr(line, ':', n), *name = line, *value;
	size_t name_len, value_len;

	if (colon == NULL)
		return true; /* not a field: libcurl accepted it, nothing to pass on */
	name_len = (size_t)(colon - line);
	value = colon + 1;
	value_len = (size_t)(line + n - value);
	trim(&name, &name_len);
	trim(&value, &value_len);
	return mcp_upstream_headers_add(&u->head, &u->n_head, &u->cap_head, name, name_len, value,
					value_len);
}

/* A folded line continues the last field's value (RFC 9112 obs-fold). */
static bool fold_field(struct mcp_upstream *u, const char *line, size_t n)
{
	struct mcp_header *last = u->n_head > 0 ? &u->head[u->n_head - 1] : NULL;
	char *joined = NULL;

	trim(&line, &n);
	if (last == NULL || n == 0)
		return true;
	if (asprintf(&joined, "%s %.*s", last->value, (int)n, line) < 0)
		return false;
	free(last->value);
	last->value = joined;
	return true;
}

static size_t on_header(char *line, size_t size, size_t count, void *arg)
{
	struct mcp_upstream *u = arg;
	size_t n = size * count;
	bool ok = true;

	if (u->head_done)
		return n; /* trailers of a chunked answer: not passed on */
	if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
		/* A status line: a 1xx before the final one is forgotten with its fields. */
		clear_head(u);
		u->status = 0;
		if (sscanf(line, "%*s %ld", &u->status) != 1)
			u->status = 0;
	} else if (n <= 2 && (line[0] == '\r' || line[0] == '\n')) {
		u->head_done = u->status >= 200;
	} else if (line[0] == ' ' || line[0] == '\t') {
		ok = fold_field(u, line, n);
	} else {
		ok = add_field(u, line, n);
	}
	return ok ? n : 0;
}

static size_t on_body(char *data, size_t size, size_t count, void *arg)
{
	struct mcp_upstream *u = arg;
	size_t n = size * count;

	if (u->body.len - u->off + n > MAX_PENDING) {
		u->overflow = true;
		return 0;
	}
	if (u->off > 0 && u->off == u->body.len) {
		u->body.len = 0;
		u->off = 0;
	}
	ledger_buf_append(&u->body, data, n);
	return u->body.oom ? 0 : n;
}

static bool append(struct curl_slist **list, const char *line)
{
	struct curl_slist *next = curl_slist_append(*list, line);

	if (next == NULL)
		return false;
	*list = next;
	return true;
}

/* Adds "Name: value" (or "Name;" for an empty value, which libcurl would drop). */
static bool add_line(struct curl_slist **list, const char *name, const char *value)
{
	char *line = NULL;
	int rc = value[0] != '\0' ? asprintf(&line, "%s: %s", name, value)
				  : asprintf(&line, "%s;", name);
	bool ok;

	if (rc < 0)
		return false; /* line is undefined */
	ok = append(list, line);
	free(line);
	return ok;
}

static bool has_header(const struct mcp_upstream_request *req, const char *name)
{
	for (size_t i = 0; i < req->n_headers; i++)
		if (strcasecmp(req->headers[i].name, name) == 0)
			return true;
	return false;
}

/* The request's header lines, and lines that keep libcurl's defaults out. */
static bool header_lines(const struct mcp_upstream_request *req, bool body,
			 struct curl_slist **list)
{
	for (size_t i = 0; i < req->n_headers; i++)
		if (!add_line(list, req->headers[i].name, req->headers[i].value))
			return false;
	/* "Name:" with nothing after it tells libcurl not to send its own. */
	return (has_header(req, "Accept") || append(list, "Accept:")) && append(list, "Expect:") &&
	       (!body || has_header(req, "Content-Type") || append(list, "Content-Type:"));
}

enum ledger_err mcp_upstream_open(const struct mcp_upstream_request *req, struct mcp_upstream **out)
{
	struct mcp_upstream *u = calloc(1, sizeof(*u));
	bool body = req->body_len > 0 || strcmp(req->method, "POST") == 0 ||
		    strcmp(req->method, "PUT") == 0 || strcmp(req->method, "PATCH") == 0;
	bool ok;

	*out = NULL;
	if (u == NULL)
		return LEDGER_ERR_NOMEM;
	u->multi = curl_multi_init();
	u->easy = curl_easy_init();
	ok = u->multi != NULL && u->easy != NULL && header_lines(req, body, &u->sent) &&
	     curl_easy_setopt(u->easy, CURLOPT_URL, req->url) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1) ==
		     CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_PATH_AS_IS, 1L) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_HTTP_CONTENT_DECODING, 0L) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_HTTPHEADER, u->sent) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_ERRORBUFFER, u->error) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_HEADERFUNCTION, on_header) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_HEADERDATA, u) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK &&
	     curl_easy_setopt(u->easy, CURLOPT_WRITEDATA, u) == CURLE_OK;
	if (ok && body)
		ok = curl_easy_setopt(u->easy, CURLOPT_POSTFIELDS,
				      req->body != NULL ? req->body : "") == CURLE_OK &&
		     curl_easy_setopt(u->easy, CURLOPT_POSTFIELDSIZE_LARGE,
				      (curl_off_t)req->body_len) == CURLE_OK;
	if (ok && strcmp(req->method, "HEAD") == 0)
		ok = curl_easy_setopt(u->easy, CURLOPT_NOBODY, 1L) == CURLE_OK;
	else if (ok && strcmp(req->method, body ? "POST" : "GET") != 0)
		ok = curl_easy_setopt(u->easy, CURLOPT_CUSTOMREQUEST, req->method) == CURLE_OK;
	if (!ok || curl_multi_add_handle(u->multi, u->easy) != CURLM_OK) {
		mcp_upstream_close(u);
		return LEDGER_ERR_NOMEM;
	}
	*out = u;
	return LEDGER_OK;
}

static void perform(struct mcp_upstream *u)
{
	CURLMsg *msg;
	int running = 0, left = 0;

	curl_multi_perform(u->multi, &running);
	while ((msg = curl_multi_info_read(u->multi, &left)) != NULL) {
		if (msg->msg == CURLMSG_DONE) {
			u->ended = true;
			u->result = msg->data.result;
		}
	}
}

void mcp_upstream_pump(struct mcp_upstream *u, int wait_ms)
{
	size_t had = u->body.len - u->off;
	bool head = u->head_done;

	if (u->ended)
		return;
	perform(u);
	if (u->ended || u->head_done != head || u->body.len - u->off != had)
		return;
	curl_multi_poll(u->multi, NULL, 0, wait_ms, NULL);
	perform(u);
}

bool mcp_upstream_head(const struct mcp_upstream *u, long *status)
{
	if (status != NULL)
		*status = u->status;
	return u->head_done;
}

const struct mcp_header *mcp_upstream_headers(const struct mcp_upstream *u, size_t *n)
{
	*n = u->head_done ? u->n_head : 0;
	return u->head;
}

const char *mcp_upstream_header(const struct mcp_upstream *u, const char *name)
{
	for (size_t i = 0; u->head_done && i < u->n_head; i++)
		if (strcasecmp(u->head[i].name, name) == 0)
			return u->head[i].value;
	return NULL;
}

long long mcp_upstream_length(const struct mcp_upstream *u)
{
	const char *v = mcp_upstream_header(u, "Content-Length");
	char *end = NULL;
	long long n;

	if (v == NULL || mcp_upstream_header(u, "Transfer-Encoding") != NULL || v[0] < '0' ||
	    v[0] > '9')
		return -1;
	n = strtoll(v, &end, 10);
	return *end == '\0' && n >= 0 ? n : -1;
}

const char *mcp_upstream_bytes(const struct mcp_upstream *u, size_t *len)
{
	*len = u->body.len - u->off;
	return u->body.data != NULL ? u->body.data + u->off : "";
}

void mcp_upstream_consume(struct mcp_upstream *u, size_t n)
{
	u->off += n < u->body.len - u->off ? n : u->body.len - u->off;
	if (u->off == u->body.len) {
		u->body.len = 0;
		u->off = 0;
	} else if (u->off > (64u << 10) && u->off > u->body.len / 2) {
		memmove(u->body.data, u->body.data + u->off, u->body.len - u->off);
		u->body.len -= u->off;
		u->off = 0;
	}
}

enum mcp_upstream_end mcp_upstream_outcome(const struct mcp_upstream *u, char *why, size_t why_len)
{
	long sent = 0;

	if (!u->ended) {
		snprintf(why, why_len, "the answer is still coming");
		return MCP_UPSTREAM_RUNNING;
	}
	if (u->result == CURLE_OK) {
		snprintf(why, why_len, "complete");
		return MCP_UPSTREAM_COMPLETE;
	}
	if (u->overflow)
		snprintf(why, why_len, "over %u MiB of the answer unread", MAX_PENDING >> 20);
	else
		snprintf(why, why_len, "%s",
			 u->error[0] != '\0' ? u->error : curl_easy_strerror(u->result));
	if (u->result == CURLE_COULDNT_RESOLVE_HOST || u->result == CURLE_COULDNT_RESOLVE_PROXY ||
	    u->result == CURLE_COULDNT_CONNECT)
		return MCP_UPSTREAM_UNREACHABLE;
	/* A connection that timed out or failed its TLS handshake carried no request. */
	if (curl_easy_getinfo(u->easy, CURLINFO_REQUEST_SIZE, &sent) == CURLE_OK && sent == 0)
		return MCP_UPSTREAM_UNREACHABLE;
	return MCP_UPSTREAM_BROKEN;
}

void mcp_upstream_close(struct mcp_upstream *u)
{
	if (u == NULL)
		return;
	if (u->multi != NULL && u->easy != NULL)
		curl_multi_remove_handle(u->multi, u->easy);
	if (u->easy != NULL)
		curl_easy_cleanup(u->easy);
	if (u->multi != NULL)
		curl_multi_cleanup(u->multi);
	curl_slist_free_all(u->sent);
	ledger_buf_free(&u->body);
	clear_head(u);
	free(u->head);
	free(u);
}

/* --- an intercepted tools/call --- */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static bool is_event_stream(const char *content_type)
{
	size_t n = content_type != NULL ? strcspn(content_type, "; \t") : 0;

	return n == 17 && strncasecmp(content_type, "text/event-stream", 17) == 0;
}

static void say(struct mcp_forward *out, enum mcp_sent sent, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Sets how the forward ended and why, in words cut to fit the reason. */
static void say(struct mcp_forward *out, enum mcp_sent sent, const char *fmt, ...)
{
	va_list ap;

	out->sent = sent;
	va_start(ap, fmt);
	vsnprintf(out->reason, sizeof(out->reason), fmt, ap);
	va_end(ap);
}

static void answered(struct mcp_forward *out, const char *text, size_t len)
{
	out->response = malloc(len + 1);
	if (out->response == NULL) {
		say(out, MCP_SENT_LOST, "out of memory for the server's response");
		return;
	}
	memcpy(out->response, text, len);
	out->response[len] = '\0';
	out->len = len;
	out->sent = MCP_SENT_ANSWERED;
}

static bool is_response_to(const char *id_key, const char *data, size_t len)
{
	struct mcp_message m = {0};
	char *key = NULL;
	bool ours = false;

	if (id_key == NULL || mcp_message_parse(data, len, &m) != LEDGER_OK)
		goto out;
	if (m.kind != MCP_MSG_RESPONSE)
		goto out;
	key = mcp_message_id_key(m.id);
	ours = key != NULL && strcmp(key, id_key) == 0;
out:
	free(key);
	mcp_message_free(&m);
	return ours;
}

/*
 * Reads the events that came: the response is returned in @p out, every
 * other event goes to the sink.
 * @return whether the forward is over: the response came, or the stream broke
 */
static bool read_events(struct mcp_upstream_call *c, struct mcp_forward *out)
{
	struct mcp_sse_event ev;
	size_t n = 0;
	const char *bytes = mcp_upstream_bytes(c->up, &n);

	mcp_sse_feed(&c->events, bytes, n);
	mcp_upstream_consume(c->up, n);
	for (;;) {
		switch (mcp_sse_next(&c->events, &ev)) {
		case MCP_SSE_MORE:
			return false;
		case MCP_SSE_BROKEN:
			say(out, MCP_SENT_LOST,
			    "the server's event stream broke: an event over %u MiB",
			    MCP_SSE_MAX_EVENT >> 20);
			return true;
		case MCP_SSE_EVENT:
			break;
		}
		if (ev.has_data && is_response_to(c->id_key, ev.data, ev.data_len)) {
			answered(out, ev.data, ev.data_len);
			ledger_buf_append(&c->event_head, ev.head, ev.head_len);
			mcp_sse_take(&c->events);
			c->answer = MCP_UPSTREAM_ANSWER_STREAM;
			return true;
		}
		c->sink.event(c->sink.ctx, ev.raw, ev.raw_len);
		mcp_sse_take(&c->events);
	}
}

/*
 * The answer came whole (not an event stream): a 2xx is the response, a
 * 4xx the refusal of a call that never ran, anything else a lost call.
 */
static void whole_answer(struct mcp_upstream_call *c, long status, enum mcp_upstream_end end,
			 const char *why, struct mcp_forward *out)
{
	size_t n = 0;
	const char *bytes = mcp_upstream_bytes(c->up, &n);

	if (status >= 400 && status < 500) {
		say(out, MCP_SENT_REFUSED, "the server refused the call: HTTP %ld", status);
		if (end == MCP_UPSTREAM_COMPLETE) {
			ledger_buf_append(&c->refusal, bytes, n);
			if (!c->refusal.oom)
				c->answer = MCP_UPSTREAM_ANSWER_REFUSAL;
		}
	} else if (end != MCP_UPSTREAM_COMPLETE) {
		say(out, MCP_SENT_LOST, "the server's answer broke off: %s", why);
	} else if (status < 200 || status >= 300) {
		say(out, MCP_SENT_LOST, "the server answered HTTP %ld", status);
	} else if (n == 0) {
		say(out, MCP_SENT_LOST, "the server answered HTTP %ld without a body", status);
	} else {
		answered(out, bytes, n);
		c->answer = MCP_UPSTREAM_ANSWER_JSON;
	}
}

void mcp_upstream_forward(struct mcp_upstream_call *c, struct mcp_forward *out)
{
	uint64_t deadline = c->timeout_ms > 0 ? now_ms() + c->timeout_ms : 0;
	bool streaming = false;
	char why[CURL_ERROR_SIZE];

	LEDGER_ASSERT(c->up == NULL); /* one forward per call */
	mcp_sse_init(&c->events);
	if (mcp_upstream_open(&c->req, &c->up) != LEDGER_OK) {
		say(out, MCP_SENT_REFUSED, "out of memory: not sent");
		return;
	}
	for (;;) {
		uint64_t now = now_ms(), left = deadline > now ? deadline - now : 0;
		enum mcp_upstream_end end;
		long status = 0;

		uint64_t cancelled = atomic_load(&c->cancelled_ms);

		if (deadline > 0 && left == 0) {
			say(out, MCP_SENT_LOST, "no response within --call-timeout-ms (%u ms)",
			    c->timeout_ms);
			return;
		}
		/* A server need not answer a cancelled request: its claim must not live on. */
		if (cancelled != 0 && now >= cancelled + c->cancel_grace_ms) {
			say(out, MCP_SENT_LOST,
			    "the client cancelled the call and the server did not answer it");
			return;
		}
		mcp_upstream_pump(c->up, deadline > 0 && left < FORWARD_POLL_MS ? (int)left
										: FORWARD_POLL_MS);
		end = mcp_upstream_outcome(c->up, why, sizeof(why));
		if (!mcp_upstream_head(c->up, &status)) {
			if (end == MCP_UPSTREAM_UNREACHABLE) {
				say(out, MCP_SENT_REFUSED, "the server could not be reached: %s",
				    why);
				return;
			}
			if (end != MCP_UPSTREAM_RUNNING) {
				say(out, MCP_SENT_LOST,
				    "the server's connection broke before its answer: %s", why);
				return;
			}
		} else if (status >= 200 && status < 300 &&
			   is_event_stream(mcp_upstream_header(c->up, "Content-Type"))) {
			if (!streaming)
				c->sink.stream(c->sink.ctx); /* the client's answer starts now */
			streaming = true;
			if (read_events(c, out))
				return;
			if (end != MCP_UPSTREAM_RUNNING) {
				say(out, MCP_SENT_LOST,
				    "the server's event stream %s before the response%s%s",
				    end == MCP_UPSTREAM_COMPLETE ? "ended" : "broke",
				    end == MCP_UPSTREAM_COMPLETE ? "" : ": ",
				    end == MCP_UPSTREAM_COMPLETE ? "" : why);
				return;
			}
		} else if (end != MCP_UPSTREAM_RUNNING) {
			whole_answer(c, status, end, why, out);
			return;
		}
	}
}

void mcp_upstream_call_free(struct mcp_upstream_call *c)
{
	if (c == NULL)
		return;
	mcp_upstream_close(c->up);
	c->up = NULL;
	mcp_sse_free(&c->events);
	ledger_buf_free(&c->event_head);
	ledger_buf_free(&c->refusal);
}

/* --- a passed-through tools/list answer --- */

static void note_tools(struct mcp_proxy *p, const char *text, size_t len)
{
	struct mcp_message m = {0};

	if (mcp_message_parse(text, len, &m) != LEDGER_OK)
		return;
	mcp_intercept_note_tools(p, &m);
	mcp_message_free(&m);
}

void mcp_upstream_tap_start(struct mcp_upstream_tap *t, const struct mcp_upstream *up)
{
	long status = 0;

	t->on = t->on && mcp_upstream_head(up, &status) && status >= 200 && status < 300;
	t->sse = is_event_stream(mcp_upstream_header(up, "Content-Type"));
	mcp_sse_init(&t->events);
}

void mcp_upstream_tap_feed(struct mcp_upstream_tap *t, struct mcp_proxy *p, const char *bytes,
			   size_t n)
{
	struct mcp_sse_event ev;
	enum mcp_sse_read r;

	if (!t->on || t->broken)
		return;
	if (!t->sse) {
		if (t->json.len + n > MAX_TAPPED)
			t->broken = true;
		else
			ledger_buf_append(&t->json, bytes, n);
		t->broken = t->broken || t->json.oom;
		return;
	}
	mcp_sse_feed(&t->events, bytes, n);
	while ((r = mcp_sse_next(&t->events, &ev)) == MCP_SSE_EVENT) {
		if (ev.has_data)
			note_tools(p, ev.data, ev.data_len);
		mcp_sse_take(&t->events);
	}
	t->broken = r == MCP_SSE_BROKEN;
}

void mcp_upstream_tap_end(struct mcp_upstream_tap *t, struct mcp_proxy *p)
{
	if (t->on && !t->broken && !t->sse && t->json.len > 0)
		note_tools(p, t->json.data, t->json.len);
	t->on = false;
}

void mcp_upstream_tap_free(struct mcp_upstream_tap *t)
{
	if (t == NULL)
		return;
	mcp_sse_free(&t->events);
	ledger_buf_free(&t->json);
}
