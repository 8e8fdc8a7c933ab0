/*
 * ledger/store/attempt_fast.c: the one-statement fast paths of an
 * attempt's hot calls: the live attempt's deliver, and its finish (without
 * a client error; with the answer to keep when it completes the request). Each statement writes exactly what
 * ledger/store/attempts.c writes when ledger/core/attempt.c decides DONE,
 * and only where it would: the attempt stored live, its lease running on
 * the database clock, its request open. Anything else (fenced, repeated,
 * no such attempt) matches nothing and goes to the locked path. That the
 * two agree is tested with the SQL itself (tests/integration/test_fast_paths.py).
 *
 * Lock order is the locked path's: the request's row first (the fence is
 * read under it), then the attempt's, whose gate an UPDATE re-checks on
 * the row's newest version, so a failover committed while the statement
 * waited is seen.
 */
#include "ledger/store/attempt_fast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/log.h"
#include "ledger/core/attempt.h"
#include "ledger/store/rows.h"

/* The statements are laid out as SQL, not as C. */
/* clang-format off */

/* The request, locked, and the clock read once after the lock. */
#define FAST_LOCKED_REQUEST                                                                  \
	"WITH req AS MATERIALIZED ("                                                         \
	"  SELECT status, first_delta_sent, delivered_output_tokens FROM requests"           \
	"  WHERE tenant = $1 AND request_id = $2 FOR UPDATE"                                  \
	"), clk AS MATERIALIZED (SELECT clock_timestamp() AS now FROM req"                   \
	")"

/* The gate: where ledger_attempt_has_rights() holds for attempt $3 of the locked request. */
#define FAST_GATE                                                                            \
	"  WHERE a.tenant = $1 AND a.request_id = $2 AND a.attempt_id = $3"                  \
	"    AND a.state = 'live' AND a.lease_until > clk.now AND req.status = 'open'"

/*
 * The request as request_set() writes it back (store_rows_request_set: the
 * columns read, each as the C code reads and writes it again).
 */
#define FAST_REQUEST_AGAIN                                                                   \
	"    attempt_count = r.attempt_count, max_attempts = nullif(r.max_attempts, 0),"       \
	"    model_revision = nullif(r.model_revision, ''),"                                   \
	"    input_sha256 = nullif(r.input_sha256, ''),"

/* What both answer: the attempt (STORE_ATTEMPT_COLUMNS), then the request's columns. */
#define FAST_ANSWER                                                                          \
	" SELECT " STORE_ATTEMPT_COLUMNS ", q.*"                                             \
	" FROM upd a, (SELECT now AS t FROM clk) now_,"                                      \
	"  (SELECT " STORE_REQUEST_COLUMNS " FROM updr) q"

/*
 * deliver ($4 delivered_output_tokens, -1: not given): the attempt's and
 * the request's counts raised, the request past its first delta, and the
 * first_delta event when it was not yet, in the attempt's row
 * (sql/009_attempt_history_in_rows.sql).
 */
static const struct store_stmt deliver_fast = {
	"attempt_deliver_fast",
	FAST_LOCKED_REQUEST
	", upd AS ("
	"  UPDATE attempts a SET delivered_output_tokens ="
	"    greatest(a.delivered_output_tokens, $4::bigint), ended_at = NULL,"
	"    first_delta_seq = CASE WHEN req.first_delta_sent THEN a.first_delta_seq"
	"      ELSE nextval('event_seq') END,"
	"    first_delta_at = CASE WHEN req.first_delta_sent THEN a.first_delta_at ELSE clk.now END,"
	"    first_delta_tokens = CASE WHEN req.first_delta_sent THEN a.first_delta_tokens"
	"      ELSE greatest(req.delivered_output_tokens, $4::bigint) END"
	"  FROM req, clk" FAST_GATE
	"  RETURNING a.*"
	"), updr AS ("
	"  UPDATE requests r SET status = 'open', first_delta_sent = true, phase = 'decode',"
	"    delivered_output_tokens = greatest(r.delivered_output_tokens, $4::bigint),"
	FAST_REQUEST_AGAIN
	"    closed_at = NULL"
	"  FROM upd WHERE r.tenant = $1 AND r.request_id = $2"
	"  RETURNING r.*"
	")" FAST_ANSWER,
	4,
};

/*
 * finish ($4 delivered_output_tokens, -1: not given; $5 completed; $6 its
 * reason, or NULL): the attempt ends, finished or failed, and a completed
 * one completes its request; attempt_finished, and request_status when
 * the request completed, in that order, in the attempt's row
 * (sql/009_attempt_history_in_rows.sql): their seqs are drawn in that
 * order before the row is written.
 */
