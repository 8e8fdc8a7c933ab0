/*
 * ledger/store/conn.h: one connection of the store to PostgreSQL, owned by
 * one thread at a time, and the statements it has prepared.
 */
#ifndef LEDGER_STORE_CONN_H
#define LEDGER_STORE_CONN_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "ledger/common/err.h"

/* A prepared statement: prepared on a connection the first time it is used. */
struct store_stmt {
	const char *name;
	const char *sql;
	int nparams;
};

#define STORE_MAX_STMTS 64 /* statements of all store files together */

struct ledger_store_conn {
	PGconn *pg;               /* NULL while down */
	const char *database_url; /* borrowed */
	int64_t last_attempt_ms;  /* monotonic, of the last connect */
	int64_t reconnect_ms;
	const struct store_stmt *prepared[STORE_MAX_STMTS]; /* what this connection knows */
	unsigned nprepared;
	bool unreplicated; /* a commit of this step was not confirmed by the synchronous standby */
	bool quiet;        /* a failed step is not logged here: its caller logs it per call */
	bool stuck;        /* a step outlived its deadline: its results are still to come */
	int64_t deadline_ms; /* monotonic; the call in hand must be answered by then; 0: none */
	unsigned next_host;  /* of a multi-host URL, the one to try first when connecting */
	char failure[300];   /* what the last failed step said */
};

/**
 * The deadline of a wait that starts now: the call's (deadline_ms), or
 * the process's bound on one wait (ledger_store_set_timeout()) from now,
 * whichever comes first; INT64_MAX when neither is set.
 */
int64_t store_conn_deadline(const struct ledger_store_conn *c);

/**
 * Sends what libpq holds for the server, then waits until a result can be
 * read without blocking, until @p deadline_ms (monotonic).
 * @return false when the deadline passed first; true otherwise, also on a
 *         broken connection (the next result says so)
 */
bool store_conn_await(struct ledger_store_conn *c, int64_t deadline_ms);

/** Monotonic milliseconds. */
int64_t store_conn_now_ms(void);

/**
 * True when the connection is up (connecting first if it is time to);
 * false while it is stuck (see ledger_store_settle()). Each connection
 * attempt it makes tells the process whether the database is reachable
 * (ledger_store_reachable()), which logs a warning when that changes.
 */
bool store_conn_ready(struct ledger_store_conn *conn);

/**
 * Drops an idle connection the server has closed (it shut down, or ended
 * the backend), without sending anything, so that its next attempt to
 * connect tells whether the database is back.
 */
void store_conn_check_idle(struct ledger_store_conn *c);

/** Prepares @p c for the pool: down, with its first connection due at once. */
void store_conn_init(struct ledger_store_conn *c, const char *database_url, int64_t reconnect_ms);

/** Closes the connection, if open; it is reopened by store_conn_ready(). */
void store_conn_drop(struct ledger_store_conn *c);

/** Counts a database failure of @p kind for /metrics. Thread-safe. */
void store_conn_count_error(enum ledger_err kind);

#endif
