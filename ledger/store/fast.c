/*
 * ledger/store/fast.c: the one-statement fast paths of the tool-call
 * operations: the claim of a key nobody claimed (or the replay of a
 * settled one from the statement's snapshot), the current holder's
 * completion and its renewal. Each statement's WHERE clause is exactly the
 * condition under which ledger/core/decide.c would choose that write; when
 * it matches nothing, the caller runs the general path (ledger/store/calls.c),
 * which locks, reads, and lets the C decision choose. That the two agree
 * is tested with the SQL itself (tests/integration/test_fast_paths.py).
 *
 * Lock order is always the request's row, then the call's: the call is
 * written only from rows joined to the locked request, and the clock is
 * read in a projection above that lock.
 */
#include "ledger/store/fast.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"
#include "ledger/core/decide.h"
#include "ledger/store/attempt_fast.h"
#include "ledger/store/rows.h"
#include "ledger/store/statements.h"

static atomic_bool fast_paths_off;

void ledger_store_set_fast_paths(bool on)
{
	atomic_store(&fast_paths_off, !on);
}

bool ledger_store_fast_paths(void)
{
	return !atomic_load(&fast_paths_off);
}

/* The statements are laid out as SQL, not as C. */
/* clang-format off */
/*
 * The claim of a key nobody has claimed, in one statement: $4 tool,
 * $5 args_sha256, $6 args, $7 tool_dedupes, $8 claim_id, $9 owner,
 * $10 lease_ms, $11 the event's detail. Inserts only when the request has
 * no attempts and the key has neither a row nor a tombstone; otherwise
 * returns the call as the statement's snapshot saw it. A settled call is
 * final, so that snapshot is enough to replay it: the gate then keeps the
 * statement from locking anything (a replay writes nothing, not even a
 * row lock, and so costs no commit flush).
 */
static const struct store_stmt claim_fast = {
	"claim_fast",
	"WITH settled AS MATERIALIZED ("
	"  SELECT 1 FROM tool_calls WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3"
	"  AND state IN ('succeeded', 'failed')"
	"  UNION ALL SELECT 1 FROM tool_call_tombstones"
	"  WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3"
	"), created AS ("
	"  INSERT INTO requests (tenant, request_id)"
	"  SELECT $1, $2 WHERE NOT EXISTS (SELECT 1 FROM settled)"
	"  ON CONFLICT (tenant, request_id) DO NOTHING"
	"  RETURNING attempt_count"
	"), existing AS MATERIALIZED ("
	"  SELECT attempt_count FROM requests WHERE tenant = $1 AND request_id = $2 FOR UPDATE"
	"), req AS MATERIALIZED ("
	"  SELECT attempt_count, clock_timestamp() AS now"
	"  FROM (SELECT attempt_count FROM created UNION ALL SELECT attempt_count FROM existing) r"
	"), ins AS ("
	"  INSERT INTO tool_calls (tenant, request_id, tool_call_id, tool, args_sha256, args,"
	"    tool_dedupes, state, fencing_token, claim_id, owner, lease_until, created_at,"
	"    claimed_seq, claimed_detail)"
	"  SELECT $1, $2, $3, $4, $5, $6, $7, 'in_progress', 1, $8, $9, " STORE_LEASE_FROM("req.now", "$10")
	"  , req.now, " STORE_NEXT_SEQ ", $11::jsonb FROM req"
	"  WHERE NOT EXISTS (SELECT 1 FROM settled) AND req.attempt_count = 0"
	"  ON CONFLICT (tenant, request_id, tool_call_id) DO NOTHING"
	"  RETURNING created_at"
	") SELECT (SELECT count(*) FROM ins)::int,"
	"  (SELECT attempt_count FROM requests WHERE tenant = $1 AND request_id = $2), "
	STORE_CALL_COLUMNS STORE_CALL_FROM,
	11,
};

/*
 * The current holder's completion ($4 token, $5 outcome, $6 retryable,
 * $7 result, $8 event detail; a result not kept: $7 NULL, $9 its length,
 * $10 its SHA-256): within its lease, a final outcome is stored and a
 * retryable failure releases the key.
 */
