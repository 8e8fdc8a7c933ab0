/*
 * ledger/store/fast.h: the one-statement fast paths of the tool-call
 * operations, for the operations alone (ledger/store/calls.c) and for
 * batches (ledger/store/batch.c). Each answers only what the C decision
 * would answer under the lock; "not done" sends the caller to the general
 * path. ledger_store_set_fast_paths(false) turns them all off.
 */
#ifndef LEDGER_STORE_FAST_H
#define LEDGER_STORE_FAST_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "ledger/common/err.h"
#include "ledger/core/decide.h"
#include "ledger/store/rows.h"
#include "ledger/store/step.h"
#include "ledger/store/store.h"

/* --- what a batch's array statements answer, row by row (ledger/store/batch.c) --- */

/* claim: a key nobody claimed, or the replay of a settled one */

/**
 * Starts @p ev as what a first claim by a fast path keeps of its event in
 * the call's row (claimed_detail: its lease_ms and owner).
 * @return its text (borrowed from @p ev), or "{}" if memory ran out
 */
const char *store_fast_claim_detail(struct store_event *ev, const struct ledger_claim *c);

/**
 * Reads row @p row of what claim_fast (or claim_many) answered.
 * @param done false when the general path must decide
 */
LEDGER_MUSTCHECK enum ledger_err store_fast_claim_read(const PGresult *res, int row,
						       const struct ledger_claim *c,
						       struct ledger_call_result *out, bool *done);

/* complete: the current holder's, within its lease */

/** The detail a retryable failure's event_log row takes; "{}" for a final outcome. */
const char *store_fast_complete_detail(struct store_event *ev, const struct ledger_completion *c);

/** Reads row @p row of complete_fast (or complete_many), when the fast path applied. */
LEDGER_MUSTCHECK enum ledger_err store_fast_complete_read(const PGresult *res, int row,
							  const struct ledger_completion *c,
							  struct ledger_call_result *out);

/*
 * --- one operation's fast path: a claim outside attempts, a completion, a
 * renewal outside attempts; alone (ledger/store/calls.c) or in a batch ---
 */

/** Queues @p op's fast statement; @p ev holds its event's detail until the step ran. */
void store_fast_add(struct store_step *st, const struct ledger_batch_op *op,
		    struct store_event *ev);

/** Reads what @p op's fast statement answered into op->out, and op->done. */
LEDGER_MUSTCHECK enum ledger_err store_fast_read(struct ledger_batch_op *op, const PGresult *res);

/**
 * Runs @p op's fast statement alone, in its own implicit transaction.
 * @param done true when it answered: @p out then owns its result; false:
 *        the general path must decide
 */
LEDGER_MUSTCHECK enum ledger_err store_fast_run(struct ledger_store_conn *conn,
						struct ledger_batch_op *op,
						struct ledger_call_result *out, bool *done);

#endif
