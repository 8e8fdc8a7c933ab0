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
#include "ledger/store_int.h"

/* The statements are laid out as SQL, not as C. */
/* clang-format off */
#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
#define LEASE_FROM(now, ms) "(" now " + (" ms ")::bigint * interval '1 millisecond')"

/*
 * A call's columns as struct ledger_call needs them, over "c" (the call),
 * "t" (its tombstone) and "now_" (the clock). Keep in step with enum col.
 */
#define CALL_COLUMNS                                                                              \
	"c.state, c.fencing_token, c.claim_id, c.attempt_id, c.owner, c.tool, c.args_sha256, "   \
	"c.tool_dedupes, "                                                                        \
	"CASE WHEN c.state = 'in_progress' AND c.lease_until > now_.t "                           \
	"     THEN ceil(extract(epoch FROM c.lease_until - now_.t) * 1000)::bigint ELSE 0 END, "  \
	"c.completed_token, c.completed_by, c.result, c.args, " TS("c.created_at") ", "           \
	TS("c.completed_at") ", t.args_sha256, t.outcome, " TS("t.completed_at")

enum col {
	COL_STATE,
	COL_TOKEN,
	COL_CLAIM_ID,
	COL_ATTEMPT_ID,
	COL_OWNER,
	COL_TOOL,
	COL_ARGS_SHA256,
	COL_DEDUPES,
	COL_LEASE_LEFT,
	COL_COMPLETED_TOKEN,
	COL_COMPLETED_BY,
	COL_RESULT,
	COL_ARGS,
	COL_CREATED_AT,
	COL_COMPLETED_AT,
	COL_TOMB_ARGS,
	COL_TOMB_OUTCOME,
	COL_TOMB_COMPLETED_AT,
	NCOLS
};

/* The call ($1 tenant, $2 request, $3 call) and its tombstone, if any. */
#define CALL_FROM                                                                                 \
	" FROM (SELECT clock_timestamp() AS t) now_"                                              \
	" LEFT JOIN tool_calls c"                                                                 \
	"   ON c.tenant = $1 AND c.request_id = $2 AND c.tool_call_id = $3"                       \
	" LEFT JOIN tool_call_tombstones t"                                                       \
	"   ON c.tenant IS NULL AND t.tenant = $1 AND t.request_id = $2"                          \
	"  AND t.tool_call_id = $3 AND t.expires_at > now_.t"

static const struct store_stmt lock_request = {
	"lock_request",
	/* Creates the request if needed, then holds its row until COMMIT. */
	"WITH created AS ("
	"  INSERT INTO requests (tenant, request_id) VALUES ($1, $2)"
	"  ON CONFLICT (tenant, request_id) DO NOTHING"
	"  RETURNING attempt_count, true AS created"
	"), existing AS MATERIALIZED ("
	"  SELECT attempt_count, false AS created FROM requests"
	"  WHERE tenant = $1 AND request_id = $2 FOR UPDATE"
	") SELECT attempt_count, created FROM created"
	"  UNION ALL SELECT attempt_count, created FROM existing",
	2,
};

static const struct store_stmt lock_existing = {
	"lock_existing",
	"SELECT attempt_count, false FROM requests"
	" WHERE tenant = $1 AND request_id = $2 FOR UPDATE",
	2,
};

static const struct store_stmt read_call = {
	"read_call",
	"SELECT " CALL_COLUMNS CALL_FROM,
	3,
};

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
	"  SELECT $1, $2, $3, $4, $5, $6, $7, 'in_progress', 1, $8, $9, " LEASE_FROM("req.now", "$10")
	"  , req.now FROM req"
	"  WHERE NOT EXISTS (SELECT 1 FROM settled) AND req.attempt_count = 0"
	"  ON CONFLICT (tenant, request_id, tool_call_id) DO NOTHING"
	"  RETURNING created_at"
	"), ev AS ("
	"  INSERT INTO events (tenant, request_id, at, type, tool_call_id, detail)"
	"  SELECT $1, $2, created_at, 'claimed', $3, $11::jsonb FROM ins"
	") SELECT (SELECT count(*) FROM ins)::int,"
	"  (SELECT attempt_count FROM requests WHERE tenant = $1 AND request_id = $2), "
	CALL_COLUMNS CALL_FROM,
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
	"  SELECT 1 FROM requests WHERE tenant = $1 AND request_id = $2 FOR UPDATE"
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
	"  RETURNING c.attempt_id, " TS("c.completed_at")
	"), ev AS ("
	"  INSERT INTO events (tenant, request_id, at, type, attempt_id, tool_call_id, detail)"
	"  SELECT $1, $2, clk.now, CASE WHEN $6::boolean THEN 'released' ELSE 'completed' END,"
	"    upd.attempt_id, $3, $8::jsonb FROM upd, clk"
	") SELECT * FROM upd",
	8,
};

