/*
 * sdk/programs/ledger-gateway/events.c: a run's numbered events and the
 * clients that attach to them, detach and resume (GATEWAY.md, "Events,
 * holds and resuming"): the run's thread publishes the events and records
 * what its clients did; each client's thread copies them to its stream.
 * Apart from run.c, so that the run's course reads on its own.
 */
#include "sdk/programs/ledger-gateway/events.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "api/wire/stream.h"
#include "ledger/common/buf.h"
#include "ledger/common/clock.h"
#include "ledger/common/sha256.h"
#include "sdk/programs/ledger-gateway/log.h"
#include "sdk/programs/ledger-gateway/metrics.h"
#include "sdk/programs/ledger-gateway/replica.h"
#include "sdk/programs/ledger-gateway/run_int.h"
#include "sdk/programs/ledger-gateway/trace.h"

#define CLIENT_POLL_MS 100 /* how often a waiting client's connection is looked at */

static struct gateway *gw; /* the settings, for the process's life */

void gateway_events_setup(struct gateway *cfg)
{
	gw = cfg;
}

/* --- the clients, as the run's thread sees them --- */

/*
 * Looks at the run's client, and records in the request's history what
 * changed since the last look: an attachment that resumed, a detachment
 * (with the hold it got), a hold that ran out.
 */
enum client_state gateway_events_look_at_client(struct gateway_run *r)
{
	struct ledger_client_error err = {0};
	uint64_t gen, hold_until;
	int64_t resumed_from;
	bool attached;
	enum client_state state;

	pthread_mutex_lock(&r->lock);
	gen = r->gen;
	attached = r->attached;
	resumed_from = r->resumed_from;
	hold_until = r->hold_until;
	state = attached ? CLIENT_HERE : gateway_now_ms() < hold_until ? CLIENT_HELD : CLIENT_GONE;
	/* The run ends now: a repeat from here on is row 9's, not an attachment. */
	if (state == CLIENT_GONE)
		r->closing = true;
	pthread_mutex_unlock(&r->lock);
	if (r->attempt == NULL)
		return state;
	if (gen != r->seen.gen) {
		/* A repeat took the stream over before the last client's leaving was seen:
		 * that client's connection ended all the same (stream_resumed_elsewhere). */
		if (r->seen.gen != 0 && !r->seen.detached && r->keyed &&
		    ledger_client_attempt_client_event(r->attempt, LEDGER_CLIENT_EVENT_DISCONNECTED,
						       -1, -1, &err) != LEDGER_CLIENT_OK)
			log_ledger_failure("disconnect not recorded", r, &err);
		ledger_client_error_clear(&err);
		if (r->seen.gen != 0 &&
		    ledger_client_attempt_client_event(r->attempt, LEDGER_CLIENT_EVENT_RESUMED,
						       resumed_from, -1, &err) != LEDGER_CLIENT_OK)
			log_ledger_failure("resume not recorded", r, &err);
		if (r->seen.gen != 0)
			gateway_log("client resumed", r->rid, aid_of(r), "\"last_event_id\":%lld",
				    (long long)resumed_from);
		r->seen.gen = gen;
		r->seen.detached = false;
	}
	ledger_client_error_clear(&err);
	if (!attached && !r->seen.detached && gen != 0) {
		int64_t hold = hold_until > gateway_now_ms()
				       ? (int64_t)(hold_until - gateway_now_ms())
				       : 0;

		r->seen.detached = true;
		gateway_log("client went away", r->rid, aid_of(r), "\"hold_ms\":%lld",
			    (long long)hold);
		if (r->keyed &&
		    ledger_client_attempt_client_event(r->attempt, LEDGER_CLIENT_EVENT_DISCONNECTED,
						       -1, hold, &err) != LEDGER_CLIENT_OK)
			log_ledger_failure("disconnect not recorded", r, &err);
	}
	ledger_client_error_clear(&err);
	if (state == CLIENT_GONE && r->keyed) {
		struct gateway_trace *t = gateway_run_trace(r);

		gateway_trace_event(t, "hold_ended", NULL, 0);
		gateway_trace_release(t);
		gateway_log("hold ended", r->rid, aid_of(r), NULL);
		if (ledger_client_attempt_client_event(r->attempt, LEDGER_CLIENT_EVENT_HOLD_ENDED,
						       -1, -1, &err) != LEDGER_CLIENT_OK)
			log_ledger_failure("hold end not recorded", r, &err);
	}
	ledger_client_error_clear(&err);
	return state;
}

/* The wall-clock time CLIENT_POLL_MS from now: when a wait on r->changed looks again. */
static struct timespec poll_deadline(void)
{
	return ledger_clock_after(CLOCK_REALTIME, CLIENT_POLL_MS);
}

