/*
 * sdk/programs/ledger-gateway/run.c: the runs of run.h. A run's thread
 * drives its attempts and asks ledgerd before every step that could
 * duplicate or lose output; the clients' threads copy its events out:
 *
 *   begin attempt ──> stream from replica ──> first event ──> a client attached? ──> deliver
 *        ^                  │ failure or silence      (hold)     │ no, hold over: client_disconnected
 *        └── retry_prefill ─ failover ─> wait_for_fence (ask again)
 *                                    └─> reject: the refusal, before any byte
 *   ... events, numbered ──> [DONE]: finish, the answer kept
 *        │ failure after a delta: terminate_stream, the error event, what clients got kept
 *        └ every client gone past the hold: client_disconnected
 *
 * No byte reaches a client before deliver succeeded, text of two attempts
 * is never spliced (a rerun only happens before the first delta), and the
 * first delta is recorded only while a client is attached to get it.
 */
#include "sdk/programs/ledger-gateway/run.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "api/wire/stream.h"
#include "ledger/common/buf.h"
#include "ledger/common/sha256.h"
#include "sdk/programs/ledger-gateway/log.h"
#include "sdk/programs/ledger-gateway/metrics.h"
#include "sdk/programs/ledger-gateway/replica.h"
#include "sdk/programs/ledger-gateway/trace.h"
#include "sdk/programs/ledger-gateway/upstream.h"

#define MAX_FENCE_WAIT_MS 60000u
#define CLIENT_POLL_MS 100 /* how often a waiting client's connection is looked at */
#define MAX_PRELUDE 8      /* events held before the first output, at most */

static struct gateway *gw; /* the settings, for the process's life */

/* One event for the clients: "id: N\n" and the engine's event, or the run's last. */
struct event {
	char *text;
	size_t len;
	uint64_t tokens; /* output tokens in the run's events up to this one */
};

/* Where the run's client stands, as its thread last recorded it in ledgerd. */
struct seen {
	uint64_t gen;  /* the attachment recorded last */
	bool detached; /* its detachment recorded */
};

struct gateway_run {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* an event, the end, an attachment or a detachment */
	unsigned refs;          /* the table's, the thread's, each client's */
	struct gateway_run *next_listed;
	bool listed;
	char rid[64];
	bool keyed;
	char input_sha256[65];
	atomic_bool poke;         /* the run's thread has a client change to look at */
	_Atomic uint64_t wake_at; /* and a hold that ends then (monotonic ms; 0: none) */

	/* The engine side: the run's thread alone. */
	char *body; /* the client's request, sent unchanged to every attempt */
	size_t body_len;
	unsigned attempts;              /* the request's attempts so far: named a1, a2, ... */
	struct ledger_attempt *attempt; /* the current one */
	size_t replica;                 /* its replica */
	bool counted;                   /* the run holds a request in flight on it */
	bool stream;                    /* an SSE stream was asked for; else one JSON answer */
	char *model;                    /* the model asked for, or NULL */
	char *revision;                 /* the request's model revision, or NULL */
	struct upstream *up;
	char *prelude[MAX_PRELUDE]; /* the attempt's events before its first output (a role) */
	size_t n_prelude;
	uint64_t delivered; /* content tokens published */
	bool settled_any;   /* a tool call of the request is settled: a rerun under another
	                         request id would run it again */
	struct seen seen;
	struct ledger_trace_ctx parent; /* the attempts' parent: the starting request's span */
	struct ledger_span *span;       /* the current attempt's span, or NULL */
	struct ledger_span *next_span;  /* the rerun's, made before ledgerd decides on it */
	const char *attempt_end;        /* how the current attempt ended, as its span says */
	char attempt_error[64];         /* its error.type, or "" */

	/* Under lock. */
	struct gateway_trace *trace; /* the span of the client attached last (held): the run's
	                                events and outcome go there */
	struct event *events;
	size_t n_events, cap_events;
	bool ended;             /* no event will come */
	bool closing;           /* every client gone past the hold: none may attach again */
	long refusal_status;    /* ended before any event: the answer */
	char *refusal_body;     /* owned */
	char *refusal_type;     /* its Content-Type, owned; NULL: application/json */
	bool refusal_retryable; /* x-should-retry */
	uint64_t refusal_retry_after_s;
	uint64_t gen;         /* attachments so far; the current client is the gen-th */
	bool attached;        /* a client is attached now */
	int64_t resumed_from; /* the last event id the latest client had; -1: none */
	size_t written;       /* events written to a client, the most any client got */
	uint64_t hold_until;  /* no client attached: when the hold ends (monotonic ms) */
	_Atomic uint64_t
		engine_first_us; /* when the engine's first event came (monotonic µs); 0: none */
	atomic_bool first_byte_timed; /* the time added before the first byte was counted */
};

static struct {
	pthread_mutex_t lock;
	struct gateway_run *listed;
} table = {.lock = PTHREAD_MUTEX_INITIALIZER};