/* The holder's renewal ($4 token, $5 lease_ms), not under an attempt. */
static const struct store_stmt renew_fast = {
	"renew_fast",
	"WITH req AS MATERIALIZED ("
	"  SELECT 1 FROM requests WHERE tenant = $1 AND request_id = $2 FOR UPDATE"
	"), clk AS MATERIALIZED (SELECT clock_timestamp() AS now FROM req"
	"), upd AS ("
	"  UPDATE tool_calls c SET lease_until = " LEASE_FROM("clk.now", "$5") ", renewed_at = clk.now"
	"  FROM clk"
	"  WHERE c.tenant = $1 AND c.request_id = $2 AND c.tool_call_id = $3"
	"    AND c.state = 'in_progress' AND c.fencing_token = $4::bigint"
	"    AND c.lease_until > clk.now AND c.attempt_id IS NULL"
	"  RETURNING 1"
	") SELECT count(*)::int FROM upd",
	5,
};

/* The general path's writes; the lock is held, so the clock is read now. */
static const struct store_stmt call_insert = {
	"call_insert",
	"INSERT INTO tool_calls (tenant, request_id, tool_call_id, tool, args_sha256, args,"
	"  tool_dedupes, state, fencing_token, claim_id, attempt_id, owner, lease_until, created_at)"
	" VALUES ($1, $2, $3, $4, $5, $6, $7, 'in_progress', 1, $8, $9, $10, "
	LEASE_FROM("clock_timestamp()", "$11") ", clock_timestamp())",
	11,
};

static const struct store_stmt call_reclaim = {
	"call_reclaim",
	"UPDATE tool_calls SET state = 'in_progress', fencing_token = fencing_token + 1,"
	"  claim_id = $5, attempt_id = $6, owner = $7, args = coalesce(args, $8),"
	"  lease_until = " LEASE_FROM("clock_timestamp()", "$9") ", renewed_at = NULL"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4",
	9,
};

static const struct store_stmt call_renew = {
	"call_renew",
	"UPDATE tool_calls SET lease_until = " LEASE_FROM("clock_timestamp()", "$5")
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
	" RETURNING " TS("completed_at"),
	9,
};

/* $4 token read, $5 new token */
static const struct store_stmt call_release = {
	"call_release",
	"UPDATE tool_calls SET state = 'released', fencing_token = $5"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4",
	5,
};

static const struct store_stmt event_insert = {
	"event_insert",
	"INSERT INTO events (tenant, request_id, type, attempt_id, tool_call_id, detail)"
	" VALUES ($1, $2, $3, $4, $5, $6::jsonb)",
	6,
};

/* $2, $3: the last key of the previous page (NULL: the first page); $4 limit */
#define LIST_PAGE                                                                                 \
	" AND ($2::text IS NULL OR (c.request_id, c.tool_call_id) > ($2::text, $3::text))"       \
	" ORDER BY c.request_id, c.tool_call_id LIMIT $4"

/* Held calls; $5 true lists those whose lease ran out (unknown). */
static const struct store_stmt list_open = {
	"list_open",
	"SELECT c.request_id, c.tool_call_id, " CALL_COLUMNS
	" FROM (SELECT clock_timestamp() AS t) now_"
	" JOIN tool_calls c ON c.tenant = $1 AND c.state = 'in_progress'"
	" LEFT JOIN tool_call_tombstones t ON false"
	" WHERE (c.lease_until <= now_.t) = $5::boolean" LIST_PAGE,
	5,
};

/* Calls in stored state $5, or in any state when $5 is NULL. */
static const struct store_stmt list_any = {
	"list_any",
	"SELECT c.request_id, c.tool_call_id, " CALL_COLUMNS
	" FROM (SELECT clock_timestamp() AS t) now_"
	" JOIN tool_calls c ON c.tenant = $1 AND ($5::text IS NULL OR c.state = $5::text)"
	" LEFT JOIN tool_call_tombstones t ON false"
	" WHERE true" LIST_PAGE,
	5,
};

/* clang-format on */

/* --- rows --- */

static enum ledger_call_state parse_state(const char *s)
{
	if (strcmp(s, "in_progress") == 0)
		return LEDGER_CALL_IN_PROGRESS;
	if (strcmp(s, "succeeded") == 0)
		return LEDGER_CALL_SUCCEEDED;
	if (strcmp(s, "failed") == 0)
		return LEDGER_CALL_FAILED;
	if (strcmp(s, "released") == 0)
		return LEDGER_CALL_RELEASED;
	LOG_ERROR("tool_calls row with state \"%.20s\"", s);
	abort(); /* the table's CHECK allows nothing else */
}

static enum ledger_completed_by parse_completed_by(const char *s)
{
	if (strcmp(s, "holder") == 0)
		return LEDGER_COMPLETED_HOLDER;
	if (strcmp(s, "late") == 0)
		return LEDGER_COMPLETED_LATE;
	if (strcmp(s, "resolve") == 0)
		return LEDGER_COMPLETED_RESOLVE;
	return LEDGER_COMPLETED_NONE;
}

static const char *completed_by_name(enum ledger_completed_by by)
{
	switch (by) {
	case LEDGER_COMPLETED_HOLDER:
		return "holder";
	case LEDGER_COMPLETED_LATE:
		return "late";
	case LEDGER_COMPLETED_RESOLVE:
		return "resolve";
	case LEDGER_COMPLETED_NONE:
		break;
	}
	return NULL;
}

/*
 * Fills @p call from CALL_COLUMNS starting at column @p base of @p row,
 * deriving UNKNOWN from a lease that ran out.
 */
