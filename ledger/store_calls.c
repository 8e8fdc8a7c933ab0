/*
 * ledger/store_calls.c: the tool-call operations on PostgreSQL. Each has a
 * one-statement fast path for its common case (a new key, the holder's own
 * completion or renewal) whose WHERE clause is exactly the condition under
 * which ledger/decide.c would choose that write; when it matches nothing,
 * the general path locks the request, reads the call, decides in C and
 * writes the decision with its event in the same transaction.
 *
 * Lock order is always the request's row, then the call's: in the fast
 * statements the call is written only from rows joined to the locked
 * request, and the clock is read in a projection above that lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/buf.h"
#include "ledger/jsonw.h"
#include "ledger/log.h"
#include "ledger/store.h"
#include "ledger/render.h"
#include "ledger/store_int.h"

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
	"    tool_dedupes, state, fencing_token, claim_id, owner, lease_until, created_at)"
	"  SELECT $1, $2, $3, $4, $5, $6, $7, 'in_progress', 1, $8, $9, " STORE_LEASE_FROM("req.now", "$10")
	"  , req.now FROM req"
	"  WHERE NOT EXISTS (SELECT 1 FROM settled) AND req.attempt_count = 0"
	"  ON CONFLICT (tenant, request_id, tool_call_id) DO NOTHING"
	"  RETURNING created_at"
	"), ev AS ("
	"  INSERT INTO events (tenant, request_id, at, type, tool_call_id, detail)"
	"  SELECT $1, $2, created_at, 'claimed', $3, $11::jsonb FROM ins"
	") SELECT (SELECT count(*) FROM ins)::int,"
	"  (SELECT attempt_count FROM requests WHERE tenant = $1 AND request_id = $2), "
	STORE_CALL_COLUMNS STORE_CALL_FROM,
	11,
};

/*
 * The current holder's completion ($4 token, $5 outcome, $6 retryable,
 * $7 result, $8 event detail): within its lease, a final outcome is stored
 * and a retryable failure releases the key.
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
	"    completed_token = CASE WHEN $6::boolean THEN NULL ELSE $4::bigint END,"
	"    completed_by = CASE WHEN $6::boolean THEN NULL ELSE 'holder' END,"
	"    completed_at = CASE WHEN $6::boolean THEN NULL ELSE clk.now END"
	"  FROM clk"
	"  WHERE c.tenant = $1 AND c.request_id = $2 AND c.tool_call_id = $3"
	"    AND c.state = 'in_progress' AND c.fencing_token = $4::bigint AND c.lease_until > clk.now"
	"  RETURNING c.attempt_id, " STORE_TS("c.completed_at") ", c.tool, c.args_sha256,"
	"    c.tool_dedupes"
	"), ev AS ("
	"  INSERT INTO events (tenant, request_id, at, type, attempt_id, tool_call_id, detail)"
	"  SELECT $1, $2, clk.now, CASE WHEN $6::boolean THEN 'released' ELSE 'completed' END,"
	"    upd.attempt_id, $3, $8::jsonb FROM upd, clk"
	") SELECT upd.*, req.attempt_count FROM upd, req",
	8,
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

/*
 * The statements of a batch: each takes arrays, one element per call, and
 * does for every call what its one-call statement above does, in one
 * execution (a statement's fixed cost, paid once for the whole batch).
 * Rows come back one per element, in the arrays' order.
 *
 * A batch's statements lock and create requests in phases (the requests
 * its claims create, then those they find; then those of its completions),
 * so two batches sharing requests could wait for each other in a cycle.
 * batch_lock prevents it: every batch first takes a transaction lock per
 * request ($1 tenants, $2 request ids), existing or not, all in one order.
 * Anything else touches one request at a time and cannot close a cycle.
 */
static const struct store_stmt batch_lock = {
	"batch_lock",
	"SELECT count(pg_advisory_xact_lock(h))::int FROM ("
	"  SELECT DISTINCT hashtextextended('ledgerd.request.' || t || '/' || r, 0) AS h"
	"  FROM unnest($1::text[], $2::text[]) AS k(t, r) ORDER BY h"
	") l",
	2,
};

/*
 * claim_fast for many keys: $1 tenants, $2 request ids, $3 tool call ids,
 * $4 tools, $5 args_sha256, $6 args, $7 tool_dedupes, $8 claim ids,
 * $9 owners, $10 lease_ms, $11 event details. New requests are created
 * in key order. Answers claim_fast's columns for each key.
 */
static const struct store_stmt claim_many = {
	"claim_many",
	"WITH k AS MATERIALIZED ("
	"  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],"
	"    $6::text[], $7::boolean[], $8::text[], $9::text[], $10::bigint[], $11::text[])"
	"    WITH ORDINALITY AS k(tenant, rid, cid, tool, sha, args, dedupes, claim_id, owner,"
	"      lease, detail, ord)"
	"), settled AS MATERIALIZED ("
	"  SELECT k.ord FROM k"
	"  WHERE EXISTS (SELECT 1 FROM tool_calls c WHERE c.tenant = k.tenant"
	"      AND c.request_id = k.rid AND c.tool_call_id = k.cid"
	"      AND c.state IN ('succeeded', 'failed'))"
	"    OR EXISTS (SELECT 1 FROM tool_call_tombstones t WHERE t.tenant = k.tenant"
	"      AND t.request_id = k.rid AND t.tool_call_id = k.cid)"
	"), created AS ("
	"  INSERT INTO requests (tenant, request_id)"
	"  SELECT DISTINCT k.tenant, k.rid FROM k WHERE k.ord NOT IN (SELECT ord FROM settled)"
	"  ORDER BY 1, 2"
	"  ON CONFLICT (tenant, request_id) DO NOTHING"
	"  RETURNING tenant, request_id, attempt_count"
	"), existing AS MATERIALIZED ("
	"  SELECT r.tenant, r.request_id, r.attempt_count FROM requests r"
	"  WHERE (r.tenant, r.request_id) IN (SELECT tenant, rid FROM k)"
	"  ORDER BY r.tenant, r.request_id FOR UPDATE"
	"), req AS MATERIALIZED ("
	"  SELECT tenant, request_id, attempt_count, clock_timestamp() AS now"
	"  FROM (SELECT * FROM created UNION ALL SELECT * FROM existing) r"
	"), ins AS ("
	"  INSERT INTO tool_calls (tenant, request_id, tool_call_id, tool, args_sha256, args,"
	"    tool_dedupes, state, fencing_token, claim_id, owner, lease_until, created_at)"
	"  SELECT k.tenant, k.rid, k.cid, k.tool, k.sha, k.args, k.dedupes, 'in_progress', 1,"
	"    k.claim_id, k.owner, " STORE_LEASE_FROM("req.now", "k.lease") ", req.now"
	"  FROM k JOIN req ON req.tenant = k.tenant AND req.request_id = k.rid"
	"  WHERE k.ord NOT IN (SELECT ord FROM settled) AND req.attempt_count = 0"
	"  ORDER BY k.ord"
	"  ON CONFLICT (tenant, request_id, tool_call_id) DO NOTHING"
	"  RETURNING tenant, request_id, tool_call_id, created_at"
	"), ev AS ("
	"  INSERT INTO events (tenant, request_id, at, type, tool_call_id, detail)"
	"  SELECT ins.tenant, ins.request_id, ins.created_at, 'claimed', ins.tool_call_id,"
	"    k.detail::jsonb"
	"  FROM ins JOIN k ON k.tenant = ins.tenant AND k.rid = ins.request_id"
	"    AND k.cid = ins.tool_call_id"
	") SELECT (SELECT count(*) FROM ins WHERE ins.tenant = k.tenant"
	"    AND ins.request_id = k.rid AND ins.tool_call_id = k.cid)::int,"
	"  (SELECT attempt_count FROM requests r WHERE r.tenant = k.tenant"
	"    AND r.request_id = k.rid), "
	STORE_CALL_COLUMNS
	" FROM k CROSS JOIN (SELECT clock_timestamp() AS t) now_"
	" LEFT JOIN tool_calls c"
	"   ON c.tenant = k.tenant AND c.request_id = k.rid AND c.tool_call_id = k.cid"
	" LEFT JOIN tool_call_tombstones t"
	"   ON c.tenant IS NULL AND t.tenant = k.tenant AND t.request_id = k.rid"
	"  AND t.tool_call_id = k.cid AND t.expires_at > now_.t"
	" ORDER BY k.ord",
	11,
};

