/*
 * ledger/store/ops.c: runs the jobs the HTTP layer hands the store, alone
 * or batched, and keeps the replay cache coherent with what they commit:
 * a claim reads the request's stamp before the database and offers a
 * settled answer to the cache after it; a completion offers the result it
 * stored; creating an attempt or failing over (which may create one)
 * invalidates the request's entries, committed or not, since a 503 cannot
 * tell. No other file touches the cache's stamps, puts or invalidations.
 */
#include <stdlib.h>
#include <string.h>

#include "ledger/common/log.h"
#include "ledger/common/trace.h"
#include "ledger/store/attempt_fast.h"
#include "ledger/store/fast.h"
#include "ledger/store/job.h"
#include "ledger/store/replay_cache.h"
#include "ledger/store/step.h"

/* Before the database is read: the stamp an answer must still carry to be cached. */
static void cache_before(struct ledger_job *job)
{
	const struct ledger_store_op *op = &job->op;

	if (op->kind == LEDGER_STORE_CLAIM || op->kind == LEDGER_STORE_COMPLETE)
		job->cache_stamp = ledger_replay_cache_stamp(op->key.tenant, op->key.request_id);
}

/*
 * After the operation answered: what the cache learns from it. Without
 * fast paths the cache learns nothing and answers nothing (ledger_store_replay):
 * every call is decided under the lock.
 */
static void cache_after(struct ledger_job *job)
{
	const struct ledger_store_op *op = &job->op;
	const struct ledger_call_result *r = &job->res.u.call;

	if (!ledger_store_fast_paths() && op->kind != LEDGER_STORE_ATTEMPT_CREATE &&
	    op->kind != LEDGER_STORE_FAILOVER)
		return;

	switch (op->kind) {
	case LEDGER_STORE_ATTEMPT_CREATE:
	case LEDGER_STORE_FAILOVER:
		/* Committed or not (a 503 cannot tell), claims may now have to name an attempt. */
		ledger_replay_cache_invalidate(op->key.tenant, op->key.request_id);
		return;
	case LEDGER_STORE_CLAIM:
		/* The cache keeps settled calls only; it checks the state itself. */
		if (job->res.rc == LEDGER_OK && r->no_attempts)
			ledger_replay_cache_put(op->key.tenant, op->key.request_id,
						op->key.tool_call_id, &r->call, job->cache_stamp);
		return;
	case LEDGER_STORE_COMPLETE:
		if (job->res.rc == LEDGER_OK && r->outcome.complete == LEDGER_COMPLETE_STORED &&
		    r->no_attempts)
			ledger_replay_cache_put(op->key.tenant, op->key.request_id,
						op->key.tool_call_id, &r->call, job->cache_stamp);
		return;
	default:
		return;
	}
}

/* Runs the operation itself; the cache is not touched here. */
static enum ledger_err run_op(struct ledger_store_conn *conn, struct ledger_job *job)
{
	const struct ledger_store_op *op = &job->op;
	struct ledger_store_result *res = &job->res;

