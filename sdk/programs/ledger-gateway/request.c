/*
 * sdk/programs/ledger-gateway/request.c: the requests of request.h. A
 * keyless request is a new logical request, with a run of its own. A keyed
 * one is looked up, here and then in ledgerd, and the first row of
 * GATEWAY.md's table that applies answers it:
 *
 *   a run of this process ─ same input ──> attach to it (row 4)
 *        │ none               other ─────> 422 idempotency_key_reused (row 1)
 *        v
 *   GET /v1/requests/{rid} ─ 404 ────────> begin a1, a new run
 *        ├ another input ────────────────> 422 idempotency_key_reused (row 1)
 *        ├ completed ────────────────────> the kept answer (2), or 409 answer_not_kept (3)
 *        ├ open, its attempt live ───────> 409 request_in_progress (5)
 *        ├ open, its lease ran out ──────> failover heartbeat_timeout (6): as 7 to 9
 *        ├ terminated ───────────────────> the kept events, then its client_error (7)
 *        ├ failed ───────────────────────> the first answer again (8)
 *        └ abandoned ────────────────────> begin a(n+1), a new run (9)
 *
 * Deciding is serialized per request id within the process, so that two
 * repeats arriving together make one run, not two.
 */
#include "sdk/programs/ledger-gateway/request.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "api/wire/stream.h"
#include "ledger/common/base64.h"
#include "ledger/common/buf.h"
#include "sdk/programs/ledger-gateway/events.h"
#include "sdk/programs/ledger-gateway/log.h"
#include "sdk/programs/ledger-gateway/metrics.h"
#include "sdk/programs/ledger-gateway/replica.h"
#include "sdk/programs/ledger-gateway/run.h"
#include "sdk/programs/ledger-gateway/trace.h"
#include "sdk/programs/ledger-gateway/upstream.h"

#define MAX_ROUNDS 4 /* decisions for one request, each after a race was lost */

static struct gateway *gw; /* the settings, for the process's life */

/* The request ids being decided in this process, each by one request's thread. */
struct deciding {
	char rid[GATEWAY_RID_LEN + 1];
	struct deciding *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t left; /* an id's decision is over */
	struct deciding *list;
} deciding = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL};