/*
 * complete_fast for many keys: $1 tenants, $2 request ids, $3 tool call
 * ids, $4 tokens, $5 outcomes, $6 retryable, $7 results, $8 event details.
 * Answers complete_fast's columns for each key (NULLs where the holder's
 * fast path did not apply) and whether it applied.
 */
static const struct store_stmt complete_many = {
	"complete_many",
	"WITH k AS MATERIALIZED ("
	"  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[],"
	"    $6::boolean[], $7::text[], $8::text[])"
	"    WITH ORDINALITY AS k(tenant, rid, cid, token, outcome, retryable, result, detail, ord)"
	"), req AS MATERIALIZED ("
	"  SELECT r.tenant, r.request_id, r.attempt_count FROM requests r"
	"  WHERE (r.tenant, r.request_id) IN (SELECT tenant, rid FROM k)"
	"  ORDER BY r.tenant, r.request_id FOR UPDATE"
	"), clk AS MATERIALIZED (SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM req) l"
	"), upd AS ("
	"  UPDATE tool_calls c SET"
	"    state = CASE WHEN k.retryable THEN 'released' ELSE k.outcome END,"
	"    outcome = CASE WHEN k.retryable THEN NULL ELSE k.outcome END,"
	"    result = CASE WHEN k.retryable THEN NULL ELSE k.result END,"
	"    completed_token = CASE WHEN k.retryable THEN NULL ELSE k.token END,"
	"    completed_by = CASE WHEN k.retryable THEN NULL ELSE 'holder' END,"
	"    completed_at = CASE WHEN k.retryable THEN NULL ELSE clk.now END"
	"  FROM k, clk"
	"  WHERE c.tenant = k.tenant AND c.request_id = k.rid AND c.tool_call_id = k.cid"
	"    AND c.state = 'in_progress' AND c.fencing_token = k.token AND c.lease_until > clk.now"
	"  RETURNING c.tenant, c.request_id, c.tool_call_id, c.attempt_id,"
	"    " STORE_TS("c.completed_at") " AS completed_at, c.tool, c.args_sha256, c.tool_dedupes"
	"), ev AS ("
	"  INSERT INTO events (tenant, request_id, at, type, attempt_id, tool_call_id, detail)"
	"  SELECT upd.tenant, upd.request_id, clk.now,"
	"    CASE WHEN k.retryable THEN 'released' ELSE 'completed' END,"
	"    upd.attempt_id, upd.tool_call_id, k.detail::jsonb"
	"  FROM upd JOIN k ON k.tenant = upd.tenant AND k.rid = upd.request_id"
	"    AND k.cid = upd.tool_call_id CROSS JOIN clk"
	") SELECT upd.attempt_id, upd.completed_at, upd.tool, upd.args_sha256, upd.tool_dedupes,"
	"  req.attempt_count, upd.tool_call_id IS NOT NULL"
	" FROM k LEFT JOIN upd"
	"   ON upd.tenant = k.tenant AND upd.request_id = k.rid AND upd.tool_call_id = k.cid"
	" LEFT JOIN req ON req.tenant = k.tenant AND req.request_id = k.rid"
	" ORDER BY k.ord",
	8,
};

/* The general path's writes; the lock is held, so the clock is read now. */
static const struct store_stmt call_insert = {
	"call_insert",
	"INSERT INTO tool_calls (tenant, request_id, tool_call_id, tool, args_sha256, args,"
	"  tool_dedupes, state, fencing_token, claim_id, attempt_id, owner, lease_until, created_at)"
	" VALUES ($1, $2, $3, $4, $5, $6, $7, 'in_progress', 1, $8, $9, $10, "
	STORE_LEASE_FROM("clock_timestamp()", "$11") ", clock_timestamp())",
	11,
};

static const struct store_stmt call_reclaim = {
	"call_reclaim",
	"UPDATE tool_calls SET state = 'in_progress', fencing_token = fencing_token + 1,"
	"  claim_id = $5, attempt_id = $6, owner = $7, args = coalesce(args, $8),"
	"  lease_until = " STORE_LEASE_FROM("clock_timestamp()", "$9") ", renewed_at = NULL"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4",
	9,
};

static const struct store_stmt call_renew = {
	"call_renew",
	"UPDATE tool_calls SET lease_until = " STORE_LEASE_FROM("clock_timestamp()", "$5")
	", renewed_at = clock_timestamp()"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4",
	5,
};

/* $4 token read, $5 outcome, $6 result, $7 completed_token, $8 by, $9 new token */
static const struct store_stmt call_settle = {
	"call_settle",
	"UPDATE tool_calls SET state = $5, outcome = $5, result = $6, completed_token = $7,"
	"  completed_by = $8, completed_at = clock_timestamp(), fencing_token = $9"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4"
	" RETURNING " STORE_TS("completed_at"),
	9,
};

/* $4 token read, $5 new token */
static const struct store_stmt call_release = {
	"call_release",
	"UPDATE tool_calls SET state = 'released', fencing_token = $5"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4",
	5,
};

/* clang-format on */

/* Clears a result between tries, keeping nothing of the last one. */
static void reset_result(void *out)
{
	struct ledger_call_result *r = out;

	ledger_call_clear(&r->call);
	memset(r, 0, sizeof(*r));
}

/* --- claim --- */