void gateway_run_setup(struct gateway *cfg)
{
	gw = cfg;
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static const char *aid_of(const struct gateway_run *r)
{
	return r->attempt != NULL ? ledger_client_attempt_id(r->attempt) : NULL;
}

/* Logs why ledgerd refused the run's call, or could not be asked. */
static void log_ledger_failure(const char *msg, const struct gateway_run *r,
			       const struct ledger_client_error *err)
{
	gateway_log_ledger_failure(msg, r->rid, aid_of(r), err);
}

/* --- its spans --- */

/* The span the run's events go to, with a reference for the caller (or NULL). */
static struct gateway_trace *run_trace(struct gateway_run *r)
{
	struct gateway_trace *t;

	pthread_mutex_lock(&r->lock);
	t = r->trace;
	gateway_trace_hold(t);
	pthread_mutex_unlock(&r->lock);
	return t;
}

/* Counts how the request's answer ended, and says it on the span of its client. */
static void count_outcome(struct gateway_run *r, enum gateway_outcome outcome)
{
	struct gateway_trace *t = run_trace(r);

	gateway_metrics_request(outcome);
	gateway_trace_outcome(t, gateway_metrics_outcome_name(outcome), r->attempts);
	gateway_trace_release(t);
}

/* Notes how the current attempt ended, for its span; the first word stays. */
static void attempt_ended(struct gateway_run *r, const char *outcome, const char *error)
{
	if (r->attempt_end != NULL)
		return;
	r->attempt_end = outcome;
	snprintf(r->attempt_error, sizeof(r->attempt_error), "%s", error != NULL ? error : "");
}

/* The first delta is delivered, the point of no retry: on the attempt's span and the request's. */
static void first_delta(struct gateway_run *r)
{
	struct ledger_trace_attr attr = {"ledger.attempt_id", LEDGER_ATTR_STR, {.s = aid_of(r)}};
	struct gateway_trace *t = run_trace(r);

	ledger_span_add_event(r->span, "first_delta", 0, &attr, 1);
	gateway_trace_event(t, "first_delta", &attr, 1);
	gateway_trace_release(t);
}

/* --- the table of keyed runs --- */

struct gateway_run *gateway_run_find(const char *request_id)
{
	struct gateway_run *r;

	pthread_mutex_lock(&table.lock);
	for (r = table.listed; r != NULL; r = r->next_listed) {
		if (strcmp(r->rid, request_id) == 0) {
			pthread_mutex_lock(&r->lock);
			r->refs++;
			pthread_mutex_unlock(&r->lock);
			break;
		}
	}
	pthread_mutex_unlock(&table.lock);
	return r;
}

/* Takes @p r off the table. @return whether it was listed: the table's reference is
 * then the caller's to drop */
static bool unlist(struct gateway_run *r)
{
	struct gateway_run **p;
	bool found = false;

	pthread_mutex_lock(&table.lock);
	for (p = &table.listed; *p != NULL; p = &(*p)->next_listed) {
		if (*p == r) {
			*p = r->next_listed;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&table.lock);
	return found;
}

bool gateway_run_same_input(const struct gateway_run *r, const char *input_sha256)
{
	return strcmp(r->input_sha256, input_sha256) == 0;
}

void gateway_run_release(struct gateway_run *r)
{
	bool last;

	if (r == NULL)
		return;
	pthread_mutex_lock(&r->lock);
	last = --r->refs == 0;
	pthread_mutex_unlock(&r->lock);
	if (!last)
		return;
	for (size_t i = 0; i < r->n_events; i++)
		free(r->events[i].text);
	free(r->events);
	free(r->refusal_body);
	free(r->refusal_type);
	free(r->model);
	free(r->revision);
	free(r->body);
	gateway_trace_release(r->trace);
	pthread_cond_destroy(&r->changed);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* --- errors, as OpenAI-compatible clients raise them --- */

char *gateway_run_error_body(const char *request_id, const char *code, const char *type,
			     const char *message, uint64_t delivered, bool retryable)
{
	json_t *e = json_pack("{s:{s:s,s:s,s:n,s:s,s:s,s:b,s:I,s:b}}", "error", "code", code,
			      "type", type, "param", "message", message, "request_id", request_id,
			      "partial_output", delivered > 0, "delivered_output_tokens",
			      (json_int_t)delivered, "retryable", retryable);
	char *text = e != NULL ? json_dumps(e, JSON_COMPACT) : NULL;

	json_decref(e);
	return text;
}

/*
 * The run's own error. A keyless request whose run settled a tool call is
 * never retryable: a retry would be another logical request, and run the
 * tool again under it.
 */
static char *local_error(const struct gateway_run *r, const char *code, const char *message,
			 bool retryable)
{
	return gateway_run_error_body(r->rid, code, "server_error", message, r->delivered,
				      retryable && (r->keyed || !r->settled_any));
}

/* The client_error a refusal of ledgerd carries (request_closed, ...), or NULL. */
static char *refusal_client_error(const struct ledger_client_error *err)
{
	json_t *body = err->body != NULL ? json_loads(err->body, 0, NULL) : NULL;
	json_t *ce = json_object_get(json_object_get(body, "error"), "client_error");
	char *text = json_is_object(ce) ? json_dumps(ce, JSON_COMPACT) : NULL;

	json_decref(body);
	return text;
}

static bool error_retryable(const char *client_error)
{
	json_t *ce = json_loads(client_error, 0, NULL);
	bool retryable = json_is_true(json_object_get(json_object_get(ce, "error"), "retryable"));

	json_decref(ce);
	return retryable;
}

/* Notes whether @p settled (a JSON array) holds a call. */
static void note_settled(struct gateway_run *r, const char *settled)
{
	if (settled != NULL && strcmp(settled, "[]") != 0)
		r->settled_any = true;
}

/* --- the clients, as the run's thread sees them --- */

enum client_state {
	CLIENT_HERE, /* a client is attached */
	CLIENT_HELD, /* none, and the hold runs */
	CLIENT_GONE, /* none, and the hold is over */
};

/*
 * Looks at the run's client, and records in the request's history what
 * changed since the last look: an attachment that resumed, a detachment
 * (with the hold it got), a hold that ran out.
 */
static enum client_state look_at_client(struct gateway_run *r)
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
		struct gateway_trace *t = run_trace(r);

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
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_nsec += CLIENT_POLL_MS * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

/* Waits until a client attaches or the hold is over. @return the state found */
static enum client_state wait_for_client(struct gateway_run *r)
{
	enum client_state state;

	while ((state = look_at_client(r)) == CLIENT_HELD) {
		struct timespec until = poll_deadline();

		pthread_mutex_lock(&r->lock);
		if (!r->attached)
			pthread_cond_timedwait(&r->changed, &r->lock, &until);
		pthread_mutex_unlock(&r->lock);
	}
	return state;
}

/* --- what the clients get --- */

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
static bool publish(struct gateway_run *r, char *text)
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
static void refuse(struct gateway_run *r, char *client_error, long status)
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

/*
 * The answer to keep: the first @p n events' bytes, or past the bound
 * their count and SHA-256. Owned by @p kept until freed with kept_clear().
 */
struct kept {
	struct ledger_kept_answer answer;
	char *bytes;
	char sha256[65];
};

static void kept_make(struct gateway_run *r, size_t n, const char *last, struct kept *k)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	unsigned char digest[32];

	memset(k, 0, sizeof(*k));
	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < n && i < r->n_events; i++)
		ledger_buf_append(&b, r->events[i].text, r->events[i].len);
	/* The event about to be published, numbered as publish() will number it. */
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

static void kept_clear(struct kept *k)
{
	free(k->bytes);
	memset(k, 0, sizeof(*k));
}

/* The events a client got or, attached, is about to get: what the stream's end keeps. */
static size_t delivered_events(struct gateway_run *r)
{
	size_t n;

	pthread_mutex_lock(&r->lock);
	n = r->attached ? r->n_events : r->written;
	pthread_mutex_unlock(&r->lock);
	return n;
}

/* --- attempts --- */

/* The monotonic clock in microseconds. */
static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Forgets the events held before an attempt's first output. */
static void prelude_clear(struct gateway_run *r)
{
	for (size_t i = 0; i < r->n_prelude; i++)
		free(r->prelude[i]);
	r->n_prelude = 0;
}

/*
 * Whether @p event carries no output yet: every choice's delta holds a role
 * at most, and no choice finished. Engines open a stream with one; held
 * back, it lets a failure before the first output still be rerun unseen.
 */
static bool is_prelude(const char *event)
{
	json_t *chunk = json_loads(event + 5, JSON_DISABLE_EOF_CHECK, NULL), *choice;
	json_t *choices = json_object_get(chunk, "choices");
	bool prelude = json_is_array(choices) && json_array_size(choices) > 0;
	size_t i;

	json_array_foreach(choices, i, choice)
	{
		json_t *delta = json_object_get(choice, "delta"), *v;
		const char *key;

		if (!json_is_object(delta) ||
		    (json_object_get(choice, "finish_reason") != NULL &&
		     !json_is_null(json_object_get(choice, "finish_reason"))))
			prelude = false;
		json_object_foreach(delta, key, v)
		{
			if (strcmp(key, "role") != 0 && !json_is_null(v) &&
			    !(json_is_string(v) && json_string_length(v) == 0))
				prelude = false;
		}
	}
	json_decref(chunk);
	return prelude;
}

/* Closes the upstream: a new connection each, so the engine sees it cut and stops. */
static void close_upstream(struct gateway_run *r)
{
	upstream_close(r->up);
	r->up = NULL;
	if (r->counted)
		gateway_replica_put(gw, r->replica);
	r->counted = false;
}

static void drop_attempt(struct gateway_run *r)
{
	close_upstream(r);
	ledger_client_attempt_free(r->attempt); /* stops its heartbeat */
	r->attempt = NULL;
	gateway_trace_attempt_end(r->span, r->attempt_end != NULL ? r->attempt_end : "failed",
				  r->attempt_error[0] != '\0' ? r->attempt_error : NULL);
	r->span = NULL;
	r->attempt_end = NULL;
	r->attempt_error[0] = '\0';
}

/*
 * After cancel_upstream (the client left past its hold): the upstream is
 * closed first, which every engine takes as an abort, then ledgerd is told
 * the attempt stopped, so its cancel is acknowledged only once its
 * connection is gone.
 */
static void stop_and_ack(struct gateway_run *r)
{
	struct ledger_client_error err = {0};

	close_upstream(r);
	if (r->attempt != NULL &&
	    ledger_client_attempt_cancel_ack(r->attempt, &err) != LEDGER_CLIENT_OK)
		log_ledger_failure("cancel not acknowledged", r, &err);
	ledger_client_error_clear(&err);
}

/* Sends the client's request to the current attempt's replica. */
static bool start_upstream(struct gateway_run *r, const char *settled)
{
	const struct replica *rep = &gw->replicas[r->replica];
	struct gateway_trace_wire w;
	struct upstream_target t = {.url = rep->url,
				    .api_key = rep->api_key,
				    .ledger_headers = gateway_replica_runs_tools(gw, r->replica),
				    .stream = r->stream};

	gateway_trace_attempt_wire(r->span, &r->parent, &w);
	t.traceparent = w.traceparent[0] != '\0' ? w.traceparent : NULL;
	t.tracestate = w.tracestate[0] != '\0' ? w.tracestate : NULL;
	gateway_trace_log_span(r->span, &r->parent); /* the thread's lines are the attempt's */
	prelude_clear(r);
	r->up = upstream_open(&t, r->body, r->body_len, r->rid, aid_of(r),
			      settled != NULL ? settled : "[]");
	if (r->up == NULL)
		return false;
	gateway_metrics_attempt();
	/* The lease is renewed while the replica streams, never after it failed. */
	if (ledger_client_heartbeat_start(r->attempt, 0) != LEDGER_CLIENT_OK)
		gateway_log("heartbeat not started", r->rid, aid_of(r), NULL);
	r->seen = (struct seen){0};
	gateway_log("attempt started", r->rid, aid_of(r), "\"replica\":\"%s\"",
		    gw->replicas[r->replica].name);
	return true;
}

/* The spec of the request's next attempt @p aid, on the replica of @p pick, in the context @p w. */
static struct ledger_attempt_spec next_spec(struct gateway_run *r,
					    const struct gateway_replica_pick *pick,
					    const char *aid, const struct gateway_trace_wire *w)
{
	return (struct ledger_attempt_spec){
		.traceparent = w->traceparent[0] != '\0' ? w->traceparent : NULL,
		.tracestate = w->tracestate[0] != '\0' ? w->tracestate : NULL,
		.request_id = r->rid,
		.attempt_id = aid,
		.replica = gw->replicas[pick->index].name,
		.model_revision = pick->revision,
		.lease_ms = gw->lease_ms,
		.max_attempts = gw->max_attempts,
		.gateway = gw->id,
		.identity = pick->identity,
		.input_sha256 = r->input_sha256};
}

/* Starts the attempt the run was handed. @return NULL, or the client error to answer with */
static char *begin(struct gateway_run *r)
{
	note_settled(r, ledger_client_attempt_settled(r->attempt));
	return start_upstream(r, ledger_client_attempt_settled(r->attempt))
		       ? NULL
		       : local_error(r, "internal_error", "out of memory", true);
}

/*
 * The replica failed, or the client is gone: reports what the client got,
 * asks ledgerd, and waits out wait_for_fence. The attempt's heartbeat stops
 * first: a failed replica's lease must be allowed to run out. A decision
 * that ends the request keeps @p kept (what the clients got), when set. A
 * failed replica is ejected unless @p mark_down is false: the attempt
 * already recorded what it saw of it (busy, unauthorized).
 * @return LEDGER_CLIENT_OK with the decision in @p d, or the refusal
 */
static enum ledger_client_err ask_failover_marking(struct gateway_run *r, enum ledger_signal signal,
						   const struct ledger_kept_answer *kept,
						   bool mark_down, struct ledger_decision *d,
						   struct ledger_client_error *err)
{
	struct ledger_failover_opts opts = {.delivered_answer = kept};
	struct ledger_attempt_spec next;
	struct gateway_replica_pick pick = {.index = GATEWAY_REPLICA_NONE};
	struct gateway_trace *t = run_trace(r);
	struct ledger_span *next_span = NULL; /* the rerun's, kept if ledgerd begins it */
	struct gateway_trace_wire w;
	char next_aid[16];
	enum ledger_client_err rc;
	uint64_t waited = 0;

	ledger_client_heartbeat_stop(r->attempt);
	/* Slow is not failed, and a client that left says nothing of the replica. */
	if (mark_down && signal != LEDGER_SIGNAL_OVERLOADED &&
	    signal != LEDGER_SIGNAL_CLIENT_DISCONNECTED)
		gateway_replica_saw(gw, r->replica, GATEWAY_SEEN_FAILED);
	if (r->delivered > 0 &&
	    ledger_client_attempt_deliver(r->attempt, r->delivered, err) != LEDGER_CLIENT_OK)
		gateway_log("progress not reported", r->rid, aid_of(r), "\"code\":\"%s\"",
			    err->code);
	ledger_client_error_clear(err);

	/* Where a rerun would go, if the decision allows one. */
	if (signal != LEDGER_SIGNAL_OVERLOADED && signal != LEDGER_SIGNAL_CLIENT_DISCONNECTED &&
	    r->delivered == 0)
		pick = gateway_replica_pick(gw, r->model, r->replica, r->revision);
	if (pick.index != GATEWAY_REPLICA_NONE) {
		snprintf(next_aid, sizeof(next_aid), "a%u", r->attempts + 1);
		next_span =
			gateway_trace_attempt_start(&r->parent, gw, pick.index, r->model, next_aid);
		gateway_trace_attempt_wire(next_span, &r->parent, &w);
		next = next_spec(r, &pick, next_aid, &w);
		opts.next = &next;
	}
	for (;;) {
		rc = ledger_client_failover(r->attempt, signal, &opts, d, err);
		if (rc != LEDGER_CLIENT_OK || d->action != LEDGER_FAILOVER_WAIT_FOR_FENCE ||
		    waited >= MAX_FENCE_WAIT_MS)
			break;
		/* The source may be alive: cut it off and let its lease run out. Its
		 * cancel is not acknowledged here: a closed connection does not prove
		 * that a replica out of reach stopped, only its lease running out does. */
		gateway_log("waiting for the fence", r->rid, aid_of(r), "\"retry_after_ms\":%llu",
			    (unsigned long long)d->retry_after_ms);
		gateway_metrics_failover(d->action);
		gateway_trace_failover(t, ledger_client_signal_name(signal),
				       ledger_client_action_name(d->action), aid_of(r), NULL);
		close_upstream(r);
		sleep_ms(d->retry_after_ms + 10);
		waited += d->retry_after_ms + 10;
		ledger_client_decision_clear(d);
	}
	if (rc == LEDGER_CLIENT_OK) {
		gateway_log("failover", r->rid, aid_of(r), "\"signal\":\"%s\",\"action\":\"%s\"",
			    ledger_client_signal_name(signal),
			    ledger_client_action_name(d->action));
		gateway_metrics_failover(d->action);
		gateway_trace_failover(t, ledger_client_signal_name(signal),
				       ledger_client_action_name(d->action), aid_of(r),
				       d->action == LEDGER_FAILOVER_RETRY_PREFILL && d->next != NULL
					       ? next_aid
					       : NULL);
		if (d->action == LEDGER_FAILOVER_RETRY_PREFILL && d->next != NULL) {
			r->next_span = next_span; /* fail_over_early() moves to it */
			next_span = NULL;
			close_upstream(r); /* the old replica's request in flight ends here */
			r->replica = pick.index;
			r->counted = true;
			pick.index = GATEWAY_REPLICA_NONE;
		} else if (d->action == LEDGER_FAILOVER_CANCEL_UPSTREAM) {
			stop_and_ack(r);
		}
	}
	/* Slow is not failed: keep_waiting goes on with the attempt. */
	if (rc != LEDGER_CLIENT_OK || d->action != LEDGER_FAILOVER_KEEP_WAITING) {
		if (signal == LEDGER_SIGNAL_CLIENT_DISCONNECTED)
			attempt_ended(r, "cancelled", NULL);
		else
			attempt_ended(r, "failed", ledger_client_signal_name(signal));
	}
	gateway_trace_attempt_discard(next_span); /* ledgerd began no rerun */
	gateway_trace_release(t);
	if (pick.index != GATEWAY_REPLICA_NONE)
		gateway_replica_put(gw, pick.index);
	gateway_replica_pick_clear(&pick);
	return rc;
}

/* ask_failover_marking(), a failed replica ejected. */
static enum ledger_client_err ask_failover(struct gateway_run *r, enum ledger_signal signal,
					   const struct ledger_kept_answer *kept,
					   struct ledger_decision *d,
					   struct ledger_client_error *err)
{
	return ask_failover_marking(r, signal, kept, true, d, err);
}

/* A decision that ends the request: the client error it carries. */
static char *ending_error(struct gateway_run *r, struct ledger_decision *d)
{
	if (d->client_error != NULL)
		return strdup(d->client_error);
	return local_error(r, "upstream_failed", "the replica failed", false);
}

/*
 * Acts on a failure before the first delta: everything before it is
 * invisible to the client and may be rerun.
 * @return NULL to read on, or the client error to answer with
 */
static char *fail_over_early(struct gateway_run *r, enum ledger_signal signal, bool mark_down)
{
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};
	char *error = NULL;

	if (ask_failover_marking(r, signal, NULL, mark_down, &d, &err) != LEDGER_CLIENT_OK) {
		error = refusal_client_error(&err);
		if (error == NULL) {
			log_ledger_failure("failover not asked", r, &err);
			error = local_error(r, "ledger_unavailable", err.message, true);
		}
	} else if (d.action == LEDGER_FAILOVER_KEEP_WAITING) {
		if (ledger_client_heartbeat_start(r->attempt, 0) != LEDGER_CLIENT_OK)
			gateway_log("heartbeat not restarted", r->rid, aid_of(r), NULL);
	} else if (d.action == LEDGER_FAILOVER_RETRY_PREFILL && d.next != NULL) {
		note_settled(r, d.settled_tool_calls);
		drop_attempt(r);
		r->attempt = ledger_client_decision_take_next(&d);
		r->span = r->next_span;
		r->next_span = NULL;
		gateway_trace_attempt_begun(r->span, ledger_client_attempt_epoch(r->attempt));
		r->attempts++;
		if (!start_upstream(r, d.settled_tool_calls))
			error = local_error(r, "internal_error", "out of memory", true);
	} else if (d.action == LEDGER_FAILOVER_RETRY_PREFILL) {
		note_settled(r,
			     d.settled_tool_calls); /* a rerun under another id would repeat them */
		error = local_error(r, "no_replica_available", "no replica answers", true);
	} else {
		error = ending_error(r, &d);
	}
	ledger_client_decision_clear(&d);
	ledger_client_error_clear(&err);
	return error;
}

/* The client left before the first delta and its hold is over: nothing is kept running. */
static void abandon(struct gateway_run *r)
{
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};

	if (ask_failover(r, LEDGER_SIGNAL_CLIENT_DISCONNECTED, NULL, &d, &err) != LEDGER_CLIENT_OK)
		gateway_log("failover refused", r->rid, aid_of(r), "\"code\":\"%s\"", err.code);
	count_outcome(r, GATEWAY_OUTCOME_ABANDONED);
	ledger_client_decision_clear(&d);
	ledger_client_error_clear(&err);
}

