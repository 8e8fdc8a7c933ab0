/*
 * sdk/programs/ledger-gateway/upstream.c: a replica's SSE stream, pulled an event at a time
 * through libcurl's multi interface, so the connection thread that writes
 * to the client also watches the replica's silence.
 */
#include "sdk/programs/ledger-gateway/upstream.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#define POLL_MS 50
#define KICK_TURNS 4 /* upstream_kick()'s turns, none of which waits */
#define MAX_PENDING (4u << 20) /* an event longer than this is a broken replica */
#define SETTLED_MAX 4096u      /* the settled tool calls' header, at most */

struct upstream {
	CURLM *multi;
	CURL *easy;
	struct curl_slist *headers;
	char *body; /* the request body, kept for libcurl */
	char *buf;  /* bytes received, not yet returned as events */
	size_t len, cap;
	bool ended;         /* the transfer is over */
	bool overflow;      /* the replica sent more than MAX_PENDING without an event */
	CURLcode result;    /* how it ended */
	uint64_t last_byte; /* ms, monotonic */
	bool silence_told;  /* UPSTREAM_SILENT returned for the current silence */
	bool stream;        /* an SSE stream was asked for */
	long status;        /* the replica's status, once its head is in; 0 before */
	char *content_type; /* its Content-Type, once its head is in */
	long event_status;  /* an error event that is the client's error: its code */
	char *event_body;   /* and its JSON, the answer upstream_answer() gives */
	bool delivered;     /* an event was returned */
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static size_t on_data(char *data, size_t size, size_t n, void *arg)
{
	struct upstream *u = arg;
	size_t len = size * n;

	if (u->len + len > MAX_PENDING) {
		u->overflow = true;
		return 0;
	}
	if (u->len + len + 1 > u->cap) {
		size_t cap = (u->len + len + 1) * 2;
		char *p = realloc(u->buf, cap);

		if (p == NULL)
			return 0;
		u->buf = p;
		u->cap = cap;
	}
	memcpy(u->buf + u->len, data, len);
	u->len += len;
	u->buf[u->len] = '\0';
	u->last_byte = now_ms();
	u->silence_told = false;
	return len;
}

static bool add_header(struct curl_slist **list, const char *name, const char *value)
{
	char *line = NULL;
	struct curl_slist *next = NULL;

	if (asprintf(&line, "%s: %s", name, value) < 0)
		return false;
	next = curl_slist_append(*list, line);
	free(line);
	if (next == NULL)
		return false;
	*list = next;
	return true;
}

/*
 * X-Ledger-Settled-Tool-Calls (GATEWAY.md, "The engine side"): the settled
 * calls' JSON array, cut to the first calls that fit in SETTLED_MAX bytes,
 * and X-Ledger-Settled-Tool-Calls-Omitted with how many did not. An array
 * that cannot be read is sent as it came; ledgerd wrote it.
 */
static bool add_settled(struct curl_slist **list, const char *settled)
{
	json_t *all = strlen(settled) > SETTLED_MAX ? json_loads(settled, 0, NULL) : NULL;
	json_t *kept = NULL, *call;
	char *text = NULL, omitted[24];
	size_t i, used = 2; /* the brackets */
	bool ok;

	if (!json_is_array(all)) {
		json_decref(all);
		return add_header(list, "X-Ledger-Settled-Tool-Calls", settled);
	}
	kept = json_array();
	json_array_foreach(all, i, call)
	{
		size_t len = json_dumpb(call, NULL, 0, JSON_COMPACT);

		if (kept == NULL || used + len + (i > 0) > SETTLED_MAX)
			break;
		used += len + (i > 0);
		json_array_append(kept, call);
	}
	if (kept != NULL)
		text = json_dumps(kept, JSON_COMPACT);
	snprintf(omitted, sizeof(omitted), "%zu",
		 json_array_size(all) - (kept != NULL ? json_array_size(kept) : 0));
	ok = text != NULL && add_header(list, "X-Ledger-Settled-Tool-Calls", text) &&
	     add_header(list, "X-Ledger-Settled-Tool-Calls-Omitted", omitted);
	free(text);
	json_decref(kept);
	json_decref(all);
	return ok;
}

/*
 * The connections to the replicas, shared by every run's transfer: a stream
 * that ended whole leaves its connection for the next one, and a transfer
 * cut short closes its own (upstream_close), so a reused connection never
 * carries the rest of another attempt's answer.
 */
static CURLSH *share;
static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

static void share_lock(CURL *easy, curl_lock_data data, curl_lock_access access, void *arg)
{
	(void)easy;
	(void)access;
	(void)arg;
	pthread_mutex_lock(&share_locks[data]);
}

static void share_unlock(CURL *easy, curl_lock_data data, void *arg)
{
	(void)easy;
	(void)arg;
	pthread_mutex_unlock(&share_locks[data]);
}

bool upstream_start(void)
{
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&share_locks[i], NULL);
	share = curl_share_init();
	return share != NULL &&
	       curl_share_setopt(share, CURLSHOPT_LOCKFUNC, share_lock) == CURLSHE_OK &&
	       curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, share_unlock) == CURLSHE_OK &&
	       curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) == CURLSHE_OK &&
	       curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) == CURLSHE_OK;
}