static enum ledger_err parse_call(const PGresult *res, int row, int base, struct ledger_call *call)
{
	ledger_call_clear(call);
	if (PQgetisnull(res, row, base + COL_STATE)) {
		if (PQgetisnull(res, row, base + COL_TOMB_OUTCOME))
			return LEDGER_OK;
		call->state = LEDGER_CALL_TOMBSTONE;
		store_copy(res, row, base + COL_TOMB_ARGS, call->args_sha256,
			   sizeof(call->args_sha256));
		store_copy(res, row, base + COL_TOMB_COMPLETED_AT, call->completed_at,
			   sizeof(call->completed_at));
		call->settled_as =
			strcmp(PQgetvalue(res, row, base + COL_TOMB_OUTCOME), "succeeded") == 0
				? LEDGER_CALL_SUCCEEDED
				: LEDGER_CALL_FAILED;
		return LEDGER_OK;
	}
	call->state = parse_state(PQgetvalue(res, row, base + COL_STATE));
	call->fencing_token = store_int(res, row, base + COL_TOKEN);
	store_copy(res, row, base + COL_CLAIM_ID, call->claim_id, sizeof(call->claim_id));
	store_copy(res, row, base + COL_ATTEMPT_ID, call->attempt_id, sizeof(call->attempt_id));
	store_copy(res, row, base + COL_OWNER, call->owner, sizeof(call->owner));
	store_copy(res, row, base + COL_TOOL, call->tool, sizeof(call->tool));
	store_copy(res, row, base + COL_ARGS_SHA256, call->args_sha256, sizeof(call->args_sha256));
	call->tool_dedupes = store_bool(res, row, base + COL_DEDUPES);
	call->lease_ms_left = store_int(res, row, base + COL_LEASE_LEFT);
	if (call->state == LEDGER_CALL_IN_PROGRESS && call->lease_ms_left <= 0)
		call->state = LEDGER_CALL_UNKNOWN;
	call->completed_token = store_int(res, row, base + COL_COMPLETED_TOKEN);
	call->completed_by = parse_completed_by(PQgetvalue(res, row, base + COL_COMPLETED_BY));
	store_copy(res, row, base + COL_CREATED_AT, call->created_at, sizeof(call->created_at));
	store_copy(res, row, base + COL_COMPLETED_AT, call->completed_at,
		   sizeof(call->completed_at));
	if (!PQgetisnull(res, row, base + COL_RESULT)) {
		call->result = store_dup(res, row, base + COL_RESULT, &call->result_len);
		if (call->result == NULL)
			return LEDGER_ERR_NOMEM;
	}
	if (!PQgetisnull(res, row, base + COL_ARGS)) {
		call->args = store_dup(res, row, base + COL_ARGS, &call->args_len);
		if (call->args == NULL)
			return LEDGER_ERR_NOMEM;
	}
	return LEDGER_OK;
}

/* --- events --- */

struct event {
	const char *type;       /* "claimed", "completed", "refused", ... */
	const char *attempt_id; /* NULL: none */
	struct ledger_buf detail;
	struct ledger_jsonw w; /* writes into detail; the object is left open */
};

static void event_start(struct event *ev, const char *type, const char *attempt_id)
{
	memset(ev, 0, sizeof(*ev));
	ev->type = type;
	ev->attempt_id = attempt_id != NULL && attempt_id[0] != '\0' ? attempt_id : NULL;
	ledger_jsonw_init(&ev->w, &ev->detail);
	ledger_jsonw_object_begin(&ev->w);
}

static void event_refused(struct event *ev, const char *operation, const char *code,
			  const char *attempt_id)
{
	event_start(ev, "refused", attempt_id);
	ledger_jsonw_key(&ev->w, "operation");
	ledger_jsonw_string(&ev->w, operation);
	ledger_jsonw_key(&ev->w, "code");
	ledger_jsonw_string(&ev->w, code);
}

static void event_int(struct event *ev, const char *key, int64_t v)
{
	ledger_jsonw_key(&ev->w, key);
	ledger_jsonw_int(&ev->w, v);
}

/* Writes @p s, or nothing when it is NULL or empty. */
static void event_str(struct event *ev, const char *key, const char *s)
{
	if (s == NULL || s[0] == '\0')
		return;
	ledger_jsonw_key(&ev->w, key);
	ledger_jsonw_string(&ev->w, s);
}

static void event_free(struct event *ev)
{
	ledger_buf_free(&ev->detail);
}

/* Queues the event's INSERT into @p st. @p ev must outlive the step. */
static void event_add(struct store_step *st, const struct ledger_call_key *key, struct event *ev)
{
	const char *params[6];

	ledger_jsonw_object_end(&ev->w);
	params[0] = key->tenant;
	params[1] = key->request_id;
	params[2] = ev->type;
	params[3] = ev->attempt_id;
	params[4] = key->tool_call_id;
	params[5] = ev->detail.oom ? "{}" : ev->detail.data;
	store_step_add(st, &event_insert, params);
}

/* --- the general path's frame --- */

struct locked {
	bool created;        /* this transaction created the request's row */
	bool request_exists; /* the request's row exists (now locked) */
	int64_t attempts;    /* the request's attempt count */
};

/*
 * Opens a transaction, locks the request (creating it when @p create) and
 * reads the call after the lock. On LEDGER_OK the transaction stays open:
 * finish it with commit_step() or store_abort().
 */