/* An engine's answer that is the client's error (GATEWAY.md, "What an engine answers"). */
static bool is_client_error(long status)
{
	return status == 400 || status == 404 || status == 413 || status == 422;
}

/* What another status than 200 says of the replica: its key refused, busy, or failed. */
static enum gateway_replica_seen seen_in(long status)
{
	if (status == 401 || status == 403)
		return GATEWAY_SEEN_UNAUTHORIZED;
	if (status == 408 || status == 429 || status == 503)
		return GATEWAY_SEEN_BUSY;
	return GATEWAY_SEEN_FAILED;
}

/*
 * The client's own error: the engine's answer @p a goes to the client as
 * given, and the request ends failed with it, kept: no rerun, and the
 * replica is not marked down.
 */
static void pass_on(struct gateway_run *r, const struct upstream_answer *a)
{
	struct ledger_client_error err = {0};
	struct ledger_kept_answer kept = {
		.status = a->status,
		.content_type = a->content_type[0] != '\0' ? a->content_type : "application/json",
		.body = a->body,
		.len = a->len};
	struct ledger_finish_opts opts = {.answer = &kept};
	json_t *doc = json_loadb(a->body, a->len, 0, NULL), *error = json_object_get(doc, "error");
	json_t *ce;
	char *text;

	/* ledgerd records it in the error envelope: the engine's own when it has one. */
	if (!json_is_object(error)) {
		const char *message = json_string_value(json_object_get(doc, "message"));

		error = json_pack("{s:s,s:s,s:s}", "code", "upstream_client_error", "type",
				  "invalid_request_error", "message",
				  message != NULL         ? message
				  : json_is_string(error) ? json_string_value(error)
							  : "the engine refused the request");
	} else {
		json_incref(error);
	}
	ce = json_pack("{s:o,s:i}", "error", error, "http_status", (json_int_t)a->status);
	text = ce != NULL ? json_dumps(ce, JSON_COMPACT) : NULL;
	opts.client_error = text;
	ledger_client_heartbeat_stop(r->attempt);
	attempt_ended(r, "client_error", NULL);
	if (text == NULL ||
	    ledger_client_attempt_end(r->attempt, false, 0, &opts, &err) != LEDGER_CLIENT_OK)
		log_ledger_failure("client error not recorded", r, &err);
	gateway_log("passed on the engine's answer", r->rid, aid_of(r), "\"status\":%ld",
		    a->status);
	pthread_mutex_lock(&r->lock);
	r->refusal_status = a->status;
	r->refusal_retryable = false;
	free(r->refusal_body);
	free(r->refusal_type);
	r->refusal_body = strndup(a->body, a->len);
	r->refusal_type = strdup(kept.content_type);
	pthread_mutex_unlock(&r->lock);
	count_outcome(r, GATEWAY_OUTCOME_CLIENT_ERROR);
	free(text);
	json_decref(ce);
	json_decref(doc);
	ledger_client_error_clear(&err);
}

