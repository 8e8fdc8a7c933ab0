/*
 * api/service/tracing.h: a call's spans (api/service/tracing.c): one SERVER
 * span from its head to its reply, as the HTTP semantic conventions name
 * and describe it, and a CLIENT span for each store transaction it waited
 * on. The driver (api/service/server.c) calls these at the call's begin,
 * when a store job comes back, and at its end; with tracing off each
 * returns at once and nothing is parsed or allocated.
 */
#ifndef API_TRACING_H
#define API_TRACING_H

#include <stdbool.h>

#include "api/service/request.h"

/**
 * From the call's head: its parent (traceparent and tracestate; a
 * malformed one starts a new trace, never a refusal), then its SERVER span
 * and the ids its log lines carry (req->job.ids), unless tracing is off or
 * the path is a probe's or the page's (/healthz, /readyz, /metrics, /ui).
 * On the call's polling thread, before routing.
 * @param https the call came over TLS (url.scheme)
 */
void api_tracing_begin(struct api_request *req, bool https);

/**
 * A store job of the call came back, before the call's next one: the
 * transaction it ran in becomes a CLIENT span under the call's (none when
 * no transaction ran: a replay from the cache, a call shed), and the
 * call's span says whether that transaction was shared (ledger.batched).
 */
void api_tracing_stored(struct api_request *req);

/** The reply is queued: the SERVER span gets its last attributes and ends. */
void api_tracing_end(struct api_request *req);

/**
 * The call ends without a reply of the service's: its connection is gone
 * (an error), or the wire answered it, refusing its body (@p replied). Its
 * head is no longer there.
 */
void api_tracing_abandon(struct api_request *req, bool replied);

#endif