#define FAST_FINISH                                                                      \
	FAST_LOCKED_REQUEST                                                              \
	", seqs AS MATERIALIZED ("                                                       \
	"  SELECT f, CASE WHEN $5::boolean THEN nextval('event_seq') END AS c"           \
	"  FROM (SELECT nextval('event_seq') AS f FROM req OFFSET 0) s"                  \
	"), upd AS ("                                                                    \
	"  UPDATE attempts a SET"                                                        \
	"    state = CASE WHEN $5::boolean THEN 'finished' ELSE 'failed' END,"           \
	"    delivered_output_tokens = greatest(a.delivered_output_tokens, $4::bigint)," \
	"    outcome = CASE WHEN $5::boolean THEN 'completed' ELSE 'failed' END,"        \
	"    ended_at = coalesce(a.ended_at, clk.now),"                                  \
	"    finished_seq = seqs.f, finished_at = clk.now, completed_seq = seqs.c,"      \
	"    finished_detail = jsonb_build_object("                                      \
	"      'outcome', CASE WHEN $5::boolean THEN 'completed' ELSE 'failed' END,"     \
	"      'delivered_output_tokens', greatest(a.delivered_output_tokens, $4::bigint))" \
	"      || CASE WHEN $6::text <> '' THEN jsonb_build_object('reason', $6::text)"  \
	"         ELSE '{}' END"                                                         \
	"  FROM req, clk, seqs" FAST_GATE                                                \
	"  RETURNING a.*"                                                                \
	"), updr AS ("                                                                   \
	"  UPDATE requests r SET"                                                        \
	"    status = CASE WHEN $5::boolean THEN 'completed' ELSE 'open' END,"           \
	"    phase = CASE WHEN r.first_delta_sent THEN 'decode' ELSE 'prefill' END,"     \
	"    delivered_output_tokens = greatest(r.delivered_output_tokens, $4::bigint)," \
	FAST_REQUEST_AGAIN                                                               \
	"    closed_at = CASE WHEN $5::boolean THEN coalesce(r.closed_at, clk.now) END"  \
	"  FROM upd, clk WHERE r.tenant = $1 AND r.request_id = $2"                      \
	"  RETURNING r.*"                                                                \
	")"

static const struct store_stmt finish_fast = {
	"attempt_finish_fast",
	FAST_FINISH FAST_ANSWER,
	6,
};

/*
 * A completing finish with the answer its client was sent ($7 status, $8
 * content type, $9 kept, $10 body_b64 or NULL, $11 bytes, $12 sha256), as
 * store_answers_add() keeps it: in the same transaction, once per request.
 */
static const struct store_stmt finish_answer_fast = {
	"attempt_finish_answer_fast",
	FAST_FINISH
	", ans AS ("
	"  INSERT INTO answers (tenant, request_id, status, content_type, kept, body_b64, bytes,"
	"    sha256, created_at)"
	"  SELECT $1, $2, $7::integer, $8, $9::boolean, $10, $11::bigint, $12, clk.now"
	"  FROM upd, clk WHERE $5::boolean"
	"  ON CONFLICT (tenant, request_id) DO NOTHING"
	")" FAST_ANSWER,
	12,
};

/*
 * POST attempts of a request that does not exist yet: $3 attempt_id,
 * $4 replica, $5 model_revision (the effective one), $6 revision_given,
 * $7 lease_ms, $8 gateway, $9 max_attempts, $10 input_sha256 (each NULL
 * when not given), $11 the attempt_created event's detail. Creates the
 * request as the locked path leaves it (its first attempt counted, the
 * revision and input fixed by it), the attempt with its attempt_created
 * event in its row, all at one clock read; a request that exists already
 * matches nothing.
 */
static const struct store_stmt create_fast = {
	"attempt_create_fast",
	"WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS now"
	"), req AS ("
	"  INSERT INTO requests (tenant, request_id, attempt_count, max_attempts, model_revision,"
	"    input_sha256, created_at)"
	"  VALUES ($1, $2, 1, nullif($9::integer, 0), $5, $10, (SELECT now FROM clk))"
	"  ON CONFLICT (tenant, request_id) DO NOTHING"
	"  RETURNING " STORE_REQUEST_COLUMNS
	"), att AS ("
	"  INSERT INTO attempts (tenant, request_id, attempt_id, epoch, replica, model_revision,"
	"    revision_given, state, lease_until, is_retry, gateway, created_at, created_seq,"
	"    created_detail)"
	"  SELECT $1, $2, $3, 1, $4, $5, $6::boolean, 'live', "
	STORE_LEASE_FROM("clk.now", "$7") ", false, $8, clk.now, nextval('event_seq'),"
	"    $11::jsonb FROM req, clk"
	") SELECT * FROM req",
	11,
};
/* clang-format on */

/* --- POST attempts: the first attempt of a request nobody named yet --- */