static enum ledger_err lock_and_read(struct ledger_store_conn *conn,
				     const struct ledger_call_key *key, bool create,
				     struct locked *lk, struct ledger_call *call)
{
	const char *params[3] = {key->tenant, key->request_id, key->tool_call_id};
	struct store_step st;
	enum ledger_err rc;

	memset(lk, 0, sizeof(*lk));
	store_step_begin(&st, conn);
	store_step_add_simple(&st, "BEGIN");
	store_step_add(&st, create ? &lock_request : &lock_existing, params);
	store_step_add(&st, &read_call, params);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	if (PQntuples(st.res[1]) == 1) {
		lk->request_exists = true;
		lk->attempts = store_int(st.res[1], 0, 0);
		lk->created = store_bool(st.res[1], 0, 1);
	} else if (create) {
		/*
		 * Another transaction created the request after this statement's
		 * snapshot was taken: it is committed now, so trying again sees it.
		 */
		store_abort(conn);
		rc = LEDGER_ERR_CONFLICT;
		goto out;
	}
	rc = parse_call(st.res[2], 0, 0, call);
	if (rc != LEDGER_OK)
		store_abort(conn);
out:
	store_step_clear(&st);
	return rc;
}

/* Runs the statements queued in @p st (writes, events), then COMMIT. */
static enum ledger_err commit_step(struct store_step *st)
{
	enum ledger_err rc;

	store_step_add_simple(st, "COMMIT");
	rc = store_step_run(st);
	return rc;
}

/* Ends a transaction that wrote nothing. */
static enum ledger_err rollback(struct ledger_store_conn *conn)
{
	store_abort(conn);
	return conn->pg != NULL ? LEDGER_OK : LEDGER_ERR_UNAVAILABLE;
}

/* Retries @p op on serialization failures and deadlocks: every op is idempotent. */
#define MAX_TRIES 3

static void fmt_int(char buf[24], int64_t v)
{
	snprintf(buf, 24, "%lld", (long long)v);
}

/* --- claim --- */

