/*
 * ledger/store_int.h: what the store's source files share and nobody else
 * sees: the connection, the statement table and the pipeline helpers.
 * A step of a transaction sends its statements in one pipeline and reads
 * their results after one sync: one round trip, whatever it holds.
 */
#ifndef LEDGER_STORE_INT_H
#define LEDGER_STORE_INT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "ledger/err.h"

/* A prepared statement: prepared on a connection the first time it is used. */
struct store_stmt {
	const char *name;
	const char *sql;
	int nparams;
};

#define STORE_MAX_STMTS 32 /* statements of all store files together */
#define STORE_MAX_STEP 8   /* statements in one pipeline step */

struct ledger_store_conn {
	PGconn *pg;               /* NULL while down */
	const char *database_url; /* borrowed */
	int64_t last_attempt_ms;  /* monotonic, of the last connect */
	int64_t reconnect_ms;
	const struct store_stmt *prepared[STORE_MAX_STMTS]; /* what this connection knows */
	unsigned nprepared;
	bool down_logged; /* "database unreachable" said once */
};

/* One step: statements queued, then sent and read together. */
struct store_step {
	struct ledger_store_conn *conn;
	unsigned n;                    /* statements queued by the caller */
	PGresult *res[STORE_MAX_STEP]; /* their results, after a run */
	unsigned nsent;                /* messages sent: statements and prepares */
	const struct store_stmt *sent[2 * STORE_MAX_STEP]; /* a prepare's statement, or NULL */
};

/** Starts a step on @p conn; the connection must be up. */
void store_step_begin(struct store_step *st, struct ledger_store_conn *conn);

/**
 * Queues @p stmt with text parameters (NULL is SQL NULL); sent by
 * store_step_run(). Aborts on more than STORE_MAX_STEP statements (a bug).
 */
void store_step_add(struct store_step *st, const struct store_stmt *stmt,
		    const char *const *params);

/** Queues a statement without parameters, unprepared (BEGIN, COMMIT, ROLLBACK). */
void store_step_add_simple(struct store_step *st, const char *sql);

/**
 * Sends the queued statements, syncs, and collects a result for each.
 * @return LEDGER_OK when every statement succeeded; otherwise the class of
 *         the first failure (UNAVAILABLE, CONFLICT or INTERNAL), logged.
 */
LEDGER_MUSTCHECK enum ledger_err store_step_run(struct store_step *st);

/** Frees the step's results. NULL-safe on results. */
void store_step_clear(struct store_step *st);

/**
 * Leaves no transaction open after a failed step: rolls back if the
 * connection is inside one, drops the connection if that fails.
 */
void store_abort(struct ledger_store_conn *conn);

/** True when the connection is up (connecting first if it is time to). */
bool store_conn_ready(struct ledger_store_conn *conn);

/** Copies a text column into @p dst (size @p cap), "" for NULL. */
void store_copy(const PGresult *res, int row, int col, char *dst, size_t cap);

/** Reads an int8 column; 0 for NULL. */
int64_t store_int(const PGresult *res, int row, int col);

/** Reads a boolean column ("t"). */
bool store_bool(const PGresult *res, int row, int col);

/** A new copy of a text column, or NULL for NULL (@p len_out may be NULL). */
char *store_dup(const PGresult *res, int row, int col, size_t *len_out);

#endif