struct upstream *upstream_open(const struct upstream_target *t, const char *body, size_t body_len,
			       const char *request_id, const char *attempt_id, const char *settled)
{
	struct upstream *u = calloc(1, sizeof(*u));
	char url[1024], *bearer = NULL;
	bool headers_ok;

	if (u == NULL)
		return NULL;
	u->stream = t->stream;
	u->last_byte = now_ms();
	u->body = malloc(body_len + 1);
	u->multi = curl_multi_init();
	u->easy = curl_easy_init();
	if (u->body == NULL || u->multi == NULL || u->easy == NULL)
		goto fail;
	memcpy(u->body, body, body_len);
	u->body[body_len] = '\0';
	snprintf(url, sizeof(url), "%s/v1/chat/completions", t->url);
	headers_ok = add_header(&u->headers, "Content-Type", "application/json") &&
		     add_header(&u->headers, "Accept",
				t->stream ? "text/event-stream" : "application/json") &&
		     add_header(&u->headers, "Expect", "");
	if (headers_ok && t->api_key != NULL)
		headers_ok = asprintf(&bearer, "Bearer %s", t->api_key) >= 0 &&
			     add_header(&u->headers, "Authorization", bearer);
	free(bearer);
	/* The attempt's span is the engine's parent (W3C Trace Context). */
	if (headers_ok && t->traceparent != NULL)
		headers_ok = add_header(&u->headers, "traceparent", t->traceparent) &&
			     (t->tracestate == NULL ||
			      add_header(&u->headers, "tracestate", t->tracestate));
	if (headers_ok && t->ledger_headers)
		headers_ok = add_header(&u->headers, "X-Ledger-Request-Id", request_id) &&
			     add_header(&u->headers, "X-Ledger-Attempt-Id", attempt_id) &&
			     add_settled(&u->headers, settled);
	/* A connection of the shared cache; a transfer cut short closes it (upstream_close). */
	if (!headers_ok || curl_easy_setopt(u->easy, CURLOPT_URL, url) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    (share != NULL && curl_easy_setopt(u->easy, CURLOPT_SHARE, share) != CURLE_OK) ||
	    curl_easy_setopt(u->easy, CURLOPT_CONNECTTIMEOUT_MS, 2000L) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_HTTPHEADER, u->headers) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_POSTFIELDS, u->body) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len) !=
		    CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_WRITEFUNCTION, on_data) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_WRITEDATA, u) != CURLE_OK ||
	    curl_multi_add_handle(u->multi, u->easy) != CURLM_OK)
		goto fail;
	return u;
fail:
	upstream_close(u);
	return NULL;
}

void upstream_close(struct upstream *u)
{
	if (u == NULL)
		return;
	/*
	 * A transfer not over, or over badly, closes its connection: a cancelled
	 * attempt's is never reused, and closing it is what tells the engine to
	 * stop. Only a whole answer's connection goes back to the cache.
	 */
	if (u->easy != NULL && !(u->ended && u->result == CURLE_OK))
		curl_easy_setopt(u->easy, CURLOPT_FORBID_REUSE, 1L);
	if (u->multi != NULL && u->easy != NULL)
		curl_multi_remove_handle(u->multi, u->easy);
	if (u->easy != NULL)
		curl_easy_cleanup(u->easy);
	if (u->multi != NULL)
		curl_multi_cleanup(u->multi);
	curl_slist_free_all(u->headers);
	free(u->body);
	free(u->buf);
	free(u->content_type);
	free(u->event_body);
	free(u);
}