/* Waits until a client attaches or the hold is over. @return the state found */
enum client_state gateway_events_wait_for_client(struct gateway_run *r)
{
	enum client_state state;

	while ((state = gateway_events_look_at_client(r)) == CLIENT_HELD) {
		struct timespec until = poll_deadline();

		pthread_mutex_lock(&r->lock);
		if (!r->attached)
			pthread_cond_timedwait(&r->changed, &r->lock, &until);
		pthread_mutex_unlock(&r->lock);
	}
	return state;
}

/* --- what the clients get --- */

static bool error_retryable(const char *client_error)
{
	json_t *ce = json_loads(client_error, 0, NULL);
	bool retryable = json_is_true(json_object_get(json_object_get(ce, "error"), "retryable"));

	json_decref(ce);
	return retryable;
}

/* True if @p event carries output text (a token), as OpenAI chunks do. */
static bool carries_token(const char *event)
{
	json_t *chunk = json_loads(event + 6, JSON_DISABLE_EOF_CHECK, NULL);
	json_t *content = json_object_get(
		json_object_get(json_array_get(json_object_get(chunk, "choices"), 0), "delta"),
		"content");
	bool token = json_is_string(content) && json_string_length(content) > 0;

	json_decref(chunk);
	return token;
}

/*
 * Adds the event @p text (taken) as the next one, numbered, and counts the
 * output tokens published (r->delivered). @return false: out of memory
 */
bool gateway_events_publish(struct gateway_run *r, char *text)
{
	bool token = strncmp(text, "data: ", 6) == 0 && carries_token(text);
	char *numbered = NULL;
	bool ok;

	pthread_mutex_lock(&r->lock);
	if (r->n_events == r->cap_events) {
		size_t cap = r->cap_events != 0 ? r->cap_events * 2 : 16;
		struct event *grown = realloc(r->events, cap * sizeof(*grown));

		if (grown != NULL) {
			r->events = grown;
			r->cap_events = cap;
		}
	}
	ok = r->n_events < r->cap_events &&
	     asprintf(&numbered, "id: %zu\n%s", r->n_events + 1, text) >= 0;
	if (ok) {
		r->delivered += token;
		r->events[r->n_events].text = numbered;
		r->events[r->n_events].len = strlen(numbered);
		r->events[r->n_events].tokens = r->delivered;
		r->n_events++;
		pthread_cond_broadcast(&r->changed);
	}
	pthread_mutex_unlock(&r->lock);
	free(text);
	return ok;
}

/* The run ends before its first event: @p client_error (taken) is its answer. */
void gateway_events_refuse(struct gateway_run *r, char *client_error, long status)
{
	gateway_log("answered with an error", r->rid, aid_of(r), "\"client_error\":%s",
		    client_error != NULL ? client_error : "null");
	pthread_mutex_lock(&r->lock);
	r->refusal_status = status;
	r->refusal_retryable = client_error != NULL && error_retryable(client_error);
	free(r->refusal_body);
	r->refusal_body = client_error;
	pthread_mutex_unlock(&r->lock);
}

void gateway_events_kept_make(struct gateway_run *r, size_t n, const char *last, struct kept *k)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	unsigned char digest[32];

	memset(k, 0, sizeof(*k));
	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < n && i < r->n_events; i++)
		ledger_buf_append(&b, r->events[i].text, r->events[i].len);
	/* The event about to be published, numbered as gateway_events_publish() will number it. */
	if (last != NULL)
		ledger_buf_printf(&b, "id: %zu\n%s", r->n_events + 1, last);
	pthread_mutex_unlock(&r->lock);
	k->answer.status = 200;
	k->answer.content_type = "text/event-stream";
	k->answer.len = b.len;
	if (b.len <= gw->max_kept_answer_bytes && !b.oom) {
		k->bytes = ledger_buf_steal(&b, NULL);
		k->answer.body = k->bytes != NULL ? k->bytes : "";
	} else if (!b.oom && ledger_sha256(b.data, b.len, digest)) {
		for (size_t i = 0; i < 32; i++)
			snprintf(k->sha256 + 2 * i, 3, "%02x", digest[i]);
		k->answer.sha256 = k->sha256;
	}
	ledger_buf_free(&b);
}

void gateway_events_kept_clear(struct kept *k)
{
	free(k->bytes);
	memset(k, 0, sizeof(*k));
}

/* The events a client got or, attached, is about to get: what the stream's end keeps. */
size_t gateway_events_delivered(struct gateway_run *r)
{
	size_t n;

	pthread_mutex_lock(&r->lock);
	n = r->attached ? r->n_events : r->written;
	pthread_mutex_unlock(&r->lock);
	return n;
}

