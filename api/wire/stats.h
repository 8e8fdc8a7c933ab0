/*
 * api/wire/stats.h: what the wire counts (requests refused on it,
 * connections refused when accepted, deadlines that cut one, connections
 * shed for the output waiting on them, connections open), process-wide,
 * for the /metrics of whichever server runs on it.
 */
#ifndef WIRE_STATS_H
#define WIRE_STATS_H

#include "ledger/common/buf.h"

/* A request refused on the wire, by its error code (wire_http_error.code). */
void wire_stats_refused(const char *code);

/* A connection closed as it was accepted: total, per_address, files or memory. */
void wire_stats_connection_refused(const char *reason);

/* A connection cut by a deadline: head, body or write. */
void wire_stats_timeout(const char *phase);

/* A connection closed because the output waiting on slow readers passed its bound. */
void wire_stats_shed(void);

/* One connection more (+1) or fewer (-1). */
void wire_stats_connections(int delta);

/**
 * Appends the wire's metrics in the Prometheus text format to @p out, each
 * named @p prefix and its own name (prefix "ledger_": ledger_http_connections).
 */
void wire_stats_render(struct ledger_buf *out, const char *prefix);

#endif
