/*
 * ledger/store/gc.c: retention. Settled requests older than the retention
 * period go, with their attempts, calls and history (and their kept
 * answers, through the foreign key of sql/006); each settled call
 * leaves a tombstone (key, fingerprint, outcome, completion time) so that a
 * late redelivery is refused, never run again. Requests still open, and any
 * request with a call in progress or of unknown outcome, stay whatever
 * their age.
 *
 * A batch first locks its candidates (skipping rows others hold, so it never
 * waits), then decides in a second statement, whose snapshot is taken after
 * the locks: a claim that slipped in before the lock is seen and keeps its
 * request. Each batch is one short transaction.
 */
#include <stdlib.h>
#include <string.h>

#include "ledger/common/log.h"
#include "ledger/store/store.h"
#include "ledger/store/rows.h"
#include "ledger/store/statements.h"

#define MS(p) "(" p "::bigint * interval '1 millisecond')"

/*
 * Settled: closed (completed, failed, terminated, abandoned) before the
 * period; or never attempted (a client of the ledger alone, whose requests
 * no router closes) with every call settled before it. Over "r", $1 the
 * retention period in ms. The period ends at the transaction's start,
 * now(): a stable time, which lets the partial indexes on closed_at and
 * on unattempted requests' created_at find the candidates (with the
 * volatile clock_timestamp() every pass read every request).
 */
#define SETTLED                                                                                                           \
	"((r.status <> 'open' AND r.closed_at < now() - " MS(                                                             \
		"$1") ")"                                                                                                 \
		      " OR (r.status = 'open' AND r.attempt_count = 0"                                                    \
		      "     AND r.created_at < now() - " MS(                                                              \
			      "$1") "     AND NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.tenant = r.tenant"           \
				    "       AND c.request_id = r.request_id"                                              \
				    "       AND coalesce(c.completed_at, c.created_at) >= now() - " MS(                   \
					    "$1") ")))"                                                                   \
						  " AND NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.tenant = r.tenant" \
						  "   AND c.request_id = r.request_id AND c.state = 'in_progress')"

/* clang-format off */
static const struct store_stmt gc_lock = {
	"gc_lock",
	"SELECT r.tenant, r.request_id FROM requests r WHERE " SETTLED
	" LIMIT $2::integer FOR UPDATE OF r SKIP LOCKED",
	2,
};

/* $1 retention ms, $2 tombstone ms, $3 and $4 the locked keys. */
static const struct store_stmt gc_delete = {
	"gc_delete",
	"WITH doomed AS MATERIALIZED ("
	"  SELECT r.tenant, r.request_id FROM requests r"
	"  JOIN unnest($3::text[], $4::text[]) AS k(tenant, request_id)"
	"    ON r.tenant = k.tenant AND r.request_id = k.request_id"
	"  WHERE " SETTLED
	"), calls AS MATERIALIZED ("
	"  SELECT c.* FROM tool_calls c JOIN doomed d"
	"    ON c.tenant = d.tenant AND c.request_id = d.request_id"
	"), tombs AS ("
	"  INSERT INTO tool_call_tombstones (tenant, request_id, tool_call_id, args_sha256,"
	"    outcome, completed_at, expires_at)"
	"  SELECT tenant, request_id, tool_call_id, args_sha256, outcome, completed_at,"
	"    clock_timestamp() + " MS("$2")
	"  FROM calls WHERE state IN ('succeeded', 'failed')"
	"  ON CONFLICT (tenant, request_id, tool_call_id) DO UPDATE"
	"    SET expires_at = EXCLUDED.expires_at"
	"  RETURNING 1"
	"), ev AS ("
	"  DELETE FROM event_log e USING doomed d"
	"  WHERE e.tenant = d.tenant AND e.request_id = d.request_id RETURNING 1"
	"), atts AS ("
	"  SELECT count(*) AS n, count(a.created_seq) + count(a.first_delta_seq)"
	"    + count(a.finished_seq) + count(a.completed_seq) AS events"
	"  FROM attempts a JOIN doomed d"
	"    ON a.tenant = d.tenant AND a.request_id = d.request_id"
	"), req AS ("
	"  DELETE FROM requests r USING doomed d"
	"  WHERE r.tenant = d.tenant AND r.request_id = d.request_id RETURNING 1"
	") SELECT (SELECT count(*) FROM req), (SELECT count(*) FROM calls),"
	"  (SELECT count(*) FROM tombs), (SELECT n FROM atts),"
	"  (SELECT count(*) FROM ev)"
	"  + (SELECT count(claimed_seq) + count(completed_seq) FROM calls)"
	"  + (SELECT events FROM atts)",
	4,
};