static void claimed_detail(struct event *ev, const struct ledger_claim *c, int64_t token,
			   const char *from)
{
	event_int(ev, "fencing_token", token);
	event_int(ev, "lease_ms", c->lease_ms);
	event_str(ev, "tool", c->tool);
	event_str(ev, "args_sha256", c->args_sha256);
	event_str(ev, "owner", c->owner);
	if (c->tool_dedupes) {
		ledger_jsonw_key(&ev->w, "tool_dedupes");
		ledger_jsonw_bool(&ev->w, true);
	}
	event_str(ev, "previous_state", from);
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
static enum ledger_err claim_fast_path(struct ledger_store_conn *conn,
				       const struct ledger_call_key *key,
				       const struct ledger_claim_request *req,
				       struct ledger_call_result *out, bool *done)
{
	const struct ledger_claim *c = &req->claim;
	char lease[24];
	const char *params[11];
	struct store_step st;
	struct event ev;
	enum ledger_err rc;

	*done = false;
	fmt_int(lease, c->lease_ms);
	event_start(&ev, "claimed", NULL);
	claimed_detail(&ev, c, 1, NULL);
	ledger_jsonw_object_end(&ev.w);
	params[0] = key->tenant;
	params[1] = key->request_id;
	params[2] = key->tool_call_id;
	params[3] = c->tool;
	params[4] = c->args_sha256;
	params[5] = req->args;
	params[6] = c->tool_dedupes ? "true" : "false";
	params[7] = c->claim_id;
	params[8] = c->owner;
	params[9] = lease;
	params[10] = ev.detail.oom ? "{}" : ev.detail.data;

	store_step_begin(&st, conn);
	store_step_add(&st, &claim_fast, params);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	if (PQntuples(st.res[0]) != 1) {
		rc = LEDGER_ERR_INTERNAL;
		goto out;
	}
	if (store_int(st.res[0], 0, 0) == 1) {
		out->outcome.claim = LEDGER_CLAIM_NEW;
		set_claimed(&out->call, c, 1);
		*done = true;
		goto out;
	}
	rc = parse_call(st.res[0], 0, 2, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	/*
	 * A settled call and a tombstone never change (but for retention), so
	 * the snapshot is as good as a locked read for answering them. What
	 * else the snapshot shows may be stale: the general path decides it.
	 */
	if (out->call.state == LEDGER_CALL_SUCCEEDED || out->call.state == LEDGER_CALL_FAILED ||
	    out->call.state == LEDGER_CALL_TOMBSTONE) {
		bool has_attempts = store_int(st.res[0], 0, 1) > 0;
		enum ledger_claim_outcome o = ledger_decide_claim(
			c, &out->call, has_attempts, LEDGER_ATTEMPT_NOT_GIVEN, &out->mismatch);
		if (o == LEDGER_CLAIM_REPLAY || o == LEDGER_CLAIM_RESULT_EXPIRED) {
			out->outcome.claim = o;
			*done = true;
		}
	}
out:
	store_step_clear(&st);
	event_free(&ev);
	return rc;
}

static enum ledger_err claim_locked(struct ledger_store_conn *conn,
				    const struct ledger_call_key *key,
				    const struct ledger_claim_request *req,
				    struct ledger_call_result *out)
{
	const struct ledger_claim *c = &req->claim;
	enum ledger_attempt_standing attempt = LEDGER_ATTEMPT_NOT_GIVEN;
	enum ledger_claim_outcome o;
	struct locked lk;
	struct store_step st;
	struct event ev;
	char lease[24], token[24];
	const char *from = NULL;
	enum ledger_err rc;

	memset(&ev, 0, sizeof(ev));
	store_step_begin(&st, conn);
	rc = lock_and_read(conn, key, true, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	/* Attempts come with the router integration: none exists yet. */
	if (c->attempt_id != NULL)
		attempt = LEDGER_ATTEMPT_NOT_FOUND;
	o = ledger_decide_claim(c, &out->call, lk.attempts > 0, attempt, &out->mismatch);
	out->outcome.claim = o;
	fmt_int(lease, c->lease_ms);

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
		event_start(&ev, "claimed", c->attempt_id);
		claimed_detail(&ev, c, 1, NULL);
		store_step_add(&st, &call_insert, params);
		event_add(&st, key, &ev);
		rc = commit_step(&st);
		if (rc == LEDGER_OK)
			set_claimed(&out->call, c, 1);
		break;
	}
	case LEDGER_CLAIM_RECLAIM: {
		int64_t next = out->call.fencing_token + 1;
		const char *params[9] = {key->tenant, key->request_id, key->tool_call_id,
					 token,       c->claim_id,     c->attempt_id,
					 c->owner,    req->args,       lease};
		fmt_int(token, out->call.fencing_token);
		from = ledger_call_state_name(out->call.state);
		event_start(&ev, "claimed", c->attempt_id);
		claimed_detail(&ev, c, next, from);
		store_step_add(&st, &call_reclaim, params);
		event_add(&st, key, &ev);
		rc = commit_step(&st);
		if (rc == LEDGER_OK)
			set_claimed(&out->call, c, next);
		break;
	}
	case LEDGER_CLAIM_HELD:
	case LEDGER_CLAIM_REPLAY:
	case LEDGER_CLAIM_RESULT_EXPIRED:
		rc = rollback(conn);
		break;
	case LEDGER_CLAIM_ATTEMPT_NOT_FOUND:
	case LEDGER_CLAIM_ATTEMPT_REQUIRED:
	case LEDGER_CLAIM_ARGS_MISMATCH:
	case LEDGER_CLAIM_ATTEMPT_FENCED:
	case LEDGER_CLAIM_IN_PROGRESS:
	case LEDGER_CLAIM_OUTCOME_UNKNOWN:
		/* A request this refusal would create has no history to add to. */
		if (lk.created) {
			rc = rollback(conn);
			break;
		}
		event_refused(&ev, "claim", ledger_claim_code(o), c->attempt_id);
		if (o == LEDGER_CLAIM_ARGS_MISMATCH) {
			event_str(&ev, "field", out->mismatch);
			event_str(&ev, "expected_args_sha256", out->call.args_sha256);
			event_str(&ev, "got_args_sha256", c->args_sha256);
		}
		if (o == LEDGER_CLAIM_IN_PROGRESS) {
			event_int(&ev, "fencing_token", out->call.fencing_token);
			event_str(&ev, "holder_attempt_id", out->call.attempt_id);
			event_str(&ev, "holder_owner", out->call.owner);
		}
		event_str(&ev, "owner", c->owner);
		event_add(&st, key, &ev);
		rc = commit_step(&st);
		break;
	}
out:
	store_step_clear(&st);
	event_free(&ev);
	return rc;
}

enum ledger_err ledger_store_claim(struct ledger_store_conn *conn,
				   const struct ledger_call_key *key,
				   const struct ledger_claim_request *req,
				   struct ledger_call_result *out)
{
	enum ledger_err rc;
	bool done = false;

	memset(out, 0, sizeof(*out));
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	if (req->claim.attempt_id == NULL) {
		rc = claim_fast_path(conn, key, req, out, &done);
		if (rc != LEDGER_OK || done)
			return rc;
	}
	for (int i = 0;; i++) {
		ledger_call_clear(&out->call);
		rc = claim_locked(conn, key, req, out);
		if (rc != LEDGER_ERR_CONFLICT || i + 1 == MAX_TRIES)
			return rc;
	}
}

/* --- complete --- */

static void completion_detail(struct event *ev, const struct ledger_completion *c)
{
	ledger_jsonw_key(&ev->w, "outcome");
	ledger_jsonw_string(&ev->w, c->succeeded ? "succeeded" : "failed");
	if (c->retryable) {
		ledger_jsonw_key(&ev->w, "retryable");
		ledger_jsonw_bool(&ev->w, true);
	}
	event_int(ev, "fencing_token", c->fencing_token);
}

/* The call as the holder sees it after its completion was stored. */
static enum ledger_err set_completed(struct ledger_call *call, const struct ledger_completion *c,
				     const PGresult *res, int col, enum ledger_completed_by by)
{
	call->state = c->succeeded ? LEDGER_CALL_SUCCEEDED : LEDGER_CALL_FAILED;
	call->completed_token = c->fencing_token;
	call->completed_by = by;
	call->lease_ms_left = 0;
	store_copy(res, 0, col, call->completed_at, sizeof(call->completed_at));
	free(call->result);
	call->result = malloc(c->result_len + 1);
	if (call->result == NULL)
		return LEDGER_ERR_NOMEM;
	memcpy(call->result, c->result, c->result_len);
	call->result[c->result_len] = '\0';
	call->result_len = c->result_len;
	return LEDGER_OK;
}

static enum ledger_err complete_fast_path(struct ledger_store_conn *conn,
					  const struct ledger_call_key *key,
					  const struct ledger_completion *c,
					  struct ledger_call_result *out, bool *done)
{
	char token[24];
	const char *params[8];
	struct store_step st;
	struct event ev;
	enum ledger_err rc;

	*done = false;
	fmt_int(token, c->fencing_token);
	event_start(&ev, NULL, NULL);
	completion_detail(&ev, c);
	ledger_jsonw_object_end(&ev.w);
	params[0] = key->tenant;
	params[1] = key->request_id;
	params[2] = key->tool_call_id;
	params[3] = token;
	params[4] = c->succeeded ? "succeeded" : "failed";
	params[5] = c->retryable ? "true" : "false";
	params[6] = c->retryable ? NULL : c->result;
	params[7] = ev.detail.oom ? "{}" : ev.detail.data;

	store_step_begin(&st, conn);
	store_step_add(&st, &complete_fast, params);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK || PQntuples(st.res[0]) != 1)
		goto out;
	*done = true;
	ledger_call_clear(&out->call);
	out->call.fencing_token = c->fencing_token;
	store_copy(st.res[0], 0, 0, out->call.attempt_id, sizeof(out->call.attempt_id));
	if (c->retryable) {
		out->outcome.complete = LEDGER_COMPLETE_RELEASED;
		out->call.state = LEDGER_CALL_RELEASED;
	} else {
		out->outcome.complete = LEDGER_COMPLETE_STORED;
		rc = set_completed(&out->call, c, st.res[0], 1, LEDGER_COMPLETED_HOLDER);
	}
out:
	store_step_clear(&st);
	event_free(&ev);
	return rc;
}

