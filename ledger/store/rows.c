/*
 * ledger/store/rows.c: what every tool-call transaction of the store is
 * made of: locking the request and reading the call after the lock, the
 * call's row, the events written with each change, and retries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/log.h"
#include "ledger/store/rows.h"

#include "ledger/store/statements.h"

/* What a request's read under its lock left in an attempt's result (rows of this file). */
void ledger_store_attempt_result_clear(struct ledger_attempt_result *r)
{
	if (r == NULL)
		return;
	free(r->client_error);
	free(r->settled);
	memset(r, 0, sizeof(*r));
}

/* clang-format off */
const struct store_stmt store_rows_lock_request = {
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

const struct store_stmt store_rows_lock_existing = {
	"lock_existing",
	"SELECT attempt_count, false FROM requests"
	" WHERE tenant = $1 AND request_id = $2 FOR UPDATE",
	2,
};

const struct store_stmt store_rows_read_call = {
	"read_call",
	"SELECT " STORE_CALL_COLUMNS STORE_CALL_FROM,
	3,
};

const struct store_stmt store_rows_read_request = {
	"read_request",
	"SELECT " STORE_REQUEST_COLUMNS " FROM requests WHERE tenant = $1 AND request_id = $2",
	2,
};

/*
 * The attempts $3 and $4 name, the one call $5 was claimed under, and the
 * newest, each once, flagged by what it is; leases on the clock read now.
 */
const struct store_stmt store_rows_read_attempts = {
	"read_attempts",
	"WITH newest AS (SELECT max(epoch) AS epoch FROM attempts"
	"  WHERE tenant = $1 AND request_id = $2),"
	" of_call AS (SELECT attempt_id FROM tool_calls"
	"  WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $5)"
	" SELECT " STORE_ATTEMPT_COLUMNS ","
	"  coalesce(a.attempt_id = $3, false), coalesce(a.attempt_id = $4, false),"
	"  coalesce(a.attempt_id = (SELECT attempt_id FROM of_call), false),"
	"  a.epoch = (SELECT epoch FROM newest)"
	" FROM (SELECT clock_timestamp() AS t) now_"
	" JOIN attempts a ON a.tenant = $1 AND a.request_id = $2"
	"  AND (a.attempt_id = $3 OR a.attempt_id = $4"
	"       OR a.attempt_id = (SELECT attempt_id FROM of_call)"
	"       OR a.epoch = (SELECT epoch FROM newest))",
	5,
};

/* The request's after-image, as the C code decided it. */
static const struct store_stmt request_set = {
	"request_set",
	"UPDATE requests SET status = $3, first_delta_sent = $4::boolean,"
	"  phase = CASE WHEN $4::boolean THEN 'decode' ELSE 'prefill' END,"
	"  delivered_output_tokens = $5::bigint, attempt_count = $6::integer,"
	"  max_attempts = nullif($7::integer, 0), model_revision = $8, client_error = $9,"
	"  input_sha256 = $10,"
	"  closed_at = CASE WHEN $3 = 'open' THEN NULL ELSE coalesce(closed_at, clock_timestamp()) END"
	" WHERE tenant = $1 AND request_id = $2",
	10,
};

static const struct store_stmt attempt_set = {
	"attempt_set",
	"UPDATE attempts SET state = $4,"
	"  lease_until = CASE WHEN $5::bigint > 0"
	"    THEN " STORE_LEASE_FROM("clock_timestamp()", "$5") " ELSE lease_until END,"
	"  delivered_output_tokens = greatest(delivered_output_tokens, $6::bigint),"
	"  outcome = coalesce($7, outcome),"
	"  ended_at = CASE WHEN $4 = 'live' THEN NULL ELSE coalesce(ended_at, clock_timestamp()) END"
	" WHERE tenant = $1 AND request_id = $2 AND attempt_id = $3",
	7,
};

/* Held calls of the newest attempt, and unknown outcomes of non-deduping tools. */
static const struct store_stmt calls_summary = {
	"calls_summary",
	"SELECT coalesce(max(CASE WHEN c.state = 'in_progress' AND c.lease_until > now_.t"
	"    AND c.attempt_id = n.attempt_id"
	"    THEN ceil(extract(epoch FROM c.lease_until - now_.t) * 1000)::bigint END), 0),"
	"  count(*) FILTER (WHERE c.state = 'in_progress' AND c.lease_until <= now_.t"
	"    AND NOT c.tool_dedupes)"
	" FROM (SELECT clock_timestamp() AS t) now_"
	" LEFT JOIN (SELECT attempt_id FROM attempts WHERE tenant = $1 AND request_id = $2"
	"   ORDER BY epoch DESC LIMIT 1) n ON true"
	" LEFT JOIN tool_calls c ON c.tenant = $1 AND c.request_id = $2",
	2,
};

static const struct store_stmt budget_lock = {
	"budget_lock",
	"SELECT pg_advisory_xact_lock(hashtextextended('ledgerd.retry_budget.' || $1, 0))",
	1,
};

static const struct store_stmt budget_count = {
	"budget_count",
	"SELECT count(*), count(*) FILTER (WHERE is_retry) FROM attempts"
	" WHERE tenant = $1 AND created_at > clock_timestamp() - $2::bigint * interval '1 millisecond'",
	2,
};

/*
 * The window's retries in the order they leave it (the earliest first), each
 * with the window's attempts and retries once it has left (every attempt
 * created no later than it gone too): what
 * ledger_attempt_budget_retry_after() reads. $2 the window in ms, $3 at most
 * this many rows.
 */
static const struct store_stmt budget_drops = {
	"budget_drops",
	"SELECT in_ms, total - gone, total_retries - gone_retries FROM ("
	"  SELECT a.is_retry,"
	"    greatest(1, ceil(extract(epoch FROM a.created_at + $2::bigint * interval '1 millisecond'"
	"      - now_.t) * 1000))::bigint AS in_ms,"
	"    count(*) OVER w AS gone, count(*) FILTER (WHERE a.is_retry) OVER w AS gone_retries,"
	"    count(*) OVER () AS total, count(*) FILTER (WHERE a.is_retry) OVER () AS total_retries"
	"  FROM (SELECT clock_timestamp() AS t) now_"
	"  JOIN attempts a ON a.tenant = $1"
	"   AND a.created_at > now_.t - $2::bigint * interval '1 millisecond'"
	"  WINDOW w AS (ORDER BY a.created_at RANGE UNBOUNDED PRECEDING)"
	") s WHERE is_retry ORDER BY in_ms LIMIT $3::integer",
	3,
};

static const struct store_stmt attempt_insert = {
	"attempt_insert",
	"INSERT INTO attempts (tenant, request_id, attempt_id, epoch, replica, model_revision,"
	"  revision_given, state, lease_until, is_retry, gateway)"
	" VALUES ($1, $2, $3, $4::integer, $5, $6, $7::boolean, 'live', "
	STORE_LEASE_FROM("clock_timestamp()", "$8") ", $9::boolean, $10)"
	" RETURNING " STORE_TS("created_at"),
	10,
};

const struct store_stmt store_rows_settled_calls = {
	"settled_calls",
	"SELECT tool_call_id, tool, args_sha256, state FROM tool_calls"
	" WHERE tenant = $1 AND request_id = $2 AND state IN ('succeeded', 'failed')"
	" ORDER BY tool_call_id",
	2,
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

const char *store_rows_completed_by_name(enum ledger_completed_by by)
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
 * Fills @p call from STORE_CALL_COLUMNS starting at column @p base of @p row,
 * deriving UNKNOWN from a lease that ran out.
 */
enum ledger_err store_rows_parse_call(const PGresult *res, int row, int base,
				      struct ledger_call *call)
{
	ledger_call_clear(call);
	if (PQgetisnull(res, row, base + STORE_COL_STATE)) {
		if (PQgetisnull(res, row, base + STORE_COL_TOMB_OUTCOME))
			return LEDGER_OK;
		call->state = LEDGER_CALL_TOMBSTONE;
		store_step_get_text(res, row, base + STORE_COL_TOMB_ARGS, call->args_sha256,
				    sizeof(call->args_sha256));
		store_step_get_text(res, row, base + STORE_COL_TOMB_COMPLETED_AT,
				    call->completed_at, sizeof(call->completed_at));
		call->settled_as = strcmp(PQgetvalue(res, row, base + STORE_COL_TOMB_OUTCOME),
					  "succeeded") == 0
					   ? LEDGER_CALL_SUCCEEDED
					   : LEDGER_CALL_FAILED;
		return LEDGER_OK;
	}
	call->state = parse_state(PQgetvalue(res, row, base + STORE_COL_STATE));
	call->fencing_token = store_step_get_int(res, row, base + STORE_COL_TOKEN);
	store_step_get_text(res, row, base + STORE_COL_CLAIM_ID, call->claim_id,
			    sizeof(call->claim_id));
	store_step_get_text(res, row, base + STORE_COL_ATTEMPT_ID, call->attempt_id,
			    sizeof(call->attempt_id));
	store_step_get_text(res, row, base + STORE_COL_OWNER, call->owner, sizeof(call->owner));
	store_step_get_text(res, row, base + STORE_COL_TOOL, call->tool, sizeof(call->tool));
	store_step_get_text(res, row, base + STORE_COL_ARGS_SHA256, call->args_sha256,
			    sizeof(call->args_sha256));
	call->tool_dedupes = store_step_get_bool(res, row, base + STORE_COL_DEDUPES);
	call->lease_ms_left = store_step_get_int(res, row, base + STORE_COL_LEASE_LEFT);
	if (call->state == LEDGER_CALL_IN_PROGRESS && call->lease_ms_left <= 0)
		call->state = LEDGER_CALL_UNKNOWN;
	call->completed_token = store_step_get_int(res, row, base + STORE_COL_COMPLETED_TOKEN);
	call->completed_by =
		parse_completed_by(PQgetvalue(res, row, base + STORE_COL_COMPLETED_BY));
	store_step_get_text(res, row, base + STORE_COL_CREATED_AT, call->created_at,
			    sizeof(call->created_at));
	store_step_get_text(res, row, base + STORE_COL_COMPLETED_AT, call->completed_at,
			    sizeof(call->completed_at));
	if (!PQgetisnull(res, row, base + STORE_COL_RESULT)) {
		call->result =
			store_step_get_dup(res, row, base + STORE_COL_RESULT, &call->result_len);
		if (call->result == NULL)
			return LEDGER_ERR_NOMEM;
	}
	if (!PQgetisnull(res, row, base + STORE_COL_RESULT_SHA256)) {
		/* The table's checks: a final row, with its length, and no result. */
		LEDGER_ASSERT(call->result == NULL && (call->state == LEDGER_CALL_SUCCEEDED ||
						       call->state == LEDGER_CALL_FAILED));
		call->result_not_kept = true;
		call->result_digest.bytes =
			store_step_get_int(res, row, base + STORE_COL_RESULT_BYTES);
		store_step_get_text(res, row, base + STORE_COL_RESULT_SHA256,
				    call->result_digest.sha256, sizeof(call->result_digest.sha256));
	}
	if (!PQgetisnull(res, row, base + STORE_COL_ARGS)) {
		call->args = store_step_get_dup(res, row, base + STORE_COL_ARGS, &call->args_len);
		if (call->args == NULL)
			return LEDGER_ERR_NOMEM;
	}
	return LEDGER_OK;
}

/* --- the call a claim or a completion leaves --- */

/* The new holder's view of a call it just claimed. */
void store_rows_set_claimed(struct ledger_call *call, const struct ledger_claim *c, int64_t token)
{
	ledger_call_clear(call);
	call->state = LEDGER_CALL_IN_PROGRESS;
	call->fencing_token = token;
	call->lease_ms_left = c->lease_ms;
}

/* The call as the holder sees it after its completion was stored. */
enum ledger_err store_rows_set_completed(struct ledger_call *call,
					 const struct ledger_completion *c, const PGresult *res,
					 int row, int col, enum ledger_completed_by by)
{
	/* The write that stored it matched its row: under the lock, it must have. */
	LEDGER_ASSERT(row < PQntuples(res));
	call->state = c->succeeded ? LEDGER_CALL_SUCCEEDED : LEDGER_CALL_FAILED;
	call->completed_token = c->fencing_token;
	call->completed_by = by;
	call->lease_ms_left = 0;
	store_step_get_text(res, row, col, call->completed_at, sizeof(call->completed_at));
	free(call->result);
	call->result = NULL;
	call->result_len = 0;
	call->result_not_kept = c->result_not_kept;
	call->result_digest = c->result_digest;
	if (c->result_not_kept)
		return LEDGER_OK;
	call->result = malloc(c->result_len + 1);
	if (call->result == NULL)
		return LEDGER_ERR_NOMEM;
	memcpy(call->result, c->result, c->result_len);
	call->result[c->result_len] = '\0';
	call->result_len = c->result_len;
	return LEDGER_OK;
}

/* --- the general path's frame --- */

enum ledger_err store_rows_parse_request(const PGresult *res, int row, struct ledger_request *r,
					 char **client_error)
{
	return store_rows_parse_request_at(res, row, 0, r, client_error);
}

enum ledger_err store_rows_parse_request_at(const PGresult *res, int row, int base,
					    struct ledger_request *r, char **client_error)
{
	memset(r, 0, sizeof(*r));
	*client_error = NULL;
	if (row >= PQntuples(res))
		return LEDGER_OK;
	r->exists = true;
	if (ledger_attempt_request_status_parse(PQgetvalue(res, row, base), &r->status) != 0)
		abort(); /* the table's CHECK allows nothing else */
	r->first_delta_sent = store_step_get_bool(res, row, base + 1);
	r->delivered_output_tokens = store_step_get_int(res, row, base + 2);
	r->attempt_count = store_step_get_int(res, row, base + 3);
	r->max_attempts = store_step_get_int(res, row, base + 4);
	store_step_get_text(res, row, base + 5, r->model_revision, sizeof(r->model_revision));
	store_step_get_text(res, row, base + 7, r->created_at, sizeof(r->created_at));
	store_step_get_text(res, row, base + 8, r->input_sha256, sizeof(r->input_sha256));
	if (!PQgetisnull(res, row, base + 6)) {
		*client_error = store_step_get_dup(res, row, base + 6, NULL);
		if (*client_error == NULL)
			return LEDGER_ERR_NOMEM;
	}
	return LEDGER_OK;
}

void store_rows_parse_attempt(const PGresult *res, int row, struct ledger_attempt *a)
{
	memset(a, 0, sizeof(*a));
	a->exists = true;
	store_step_get_text(res, row, 0, a->attempt_id, sizeof(a->attempt_id));
	a->epoch = store_step_get_int(res, row, 1);
	store_step_get_text(res, row, 2, a->replica, sizeof(a->replica));
	store_step_get_text(res, row, 3, a->model_revision, sizeof(a->model_revision));
	a->revision_given = store_step_get_bool(res, row, 4);
	if (ledger_attempt_state_parse(PQgetvalue(res, row, 5), &a->state) != 0)
		abort(); /* the table's CHECK allows nothing else */
	a->lease_ms_left = store_step_get_int(res, row, 6);
	if (a->state == LEDGER_ATTEMPT_LIVE && a->lease_ms_left <= 0)
		a->state = LEDGER_ATTEMPT_EXPIRED;
	a->is_retry = store_step_get_bool(res, row, 7);
	a->delivered_output_tokens = store_step_get_int(res, row, 8);
	store_step_get_text(res, row, 9, a->created_at, sizeof(a->created_at));
	store_step_get_text(res, row, 10, a->gateway, sizeof(a->gateway));
}

enum ledger_err store_rows_parse_settled(const PGresult *res, struct ledger_settled_call **out,
					 size_t *n)
{
	int rows = PQntuples(res);

	*n = 0;
	*out = calloc((size_t)rows + 1, sizeof(**out));
	if (*out == NULL)
		return LEDGER_ERR_NOMEM;
	for (int i = 0; i < rows; i++) {
		struct ledger_settled_call *c = &(*out)[i];

		store_step_get_text(res, i, 0, c->tool_call_id, sizeof(c->tool_call_id));
		store_step_get_text(res, i, 1, c->tool, sizeof(c->tool));
		store_step_get_text(res, i, 2, c->args_sha256, sizeof(c->args_sha256));
		c->succeeded = strcmp(PQgetvalue(res, i, 3), "succeeded") == 0;
	}
	*n = (size_t)rows;
	return LEDGER_OK;
}

enum ledger_err store_rows_lock_and_read(struct ledger_store_conn *conn, const char *tenant,
					 const char *request_id, bool create,
					 const struct store_lookup *look, struct store_locked *lk,
					 struct ledger_call *call)
{
	const char *key[2] = {tenant, request_id};
	const char *names[5] = {tenant, request_id, look->attempt_id, look->second_attempt_id,
				look->tool_call_id};
	const char *call_key[3] = {tenant, request_id, look->tool_call_id};
	struct store_step st;
	enum ledger_err rc;
	unsigned next = 4; /* the result of the first statement added after the attempts */
	int n;

	memset(lk, 0, sizeof(*lk));
	store_step_begin(&st, conn);
	store_step_add_simple(&st, "BEGIN");
	store_step_add(&st, create ? &store_rows_lock_request : &store_rows_lock_existing, key);
	store_step_add(&st, &store_rows_read_request, key);
	store_step_add(&st, &store_rows_read_attempts, names);
	if (call != NULL)
		store_step_add(&st, &store_rows_read_call, call_key);
	if (look->calls_summary)
		store_step_add(&st, &calls_summary, key);
	if (look->settled_calls)
		store_step_add(&st, &store_rows_settled_calls, key);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	if (PQntuples(st.res[1]) == 1) {
		lk->created = store_step_get_bool(st.res[1], 0, 1);
	} else if (create) {
		/*
		 * Another transaction created the request after this statement's
		 * snapshot was taken: it is committed now, so trying again sees it.
		 */
		store_step_abort(conn);
		rc = LEDGER_ERR_CONFLICT;
		goto out;
	}
	rc = store_rows_parse_request(st.res[2], 0, &lk->request, &lk->client_error);
	n = PQntuples(st.res[3]);
	for (int i = 0; i < n && rc == LEDGER_OK; i++) {
		struct ledger_attempt a;

		store_rows_parse_attempt(st.res[3], i, &a);
		if (store_step_get_bool(st.res[3], i, STORE_ATTEMPT_NCOLS))
			lk->named = a;
		if (store_step_get_bool(st.res[3], i, STORE_ATTEMPT_NCOLS + 1))
			lk->second = a;
		if (store_step_get_bool(st.res[3], i, STORE_ATTEMPT_NCOLS + 2))
			lk->of_call = a;
		if (store_step_get_bool(st.res[3], i, STORE_ATTEMPT_NCOLS + 3))
			lk->newest = a;
	}
	if (rc == LEDGER_OK && call != NULL)
		rc = store_rows_parse_call(st.res[next++], 0, 0, call);
	if (rc == LEDGER_OK && look->calls_summary) {
		const PGresult *sum = st.res[next++];

		lk->calls.held_by_newest_ms = store_step_get_int(sum, 0, 0);
		lk->calls.unknown = store_step_get_int(sum, 0, 1);
	}
	if (rc == LEDGER_OK && look->settled_calls)
		rc = store_rows_parse_settled(st.res[next++], &lk->settled, &lk->nsettled);
	if (rc != LEDGER_OK) {
		store_rows_locked_clear(lk);
		store_step_abort(conn);
	}
out:
	store_step_clear(&st);
	return rc;
}

void store_rows_locked_clear(struct store_locked *lk)
{
	free(lk->client_error);
	lk->client_error = NULL;
	free(lk->settled);
	lk->settled = NULL;
	lk->nsettled = 0;
}

void store_rows_request_set(struct store_step *st, const char *tenant, const char *request_id,
			    const struct ledger_request *r, const char *client_error)
{
	const char *params[10] = {
		tenant,
		request_id,
		ledger_attempt_request_status_name(r->status),
		r->first_delta_sent ? "true" : "false",
		store_step_int(st, r->delivered_output_tokens),
		store_step_int(st, r->attempt_count),
		store_step_int(st, r->max_attempts),
		r->model_revision[0] != '\0' ? r->model_revision : NULL,
		client_error,
		r->input_sha256[0] != '\0' ? r->input_sha256 : NULL,
	};

	store_step_add(st, &request_set, params);
}

void store_rows_attempt_set(struct store_step *st, const char *tenant, const char *request_id,
			    const char *attempt_id, enum ledger_attempt_state state,
			    int64_t lease_ms, int64_t delivered, const char *outcome)
{
	/* EXPIRED is derived, never stored: the row stays live until superseded */
	const char *params[7] = {
		tenant,
		request_id,
		attempt_id,
		ledger_attempt_state_name(state == LEDGER_ATTEMPT_EXPIRED ? LEDGER_ATTEMPT_LIVE
									  : state),
		store_step_int(st, lease_ms),
		store_step_int(st, delivered),
		outcome,
	};

	store_step_add(st, &attempt_set, params);
}

enum ledger_err store_rows_read_budget(struct ledger_store_conn *conn, const char *tenant,
				       const struct ledger_policy *p, struct ledger_budget *out)
{
	const char *lock[1] = {tenant};
	struct store_step st;
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	store_step_begin(&st, conn);
	const char *count[2] = {tenant, store_step_int(&st, p->budget_window_ms)};
	store_step_add(&st, &budget_lock, lock);
	store_step_add(&st, &budget_count, count);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK) {
		out->attempts = store_step_get_int(st.res[1], 0, 0);
		out->retries = store_step_get_int(st.res[1], 0, 1);
	}
	store_step_clear(&st);
	return rc;
}

/* Rows of budget_drops read at most: past them the answer is the whole window. */
#define MAX_DROPS 1000

enum ledger_err store_rows_read_retry_after(struct ledger_store_conn *conn, const char *tenant,
					    const struct ledger_policy *p, int64_t *out)
{
	struct ledger_budget_drop *drops = NULL;
	struct store_step st;
	enum ledger_err rc;
	int n;

	*out = 0;
	store_step_begin(&st, conn);
	const char *params[3] = {tenant, store_step_int(&st, p->budget_window_ms),
				 store_step_int(&st, MAX_DROPS)};
	store_step_add(&st, &budget_drops, params);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	n = PQntuples(st.res[0]);
	drops = calloc((size_t)n + 1, sizeof(*drops));
	if (drops == NULL) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		drops[i].in_ms = store_step_get_int(st.res[0], i, 0);
		drops[i].attempts = store_step_get_int(st.res[0], i, 1);
		drops[i].retries = store_step_get_int(st.res[0], i, 2);
	}
	*out = ledger_attempt_budget_retry_after(p, drops, (size_t)n);
out:
	free(drops);
	store_step_clear(&st);
	return rc;
}

