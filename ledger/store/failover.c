/*
 * ledger/store/failover.c: POST failover on PostgreSQL. Under the request's
 * lock it reads everything ledger_failover_decide() needs (the request, the
 * source and newest attempts, the calls, the tenant's retry budget), then
 * performs the decision in the same transaction: the source revoked, the
 * request ended or the rerun created, and the decision recorded as the
 * text it answers, so that a retried call gets the very same answer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"
#include "ledger/core/render.h"
#include "ledger/store/answers.h"
#include "ledger/store/store.h"
#include "ledger/store/rows.h"
#include "ledger/store/statements.h"

/* clang-format off */
static const struct store_stmt decision_read = {
	"decision_read",
	"SELECT response FROM failover_decisions"
	" WHERE tenant = $1 AND request_id = $2 AND source_attempt_id = $3 AND signal = $4",
	4,
};

static const struct store_stmt decision_insert = {
	"decision_insert",
	"INSERT INTO failover_decisions (tenant, request_id, source_attempt_id, signal, action,"
	"  response) VALUES ($1, $2, $3, $4, $5, $6)",
	6,
};
/* clang-format on */

void ledger_store_failover_result_clear(struct ledger_failover_result *r)
{
	if (r == NULL)
		return;
	free(r->client_error);
	free(r->body);
	memset(r, 0, sizeof(*r));
}

/* What a decision reads beyond the lock: its record, the budget, the settled calls. */
struct facts {
	char *recorded; /* owned: the recorded answer, or NULL */
	struct ledger_budget budget;
	struct ledger_settled_call *settled; /* owned */
	size_t nsettled;
};

static void facts_clear(struct facts *f)
{
	free(f->recorded);
	free(f->settled);
	memset(f, 0, sizeof(*f));
}

static enum ledger_err read_facts(struct ledger_store_conn *conn, const struct ledger_call_key *key,
				  const struct ledger_failover_request *in,
				  const struct ledger_policy *policy, struct facts *f)
{
	const char *rec[4] = {key->tenant, key->request_id, in->source_attempt_id,
			      ledger_failover_signal_name(in->signal)};
	const char *req[2] = {key->tenant, key->request_id};
	struct store_step st;
	enum ledger_err rc;

	memset(f, 0, sizeof(*f));
	store_step_begin(&st, conn);
	store_step_add(&st, &decision_read, rec);
	store_step_add(&st, &store_rows_settled_calls, req);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	if (PQntuples(st.res[0]) == 1) {
		f->recorded = store_step_get_dup(st.res[0], 0, 0, NULL);
		if (f->recorded == NULL)
			rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	rc = store_rows_parse_settled(st.res[1], &f->settled, &f->nsettled);
	if (rc != LEDGER_OK)
		goto out;
	store_step_clear(&st);
	rc = store_rows_read_budget(conn, key->tenant, policy, &f->budget);
out:
	store_step_clear(&st);
	return rc;
}

/* The answer of a decision taken now, as it is recorded and sent. */
static char *render_answer(const char *request_id, const struct ledger_failover_request *in,
			   const struct ledger_failover_decision *d, const char *client_error,
			   const struct ledger_attempt *next, const struct ledger_request *r,
			   const struct facts *f)
{
	struct ledger_buf buf = LEDGER_BUF_INIT;
	struct ledger_jsonw w;

	ledger_jsonw_init(&w, &buf);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "action");
	ledger_jsonw_string(&w, ledger_failover_action_name(d->action));
	ledger_jsonw_key(&w, "request_id");
	ledger_jsonw_string(&w, request_id);
	ledger_jsonw_key(&w, "attempt_id");
	ledger_jsonw_string(&w, in->source_attempt_id);
	ledger_jsonw_key(&w, "signal");
	ledger_jsonw_string(&w, ledger_failover_signal_name(in->signal));
	ledger_jsonw_key(&w, "source_state");
	ledger_jsonw_string(&w, ledger_attempt_state_name(d->source_after));
	ledger_jsonw_key(&w, "request_status");
	ledger_jsonw_string(&w, ledger_attempt_request_status_name(d->request_after));
	if (client_error != NULL) {
		ledger_jsonw_key(&w, "client_error");
		ledger_jsonw_raw(&w, client_error, strlen(client_error));
	}
	if (d->action == LEDGER_FAILOVER_WAIT_FOR_FENCE) {
		ledger_jsonw_key(&w, "retry_after_ms");
		ledger_jsonw_int(&w, d->retry_after_ms);
	}
	if (d->action == LEDGER_FAILOVER_RETRY_PREFILL) {
		ledger_jsonw_key(&w, "attempt");
		if (next != NULL)
			ledger_render_attempt(&w, request_id, next, r, NULL);
		else
			ledger_jsonw_null(&w);
		ledger_jsonw_key(&w, "settled_tool_calls");
		ledger_render_settled_calls(&w, f->settled, f->nsettled);
	}
	ledger_jsonw_object_end(&w);
	return ledger_buf_steal(&buf, NULL);
}

