/*
 * ledger/store/step.c: pipeline steps, the reading of their results, and
 * the transaction frame. Statements are prepared lazily, in the same
 * pipeline as their first execution, so a fresh connection costs no extra
 * round trip and a database that is not migrated yet fails only the calls
 * that need its tables. A step is a set of statements sent and read
 * together after one sync; a transaction is one or more steps.
 *
 * Prepared statements live in the server session, so a connection must
 * keep one session for its life: a pooler that hands each transaction
 * another session (PgBouncer in transaction or statement mode) is
 * recognised here by the errors it causes and refused with one clear line.
 */
#include "ledger/store/step.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/log.h"

/* --- steps --- */

void store_step_begin(struct store_step *st, struct ledger_store_conn *conn)
{
	st->conn = conn;
	st->n = st->nsent = st->nints = 0;
	st->cap = STORE_MAX_STEP;
	st->res = st->res_inline;
	st->sent = st->sent_inline;
	st->ints = st->ints_inline;
	memset(st->res_inline, 0, sizeof(st->res_inline));
}

enum ledger_err store_step_begin_many(struct store_step *st, struct ledger_store_conn *conn,
				      unsigned cap)
{
	store_step_begin(st, conn);
	if (cap <= STORE_MAX_STEP)
		return LEDGER_OK;
	st->res = calloc(cap, sizeof(*st->res));
	st->sent = calloc(2 * (size_t)cap, sizeof(*st->sent));
	st->ints = calloc(4 * (size_t)cap, sizeof(*st->ints));
	st->cap = cap;
	if (st->res == NULL || st->sent == NULL || st->ints == NULL) {
		store_step_free(st);
		return LEDGER_ERR_NOMEM;
	}
	return LEDGER_OK;
}

void store_step_free(struct store_step *st)
{
	store_step_clear(st);
	if (st->res != st->res_inline) {
		free(st->res);
		free(st->sent);
		free(st->ints);
	}
	store_step_begin(st, st->conn);
}

static bool is_prepared(const struct ledger_store_conn *c, const struct store_stmt *stmt)
{
	for (unsigned i = 0; i < c->nprepared; i++) {
		if (c->prepared[i] == stmt)
			return true;
	}
	return false;
}

void store_step_add(struct store_step *st, const struct store_stmt *stmt, const char *const *params)
{
	struct ledger_store_conn *c = st->conn;

	if (st->n >= st->cap)
		abort();
	if (!is_prepared(c, stmt)) {
		if (c->nprepared >= STORE_MAX_STMTS)
			abort();
		PQsendPrepare(c->pg, stmt->name, stmt->sql, stmt->nparams, NULL);
		c->prepared[c->nprepared++] = stmt;
		st->sent[st->nsent++] = stmt;
	}
	PQsendQueryPrepared(c->pg, stmt->name, stmt->nparams, params, NULL, NULL, 0);
	st->sent[st->nsent++] = NULL;
	st->n++;
}

void store_step_add_simple(struct store_step *st, const char *sql)
{
	if (st->n >= st->cap)
		abort();
	PQsendQueryParams(st->conn->pg, sql, 0, NULL, NULL, NULL, NULL, 0);
	st->sent[st->nsent++] = NULL;
	st->n++;
}

/* Forgets a statement whose prepare did not succeed, to prepare it again. */
static void forget_prepared(struct ledger_store_conn *c, const struct store_stmt *stmt)
{
	for (unsigned i = 0; i < c->nprepared; i++) {
		if (c->prepared[i] == stmt) {
			c->prepared[i] = c->prepared[--c->nprepared];
			return;
		}
	}
}

/* Sorts a failure into what the caller can do about it. */
static enum ledger_err classify(const PGresult *res, PGconn *pg)
{
	const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (PQstatus(pg) != CONNECTION_OK || state == NULL)
		return LEDGER_ERR_UNAVAILABLE;
	if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0)
		return LEDGER_ERR_CONFLICT;
	/*
	 * Connection exceptions, operator intervention (shutdown, recovery),
	 * insufficient resources, system errors, and a read-only server (a
	 * standby that has not been promoted yet): the database cannot take
	 * the call now, but may soon.
	 */
	if (strncmp(state, "08", 2) == 0 || strncmp(state, "57", 2) == 0 ||
	    strncmp(state, "53", 2) == 0 || strncmp(state, "58", 2) == 0 ||
	    strcmp(state, "25006") == 0)
		return LEDGER_ERR_UNAVAILABLE;
	/* An undefined table or column: the schema is not migrated. */
	if (strcmp(state, "42P01") == 0 || strcmp(state, "42703") == 0)
		return LEDGER_ERR_UNAVAILABLE;
	return LEDGER_ERR_INTERNAL;
}