/* Takes the first complete event out of the buffer, or returns NULL. */
static char *take_event(struct upstream *u)
{
	char *end = u->buf != NULL ? strstr(u->buf, "\n\n") : NULL;
	size_t n;
	char *event;

	if (end == NULL)
		return NULL;
	n = (size_t)(end - u->buf) + 2;
	event = strndup(u->buf, n);
	if (event == NULL)
		return NULL;
	memmove(u->buf, u->buf + n, u->len - n + 1);
	u->len -= n;
	return event;
}

/* Waits up to @p timeout_ms for the replica's sockets, then moves the transfer on. */
static void pump_for(struct upstream *u, int timeout_ms)
{
	CURLMsg *msg;
	int running = 0, left = 0;

	curl_multi_poll(u->multi, NULL, 0, timeout_ms, NULL);
	curl_multi_perform(u->multi, &running);
	while ((msg = curl_multi_info_read(u->multi, &left)) != NULL) {
		if (msg->msg == CURLMSG_DONE) {
			u->ended = true;
			u->result = msg->data.result;
		}
	}
	if (u->status == 0) {
		long status = 0;
		char *type = NULL;

		curl_easy_getinfo(u->easy, CURLINFO_RESPONSE_CODE, &status);
		if (status != 0) {
			curl_easy_getinfo(u->easy, CURLINFO_CONTENT_TYPE, &type);
			u->content_type = strdup(type != NULL ? type : "");
			u->status = status;
		}
	}
}

static void pump(struct upstream *u)
{
	pump_for(u, POLL_MS);
}

void upstream_finish(struct upstream *u, uint32_t max_ms)
{
	uint64_t until = now_ms() + max_ms;

	while (u != NULL && !u->ended) {
		uint64_t now = now_ms();

		if (now >= until)
			break;
		pump_for(u, (int)(until - now));
	}
}

void upstream_kick(struct upstream *u)
{
	/* A few turns without waiting: the connect started, then (a loopback or a near
	 * replica's connect being done by then) the request written. */
	for (int turn = 0; turn < KICK_TURNS && !u->ended; turn++) {
		long sent = 0;

		pump_for(u, 0);
		if (curl_easy_getinfo(u->easy, CURLINFO_REQUEST_SIZE, &sent) == CURLE_OK &&
		    sent > 0)
			break;
	}
}

/*
 * An event that reports a failure inside a 200 stream: {"error": ...} or
 * {"object": "error", ...}, as the engines write one. @return its "code"
 * when it has a numeric one (SGLang checks a prompt's length only once it
 * streams: a 400 there is the client's error), 1 for another error, 0 for
 * no error
 */
static long error_event(const char *event, char **json)
{
	json_t *doc, *error, *code;
	long status = 0;

	*json = NULL;
	if (strncmp(event, "data:", 5) != 0 || strstr(event, "error") == NULL)
		return 0;
	doc = json_loads(event + 5, JSON_DISABLE_EOF_CHECK, NULL);
	error = json_object_get(doc, "error");
	if (!json_is_object(error) &&
	    !(json_is_string(json_object_get(doc, "object")) &&
	      strcmp(json_string_value(json_object_get(doc, "object")), "error") == 0))
		error = NULL;
	else if (!json_is_object(error))
		error = doc;
	if (error != NULL) {
		code = json_object_get(error, "code");
		status = json_is_integer(code) && json_integer_value(code) >= 100 &&
					 json_integer_value(code) <= 599
				 ? (long)json_integer_value(code)
				 : 1;
		*json = json_dumps(doc, JSON_COMPACT);
	}
	json_decref(doc);
	return status;
}

struct upstream_answer upstream_answer(const struct upstream *u)
{
	if (u->event_body != NULL)
		return (struct upstream_answer){.status = u->event_status,
						.content_type = "application/json",
						.body = u->event_body,
						.len = strlen(u->event_body)};
	return (struct upstream_answer){.status = u->status,
					.content_type =
						u->content_type != NULL ? u->content_type : "",
					.body = u->buf != NULL ? u->buf : "",
					.len = u->len};
}

void upstream_quiet_from_now(struct upstream *u)
{
	u->last_byte = now_ms();
	u->silence_told = false;
}