/* The decision's inputs and outcome, for the request's history. */
static void decision_event(struct store_event *ev, const struct ledger_failover_request *in,
			   const struct ledger_policy *policy, const struct store_locked *lk,
			   const struct facts *f, const struct ledger_failover_decision *d,
			   const struct ledger_attempt *next)
{
	const struct ledger_attempt *src = &lk->named;

	store_event_start(ev, "failover_decision", in->source_attempt_id);
	store_event_str(ev, "signal", ledger_failover_signal_name(in->signal));
	store_event_str(ev, "action", ledger_failover_action_name(d->action));
	ledger_jsonw_key(&ev->w, "inputs");
	ledger_jsonw_object_begin(&ev->w);
	ledger_jsonw_key(&ev->w, "first_delta_sent");
	ledger_jsonw_bool(&ev->w, lk->request.first_delta_sent);
	store_event_int(ev, "delivered_output_tokens", lk->request.delivered_output_tokens);
	store_event_str(ev, "source_state", ledger_attempt_state_name(src->state));
	store_event_int(ev, "source_lease_ms_left", src->lease_ms_left);
	store_event_str(ev, "newest_attempt_id", lk->newest.attempt_id);
	store_event_int(ev, "attempts", lk->request.attempt_count);
	store_event_int(ev, "max_attempts", lk->request.max_attempts);
	store_event_int(ev, "window_attempts", f->budget.attempts);
	store_event_int(ev, "window_retries", f->budget.retries);
	store_event_int(ev, "retry_prefill_tokens", in->retry_prefill_tokens);
	store_event_int(ev, "max_retry_prefill_tokens", policy->max_retry_prefill_tokens);
	store_event_int(ev, "unknown_tool_calls", lk->calls.unknown);
	store_event_int(ev, "held_tool_call_ms", lk->calls.held_by_newest_ms);
	ledger_jsonw_object_end(&ev->w);
	store_event_str(ev, "source_state_after", ledger_attempt_state_name(d->source_after));
	store_event_str(ev, "request_status_after",
			ledger_attempt_request_status_name(d->request_after));
	store_event_str(ev, "client_error", d->client_error);
	store_event_str(ev, "budget", ledger_attempt_budget_name(d->budget));
	if (d->action == LEDGER_FAILOVER_WAIT_FOR_FENCE)
		store_event_int(ev, "retry_after_ms", d->retry_after_ms);
	if (next != NULL)
		store_event_str(ev, "next_attempt_id", next->attempt_id);
}

/*
 * The rerun @p in a retry_prefill creates, checked as POST attempts would check
 * it (its id unused, its input the request's, its revision the request's when
 * the policy says so). The request takes its input_sha256 if it had none.
 * @return LEDGER_FAILOVER_ANSWERED when it may be created
 */
static enum ledger_failover_status prepare_next(const struct ledger_attempt_request *in,
						const struct ledger_policy *policy,
						struct store_locked *lk,
						struct ledger_attempt *next)
{
	const char *revision = in->model_revision;

	if (lk->second.exists)
		return LEDGER_FAILOVER_NEXT_MISMATCH;
	if (ledger_attempt_input_conflicts(in, &lk->request))
		return LEDGER_FAILOVER_NEXT_INPUT;
	if (revision == NULL && lk->request.model_revision[0] != '\0')
		revision = lk->request.model_revision;
	if (policy->require_same_revision && lk->request.model_revision[0] != '\0' &&
	    revision != NULL && strcmp(revision, lk->request.model_revision) != 0)
		return LEDGER_FAILOVER_NEXT_REVISION;
	memset(next, 0, sizeof(*next));
	next->exists = true;
	snprintf(next->attempt_id, sizeof(next->attempt_id), "%s", in->attempt_id);
	next->epoch = lk->request.attempt_count + 1;
	snprintf(next->replica, sizeof(next->replica), "%s", in->replica ? in->replica : "");
	snprintf(next->gateway, sizeof(next->gateway), "%s", in->gateway ? in->gateway : "");
	snprintf(next->model_revision, sizeof(next->model_revision), "%s",
		 revision ? revision : "");
	next->revision_given = in->model_revision != NULL;
	next->state = LEDGER_ATTEMPT_LIVE;
	next->lease_ms_left = in->lease_ms;
	next->is_retry = true;
	if (in->input_sha256 != NULL && lk->request.input_sha256[0] == '\0')
		snprintf(lk->request.input_sha256, sizeof(lk->request.input_sha256), "%s",
			 in->input_sha256);
	return LEDGER_FAILOVER_ANSWERED;
}

