/*
 * ledger/store/admin.c: the store's housekeeping: schema migrations under
 * an advisory lock and the schema version /readyz checks. (API tokens are
 * ledger/store/tokens.c's.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/log.h"
#include "ledger/store/migrate.h"
#include "ledger/store/store.h"
#include "ledger/store/rows.h"
#include "ledger/store/statements.h"

/* Any fixed number: every ledgerd takes the same lock to migrate. */
#define MIGRATE_LOCK_KEY "7311460291"

static const struct store_stmt schema_exists = {
	"schema_exists",
	"SELECT to_regclass('ledger_schema') IS NOT NULL",
	0,
};

/*
 * The newest migration and the largest oldest-binary-schema recorded. The
 * column is read through to_jsonb() because a database migrated only by a
 * ledgerd before it has no such column: it then counts as 0, which is right,
 * since those migrations all were additive.
 */
#define SCHEMA_STATE_SQL                                                                           \
	"SELECT coalesce(max(version), 0),"                                                        \
	" coalesce(max((to_jsonb(s) ->> 'oldest_binary_schema')::int), 0) FROM ledger_schema s"

enum ledger_err ledger_store_schema_version(struct ledger_store_conn *conn,
					    struct ledger_schema_state *out)
{
	struct store_step st;
	enum ledger_err rc;

	out->version = 0;
	out->oldest_binary_schema = 0;
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	store_step_begin(&st, conn);
	store_step_add(&st, &schema_exists, NULL);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK || !store_step_get_bool(st.res[0], 0, 0))
		goto out;
	store_step_clear(&st);
	/* Not prepared: the table may not exist when the connection is new. */
	store_step_add_simple(&st, SCHEMA_STATE_SQL);
	rc = store_step_run(&st);
	if (rc == LEDGER_OK) {
		out->version = (int)store_step_get_int(st.res[0], 0, 0);
		out->oldest_binary_schema = (int)store_step_get_int(st.res[0], 0, 1);
	}
out:
	store_step_clear(&st);
	return rc;
}

/* Runs @p sql (possibly several statements) outside pipeline mode. */
static enum ledger_err exec_script(PGconn *pg, const char *sql, char *err, size_t errlen)
{
	PGresult *res = PQexec(pg, sql);
	enum ledger_err rc = LEDGER_OK;

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
		const char *msg = PQresultErrorMessage(res);
		snprintf(err, errlen, "%.*s", (int)strcspn(msg, "\n"), msg);
		rc = PQstatus(pg) == CONNECTION_OK ? LEDGER_ERR_INTERNAL : LEDGER_ERR_UNAVAILABLE;
	}
	PQclear(res);
	return rc;
}

static enum ledger_err apply_one(PGconn *pg, const struct ledger_migration *m, char *err,
				 size_t errlen)
{
	char version[16], oldest[16];
	const char *params[3] = {version, m->name, m->oldest_binary_schema > 0 ? oldest : NULL};
	PGresult *res = NULL;
	enum ledger_err rc;

	snprintf(version, sizeof(version), "%d", m->version);
	snprintf(oldest, sizeof(oldest), "%d", m->oldest_binary_schema);
	rc = exec_script(pg, "BEGIN", err, errlen);
	if (rc != LEDGER_OK)
		return rc;
	rc = exec_script(pg, m->sql, err, errlen);
	if (rc == LEDGER_OK) {
		res = PQexecParams(pg,
				   "INSERT INTO ledger_schema (version, name, oldest_binary_schema)"
				   " VALUES ($1, $2, $3)",
				   3, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			snprintf(err, errlen, "%s", PQresultErrorMessage(res));
			rc = LEDGER_ERR_INTERNAL;
		}
		PQclear(res);
	}
	if (rc == LEDGER_OK)
		rc = exec_script(pg, "COMMIT", err, errlen);
	else
		(void)exec_script(pg, "ROLLBACK", (char[64]){0}, 64);
	if (rc != LEDGER_OK) {
		char what[256];
		snprintf(what, sizeof(what), "%s", err);
		snprintf(err, errlen, "migration %s: %s", m->name, what);
	}
	return rc;
}

enum ledger_err ledger_store_migrate(struct ledger_store_conn *conn, unsigned *applied_out,
				     struct ledger_schema_state *state_out, char *err,
				     size_t errlen)
{
	PGconn *pg = conn->pg;
	PGresult *res = NULL;
	enum ledger_err rc;
	bool locked = false;
	struct ledger_schema_state db = {0, 0};

	*applied_out = 0;
	*state_out = db;
	if (pg == NULL || PQexitPipelineMode(pg) != 1) {
		snprintf(err, errlen, "the connection is not idle");
		return LEDGER_ERR_INTERNAL;
	}
	/* Concurrent migrators wait here; each then sees what the other applied. */
	rc = exec_script(pg, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", err, errlen);
	if (rc != LEDGER_OK)
		goto out;
	locked = true;
	/*
	 * The record itself is no migration: a ledgerd of any release creates
	 * it as it needs it, and an older one's inserts leave the new column NULL.
	 */
	rc = exec_script(
		pg,
		"SET client_min_messages = warning;"
		"CREATE TABLE IF NOT EXISTS ledger_schema ("
		"  version integer PRIMARY KEY,"
		"  name text NOT NULL,"
		"  applied_at timestamptz NOT NULL DEFAULT clock_timestamp());"
		"ALTER TABLE ledger_schema ADD COLUMN IF NOT EXISTS oldest_binary_schema integer",
		err, errlen);
	if (rc != LEDGER_OK)
		goto out;
	res = PQexec(pg, SCHEMA_STATE_SQL);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		snprintf(err, errlen, "%s", PQresultErrorMessage(res));
		rc = LEDGER_ERR_INTERNAL;
		goto out;
	}
	db.version = atoi(PQgetvalue(res, 0, 0));
	db.oldest_binary_schema = atoi(PQgetvalue(res, 0, 1));
	switch (ledger_migrate_fit(&db)) {
	case LEDGER_SCHEMA_TOO_NEW:
		snprintf(err, errlen,
			 "the database is at schema %d, which a ledgerd of schema %d or newer must "
			 "serve; this one knows schema %d",
			 db.version, db.oldest_binary_schema, ledger_migrate_expected_version());
		rc = LEDGER_ERR_INVALID;
		goto out;
	case LEDGER_SCHEMA_NEWER: /* nothing to apply: a rollback's migrate step succeeds */
	case LEDGER_SCHEMA_CURRENT:
		goto out;
	case LEDGER_SCHEMA_OLDER:
		break;
	}
	for (unsigned i = 0; i < ledger_migration_count; i++) {
		const struct ledger_migration *m = &ledger_migrations[i];

		if (m->version <= db.version)
			continue;
		rc = apply_one(pg, m, err, errlen);
		if (rc != LEDGER_OK)
			goto out;
		LOG_INFO("applied migration %s", m->name);
		(*applied_out)++;
		db.version = m->version;
		if (m->oldest_binary_schema > db.oldest_binary_schema)
			db.oldest_binary_schema = m->oldest_binary_schema;
	}
out:
	*state_out = db;
	PQclear(res);
	if (locked)
		(void)exec_script(pg, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")",
				  (char[64]){0}, 64);
	if (PQstatus(pg) == CONNECTION_OK && PQenterPipelineMode(pg) != 1 && rc == LEDGER_OK) {
		snprintf(err, errlen, "cannot enter pipeline mode");
		rc = LEDGER_ERR_INTERNAL;
	}
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_admin_statements[] = {
	&schema_exists,
	NULL,
};