enum upstream_read upstream_next(struct upstream *u, uint32_t soft_ms, uint32_t stall_ms,
				 char **event, enum ledger_signal *signal, atomic_bool *poke,
				 _Atomic uint64_t *wake_at)
{
	*event = NULL;
	for (;;) {
		uint64_t quiet, at = wake_at != NULL ? atomic_load(wake_at) : 0;

		if (poke != NULL && atomic_exchange(poke, false))
			return UPSTREAM_POKED;
		if (at != 0 && now_ms() >= at) {
			atomic_compare_exchange_strong(wake_at, &at, 0);
			return UPSTREAM_POKED;
		}
		/* Anything but a 200 stream is read whole: the caller passes it on or fails over. */
		if (u->status != 0 && (u->status != 200 || !u->stream)) {
			if (u->ended && u->result == CURLE_OK) {
				u->last_byte = now_ms();
				return UPSTREAM_ANSWER;
			}
		} else if ((*event = take_event(u)) != NULL) {
			if (strncmp(*event, "data: [DONE]", 12) == 0) {
				free(*event);
				*event = NULL;
				return UPSTREAM_DONE;
			}
			char *json = NULL;
			long code = error_event(*event, &json);

			if (code != 0) {
				free(*event);
				*event = NULL;
				/* Before any event, an error with a client's code is an answer to
				 * pass on; else the attempt failed (a [DONE] after it is ignored). */
				if (!u->delivered && code >= 400 && code < 500 && json != NULL) {
					free(u->event_body);
					u->event_body = json;
					u->event_status = code;
					return UPSTREAM_ANSWER;
				}
				free(json);
				*signal = LEDGER_SIGNAL_UPSTREAM_CLOSED;
				return UPSTREAM_FAILED;
			}
			u->delivered = true;
			return UPSTREAM_EVENT;
		}
		if (u->ended) {
			/* Nothing listening is a dead replica; a cut or short stream, a closed one. */
			*signal = u->result == CURLE_COULDNT_CONNECT
					  ? LEDGER_SIGNAL_REPLICA_EXITED
					  : LEDGER_SIGNAL_UPSTREAM_CLOSED;
			return UPSTREAM_FAILED;
		}
		if (u->overflow) {
			*signal = LEDGER_SIGNAL_UPSTREAM_CLOSED;
			return UPSTREAM_FAILED;
		}
		quiet = now_ms() - u->last_byte;
		if (!u->stream && quiet >= soft_ms) {
			/* A whole answer comes at its end: silence is no sign, the replica's
			 * probes are. The caller looks at them every soft timeout. */
			u->last_byte = now_ms();
			return UPSTREAM_SILENT;
		}
		if (quiet >= stall_ms) {
			*signal = LEDGER_SIGNAL_HEARTBEAT_TIMEOUT;
			return UPSTREAM_FAILED;
		}
		if (quiet >= soft_ms && !u->silence_told) {
			u->silence_told = true;
			return UPSTREAM_SILENT;
		}
		pump(u);
	}
}

struct upstream_reply upstream_get(const char *url, const char *api_key, long timeout_ms)
{
	struct upstream u = {0};
	struct upstream_reply reply = {0};
	struct curl_slist *headers = NULL;
	CURL *easy = curl_easy_init();
	char *bearer = NULL;
	CURLcode rc = CURLE_FAILED_INIT;

	if (api_key != NULL && (asprintf(&bearer, "Bearer %s", api_key) < 0 ||
				!add_header(&headers, "Authorization", bearer)))
		goto out;
	if (easy != NULL && curl_easy_setopt(easy, CURLOPT_URL, url) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_data) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &u) == CURLE_OK)
		rc = curl_easy_perform(easy);
	if (rc == CURLE_OK && !u.overflow) {
		curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &reply.status);
		reply.body = u.buf != NULL ? u.buf : strdup("");
		reply.len = u.len;
		u.buf = NULL;
		if (reply.body == NULL)
			reply.status = 0;
	}
out:
	if (easy != NULL)
		curl_easy_cleanup(easy);
	curl_slist_free_all(headers);
	free(bearer);
	free(u.buf);
	return reply;
}

void upstream_reply_clear(struct upstream_reply *r)
{
	free(r->body);
	*r = (struct upstream_reply){0};
}
