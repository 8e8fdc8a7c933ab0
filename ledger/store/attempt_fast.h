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
#include "ledger/store/step.h"
#include "ledger/store/store.h"

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

/** Runs @p call's fast statement alone, in its own implicit transaction. */
LEDGER_MUSTCHECK enum ledger_err
store_attempt_fast_run(struct ledger_store_conn *conn, const char *tenant, const char *request_id,
		       const char *attempt_id, const struct ledger_attempt_call *call,
		       struct ledger_attempt_result *out, bool *done);

#endif
