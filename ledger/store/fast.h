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

/** True unless the fast paths were turned off (every call then takes the general path). */
bool store_fast_enabled(void);

/* --- claim: a key nobody claimed, or the replay of a settled one --- */

/**
 * Starts @p ev as the history's detail of a first claim by a fast path.
 * @return its text (borrowed from @p ev), or "{}" if memory ran out
 */
const char *store_fast_claim_detail(struct store_event *ev, const struct ledger_claim *c);

/** Queues claim_fast for @p key; @p ev holds its event's detail until the step ran. */
void store_fast_claim_add(struct store_step *st, const struct ledger_call_key *key,
			  const struct ledger_claim_request *req, struct store_event *ev);

/**
 * Reads row @p row of what claim_fast (or claim_many) answered.
 * @param done false when the general path must decide
 */
LEDGER_MUSTCHECK enum ledger_err store_fast_claim_read(const PGresult *res, int row,
						       const struct ledger_claim *c,
						       struct ledger_call_result *out, bool *done);

/** Runs claim_fast alone, in its own implicit transaction. */
LEDGER_MUSTCHECK enum ledger_err store_fast_claim(struct ledger_store_conn *conn,
						  const struct ledger_call_key *key,
						  const struct ledger_claim_request *req,
						  struct ledger_call_result *out, bool *done);

/* --- complete: the current holder's, within its lease --- */

/** As store_fast_claim_detail(), for a completion. */
const char *store_fast_complete_detail(struct store_event *ev, const struct ledger_completion *c);

void store_fast_complete_add(struct store_step *st, const struct ledger_call_key *key,
			     const struct ledger_completion *c, struct store_event *ev);

/** Reads row @p row of complete_fast (or complete_many), when the fast path applied. */
LEDGER_MUSTCHECK enum ledger_err store_fast_complete_read(const PGresult *res, int row,
							  const struct ledger_completion *c,
							  struct ledger_call_result *out);

LEDGER_MUSTCHECK enum ledger_err store_fast_complete(struct ledger_store_conn *conn,
						     const struct ledger_call_key *key,
						     const struct ledger_completion *c,
						     struct ledger_call_result *out, bool *done);

/* --- renew: the current holder's, not under an attempt --- */

void store_fast_renew_add(struct store_step *st, const struct ledger_call_key *key,
			  int64_t fencing_token, int64_t lease_ms);

/** @return true when renew_fast renewed the holder's lease (and fills @p out). */
bool store_fast_renew_read(const PGresult *res, int64_t fencing_token, int64_t lease_ms,
			   struct ledger_call_result *out);

#endif