/*
 * Streams from attempts until the first event is delivered to an attached
 * client. @return NULL with the event in @p event; NULL with no event when
 * the client left for good (abandoned); or the client error to answer with
 */
static char *first_event(struct gateway_run *r, char **event)
{
	struct ledger_client_error err = {0};
	char *error = begin(r);

	*event = NULL;
	while (error == NULL) {
		enum ledger_signal signal = LEDGER_SIGNAL_UPSTREAM_CLOSED;
		enum upstream_read got = upstream_next(r->up, gw->soft_ms, gw->stall_ms, event,
						       &signal, &r->poke, &r->wake_at);
		bool mark_down = true;

		if (got == UPSTREAM_ANSWER) {
			struct upstream_answer a = upstream_answer(r->up);

			if (a.status == 200 && !r->stream) {
				/* One JSON answer: it is the first byte, and the last. */
				*event = strndup(a.body, a.len);
				if (*event == NULL)
					return local_error(r, "internal_error", "out of memory",
							   true);
				got = UPSTREAM_EVENT;
			} else if (is_client_error(a.status)) {
				pass_on(r, &a);
				return NULL;
			} else {
				enum gateway_replica_seen seen = seen_in(a.status);

				gateway_log("replica answered", r->rid, aid_of(r),
					    "\"replica\":\"%s\",\"status\":%ld",
					    gw->replicas[r->replica].name, a.status);
				gateway_replica_saw(gw, r->replica, seen);
				mark_down = false;
			}
		}
		if (got == UPSTREAM_SILENT && !r->stream) {
			/* A whole answer is silent until its end: only the probes say it died. */
			if (!gateway_replica_is_down(gw, r->replica))
				continue;
			got = UPSTREAM_FAILED;
			signal = LEDGER_SIGNAL_HEARTBEAT_TIMEOUT;
		}
		if (got == UPSTREAM_EVENT && r->stream && r->n_prelude < MAX_PRELUDE &&
		    is_prelude(*event)) {
			r->prelude[r->n_prelude++] = *event; /* written with the first output */
			*event = NULL;
			continue;
		}
		if (got == UPSTREAM_POKED || got == UPSTREAM_EVENT) {
			enum client_state c =
				got == UPSTREAM_EVENT ? wait_for_client(r) : look_at_client(r);

			if (c == CLIENT_GONE) {
				free(*event);
				*event = NULL;
				abandon(r);
				break;
			}
			if (got == UPSTREAM_POKED)
				continue;
			/* The point of no retry: durable before the first byte goes out. */
			atomic_store(&r->engine_first_us, now_us());
			upstream_quiet_from_now(r->up); /* the wait was ours, not the replica's */
			if (ledger_client_attempt_deliver(r->attempt, 1, &err) ==
			    LEDGER_CLIENT_OK) {
				first_delta(r);
				break;
			}
			attempt_ended(r, "fenced", err.code[0] != '\0' ? err.code : NULL);
			free(*event);
			*event = NULL;
			signal = LEDGER_SIGNAL_HEARTBEAT_TIMEOUT; /* fenced: it must not publish */
		} else if (got == UPSTREAM_DONE) {
			signal = LEDGER_SIGNAL_UPSTREAM_CLOSED; /* a completion without output */
		} else if (got == UPSTREAM_SILENT) {
			signal = LEDGER_SIGNAL_OVERLOADED;
		}
		ledger_client_error_clear(&err);
		error = fail_over_early(r, signal, mark_down);
	}
	ledger_client_error_clear(&err);
	return error;
}