void store_rows_attempt_insert(struct store_step *st, const char *tenant, const char *request_id,
			       const struct ledger_attempt *a,
			       const struct ledger_attempt_request *in, struct store_event *ev,
			       bool reopened)
{
	const char *params[10] = {
		tenant,
		request_id,
		a->attempt_id,
		store_step_int(st, a->epoch),
		a->replica[0] != '\0' ? a->replica : NULL,
		a->model_revision[0] != '\0' ? a->model_revision : NULL,
		a->revision_given ? "true" : "false",
		store_step_int(st, a->lease_ms_left),
		a->is_retry ? "true" : "false",
		a->gateway[0] != '\0' ? a->gateway : NULL,
	};
	struct ledger_call_key key = {tenant, request_id, NULL};

	store_step_add(st, &attempt_insert, params);
	store_rows_attempt_created(ev, a, in, reopened);
	store_event_add(st, &key, ev);
}

void store_rows_attempt_created(struct store_event *ev, const struct ledger_attempt *a,
				const struct ledger_attempt_request *in, bool reopened)
{
	store_event_start(ev, "attempt_created", a->attempt_id);
	store_event_int(ev, "epoch", a->epoch);
	store_event_str(ev, "replica", a->replica);
	store_event_str(ev, "gateway", a->gateway);
	store_event_str(ev, "model_revision", a->model_revision);
	store_event_int(ev, "lease_ms", a->lease_ms_left);
	store_event_str(ev, "input_sha256", in->input_sha256);
	if (in->identity != NULL) {
		/* the replica's identity, spliced as the gateway sent it */
		ledger_jsonw_key(&ev->w, "identity");
		ledger_jsonw_raw(&ev->w, in->identity, in->identity_len);
	}
	if (a->is_retry) {
		ledger_jsonw_key(&ev->w, "retry");
		ledger_jsonw_bool(&ev->w, true);
	}
	if (reopened) {
		ledger_jsonw_key(&ev->w, "reopened");
		ledger_jsonw_bool(&ev->w, true);
	}
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_rows_statements[] = {
	&store_rows_lock_request,
	&store_rows_lock_existing,
	&store_rows_read_call,
	&store_rows_read_request,
	&store_rows_read_attempts,
	&request_set,
	&attempt_set,
	&calls_summary,
	&budget_lock,
	&budget_count,
	&budget_drops,
	&attempt_insert,
	&store_rows_settled_calls,
	NULL,
};
