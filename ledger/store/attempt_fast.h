/*
 * ledger/store/attempt_fast.h: the one-statement fast paths of the live
 * attempt's deliver and finish, alone (ledger/store/attempts.c) or in a
 * batch (ledger/store/batch.c, through ledger/store/fast.c). "Not done"
 * sends the caller to the locked path, which decides in C.
 */
#ifndef LEDGER_STORE_ATTEMPT_FAST_H
#define LEDGER_STORE_ATTEMPT_FAST_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "ledger/common/err.h"
#include "ledger/core/attempt.h"
#include "ledger/core/policy.h"
#include "ledger/store/event.h"
#include "ledger/store/step.h"
#include "ledger/store/store.h"

/* --- POST attempts: the first attempt of a request that does not exist yet --- */

/**
 * Fills @p next as the attempt @p d creates for @p in, the next after
 * @p attempt_count (what the locked path inserts, too).
 */
void store_attempt_fast_new(const struct ledger_attempt_request *in, int64_t attempt_count,
		       const struct ledger_create_decision *d, struct ledger_attempt *next);

/** Whether the C decision would create @p in on a request nobody named yet. */
bool store_attempt_fast_create_offers(const struct ledger_attempt_request *in,
				      const struct ledger_policy *p);

/**
 * Queues attempt_create_fast for @p in (offered: see above); @p ev holds
 * its event's detail until the step ran (caller frees: store_event_free()).
 */
void store_attempt_fast_create_add(struct store_step *st, const struct ledger_call_key *key,
				   const struct ledger_attempt_request *in,
				   const struct ledger_policy *p, struct store_event *ev);

/**
 * Reads what attempt_create_fast answered.
 * @param done false when the request existed: the locked path decides
 */
LEDGER_MUSTCHECK enum ledger_err
store_attempt_fast_create_read(const PGresult *res, const struct ledger_attempt_request *in,
			       const struct ledger_policy *p, struct ledger_attempt_result *out,
			       bool *done);

/* --- an attempt's own deliver and finish --- */

/** Whether @p call has a fast path: a deliver, or a finish without client error or answer. */
bool store_attempt_fast_offers(const struct ledger_attempt_call *call);

/**
 * Queues @p call's fast statement for attempt @p attempt_id of the request
 * @p key names; borrows every argument until the step ran.
 */
void store_attempt_fast_add(struct store_step *st, const struct ledger_call_key *key,
			    const char *attempt_id, const struct ledger_attempt_call *call);

/**
 * Reads what the fast statement answered.
 * @param out filled when *@p done (the caller owns it then:
 *        ledger_store_attempt_result_clear()); else left empty
 * @param done false when the locked path must decide
 */
LEDGER_MUSTCHECK enum ledger_err store_attempt_fast_read(const PGresult *res,
							 const struct ledger_attempt_call *call,
							 struct ledger_attempt_result *out,
							 bool *done);

/* --- one operation's fast path: ATTEMPT ops of a batch (ledger/store/fast.c), or alone --- */

/** Queues @p op's statement: POST attempts (attempt_create set), or a deliver or a finish. */
void store_attempt_fast_op_add(struct store_step *st, const struct ledger_batch_op *op,
			       struct store_event *ev);

/** Reads what @p op's statement answered into *op->attempt_out, and op->done. */
LEDGER_MUSTCHECK enum ledger_err store_attempt_fast_op_read(struct ledger_batch_op *op,
							    const PGresult *res);

/**
 * Runs @p op's statement alone, in its own implicit transaction.
 * @param done true when it answered (*op->attempt_out is then the
 *        caller's); false: the locked path must decide
 */
LEDGER_MUSTCHECK enum ledger_err store_attempt_fast_run(struct ledger_store_conn *conn,
							struct ledger_batch_op *op, bool *done);

#endif