	switch (op->kind) {
	case LEDGER_STORE_NONE:
		return LEDGER_OK;
	case LEDGER_STORE_TOKEN_LOOKUP:
		return ledger_store_token_lookup(conn, op->in.token_sha256, &res->u.token.found,
						 res->u.token.tenant, &res->u.token.role);
	case LEDGER_STORE_SCHEMA_VERSION:
		return ledger_store_schema_version(conn, &res->u.schema);
	case LEDGER_STORE_CLAIM:
		return ledger_store_claim(conn, &op->key, op->in.claim, &res->u.call);
	case LEDGER_STORE_COMPLETE:
		return ledger_store_complete(conn, &op->key, op->in.completion, &res->u.call);
	case LEDGER_STORE_RENEW:
		return ledger_store_renew(conn, &op->key, op->in.renew.fencing_token,
					  op->in.renew.lease_ms, &res->u.call);
	case LEDGER_STORE_RELEASE:
		return ledger_store_release(conn, &op->key, op->in.release.fencing_token,
					    op->in.release.reason, &res->u.call);
	case LEDGER_STORE_RESOLVE:
		return ledger_store_resolve(conn, &op->key, op->in.resolve.resolution,
					    op->in.resolve.result, op->in.resolve.result_len,
					    op->in.resolve.note, &res->u.call);
	case LEDGER_STORE_GET_CALL:
		return ledger_store_get_call(conn, &op->key, &res->u.call.call);
	case LEDGER_STORE_LIST_CALLS:
		return ledger_store_list_calls(
			conn, op->key.tenant, op->in.list_calls.state,
			op->in.list_calls.after_request_id, op->in.list_calls.after_tool_call_id,
			op->in.list_calls.limit, &res->u.calls.items, &res->u.calls.count);
	case LEDGER_STORE_ATTEMPT_CREATE:
		return ledger_store_attempt_create(conn, op->key.tenant, op->key.request_id,
						   op->in.attempt, op->policy, &res->u.attempt);
	case LEDGER_STORE_ATTEMPT_CALL:
		return ledger_store_attempt_call(conn, op->key.tenant, op->key.request_id,
						 op->attempt_id, op->in.attempt_call,
						 &res->u.attempt);
	case LEDGER_STORE_FAILOVER:
		return ledger_store_failover(conn, op->key.tenant, op->key.request_id,
					     op->in.failover, op->policy, &res->u.failover);
	case LEDGER_STORE_REQUEST_VIEW:
		return ledger_store_request_view(conn, op->key.tenant, op->key.request_id,
						 op->in.view.after_seq, op->in.view.max_events,
						 &res->u.view);
	case LEDGER_STORE_LIST_REQUESTS:
		return ledger_store_list_requests(conn, op->key.tenant, op->in.requests,
						  &res->u.requests.items, &res->u.requests.count);
	case LEDGER_STORE_ANSWER_GET:
		return ledger_store_answer_get(conn, op->key.tenant, op->key.request_id,
					       &res->u.answer);
	case LEDGER_STORE_CLIENT_EVENT:
		return ledger_store_client_event(conn, op->key.tenant, op->key.request_id,
						 op->attempt_id, op->in.client_event,
						 &res->u.client_event);
	}
	abort();
}

void ledger_store_execute(struct ledger_store_conn *conn, struct ledger_job *job)
{
	memset(&job->res, 0, sizeof(job->res));
	job->res.began_ms = store_conn_now_ms();
	if (job->deadline_ms != 0 && job->res.began_ms >= job->deadline_ms) {
		/* Its caller has waited the whole bound already: not started now. */
		job->res.rc = LEDGER_ERR_UNAVAILABLE;
		return;
	}
	conn->deadline_ms = job->deadline_ms;
	cache_before(job);
	if (job->timed) {
		job->tx_began_ns = ledger_trace_now_ns();
		job->tx_batch = 1;
	}
	job->res.rc = run_op(conn, job);
	if (job->timed)
		job->tx_ended_ns = ledger_trace_now_ns();
	cache_after(job);
	conn->deadline_ms = 0;
}

/*
 * Fills @p bop with @p job's fast path when it has one: a claim outside
 * attempts, a completion, a renewal, the live attempt's deliver or finish.
 * @return false: it runs alone
 */
static bool offer(struct ledger_job *job, struct ledger_batch_op *bop)
{
	const struct ledger_store_op *op = &job->op;

	memset(bop, 0, sizeof(*bop));
	bop->key = op->key;
	switch (op->kind) {
	case LEDGER_STORE_CLAIM:
		if (op->in.claim->claim.attempt_id != NULL)
			return false; /* under an attempt, the attempt decides first */
		bop->kind = LEDGER_BATCH_CLAIM;
		bop->claim = op->in.claim;
		return true;
	case LEDGER_STORE_COMPLETE:
		bop->kind = LEDGER_BATCH_COMPLETE;
		bop->completion = op->in.completion;
		return true;
	case LEDGER_STORE_RENEW:
		bop->kind = LEDGER_BATCH_RENEW;
		bop->fencing_token = op->in.renew.fencing_token;
		bop->lease_ms = op->in.renew.lease_ms;
		return true;
	case LEDGER_STORE_ATTEMPT_CREATE:
		if (!store_attempt_fast_create_offers(op->in.attempt, op->policy))
			return false;
		bop->kind = LEDGER_BATCH_ATTEMPT;
		bop->key.tool_call_id = op->in.attempt->attempt_id;
		bop->attempt_id = op->in.attempt->attempt_id;
		bop->attempt_create = op->in.attempt;
		bop->policy = op->policy;
		bop->attempt_out = &job->res.u.attempt;
		return true;
	case LEDGER_STORE_ATTEMPT_CALL:
		if (!store_attempt_fast_offers(op->in.attempt_call))
			return false;
		bop->kind = LEDGER_BATCH_ATTEMPT;
		/* The attempt stands for the call in the batch's key order. */
		bop->key.tool_call_id = op->attempt_id;
		bop->attempt_id = op->attempt_id;
		bop->attempt_call = op->in.attempt_call;
		bop->attempt_out = &job->res.u.attempt;
		return true;
	default:
		return false;
	}
}

