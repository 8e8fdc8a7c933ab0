/*
 * ledger/store/reads.c: reading without changing anything: one call, a
 * request with everything under it (one snapshot), and a tenant's calls or
 * requests page by page. Pages use keyset cursors, so that they neither
 * repeat nor skip a row that exists throughout, whatever is inserted
 * meanwhile.
 */
#include <stdlib.h>
#include <string.h>

#include "ledger/store/rows.h"
#include "ledger/store/statements.h"

/* clang-format off */
/* $2, $3: the last key of the previous page (NULL: the first page); $4 limit */
#define LIST_PAGE                                                                                 \
	" AND ($2::text IS NULL OR (c.request_id, c.tool_call_id) > ($2::text, $3::text))"       \
	" ORDER BY c.request_id, c.tool_call_id LIMIT $4"

/* Held calls; $5 true lists those whose lease ran out (unknown). */
static const struct store_stmt list_open = {
	"list_open",
	"SELECT c.request_id, c.tool_call_id, " STORE_CALL_COLUMNS
	" FROM (SELECT clock_timestamp() AS t) now_"
	" JOIN tool_calls c ON c.tenant = $1 AND c.state = 'in_progress'"
	" LEFT JOIN tool_call_tombstones t ON false"
	" WHERE (c.lease_until <= now_.t) = $5::boolean" LIST_PAGE,
	5,
};

/* Calls in stored state $5, or in any state when $5 is NULL. */
static const struct store_stmt list_any = {
	"list_any",
	"SELECT c.request_id, c.tool_call_id, " STORE_CALL_COLUMNS
	" FROM (SELECT clock_timestamp() AS t) now_"
	" JOIN tool_calls c ON c.tenant = $1 AND ($5::text IS NULL OR c.state = $5::text)"
	" LEFT JOIN tool_call_tombstones t ON false"
	" WHERE true" LIST_PAGE,
	5,
};

/* The request's attempts, by epoch. */
static const struct store_stmt view_attempts = {
	"view_attempts",
	"SELECT " STORE_ATTEMPT_COLUMNS ", " STORE_TS("a.ended_at")
	" FROM (SELECT clock_timestamp() AS t) now_"
	" JOIN attempts a ON a.tenant = $1 AND a.request_id = $2 ORDER BY a.epoch",
	2,
};

/* The request's calls, by id. */
static const struct store_stmt view_calls = {
	"view_calls",
	"SELECT c.request_id, c.tool_call_id, " STORE_CALL_COLUMNS
	" FROM (SELECT clock_timestamp() AS t) now_"
	" JOIN tool_calls c ON c.tenant = $1 AND c.request_id = $2"
	" LEFT JOIN tool_call_tombstones t ON false ORDER BY c.tool_call_id",
	2,
};

/* $3: after this seq; $4: at most this many. */
static const struct store_stmt view_events = {
	"view_events",
	"SELECT seq, " STORE_TS("at") ", type, attempt_id, tool_call_id, detail::text"
	" FROM events WHERE tenant = $1 AND request_id = $2 AND seq > $3::bigint"
	" ORDER BY seq LIMIT $4::integer",
	4,
};

/*
 * Why a request needs a person (the bits of enum ledger_attention): a call
 * whose outcome is unknown, a zombie refused (a fenced attempt, or a
 * holder that lost its key, acted), a stream terminated, a rerun that
 * diverged, a side effect that may have run twice.
 */
#define ATTENTION                                                                                 \
	"(CASE WHEN EXISTS (SELECT 1 FROM tool_calls c WHERE c.tenant = r.tenant"                 \
	"   AND c.request_id = r.request_id AND c.state = 'in_progress'"                           \
	"   AND c.lease_until <= clock_timestamp()) THEN 1 ELSE 0 END"                             \
	" | CASE WHEN EXISTS (SELECT 1 FROM event_log e WHERE e.tenant = r.tenant"                \
	"   AND e.request_id = r.request_id AND e.type = 'refused'"                                \
	"   AND e.detail->>'code' IN ('attempt_fenced', 'stale_token')) THEN 2 ELSE 0 END"         \
	" | CASE WHEN r.status = 'terminated' THEN 4 ELSE 0 END"                                   \
	" | CASE WHEN r.client_error::jsonb->'error'->>'code' = 'tool_call_divergence'"          \
	"   THEN 8 ELSE 0 END"                                                                     \
	" | CASE WHEN EXISTS (SELECT 1 FROM event_log e WHERE e.tenant = r.tenant"                \
	"   AND e.request_id = r.request_id AND e.type = 'duplicate_execution')"                   \
	"   THEN 16 ELSE 0 END)"