void store_attempt_fast_new(const struct ledger_attempt_request *in, int64_t attempt_count,
		       const struct ledger_create_decision *d, struct ledger_attempt *next)
{
	memset(next, 0, sizeof(*next));
	next->exists = true;
	snprintf(next->attempt_id, sizeof(next->attempt_id), "%s", in->attempt_id);
	next->epoch = attempt_count + 1;
	snprintf(next->replica, sizeof(next->replica), "%s", in->replica ? in->replica : "");
	snprintf(next->gateway, sizeof(next->gateway), "%s", in->gateway ? in->gateway : "");
	snprintf(next->model_revision, sizeof(next->model_revision), "%s",
		 d->model_revision ? d->model_revision : "");
	next->revision_given = in->model_revision != NULL;
	next->state = LEDGER_ATTEMPT_LIVE;
	next->lease_ms_left = in->lease_ms;
	next->is_retry = d->is_retry;
}

/*
 * What the C decision makes of @p in on a request that does not exist yet
 * (the row lock_request would create: open, no attempts, nothing given),
 * into @p d. @return whether that is CREATED: the fast path's only case
 */
static bool decide_on_new_request(const struct ledger_attempt_request *in,
				  const struct ledger_policy *p, struct ledger_create_decision *d)
{
	static const struct ledger_attempt none;
	static const struct ledger_calls_summary no_calls;
	static const struct ledger_budget no_budget;
	struct ledger_request fresh;

	memset(&fresh, 0, sizeof(fresh));
	fresh.exists = true;
	fresh.status = LEDGER_REQUEST_OPEN;
	ledger_attempt_decide_create(in, &fresh, &none, &none, &no_calls, &no_budget, p, d);
	return d->outcome == LEDGER_CREATE_CREATED;
}

void store_attempt_fast_create_add(struct store_step *st, const struct ledger_call_key *key,
				   const struct ledger_attempt_request *in,
				   const struct ledger_policy *p, struct store_event *ev)
{
	struct ledger_create_decision d;
	struct ledger_attempt next;

	LEDGER_ASSERT(decide_on_new_request(in, p, &d));
	LEDGER_ASSERT(!d.reopen && !d.supersede_newest && !d.is_retry);
	store_attempt_fast_new(in, 0, &d, &next);
	store_rows_attempt_created(ev, &next, in, false);
	ledger_jsonw_object_end(&ev->w);
	const char *params[11] = {
		key->tenant,
		key->request_id,
		in->attempt_id,
		next.replica[0] != '\0' ? next.replica : NULL,
		next.model_revision[0] != '\0' ? next.model_revision : NULL,
		next.revision_given ? "true" : "false",
		store_step_int(st, next.lease_ms_left),
		next.gateway[0] != '\0' ? next.gateway : NULL,
		store_step_int(st, d.max_attempts),
		in->input_sha256,
		ev->detail.oom ? "{}" : ev->detail.data,
	};
	store_step_add(st, &create_fast, params);
}

enum ledger_err store_attempt_fast_create_read(const PGresult *res,
					       const struct ledger_attempt_request *in,
					       const struct ledger_policy *p,
					       struct ledger_attempt_result *out, bool *done)
{
	struct ledger_create_decision d;
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	*done = false;
	LEDGER_ASSERT(PQntuples(res) <= 1);
	if (PQntuples(res) == 0)
		return LEDGER_OK; /* the request exists: the locked path decides */
	rc = store_rows_parse_request(res, 0, &out->request, &out->client_error);
	if (rc != LEDGER_OK) {
		ledger_store_attempt_result_clear(out);
		return rc;
	}
	/*
	 * The statement created the request, with this attempt its first: under
	 * the lock, C decided CREATED on that very row, and the rows written
	 * are the ones its decision writes.
	 */
	LEDGER_ASSERT(decide_on_new_request(in, p, &d));
	LEDGER_ASSERT(out->request.status == LEDGER_REQUEST_OPEN &&
		      out->request.attempt_count == 1 && out->request.max_attempts == d.max_attempts);
	store_attempt_fast_new(in, 0, &d, &out->attempt);
	out->found = true;
	out->outcome.create = LEDGER_CREATE_CREATED;
	*done = true;
	return LEDGER_OK;
}

bool store_attempt_fast_create_offers(const struct ledger_attempt_request *in,
				      const struct ledger_policy *p)
{
	struct ledger_create_decision d;

	return decide_on_new_request(in, p, &d);
}

/* --- an attempt's own calls --- */

bool store_attempt_fast_offers(const struct ledger_attempt_call *call)
{
	switch (call->op) {
	case LEDGER_OP_DELIVER:
		return true;
	case LEDGER_OP_FINISH:
		/* A client error, rare, is the locked path's; so is an answer that ends nothing. */
		return call->client_error == NULL && (call->answer == NULL || call->completed);
	case LEDGER_OP_RENEW:
	case LEDGER_OP_CANCEL:
	case LEDGER_OP_CANCEL_ACK:
		break;
	}
	return false;
}