/* The stream ended well: finish with the whole answer kept, then [DONE]. */
static void complete(struct gateway_run *r)
{
	struct ledger_client_error err = {0};
	struct ledger_finish_opts opts = {0};
	struct kept k;
	char *done = strdup("data: [DONE]\n\n");

	ledger_client_heartbeat_stop(r->attempt);
	if (done == NULL) {
		gateway_log("out of memory", r->rid, aid_of(r), NULL);
		return;
	}
	/* The answer a repeat replays is the whole of it, [DONE] included, and it is
	 * kept before the last byte goes out. */
	kept_make(r, SIZE_MAX, done, &k);
	opts.answer = &k.answer;
	if (ledger_client_attempt_end(r->attempt, true, r->delivered, &opts, &err) ==
	    LEDGER_CLIENT_OK) {
		attempt_ended(r, "finished", NULL);
	} else {
		/* Not on record as complete: [DONE] would be a claim the ledger does not back.
		 * A repeat with the key learns how the request ended. */
		char *final = refusal_client_error(&err), *event = NULL;

		attempt_ended(r, "failed", "finish_refused");
		gateway_log("finish refused", r->rid, aid_of(r), "\"code\":\"%s\"", err.code);
		free(done);
		done = NULL;
		if (final == NULL)
			final = gateway_run_error_body(r->rid, "ledger_unavailable", "server_error",
						       "the ledger did not record the answer",
						       r->delivered, r->keyed);
		if (final != NULL && asprintf(&event, "data: %s\n\n", final) < 0)
			event = NULL;
		free(final);
		done = event;
	}
	if (done != NULL && !publish(r, done))
		gateway_log("out of memory", r->rid, aid_of(r), NULL);
	count_outcome(r, GATEWAY_OUTCOME_COMPLETED);
	kept_clear(&k);
	ledger_client_error_clear(&err);
}