/*
 * A statement this connection prepared that its session does not know
 * (26000), or one it never prepared that its session has already (42P05):
 * the session under the connection changed between transactions. ledgerd
 * never deallocates, so only a pooler that shares sessions does this, and
 * every statement run through it may meet another session's statements.
 */
static bool session_changed(const PGresult *res)
{
	const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return state != NULL && (strcmp(state, "26000") == 0 || strcmp(state, "42P05") == 0);
}

/* Said once per process: every connection through such a pooler says the same. */
static atomic_bool pooler_reported;
static atomic_ullong round_trips;

uint64_t ledger_store_round_trips(void)
{
	return atomic_load(&round_trips);
}

static void report_pooler(const char *what)
{
	if (!atomic_exchange(&pooler_reported, true))
		LOG_ERROR(
			"the database session changed under a connection (%.*s): a pooler in "
			"transaction or statement mode is between ledgerd and PostgreSQL. ledgerd "
			"keeps prepared statements in its sessions and needs a pooler in session "
			"mode, or none (docs/operations.md, \"Poolers (PgBouncer)\"). A call that "
			"meets another session's statements is answered 503",
			(int)strcspn(what, "\n"), what);
}

/* The words of a step's failure, as logged and kept in the connection's failure. */
#define WHAT_MAX 300

/*
 * Reads a result for each message the step sent, then the sync, by
 * @p deadline: a prepare's result is cleared, a statement's kept in the
 * step (*@p nres of them). The first failure names the cause in @p what
 * (the server skipped the rest) and says whether the session changed.
 * @return LEDGER_OK, or the class of the failure that ended the reading
 */
static enum ledger_err read_results(struct store_step *st, int64_t deadline, char *what,
				    bool *swapped, unsigned *nres)
{
	struct ledger_store_conn *c = st->conn;
	enum ledger_err rc = LEDGER_OK;
	PGresult *res = NULL;

	for (unsigned i = 0; i < st->nsent; i++) {
		ExecStatusType status;
		bool ok;

		if (!store_conn_await(c, deadline))
			goto late;
		res = PQgetResult(c->pg);
		if (res == NULL) {
			rc = LEDGER_ERR_UNAVAILABLE;
			snprintf(what, WHAT_MAX, "%s", PQerrorMessage(c->pg));
			goto out;
		}
		status = PQresultStatus(res);
		ok = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
		if (!ok && rc == LEDGER_OK) {
			/* The first failure names the cause; the rest were skipped. */
			rc = classify(res, c->pg);
			snprintf(what, WHAT_MAX, "%s", PQresultErrorMessage(res));
			*swapped = session_changed(res);
		}
		if (st->sent[i] != NULL) {
			if (!ok)
				forget_prepared(c, st->sent[i]);
			PQclear(res);
		} else {
			st->res[(*nres)++] = res;
		}
		res = NULL; /* cleared or the step's now */
		if (!store_conn_await(c, deadline))
			goto late;
		res = PQgetResult(c->pg); /* each statement's results end with a NULL */
		if (res != NULL) {
			/* Only COPY or multiple statements yield more: a bug here. */
			LOG_ERROR(
				"database step: unexpected extra result %s after %s (%u of %u): %s",
				PQresStatus(PQresultStatus(res)), PQresStatus(status), i, st->nsent,
				PQresultErrorMessage(res));
			abort();
		}
	}
	if (!store_conn_await(c, deadline))
		goto late;
	res = PQgetResult(c->pg);
	if ((res == NULL || PQresultStatus(res) != PGRES_PIPELINE_SYNC) && rc == LEDGER_OK) {
		rc = LEDGER_ERR_UNAVAILABLE;
		snprintf(what, WHAT_MAX, "%s", PQerrorMessage(c->pg));
	}
	if (c->unreplicated && rc == LEDGER_OK) {
		/* Committed here, maybe not on the standby: never answered as durable. */
		rc = LEDGER_ERR_UNAVAILABLE;
		snprintf(what, WHAT_MAX, "commit not confirmed by the synchronous standby");
	}
out:
	PQclear(res);
	return rc;
late:
	/*
	 * The deadline passed with results still owed: the call is answered
	 * 503 now. Whether a COMMIT in this step took effect is unknown, and
	 * it is not cancelled (a cancelled synchronous commit is visible but
	 * not durable); a retry of the call finds out, idempotently.
	 */
	c->stuck = true;
	rc = LEDGER_ERR_UNAVAILABLE;
	snprintf(what, WHAT_MAX, "the database did not answer within %lld ms",
		 (long long)ledger_store_timeout());
	goto out;
}