static const struct store_stmt complete_fast = {
	"complete_fast",
	"WITH req AS MATERIALIZED ("
	"  SELECT attempt_count FROM requests WHERE tenant = $1 AND request_id = $2 FOR UPDATE"
	"), clk AS MATERIALIZED (SELECT clock_timestamp() AS now FROM req"
	"), upd AS ("
	"  UPDATE tool_calls c SET"
	"    state = CASE WHEN $6::boolean THEN 'released' ELSE $5 END,"
	"    outcome = CASE WHEN $6::boolean THEN NULL ELSE $5 END,"
	"    result = CASE WHEN $6::boolean THEN NULL ELSE $7 END,"
	"    result_bytes = CASE WHEN $6::boolean THEN NULL ELSE $9::bigint END,"
	"    result_sha256 = CASE WHEN $6::boolean THEN NULL ELSE $10 END,"
	"    completed_token = CASE WHEN $6::boolean THEN NULL ELSE $4::bigint END,"
	"    completed_by = CASE WHEN $6::boolean THEN NULL ELSE 'holder' END,"
	"    completed_at = CASE WHEN $6::boolean THEN NULL ELSE clk.now END,"
	"    completed_seq = CASE WHEN $6::boolean THEN NULL ELSE " STORE_NEXT_SEQ " END"
	"  FROM clk"
	"  WHERE c.tenant = $1 AND c.request_id = $2 AND c.tool_call_id = $3"
	"    AND c.state = 'in_progress' AND c.fencing_token = $4::bigint AND c.lease_until > clk.now"
	"  RETURNING c.attempt_id, " STORE_TS("c.completed_at") ", c.tool, c.args_sha256,"
	"    c.tool_dedupes"
	"), ev AS ("
	"  INSERT INTO event_log (tenant, request_id, at, type, attempt_id, tool_call_id, detail)"
	"  SELECT $1, $2, clk.now, 'released', upd.attempt_id, $3, $8::jsonb FROM upd, clk"
	"  WHERE $6::boolean"
	") SELECT upd.*, req.attempt_count FROM upd, req",
	10,
};

/* The holder's renewal ($4 token, $5 lease_ms), not under an attempt. */
static const struct store_stmt renew_fast = {
	"renew_fast",
	"WITH req AS MATERIALIZED ("
	"  SELECT 1 FROM requests WHERE tenant = $1 AND request_id = $2 FOR UPDATE"
	"), clk AS MATERIALIZED (SELECT clock_timestamp() AS now FROM req"
	"), upd AS ("
	"  UPDATE tool_calls c SET lease_until = " STORE_LEASE_FROM("clk.now", "$5") ", renewed_at = clk.now"
	"  FROM clk"
	"  WHERE c.tenant = $1 AND c.request_id = $2 AND c.tool_call_id = $3"
	"    AND c.state = 'in_progress' AND c.fencing_token = $4::bigint"
	"    AND c.lease_until > clk.now AND c.attempt_id IS NULL"
	"  RETURNING 1"
	") SELECT count(*)::int FROM upd",
	5,
};
/* clang-format on */

/*
 * What a first claim's event keeps in the row (claimed_detail, see
 * sql/004_history_in_rows.sql): the part of store_event_claimed()'s detail
 * the row's other columns cannot give back. Its text, or "{}".
 */
const char *store_fast_claim_detail(struct store_event *ev, const struct ledger_claim *c)
{
	store_event_start(ev, "claimed", NULL);
	store_event_int(ev, "lease_ms", c->lease_ms);
	store_event_str(ev, "owner", c->owner);
	ledger_jsonw_object_end(&ev->w);
	return ev->detail.oom ? "{}" : ev->detail.data;
}

/*
 * Queues the one-statement claim of a key nobody claimed into @p st; its
 * event's detail lives in @p ev until the step ran.
 */
static void claim_add(struct store_step *st, const struct ledger_call_key *key,
		      const struct ledger_claim_request *req, struct store_event *ev)
{
	const struct ledger_claim *c = &req->claim;
	const char *detail = store_fast_claim_detail(ev, c);
	const char *params[11] = {
		key->tenant,
		key->request_id,
		key->tool_call_id,
		c->tool,
		c->args_sha256,
		req->args,
		c->tool_dedupes ? "true" : "false",
		c->claim_id,
		c->owner,
		store_step_int(st, c->lease_ms),
		detail,
	};
	store_step_add(st, &claim_fast, params);
}

/*
 * Reads what claim_fast answered: the key claimed now, or a settled call
 * (or tombstone) to answer from the statement's snapshot.
 * @return LEDGER_OK with *done false when the general path must decide
 */
