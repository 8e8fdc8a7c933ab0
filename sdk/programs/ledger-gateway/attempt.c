/*
 * sdk/programs/ledger-gateway/attempt.c: a run's attempts on the replicas
 * and the failovers between them: an attempt's upstream opened and closed,
 * ledgerd asked what a failure means (waiting out a fence), and its decision
 * carried out: keep waiting, a rerun on another replica, cancel, or the end.
 * Only the run's thread calls it (run.c), so the run's course reads apart.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sdk/programs/ledger-gateway/config.h"
#include "sdk/programs/ledger-gateway/log.h"
#include "sdk/programs/ledger-gateway/metrics.h"
#include "sdk/programs/ledger-gateway/replica.h"
#include "sdk/programs/ledger-gateway/run_int.h"
#include "sdk/programs/ledger-gateway/trace.h"
#include "sdk/programs/ledger-gateway/upstream.h"

#define MAX_FENCE_WAIT_MS 60000u

static struct gateway *gw; /* the settings, for the process's life */

void gateway_attempt_setup(struct gateway *cfg)
{
	gw = cfg;
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
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

void gateway_attempt_drop(struct gateway_run *r)
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

/* Where an attempt on replica @p k goes, in the trace context @p w (borrowed with it). */
static struct upstream_target target_of(size_t k, bool stream, const struct gateway_trace_wire *w)
{
	const struct replica *rep = &gw->replicas[k];

	return (struct upstream_target){
		.url = rep->url,
		.api_key = rep->api_key,
		.ledger_headers = gateway_replica_runs_tools(gw, k),
		.stream = stream,
		.traceparent = w->traceparent[0] != '\0' ? w->traceparent : NULL,
		.tracestate = w->tracestate[0] != '\0' ? w->tracestate : NULL};
}

/*
 * Sent before ledgerd began the attempt: only its bytes' publication needs
 * the attempt (the run delivers nothing before the begin and the deliver
 * are confirmed), and an engine that gets no X-Ledger-* headers claims no
 * tool call, so the engine may work while the begin is in flight. A replica
 * that gets the headers needs the begun attempt's id and its settled calls:
 * it is asked only once the attempt exists.
 */
struct upstream *gateway_run_engine_ahead(size_t replica, const char *body, size_t body_len,
					  bool stream, const struct gateway_trace_wire *w)
{
	struct upstream_target t = target_of(replica, stream, w);
	struct upstream *up;

	if (t.ledger_headers)
		return NULL;
	up = upstream_open(&t, body, body_len, NULL, NULL, "[]");
	if (up != NULL)
		upstream_kick(up);
	return up;
}

/*
 * Sends the client's request to the current attempt's replica, unless it
 * was sent ahead of the begin (r->up already open): either way the attempt
 * starts here, its heartbeat with it.
 */
static bool start_upstream(struct gateway_run *r, const char *settled)
{
	struct gateway_trace_wire w;
	struct upstream_target t;

	gateway_trace_attempt_wire(r->span, &r->parent, &w);
	t = target_of(r->replica, r->stream, &w);
	gateway_trace_log_span(r->span, &r->parent); /* the thread's lines are the attempt's */
	gateway_run_prelude_clear(r);
	if (r->up != NULL)
		upstream_quiet_from_now(r->up); /* the begin's wait was ledgerd's, not the replica's */
	else
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

/* Notes whether @p settled (a JSON array) holds a call. */
static void note_settled(struct gateway_run *r, const char *settled)
{
	if (settled != NULL && strcmp(settled, "[]") != 0)
		r->settled_any = true;
}

/* Starts the attempt the run was handed. @return NULL, or the client error to answer with */
char *gateway_attempt_begin(struct gateway_run *r)
{
	note_settled(r, ledger_client_attempt_settled(r->attempt));
	return start_upstream(r, ledger_client_attempt_settled(r->attempt))
		       ? NULL
		       : gateway_run_local_error(r, "internal_error", "out of memory", true);
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
	struct gateway_trace *t = gateway_run_trace(r);
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
			/* the rerun's span, which gateway_attempt_fail_over_early() takes */
			r->next_span = next_span;
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
			gateway_run_attempt_ended(r, "cancelled", NULL);
		else
			gateway_run_attempt_ended(r, "failed", ledger_client_signal_name(signal));
	}
	gateway_trace_attempt_discard(next_span); /* ledgerd began no rerun */
	gateway_trace_release(t);
	if (pick.index != GATEWAY_REPLICA_NONE)
		gateway_replica_put(gw, pick.index);
	gateway_replica_pick_clear(&pick);
	return rc;
}

/* ask_failover_marking(), a failed replica ejected. */
enum ledger_client_err gateway_attempt_ask_failover(struct gateway_run *r,
						    enum ledger_signal signal,
						    const struct ledger_kept_answer *kept,
						    struct ledger_decision *d,
						    struct ledger_client_error *err)
{
	return ask_failover_marking(r, signal, kept, true, d, err);
}

/* A decision that ends the request: the client error it carries. */
char *gateway_attempt_ending_error(struct gateway_run *r, struct ledger_decision *d)
{
	if (d->client_error != NULL)
		return strdup(d->client_error);
	return gateway_run_local_error(r, "upstream_failed", "the replica failed", false);
}

/*
 * Acts on a failure before the first delta: everything before it is
 * invisible to the client and may be rerun.
 * @return NULL to read on, or the client error to answer with
 */
char *gateway_attempt_fail_over_early(struct gateway_run *r, enum ledger_signal signal,
				      bool mark_down)
{
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};
	char *error = NULL;

	if (ask_failover_marking(r, signal, NULL, mark_down, &d, &err) != LEDGER_CLIENT_OK) {
		error = gateway_run_refusal_error(&err);
		if (error == NULL) {
			log_ledger_failure("failover not asked", r, &err);
			error = gateway_run_local_error(r, "ledger_unavailable", err.message, true);
		}
	} else if (d.action == LEDGER_FAILOVER_KEEP_WAITING) {
		if (ledger_client_heartbeat_start(r->attempt, 0) != LEDGER_CLIENT_OK)
			gateway_log("heartbeat not restarted", r->rid, aid_of(r), NULL);
	} else if (d.action == LEDGER_FAILOVER_RETRY_PREFILL && d.next != NULL) {
		note_settled(r, d.settled_tool_calls);
		gateway_attempt_drop(r);
		r->attempt = ledger_client_decision_take_next(&d);
		r->span = r->next_span;
		r->next_span = NULL;
		gateway_trace_attempt_begun(r->span, ledger_client_attempt_epoch(r->attempt));
		r->attempts++;
		if (!start_upstream(r, d.settled_tool_calls))
			error = gateway_run_local_error(r, "internal_error", "out of memory", true);
	} else if (d.action == LEDGER_FAILOVER_RETRY_PREFILL) {
		note_settled(r,
			     d.settled_tool_calls); /* a rerun under another id would repeat them */
		error = gateway_run_local_error(r, "no_replica_available", "no replica answers",
						true);
	} else {
		error = gateway_attempt_ending_error(r, &d);
	}
	ledger_client_decision_clear(&d);
	ledger_client_error_clear(&err);
	return error;
}

/* The client left before the first delta and its hold is over: nothing is kept running. */
void gateway_attempt_abandon(struct gateway_run *r)
{
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};

	if (gateway_attempt_ask_failover(r, LEDGER_SIGNAL_CLIENT_DISCONNECTED, NULL, &d, &err) !=
	    LEDGER_CLIENT_OK)
		gateway_log("failover refused", r->rid, aid_of(r), "\"code\":\"%s\"", err.code);
	gateway_run_count_outcome(r, GATEWAY_OUTCOME_ABANDONED);
	ledger_client_decision_clear(&d);
	ledger_client_error_clear(&err);
}