/* The answer a fast path gave in a batch must be one the C decision allows for it. */
static void check_fast_answer(const struct ledger_batch_op *bop)
{
	const struct ledger_call_result *r = &bop->out;

	switch (bop->kind) {
	case LEDGER_BATCH_CLAIM:
		LEDGER_ASSERT(r->outcome.claim == LEDGER_CLAIM_NEW ||
			      r->outcome.claim == LEDGER_CLAIM_REPLAY ||
			      r->outcome.claim == LEDGER_CLAIM_RESULT_NOT_KEPT ||
			      r->outcome.claim == LEDGER_CLAIM_RESULT_EXPIRED);
		LEDGER_ASSERT(
			r->outcome.claim != LEDGER_CLAIM_NEW ||
			(r->call.state == LEDGER_CALL_IN_PROGRESS && r->call.fencing_token == 1));
		return;
	case LEDGER_BATCH_COMPLETE:
		LEDGER_ASSERT(r->outcome.complete == LEDGER_COMPLETE_STORED ||
			      r->outcome.complete == LEDGER_COMPLETE_RELEASED);
		LEDGER_ASSERT(r->call.fencing_token == bop->completion->fencing_token);
		return;
	case LEDGER_BATCH_RENEW:
		LEDGER_ASSERT(r->outcome.renew == LEDGER_RENEW_RENEWED);
		return;
	case LEDGER_BATCH_ATTEMPT:
		LEDGER_ASSERT(bop->attempt_out->found &&
			      strcmp(bop->attempt_out->attempt.attempt_id, bop->attempt_id) == 0);
		LEDGER_ASSERT(bop->attempt_create != NULL
				      ? bop->attempt_out->outcome.create == LEDGER_CREATE_CREATED
				      : bop->attempt_out->outcome.op == LEDGER_ATTEMPT_OP_DONE);
		return;
	}
	abort();
}

void ledger_store_execute_many(struct ledger_store_conn *conn, struct ledger_job **jobs, size_t n,
			       struct ledger_batch_op *ops, struct ledger_job **joined)
{
	size_t k = 0, alone = 0;
	int64_t began = 0;
	uint64_t began_ns = 0, ended_ns = 0; /* the batch's transaction, for traced jobs */
	bool timed = false;
	enum ledger_err rc = LEDGER_ERR_CONFLICT; /* nothing batched: each runs alone */

	/* The jobs that join keep their place in ops[] and joined[]; the others move up in jobs[]. */
	for (size_t i = 0; i < n; i++) {
		if (offer(jobs[i], &ops[k])) {
			cache_before(jobs[i]);
			timed = timed || jobs[i]->timed;
			joined[k++] = jobs[i];
		} else {
			jobs[alone++] = jobs[i];
		}
	}
	/* A batch of one gains nothing: it runs alone, fast path and all. */
	if (k > 1) {
		began = store_conn_now_ms();

		/* The batch answers by the earliest deadline of its calls. */
		conn->deadline_ms = 0;
		for (size_t i = 0; i < k; i++) {
			int64_t d = joined[i]->deadline_ms;

			if (d != 0 && (conn->deadline_ms == 0 || d < conn->deadline_ms))
				conn->deadline_ms = d;
		}
		/* Its failure is said once per call below, each line with that call's ids. */
		conn->quiet = true;
		conn->failure[0] = '\0';
		began_ns = timed ? ledger_trace_now_ns() : 0;
		rc = ledger_store_batch(conn, ops, k);
		ended_ns = timed ? ledger_trace_now_ns() : 0;
		conn->quiet = false;
		conn->deadline_ms = 0;
	}
	for (size_t i = 0; i < k; i++) {
		struct ledger_job *job = joined[i];
		struct ledger_batch_op *bop = &ops[i];

		ledger_log_context_set(&job->ids);
		if (k > 1 && rc != LEDGER_OK && conn->failure[0] != '\0')
			LEDGER_LOG(rc == LEDGER_ERR_INTERNAL ? LEDGER_LOG_ERROR : LEDGER_LOG_DEBUG,
				   NULL, NULL, "database step failed in a batch of %zu calls: %s",
				   k, conn->failure);
		if (job->timed && (rc == LEDGER_ERR_UNAVAILABLE || (rc == LEDGER_OK && bop->done))) {
			/* Answered by the batch: its transaction is the job's. */
			job->tx_began_ns = began_ns;
			job->tx_ended_ns = ended_ns;
			job->tx_batch = (unsigned)k;
		}
		if (rc == LEDGER_ERR_UNAVAILABLE) {
			/* The batch's commit may or may not have happened: 503, and retry. */
			memset(&job->res, 0, sizeof(job->res));
			job->res.rc = rc;
			cache_after(job); /* an attempt created or not: the cache forgets */
		} else if (rc == LEDGER_OK && bop->done && bop->kind == LEDGER_BATCH_ATTEMPT) {
			struct ledger_attempt_result answered = *bop->attempt_out;

			check_fast_answer(bop);
			memset(&job->res, 0, sizeof(job->res));
			job->res.began_ms = began;
			job->res.u.attempt = answered; /* filled in place: the job's already */
			cache_after(job);
		} else if (rc == LEDGER_OK && bop->done) {
			check_fast_answer(bop);
			memset(&job->res, 0, sizeof(job->res));
			job->res.began_ms = began;
			job->res.u.call = bop->out; /* what it owns is the job's now */
			memset(&bop->out, 0, sizeof(bop->out));
			cache_after(job);
		} else {
			ledger_call_clear(&bop->out.call);
			ledger_store_execute(conn, job); /* alone, from the start */
		}
		ledger_log_context_set(NULL);
		job->done(job);
	}
	for (size_t i = 0; i < alone; i++) {
		ledger_log_context_set(&jobs[i]->ids);
		ledger_store_execute(conn, jobs[i]);
		ledger_log_context_set(NULL);
		jobs[i]->done(jobs[i]);
	}
}