enum ledger_err store_fast_claim_read(const PGresult *res, int row, const struct ledger_claim *c,
				      struct ledger_call_result *out, bool *done)
{
	enum ledger_err rc;

	*done = false;
	LEDGER_ASSERT(row < PQntuples(res));
	rc = store_rows_parse_call(res, row, 2, &out->call);
	if (rc != LEDGER_OK)
		return rc;
	if (store_step_get_int(res, row, 0) == 1) {
		/*
		 * The statement inserted: the key it saw before had no row and
		 * no tombstone, and its request no attempt. Under the lock, C
		 * would have decided the same.
		 */
		LEDGER_ASSERT(ledger_decide_claim(c, &out->call,
						  store_step_get_int(res, row, 1) > 0,
						  LEDGER_STANDING_NOT_GIVEN,
						  &out->mismatch) == LEDGER_CLAIM_NEW);
		out->outcome.claim = LEDGER_CLAIM_NEW;
		store_rows_set_claimed(&out->call, c, 1);
		*done = true;
		return LEDGER_OK;
	}
	/*
	 * A settled call and a tombstone never change (but for retention), so
	 * the snapshot is as good as a locked read for answering them. What
	 * else the snapshot shows may be stale: the general path decides it.
	 */
	if (out->call.state == LEDGER_CALL_SUCCEEDED || out->call.state == LEDGER_CALL_FAILED ||
	    out->call.state == LEDGER_CALL_TOMBSTONE) {
		bool has_attempts = store_step_get_int(res, row, 1) > 0;
		enum ledger_claim_outcome o = ledger_decide_claim(
			c, &out->call, has_attempts, LEDGER_STANDING_NOT_GIVEN, &out->mismatch);
		if (o == LEDGER_CLAIM_REPLAY || o == LEDGER_CLAIM_RESULT_NOT_KEPT ||
		    o == LEDGER_CLAIM_RESULT_EXPIRED) {
			out->outcome.claim = o;
			out->no_attempts = !has_attempts;
			*done = true;
		}
	}
	return LEDGER_OK;
}

/*
 * The history's detail of a completion by a fast path, for the row of
 * event_log a retryable failure writes; its text, or "{}". A final outcome's
 * event is read from the call's row (sql/004_history_in_rows.sql): it has
 * none to build.
 */
const char *store_fast_complete_detail(struct store_event *ev, const struct ledger_completion *c)
{
	store_event_start(ev, NULL, NULL);
	if (!c->retryable)
		return "{}";
	store_event_completion(ev, c);
	ledger_jsonw_object_end(&ev->w);
	return ev->detail.oom ? "{}" : ev->detail.data;
}

static void complete_add(struct store_step *st, const struct ledger_call_key *key,
			 const struct ledger_completion *c, struct store_event *ev)
{
	const char *detail = store_fast_complete_detail(ev, c);
	bool digest = !c->retryable && c->result_not_kept;
	const char *params[10] = {
		key->tenant,
		key->request_id,
		key->tool_call_id,
		store_step_int(st, c->fencing_token),
		c->succeeded ? "succeeded" : "failed",
		c->retryable ? "true" : "false",
		c->retryable || c->result_not_kept ? NULL : c->result,
		detail,
		digest ? store_step_int(st, c->result_digest.bytes) : NULL,
		digest ? c->result_digest.sha256 : NULL,
	};
	store_step_add(st, &complete_fast, params);
}

/* @return LEDGER_OK with *done false when the holder's fast path did not apply */
/*
 * Reads row @p row of what complete_fast (or complete_many) answered, when
 * the holder's fast path applied.
 */
enum ledger_err store_fast_complete_read(const PGresult *res, int row,
					 const struct ledger_completion *c,
					 struct ledger_call_result *out)
{
	/*
	 * The statement updated: the call was in progress under this token
	 * within its lease. Under the lock, C would have decided the same.
	 */
	ledger_call_clear(&out->call);
	out->call.state = LEDGER_CALL_IN_PROGRESS;
	out->call.fencing_token = c->fencing_token;
	LEDGER_ASSERT(ledger_decide_complete(c, &out->call) ==
		      (c->retryable ? LEDGER_COMPLETE_RELEASED : LEDGER_COMPLETE_STORED));
	store_step_get_text(res, row, 0, out->call.attempt_id, sizeof(out->call.attempt_id));
	if (c->retryable) {
		out->outcome.complete = LEDGER_COMPLETE_RELEASED;
		out->call.state = LEDGER_CALL_RELEASED;
		return LEDGER_OK;
	}
	out->outcome.complete = LEDGER_COMPLETE_STORED;
	store_step_get_text(res, row, 2, out->call.tool, sizeof(out->call.tool));
	store_step_get_text(res, row, 3, out->call.args_sha256, sizeof(out->call.args_sha256));
	out->call.tool_dedupes = store_step_get_bool(res, row, 4);
	out->no_attempts = store_step_get_int(res, row, 5) == 0;
	return store_rows_set_completed(&out->call, c, res, row, 1, LEDGER_COMPLETED_HOLDER);
}

