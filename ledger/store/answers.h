/*
 * ledger/store/answers.h: writing a request's kept answer in the
 * transaction that ends the request (ledger/store/attempts.c,
 * ledger/store/failover.c); reading it is ledger_store_answer_get() of
 * store.h.
 */
#ifndef LEDGER_STORE_ANSWERS_H
#define LEDGER_STORE_ANSWERS_H

#include "ledger/core/answer.h"
#include "ledger/store/step.h"
#include "ledger/store/store.h"

/**
 * Queues the insert of the answer @p a (borrowed until the step runs) of
 * request @p key, in the step of the transaction that ends the request.
 * A request that has one keeps it.
 */
void store_answers_add(struct store_step *st, const struct ledger_call_key *key,
		       const struct ledger_answer *a);

#endif