bool ledger_store_replay(struct ledger_job *job)
{
	const struct ledger_store_op *op = &job->op;
	struct ledger_call_result *r = &job->res.u.call;

	/*
	 * Only outside attempts: under one, whether the attempt exists decides
	 * first, and only the database knows. Only a replay, or a finished
	 * call's result_not_kept (which, as a replay, records nothing): anything
	 * else (args that differ: a refusal the history records) goes to the
	 * database.
	 */
	if (op->kind != LEDGER_STORE_CLAIM || op->in.claim->claim.attempt_id != NULL ||
	    !ledger_store_fast_paths())
		return false;
	memset(&job->res, 0, sizeof(job->res));
	job->res.began_ms = store_conn_now_ms();
	if (!ledger_replay_cache_get(op->key.tenant, op->key.request_id, op->key.tool_call_id,
				     &r->call))
		return false;
	r->outcome.claim = ledger_decide_claim(&op->in.claim->claim, &r->call, false,
					       LEDGER_STANDING_NOT_GIVEN, &r->mismatch);
	if (r->outcome.claim != LEDGER_CLAIM_REPLAY &&
	    r->outcome.claim != LEDGER_CLAIM_RESULT_NOT_KEPT) {
		ledger_store_result_clear(job);
		return false;
	}
	r->no_attempts = true;
	return true;
}

void ledger_store_result_clear(struct ledger_job *job)
{
	struct ledger_store_result *res = &job->res;

	switch (job->op.kind) {
	case LEDGER_STORE_NONE:
	case LEDGER_STORE_TOKEN_LOOKUP:
	case LEDGER_STORE_SCHEMA_VERSION:
	case LEDGER_STORE_CLIENT_EVENT:
		break;
	case LEDGER_STORE_CLAIM:
	case LEDGER_STORE_COMPLETE:
	case LEDGER_STORE_RENEW:
	case LEDGER_STORE_RELEASE:
	case LEDGER_STORE_RESOLVE:
	case LEDGER_STORE_GET_CALL:
		ledger_call_clear(&res->u.call.call);
		break;
	case LEDGER_STORE_LIST_CALLS:
		ledger_store_free_list(res->u.calls.items, res->u.calls.count);
		break;
	case LEDGER_STORE_ATTEMPT_CREATE:
	case LEDGER_STORE_ATTEMPT_CALL:
		ledger_store_attempt_result_clear(&res->u.attempt);
		break;
	case LEDGER_STORE_FAILOVER:
		ledger_store_failover_result_clear(&res->u.failover);
		break;
	case LEDGER_STORE_REQUEST_VIEW:
		ledger_store_request_view_clear(&res->u.view);
		break;
	case LEDGER_STORE_LIST_REQUESTS:
		ledger_store_free_requests(res->u.requests.items, res->u.requests.count);
		break;
	case LEDGER_STORE_ANSWER_GET:
		ledger_store_answer_result_clear(&res->u.answer);
		break;
	}
	memset(res, 0, sizeof(*res));
}
