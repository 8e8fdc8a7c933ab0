/*
 * ledger/store/step.h: the bottom of the store, which every store file
 * uses and which uses none of them but conn.c: pipeline steps, column
 * readers and the transaction frame (commit, rollback, retries). A step sends its statements in one pipeline and
 * reads their results after one sync: one round trip, whatever it holds.
 */
#ifndef LEDGER_STORE_STEP_H
#define LEDGER_STORE_STEP_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/buf.h"
#include "ledger/common/err.h"
#include "ledger/store/conn.h"
#include "ledger/store/store.h"

#define STORE_MAX_STEP 8 /* statements in one pipeline step */

/*
 * One step: statements queued, then sent and read together. A step holds up
 * to STORE_MAX_STEP statements in place; a batch step (store_step_begin_many)
 * holds more, in memory it allocates and store_step_free() returns.
 */
struct store_step {
	struct ledger_store_conn *conn;
	unsigned n;                     /* statements queued by the caller */
	unsigned cap;                   /* statements it can hold */
	PGresult **res;                 /* their results, after a run */
	unsigned nsent;                 /* messages sent: statements and prepares */
	const struct store_stmt **sent; /* per message: a prepare's statement, or NULL */
	char (*ints)[24];               /* integer parameters, alive until the step is cleared */
	unsigned nints;
	PGresult *res_inline[STORE_MAX_STEP];
	const struct store_stmt *sent_inline[2 * STORE_MAX_STEP];
	char ints_inline[4 * STORE_MAX_STEP][24];
};

/** Starts a step on @p conn; the connection must be up. */
void store_step_begin(struct store_step *st, struct ledger_store_conn *conn);

/**
 * Starts a step for @p cap statements, a batch's.
 * @return LEDGER_OK or LEDGER_ERR_NOMEM; end with store_step_free()
 */
LEDGER_MUSTCHECK enum ledger_err
store_step_begin_many(struct store_step *st, struct ledger_store_conn *conn, unsigned cap);

/** Clears the step and returns what store_step_begin_many() allocated. */
void store_step_free(struct store_step *st);

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

/**
 * Formats @p v as a parameter that lives as long as the step.
 * @return the text, borrowed from @p st
 */
const char *store_step_int(struct store_step *st, int64_t v);

/** Frees the step's results. NULL-safe on results. */
void store_step_clear(struct store_step *st);

/**
 * Leaves no transaction open after a failed step: rolls back if the
 * connection is inside one, drops the connection if that fails.
 */
void store_step_abort(struct ledger_store_conn *conn);

/** Copies a text column into @p dst (size @p cap), "" for NULL. */
void store_step_get_text(const PGresult *res, int row, int col, char *dst, size_t cap);

/** Reads an int8 column; 0 for NULL. */
int64_t store_step_get_int(const PGresult *res, int row, int col);

/**
 * Appends @p s to the text of a PostgreSQL array literal in @p b (empty
 * before the first element), quoted and escaped; NULL appends an SQL NULL.
 * Finish with store_step_array_end().
 */
void store_step_array_add(struct ledger_buf *b, const char *s);

/** Closes the literal: "{}" when nothing was added. */
void store_step_array_end(struct ledger_buf *b);

/** Reads a boolean column ("t"). */
bool store_step_get_bool(const PGresult *res, int row, int col);

/** A new copy of a text column, or NULL for NULL (@p len_out may be NULL). */
char *store_step_get_dup(const PGresult *res, int row, int col, size_t *len_out);

/* --- transactions --- */

/** Runs the statements queued in @p st (writes, events), then COMMIT. */
LEDGER_MUSTCHECK enum ledger_err store_step_commit(struct store_step *st);

/** Ends a transaction that wrote nothing. */
LEDGER_MUSTCHECK enum ledger_err store_step_rollback(struct ledger_store_conn *conn);

/* The tries of one operation, counted by store_step_retry(). */
struct store_retry {
	unsigned tries; /* begun so far */
};

/**
 * Whether an operation runs (again), as the condition of its own loop,
 * which calls it with its own typed parameters: the first time while the
 * connection is up (else *@p rc = LEDGER_ERR_UNAVAILABLE at once), and
 * again after a serialization failure or a deadlock
 * (*@p rc == LEDGER_ERR_CONFLICT), up to three tries in all: every
 * operation is idempotent. The operation zeroes its result before the
 * loop and, in it, frees what a failed try left before a retry
 * (store_step_retrying()).
 * @param r zeroed before the loop, then the loop's own
 * @param rc the last try's answer, which the loop returns
 */
LEDGER_MUSTCHECK bool store_step_retry(struct ledger_store_conn *conn, struct store_retry *r,
				       enum ledger_err *rc);

/** In the loop: whether this try is a retry, whose result holds what the failed try left. */
static inline bool store_step_retrying(const struct store_retry *r)
{
	return r->tries > 1;
}

/** Writes @p v in decimal, as a statement parameter. */
void store_step_fmt_int(char buf[24], int64_t v);

#endif