/* The output tokens in the run's first @p n events. */
static uint64_t tokens_in(struct gateway_run *r, size_t n)
{
	uint64_t tokens;

	pthread_mutex_lock(&r->lock);
	n = n < r->n_events ? n : r->n_events;
	tokens = n > 0 ? r->events[n - 1].tokens : 0;
	pthread_mutex_unlock(&r->lock);
	return tokens;
}

/*
 * After the first delta nothing may run again: a failure, or a client
 * gone past its hold, ends the request with what the clients got kept.
 */
static void end_after_delta(struct gateway_run *r, enum ledger_signal signal)
{
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};
	char *final = NULL, *ce = NULL;
	struct kept k;
	size_t n = delivered_events(r);

	/* What ledgerd records as delivered is what a client got: events published after
	 * the last client left reached no one. */
	r->delivered = tokens_in(r, n);
	kept_make(r, n, NULL, &k);
	count_outcome(r, signal == LEDGER_SIGNAL_CLIENT_DISCONNECTED ? GATEWAY_OUTCOME_ABANDONED
								     : GATEWAY_OUTCOME_TERMINATED);
	if (ask_failover(r, signal, &k.answer, &d, &err) != LEDGER_CLIENT_OK) {
		ce = refusal_client_error(&err);
		if (ce == NULL)
			ce = local_error(r, "upstream_decode_interrupted", err.message, false);
	} else if (d.sse_event == NULL) {
		ce = ending_error(r, &d);
	}
	if (signal != LEDGER_SIGNAL_CLIENT_DISCONNECTED) {
		/* terminate_stream: the decision's event ends the stream; no [DONE] after it. */
		if (d.sse_event != NULL)
			final = strdup(d.sse_event);
		else if (ce != NULL && asprintf(&final, "data: %s\n\n", ce) < 0)
			final = NULL;
		if (final != NULL)
			publish(r, final);
	}
	free(ce);
	kept_clear(&k);
	ledger_client_decision_clear(&d);
	ledger_client_error_clear(&err);
}