static void claimed_detail(struct store_event *ev, const struct ledger_claim *c, int64_t token,
			   const char *from)
{
	store_event_int(ev, "fencing_token", token);
	store_event_int(ev, "lease_ms", c->lease_ms);
	store_event_str(ev, "tool", c->tool);
	store_event_str(ev, "args_sha256", c->args_sha256);
	store_event_str(ev, "owner", c->owner);
	if (c->tool_dedupes) {
		ledger_jsonw_key(&ev->w, "tool_dedupes");
		ledger_jsonw_bool(&ev->w, true);
	}
	store_event_str(ev, "previous_state", from);
}

/* The new holder's view of a call it just claimed. */
static void set_claimed(struct ledger_call *call, const struct ledger_claim *c, int64_t token)
{
	ledger_call_clear(call);
	call->state = LEDGER_CALL_IN_PROGRESS;
	call->fencing_token = token;
	call->lease_ms_left = c->lease_ms;
}

/*
 * One statement for a key nobody claimed; a replay from its snapshot.
 * @return LEDGER_OK with *done false when the general path must decide.
 */
/*
 * Queues the one-statement claim of a key nobody claimed into @p st; its
 * event's detail lives in @p ev until the step ran.
 */
/* The history's detail of a first claim by a fast path; its text, or "{}". */
static const char *claim_fast_event(struct store_event *ev, const struct ledger_claim *c)
{
	store_event_start(ev, "claimed", NULL);
	claimed_detail(ev, c, 1, NULL);
	ledger_jsonw_object_end(&ev->w);
	return ev->detail.oom ? "{}" : ev->detail.data;
}

static void claim_fast_add(struct store_step *st, const struct ledger_call_key *key,
			   const struct ledger_claim_request *req, struct store_event *ev)
{
	const struct ledger_claim *c = &req->claim;
	const char *detail = claim_fast_event(ev, c);
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
static enum ledger_err claim_fast_read(const PGresult *res, int row, const struct ledger_claim *c,
				       struct ledger_call_result *out, bool *done)
{
	enum ledger_err rc;

	*done = false;
	if (row >= PQntuples(res))
		return LEDGER_ERR_INTERNAL;
	if (store_int(res, row, 0) == 1) {
		out->outcome.claim = LEDGER_CLAIM_NEW;
		set_claimed(&out->call, c, 1);
		*done = true;
		return LEDGER_OK;
	}
	rc = store_parse_call(res, row, 2, &out->call);
	if (rc != LEDGER_OK)
		return rc;
	/*
	 * A settled call and a tombstone never change (but for retention), so
	 * the snapshot is as good as a locked read for answering them. What
	 * else the snapshot shows may be stale: the general path decides it.
	 */
	if (out->call.state == LEDGER_CALL_SUCCEEDED || out->call.state == LEDGER_CALL_FAILED ||
	    out->call.state == LEDGER_CALL_TOMBSTONE) {
		bool has_attempts = store_int(res, row, 1) > 0;
		enum ledger_claim_outcome o = ledger_decide_claim(
			c, &out->call, has_attempts, LEDGER_STANDING_NOT_GIVEN, &out->mismatch);
		if (o == LEDGER_CLAIM_REPLAY || o == LEDGER_CLAIM_RESULT_EXPIRED) {
			out->outcome.claim = o;
			out->no_attempts = !has_attempts;
			*done = true;
		}
	}
	return LEDGER_OK;
}

static enum ledger_err claim_fast_path(struct ledger_store_conn *conn,
				       const struct ledger_call_key *key,
				       const struct ledger_claim_request *req,
				       struct ledger_call_result *out, bool *done)
{
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	*done = false;
	store_step_begin(&st, conn);
	claim_fast_add(&st, key, req, &ev);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK)
		rc = PQntuples(st.res[0]) == 1
			     ? claim_fast_read(st.res[0], 0, &req->claim, out, done)
			     : LEDGER_ERR_INTERNAL;
	store_step_clear(&st);
	store_event_free(&ev);
	return rc;
}

/*
 * A rerun emitted another call under an existing ordinal: the sequence has
 * shifted, and the next ordinal could slip a repeated action in. The
 * attempt is revoked and the request fails with tool_call_divergence.
 */
static void diverge(struct store_step *st, const struct ledger_call_key *key,
		    struct store_locked *lk, struct store_event *revoked,
		    struct store_event *failed)
{
	struct ledger_request after = lk->request;
	struct ledger_buf client_error = LEDGER_BUF_INIT;

	after.status = LEDGER_REQUEST_FAILED;
	ledger_render_client_error(&client_error, "tool_call_divergence", key->request_id, &after);
	store_attempt_set(st, key->tenant, key->request_id, lk->named.attempt_id,
			  LEDGER_ATTEMPT_CANCEL_REQUESTED, 0, 0, NULL);
	store_event_start(revoked, "attempt_revoked", lk->named.attempt_id);
	store_event_str(revoked, "state",
			ledger_attempt_state_name(LEDGER_ATTEMPT_CANCEL_REQUESTED));
	store_event_str(revoked, "cause", "tool_call_divergence");
	store_event_add(st, key, revoked);
	/* The step owns the text until it runs: keep it in the event's buffer. */
	store_event_start(failed, "request_status", lk->named.attempt_id);
	store_event_str(failed, "status", ledger_request_status_name(after.status));
	store_event_str(failed, "client_error", "tool_call_divergence");
	store_event_add(st, key, failed);
	free(lk->client_error);
	lk->client_error = ledger_buf_steal(&client_error, NULL);
	store_request_set(st, key->tenant, key->request_id, &after, lk->client_error);
}