static const struct store_stmt gc_tombstones = {
	"gc_tombstones",
	"WITH gone AS (DELETE FROM tool_call_tombstones WHERE ctid IN ("
	"  SELECT ctid FROM tool_call_tombstones WHERE expires_at <= now()"
	"  LIMIT $1::integer) RETURNING 1)"
	" SELECT count(*) FROM gone",
	1,
};

static const struct store_stmt count_unknown = {
	"count_unknown",
	"SELECT count(*) FROM tool_calls"
	" WHERE state = 'in_progress' AND lease_until <= clock_timestamp()",
	0,
};
/* clang-format on */

static enum ledger_err delete_batch(struct ledger_store_conn *conn, int64_t retention_ms,
				    int64_t tombstone_ms, unsigned batch,
				    struct ledger_gc_stats *stats, bool *full)
{
	struct ledger_buf tenants = LEDGER_BUF_INIT, ids = LEDGER_BUF_INIT;
	struct store_step st;
	enum ledger_err rc;
	int n;

	*full = false;
	store_step_begin(&st, conn);
	const char *lock[2] = {store_step_int(&st, retention_ms), store_step_int(&st, batch)};
	store_step_add_simple(&st, "BEGIN");
	/* The one transaction allowed to delete events (see sql/001, sql/004 and sql/009). */
	store_step_add_simple(&st, "SET LOCAL ledger.retention = 'on'");
	store_step_add(&st, &gc_lock, lock);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK)
		goto out;
	n = PQntuples(st.res[2]);
	if (n == 0) {
		rc = store_step_rollback(conn);
		goto out;
	}
	*full = (unsigned)n == batch;
	for (int i = 0; i < n; i++) {
		store_step_array_add(&tenants, PQgetvalue(st.res[2], i, 0));
		store_step_array_add(&ids, PQgetvalue(st.res[2], i, 1));
	}
	store_step_array_end(&tenants);
	store_step_array_end(&ids);
	if (tenants.oom || ids.oom) {
		store_step_abort(conn);
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	store_step_clear(&st);
	const char *del[4] = {store_step_int(&st, retention_ms), store_step_int(&st, tombstone_ms),
			      tenants.data, ids.data};
	store_step_add(&st, &gc_delete, del);
	rc = store_step_commit(&st);
	if (rc == LEDGER_OK) {
		stats->requests += store_step_get_int(st.res[0], 0, 0);
		stats->tool_calls += store_step_get_int(st.res[0], 0, 1);
		stats->tombstones += store_step_get_int(st.res[0], 0, 2);
		stats->attempts += store_step_get_int(st.res[0], 0, 3);
		stats->events += store_step_get_int(st.res[0], 0, 4);
	}
out:
	store_step_clear(&st);
	ledger_buf_free(&tenants);
	ledger_buf_free(&ids);
	return rc;
}

enum ledger_err ledger_store_gc_batch(struct ledger_store_conn *conn, int64_t retention_ms,
				      int64_t tombstone_ms, unsigned batch,
				      struct ledger_gc_stats *stats, bool *done_out)
{
	struct store_step st;
	bool full = false;
	int64_t expired;
	enum ledger_err rc;

	*done_out = false;
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	rc = delete_batch(conn, retention_ms, tombstone_ms, batch, stats, &full);
	if (rc != LEDGER_OK)
		return rc;
	store_step_begin(&st, conn);
	const char *limit[1] = {store_step_int(&st, batch)};
	store_step_add(&st, &gc_tombstones, limit);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK) {
		expired = store_step_get_int(st.res[0], 0, 0);
		stats->expired_tombstones += expired;
		*done_out = !full && expired < (int64_t)batch;
	}
	store_step_clear(&st);
	return rc;
}

enum ledger_err ledger_store_count_unknown(struct ledger_store_conn *conn, int64_t *count_out)
{
	struct store_step st;
	enum ledger_err rc;

	*count_out = 0;
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	store_step_begin(&st, conn);
	store_step_add(&st, &count_unknown, NULL);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK)
		*count_out = store_step_get_int(st.res[0], 0, 0);
	store_step_clear(&st);
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_gc_statements[] = {
	&gc_lock, &gc_delete, &gc_tombstones, &count_unknown, NULL,
};