/* The events a decision writes besides its own; each outlives the step. */
struct decision_events {
	struct store_event decision, revoked, status, created;
};

static void events_free(struct decision_events *e)
{
	store_event_free(&e->decision);
	store_event_free(&e->revoked);
	store_event_free(&e->status);
	store_event_free(&e->created);
}

/*
 * A refusal (the source fenced, the request closed) moves nothing: the
 * caller learns the current attempt, and the history who asked.
 */
static enum ledger_err refuse(struct store_step *st, const struct ledger_call_key *key,
			      const struct ledger_failover_request *in, struct store_locked *lk,
			      struct store_event *ev, struct ledger_failover_result *out)
{
	const struct ledger_failover_decision *d = &out->decision;

	out->status = LEDGER_FAILOVER_REFUSED;
	snprintf(out->current_attempt_id, sizeof(out->current_attempt_id), "%s",
		 lk->newest.attempt_id);
	out->client_error = lk->client_error;
	lk->client_error = NULL;
	store_event_refused(ev, "failover", ledger_failover_action_name(d->action),
			    in->source_attempt_id);
	store_event_str(ev, "signal", ledger_failover_signal_name(in->signal));
	store_event_str(ev, "current_attempt_id", lk->newest.attempt_id);
	store_event_add(st, key, ev);
	return store_step_commit(st);
}

/* The source loses its rights in this very transaction. */
static void revoke_source(struct store_step *st, const struct ledger_call_key *key,
			  const struct ledger_failover_request *in, const struct store_locked *lk,
			  const struct ledger_failover_decision *d, struct store_event *ev)
{
	if (d->source_after == lk->named.state)
		return;
	store_rows_attempt_set(st, key->tenant, key->request_id, lk->named.attempt_id,
			       d->source_after, 0, 0, NULL);
	store_event_start(ev, "attempt_revoked", lk->named.attempt_id);
	store_event_str(ev, "state", ledger_attempt_state_name(d->source_after));
	store_event_str(ev, "cause", ledger_failover_signal_name(in->signal));
	store_event_add(st, key, ev);
}

/* The request's new status, and the client error it answers with once it has ended. */
static void set_status(struct store_step *st, const struct ledger_call_key *key,
		       struct store_locked *lk, const struct ledger_failover_decision *d,
		       struct store_event *ev)
{
	if (d->request_after == lk->request.status && d->client_error == NULL)
		return;
	lk->request.status = d->request_after;
	if (d->client_error != NULL) {
		struct ledger_buf client_error = LEDGER_BUF_INIT;

		ledger_render_client_error(&client_error, d->client_error, key->request_id,
					   &lk->request, d->budget);
		free(lk->client_error);
		lk->client_error = ledger_buf_steal(&client_error, NULL); /* frees the buffer */
	}
	store_event_start(ev, "request_status", lk->named.attempt_id);
	store_event_str(ev, "status", ledger_attempt_request_status_name(d->request_after));
	store_event_str(ev, "client_error", d->client_error);
	store_event_str(ev, "budget", ledger_attempt_budget_name(d->budget));
	store_event_add(st, key, ev);
}

/*
 * Performs an answered decision in one transaction: the source revoked,
 * the request's status, the rerun @p created (or none), the decision's
 * event with the inputs it was taken on, and its answer in out->body,
 * recorded when final so that a retried call gets the very same text.
 */
static enum ledger_err perform(struct store_step *st, const struct ledger_call_key *key,
			       const struct ledger_failover_request *in,
			       const struct ledger_policy *policy, struct store_locked *lk,
			       const struct facts *f, const struct ledger_attempt *created,
			       struct decision_events *ev, struct ledger_failover_result *out)
{
	const struct ledger_failover_decision *d = &out->decision;
	struct store_locked before = *lk; /* the inputs, as the event records them */

	revoke_source(st, key, in, lk, d, &ev->revoked);
	set_status(st, key, lk, d, &ev->status);
	if (created != NULL) {
		store_rows_attempt_insert(st, key->tenant, key->request_id, created, in->next,
					  &ev->created, false);
		lk->request.attempt_count = created->epoch;
	}
	store_rows_request_set(st, key->tenant, key->request_id, &lk->request, lk->client_error);
	if (in->delivered_answer != NULL && ledger_failover_closes(d))
		store_answers_add(st, key, in->delivered_answer);
	decision_event(&ev->decision, in, policy, &before, f, d, created);
	store_event_add(st, key, &ev->decision);
	out->body = render_answer(key->request_id, in, d,
				  d->client_error != NULL ? lk->client_error : NULL, created,
				  &lk->request, f);
	if (out->body == NULL) {
		store_step_abort(st->conn);
		return LEDGER_ERR_NOMEM;
	}
	if (d->final) {
		const char *params[6] = {key->tenant,
					 key->request_id,
					 in->source_attempt_id,
					 ledger_failover_signal_name(in->signal),
					 ledger_failover_action_name(d->action),
					 out->body};
		store_step_add(st, &decision_insert, params);
	}
	return store_step_commit(st);
}