void store_attempt_fast_add(struct store_step *st, const struct ledger_call_key *key,
			    const char *attempt_id, const struct ledger_attempt_call *call)
{
	const struct ledger_answer *a = call->answer;
	const char *params[12] = {
		key->tenant,
		key->request_id,
		attempt_id,
		store_step_int(st, call->delivered_output_tokens),
		call->completed ? "true" : "false",
		call->reason,
	};
	const struct store_stmt *stmt = &finish_fast;

	LEDGER_ASSERT(store_attempt_fast_offers(call));
	if (call->op == LEDGER_OP_DELIVER) {
		stmt = &deliver_fast;
	} else if (a != NULL) {
		/* the answer's columns, as store_answers_add() writes them */
		stmt = &finish_answer_fast;
		params[6] = store_step_int(st, a->status);
		params[7] = a->content_type;
		params[8] = a->kept ? "true" : "false";
		params[9] = a->kept ? a->body_b64 : NULL;
		params[10] = store_step_int(st, a->bytes);
		params[11] = a->sha256;
	}
	store_step_add(st, stmt, params);
}

enum ledger_err store_attempt_fast_read(const PGresult *res,
					const struct ledger_attempt_call *call,
					struct ledger_attempt_result *out, bool *done)
{
	struct ledger_request before;
	struct ledger_attempt live;
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	*done = false;
	LEDGER_ASSERT(PQntuples(res) <= 1);
	if (PQntuples(res) == 0)
		return LEDGER_OK; /* the gate did not hold: the locked path decides */
	store_rows_parse_attempt(res, 0, &out->attempt);
	rc = store_rows_parse_request_at(res, 0, STORE_ATTEMPT_NCOLS, &out->request,
					 &out->client_error);
	if (rc != LEDGER_OK) {
		ledger_store_attempt_result_clear(out);
		return rc;
	}
	/*
	 * The statement wrote: the attempt was stored live within its lease
	 * and its request open, under the request's lock. C decides the same.
	 */
	before = out->request;
	before.status = LEDGER_REQUEST_OPEN;
	live = out->attempt;
	live.state = LEDGER_ATTEMPT_LIVE;
	live.lease_ms_left = live.lease_ms_left > 0 ? live.lease_ms_left : 1;
	if (call->op == LEDGER_OP_DELIVER) {
		LEDGER_ASSERT(ledger_attempt_decide_renew(&before, &live) == LEDGER_ATTEMPT_OP_DONE);
		LEDGER_ASSERT(out->request.first_delta_sent &&
			      out->attempt.state == LEDGER_ATTEMPT_LIVE);
	} else {
		LEDGER_ASSERT(ledger_attempt_decide_finish(&before, &live, call->completed) ==
			      LEDGER_ATTEMPT_OP_DONE);
		LEDGER_ASSERT(out->attempt.state == (call->completed ? LEDGER_ATTEMPT_FINISHED
								     : LEDGER_ATTEMPT_FAILED));
		out->attempt.lease_ms_left = 0;
	}
	out->found = true;
	out->outcome.op = LEDGER_ATTEMPT_OP_DONE;
	*done = true;
	return LEDGER_OK;
}

/* --- one operation's fast path, alone or in a batch --- */

void store_attempt_fast_op_add(struct store_step *st, const struct ledger_batch_op *op,
			       struct store_event *ev)
{
	if (op->attempt_create != NULL)
		store_attempt_fast_create_add(st, &op->key, op->attempt_create, op->policy, ev);
	else
		store_attempt_fast_add(st, &op->key, op->attempt_id, op->attempt_call);
}

enum ledger_err store_attempt_fast_op_read(struct ledger_batch_op *op, const PGresult *res)
{
	if (op->attempt_create != NULL)
		return store_attempt_fast_create_read(res, op->attempt_create, op->policy,
						      op->attempt_out, &op->done);
	return store_attempt_fast_read(res, op->attempt_call, op->attempt_out, &op->done);
}

enum ledger_err store_attempt_fast_run(struct ledger_store_conn *conn, struct ledger_batch_op *op,
				       bool *done)
{
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	memset(&ev, 0, sizeof(ev));
	op->done = false;
	store_step_begin(&st, conn);
	store_attempt_fast_op_add(&st, op, &ev);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK)
		rc = store_attempt_fast_op_read(op, st.res[0]);
	*done = rc == LEDGER_OK && op->done;
	store_step_clear(&st);
	store_event_free(&ev);
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_attempt_fast_statements[] = {
	&create_fast,
	&deliver_fast,
	&finish_fast,
	&finish_answer_fast,
	NULL,
};
