/*
 * ledger/store/client_events.c: what a router saw of its client during an
 * attempt (a disconnect, a resume, the end of a hold), appended to the
 * request's history; ledgerd's own addition to the API, for incident
 * review. An event decides nothing, so it needs no rights; a retried call
 * is recognised by the caller's counter n and appends nothing. The
 * request's row is locked first, as for every write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/store/rows.h"
#include "ledger/store/statements.h"

/* clang-format off */
/* The client event of attempt $3 with counter $4, if one was recorded. */
static const struct store_stmt client_event_find = {
	"client_event_find",
	"SELECT type FROM event_log WHERE tenant = $1 AND request_id = $2 AND attempt_id = $3"
	" AND type IN ('client_disconnected', 'client_resumed', 'client_hold_ended')"
	" AND detail->>'n' = $4 LIMIT 1",
	4,
};
/* clang-format on */

/* Looks for (attempt, n) under the lock; appends the event when it is new. */
static enum ledger_err record(struct ledger_store_conn *conn, const struct ledger_call_key *key,
			      const char *attempt_id, const struct ledger_client_event *in,
			      struct ledger_client_event_result *out)
{
	struct store_event ev;
	struct store_step st;
	enum ledger_err rc;

	memset(&ev, 0, sizeof(ev));
	store_step_begin(&st, conn);
	const char *find[4] = {key->tenant, key->request_id, attempt_id,
			       store_step_int(&st, in->n)};
	store_step_add(&st, &client_event_find, find);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	if (PQntuples(st.res[0]) > 0) {
		/* the same call again: it was recorded, under its own type */
		store_step_get_text(st.res[0], 0, 0, out->recorded, sizeof(out->recorded));
		rc = store_step_rollback(conn);
		goto out;
	}
	store_step_clear(&st);
	store_event_start(&ev, in->type, attempt_id);
	store_event_int(&ev, "n", in->n);
	if (in->last_event_id >= 0)
		store_event_int(&ev, "last_event_id", in->last_event_id);
	if (in->hold_ms >= 0)
		store_event_int(&ev, "hold_ms", in->hold_ms);
	store_event_add(&st, key, &ev);
	rc = store_step_commit(&st);
	if (rc == LEDGER_OK) {
		out->appended = true;
		snprintf(out->recorded, sizeof(out->recorded), "%s", in->type);
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	return rc;
}

static enum ledger_err client_event_op(struct ledger_store_conn *conn, const char *tenant,
				       const char *request_id, const char *attempt_id,
				       const struct ledger_client_event *in,
				       struct ledger_client_event_result *out)
{
	const struct store_lookup look = {.attempt_id = attempt_id};
	const struct ledger_call_key key = {tenant, request_id, NULL};
	struct store_locked lk;
	enum ledger_err rc;

	rc = store_rows_lock_and_read(conn, tenant, request_id, false, &look, &lk, NULL);
	if (rc != LEDGER_OK)
		return rc;
	if (!lk.named.exists) {
		rc = store_step_rollback(conn);
	} else {
		out->found = true;
		rc = record(conn, &key, attempt_id, in, out);
	}
	store_rows_locked_clear(&lk);
	return rc;
}

enum ledger_err ledger_store_client_event(struct ledger_store_conn *conn, const char *tenant,
					  const char *request_id, const char *attempt_id,
					  const struct ledger_client_event *in,
					  struct ledger_client_event_result *out)
{
	struct store_retry r = {0};
	enum ledger_err rc = LEDGER_OK;

	memset(out, 0, sizeof(*out));
	while (store_step_retry(conn, &r, &rc)) {
		if (store_step_retrying(&r))
			memset(out, 0, sizeof(*out));
		rc = client_event_op(conn, tenant, request_id, attempt_id, in, out);
	}
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_client_events_statements[] = {
	&client_event_find,
	NULL,
};