/*
 * What a failed step leaves: the failure counted, kept (a batch logs it
 * with each of its calls' ids) and logged, and no transaction open, unless
 * the connection is stuck (ledger_store_settle() reads the rest) or has to go.
 * @return @p rc, or LEDGER_ERR_UNAVAILABLE when the connection broke
 */
static enum ledger_err after_failure(struct store_step *st, enum ledger_err rc, char *what,
				     bool swapped, unsigned nres)
{
	struct ledger_store_conn *c = st->conn;

	store_conn_count_error(rc);
	what[strcspn(what, "\n")] = '\0';
	snprintf(c->failure, sizeof(c->failure), "%s", what);
	if (c->quiet)
		;
	else if (rc == LEDGER_ERR_INTERNAL)
		LOG_ERROR("database error: %s", what);
	else
		LOG_DEBUG("database step failed: %s", what);
	if (c->stuck) {
		/* Nothing is cancelled: ledger_store_settle() reads the rest. */
	} else if (PQstatus(c->pg) != CONNECTION_OK || nres < st->n) {
		/* The connection broke mid-step: nothing more can be read. */
		rc = LEDGER_ERR_UNAVAILABLE;
		store_conn_drop(c);
	} else {
		store_step_abort(c);
		/* What it thinks is prepared is wrong: start again from nothing. */
		if (swapped)
			store_conn_drop(c);
	}
	return rc;
}

enum ledger_err store_step_run(struct store_step *st)
{
	struct ledger_store_conn *c = st->conn;
	enum ledger_err rc = LEDGER_OK;
	unsigned nres = 0;
	int64_t deadline = store_conn_deadline(c);
	char what[WHAT_MAX] = "";
	bool swapped = false;

	c->unreplicated = false;
	atomic_fetch_add(&round_trips, 1);
	if (PQpipelineSync(c->pg) != 1) {
		rc = LEDGER_ERR_UNAVAILABLE;
		snprintf(what, sizeof(what), "%s", PQerrorMessage(c->pg));
	} else {
		rc = read_results(st, deadline, what, &swapped, &nres);
	}
	if (swapped) {
		/* A set-up refused, not a bug: the step is rolled back and the call answered 503. */
		rc = LEDGER_ERR_UNAVAILABLE;
		report_pooler(what);
	}
	if (rc != LEDGER_OK)
		rc = after_failure(st, rc, what, swapped, nres);
	return rc;
}

const char *store_step_int(struct store_step *st, int64_t v)
{
	char *slot = NULL;

	if (st->nints >= 4 * st->cap)
		abort(); /* a step with this many integers is a bug */
	slot = st->ints[st->nints++];
	snprintf(slot, sizeof(st->ints[0]), "%lld", (long long)v);
	return slot;
}

void store_step_clear(struct store_step *st)
{
	for (unsigned i = 0; i < st->cap; i++) {
		PQclear(st->res[i]);
		st->res[i] = NULL;
	}
	st->n = 0;
	st->nsent = 0;
	st->nints = 0;
}

/* The next result, read within @p deadline; *late tells a timeout from a NULL. */
static PGresult *result_by(struct ledger_store_conn *c, int64_t deadline, bool *late)
{
	*late = !store_conn_await(c, deadline);
	return *late ? NULL : PQgetResult(c->pg);
}

/* Ends the open transaction, if any, by @p deadline; drops the connection if it cannot. */
static void rollback_by(struct ledger_store_conn *c, int64_t deadline)
{
	PGresult *res = NULL;
	bool ok = false, late = false;

	if (c->pg == NULL || PQtransactionStatus(c->pg) == PQTRANS_IDLE)
		return;
	atomic_fetch_add(&round_trips, 1);
	if (PQsendQueryParams(c->pg, "ROLLBACK", 0, NULL, NULL, NULL, NULL, 0) == 1 &&
	    PQpipelineSync(c->pg) == 1) {
		/* The ROLLBACK's result, the NULL that ends it, then the sync. */
		res = result_by(c, deadline, &late);
		ok = res != NULL && PQresultStatus(res) == PGRES_COMMAND_OK;
		PQclear(res);
		res = ok ? result_by(c, deadline, &late) : NULL;
		ok = ok && !late && res == NULL;
		PQclear(res);
		res = ok ? result_by(c, deadline, &late) : NULL;
		ok = ok && res != NULL && PQresultStatus(res) == PGRES_PIPELINE_SYNC;
		PQclear(res);
	}
	/* A ROLLBACK that did not finish leaves nothing to keep: the connection goes. */
	if (!ok)
		store_conn_drop(c);
}

