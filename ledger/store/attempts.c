/*
 * ledger/store/attempts.c: attempts on PostgreSQL: creating one (POST
 * attempts) and an attempt's own calls (renew, deliver, cancel, cancel-ack,
 * finish). Each locks the request, reads it and its attempts after the
 * lock, asks ledger/core/attempt.c, and writes the decision with its events in
 * the same transaction. The partial unique index on live attempts and the
 * trigger refusing an attempt after the first delta hold docs/design.md invariants 1 and 2
 * even against a bug here.
 */
#include <stdlib.h>
#include <string.h>

#include "ledger/common/log.h"
#include "ledger/store/answers.h"
#include "ledger/store/attempt_fast.h"
#include "ledger/store/fast.h"
#include "ledger/store/store.h"
#include "ledger/store/rows.h"
#include "ledger/store/statements.h"

/* Hands the request as it stands, its client error and settled calls, to the result. */
static void take_request(struct ledger_attempt_result *out, struct store_locked *lk)
{
	out->request = lk->request;
	out->client_error = lk->client_error;
	lk->client_error = NULL;
	out->settled = lk->settled;
	out->nsettled = lk->nsettled;
	lk->settled = NULL;
	lk->nsettled = 0;
}

static void event_refused_attempt(struct store_step *st, const char *tenant, const char *request_id,
				  struct store_event *ev, const char *operation, const char *code,
				  const char *attempt_id, const struct ledger_attempt *a)
{
	struct ledger_call_key key = {tenant, request_id, NULL};

	store_event_refused(ev, operation, code, attempt_id);
	if (a != NULL && a->exists)
		store_event_str(ev, "attempt_state", ledger_attempt_state_name(a->state));
	store_event_add(st, &key, ev);
}

/* --- create --- */

/* The events a creation writes; each outlives the step. */
struct create_events {
	struct store_event created, superseded, reopened;
};

/*
 * Queues the writes of a creation: the expired newest superseded, the
 * attempt, the request as it now stands (reopened, its input fixed by the
 * first attempt naming one), and their events; leaves lk->request so.
 */
static void queue_creation(struct store_step *st, const struct ledger_call_key *key,
			   const struct ledger_attempt_request *in,
			   const struct ledger_create_decision *d, struct store_locked *lk,
			   const struct ledger_attempt *next, struct create_events *ev)
{
	if (d->supersede_newest) {
		store_rows_attempt_set(st, key->tenant, key->request_id, lk->newest.attempt_id,
				       LEDGER_ATTEMPT_SUPERSEDED, 0, 0, NULL);
		store_event_start(&ev->superseded, "attempt_revoked", lk->newest.attempt_id);
		store_event_str(&ev->superseded, "state", "superseded");
		store_event_str(&ev->superseded, "cause", "next_attempt");
		store_event_add(st, key, &ev->superseded);
	}
	store_rows_attempt_insert(st, key->tenant, key->request_id, next, in, &ev->created,
				  d->reopen);
	lk->request.attempt_count = next->epoch;
	lk->request.max_attempts = d->max_attempts;
	if (in->input_sha256 != NULL && lk->request.input_sha256[0] == '\0')
		snprintf(lk->request.input_sha256, sizeof(lk->request.input_sha256), "%s",
			 in->input_sha256);
	if (lk->request.model_revision[0] == '\0')
		snprintf(lk->request.model_revision, sizeof(lk->request.model_revision), "%s",
			 next->model_revision);
	if (d->reopen) {
		lk->request.status = LEDGER_REQUEST_OPEN;
		store_event_start(&ev->reopened, "request_status", next->attempt_id);
		store_event_str(&ev->reopened, "status", "open");
		store_event_str(&ev->reopened, "cause", "reopened");
		store_event_add(st, key, &ev->reopened);
	}
	store_rows_request_set(st, key->tenant, key->request_id, &lk->request, lk->client_error);
}