/*
 * $2 status, $3 since (NULL: any); $4, $5 the last of the previous page
 * (NULL: the first page); $6 limit; $7 true: only those needing attention.
 * Newest first.
 */
static const struct store_stmt list_requests = {
	"list_requests",
	"SELECT " STORE_REQUEST_COLUMNS ", request_id,"
	"  ((extract(epoch FROM created_at) * 1000000)::numeric)::bigint, " ATTENTION
	" FROM requests r WHERE tenant = $1"
	"  AND ($2::text IS NULL OR status = $2::text)"
	"  AND ($3::timestamptz IS NULL OR created_at >= $3::timestamptz)"
	"  AND ($4::bigint IS NULL OR (created_at, request_id) <"
	"       (timestamptz 'epoch' + $4::bigint * interval '1 microsecond', $5::text))"
	"  AND (NOT $7::boolean OR " ATTENTION " <> 0)"
	" ORDER BY created_at DESC, request_id DESC LIMIT $6::integer",
	7,
};
/* clang-format on */

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
	store_step_add(&st, &store_rows_read_call, params);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK)
		rc = store_rows_parse_call(st.res[0], 0, 0, out);
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
	store_step_fmt_int(lim, limit);
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
		store_step_get_text(st.res[0], i, 0, items[i].request_id,
				    sizeof(items[i].request_id));
		store_step_get_text(st.res[0], i, 1, items[i].tool_call_id,
				    sizeof(items[i].tool_call_id));
		rc = store_rows_parse_call(st.res[0], i, 2, &items[i].call);
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

void ledger_store_request_view_clear(struct ledger_request_view *v)
{
	if (v == NULL)
		return;
	free(v->client_error);
	free(v->attempts);
	ledger_store_free_list(v->calls, v->ncalls);
	for (size_t i = 0; i < v->nevents; i++)
		free(v->events[i].detail);
	free(v->events);
	memset(v, 0, sizeof(*v));
}

static enum ledger_err read_view(const struct store_step *st, unsigned max_events,
				 struct ledger_request_view *v)
{
	const PGresult *att = st->res[2], *calls = st->res[3], *ev = st->res[4];
	enum ledger_err rc;

	rc = store_rows_parse_request(st->res[1], 0, &v->request, &v->client_error);
	if (rc != LEDGER_OK || !v->request.exists)
		return rc;
	v->attempts = calloc((size_t)PQntuples(att) + 1, sizeof(*v->attempts));
	v->calls = calloc((size_t)PQntuples(calls) + 1, sizeof(*v->calls));
	v->events = calloc((size_t)PQntuples(ev) + 1, sizeof(*v->events));
	if (v->attempts == NULL || v->calls == NULL || v->events == NULL)
		return LEDGER_ERR_NOMEM;
	for (int i = 0; i < PQntuples(att); i++) {
		store_rows_parse_attempt(att, i, &v->attempts[i]);
		store_step_get_text(att, i, STORE_ATTEMPT_NCOLS, v->attempts[i].ended_at,
				    sizeof(v->attempts[i].ended_at));
		v->nattempts++;
	}
	for (int i = 0; i < PQntuples(calls); i++) {
		store_step_get_text(calls, i, 0, v->calls[i].request_id,
				    sizeof(v->calls[i].request_id));
		store_step_get_text(calls, i, 1, v->calls[i].tool_call_id,
				    sizeof(v->calls[i].tool_call_id));
		v->ncalls++;
		rc = store_rows_parse_call(calls, i, 2, &v->calls[i].call);
		if (rc != LEDGER_OK)
			return rc;
	}
	/* One event more than asked says whether the history goes on. */
	for (int i = 0; i < PQntuples(ev) && (unsigned)i < max_events; i++) {
		struct ledger_event *e = &v->events[i];

		e->seq = store_step_get_int(ev, i, 0);
		store_step_get_text(ev, i, 1, e->at, sizeof(e->at));
		store_step_get_text(ev, i, 2, e->type, sizeof(e->type));
		store_step_get_text(ev, i, 3, e->attempt_id, sizeof(e->attempt_id));
		store_step_get_text(ev, i, 4, e->tool_call_id, sizeof(e->tool_call_id));
		v->nevents++;
		e->detail = store_step_get_dup(ev, i, 5, NULL);
		if (e->detail == NULL)
			return LEDGER_ERR_NOMEM;
	}
	v->more_events = (unsigned)PQntuples(ev) > max_events;
	return LEDGER_OK;
}