static enum ledger_err failover_op(struct ledger_store_conn *conn, const char *tenant,
				   const char *request_id, const struct ledger_failover_request *in,
				   const struct ledger_policy *policy,
				   struct ledger_failover_result *out)
{
	const struct store_lookup look = {
		.attempt_id = in->source_attempt_id,
		.second_attempt_id = in->next != NULL ? in->next->attempt_id : NULL,
		.calls_summary = true,
	};
	struct ledger_call_key key = {tenant, request_id, NULL};
	struct ledger_failover_input input;
	struct ledger_failover_decision *d = &out->decision;
	struct ledger_attempt next, *created = NULL;
	struct decision_events ev;
	struct store_locked lk;
	struct store_step st;
	struct facts f;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&f, 0, sizeof(f));
	memset(&ev, 0, sizeof(ev));
	store_step_begin(&st, conn);
	rc = store_rows_lock_and_read(conn, tenant, request_id, false, &look, &lk, NULL);
	if (rc != LEDGER_OK)
		goto out;
	if (!lk.named.exists) {
		out->status = LEDGER_FAILOVER_NO_ATTEMPT;
		rc = store_step_rollback(conn);
		goto out;
	}
	rc = read_facts(conn, &key, in, policy, &f);
	if (rc != LEDGER_OK)
		goto out;
	/* 1: a retried call gets the decision already taken, as it was */
	if (f.recorded != NULL) {
		out->status = LEDGER_FAILOVER_ANSWERED;
		out->replayed = true;
		out->body = f.recorded;
		f.recorded = NULL;
		/*
		 * The rerun the decision made, its lease read now on the database's
		 * clock: the one a retried call names, else the request's newest
		 * (a router that lost the race named its own). The answer ages the
		 * body's lease only if the body names the same attempt.
		 */
		const struct ledger_attempt *rerun = lk.second.exists ? &lk.second : &lk.newest;

		if (rerun->exists) {
			snprintf(out->lease_attempt_id, sizeof(out->lease_attempt_id), "%s",
				 rerun->attempt_id);
			out->lease_ms_left = rerun->lease_ms_left;
		}
		rc = store_step_rollback(conn);
		goto out;
	}

	input.signal = in->signal;
	input.retry_prefill_tokens = in->retry_prefill_tokens;
	input.source_is_newest = strcmp(lk.newest.attempt_id, lk.named.attempt_id) == 0;
	ledger_failover_decide(&lk.request, &lk.named, &input, &lk.calls, &f.budget, policy, d);

	if (d->action == LEDGER_FAILOVER_ATTEMPT_FENCED ||
	    d->action == LEDGER_FAILOVER_REQUEST_CLOSED) {
		rc = refuse(&st, &key, in, &lk, &ev.decision, out);
		goto out;
	}
	if (d->action == LEDGER_FAILOVER_RETRY_PREFILL && in->next != NULL) {
		out->status = prepare_next(in->next, policy, &lk, &next);
		if (out->status == LEDGER_FAILOVER_NEXT_INPUT)
			snprintf(out->input_sha256, sizeof(out->input_sha256), "%s",
				 lk.request.input_sha256);
		if (out->status != LEDGER_FAILOVER_ANSWERED) {
			/* Nothing moves: the router fixes its call. */
			rc = store_step_rollback(conn);
			goto out;
		}
		created = &next;
	}
	out->status = LEDGER_FAILOVER_ANSWERED;
	rc = perform(&st, &key, in, policy, &lk, &f, created, &ev, out);
	if (rc == LEDGER_OK && created != NULL) {
		snprintf(out->lease_attempt_id, sizeof(out->lease_attempt_id), "%s",
			 created->attempt_id);
		out->lease_ms_left = created->lease_ms_left;
	}
out:
	store_step_clear(&st);
	events_free(&ev);
	facts_clear(&f);
	store_rows_locked_clear(&lk);
	return rc;
}

enum ledger_err ledger_store_failover(struct ledger_store_conn *conn, const char *tenant,
				      const char *request_id,
				      const struct ledger_failover_request *in,
				      const struct ledger_policy *p,
				      struct ledger_failover_result *out)
{
	struct store_retry r = {0};
	enum ledger_err rc = LEDGER_OK;

	memset(out, 0, sizeof(*out));
	while (store_step_retry(conn, &r, &rc)) {
		if (store_step_retrying(&r)) /* what the failed try left */
			ledger_store_failover_result_clear(out);
		rc = failover_op(conn, tenant, request_id, in, p, out);
	}
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_failover_statements[] = {
	&decision_read,
	&decision_insert,
	NULL,
};
