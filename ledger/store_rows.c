/*
 * ledger/store_rows.c: what every tool-call transaction of the store is
 * made of: locking the request and reading the call after the lock, the
 * call's row, the events written with each change, and retries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/log.h"
#include "ledger/store_int.h"

/* clang-format off */
const struct store_stmt store_lock_request = {
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

const struct store_stmt store_lock_existing = {
	"lock_existing",
	"SELECT attempt_count, false FROM requests"
	" WHERE tenant = $1 AND request_id = $2 FOR UPDATE",
	2,
};

const struct store_stmt store_read_call = {
	"read_call",
	"SELECT " STORE_CALL_COLUMNS STORE_CALL_FROM,
	3,
};

static const struct store_stmt event_insert = {
	"event_insert",
	"INSERT INTO events (tenant, request_id, type, attempt_id, tool_call_id, detail)"
	" VALUES ($1, $2, $3, $4, $5, $6::jsonb)",
	6,
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

const char *store_completed_by_name(enum ledger_completed_by by)
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
enum ledger_err store_parse_call(const PGresult *res, int row, int base, struct ledger_call *call)
{
	ledger_call_clear(call);
	if (PQgetisnull(res, row, base + STORE_COL_STATE)) {
		if (PQgetisnull(res, row, base + STORE_COL_TOMB_OUTCOME))
			return LEDGER_OK;
		call->state = LEDGER_CALL_TOMBSTONE;
		store_copy(res, row, base + STORE_COL_TOMB_ARGS, call->args_sha256,
			   sizeof(call->args_sha256));
		store_copy(res, row, base + STORE_COL_TOMB_COMPLETED_AT, call->completed_at,
			   sizeof(call->completed_at));
		call->settled_as = strcmp(PQgetvalue(res, row, base + STORE_COL_TOMB_OUTCOME),
					  "succeeded") == 0
					   ? LEDGER_CALL_SUCCEEDED
					   : LEDGER_CALL_FAILED;
		return LEDGER_OK;
	}
	call->state = parse_state(PQgetvalue(res, row, base + STORE_COL_STATE));
	call->fencing_token = store_int(res, row, base + STORE_COL_TOKEN);
	store_copy(res, row, base + STORE_COL_CLAIM_ID, call->claim_id, sizeof(call->claim_id));
	store_copy(res, row, base + STORE_COL_ATTEMPT_ID, call->attempt_id,
		   sizeof(call->attempt_id));
	store_copy(res, row, base + STORE_COL_OWNER, call->owner, sizeof(call->owner));
	store_copy(res, row, base + STORE_COL_TOOL, call->tool, sizeof(call->tool));
	store_copy(res, row, base + STORE_COL_ARGS_SHA256, call->args_sha256,
		   sizeof(call->args_sha256));
	call->tool_dedupes = store_bool(res, row, base + STORE_COL_DEDUPES);
	call->lease_ms_left = store_int(res, row, base + STORE_COL_LEASE_LEFT);
	if (call->state == LEDGER_CALL_IN_PROGRESS && call->lease_ms_left <= 0)
		call->state = LEDGER_CALL_UNKNOWN;
	call->completed_token = store_int(res, row, base + STORE_COL_COMPLETED_TOKEN);
	call->completed_by =
		parse_completed_by(PQgetvalue(res, row, base + STORE_COL_COMPLETED_BY));
	store_copy(res, row, base + STORE_COL_CREATED_AT, call->created_at,
		   sizeof(call->created_at));
	store_copy(res, row, base + STORE_COL_COMPLETED_AT, call->completed_at,
		   sizeof(call->completed_at));
	if (!PQgetisnull(res, row, base + STORE_COL_RESULT)) {
		call->result = store_dup(res, row, base + STORE_COL_RESULT, &call->result_len);
		if (call->result == NULL)
			return LEDGER_ERR_NOMEM;
	}
	if (!PQgetisnull(res, row, base + STORE_COL_ARGS)) {
		call->args = store_dup(res, row, base + STORE_COL_ARGS, &call->args_len);
		if (call->args == NULL)
			return LEDGER_ERR_NOMEM;
	}
	return LEDGER_OK;
}

/* --- events --- */

void store_event_start(struct store_event *ev, const char *type, const char *attempt_id)
{
	memset(ev, 0, sizeof(*ev));
	ev->type = type;
	ev->attempt_id = attempt_id != NULL && attempt_id[0] != '\0' ? attempt_id : NULL;
	ledger_jsonw_init(&ev->w, &ev->detail);
	ledger_jsonw_object_begin(&ev->w);
}

void store_event_refused(struct store_event *ev, const char *operation, const char *code,
			 const char *attempt_id)
{
	store_event_start(ev, "refused", attempt_id);
	ledger_jsonw_key(&ev->w, "operation");
	ledger_jsonw_string(&ev->w, operation);
	ledger_jsonw_key(&ev->w, "code");
	ledger_jsonw_string(&ev->w, code);
}

void store_event_int(struct store_event *ev, const char *key, int64_t v)
{
	ledger_jsonw_key(&ev->w, key);
	ledger_jsonw_int(&ev->w, v);
}

void store_event_str(struct store_event *ev, const char *key, const char *s)
{
	if (s == NULL || s[0] == '\0')
		return;
	ledger_jsonw_key(&ev->w, key);
	ledger_jsonw_string(&ev->w, s);
}

void store_event_free(struct store_event *ev)
{
	ledger_buf_free(&ev->detail);
}

void store_event_add(struct store_step *st, const struct ledger_call_key *key,
		     struct store_event *ev)
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

enum ledger_err store_lock_and_read(struct ledger_store_conn *conn,
				    const struct ledger_call_key *key, bool create,
				    struct store_locked *lk, struct ledger_call *call)
{
	const char *params[3] = {key->tenant, key->request_id, key->tool_call_id};
	struct store_step st;
	enum ledger_err rc;

	memset(lk, 0, sizeof(*lk));
	store_step_begin(&st, conn);
	store_step_add_simple(&st, "BEGIN");
	store_step_add(&st, create ? &store_lock_request : &store_lock_existing, params);
	store_step_add(&st, &store_read_call, params);
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
	rc = store_parse_call(st.res[2], 0, 0, call);
	if (rc != LEDGER_OK)
		store_abort(conn);
out:
	store_step_clear(&st);
	return rc;
}

enum ledger_err store_commit(struct store_step *st)
{
	store_step_add_simple(st, "COMMIT");
	return store_step_run(st);
}

enum ledger_err store_rollback(struct ledger_store_conn *conn)
{
	store_abort(conn);
	return conn->pg != NULL ? LEDGER_OK : LEDGER_ERR_UNAVAILABLE;
}

void store_fmt_int(char buf[24], int64_t v)
{
	snprintf(buf, 24, "%lld", (long long)v);
}

/* Serialization failures and deadlocks are rare under one row lock: a few tries do. */
#define MAX_TRIES 3

enum ledger_err store_with_retries(struct ledger_store_conn *conn,
				   enum ledger_err (*op)(struct ledger_store_conn *conn,
							 const void *arg,
							 struct ledger_call_result *out),
				   const void *arg, struct ledger_call_result *out)
{
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	for (int i = 0;; i++) {
		ledger_call_clear(&out->call);
		rc = op(conn, arg, out);
		if (rc != LEDGER_ERR_CONFLICT || i + 1 == MAX_TRIES)
			return rc;
	}
}