enum ledger_err ledger_store_request_view(struct ledger_store_conn *conn, const char *tenant,
					  const char *request_id, int64_t after_seq,
					  unsigned max_events, struct ledger_request_view *out)
{
	const char *key[2] = {tenant, request_id};
	struct store_step st;
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	store_step_begin(&st, conn);
	const char *events[4] = {tenant, request_id, store_step_int(&st, after_seq),
				 store_step_int(&st, (int64_t)max_events + 1)};
	/* One snapshot: the attempts, calls and events all agree with the request. */
	store_step_add_simple(&st, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
	store_step_add(&st, &store_rows_read_request, key);
	store_step_add(&st, &view_attempts, key);
	store_step_add(&st, &view_calls, key);
	store_step_add(&st, &view_events, events);
	store_step_add_simple(&st, "COMMIT");
	rc = store_step_run(&st);
	if (rc == LEDGER_OK)
		rc = read_view(&st, max_events, out);
	if (rc != LEDGER_OK)
		ledger_store_request_view_clear(out);
	store_step_clear(&st);
	return rc;
}

void ledger_store_free_requests(struct ledger_listed_request *items, size_t count)
{
	if (items == NULL)
		return;
	for (size_t i = 0; i < count; i++)
		free(items[i].client_error);
	free(items);
}

enum ledger_err ledger_store_list_requests(struct ledger_store_conn *conn, const char *tenant,
					   const struct ledger_request_filter *f,
					   struct ledger_listed_request **items_out,
					   size_t *count_out)
{
	struct ledger_listed_request *items = NULL;
	struct store_step st;
	enum ledger_err rc;
	size_t n = 0;

	*items_out = NULL;
	*count_out = 0;
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	store_step_begin(&st, conn);
	const char *params[7] = {
		tenant,
		f->status,
		f->since,
		f->has_cursor ? store_step_int(&st, f->cursor_created_us) : NULL,
		f->has_cursor ? f->cursor_request_id : NULL,
		store_step_int(&st, f->limit),
		f->attention_only ? "true" : "false",
	};
	store_step_add(&st, &list_requests, params);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	items = calloc((size_t)PQntuples(st.res[0]) + 1, sizeof(*items));
	if (items == NULL) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	for (int i = 0; i < PQntuples(st.res[0]); i++) {
		store_step_get_text(st.res[0], i, STORE_REQUEST_NCOLS, items[i].request_id,
				    sizeof(items[i].request_id));
		items[i].created_us = store_step_get_int(st.res[0], i, STORE_REQUEST_NCOLS + 1);
		items[i].attention =
			(unsigned)store_step_get_int(st.res[0], i, STORE_REQUEST_NCOLS + 2);
		n++;
		rc = store_rows_parse_request(st.res[0], i, &items[i].request,
					      &items[i].client_error);
		if (rc != LEDGER_OK)
			goto out;
	}
	*items_out = items;
	*count_out = n;
	items = NULL;
out:
	ledger_store_free_requests(items, n);
	store_step_clear(&st);
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_reads_statements[] = {
	&list_open, &list_any, &view_attempts, &view_calls, &view_events, &list_requests, NULL,
};
