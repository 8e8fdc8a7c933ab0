/*
 * sdk/programs/ledger-gateway/upstream.c: a replica's SSE stream, pulled an event at a time
 * through libcurl's multi interface, so the connection thread that writes
 * to the client also watches the replica's silence.
 */
#include "sdk/programs/ledger-gateway/upstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#define POLL_MS 50
#define MAX_PENDING (4u << 20) /* an event longer than this is a broken replica */

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

struct upstream *upstream_open(const char *url, const char *body, size_t body_len,
			       const char *request_id, const char *attempt_id, const char *settled)
{
	struct upstream *u = calloc(1, sizeof(*u));

	if (u == NULL)
		return NULL;
	u->last_byte = now_ms();
	u->body = malloc(body_len + 1);
	u->multi = curl_multi_init();
	u->easy = curl_easy_init();
	if (u->body == NULL || u->multi == NULL || u->easy == NULL)
		goto fail;
	memcpy(u->body, body, body_len);
	u->body[body_len] = '\0';
	if (!add_header(&u->headers, "Content-Type", "application/json") ||
	    !add_header(&u->headers, "Accept", "text/event-stream") ||
	    !add_header(&u->headers, "X-Ledger-Request-Id", request_id) ||
	    !add_header(&u->headers, "X-Ledger-Attempt-Id", attempt_id) ||
	    !add_header(&u->headers, "X-Ledger-Settled-Tool-Calls", settled) ||
	    !add_header(&u->headers, "Expect", ""))
		goto fail;
	if (curl_easy_setopt(u->easy, CURLOPT_URL, url) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_CONNECTTIMEOUT_MS, 2000L) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_HTTPHEADER, u->headers) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_POSTFIELDS, u->body) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len) !=
		    CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_FAILONERROR, 1L) != CURLE_OK ||
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
	if (u->multi != NULL && u->easy != NULL)
		curl_multi_remove_handle(u->multi, u->easy);
	if (u->easy != NULL)
		curl_easy_cleanup(u->easy);
	if (u->multi != NULL)
		curl_multi_cleanup(u->multi);
	curl_slist_free_all(u->headers);
	free(u->body);
	free(u->buf);
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

static void pump(struct upstream *u)
{
	CURLMsg *msg;
	int running = 0, left = 0;

	curl_multi_poll(u->multi, NULL, 0, POLL_MS, NULL);
	curl_multi_perform(u->multi, &running);
	while ((msg = curl_multi_info_read(u->multi, &left)) != NULL) {
		if (msg->msg == CURLMSG_DONE) {
			u->ended = true;
			u->result = msg->data.result;
		}
	}
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
		*event = take_event(u);
		if (*event != NULL) {
			if (strncmp(*event, "data: [DONE]", 12) == 0) {
				free(*event);
				*event = NULL;
				return UPSTREAM_DONE;
			}
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

char *upstream_get(const char *url, long timeout_ms)
{
	struct upstream u = {0};
	CURL *easy = curl_easy_init();
	CURLcode rc = CURLE_FAILED_INIT;

	if (easy != NULL && curl_easy_setopt(easy, CURLOPT_URL, url) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_FAILONERROR, 1L) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_data) == CURLE_OK &&
	    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &u) == CURLE_OK)
		rc = curl_easy_perform(easy);
	if (easy != NULL)
		curl_easy_cleanup(easy);
	if (rc != CURLE_OK || u.buf == NULL) {
		free(u.buf);
		return NULL;
	}
	return u.buf;
}