static enum ledger_err create_op(struct ledger_store_conn *conn, const char *tenant,
				 const char *request_id, const struct ledger_attempt_request *in,
				 const struct ledger_policy *policy,
				 struct ledger_attempt_result *out)
{
	const struct store_lookup look = {
		.attempt_id = in->attempt_id, .calls_summary = true, .settled_calls = true};
	struct ledger_call_key key = {tenant, request_id, NULL};
	struct ledger_create_decision d;
	struct ledger_budget budget = {0, 0};
	struct create_events ev;
	struct ledger_attempt next;
	struct store_locked lk;
	struct store_step st;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	store_step_begin(&st, conn);
	rc = store_rows_lock_and_read(conn, tenant, request_id, true, &look, &lk, NULL);
	if (rc != LEDGER_OK)
		goto out;
	out->found = true;
	/* Only a retry needs the pool-wide budget, and its per-tenant lock. */
	if (!lk.named.exists && lk.request.attempt_count > 0) {
		rc = store_rows_read_budget(conn, tenant, policy, &budget);
		if (rc != LEDGER_OK)
			goto out;
	}
	ledger_attempt_decide_create(in, &lk.request, &lk.named, &lk.newest, &lk.calls, &budget,
				     policy, &d);
	out->outcome.create = d.outcome;
	out->retry_after_ms = d.retry_after_ms;
	out->budget = d.budget;
	out->input_mismatch = d.input_mismatch;
	if (d.budget == LEDGER_BUDGET_POOL) {
		rc = store_rows_read_retry_after(conn, tenant, policy, &out->retry_after_ms);
		if (rc != LEDGER_OK)
			goto out;
	}

	if (d.outcome == LEDGER_CREATE_REPEATED) {
		out->attempt = lk.named;
		take_request(out, &lk);
		rc = store_step_rollback(conn);
		goto out;
	}
	if (d.outcome != LEDGER_CREATE_CREATED) {
		take_request(out, &lk);
		if (lk.created) { /* nothing to keep a history under */
			rc = store_step_rollback(conn);
			goto out;
		}
		store_event_refused(&ev.created, "attempt_create",
				    ledger_attempt_create_code(d.outcome), in->attempt_id);
		store_event_str(&ev.created, "budget", ledger_attempt_budget_name(d.budget));
		store_event_add(&st, &key, &ev.created);
		rc = store_step_commit(&st);
		goto out;
	}
	store_attempt_fast_new(in, lk.request.attempt_count, &d, &next);
	queue_creation(&st, &key, in, &d, &lk, &next, &ev);
	rc = store_step_commit(&st);
	if (rc == LEDGER_OK) {
		out->attempt = next;
		take_request(out, &lk);
	}
out:
	store_step_clear(&st);
	store_event_free(&ev.created);
	store_event_free(&ev.superseded);
	store_event_free(&ev.reopened);
	store_rows_locked_clear(&lk);
	return rc;
}

/*
 * The first attempt of a request that does not exist yet in one statement
 * (ledger/store/attempt_fast.c); else the locked path.
 */
static enum ledger_err create_fast_or_locked(struct ledger_store_conn *conn, const char *tenant,
					     const char *request_id,
					     const struct ledger_attempt_request *in,
					     const struct ledger_policy *policy,
					     struct ledger_attempt_result *out)
{
	if (ledger_store_fast_paths() && store_attempt_fast_create_offers(in, policy)) {
		struct ledger_batch_op fast = {.kind = LEDGER_BATCH_ATTEMPT,
					       .key = {tenant, request_id, in->attempt_id},
					       .attempt_create = in,
					       .policy = policy,
					       .attempt_out = out};
		bool done = false;
		enum ledger_err rc = store_attempt_fast_run(conn, &fast, &done);

		if (rc != LEDGER_OK || done)
			return rc;
	}
	return create_op(conn, tenant, request_id, in, policy, out);
}

enum ledger_err ledger_store_attempt_create(struct ledger_store_conn *conn, const char *tenant,
					    const char *request_id,
					    const struct ledger_attempt_request *in,
					    const struct ledger_policy *p,
					    struct ledger_attempt_result *out)
{
	struct store_retry r = {0};
	enum ledger_err rc = LEDGER_OK;

	memset(out, 0, sizeof(*out));
	while (store_step_retry(conn, &r, &rc)) {
		if (store_step_retrying(&r)) /* what the failed try left */
			ledger_store_attempt_result_clear(out);
		rc = create_fast_or_locked(conn, tenant, request_id, in, p, out);
	}
	return rc;
}

/* --- an attempt's own calls --- */

static const char *const op_names[] = {
	[LEDGER_OP_RENEW] = "attempt_renew", [LEDGER_OP_DELIVER] = "deliver",
	[LEDGER_OP_CANCEL] = "cancel",       [LEDGER_OP_CANCEL_ACK] = "cancel_ack",
	[LEDGER_OP_FINISH] = "finish",
};