/* The output tokens in the run's first @p n events. */
uint64_t gateway_events_tokens_in(struct gateway_run *r, size_t n)
{
	uint64_t tokens;

	pthread_mutex_lock(&r->lock);
	n = n < r->n_events ? n : r->n_events;
	tokens = n > 0 ? r->events[n - 1].tokens : 0;
	pthread_mutex_unlock(&r->lock);
	return tokens;
}

/* --- a client's side: copying the run's events to its connection --- */

/* The client's connection dropped: a keyed run holds on for a repeat to attach. */
static void detach(struct gateway_run *r, uint64_t gen)
{
	pthread_mutex_lock(&r->lock);
	if (r->gen == gen && r->attached) {
		uint32_t hold = !r->keyed         ? 0
				: r->written == 0 ? gw->first_byte_hold_ms
						  : gw->resume_hold_ms;
		struct ledger_trace_attr attr = {"ledger.hold_ms", LEDGER_ATTR_INT, {.i = hold}};

		r->attached = false;
		r->hold_until = gateway_now_ms() + hold;
		atomic_store(&r->wake_at, r->hold_until);
		pthread_cond_broadcast(&r->changed);
		if (!r->ended) /* a client that got the whole answer did not leave it */
			gateway_trace_event(gateway_trace_current(), "client_disconnected", &attr,
					    1);
	}
	pthread_mutex_unlock(&r->lock);
	atomic_store(&r->poke, true);
}

/* A refusal's status and code (error.code of its body, if it is the envelope) on the client's span. */
static void trace_refusal(long status, const char *body)
{
	json_t *doc = status >= 400 && body != NULL ? json_loads(body, 0, NULL) : NULL;
	const char *code =
		json_string_value(json_object_get(json_object_get(doc, "error"), "code"));

	gateway_trace_reply(gateway_trace_current(), (unsigned)status, code);
	json_decref(doc);
}

/* Answers the refusal a run ended with, before any byte of a stream. */
static void answer_refusal(struct gateway_run *r, struct wire_conn *conn)
{
	char headers[512];
	char *body = NULL, *type = NULL;
	long status;
	bool retry;
	size_t len;

	pthread_mutex_lock(&r->lock);
	status = r->refusal_status != 0 ? r->refusal_status : 503;
	retry = r->refusal_retryable;
	body = r->refusal_body != NULL ? strdup(r->refusal_body) : NULL;
	type = r->refusal_type != NULL && strlen(r->refusal_type) < 200 ? strdup(r->refusal_type)
									: NULL;
	pthread_mutex_unlock(&r->lock);
	if (body == NULL) {
		/* The run gave up on its client (the hold ran out) as this one attached: a
		 * repeat reopens the request. */
		status = 409;
		retry = true;
		body = gateway_run_local_error(
			r, "request_in_progress",
			"the request's run ended as this client attached; ask again", true);
	}
	len = body != NULL ? strlen(body) : 0;
	trace_refusal(status, body);
	snprintf(headers, sizeof(headers), "Content-Type: %s\r\nx-request-id: %s\r\n%s%s%s",
		 type != NULL ? type : "application/json", r->rid,
		 status >= 400 ? "x-should-retry: " : "",
		 status >= 400 ? (retry ? "true" : "false") : "", status >= 400 ? "\r\n" : "");
	free(type);
	if (body != NULL &&
	    wire_stream_head(conn, (unsigned)status, headers, (int64_t)len) == LEDGER_OK &&
	    wire_stream_write(conn, body, len) == LEDGER_OK)
		wire_stream_end(conn, true);
	free(body);
}

/* Another client took the run over: this one ends with an error, never a clean end. */
static void replaced(struct gateway_run *r, struct wire_conn *conn, bool head, size_t next)
{
	char *body =
		gateway_run_error_body(r->rid, "stream_resumed_elsewhere", "server_error",
				       "a repeat of the request took its stream over", 0, false);
	char *event = NULL;

	if (body == NULL)
		return;
	gateway_trace_reply(gateway_trace_current(), head ? 200 : 409, "stream_resumed_elsewhere");
	if (head) {
		/* Numbered as the last event this client got: a resume from it misses nothing. */
		if (asprintf(&event, "id: %zu\ndata: %s\n\n", next, body) >= 0 &&
		    wire_stream_write(conn, event, strlen(event)) == LEDGER_OK)
			wire_stream_end(conn, true);
	} else {
		char headers[200];

		snprintf(headers, sizeof(headers),
			 "Content-Type: application/json\r\nx-request-id: %s\r\n"
			 "x-should-retry: false\r\n",
			 r->rid);
		if (wire_stream_head(conn, 409, headers, (int64_t)strlen(body)) == LEDGER_OK &&
		    wire_stream_write(conn, body, strlen(body)) == LEDGER_OK)
			wire_stream_end(conn, true);
	}
	free(event);
	free(body);
}

