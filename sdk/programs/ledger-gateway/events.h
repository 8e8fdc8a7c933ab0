/*
 * sdk/programs/ledger-gateway/events.h: a run's events served to a client:
 * the request's thread attaches its connection to the run (run.h) and copies
 * the run's numbered events to it, from the one after its Last-Event-ID.
 */
#ifndef GATEWAY_EVENTS_H
#define GATEWAY_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "api/wire/conn.h"
#include "sdk/programs/ledger-gateway/run.h"

/**
 * On a request's thread: serves the client of @p conn from @p r, from the
 * event after @p last_event_id (-1: from the first; an id the run never
 * made: from the first too), until the run's last event is written, the
 * client leaves, or another client takes the run over (then this one ends
 * with a final stream_resumed_elsewhere event). A run that ends before its
 * first event answers with its refusal. Ends the reply. @p starter: the
 * request that started the run, attached from its start. A repeat's span
 * (the thread's gateway_trace_current()) gets the run's events from then on.
 * @return true; false, with nothing written, when @p r was ending (its
 *         clients gone past the hold) and a repeat could no longer attach:
 *         it has ended since, and its request's record in ledgerd says what
 *         the repeat gets
 */
bool gateway_events_serve(struct gateway_run *r, struct wire_conn *conn, int64_t last_event_id,
			  bool starter);

#endif