static enum ledger_err claim_locked(struct ledger_store_conn *conn,
				    const struct ledger_call_key *key,
				    const struct ledger_claim_request *req,
				    struct ledger_call_result *out)
{
	const struct ledger_claim *c = &req->claim;
	const struct store_lookup look = {.attempt_id = c->attempt_id,
					  .tool_call_id = key->tool_call_id};
	enum ledger_standing attempt = LEDGER_STANDING_NOT_GIVEN;
	enum ledger_claim_outcome o;
	struct store_locked lk;
	struct store_step st;
	struct store_event ev, revoked, failed;
	char lease[24], token[24];
	const char *from = NULL;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	memset(&revoked, 0, sizeof(revoked));
	memset(&failed, 0, sizeof(failed));
	store_step_begin(&st, conn);
	rc = store_lock_and_read(conn, key->tenant, key->request_id, true, &look, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	if (c->attempt_id != NULL)
		attempt = ledger_attempt_standing(&lk.request, &lk.named);
	o = ledger_decide_claim(c, &out->call, lk.request.attempt_count > 0, attempt,
				&out->mismatch);
	out->outcome.claim = o;
	out->no_attempts = lk.request.attempt_count == 0;
	store_fmt_int(lease, c->lease_ms);

	switch (o) {
	case LEDGER_CLAIM_NEW: {
		const char *params[11] = {key->tenant,
					  key->request_id,
					  key->tool_call_id,
					  c->tool,
					  c->args_sha256,
					  req->args,
					  c->tool_dedupes ? "true" : "false",
					  c->claim_id,
					  c->attempt_id,
					  c->owner,
					  lease};
		store_event_start(&ev, "claimed", c->attempt_id);
		claimed_detail(&ev, c, 1, NULL);
		store_step_add(&st, &call_insert, params);
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		if (rc == LEDGER_OK)
			set_claimed(&out->call, c, 1);
		break;
	}
	case LEDGER_CLAIM_RECLAIM: {
		int64_t next = out->call.fencing_token + 1;
		const char *params[9] = {key->tenant, key->request_id, key->tool_call_id,
					 token,       c->claim_id,     c->attempt_id,
					 c->owner,    req->args,       lease};
		store_fmt_int(token, out->call.fencing_token);
		from = ledger_call_state_name(out->call.state);
		store_event_start(&ev, "claimed", c->attempt_id);
		claimed_detail(&ev, c, next, from);
		store_step_add(&st, &call_reclaim, params);
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		if (rc == LEDGER_OK)
			set_claimed(&out->call, c, next);
		break;
	}
	case LEDGER_CLAIM_HELD:
	case LEDGER_CLAIM_REPLAY:
	case LEDGER_CLAIM_RESULT_EXPIRED:
		rc = store_rollback(conn);
		break;
	case LEDGER_CLAIM_ATTEMPT_NOT_FOUND:
	case LEDGER_CLAIM_ATTEMPT_REQUIRED:
	case LEDGER_CLAIM_ARGS_MISMATCH:
	case LEDGER_CLAIM_ATTEMPT_FENCED:
	case LEDGER_CLAIM_IN_PROGRESS:
	case LEDGER_CLAIM_OUTCOME_UNKNOWN:
		/* A request this refusal would create has no history to add to. */
		if (lk.created) {
			rc = store_rollback(conn);
			break;
		}
		store_event_refused(&ev, "claim", ledger_claim_code(o), c->attempt_id);
		if (o == LEDGER_CLAIM_ARGS_MISMATCH) {
			store_event_str(&ev, "field", out->mismatch);
			store_event_str(&ev, "expected_args_sha256", out->call.args_sha256);
			store_event_str(&ev, "got_args_sha256", c->args_sha256);
		}
		if (o == LEDGER_CLAIM_IN_PROGRESS) {
			store_event_int(&ev, "fencing_token", out->call.fencing_token);
			store_event_str(&ev, "holder_attempt_id", out->call.attempt_id);
			store_event_str(&ev, "holder_owner", out->call.owner);
		}
		store_event_str(&ev, "owner", c->owner);
		store_event_add(&st, key, &ev);
		if (o == LEDGER_CLAIM_ARGS_MISMATCH && attempt == LEDGER_STANDING_HAS_RIGHTS)
			diverge(&st, key, &lk, &revoked, &failed);
		rc = store_commit(&st);
		break;
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_event_free(&revoked);
	store_event_free(&failed);
	store_locked_clear(&lk);
	return rc;
}

struct claim_arg {
	const struct ledger_call_key *key;
	const struct ledger_claim_request *req;
};

static enum ledger_err claim_op(struct ledger_store_conn *conn, const void *arg, void *out_)
{
	struct ledger_call_result *out = out_;
	const struct claim_arg *a = arg;
	bool done = false;
	enum ledger_err rc;

	if (a->req->claim.attempt_id == NULL) {
		rc = claim_fast_path(conn, a->key, a->req, out, &done);
		if (rc != LEDGER_OK || done)
			return rc;
		ledger_call_clear(&out->call);
	}
	return claim_locked(conn, a->key, a->req, out);
}

enum ledger_err ledger_store_claim(struct ledger_store_conn *conn,
				   const struct ledger_call_key *key,
				   const struct ledger_claim_request *req,
				   struct ledger_call_result *out)
{
	struct claim_arg a = {key, req};

	return store_with_retries(conn, claim_op, &a, out, sizeof(*out), reset_result);
}

/* --- complete --- */

static void completion_detail(struct store_event *ev, const struct ledger_completion *c)
{
	ledger_jsonw_key(&ev->w, "outcome");
	ledger_jsonw_string(&ev->w, c->succeeded ? "succeeded" : "failed");
	if (c->retryable) {
		ledger_jsonw_key(&ev->w, "retryable");
		ledger_jsonw_bool(&ev->w, true);
	}
	store_event_int(ev, "fencing_token", c->fencing_token);
}

/* The call as the holder sees it after its completion was stored. */
static enum ledger_err set_completed(struct ledger_call *call, const struct ledger_completion *c,
				     const PGresult *res, int row, int col,
				     enum ledger_completed_by by)
{
	call->state = c->succeeded ? LEDGER_CALL_SUCCEEDED : LEDGER_CALL_FAILED;
	call->completed_token = c->fencing_token;
	call->completed_by = by;
	call->lease_ms_left = 0;
	store_copy(res, row, col, call->completed_at, sizeof(call->completed_at));
	free(call->result);
	call->result = malloc(c->result_len + 1);
	if (call->result == NULL)
		return LEDGER_ERR_NOMEM;
	memcpy(call->result, c->result, c->result_len);
	call->result[c->result_len] = '\0';
	call->result_len = c->result_len;
	return LEDGER_OK;
}

/* The history's detail of a completion by a fast path; its text, or "{}". */
static const char *complete_fast_event(struct store_event *ev, const struct ledger_completion *c)
{
	store_event_start(ev, NULL, NULL);
	completion_detail(ev, c);
	ledger_jsonw_object_end(&ev->w);
	return ev->detail.oom ? "{}" : ev->detail.data;
}

static void complete_fast_add(struct store_step *st, const struct ledger_call_key *key,
			      const struct ledger_completion *c, struct store_event *ev)
{
	const char *detail = complete_fast_event(ev, c);
	const char *params[8] = {
		key->tenant,
		key->request_id,
		key->tool_call_id,
		store_step_int(st, c->fencing_token),
		c->succeeded ? "succeeded" : "failed",
		c->retryable ? "true" : "false",
		c->retryable ? NULL : c->result,
		detail,
	};
	store_step_add(st, &complete_fast, params);
}

/* @return LEDGER_OK with *done false when the holder's fast path did not apply */
/*
 * Reads row @p row of what complete_fast (or complete_many) answered, when
 * the holder's fast path applied.
 */
static enum ledger_err complete_fast_read(const PGresult *res, int row,
					  const struct ledger_completion *c,
					  struct ledger_call_result *out)
{
	ledger_call_clear(&out->call);
	out->call.fencing_token = c->fencing_token;
	store_copy(res, row, 0, out->call.attempt_id, sizeof(out->call.attempt_id));
	if (c->retryable) {
		out->outcome.complete = LEDGER_COMPLETE_RELEASED;
		out->call.state = LEDGER_CALL_RELEASED;
		return LEDGER_OK;
	}
	out->outcome.complete = LEDGER_COMPLETE_STORED;
	store_copy(res, row, 2, out->call.tool, sizeof(out->call.tool));
	store_copy(res, row, 3, out->call.args_sha256, sizeof(out->call.args_sha256));
	out->call.tool_dedupes = store_bool(res, row, 4);
	out->no_attempts = store_int(res, row, 5) == 0;
	return set_completed(&out->call, c, res, row, 1, LEDGER_COMPLETED_HOLDER);
}

static enum ledger_err complete_fast_path(struct ledger_store_conn *conn,
					  const struct ledger_call_key *key,
					  const struct ledger_completion *c,
					  struct ledger_call_result *out, bool *done)
{
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	*done = false;
	store_step_begin(&st, conn);
	complete_fast_add(&st, key, c, &ev);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK) {
		*done = PQntuples(st.res[0]) == 1;
		if (*done)
			rc = complete_fast_read(st.res[0], 0, c, out);
	}
	store_step_clear(&st);
	store_event_free(&ev);
	return rc;
}

static enum ledger_err complete_locked(struct ledger_store_conn *conn,
				       const struct ledger_call_key *key,
				       const struct ledger_completion *c,
				       struct ledger_call_result *out)
{
	enum ledger_complete_outcome o;
	struct store_locked lk;
	const struct store_lookup look = {.tool_call_id = key->tool_call_id};
	struct store_step st;
	struct store_event ev;
	char read_token[24], given[24];
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	store_step_begin(&st, conn);
	rc = store_lock_and_read(conn, key->tenant, key->request_id, false, &look, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	o = ledger_decide_complete(c, &out->call);
	out->outcome.complete = o;
	store_fmt_int(read_token, out->call.fencing_token);
	store_fmt_int(given, c->fencing_token);

	switch (o) {
	case LEDGER_COMPLETE_NOT_FOUND:
	case LEDGER_COMPLETE_RESULT_EXPIRED:
	case LEDGER_COMPLETE_REPEATED:
		rc = store_rollback(conn);
		break;
	case LEDGER_COMPLETE_STALE_TOKEN:
	case LEDGER_COMPLETE_ALREADY_COMPLETED:
		store_event_refused(&ev, "complete", ledger_complete_code(o), out->call.attempt_id);
		completion_detail(&ev, c);
		store_event_int(&ev, "current_token", out->call.fencing_token);
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		break;
	case LEDGER_COMPLETE_STORED:
	case LEDGER_COMPLETE_LATE: {
		enum ledger_completed_by by = o == LEDGER_COMPLETE_STORED ? LEDGER_COMPLETED_HOLDER
									  : LEDGER_COMPLETED_LATE;
		const char *params[9] = {key->tenant,
					 key->request_id,
					 key->tool_call_id,
					 read_token,
					 c->succeeded ? "succeeded" : "failed",
					 c->result,
					 given,
					 store_completed_by_name(by),
					 read_token};
		store_event_start(&ev,
				  o == LEDGER_COMPLETE_STORED ? "completed" : "late_completion",
				  out->call.attempt_id);
		completion_detail(&ev, c);
		if (o == LEDGER_COMPLETE_LATE) {
			store_event_int(&ev, "current_token", out->call.fencing_token);
			store_event_str(&ev, "previous_state",
					ledger_call_state_name(out->call.state));
		}
		store_step_add(&st, &call_settle, params);
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		if (rc == LEDGER_OK)
			rc = set_completed(&out->call, c, st.res[0], 0, 0, by);
		break;
	}
	case LEDGER_COMPLETE_RELEASED: {
		const char *params[5] = {key->tenant, key->request_id, key->tool_call_id,
					 read_token, read_token};
		store_event_start(&ev, "released", out->call.attempt_id);
		completion_detail(&ev, c);
		store_step_add(&st, &call_release, params);
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		if (rc == LEDGER_OK)
			out->call.state = LEDGER_CALL_RELEASED;
		break;
	}
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_locked_clear(&lk);
	return rc;
}

struct complete_arg {
	const struct ledger_call_key *key;
	const struct ledger_completion *c;
};

static enum ledger_err complete_op(struct ledger_store_conn *conn, const void *arg, void *out_)
{
	struct ledger_call_result *out = out_;
	const struct complete_arg *a = arg;
	bool done = false;
	enum ledger_err rc;

	rc = complete_fast_path(conn, a->key, a->c, out, &done);
	if (rc != LEDGER_OK || done)
		return rc;
	ledger_call_clear(&out->call);
	return complete_locked(conn, a->key, a->c, out);
}

enum ledger_err ledger_store_complete(struct ledger_store_conn *conn,
				      const struct ledger_call_key *key,
				      const struct ledger_completion *c,
				      struct ledger_call_result *out)
{
	struct complete_arg a = {key, c};

	return store_with_retries(conn, complete_op, &a, out, sizeof(*out), reset_result);
}

/* --- renew --- */

/* @return true when renew_fast renewed the holder's lease (and fills @p out). */
static bool renew_fast_read(const PGresult *res, int64_t fencing_token, int64_t lease_ms,
			    struct ledger_call_result *out)
{
	if (store_int(res, 0, 0) != 1)
		return false;
	out->outcome.renew = LEDGER_RENEW_RENEWED;
	out->call.state = LEDGER_CALL_IN_PROGRESS;
	out->call.fencing_token = fencing_token;
	out->call.lease_ms_left = lease_ms;
	return true;
}

struct renew_arg {
	const struct ledger_call_key *key;
	int64_t fencing_token;
	int64_t lease_ms;
};

static enum ledger_err renew_op(struct ledger_store_conn *conn, const void *arg, void *out_)
{
	struct ledger_call_result *out = out_;
	const struct renew_arg *a = arg;
	const struct ledger_call_key *key = a->key;
	int64_t fencing_token = a->fencing_token, lease_ms = a->lease_ms;
	char token[24], lease[24];
	const char *params[5] = {key->tenant, key->request_id, key->tool_call_id, token, lease};
	enum ledger_standing attempt = LEDGER_STANDING_NOT_GIVEN;
	enum ledger_renew_outcome o;
	struct store_locked lk;
	const struct store_lookup look = {.tool_call_id = key->tool_call_id};
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	store_fmt_int(token, fencing_token);
	store_fmt_int(lease, lease_ms);
	store_step_begin(&st, conn);

	store_step_add(&st, &renew_fast, params);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK || renew_fast_read(st.res[0], fencing_token, lease_ms, out))
		goto out;
	store_step_clear(&st);

	rc = store_lock_and_read(conn, key->tenant, key->request_id, false, &look, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	/* A claim made under an attempt is fenced with it. */
	if (out->call.attempt_id[0] != '\0')
		attempt = ledger_attempt_standing(&lk.request, &lk.of_call);
	o = ledger_decide_renew(fencing_token, &out->call, attempt);
	out->outcome.renew = o;
	switch (o) {
	case LEDGER_RENEW_NOT_FOUND:
	case LEDGER_RENEW_RESULT_EXPIRED:
		rc = store_rollback(conn);
		break;
	case LEDGER_RENEW_STALE_TOKEN:
	case LEDGER_RENEW_ATTEMPT_FENCED:
	case LEDGER_RENEW_OUTCOME_UNKNOWN:
		store_event_refused(&ev, "renew", ledger_renew_code(o), out->call.attempt_id);
		store_event_int(&ev, "fencing_token", fencing_token);
		store_event_int(&ev, "current_token", out->call.fencing_token);
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		break;
	case LEDGER_RENEW_RENEWED:
		store_step_add(&st, &call_renew, params);
		rc = store_commit(&st);
		out->call.lease_ms_left = lease_ms;
		break;
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_locked_clear(&lk);
	return rc;
}

enum ledger_err ledger_store_renew(struct ledger_store_conn *conn,
				   const struct ledger_call_key *key, int64_t fencing_token,
				   int64_t lease_ms, struct ledger_call_result *out)
{
	struct renew_arg a = {key, fencing_token, lease_ms};

	return store_with_retries(conn, renew_op, &a, out, sizeof(*out), reset_result);
}

/* --- release --- */

struct release_arg {
	const struct ledger_call_key *key;
	int64_t fencing_token;
	const char *reason;
};

static enum ledger_err release_op(struct ledger_store_conn *conn, const void *arg, void *out_)
{
	struct ledger_call_result *out = out_;
	const struct release_arg *a = arg;
	const struct ledger_call_key *key = a->key;
	int64_t fencing_token = a->fencing_token;
	const char *reason = a->reason;
	char token[24];
	const char *params[5] = {key->tenant, key->request_id, key->tool_call_id, token, token};
	enum ledger_release_outcome o;
	struct store_locked lk;
	const struct store_lookup look = {.tool_call_id = key->tool_call_id};
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	store_fmt_int(token, fencing_token);
	store_step_begin(&st, conn);
	rc = store_lock_and_read(conn, key->tenant, key->request_id, false, &look, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	o = ledger_decide_release(fencing_token, &out->call);
	out->outcome.release = o;
	switch (o) {
	case LEDGER_RELEASE_NOT_FOUND:
	case LEDGER_RELEASE_RESULT_EXPIRED:
	case LEDGER_RELEASE_REPEATED:
		rc = store_rollback(conn);
		break;
	case LEDGER_RELEASE_STALE_TOKEN:
		store_event_refused(&ev, "release", ledger_release_code(o), out->call.attempt_id);
		store_event_int(&ev, "fencing_token", fencing_token);
		store_event_int(&ev, "current_token", out->call.fencing_token);
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		break;
	case LEDGER_RELEASE_RELEASED:
		store_event_start(&ev, "released", out->call.attempt_id);
		store_event_int(&ev, "fencing_token", fencing_token);
		store_event_str(&ev, "reason", reason);
		store_step_add(&st, &call_release, params);
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		if (rc == LEDGER_OK)
			out->call.state = LEDGER_CALL_RELEASED;
		break;
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_locked_clear(&lk);
	return rc;
}

enum ledger_err ledger_store_release(struct ledger_store_conn *conn,
				     const struct ledger_call_key *key, int64_t fencing_token,
				     const char *reason, struct ledger_call_result *out)
{
	struct release_arg a = {key, fencing_token, reason};

	return store_with_retries(conn, release_op, &a, out, sizeof(*out), reset_result);
}

/* --- resolve --- */

static const char *resolution_name(enum ledger_resolution r)
{
	switch (r) {
	case LEDGER_RESOLVE_SUCCEEDED:
		return "succeeded";
	case LEDGER_RESOLVE_FAILED:
		return "failed";
	case LEDGER_RESOLVE_NOT_EXECUTED:
		return "not_executed";
	}
	abort();
}

struct resolve_arg {
	const struct ledger_call_key *key;
	enum ledger_resolution resolution;
	const char *result;
	size_t result_len;
	const char *note;
};

static enum ledger_err resolve_op(struct ledger_store_conn *conn, const void *arg, void *out_)
{
	struct ledger_call_result *out = out_;
	const struct resolve_arg *a = arg;
	const struct ledger_call_key *key = a->key;
	enum ledger_resolution resolution = a->resolution;
	const char *result = a->result, *note = a->note;
	size_t result_len = a->result_len;
	char read_token[24], next_token[24];
	enum ledger_resolve_outcome o;
	enum ledger_call_state previous;
	struct store_locked lk;
	const struct store_lookup look = {.tool_call_id = key->tool_call_id};
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	store_step_begin(&st, conn);
	rc = store_lock_and_read(conn, key->tenant, key->request_id, false, &look, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	o = ledger_decide_resolve(resolution, result, result_len, &out->call);
	out->outcome.resolve = o;
	previous = out->call.state;
	store_fmt_int(read_token, out->call.fencing_token);
	/* Whoever held the call is revoked: the next holder gets a higher token. */
	store_fmt_int(next_token, out->call.fencing_token + 1);

	switch (o) {
	case LEDGER_RESOLVE_NOT_FOUND:
	case LEDGER_RESOLVE_RESULT_EXPIRED:
	case LEDGER_RESOLVE_REPEATED:
		rc = store_rollback(conn);
		break;
	case LEDGER_RESOLVE_ALREADY_COMPLETED:
		store_event_refused(&ev, "resolve", ledger_resolve_code(o), NULL);
		store_event_str(&ev, "resolution", resolution_name(resolution));
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		break;
	case LEDGER_RESOLVE_SETTLED:
		store_event_start(&ev, "resolved", NULL);
		store_event_str(&ev, "resolution", resolution_name(resolution));
		store_event_str(&ev, "previous_state", ledger_call_state_name(previous));
		store_event_int(&ev, "fencing_token", out->call.fencing_token + 1);
		store_event_str(&ev, "note", note);
		if (resolution == LEDGER_RESOLVE_NOT_EXECUTED) {
			const char *params[5] = {key->tenant, key->request_id, key->tool_call_id,
						 read_token, next_token};
			store_step_add(&st, &call_release, params);
		} else {
			const char *params[9] = {key->tenant,
						 key->request_id,
						 key->tool_call_id,
						 read_token,
						 resolution_name(resolution),
						 result != NULL ? result : "null",
						 next_token,
						 "resolve",
						 next_token};
			store_step_add(&st, &call_settle, params);
		}
		store_event_add(&st, key, &ev);
		rc = store_commit(&st);
		if (rc != LEDGER_OK)
			break;
		out->call.fencing_token++;
		out->call.lease_ms_left = 0;
		if (resolution == LEDGER_RESOLVE_NOT_EXECUTED) {
			out->call.state = LEDGER_CALL_RELEASED;
		} else {
			struct ledger_completion as = {
				.fencing_token = out->call.fencing_token,
				.succeeded = resolution == LEDGER_RESOLVE_SUCCEEDED,
				.result = result != NULL ? result : "null",
				.result_len = result != NULL ? result_len : 4,
			};
			rc = set_completed(&out->call, &as, st.res[0], 0, 0,
					   LEDGER_COMPLETED_RESOLVE);
		}
		break;
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_locked_clear(&lk);
	return rc;
}

enum ledger_err ledger_store_resolve(struct ledger_store_conn *conn,
				     const struct ledger_call_key *key,
				     enum ledger_resolution resolution, const char *result,
				     size_t result_len, const char *note,
				     struct ledger_call_result *out)
{
	struct resolve_arg a = {key, resolution, result, result_len, note};

	return store_with_retries(conn, resolve_op, &a, out, sizeof(*out), reset_result);
}

/* --- batches --- */

/* Key order: requests in the one order every batch locks them in. */
static int by_key(const void *a, const void *b)
{
	const struct ledger_call_key *x = &(*(struct ledger_batch_op *const *)a)->key;
	const struct ledger_call_key *y = &(*(struct ledger_batch_op *const *)b)->key;
	int c = strcmp(x->tenant, y->tenant);

	if (c == 0)
		c = strcmp(x->request_id, y->request_id);
	return c != 0 ? c : strcmp(x->tool_call_id, y->tool_call_id);
}

static bool same_key(const struct ledger_call_key *x, const struct ledger_call_key *y)
{
	return strcmp(x->tool_call_id, y->tool_call_id) == 0 &&
	       strcmp(x->request_id, y->request_id) == 0 && strcmp(x->tenant, y->tenant) == 0;
}

#define BATCH_ARRAYS 11 /* the most array parameters a batch statement takes */

/* A batch statement's parameters: one array literal each. */
struct batch_params {
	struct ledger_buf a[BATCH_ARRAYS];
};

static void params_free(struct batch_params *p)
{
	for (unsigned i = 0; i < BATCH_ARRAYS; i++)
		ledger_buf_free(&p->a[i]);
}

/* Closes the first @p n literals. @return false if memory ran out */
static bool params_end(struct batch_params *p, unsigned n)
{
	bool ok = true;

	for (unsigned i = 0; i < n; i++) {
		store_array_end(&p->a[i]);
		ok = ok && !p->a[i].oom;
	}
	return ok;
}

static void params_key(struct batch_params *p, const struct ledger_call_key *key)
{
	store_array_add(&p->a[0], key->tenant);
	store_array_add(&p->a[1], key->request_id);
	store_array_add(&p->a[2], key->tool_call_id);
}

static void params_int(struct ledger_buf *b, int64_t v)
{
	char text[24];

	store_fmt_int(text, v);
	store_array_add(b, text);
}

/*
 * From this many calls of one kind on, a batch sends them as one statement
 * over arrays; below it, one statement per call costs less (measured: a
 * claim_many of one call costs 1.4 claim_fast, of four 0.85 each, of
 * sixteen 0.5 each).
 */
#define BATCH_MANY_MIN 4

/* How a batch's calls are sent. */
struct batch_plan {
	struct ledger_batch_op **claims, **completes; /* in claim_many, complete_many */
	struct ledger_batch_op **singles;             /* each in its own statement */
	size_t nclaims, ncompletes, nsingles;
	struct batch_params lock, claim, complete;
	struct ledger_batch_op *base; /* ev[i] belongs to base[i] */
	struct store_event *ev;
};

static void plan_claims(struct batch_plan *p)
{
	for (size_t i = 0; i < p->nclaims; i++) {
		struct ledger_batch_op *op = p->claims[i];
		const struct ledger_claim_request *r = op->claim;

		params_key(&p->claim, &op->key);
		store_array_add(&p->claim.a[3], r->claim.tool);
		store_array_add(&p->claim.a[4], r->claim.args_sha256);
		store_array_add(&p->claim.a[5], r->args);
		store_array_add(&p->claim.a[6], r->claim.tool_dedupes ? "true" : "false");
		store_array_add(&p->claim.a[7], r->claim.claim_id);
		store_array_add(&p->claim.a[8], r->claim.owner);
		params_int(&p->claim.a[9], r->claim.lease_ms);
		store_array_add(&p->claim.a[10], claim_fast_event(&p->ev[op - p->base], &r->claim));
	}
}

static void plan_completes(struct batch_plan *p)
{
	for (size_t i = 0; i < p->ncompletes; i++) {
		struct ledger_batch_op *op = p->completes[i];
		const struct ledger_completion *c = op->completion;

		params_key(&p->complete, &op->key);
		params_int(&p->complete.a[3], c->fencing_token);
		store_array_add(&p->complete.a[4], c->succeeded ? "succeeded" : "failed");
		store_array_add(&p->complete.a[5], c->retryable ? "true" : "false");
		store_array_add(&p->complete.a[6], c->retryable ? NULL : c->result);
		store_array_add(&p->complete.a[7], complete_fast_event(&p->ev[op - p->base], c));
	}
}

/*
 * Sorts the ops (in key order) into the plan and builds the array
 * parameters. A second op of one kind on one key stays out (not done: it
 * runs alone, after), as it would find the first one's work anyway.
 */
static enum ledger_err plan_batch(struct batch_plan *p, struct ledger_batch_op **order, size_t n)
{
	struct ledger_batch_op *last[3] = {NULL, NULL, NULL}; /* per kind */
	size_t nclaims = 0, ncompletes = 0;

	for (size_t i = 0; i < n; i++) {
		struct ledger_batch_op *op = order[i];

		if (last[op->kind] != NULL && same_key(&last[op->kind]->key, &op->key))
			continue;
		last[op->kind] = op;
		nclaims += op->kind == LEDGER_BATCH_CLAIM;
		ncompletes += op->kind == LEDGER_BATCH_COMPLETE;
		p->singles[p->nsingles++] = op;
	}
	/* The kinds numerous enough leave the singles for their statement. */
	if (nclaims >= BATCH_MANY_MIN || ncompletes >= BATCH_MANY_MIN) {
		size_t kept = 0;

		for (size_t i = 0; i < p->nsingles; i++) {
			struct ledger_batch_op *op = p->singles[i];

			if (op->kind == LEDGER_BATCH_CLAIM && nclaims >= BATCH_MANY_MIN)
				p->claims[p->nclaims++] = op;
			else if (op->kind == LEDGER_BATCH_COMPLETE && ncompletes >= BATCH_MANY_MIN)
				p->completes[p->ncompletes++] = op;
			else
				p->singles[kept++] = op;
			store_array_add(&p->lock.a[0], op->key.tenant);
			store_array_add(&p->lock.a[1], op->key.request_id);
		}
		p->nsingles = kept;
	}
	plan_claims(p);
	plan_completes(p);
	return params_end(&p->lock, 2) && params_end(&p->claim, 11) && params_end(&p->complete, 8)
		       ? LEDGER_OK
		       : LEDGER_ERR_NOMEM;
}

static void plan_free(struct batch_plan *p, size_t n)
{
	for (size_t i = 0; p->ev != NULL && i < n; i++)
		store_event_free(&p->ev[i]);
	params_free(&p->lock);
	params_free(&p->claim);
	params_free(&p->complete);
	free(p->claims);
	free(p->ev);
}

static const char *const *params_of(const struct batch_params *p, const char **out, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		out[i] = p->a[i].data;
	return out;
}

/* Queues a call's own fast statement. */
static void single_add(struct batch_plan *p, struct store_step *st, struct ledger_batch_op *op)
{
	const char *params[5] = {op->key.tenant, op->key.request_id, op->key.tool_call_id, NULL,
				 NULL};

	switch (op->kind) {
	case LEDGER_BATCH_CLAIM:
		claim_fast_add(st, &op->key, op->claim, &p->ev[op - p->base]);
		break;
	case LEDGER_BATCH_COMPLETE:
		complete_fast_add(st, &op->key, op->completion, &p->ev[op - p->base]);
		break;
	case LEDGER_BATCH_RENEW:
		params[3] = store_step_int(st, op->fencing_token);
		params[4] = store_step_int(st, op->lease_ms);
		store_step_add(st, &renew_fast, params);
		break;
	}
}

/* Reads what a call's own fast statement answered. */
static enum ledger_err single_read(struct ledger_batch_op *op, const PGresult *res)
{
	switch (op->kind) {
	case LEDGER_BATCH_CLAIM:
		if (PQntuples(res) != 1)
			return LEDGER_ERR_INTERNAL;
		return claim_fast_read(res, 0, &op->claim->claim, &op->out, &op->done);
	case LEDGER_BATCH_COMPLETE:
		op->done = PQntuples(res) == 1;
		return op->done ? complete_fast_read(res, 0, op->completion, &op->out) : LEDGER_OK;
	case LEDGER_BATCH_RENEW:
		op->done = renew_fast_read(res, op->fencing_token, op->lease_ms, &op->out);
		return LEDGER_OK;
	}
	abort();
}

/* Reads what the batch's statements answered into each op. */
static enum ledger_err batch_read(struct batch_plan *p, struct store_step *st, unsigned first)
{
	unsigned at = first;
	enum ledger_err rc = LEDGER_OK;

	if (p->nclaims > 0) {
		const PGresult *res = st->res[at++];

		if ((size_t)PQntuples(res) != p->nclaims)
			return LEDGER_ERR_INTERNAL;
		for (size_t i = 0; i < p->nclaims && rc == LEDGER_OK; i++) {
			struct ledger_batch_op *op = p->claims[i];

			rc = claim_fast_read(res, (int)i, &op->claim->claim, &op->out, &op->done);
		}
	}
	if (p->ncompletes > 0) {
		const PGresult *res = st->res[at++];

		if ((size_t)PQntuples(res) != p->ncompletes)
			return LEDGER_ERR_INTERNAL;
		for (size_t i = 0; i < p->ncompletes && rc == LEDGER_OK; i++) {
			struct ledger_batch_op *op = p->completes[i];

			op->done = store_bool(res, (int)i, 6);
			if (op->done)
				rc = complete_fast_read(res, (int)i, op->completion, &op->out);
		}
	}
	for (size_t i = 0; i < p->nsingles && rc == LEDGER_OK; i++)
		rc = single_read(p->singles[i], st->res[at++]);
	return rc;
}

enum ledger_err ledger_store_batch(struct ledger_store_conn *conn, struct ledger_batch_op *ops,
				   size_t n)
{
	struct ledger_batch_op **order = NULL;
	struct batch_plan plan;
	struct store_step st;
	const char *params[BATCH_ARRAYS];
	unsigned first = 1; /* the first result after BEGIN (and the batch's lock) */
	enum ledger_err rc;

	memset(&plan, 0, sizeof(plan));
	for (size_t i = 0; i < n; i++) {
		memset(&ops[i].out, 0, sizeof(ops[i].out));
		ops[i].done = false;
	}
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	store_step_begin(&st, conn);
	order = calloc(n, sizeof(*order));
	plan.claims = calloc(3 * n, sizeof(*plan.claims));
	plan.ev = calloc(n, sizeof(*plan.ev));
	if (order == NULL || plan.claims == NULL || plan.ev == NULL) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	plan.completes = plan.claims + n;
	plan.singles = plan.claims + 2 * n;
	plan.base = ops;
	for (size_t i = 0; i < n; i++)
		order[i] = &ops[i];
	qsort(order, n, sizeof(*order), by_key);
	rc = plan_batch(&plan, order, n);
	if (rc != LEDGER_OK ||
	    (rc = store_step_begin_many(&st, conn, (unsigned)plan.nsingles + 6)) != LEDGER_OK)
		goto out;

	store_step_add_simple(&st, "BEGIN");
	/*
	 * One statement per call, in key order, locks requests in one order.
	 * Statements over many calls lock in phases: batch_lock first.
	 */
	if (plan.nclaims > 0 || plan.ncompletes > 0) {
		/*
		 * A custom plan for arrays is planned again at every execution;
		 * the generic one serves any length (and any statement here).
		 */
		store_step_add_simple(&st, "SET LOCAL plan_cache_mode = force_generic_plan");
		store_step_add(&st, &batch_lock, params_of(&plan.lock, params, 2));
		first += 2;
	}
	if (plan.nclaims > 0)
		store_step_add(&st, &claim_many, params_of(&plan.claim, params, 11));
	if (plan.ncompletes > 0)
		store_step_add(&st, &complete_many, params_of(&plan.complete, params, 8));
	for (size_t i = 0; i < plan.nsingles; i++)
		single_add(&plan, &st, plan.singles[i]);
	/* One commit, one flush, for every call of the batch; none answers before it. */
	rc = store_commit(&st);
	if (rc == LEDGER_OK)
		rc = batch_read(&plan, &st, first);
	if (rc != LEDGER_OK) {
		/* Nothing of a failed batch is kept, or may be believed. */
		for (size_t i = 0; i < n; i++) {
			ledger_call_clear(&ops[i].out.call);
			ops[i].done = false;
		}
	}
out:
	plan_free(&plan, n);
	store_step_free(&st);
	free(order);
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_calls_statements[] = {
	&claim_fast,  &complete_fast, &renew_fast, &batch_lock,  &claim_many,   &complete_many,
	&call_insert, &call_reclaim,  &call_renew, &call_settle, &call_release, NULL,
};