/* Publishes events after the first until the stream's end, a failure, or the client's end. */
static void rest_of_stream(struct gateway_run *r)
{
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};

	for (;;) {
		enum ledger_signal signal = LEDGER_SIGNAL_UPSTREAM_CLOSED;
		char *event = NULL;
		enum upstream_read got = upstream_next(r->up, gw->soft_ms, gw->stall_ms, &event,
						       &signal, &r->poke, &r->wake_at);

		if (got == UPSTREAM_POKED) {
			if (look_at_client(r) == CLIENT_GONE) {
				end_after_delta(r, LEDGER_SIGNAL_CLIENT_DISCONNECTED);
				return;
			}
			continue;
		}
		if (got == UPSTREAM_EVENT) {
			if (!publish(r, event))
				gateway_log("out of memory", r->rid, aid_of(r), NULL);
			continue;
		}
		if (got == UPSTREAM_DONE) {
			complete(r);
			return;
		}
		if (got == UPSTREAM_ANSWER) /* an error event after the first: the attempt failed */
			signal = LEDGER_SIGNAL_UPSTREAM_CLOSED;
		if (got == UPSTREAM_SILENT) {
			/* Slow is not failed: ledgerd answers keep_waiting, and the stream goes on. */
			if (ask_failover(r, LEDGER_SIGNAL_OVERLOADED, NULL, &d, &err) ==
				    LEDGER_CLIENT_OK &&
			    d.action == LEDGER_FAILOVER_KEEP_WAITING) {
				if (ledger_client_heartbeat_start(r->attempt, 0) !=
				    LEDGER_CLIENT_OK)
					gateway_log("heartbeat not restarted", r->rid, aid_of(r),
						    NULL);
				ledger_client_decision_clear(&d);
				ledger_client_error_clear(&err);
				continue;
			}
			ledger_client_decision_clear(&d);
			ledger_client_error_clear(&err);
			signal = LEDGER_SIGNAL_HEARTBEAT_TIMEOUT;
		}
		end_after_delta(r, signal);
		return;
	}
}

/* The output tokens a whole answer reports in its usage, or 0. */
static uint64_t answer_tokens(const char *answer)
{
	json_t *doc = json_loads(answer, 0, NULL);
	json_int_t n = json_integer_value(
		json_object_get(json_object_get(doc, "usage"), "completion_tokens"));

	json_decref(doc);
	return n > 0 ? (uint64_t)n : 0;
}

/*
 * A completion asked for without "stream": the engine's answer @p answer
 * (taken) was delivered; it is finished and kept before it goes out whole.
 */
