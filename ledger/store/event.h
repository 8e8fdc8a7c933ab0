/*
 * ledger/store/event.h: building an event of a request's history and
 * queueing its insert into the step of the transaction it records.
 */
#ifndef LEDGER_STORE_EVENT_H
#define LEDGER_STORE_EVENT_H

#include <stdbool.h>
#include <stdint.h>

#include "ledger/common/buf.h"
#include "ledger/common/jsonw.h"
#include "ledger/core/decide.h"
#include "ledger/store/step.h"
#include "ledger/store/store.h"

/* An event being built, to be inserted in the transaction it records. */
struct store_event {
	const char *type;       /* "claimed", "completed", "refused", ... */
	const char *attempt_id; /* NULL: none */
	struct ledger_buf detail;
	struct ledger_jsonw w; /* writes into detail; the object is left open */
};

void store_event_start(struct store_event *ev, const char *type, const char *attempt_id);
/** Starts a "refused" event of @p operation with the API's error @p code. */
void store_event_refused(struct store_event *ev, const char *operation, const char *code,
			 const char *attempt_id);
void store_event_int(struct store_event *ev, const char *key, int64_t v);
void store_event_bool(struct store_event *ev, const char *key, bool v);
/** Adds @p s, or nothing when it is NULL or empty. */
void store_event_str(struct store_event *ev, const char *key, const char *s);
/** Closes the detail and queues the event's INSERT; @p ev must outlive the step. */
void store_event_add(struct store_step *st, const struct ledger_call_key *key,
		     struct store_event *ev);
void store_event_free(struct store_event *ev);

/* The history's detail of a claim that gave @p token (@p from: the state before, or NULL). */
void store_event_claimed(struct store_event *ev, const struct ledger_claim *c, int64_t token,
			 const char *from);

/*
 * The history's detail of a completion: its outcome, retryable, token, and
 * for a result not kept whole "result_kept": false, its length and SHA-256.
 */
void store_event_completion(struct store_event *ev, const struct ledger_completion *c);

#endif