static enum ledger_err complete_locked(struct ledger_store_conn *conn,
				       const struct ledger_call_key *key,
				       const struct ledger_completion *c,
				       struct ledger_call_result *out)
{
	enum ledger_complete_outcome o;
	struct locked lk;
	struct store_step st;
	struct event ev;
	char read_token[24], given[24];
	enum ledger_err rc;

	memset(&ev, 0, sizeof(ev));
	store_step_begin(&st, conn);
	rc = lock_and_read(conn, key, false, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	o = ledger_decide_complete(c, &out->call);
	out->outcome.complete = o;
	fmt_int(read_token, out->call.fencing_token);
	fmt_int(given, c->fencing_token);

	switch (o) {
	case LEDGER_COMPLETE_NOT_FOUND:
	case LEDGER_COMPLETE_RESULT_EXPIRED:
	case LEDGER_COMPLETE_REPEATED:
		rc = rollback(conn);
		break;
	case LEDGER_COMPLETE_STALE_TOKEN:
	case LEDGER_COMPLETE_ALREADY_COMPLETED:
		event_refused(&ev, "complete", ledger_complete_code(o), out->call.attempt_id);
		completion_detail(&ev, c);
		event_int(&ev, "current_token", out->call.fencing_token);
		event_add(&st, key, &ev);
		rc = commit_step(&st);
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
					 completed_by_name(by),
					 read_token};
		event_start(&ev, o == LEDGER_COMPLETE_STORED ? "completed" : "late_completion",
			    out->call.attempt_id);
		completion_detail(&ev, c);
		if (o == LEDGER_COMPLETE_LATE) {
			event_int(&ev, "current_token", out->call.fencing_token);
			event_str(&ev, "previous_state", ledger_call_state_name(out->call.state));
		}
		store_step_add(&st, &call_settle, params);
		event_add(&st, key, &ev);
		rc = commit_step(&st);
		if (rc == LEDGER_OK)
			rc = set_completed(&out->call, c, st.res[0], 0, by);
		break;
	}
	case LEDGER_COMPLETE_RELEASED: {
		const char *params[5] = {key->tenant, key->request_id, key->tool_call_id,
					 read_token, read_token};
		event_start(&ev, "released", out->call.attempt_id);
		completion_detail(&ev, c);
		store_step_add(&st, &call_release, params);
		event_add(&st, key, &ev);
		rc = commit_step(&st);
		if (rc == LEDGER_OK)
			out->call.state = LEDGER_CALL_RELEASED;
		break;
	}
	}
out:
	store_step_clear(&st);
	event_free(&ev);
	return rc;
}

enum ledger_err ledger_store_complete(struct ledger_store_conn *conn,
				      const struct ledger_call_key *key,
				      const struct ledger_completion *c,
				      struct ledger_call_result *out)
{
	enum ledger_err rc;
	bool done = false;

	memset(out, 0, sizeof(*out));
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	rc = complete_fast_path(conn, key, c, out, &done);
	if (rc != LEDGER_OK || done)
		return rc;
	for (int i = 0;; i++) {
		ledger_call_clear(&out->call);
		rc = complete_locked(conn, key, c, out);
		if (rc != LEDGER_ERR_CONFLICT || i + 1 == MAX_TRIES)
			return rc;
	}
}

