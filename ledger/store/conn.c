/*
 * ledger/store/conn.c: the store's connections to PostgreSQL. A connection
 * stays in libpq pipeline mode for its whole life, reconnects by itself
 * (at most every reconnect_ms) while the database is down, and counts the
 * failures /metrics shows. A commit the synchronous standby did not
 * confirm is recognised here, from the server's notice.
 */
#include "ledger/store/conn.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/common/log.h"
#include "ledger/store/store.h"

/* Failures by kind, indexed by enum ledger_err; /metrics reads them. */
static atomic_ullong errors[LEDGER_ERR_INTERNAL + 1];

void store_conn_count_error(enum ledger_err kind)
{
	if ((unsigned)kind <= LEDGER_ERR_INTERNAL)
		atomic_fetch_add(&errors[kind], 1);
}

uint64_t ledger_store_errors(enum ledger_err kind)
{
	return (unsigned)kind <= LEDGER_ERR_INTERNAL ? atomic_load(&errors[kind]) : 0;
}

static int64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * libpq reports server notices on stderr by default; make them log lines.
 * One notice changes an answer: when a commit's wait for the synchronous
 * standby is cancelled (a cancel request, or the backend terminated), the
 * server reports success with a WARNING that the transaction "has already
 * committed locally, but might not have been replicated to the standby".
 * That commit is not durable: a failover may lose it, so the step fails.
 */
static void notice_receiver(void *arg, const PGresult *res)
{
	struct ledger_store_conn *c = arg;
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);

	if ((msg != NULL && strstr(msg, "wait for synchronous replication") != NULL) ||
	    (detail != NULL && strstr(detail, "might not have been replicated") != NULL)) {
		c->unreplicated = true;
		LOG_WARN("a commit was not confirmed by the synchronous standby: %s",
			 msg != NULL ? msg : detail);
		return;
	}
	LOG_DEBUG("database notice: %s", msg);
}

/*
 * The cancelled wait for a synchronous standby is told by the WARNING's
 * English text alone (PostgreSQL gives it no SQLSTATE of its own), so a
 * server that translates its messages would hide it: say so once.
 */
static void warn_if_localized(PGconn *pg)
{
	static atomic_bool warned;
	PGresult *res = PQexec(pg, "SHOW lc_messages");
	const char *lc =
		res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1
			? PQgetvalue(res, 0, 0)
			: NULL;

	if (lc != NULL && lc[0] != '\0' && strncmp(lc, "C", 1) != 0 &&
	    strncmp(lc, "POSIX", 5) != 0 && strncmp(lc, "en", 2) != 0 &&
	    !atomic_exchange(&warned, true))
		LOG_WARN("the database's lc_messages is %s: set it to C (or English) so that a "
			 "commit the synchronous standby did not confirm is recognised",
			 lc);
	PQclear(res);
}

void store_conn_drop(struct ledger_store_conn *c)
{
	if (c->pg != NULL)
		PQfinish(c->pg);
	c->pg = NULL;
	c->nprepared = 0;
}

/* Opens the connection; on failure leaves it down and fills @p err. */
static enum ledger_err conn_open(struct ledger_store_conn *c, char *err, size_t errlen)
{
	/*
	 * The URL comes last so that whatever it sets wins over these
	 * defaults; expand_dbname makes libpq read it as a connection string.
	 * Keepalives find a database that vanished without closing the
	 * connection within about 45 s; the call in flight then answers 503.
	 */
	const char *keys[] = {"application_name",
			      "connect_timeout",
			      "keepalives_idle",
			      "keepalives_interval",
			      "keepalives_count",
			      "dbname",
			      NULL};
	const char *vals[] = {"ledgerd", "5", "30", "5", "3", c->database_url, NULL};
	PGconn *pg = NULL;

	c->last_attempt_ms = monotonic_ms();
	pg = PQconnectdbParams(keys, vals, 1);
	if (pg == NULL) {
		snprintf(err, errlen, "out of memory");
		return LEDGER_ERR_NOMEM;
	}
	if (PQstatus(pg) != CONNECTION_OK) {
		const char *msg = PQerrorMessage(pg);
		size_t len = strcspn(msg, "\n");
		snprintf(err, errlen, "%.*s", (int)len, msg);
		PQfinish(pg);
		return LEDGER_ERR_UNAVAILABLE;
	}
	PQsetNoticeReceiver(pg, notice_receiver, c);
	warn_if_localized(pg);
	if (PQenterPipelineMode(pg) != 1) {
		snprintf(err, errlen, "cannot enter pipeline mode");
		PQfinish(pg);
		return LEDGER_ERR_INTERNAL;
	}
	c->pg = pg;
	c->nprepared = 0;
	return LEDGER_OK;
}

bool store_conn_ready(struct ledger_store_conn *c)
{
	char err[256];

	if (c->pg != NULL && PQstatus(c->pg) == CONNECTION_OK)
		return true;
	store_conn_drop(c);
	if (monotonic_ms() - c->last_attempt_ms < c->reconnect_ms)
		return false;
	if (conn_open(c, err, sizeof(err)) != LEDGER_OK) {
		store_conn_count_error(LEDGER_ERR_UNAVAILABLE);
		if (!c->down_logged)
			LOG_WARN("database unreachable: %s", err);
		c->down_logged = true;
		return false;
	}
	if (c->down_logged)
		LOG_INFO("database reachable again");
	c->down_logged = false;
	return true;
}

enum ledger_err ledger_store_connect(const char *database_url, struct ledger_store_conn **out,
				     char *err, size_t errlen)
{
	struct ledger_store_conn *c = calloc(1, sizeof(*c));
	enum ledger_err rc;

	*out = NULL;
	if (c == NULL) {
		snprintf(err, errlen, "out of memory");
		return LEDGER_ERR_NOMEM;
	}
	c->database_url = database_url;
	rc = conn_open(c, err, errlen);
	if (rc != LEDGER_OK) {
		free(c);
		return rc;
	}
	*out = c;
	return LEDGER_OK;
}

void ledger_store_disconnect(struct ledger_store_conn *c)
{
	if (c == NULL)
		return;
	store_conn_drop(c);
	free(c);
}

void store_conn_init(struct ledger_store_conn *c, const char *database_url, int64_t reconnect_ms)
{
	memset(c, 0, sizeof(*c));
	c->database_url = database_url;
	c->reconnect_ms = reconnect_ms;
	c->last_attempt_ms = monotonic_ms() - reconnect_ms; /* the first try is due at once */
}
