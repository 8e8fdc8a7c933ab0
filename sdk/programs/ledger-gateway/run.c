/*
 * sdk/programs/ledger-gateway/run.c: the runs of run.h: their table, their
 * life, and the course of a run's thread, which drives its attempts and asks
 * ledgerd before every step that could duplicate or lose output; the
 * clients' threads copy its events out (events.c). Its attempts and the
 * failovers between them are attempt.c's; the three share run_int.h:
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

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ledger/common/workers.h"
#include "sdk/programs/ledger-gateway/log.h"
#include "sdk/programs/ledger-gateway/metrics.h"
#include "sdk/programs/ledger-gateway/replica.h"
#include "sdk/programs/ledger-gateway/run_int.h"
#include "sdk/programs/ledger-gateway/trace.h"
#include "sdk/programs/ledger-gateway/upstream.h"

/* How long a stream that came to [DONE] is read for the end of its body. */
#define FINISH_MS 100u

static struct gateway *gw; /* the settings, for the process's life */

static struct {
	pthread_mutex_t lock;
	struct gateway_run *listed;
} table = {.lock = PTHREAD_MUTEX_INITIALIZER};

void gateway_run_setup(struct gateway *cfg)
{
	gw = cfg;
	gateway_attempt_setup(cfg);
	gateway_events_setup(cfg);
}

/* --- its spans --- */

/* The span the run's events go to, with a reference for the caller (or NULL). */
struct gateway_trace *gateway_run_trace(struct gateway_run *r)
{
	struct gateway_trace *t;

	pthread_mutex_lock(&r->lock);
	t = r->trace;
	gateway_trace_hold(t);
	pthread_mutex_unlock(&r->lock);
	return t;
}

/* Counts how the request's answer ended, and says it on the span of its client. */
void gateway_run_count_outcome(struct gateway_run *r, enum gateway_outcome outcome)
{
	struct gateway_trace *t = gateway_run_trace(r);

	gateway_metrics_request(outcome);
	gateway_trace_outcome(t, gateway_metrics_outcome_name(outcome), r->attempts);
	gateway_trace_release(t);
}

/* Notes how the current attempt ended, for its span; the first word stays. */
void gateway_run_attempt_ended(struct gateway_run *r, const char *outcome, const char *error)
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
	struct gateway_trace *t = gateway_run_trace(r);

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
char *gateway_run_local_error(const struct gateway_run *r, const char *code, const char *message,
			      bool retryable)
{
	return gateway_run_error_body(r->rid, code, "server_error", message, r->delivered,
				      retryable && (r->keyed || !r->settled_any));
}

/* The client_error a refusal of ledgerd carries (request_closed, ...), or NULL. */
char *gateway_run_refusal_error(const struct ledger_client_error *err)
{
	json_t *body = err->body != NULL ? json_loads(err->body, 0, NULL) : NULL;
	json_t *ce = json_object_get(json_object_get(body, "error"), "client_error");
	char *text = json_is_object(ce) ? json_dumps(ce, JSON_COMPACT) : NULL;

	json_decref(body);
	return text;
}

/* --- to the first event: what the attempts' engines answer (attempt.c fails them over) --- */

/* Forgets the events held before an attempt's first output. */
void gateway_run_prelude_clear(struct gateway_run *r)
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
	gateway_run_attempt_ended(r, "client_error", NULL);
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
	gateway_run_count_outcome(r, GATEWAY_OUTCOME_CLIENT_ERROR);
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
	char *error = gateway_attempt_begin(r);

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
					return gateway_run_local_error(r, "internal_error",
								       "out of memory", true);
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
			enum client_state c = got == UPSTREAM_EVENT
						      ? gateway_events_wait_for_client(r)
						      : gateway_events_look_at_client(r);

			if (c == CLIENT_GONE) {
				free(*event);
				*event = NULL;
				gateway_attempt_abandon(r);
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
			gateway_run_attempt_ended(r, "fenced",
						  err.code[0] != '\0' ? err.code : NULL);
			free(*event);
			*event = NULL;
			signal = LEDGER_SIGNAL_HEARTBEAT_TIMEOUT; /* fenced: it must not publish */
		} else if (got == UPSTREAM_DONE) {
			signal = LEDGER_SIGNAL_UPSTREAM_CLOSED; /* a completion without output */
		} else if (got == UPSTREAM_SILENT) {
			signal = LEDGER_SIGNAL_OVERLOADED;
		}
		ledger_client_error_clear(&err);
		error = gateway_attempt_fail_over_early(r, signal, mark_down);
	}
	ledger_client_error_clear(&err);
	return error;
}