void gateway_request_setup(struct gateway *cfg)
{
	gw = cfg;
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static bool deciding_has(const char *rid)
{
	for (struct deciding *d = deciding.list; d != NULL; d = d->next) {
		if (strcmp(d->rid, rid) == 0)
			return true;
	}
	return false;
}

/* Waits until no other thread decides @p e's request id, then decides it. */
static void decide_enter(struct deciding *e)
{
	pthread_mutex_lock(&deciding.lock);
	while (deciding_has(e->rid))
		pthread_cond_wait(&deciding.left, &deciding.lock);
	e->next = deciding.list;
	deciding.list = e;
	pthread_mutex_unlock(&deciding.lock);
}

static void decide_leave(struct deciding *e)
{
	pthread_mutex_lock(&deciding.lock);
	for (struct deciding **p = &deciding.list; *p != NULL; p = &(*p)->next) {
		if (*p == e) {
			*p = e->next;
			break;
		}
	}
	pthread_cond_broadcast(&deciding.left);
	pthread_mutex_unlock(&deciding.lock);
}

/* --- answers before any byte of a stream --- */

/* An answer's head beyond its status: each line ends in CRLF. */
static void reply(struct wire_conn *conn, unsigned status, const char *headers, const char *body,
		  size_t len)
{
	gateway_trace_reply(gateway_trace_current(), status, NULL);
	if (wire_stream_head(conn, status, headers, (int64_t)len) == LEDGER_OK &&
	    wire_stream_write(conn, body, len) == LEDGER_OK)
		wire_stream_end(conn, true);
	else
		wire_stream_end(conn, false);
}

/* A refusal: its status, its code, and whether a retry with the same key helps. */
struct refusal {
	unsigned status;
	const char *code;
	const char *message;
	bool retry;
	uint64_t retry_after_s; /* Retry-After; 0: none */
};

static void refuse(struct wire_conn *conn, const char *rid, const struct refusal *f)
{
	char headers[256], after[48] = "";
	char *body = gateway_run_error_body(
		rid != NULL ? rid : "", f->code,
		f->status < 500 && f->status != 409 ? "invalid_request_error" : "server_error",
		f->message, 0, f->retry);

	if (f->retry_after_s > 0)
		snprintf(after, sizeof(after), "Retry-After: %llu\r\n",
			 (unsigned long long)f->retry_after_s);
	snprintf(headers, sizeof(headers),
		 "Content-Type: application/json\r\n%s%s%sx-should-retry: %s\r\n%s",
		 rid != NULL ? "x-request-id: " : "", rid != NULL ? rid : "",
		 rid != NULL ? "\r\n" : "", f->retry ? "true" : "false", after);
	gateway_log("refused", rid, NULL, "\"status\":%u,\"code\":\"%s\"", f->status, f->code);
	gateway_trace_reply(gateway_trace_current(), f->status, f->code);
	if (body == NULL)
		wire_stream_end(conn, false);
	else
		reply(conn, f->status, headers, body, strlen(body));
	free(body);
}

void gateway_request_refuse(struct wire_conn *conn, const char *rid, unsigned status,
			    const char *code, const char *message, bool retry)
{
	refuse(conn, rid, &(struct refusal){status, code, message, retry, 0});
}

static const struct refusal IN_PROGRESS = {409, "request_in_progress",
					   "the request is running elsewhere; ask again", true, 1};
static const struct refusal KEY_REUSED = {422, "idempotency_key_reused",
					  "the key names a request with another body", false, 0};
static const struct refusal LEDGER_DOWN = {503, "ledger_unavailable", "the ledger does not answer",
					   true, 1};
static const struct refusal NO_REPLICA = {503, "no_replica_available", "no replica answers", true,
					  1};
static const struct refusal NO_MODEL = {404, "model_not_found",
					"no replica serves the model the request names", false, 0};

/* --- replays of what ledgerd kept --- */

/* The request's client error as a client gets it: {"error": {...}}, and its HTTP status. */
static char *client_error_of(json_t *request, long *status)
{
	json_t *ce = json_object_get(request, "client_error");
	json_t *inner = json_object_get(ce, "error");
	json_t *http = json_object_get(ce, "http_status");
	json_t *env;
	char *text;

	if (!json_is_object(inner))
		inner = ce; /* a bare error object */
	if (!json_is_object(inner))
		return NULL;
	*status = json_is_integer(http) ? (long)json_integer_value(http) : 503;
	env = json_pack("{s:O}", "error", inner);
	text = env != NULL ? json_dumps(env, JSON_COMPACT) : NULL;
	json_decref(env);
	return text;
}

/*
 * The events of a kept stream after the one @p last_event_id names (all of
 * them if it names none), appended to @p out. @return how many it holds
 */
static size_t events_after(const char *bytes, size_t len, int64_t last_event_id,
			   struct ledger_buf *out)
{
	size_t n = 0, at = 0, from = 0;

	/* Each event is "id: N\n...\n\n", numbered from 1 in order. */
	while (at < len) {
		const char *end = memmem(bytes + at, len - at, "\n\n", 2);
		size_t next = end != NULL ? (size_t)(end - bytes) + 2 : len;

		n++;
		if (last_event_id > 0 && (uint64_t)last_event_id == n)
			from = next;
		at = next;
	}
	ledger_buf_append(out, bytes + from, len - from);
	return n;
}

/*
 * Replays @p answer ({"kept": true, "status", "content_type", "body_b64"},
 * or NULL when none was kept), for a request that ended. A stream is
 * replayed from the event after the client's Last-Event-ID; @p final, when
 * set, is the request's client error, written as the stream's last event.
 * @return false when the answer cannot be replayed (not kept, not decoded)
 */
static bool replay(struct gateway_request *q, json_t *answer, const char *final, int row)
{
	json_t *b64 = json_object_get(answer, "body_b64");
	const char *type = json_string_value(json_object_get(answer, "content_type"));
	long status = (long)json_integer_value(json_object_get(answer, "status"));
	struct ledger_buf out = LEDGER_BUF_INIT;
	char headers[320];
	char *raw = NULL;
	size_t len = 0, n_events = 0;
	bool sse, ok = false;

	if (answer != NULL) {
		if (!json_is_true(json_object_get(answer, "kept")) || !json_is_string(b64) ||
		    type == NULL)
			goto out;
		len = ledger_base64_decoded_len(json_string_value(b64), json_string_length(b64));
		raw = len != (size_t)-1 ? malloc(len + 1) : NULL;
		if (raw == NULL || ledger_base64_decode(json_string_value(b64),
							json_string_length(b64), raw) != len)
			goto out;
	}
	sse = answer == NULL || strncmp(type, "text/event-stream", 17) == 0;
	if (sse) {
		n_events = events_after(raw != NULL ? raw : "", len, q->last_event_id, &out);
		if (final != NULL)
			ledger_buf_printf(&out, "id: %zu\ndata: %s\n\n", n_events + 1, final);
		status = 200;
		type = "text/event-stream";
	} else {
		ledger_buf_append(&out, raw, len);
	}
	if (out.oom)
		goto out;
	snprintf(headers, sizeof(headers),
		 "Content-Type: %s\r\n%sx-request-id: %s\r\nIdempotent-Replayed: true\r\n", type,
		 sse ? "Cache-Control: no-cache\r\n" : "", q->rid);
	gateway_metrics_replay(row);
	gateway_trace_repeat(q->trace, row);
	gateway_log("replayed", q->rid, NULL, "\"row\":%d,\"from_event\":%lld", row,
		    (long long)q->last_event_id);
	reply(q->conn, status >= 200 && status <= 599 ? (unsigned)status : 200, headers,
	      out.data != NULL ? out.data : "", out.len);
	ok = true;
out:
	free(raw);
	ledger_buf_free(&out);
	return ok;
}

/* Answers a failed request's client error again, as its first answer was (row 8). */
static void replay_error(struct gateway_request *q, const char *error, long status)
{
	json_t *ce = json_loads(error, 0, NULL);
	bool retry = json_is_true(json_object_get(json_object_get(ce, "error"), "retryable"));
	char headers[256];

	json_decref(ce);
	snprintf(headers, sizeof(headers),
		 "Content-Type: application/json\r\nx-request-id: %s\r\nx-should-retry: %s\r\n"
		 "Idempotent-Replayed: true\r\n",
		 q->rid, retry ? "true" : "false");
	gateway_metrics_replay(8);
	gateway_trace_repeat(q->trace, 8);
	gateway_log("replayed", q->rid, NULL, "\"row\":8");
	reply(q->conn, status >= 400 && status <= 599 ? (unsigned)status : 503, headers, error,
	      strlen(error));
}

/* Answers a request that ended, from its view and its kept answer (rows 2, 3, 7, 8). */
static void answer_ended(struct gateway_request *q, json_t *request, json_t *answer)
{
	const char *status = json_string_value(json_object_get(request, "status"));
	long http = 503;
	char *error = client_error_of(request, &http);

	gateway_trace_outcome(q->trace, status,
			      (int64_t)json_integer_value(json_object_get(request, "attempts")));
	if (strcmp(status, "completed") == 0) {
		if (answer == NULL || !replay(q, answer, NULL, 2)) {
			gateway_trace_repeat(q->trace, 3);
			refuse(q->conn, q->rid,
			       &(struct refusal){409, "answer_not_kept",
						 "the request completed; its answer was not kept",
						 false, 0});
		}
	} else if (strcmp(status, "terminated") == 0 && error != NULL) {
		/* No answer: the gateway that ran it died; only the error is known. */
		if (!replay(q, answer, error, 7))
			replay(q, NULL, error, 7);
	} else if (answer != NULL && replay(q, answer, NULL, 8)) {
		/* the first answer's status and body */
	} else if (error != NULL) {
		replay_error(q, error, http);
	} else {
		refuse(q->conn, q->rid,
		       &(struct refusal){409, "answer_not_kept",
					 "the request ended; its answer was not kept", false, 0});
	}
	free(error);
}

/* --- deciding a keyed request --- */

/* What a decision leads to. */
struct step {
	enum {
		STEP_RUN,
		STEP_ENDED,
		STEP_REFUSE,
		STEP_AGAIN,
		STEP_WAIT
	} kind;
	struct gateway_run *run; /* RUN: the run to serve from, with a reference */
	bool starter;            /* RUN: the run was started for this request */
	json_t *request;         /* ENDED: the request's view, owned */
	json_t *answer;          /* ENDED: its kept answer, owned, or NULL */
	struct refusal refusal;  /* REFUSE */
	uint64_t wait_ms;        /* WAIT: then decide again */
	int row;                 /* the row of "A repeat of a key" that applied; 0: a new request */
};

/* A refusal of POST attempts or of failover, as the client is answered. */
static void refused_attempt(const struct ledger_client_error *err, bool *waited, struct step *s)
{
	json_t *body = err->body != NULL ? json_loads(err->body, 0, NULL) : NULL;
	const char *budget =
		json_string_value(json_object_get(json_object_get(body, "error"), "budget"));

	if (budget == NULL)
		budget = json_string_value(json_object_get(body, "budget"));
	if (strcmp(err->code, "source_not_fenced") == 0 ||
	    strcmp(err->code, "tool_call_in_progress") == 0) {
		/* Another attempt may still run: wait for its fence once, no longer. */
		if (!*waited) {
			*waited = true;
			s->kind = STEP_WAIT;
			s->wait_ms = err->retry_after_ms < gw->lease_ms ? err->retry_after_ms
									: gw->lease_ms;
		} else {
			s->kind = STEP_REFUSE;
			s->refusal = IN_PROGRESS;
		}
	} else if (strcmp(err->code, "retry_budget_exhausted") == 0) {
		bool pool = budget != NULL && strcmp(budget, "pool") == 0;

		s->kind = STEP_REFUSE;
		s->refusal = (struct refusal){503, "retry_budget_exhausted",
					      pool ? "the pool's retry budget is spent for now"
						   : "the request used all the attempts it may",
					      pool, pool ? (err->retry_after_ms + 999) / 1000 : 0};
		if (s->refusal.retry && s->refusal.retry_after_s == 0)
			s->refusal.retry_after_s = 1;
	} else if (strcmp(err->code, "tool_outcome_unknown") == 0) {
		s->kind = STEP_REFUSE;
		s->refusal = (struct refusal){
			409, "tool_outcome_unknown",
			"a tool call of the request has an unknown outcome: resolve it first",
			false, 0};
	} else if (err->status == 409 || err->status == 422) {
		/* Another gateway acted first (request_closed, attempt_fenced, a begun
		 * attempt of the same id): what it did decides, read again. */
		s->kind = STEP_AGAIN;
	} else {
		s->kind = STEP_REFUSE;
		s->refusal = LEDGER_DOWN;
	}
	json_decref(body);
}

/*
 * What the attempt @p aid of @p q on the replica @p pick chose is begun
 * with, in the trace context @p w (its span's).
 */
static struct ledger_attempt_spec attempt_spec(const struct gateway_request *q, const char *aid,
					       const struct gateway_replica_pick *pick,
					       const char *input,
					       const struct gateway_trace_wire *w)
{
	return (struct ledger_attempt_spec){
		.traceparent = w->traceparent[0] != '\0' ? w->traceparent : NULL,
		.tracestate = w->tracestate[0] != '\0' ? w->tracestate : NULL,
		.request_id = q->rid,
		.attempt_id = aid,
		.replica = gw->replicas[pick->index].name,
		.model_revision = pick->revision,
		.lease_ms = gw->lease_ms,
		.max_attempts = gw->max_attempts,
		.gateway = gw->id,
		.identity = pick->identity,
		.input_sha256 = input};
}

/* Starts a run of the attempt begun for @p q, which takes its body and @p span. */
static void start_run(struct gateway_request *q, const char *input, unsigned attempts,
		      struct ledger_attempt *attempt, struct ledger_span *span,
		      struct upstream *up, const struct gateway_replica_pick *pick, struct step *s)
{
	struct gateway_run_start st = {.request_id = q->rid,
				       .trace = q->trace,
				       .span = span,
				       .keyed = q->keyed,
				       .input_sha256 = input,
				       .body = q->body,
				       .body_len = q->body_len,
				       .attempts = attempts,
				       .attempt = attempt,
				       .replica = pick->index,
				       .stream = q->stream,
				       .model = q->model,
				       .revision = pick->revision,
				       .up = up};

	q->body = NULL;
	s->run = gateway_run_start(&st);
	if (s->run != NULL) {
		s->kind = STEP_RUN;
		s->starter = true;
	} else {
		s->kind = STEP_REFUSE;
		s->refusal = (struct refusal){503, "internal_error", "no thread for the request",
					      true, 1};
	}
}

/*
 * The request's next attempt, a(n+1), begun for a new run (a first one, or
 * row 9), on a replica of the request's model @p revision (NULL: a first).
 */
static void begin_next(struct gateway_request *q, const char *input, unsigned n,
		       const char *revision, bool *waited, struct step *s)
{
	struct gateway_replica_pick pick =
		gateway_replica_pick(gw, q->model, GATEWAY_REPLICA_NONE, revision);
	struct ledger_client_error err = {0};
	struct ledger_attempt *attempt = NULL;
	struct upstream *up = NULL;
	struct ledger_attempt_spec spec;
	struct ledger_trace_ctx parent;
	struct gateway_trace_wire w;
	struct ledger_span *span;
	char aid[16];

	if (pick.index == GATEWAY_REPLICA_NONE) {
		s->kind = STEP_REFUSE;
		s->refusal = pick.no_model ? NO_MODEL : NO_REPLICA;
		return;
	}
	snprintf(aid, sizeof(aid), "a%u", n + 1);
	/* The attempt's span starts first: ledgerd's begin of it is its child. */
	gateway_trace_context(q->trace, &parent);
	span = gateway_trace_attempt_start(&parent, gw, pick.index, q->model, aid);
	gateway_trace_attempt_wire(span, &parent, &w);
	spec = attempt_spec(q, aid, &pick, input, &w);
	/* The engine works while ledgerd begins the attempt; no byte of it is read before. */
	up = gateway_run_engine_ahead(pick.index, q->body, q->body_len, q->stream, &w);
	if (ledger_client_attempt_begin(gw->ledger, &spec, &attempt, &err) == LEDGER_CLIENT_OK) {
		gateway_trace_attempt_begun(span, ledger_client_attempt_epoch(attempt));
		/* the run has the replica and the engine's request */
		start_run(q, input, n + 1, attempt, span, up, &pick, s);
		pick.index = GATEWAY_REPLICA_NONE;
	} else {
		/* Refused: the engine's request is cut (an abort to it), unread. */
		upstream_close(up);
		gateway_trace_attempt_end(span, "not_begun",
					  err.status == 0 ? "ledger_unavailable" : err.code);
		if (err.status == 0)
			*s = (struct step){.kind = STEP_REFUSE, .refusal = LEDGER_DOWN};
		else
			refused_attempt(&err, waited, s);
	}
	if (pick.index != GATEWAY_REPLICA_NONE)
		gateway_replica_put(gw, pick.index);
	if (s->kind == STEP_REFUSE && s->refusal.status == 503 && err.status != 409)
		gateway_log_ledger_failure("attempt not begun", q->rid, aid, &err);
	gateway_replica_pick_clear(&pick);
	ledger_client_error_clear(&err);
}

/* The calls on an adopted attempt (a dead gateway's) carry the context of the request's span. */
static void trace_adopted(const struct gateway_request *q, struct ledger_attempt *source)
{
	struct ledger_trace_ctx own;
	struct gateway_trace_wire w;

	gateway_trace_context(q->trace, &own);
	gateway_trace_attempt_wire(NULL, &own, &w);
	if (w.traceparent[0] != '\0')
		ledger_client_attempt_set_trace(source, w.traceparent,
						w.tracestate[0] != '\0' ? w.tracestate : NULL);
}

/*
 * Row 6: the newest attempt's lease ran out while the request is open, so
 * the gateway that ran it is gone. Reported as heartbeat_timeout, with the
 * rerun a(n+1) that a retry_prefill decision begins.
 */
static void take_over(struct gateway_request *q, const char *input, const char *aid, unsigned n,
		      const char *revision, bool *waited, struct step *s)
{
	struct gateway_replica_pick pick =
		gateway_replica_pick(gw, q->model, GATEWAY_REPLICA_NONE, revision);
	struct ledger_client_error err = {0};
	struct ledger_failover_opts opts = {0};
	struct ledger_attempt_spec next;
	struct ledger_decision d = {0};
	struct ledger_attempt *source = NULL;
	struct ledger_span *span = NULL; /* the rerun's, should ledgerd begin it */
	struct ledger_trace_ctx parent;
	struct gateway_trace_wire w;
	char next_aid[16];

	snprintf(next_aid, sizeof(next_aid), "a%u", n + 1);
	if (pick.index != GATEWAY_REPLICA_NONE) {
		gateway_trace_context(q->trace, &parent);
		span = gateway_trace_attempt_start(&parent, gw, pick.index, q->model, next_aid);
		gateway_trace_attempt_wire(span, &parent, &w);
		next = attempt_spec(q, next_aid, &pick, input, &w);
		opts.next = &next;
	}
	if (ledger_client_attempt_adopt(gw->ledger, q->rid, aid, &source) != LEDGER_CLIENT_OK) {
		*s = (struct step){.kind = STEP_REFUSE, .refusal = LEDGER_DOWN};
		goto out;
	}
	gateway_log("taking over", q->rid, aid, NULL);
	trace_adopted(q, source);
	if (ledger_client_failover(source, LEDGER_SIGNAL_HEARTBEAT_TIMEOUT, &opts, &d, &err) !=
	    LEDGER_CLIENT_OK) {
		if (err.status == 0)
			*s = (struct step){.kind = STEP_REFUSE, .refusal = LEDGER_DOWN};
		else
			refused_attempt(&err, waited, s);
		goto out;
	}
	gateway_trace_failover(q->trace, ledger_client_signal_name(LEDGER_SIGNAL_HEARTBEAT_TIMEOUT),
			       ledger_client_action_name(d.action), aid,
			       d.next != NULL ? next_aid : NULL);
	if (d.action == LEDGER_FAILOVER_RETRY_PREFILL && d.next != NULL) {
		struct ledger_attempt *taken = ledger_client_decision_take_next(&d);

		gateway_trace_attempt_begun(span, ledger_client_attempt_epoch(taken));
		start_run(q, input, n + 1, taken, span, NULL, &pick, s);
		span = NULL;
		pick.index = GATEWAY_REPLICA_NONE; /* the run has the replica */
	} else if (d.action == LEDGER_FAILOVER_RETRY_PREFILL) {
		*s = (struct step){.kind = STEP_REFUSE, .refusal = NO_REPLICA};
	} else if (d.action == LEDGER_FAILOVER_WAIT_FOR_FENCE && !*waited) {
		*waited = true;
		*s = (struct step){.kind = STEP_WAIT,
				   .wait_ms = d.retry_after_ms < gw->lease_ms ? d.retry_after_ms
									      : gw->lease_ms};
	} else if (d.action == LEDGER_FAILOVER_WAIT_FOR_FENCE ||
		   d.action == LEDGER_FAILOVER_KEEP_WAITING) {
		*s = (struct step){.kind = STEP_REFUSE, .refusal = IN_PROGRESS};
	} else {
		s->kind = STEP_AGAIN; /* the request ended: its view says how */
	}
out:
	gateway_trace_attempt_discard(span); /* ledgerd began no rerun */
	if (pick.index != GATEWAY_REPLICA_NONE)
		gateway_replica_put(gw, pick.index);
	ledger_client_attempt_free(source);
	ledger_client_decision_clear(&d);
	ledger_client_error_clear(&err);
	gateway_replica_pick_clear(&pick);
}

/* The newest attempt of a request's view (the highest epoch), or NULL. */
static json_t *newest_attempt(json_t *view)
{
	json_t *attempts = json_object_get(view, "attempts"), *newest = NULL, *a;
	size_t i;

	json_array_foreach(attempts, i, a)
	{
		if (newest == NULL || json_integer_value(json_object_get(a, "epoch")) >
					      json_integer_value(json_object_get(newest, "epoch")))
			newest = a;
	}
	return newest;
}

/* An open request: its newest attempt runs (5), ran out (6), or is gone (a reopen). */
static void decide_open(struct gateway_request *q, const char *input, json_t *view, unsigned n,
			bool *waited, struct step *s)
{
	json_t *a = newest_attempt(view);
	const char *revision = json_string_value(
		json_object_get(json_object_get(view, "request"), "model_revision"));
	const char *state = json_string_value(json_object_get(a, "state"));
	json_int_t left = json_integer_value(json_object_get(a, "lease_ms_left"));
	bool holds = state != NULL &&
		     (strcmp(state, "live") == 0 || strcmp(state, "cancel_requested") == 0);

	if (holds && left > 0) {
		s->kind = STEP_REFUSE;
		s->refusal = IN_PROGRESS;
		s->row = 5;
	} else if ((holds || (state != NULL && strcmp(state, "expired") == 0)) &&
		   json_is_string(json_object_get(a, "attempt_id"))) {
		take_over(q, input, json_string_value(json_object_get(a, "attempt_id")), n,
			  revision, waited, s);
		s->row = 6;
	} else {
		begin_next(q, input, n, revision, waited, s);
		s->row = 9;
	}
}

/* The request's kept answer into @p s, or the refusal when ledgerd does not answer. */
static void fetch_answer(struct gateway_request *q, struct step *s)
{
	struct ledger_client_answer ans = {0};
	struct ledger_client_error err = {0};

	if (ledger_client_answer_get(gw->ledger, q->rid, &ans, &err) == LEDGER_CLIENT_OK) {
		s->answer = json_loadb(ans.body, ans.len, 0, NULL);
	} else if (err.status != 404) {
		json_decref(s->request);
		*s = (struct step){.kind = STEP_REFUSE, .refusal = LEDGER_DOWN};
	}
	ledger_client_answer_clear(&ans);
	ledger_client_error_clear(&err);
}

/* Decides what answers the repeat @p q of its key, as GATEWAY.md's rows fix it. */
static void decide(struct gateway_request *q, const char *input, bool *waited, struct step *s)
{
	struct ledger_client_answer ans = {0};
	struct ledger_client_error err = {0};
	struct gateway_run *run = gateway_run_find(q->rid);
	json_t *view = NULL, *request;
	const char *status, *kept_input;

	*s = (struct step){.kind = STEP_REFUSE, .refusal = LEDGER_DOWN};
	if (run != NULL) {
		if (gateway_run_same_input(run, input)) {
			*s = (struct step){.kind = STEP_RUN, .run = run, .row = 4};
			return;
		}
		gateway_run_release(run);
		s->refusal = KEY_REUSED;
		s->row = 1;
		return;
	}
	if (ledger_client_request_get(gw->ledger, q->rid, NULL, &ans, &err) != LEDGER_CLIENT_OK) {
		if (err.status == 404)
			begin_next(q, input, 0, NULL, waited, s);
		goto out;
	}
	view = json_loadb(ans.body, ans.len, 0, NULL);
	request = json_object_get(view, "request");
	status = json_string_value(json_object_get(request, "status"));
	kept_input = json_string_value(json_object_get(request, "input_sha256"));
	if (status == NULL)
		goto out;
	if (kept_input != NULL && strcmp(kept_input, input) != 0) {
		s->refusal = KEY_REUSED;
		s->row = 1;
	} else if (strcmp(status, "open") == 0) {
		decide_open(q, input, view,
			    (unsigned)json_integer_value(json_object_get(request, "attempts")),
			    waited, s);
	} else if (strcmp(status, "abandoned") == 0) {
		begin_next(q, input,
			   (unsigned)json_integer_value(json_object_get(request, "attempts")),
			   json_string_value(json_object_get(request, "model_revision")), waited,
			   s);
		s->row = 9;
	} else {
		*s = (struct step){.kind = STEP_ENDED, .request = json_incref(request)};
		fetch_answer(q, s);
	}
out:
	json_decref(view);
	ledger_client_answer_clear(&ans);
	ledger_client_error_clear(&err);
}

static void serve_keyed(struct gateway_request *q, const char *input)
{
	struct deciding entry;
	bool waited = false;

	snprintf(entry.rid, sizeof(entry.rid), "%s", q->rid);
	for (unsigned round = 0; round < MAX_ROUNDS; round++) {
		struct step s;

		decide_enter(&entry);
		decide(q, input, &waited, &s);
		decide_leave(&entry);
		if (s.row > 0)
			gateway_trace_repeat(q->trace, s.row);
		switch (s.kind) {
		case STEP_RUN:
			if (!s.starter)
				gateway_log("resuming", q->rid, NULL, "\"last_event_id\":%lld",
					    (long long)q->last_event_id);
			if (gateway_events_serve(s.run, q->conn, q->last_event_id, s.starter)) {
				gateway_run_release(s.run);
				return;
			}
			/* The run was ending: decide again from the request's record. */
			gateway_log("run ended before the repeat attached", q->rid, NULL, NULL);
			gateway_run_release(s.run);
			break;
		case STEP_ENDED:
			answer_ended(q, s.request, s.answer);
			json_decref(s.request);
			json_decref(s.answer);
			return;
		case STEP_REFUSE:
			gateway_trace_outcome(q->trace, "refused", -1);
			refuse(q->conn, q->rid, &s.refusal);
			return;
		case STEP_WAIT:
			sleep_ms(s.wait_ms + 10);
			break;
		case STEP_AGAIN:
			break;
		}
	}
	gateway_trace_outcome(q->trace, "refused", -1);
	refuse(q->conn, q->rid, &IN_PROGRESS);
}

/* --- keyless requests --- */

/* A keyless request: a new logical request, its first attempt begun here. */
static void serve_keyless(struct gateway_request *q, const char *input)
{
	bool waited = true; /* a new request has no earlier attempt to wait for */
	struct step s = {0};

	begin_next(q, input, 0, NULL, &waited, &s);
	if (s.kind == STEP_RUN) {
		gateway_events_serve(s.run, q->conn, -1, true);
		gateway_run_release(s.run);
	} else {
		gateway_trace_outcome(q->trace, "refused", -1);
		refuse(q->conn, q->rid, s.kind == STEP_REFUSE ? &s.refusal : &LEDGER_DOWN);
	}
}

void gateway_request_serve(struct gateway_request *q)
{
	char input[65];

	/* The input's fingerprint: the canonical form (RFC 8785), so a re-serialized
	 * repeat of the same body is the same request. */
	if (ledger_client_args_sha256(q->body, q->body_len, input) != LEDGER_CLIENT_OK) {
		gateway_request_refuse(q->conn, q->rid, 400, "invalid_json",
				       "the body is not JSON the gateway can fingerprint", false);
	} else if (q->keyed) {
		serve_keyed(q, input);
	} else {
		serve_keyless(q, input);
	}
	free(q->body);
	q->body = NULL;
}