/* What a waiting client finds: events to write, the end, or another client in its place. */
enum turn {
	TURN_EVENTS,
	TURN_END,
	TURN_REPLACED,
	TURN_GONE
};

static enum turn wait_turn(struct gateway_run *r, struct wire_conn *conn, uint64_t gen, size_t next)
{
	enum turn turn;

	pthread_mutex_lock(&r->lock);
	for (;;) {
		struct timespec until;

		if (r->gen != gen) {
			turn = TURN_REPLACED;
			break;
		}
		if (next < r->n_events) {
			turn = TURN_EVENTS;
			break;
		}
		if (r->ended) {
			turn = TURN_END;
			break;
		}
		/* Waiting for the engine, the client is watched: gone, the run learns at once. */
		pthread_mutex_unlock(&r->lock);
		if (wire_stream_gone(conn))
			return TURN_GONE;
		until = poll_deadline();
		pthread_mutex_lock(&r->lock);
		if (r->gen == gen && next >= r->n_events && !r->ended)
			pthread_cond_timedwait(&r->changed, &r->lock, &until);
	}
	pthread_mutex_unlock(&r->lock);
	return turn;
}

/* Writes events [*next, what the run has) to the client. @return false: the client is gone */
static bool write_events(struct gateway_run *r, struct wire_conn *conn, size_t *next, bool *head)
{
	struct event batch[64];
	size_t n = 0;
	char headers[200];

	pthread_mutex_lock(&r->lock);
	while (n < 64 && *next + n < r->n_events) {
		batch[n] = r->events[*next + n];
		n++;
	}
	pthread_mutex_unlock(&r->lock);
	if (!*head) {
		snprintf(headers, sizeof(headers),
			 "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
			 "x-request-id: %s\r\n",
			 r->rid);
		gateway_trace_reply(gateway_trace_current(), 200, NULL);
		if (wire_stream_head(conn, 200, headers, -1) != LEDGER_OK)
			return false;
		*head = true;
	}
	/* An event's text never changes once published: it is read outside the lock. */
	for (size_t i = 0; i < n; i++) {
		if (wire_stream_write(conn, batch[i].text, batch[i].len) != LEDGER_OK)
			return false;
	}
	*next += n;
	pthread_mutex_lock(&r->lock);
	if (*next > r->written)
		r->written = *next;
	pthread_mutex_unlock(&r->lock);
	return true;
}

bool gateway_events_serve(struct gateway_run *r, struct wire_conn *conn, int64_t last_event_id,
			  bool starter)
{
	struct gateway_trace *mine = gateway_trace_current(), *left = NULL;
	size_t next = 0;
	bool head = false;
	uint64_t gen;

	pthread_mutex_lock(&r->lock);
	if (!starter && r->closing) {
		/* Too late to attach: once the run has ended, its request's record
		 * says what a repeat gets. */
		while (!r->ended) {
			struct timespec t = poll_deadline();

			pthread_cond_timedwait(&r->changed, &r->lock, &t);
		}
		pthread_mutex_unlock(&r->lock);
		return false;
	}
	if (!starter) {
		gateway_metrics_resume();
		/* The run's events go to the span of the client it serves now. */
		if (mine != NULL) {
			left = r->trace;
			gateway_trace_hold(mine);
			r->trace = mine;
		}
	}
	gen = starter ? r->gen : ++r->gen;
	r->attached = true;
	r->resumed_from = last_event_id;
	atomic_store(&r->wake_at, 0);
	/* An id the run never made names no event of it: the stream from its first. */
	if (last_event_id > 0 && (uint64_t)last_event_id <= r->n_events)
		next = (size_t)last_event_id;
	pthread_cond_broadcast(&r->changed);
	pthread_mutex_unlock(&r->lock);
	gateway_trace_release(left);
	if (!starter)
		gateway_trace_resumed(mine, last_event_id, &r->parent);
	atomic_store(&r->poke, true);
	for (;;) {
		switch (wait_turn(r, conn, gen, next)) {
		case TURN_EVENTS:
			if (write_events(r, conn, &next, &head)) {
				uint64_t first = atomic_load(&r->engine_first_us);

				if (first != 0 && !atomic_exchange(&r->first_byte_timed, true))
					gateway_metrics_added_first_byte(now_us() - first);
				continue;
			}
			/* a write that fails is a client gone */
			__attribute__((fallthrough));
		case TURN_GONE:
			detach(r, gen);
			wire_stream_end(conn, false);
			return true;
		case TURN_REPLACED:
			replaced(r, conn, head, next);
			return true;
		case TURN_END:
			if (!head)
				answer_refusal(r, conn);
			else
				wire_stream_end(conn, true);
			detach(r, gen);
			return true;
		}
	}
}
