/*
 * ledger/store_reads.c: reading tool calls without changing them: one
 * call, and a tenant's calls page by page in key order (a keyset cursor,
 * so pages neither repeat nor skip a row that exists throughout).
 */
#include <stdlib.h>
#include <string.h>

#include "ledger/store_int.h"

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
	store_step_add(&st, &store_read_call, params);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK)
		rc = store_parse_call(st.res[0], 0, 0, out);
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
	store_fmt_int(lim, limit);
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
		rc = store_parse_call(st.res[0], i, 2, &items[i].call);
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