static void complete_whole(struct gateway_run *r, char *answer)
{
	struct ledger_client_error err = {0};
	struct upstream_answer a = upstream_answer(r->up);
	struct ledger_kept_answer kept = {
		.status = 200,
		.content_type = a.content_type[0] != '\0' ? a.content_type : "application/json",
		.body = answer,
		.len = strlen(answer)};
	struct ledger_finish_opts opts = {.answer = &kept};
	char *type = strdup(kept.content_type);

	ledger_client_heartbeat_stop(r->attempt);
	r->delivered = answer_tokens(answer);
	if (kept.len > gw->max_kept_answer_bytes)
		kept = (struct ledger_kept_answer){
			0}; /* its digest is ledgerd's to keep: not ours */
	opts.answer = kept.status != 0 ? &kept : NULL;
	if (ledger_client_attempt_end(r->attempt, true, r->delivered, &opts, &err) !=
	    LEDGER_CLIENT_OK) {
		char *final = refusal_client_error(&err);

		attempt_ended(r, "failed", "finish_refused");
		log_ledger_failure("finish refused", r, &err);
		if (final == NULL)
			final = local_error(r, "ledger_unavailable",
					    "the ledger did not record the answer", r->keyed);
		free(answer);
		free(type);
		ledger_client_error_clear(&err);
		refuse(r, final, 503);
		count_outcome(r, GATEWAY_OUTCOME_REFUSED);
		return;
	}
	attempt_ended(r, "finished", NULL);
	pthread_mutex_lock(&r->lock);
	r->refusal_status = 200;
	free(r->refusal_body);
	free(r->refusal_type);
	r->refusal_body = answer;
	r->refusal_type = type;
	pthread_mutex_unlock(&r->lock);
	count_outcome(r, GATEWAY_OUTCOME_COMPLETED);
}

/* The run's thread: its attempts, from the first to the end of the request's stream. */
static void *run_main(void *arg)
{
	struct gateway_run *r = arg;
	char *event = NULL, *error;

	gateway_trace_log_span(r->span, &r->parent);
	error = first_event(r, &event);

	if (error != NULL) {
		refuse(r, error, 503);
		count_outcome(r, GATEWAY_OUTCOME_REFUSED);
	} else if (event != NULL && !r->stream) {
		complete_whole(r, event);
	} else if (event != NULL) {
		bool ok = true;

		for (size_t i = 0; i < r->n_prelude && ok; i++) {
			ok = publish(r, r->prelude[i]);
			r->prelude[i] = NULL;
		}
		prelude_clear(r); /* what publish() did not take: out of memory */
		if (!ok)
			free(event);
		else if (publish(r, event))
			rest_of_stream(r);
	}
	prelude_clear(r);
	drop_attempt(r); /* closing the upstream is what tells the replica to stop */
	gateway_trace_attempt_discard(r->next_span);
	r->next_span = NULL;
	if (r->keyed && unlist(r))
		gateway_run_release(r); /* the table's */
	pthread_mutex_lock(&r->lock);
	r->ended = true;
	pthread_cond_broadcast(&r->changed);
	pthread_mutex_unlock(&r->lock);
	gateway_run_release(r);
	return NULL;
}

struct gateway_run *gateway_run_start(struct gateway_run_start *st)
{
	struct gateway_run *r = calloc(1, sizeof(*r));
	pthread_attr_t attr;
	pthread_t thread;

	if (r == NULL)
		goto fail;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->changed, NULL);
	r->refs = 2; /* the caller's and the thread's */
	snprintf(r->rid, sizeof(r->rid), "%s", st->request_id);
	snprintf(r->input_sha256, sizeof(r->input_sha256), "%s",
		 st->input_sha256 != NULL ? st->input_sha256 : "");
	r->keyed = st->keyed;
	r->body = st->body;
	r->body_len = st->body_len;
	r->attempts = st->attempts;
	r->attempt = st->attempt;
	r->replica = st->replica;
	r->counted = true;
	r->stream = st->stream;
	r->span = st->span;
	st->span = NULL;
	r->trace = st->trace;
	gateway_trace_hold(r->trace);
	gateway_trace_context(st->trace, &r->parent);
	if ((st->model != NULL && (r->model = strdup(st->model)) == NULL) ||
	    (st->revision != NULL && (r->revision = strdup(st->revision)) == NULL)) {
		drop_attempt(r);
		gateway_trace_release(r->trace);
		free(r->model);
		free(r->body);
		free(r);
		return NULL;
	}
	r->resumed_from = -1;
	/* The request that starts the run is its first client, attached from the start. */
	r->gen = 1;
	r->attached = true;
	atomic_init(&r->poke, false);
	atomic_init(&r->wake_at, 0);
	st->body = NULL;
	st->attempt = NULL;
	if (r->keyed) {
		pthread_mutex_lock(&table.lock);
		r->refs++; /* the table's: dropped when the thread unlists it */
		r->next_listed = table.listed;
		table.listed = r;
		r->listed = true;
		pthread_mutex_unlock(&table.lock);
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&thread, &attr, run_main, r) != 0) {
		pthread_attr_destroy(&attr);
		if (r->keyed)
			unlist(r);
		drop_attempt(r);
		r->refs = 1;
		gateway_run_release(r);
		return NULL;
	}
	pthread_attr_destroy(&attr);
	return r;
fail:
	free(st->body);
	gateway_trace_attempt_end(st->span, "failed", "internal_error");
	st->span = NULL;
	ledger_client_attempt_free(st->attempt);
	gateway_replica_put(gw, st->replica);
	st->body = NULL;
	st->attempt = NULL;
	return NULL;
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
		body = local_error(r, "request_in_progress",
				   "the request's run ended as this client attached; ask again",
				   true);
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

bool gateway_run_serve(struct gateway_run *r, struct wire_conn *conn, int64_t last_event_id,
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