/* Decides @p call on attempt @p a of request @p r. */
static enum ledger_attempt_op_outcome decide(const struct ledger_attempt_call *call,
					     const struct ledger_request *r,
					     const struct ledger_attempt *a)
{
	switch (call->op) {
	case LEDGER_OP_RENEW:
	case LEDGER_OP_DELIVER:
		return ledger_attempt_decide_renew(r, a);
	case LEDGER_OP_CANCEL:
		return ledger_attempt_decide_cancel(a, false);
	case LEDGER_OP_CANCEL_ACK:
		return ledger_attempt_decide_cancel(a, true);
	case LEDGER_OP_FINISH:
		return ledger_attempt_decide_finish(r, a, call->completed);
	}
	abort();
}

/*
 * Queues a finish decided DONE: the attempt ends, and so does the request
 * when it completed or failed with the client's own error (whose text the
 * caller put in lk->client_error), with their events and the answer its
 * client was sent, all in the one transaction.
 */
static void finish(struct store_step *st, const struct ledger_call_key *key,
		   const struct ledger_attempt_call *call, struct store_locked *lk,
		   struct ledger_attempt *att, struct store_event *ev, struct store_event *ev2)
{
	const char *outcome = call->completed ? "completed" : "failed";

	att->state = call->completed ? LEDGER_ATTEMPT_FINISHED : LEDGER_ATTEMPT_FAILED;
	att->lease_ms_left = 0;
	store_rows_attempt_set(st, key->tenant, key->request_id, att->attempt_id, att->state, 0,
			       att->delivered_output_tokens, outcome);
	store_event_start(ev, "attempt_finished", att->attempt_id);
	store_event_str(ev, "outcome", outcome);
	store_event_int(ev, "delivered_output_tokens", att->delivered_output_tokens);
	store_event_str(ev, "reason", call->reason);
	store_event_add(st, key, ev);
	if (!call->completed && call->client_error == NULL)
		return; /* the request stays open for a failover decision */
	lk->request.status = call->completed ? LEDGER_REQUEST_COMPLETED : LEDGER_REQUEST_FAILED;
	store_event_start(ev2, "request_status", att->attempt_id);
	store_event_str(ev2, "status", ledger_attempt_request_status_name(lk->request.status));
	if (call->client_error != NULL) {
		/* the engine refused the client's input: no failover, no rerun */
		store_event_str(ev2, "cause", "client_error");
		store_event_str(ev2, "client_error", call->client_error_code);
	}
	store_event_add(st, key, ev2);
	if (call->answer != NULL)
		store_answers_add(st, key, call->answer);
}

/*
 * Queues the writes of a call decided DONE, and their events (@p ev and
 * @p ev2 outlive the step); leaves the result's rows as they will be.
 */
static void apply(struct store_step *st, const struct ledger_call_key *key,
		  const struct ledger_attempt_call *call, struct store_locked *lk,
		  struct ledger_attempt *att, struct store_event *ev, struct store_event *ev2)
{
	struct ledger_request *r = &lk->request;
	int64_t delivered = call->delivered_output_tokens;

	switch (call->op) {
	case LEDGER_OP_RENEW:
		store_rows_attempt_set(st, key->tenant, key->request_id, att->attempt_id,
				       LEDGER_ATTEMPT_LIVE, call->lease_ms, 0, NULL);
		att->lease_ms_left = call->lease_ms;
		return;
	case LEDGER_OP_DELIVER:
	case LEDGER_OP_FINISH:
		if (delivered > r->delivered_output_tokens)
			r->delivered_output_tokens = delivered;
		if (delivered > att->delivered_output_tokens)
			att->delivered_output_tokens = delivered;
		break;
	case LEDGER_OP_CANCEL:
		att->state = LEDGER_ATTEMPT_CANCEL_REQUESTED;
		store_rows_attempt_set(st, key->tenant, key->request_id, att->attempt_id,
				       att->state, 0, 0, NULL);
		store_event_start(ev, "attempt_cancel_requested", att->attempt_id);
		store_event_str(ev, "reason", call->reason);
		store_event_add(st, key, ev);
		return;
	case LEDGER_OP_CANCEL_ACK:
		att->state = LEDGER_ATTEMPT_CANCELLED;
		store_rows_attempt_set(st, key->tenant, key->request_id, att->attempt_id,
				       att->state, 0, 0, NULL);
		store_event_start(ev, "attempt_cancelled", att->attempt_id);
		store_event_add(st, key, ev);
		return;
	}