void store_step_abort(struct ledger_store_conn *c)
{
	if (!c->stuck) /* a stuck connection is settled by its thread, later */
		rollback_by(c, store_conn_deadline(c));
}

/* Results a stuck step may still owe: bounded, so a bug cannot spin forever. */
#define SETTLE_MAX_RESULTS 100000

void ledger_store_settle(struct ledger_store_conn *c)
{
	int64_t bound = ledger_store_timeout(), deadline;
	bool late = false;

	if (!c->stuck || c->pg == NULL)
		return;
	/*
	 * Waits for what the server owes, however long it takes within this
	 * bound (a COMMIT waiting for a synchronous standby that is gone
	 * waits here, uncancelled), then leaves no transaction open. Past the
	 * bound the connection is closed: still nothing is cancelled, since
	 * the server finishes what it was doing before it notices.
	 */
	deadline = store_conn_now_ms() + (bound * 6 > 30000 ? bound * 6 : 30000);
	for (unsigned i = 0; i < SETTLE_MAX_RESULTS; i++) {
		PGresult *res = result_by(c, deadline, &late);
		ExecStatusType status;

		if (late)
			break;
		if (res == NULL) {
			if (PQstatus(c->pg) != CONNECTION_OK)
				break;
			continue; /* the end of one statement's results */
		}
		status = PQresultStatus(res);
		PQclear(res);
		if (status == PGRES_PIPELINE_SYNC) {
			c->stuck = false;
			c->deadline_ms = 0;
			rollback_by(c, deadline);
			if (c->pg != NULL)
				LOG_INFO("the database answered what it owed a call that was "
					 "answered 503");
			return;
		}
	}
	LOG_WARN("the database still owes a call answered 503; its connection is closed "
		 "(nothing was cancelled)");
	store_conn_drop(c);
}

/* --- reading results --- */

void store_step_get_text(const PGresult *res, int row, int col, char *dst, size_t cap)
{
	const char *v = PQgetisnull(res, row, col) ? "" : PQgetvalue(res, row, col);

	snprintf(dst, cap, "%s", v);
}

int64_t store_step_get_int(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

bool store_step_get_bool(const PGresult *res, int row, int col)
{
	return !PQgetisnull(res, row, col) && PQgetvalue(res, row, col)[0] == 't';
}

char *store_step_get_dup(const PGresult *res, int row, int col, size_t *len_out)
{
	size_t len;
	char *p = NULL;

	if (len_out != NULL)
		*len_out = 0;
	if (PQgetisnull(res, row, col))
		return NULL;
	len = (size_t)PQgetlength(res, row, col);
	p = malloc(len + 1);
	if (p == NULL)
		return NULL;
	memcpy(p, PQgetvalue(res, row, col), len);
	p[len] = '\0';
	if (len_out != NULL)
		*len_out = len;
	return p;
}

/* --- transactions --- */

enum ledger_err store_step_commit(struct store_step *st)
{
	store_step_add_simple(st, "COMMIT");
	return store_step_run(st);
}

enum ledger_err store_step_rollback(struct ledger_store_conn *conn)
{
	store_step_abort(conn);
	return conn->pg != NULL && !conn->stuck ? LEDGER_OK : LEDGER_ERR_UNAVAILABLE;
}

void store_step_fmt_int(char buf[24], int64_t v)
{
	snprintf(buf, 24, "%lld", (long long)v);
}

/* Serialization failures and deadlocks are rare under one row lock: a few tries do. */
#define MAX_TRIES 3

bool store_step_retry(struct ledger_store_conn *conn, struct store_retry *r, enum ledger_err *rc)
{
	if (r->tries == 0 && !store_conn_ready(conn)) {
		*rc = LEDGER_ERR_UNAVAILABLE;
		return false;
	}
	if (r->tries > 0 && (*rc != LEDGER_ERR_CONFLICT || r->tries == MAX_TRIES))
		return false;
	r->tries++;
	return true;
}

void store_step_array_add(struct ledger_buf *b, const char *s)
{
	ledger_buf_putc(b, b->len == 0 ? '{' : ',');
	if (s == NULL) {
		ledger_buf_puts(b, "NULL");
		return;
	}
	ledger_buf_putc(b, '"');
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			ledger_buf_putc(b, '\\');
		ledger_buf_putc(b, *s);
	}
	ledger_buf_putc(b, '"');
}

void store_step_array_end(struct ledger_buf *b)
{
	ledger_buf_puts(b, b->len == 0 ? "{}" : "}");
}