/* --- renew --- */

static enum ledger_err renew_once(struct ledger_store_conn *conn, const struct ledger_call_key *key,
				  int64_t fencing_token, int64_t lease_ms,
				  struct ledger_call_result *out)
{
	char token[24], lease[24];
	const char *params[5] = {key->tenant, key->request_id, key->tool_call_id, token, lease};
	enum ledger_attempt_standing attempt = LEDGER_ATTEMPT_NOT_GIVEN;
	enum ledger_renew_outcome o;
	struct locked lk;
	struct store_step st;
	struct event ev;
	enum ledger_err rc;

	memset(&ev, 0, sizeof(ev));
	fmt_int(token, fencing_token);
	fmt_int(lease, lease_ms);
	store_step_begin(&st, conn);

	store_step_add(&st, &renew_fast, params);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	if (store_int(st.res[0], 0, 0) == 1) {
		out->outcome.renew = LEDGER_RENEW_RENEWED;
		out->call.state = LEDGER_CALL_IN_PROGRESS;
		out->call.fencing_token = fencing_token;
		out->call.lease_ms_left = lease_ms;
		goto out;
	}
	store_step_clear(&st);

	rc = lock_and_read(conn, key, false, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	/* A claim made under an attempt is fenced with it: none exists yet. */
	if (out->call.attempt_id[0] != '\0')
		attempt = LEDGER_ATTEMPT_NOT_FOUND;
	o = ledger_decide_renew(fencing_token, &out->call, attempt);
	out->outcome.renew = o;
	switch (o) {
	case LEDGER_RENEW_NOT_FOUND:
	case LEDGER_RENEW_RESULT_EXPIRED:
		rc = rollback(conn);
		break;
	case LEDGER_RENEW_STALE_TOKEN:
	case LEDGER_RENEW_ATTEMPT_FENCED:
	case LEDGER_RENEW_OUTCOME_UNKNOWN:
		event_refused(&ev, "renew", ledger_renew_code(o), out->call.attempt_id);
		event_int(&ev, "fencing_token", fencing_token);
		event_int(&ev, "current_token", out->call.fencing_token);
		event_add(&st, key, &ev);
		rc = commit_step(&st);
		break;
	case LEDGER_RENEW_RENEWED:
		store_step_add(&st, &call_renew, params);
		rc = commit_step(&st);
		out->call.lease_ms_left = lease_ms;
		break;
	}
out:
	store_step_clear(&st);
	event_free(&ev);
	return rc;
}

enum ledger_err ledger_store_renew(struct ledger_store_conn *conn,
				   const struct ledger_call_key *key, int64_t fencing_token,
				   int64_t lease_ms, struct ledger_call_result *out)
{
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	for (int i = 0;; i++) {
		ledger_call_clear(&out->call);
		rc = renew_once(conn, key, fencing_token, lease_ms, out);
		if (rc != LEDGER_ERR_CONFLICT || i + 1 == MAX_TRIES)
			return rc;
	}
}

/* --- release --- */

static enum ledger_err release_once(struct ledger_store_conn *conn,
				    const struct ledger_call_key *key, int64_t fencing_token,
				    const char *reason, struct ledger_call_result *out)
{
	char token[24];
	const char *params[5] = {key->tenant, key->request_id, key->tool_call_id, token, token};
	enum ledger_release_outcome o;
	struct locked lk;
	struct store_step st;
	struct event ev;
	enum ledger_err rc;

	memset(&ev, 0, sizeof(ev));
	fmt_int(token, fencing_token);
	store_step_begin(&st, conn);
	rc = lock_and_read(conn, key, false, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	o = ledger_decide_release(fencing_token, &out->call);
	out->outcome.release = o;
	switch (o) {
	case LEDGER_RELEASE_NOT_FOUND:
	case LEDGER_RELEASE_RESULT_EXPIRED:
	case LEDGER_RELEASE_REPEATED:
		rc = rollback(conn);
		break;
	case LEDGER_RELEASE_STALE_TOKEN:
		event_refused(&ev, "release", ledger_release_code(o), out->call.attempt_id);
		event_int(&ev, "fencing_token", fencing_token);
		event_int(&ev, "current_token", out->call.fencing_token);
		event_add(&st, key, &ev);
		rc = commit_step(&st);
		break;
	case LEDGER_RELEASE_RELEASED:
		event_start(&ev, "released", out->call.attempt_id);
		event_int(&ev, "fencing_token", fencing_token);
		event_str(&ev, "reason", reason);
		store_step_add(&st, &call_release, params);
		event_add(&st, key, &ev);
		rc = commit_step(&st);
		if (rc == LEDGER_OK)
			out->call.state = LEDGER_CALL_RELEASED;
		break;
	}
out:
	store_step_clear(&st);
	event_free(&ev);
	return rc;
}

enum ledger_err ledger_store_release(struct ledger_store_conn *conn,
				     const struct ledger_call_key *key, int64_t fencing_token,
				     const char *reason, struct ledger_call_result *out)
{
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	for (int i = 0;; i++) {
		ledger_call_clear(&out->call);
		rc = release_once(conn, key, fencing_token, reason, out);
		if (rc != LEDGER_ERR_CONFLICT || i + 1 == MAX_TRIES)
			return rc;
	}
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

static enum ledger_err resolve_once(struct ledger_store_conn *conn,
				    const struct ledger_call_key *key,
				    enum ledger_resolution resolution, const char *result,
				    size_t result_len, const char *note,
				    struct ledger_call_result *out)
{
	char read_token[24], next_token[24];
	enum ledger_resolve_outcome o;
	enum ledger_call_state previous;
	struct locked lk;
	struct store_step st;
	struct event ev;
	enum ledger_err rc;

	memset(&ev, 0, sizeof(ev));
	store_step_begin(&st, conn);
	rc = lock_and_read(conn, key, false, &lk, &out->call);
	if (rc != LEDGER_OK)
		goto out;
	o = ledger_decide_resolve(resolution, result, result_len, &out->call);
	out->outcome.resolve = o;
	previous = out->call.state;
	fmt_int(read_token, out->call.fencing_token);
	/* Whoever held the call is revoked: the next holder gets a higher token. */
	fmt_int(next_token, out->call.fencing_token + 1);

	switch (o) {
	case LEDGER_RESOLVE_NOT_FOUND:
	case LEDGER_RESOLVE_RESULT_EXPIRED:
	case LEDGER_RESOLVE_REPEATED:
		rc = rollback(conn);
		break;
	case LEDGER_RESOLVE_ALREADY_COMPLETED:
		event_refused(&ev, "resolve", ledger_resolve_code(o), NULL);
		event_str(&ev, "resolution", resolution_name(resolution));
		event_add(&st, key, &ev);
		rc = commit_step(&st);
		break;
	case LEDGER_RESOLVE_SETTLED:
		event_start(&ev, "resolved", NULL);
		event_str(&ev, "resolution", resolution_name(resolution));
		event_str(&ev, "previous_state", ledger_call_state_name(previous));
		event_int(&ev, "fencing_token", out->call.fencing_token + 1);
		event_str(&ev, "note", note);
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
		event_add(&st, key, &ev);
		rc = commit_step(&st);
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
			rc = set_completed(&out->call, &as, st.res[0], 0, LEDGER_COMPLETED_RESOLVE);
		}
		break;
	}
out:
	store_step_clear(&st);
	event_free(&ev);
	return rc;
}

enum ledger_err ledger_store_resolve(struct ledger_store_conn *conn,
				     const struct ledger_call_key *key,
				     enum ledger_resolution resolution, const char *result,
				     size_t result_len, const char *note,
				     struct ledger_call_result *out)
{
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	for (int i = 0;; i++) {
		ledger_call_clear(&out->call);
		rc = resolve_once(conn, key, resolution, result, result_len, note, out);
		if (rc != LEDGER_ERR_CONFLICT || i + 1 == MAX_TRIES)
			return rc;
	}
}

/* --- reads --- */

enum ledger_err ledger_store_get_call(struct ledger_store_conn *conn,
				      const struct ledger_call_key *key, struct ledger_call *out)
{
	const char *params[3] = {key->tenant, key->request_id, key->tool_call_id};
	struct store_step st;
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	store_step_begin(&st, conn);
	store_step_add(&st, &read_call, params);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK)
		rc = parse_call(st.res[0], 0, 0, out);
	store_step_clear(&st);
	return rc;
}

void ledger_store_free_list(struct ledger_listed_call *items, size_t count)
{
	if (items == NULL)
		return;
	for (size_t i = 0; i < count; i++)
		ledger_call_clear(&items[i].call);
	free(items);
}

enum ledger_err ledger_store_list_calls(struct ledger_store_conn *conn, const char *tenant,
					enum ledger_call_state state, const char *after_request_id,
					const char *after_tool_call_id, unsigned limit,
					struct ledger_listed_call **items_out, size_t *count_out)
{
	char lim[24];
	const char *params[5] = {tenant, after_request_id, after_tool_call_id, lim, NULL};
	const struct store_stmt *stmt = &list_any;
	struct ledger_listed_call *items = NULL;
	struct store_step st;
	enum ledger_err rc;
	int n;

	*items_out = NULL;
	*count_out = 0;
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	fmt_int(lim, limit);
	if (state == LEDGER_CALL_IN_PROGRESS || state == LEDGER_CALL_UNKNOWN) {
		stmt = &list_open;
		params[4] = state == LEDGER_CALL_UNKNOWN ? "true" : "false";
	} else if (state != LEDGER_CALL_ABSENT) {
		params[4] = ledger_call_state_name(state);
	}
	store_step_begin(&st, conn);
	store_step_add(&st, stmt, params);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	n = PQntuples(st.res[0]);
	items = calloc((size_t)n + 1, sizeof(*items));
	if (items == NULL) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		store_copy(st.res[0], i, 0, items[i].request_id, sizeof(items[i].request_id));
		store_copy(st.res[0], i, 1, items[i].tool_call_id, sizeof(items[i].tool_call_id));
		rc = parse_call(st.res[0], i, 2, &items[i].call);
		if (rc != LEDGER_OK) {
			ledger_store_free_list(items, (size_t)n);
			items = NULL;
			goto out;
		}
	}
	*items_out = items;
	*count_out = (size_t)n;
out:
	store_step_clear(&st);
	return rc;
}
