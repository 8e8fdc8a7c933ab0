/*
 * api/wire/trace.h: the HTTP side of a span, for every server on the wire:
 * the parent a request head names (W3C traceparent and tracestate), the
 * method as OpenTelemetry's HTTP conventions know it, and the server's
 * address and port from an authority, so that every server's spans read a
 * head alike.
 */
#ifndef WIRE_TRACE_H
#define WIRE_TRACE_H

#include <stddef.h>

#include "api/wire/http.h"
#include "ledger/common/trace.h"

/**
 * The parent @p head names: one traceparent field exactly (two are a
 * malformed value, so a new trace); tracestate fields joined with commas,
 * as RFC 9110 joins a repeated field, and dropped past LEDGER_TRACESTATE_MAX.
 * @param head borrowed for the call
 * @param out not valid when there is no usable parent
 */
void wire_trace_parent(const struct wire_http_head *head, struct ledger_trace_ctx *out);

/** @p method as the HTTP conventions name it ("GET", ..., "QUERY"), static;
 *  NULL for any other, which they call "_OTHER". */
const char *wire_trace_method(const char *method);

/**
 * Sets server.address and server.port on @p span from @p authority ("name",
 * "name:port", "[v6]:port"; @p len bytes), the port @p default_port when it
 * names none. A malformed port sets no port.
 */
void wire_trace_server(struct ledger_span *span, const char *authority, size_t len,
		       long default_port);

#endif