/* --- after the first event: the stream to its end, or a whole answer --- */

/*
 * The stream ended well: finish, with the whole answer kept when a repeat
 * of its key may ask for it, then [DONE].
 */
static void complete(struct gateway_run *r)
{
	struct ledger_client_error err = {0};
	struct ledger_finish_opts opts = {0};
	struct kept k = {0};
	char *done = strdup("data: [DONE]\n\n");

	r->up_whole = true;
	ledger_client_heartbeat_stop(r->attempt);
	if (done == NULL) {
		gateway_log("out of memory", r->rid, aid_of(r), NULL);
		return;
	}
	/* The answer a repeat replays is the whole of it, [DONE] included, and it is
	 * kept before the last byte goes out. Without a key nothing repeats it. */
	if (r->keyed) {
		gateway_events_kept_make(r, SIZE_MAX, done, &k);
		opts.answer = &k.answer;
	}
	if (ledger_client_attempt_end(r->attempt, true, r->delivered, &opts, &err) ==
	    LEDGER_CLIENT_OK) {
		gateway_run_attempt_ended(r, "finished", NULL);
	} else {
		/* Not on record as complete: [DONE] would be a claim the ledger does not back.
		 * A repeat with the key learns how the request ended. */
		char *final = gateway_run_refusal_error(&err), *event = NULL;

		gateway_run_attempt_ended(r, "failed", "finish_refused");
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
	if (done != NULL && !gateway_events_publish(r, done))
		gateway_log("out of memory", r->rid, aid_of(r), NULL);
	gateway_run_count_outcome(r, GATEWAY_OUTCOME_COMPLETED);
	gateway_events_kept_clear(&k);
	ledger_client_error_clear(&err);
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
	size_t n = gateway_events_delivered(r);

	/* What ledgerd records as delivered is what a client got: events published after
	 * the last client left reached no one. */
	r->delivered = gateway_events_tokens_in(r, n);
	gateway_events_kept_make(r, n, NULL, &k);
	gateway_run_count_outcome(r, signal == LEDGER_SIGNAL_CLIENT_DISCONNECTED
					     ? GATEWAY_OUTCOME_ABANDONED
					     : GATEWAY_OUTCOME_TERMINATED);
	if (gateway_attempt_ask_failover(r, signal, &k.answer, &d, &err) != LEDGER_CLIENT_OK) {
		ce = gateway_run_refusal_error(&err);
		if (ce == NULL)
			ce = gateway_run_local_error(r, "upstream_decode_interrupted", err.message,
						     false);
	} else if (d.sse_event == NULL) {
		ce = gateway_attempt_ending_error(r, &d);
	}
	if (signal != LEDGER_SIGNAL_CLIENT_DISCONNECTED) {
		/* terminate_stream: the decision's event ends the stream; no [DONE] after it. */
		if (d.sse_event != NULL)
			final = strdup(d.sse_event);
		else if (ce != NULL && asprintf(&final, "data: %s\n\n", ce) < 0)
			final = NULL;
		if (final != NULL)
			gateway_events_publish(r, final);
	}
	free(ce);
	gateway_events_kept_clear(&k);
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
			if (gateway_events_look_at_client(r) == CLIENT_GONE) {
				end_after_delta(r, LEDGER_SIGNAL_CLIENT_DISCONNECTED);
				return;
			}
			continue;
		}
		if (got == UPSTREAM_EVENT) {
			if (!gateway_events_publish(r, event))
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
			if (gateway_attempt_ask_failover(r, LEDGER_SIGNAL_OVERLOADED, NULL, &d,
							 &err) == LEDGER_CLIENT_OK &&
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
 * (taken) was delivered; it is finished, and kept when it has a key, before
 * it goes out whole.
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
	if (kept.len > gw->max_kept_answer_bytes || !r->keyed)
		kept = (struct ledger_kept_answer){
			0}; /* its digest is ledgerd's to keep: not ours; no key, no repeat */
	opts.answer = kept.status != 0 ? &kept : NULL;
	if (ledger_client_attempt_end(r->attempt, true, r->delivered, &opts, &err) !=
	    LEDGER_CLIENT_OK) {
		char *final = gateway_run_refusal_error(&err);

		gateway_run_attempt_ended(r, "failed", "finish_refused");
		log_ledger_failure("finish refused", r, &err);
		if (final == NULL)
			final = gateway_run_local_error(r, "ledger_unavailable",
							"the ledger did not record the answer",
							r->keyed);
		free(answer);
		free(type);
		ledger_client_error_clear(&err);
		gateway_events_refuse(r, final, 503);
		gateway_run_count_outcome(r, GATEWAY_OUTCOME_REFUSED);
		return;
	}
	gateway_run_attempt_ended(r, "finished", NULL);
	pthread_mutex_lock(&r->lock);
	r->refusal_status = 200;
	free(r->refusal_body);
	free(r->refusal_type);
	r->refusal_body = answer;
	r->refusal_type = type;
	pthread_mutex_unlock(&r->lock);
	gateway_run_count_outcome(r, GATEWAY_OUTCOME_COMPLETED);
}

/* --- the run's thread, and its start --- */

/*
 * The run's thread (one of ledger/common/workers.c's, kept for the next run
 * once this one ends): its attempts, from the first to the end of the
 * request's stream.
 */
static void run_main(void *arg)
{
	struct gateway_run *r = arg;
	struct upstream *whole = NULL;
	char *event = NULL, *error;

	gateway_trace_log_span(r->span, &r->parent);
	error = first_event(r, &event);

	if (error != NULL) {
		gateway_events_refuse(r, error, 503);
		gateway_run_count_outcome(r, GATEWAY_OUTCOME_REFUSED);
	} else if (event != NULL && !r->stream) {
		complete_whole(r, event);
	} else if (event != NULL) {
		bool ok = true;

		for (size_t i = 0; i < r->n_prelude && ok; i++) {
			ok = gateway_events_publish(r, r->prelude[i]);
			r->prelude[i] = NULL;
		}
		/* what gateway_events_publish() did not take: out of memory */
		gateway_run_prelude_clear(r);
		if (!ok)
			free(event);
		else if (gateway_events_publish(r, event))
			rest_of_stream(r);
	}
	gateway_run_prelude_clear(r);
	if (r->up_whole) {
		/* Its transfer is read to its end once the clients have their end. */
		whole = r->up;
		r->up = NULL;
	}
	gateway_attempt_drop(r); /* closing the upstream is what tells the replica to stop */
	gateway_trace_attempt_discard(r->next_span);
	r->next_span = NULL;
	if (r->keyed && unlist(r))
		gateway_run_release(r); /* the table's */
	pthread_mutex_lock(&r->lock);
	r->ended = true;
	pthread_cond_broadcast(&r->changed);
	pthread_mutex_unlock(&r->lock);
	gateway_run_release(r);
	/* An engine that ends its body within FINISH_MS of [DONE] keeps its connection. */
	upstream_finish(whole, FINISH_MS);
	upstream_close(whole);
	gateway_log_trace(NULL, NULL); /* the thread's next job logs as its own */
}

struct gateway_run *gateway_run_start(struct gateway_run_start *st)
{
	struct gateway_run *r = calloc(1, sizeof(*r));

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
	r->up = st->up; /* sent ahead of the begin: read from the first pump on */
	st->up = NULL;
	r->trace = st->trace;
	gateway_trace_hold(r->trace);
	gateway_trace_context(st->trace, &r->parent);
	if ((st->model != NULL && (r->model = strdup(st->model)) == NULL) ||
	    (st->revision != NULL && (r->revision = strdup(st->revision)) == NULL)) {
		gateway_attempt_drop(r);
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
	if (!ledger_workers_run(run_main, r)) {
		if (r->keyed)
			unlist(r);
		gateway_attempt_drop(r);
		r->refs = 1;
		gateway_run_release(r);
		return NULL;
	}
	return r;
fail:
	upstream_close(st->up);
	st->up = NULL;
	free(st->body);
	gateway_trace_attempt_end(st->span, "failed", "internal_error");
	st->span = NULL;
	ledger_client_attempt_free(st->attempt);
	gateway_replica_put(gw, st->replica);
	st->body = NULL;
	st->attempt = NULL;
	return NULL;
}
