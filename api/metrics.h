/*
 * api/metrics.h: ledgerd's counters, exposed on /metrics in the Prometheus
 * text format. Counting is a relaxed atomic add: free on the hot path.
 */
#ifndef API_METRICS_H
#define API_METRICS_H

#include <stddef.h>

#include "ledger/buf.h"
#include "ledger/decide.h"

/** Counts one HTTP response. @p route_index is SIZE_MAX when unrouted. */
void api_metrics_http(size_t route_index, unsigned status);

/** Counts one claim outcome. */
void api_metrics_claim(enum ledger_claim_outcome o);

/** Appends the exposition of every metric to @p out. */
void api_metrics_render(struct ledger_buf *out, size_t queue_depth, long in_flight);

#endif