	if (call->op == LEDGER_OP_DELIVER) {
		/* The point of no retry: durable before the router writes a byte. */
		if (!r->first_delta_sent) {
			r->first_delta_sent = true;
			store_event_start(ev, "first_delta", att->attempt_id);
			store_event_int(ev, "delivered_output_tokens", r->delivered_output_tokens);
			store_event_add(st, key, ev);
		}
		store_rows_attempt_set(st, key->tenant, key->request_id, att->attempt_id,
				       LEDGER_ATTEMPT_LIVE, 0, att->delivered_output_tokens, NULL);
	} else {
		finish(st, key, call, lk, att, ev, ev2);
	}
	store_rows_request_set(st, key->tenant, key->request_id, r, lk->client_error);
}

static enum ledger_err call_op(struct ledger_store_conn *conn, const char *tenant,
			       const char *request_id, const char *attempt_id,
			       const struct ledger_attempt_call *call,
			       struct ledger_attempt_result *out)
{
	const struct store_lookup look = {.attempt_id = attempt_id};
	const struct ledger_call_key key = {tenant, request_id, NULL};
	enum ledger_attempt_op_outcome o;
	struct store_event ev, ev2;
	struct store_locked lk;
	struct store_step st;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	memset(&ev2, 0, sizeof(ev2));
	store_step_begin(&st, conn);
	rc = store_rows_lock_and_read(conn, tenant, request_id, false, &look, &lk, NULL);
	if (rc != LEDGER_OK)
		goto out;
	if (!lk.named.exists) {
		rc = store_step_rollback(conn);
		goto out;
	}
	out->found = true;
	out->attempt = lk.named;
	o = decide(call, &lk.request, &lk.named);
	out->outcome.op = o;
	switch (o) {
	case LEDGER_ATTEMPT_OP_REPEATED:
		rc = store_step_rollback(conn);
		break;
	case LEDGER_ATTEMPT_OP_FENCED:
		/* A zombie trying to act is what an incident review looks for. */
		event_refused_attempt(&st, tenant, request_id, &ev, op_names[call->op],
				      "attempt_fenced", attempt_id, &lk.named);
		rc = store_step_commit(&st);
		break;
	case LEDGER_ATTEMPT_OP_DONE:
		if (call->client_error != NULL) {
			/* recorded verbatim, as the request's: every later answer repeats it */
			char *text = strndup(call->client_error, call->client_error_len);

			if (text == NULL) {
				store_step_abort(conn);
				rc = LEDGER_ERR_NOMEM;
				break;
			}
			free(lk.client_error);
			lk.client_error = text;
		}
		apply(&st, &key, call, &lk, &out->attempt, &ev, &ev2);
		rc = store_step_commit(&st);
		break;
	}
	take_request(out, &lk);
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_event_free(&ev2);
	store_rows_locked_clear(&lk);
	return rc;
}

/*
 * The live attempt's deliver or finish in one statement when it applies
 * (ledger/store/attempt_fast.c); else, or for any other call, the locked path.
 */
static enum ledger_err call_fast_or_locked(struct ledger_store_conn *conn, const char *tenant,
					   const char *request_id, const char *attempt_id,
					   const struct ledger_attempt_call *call,
					   struct ledger_attempt_result *out)
{
	if (ledger_store_fast_paths() && store_attempt_fast_offers(call)) {
		struct ledger_batch_op fast = {.kind = LEDGER_BATCH_ATTEMPT,
					       .key = {tenant, request_id, attempt_id},
					       .attempt_id = attempt_id,
					       .attempt_call = call,
					       .attempt_out = out};
		bool done = false;
		enum ledger_err rc = store_attempt_fast_run(conn, &fast, &done);

		if (rc != LEDGER_OK || done)
			return rc;
	}
	return call_op(conn, tenant, request_id, attempt_id, call, out);
}

enum ledger_err ledger_store_attempt_call(struct ledger_store_conn *conn, const char *tenant,
					  const char *request_id, const char *attempt_id,
					  const struct ledger_attempt_call *call,
					  struct ledger_attempt_result *out)
{
	struct store_retry r = {0};
	enum ledger_err rc = LEDGER_OK;

	memset(out, 0, sizeof(*out));
	while (store_step_retry(conn, &r, &rc)) {
		if (store_step_retrying(&r)) /* what the failed try left */
			ledger_store_attempt_result_clear(out);
		rc = call_fast_or_locked(conn, tenant, request_id, attempt_id, call, out);
	}
	return rc;
}