/* @return true when renew_fast renewed the holder's lease (and fills @p out). */
static bool renew_read(const PGresult *res, int64_t fencing_token, int64_t lease_ms,
		       struct ledger_call_result *out)
{
	int64_t updated = store_step_get_int(res, 0, 0);

	LEDGER_ASSERT(PQntuples(res) == 1 && updated <= 1);
	if (updated != 1)
		return false;
	out->call.state = LEDGER_CALL_IN_PROGRESS;
	out->call.fencing_token = fencing_token;
	out->call.lease_ms_left = lease_ms;
	/* The holder's call, in progress within its lease, outside attempts: C agrees. */
	out->outcome.renew =
		ledger_decide_renew(fencing_token, &out->call, LEDGER_STANDING_NOT_GIVEN);
	LEDGER_ASSERT(out->outcome.renew == LEDGER_RENEW_RENEWED);
	return true;
}

static void renew_add(struct store_step *st, const struct ledger_call_key *key,
		      int64_t fencing_token, int64_t lease_ms)
{
	const char *params[5] = {key->tenant, key->request_id, key->tool_call_id,
				 store_step_int(st, fencing_token), store_step_int(st, lease_ms)};

	store_step_add(st, &renew_fast, params);
}

/* --- one operation's fast path, alone or in a batch --- */

void store_fast_add(struct store_step *st, const struct ledger_batch_op *op, struct store_event *ev)
{
	switch (op->kind) {
	case LEDGER_BATCH_CLAIM:
		claim_add(st, &op->key, op->claim, ev);
		return;
	case LEDGER_BATCH_COMPLETE:
		complete_add(st, &op->key, op->completion, ev);
		return;
	case LEDGER_BATCH_RENEW:
		renew_add(st, &op->key, op->fencing_token, op->lease_ms);
		return;
	case LEDGER_BATCH_ATTEMPT:
		store_attempt_fast_op_add(st, op, ev);
		return;
	}
	abort();
}

enum ledger_err store_fast_read(struct ledger_batch_op *op, const PGresult *res)
{
	switch (op->kind) {
	case LEDGER_BATCH_CLAIM:
		LEDGER_ASSERT(PQntuples(res) == 1); /* one row per key, always */
		return store_fast_claim_read(res, 0, &op->claim->claim, &op->out, &op->done);
	case LEDGER_BATCH_COMPLETE:
		LEDGER_ASSERT(PQntuples(res) <= 1);
		op->done = PQntuples(res) == 1;
		return op->done ? store_fast_complete_read(res, 0, op->completion, &op->out)
				: LEDGER_OK;
	case LEDGER_BATCH_RENEW:
		op->done = renew_read(res, op->fencing_token, op->lease_ms, &op->out);
		return LEDGER_OK;
	case LEDGER_BATCH_ATTEMPT:
		return store_attempt_fast_op_read(op, res);
	}
	abort();
}

enum ledger_err store_fast_run(struct ledger_store_conn *conn, struct ledger_batch_op *op,
			       struct ledger_call_result *out, bool *done)
{
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	memset(&ev, 0, sizeof(ev));
	memset(&op->out, 0, sizeof(op->out));
	op->done = false;
	store_step_begin(&st, conn);
	store_fast_add(&st, op, &ev);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK)
		rc = store_fast_read(op, st.res[0]);
	*done = rc == LEDGER_OK && op->done;
	if (*done)
		*out = op->out; /* what it owns is the caller's now */
	else
		ledger_call_clear(&op->out.call);
	store_step_clear(&st);
	store_event_free(&ev);
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_fast_statements[] = {
	&claim_fast,
	&complete_fast,
	&renew_fast,
	NULL,
};
