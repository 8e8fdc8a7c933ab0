/*
 * api/wire/trace.c: what a span reads of an HTTP request head (trace.h):
 * its parent, its method and its server, the same for every server on the
 * wire.
 */
#include "api/wire/trace.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

/* The methods the HTTP conventions know. */
static const char *const known_methods[] = {"GET",     "HEAD",    "POST",  "PUT",   "DELETE",
					    "CONNECT", "OPTIONS", "TRACE", "PATCH", "QUERY"};

const char *wire_trace_method(const char *method)
{
	for (size_t i = 0; i < sizeof(known_methods) / sizeof(known_methods[0]); i++) {
		if (strcmp(method, known_methods[i]) == 0)
			return known_methods[i];
	}
	return NULL;
}

void wire_trace_parent(const struct wire_http_head *head, struct ledger_trace_ctx *out)
{
	char ts[LEDGER_TRACESTATE_MAX + 1];
	const char *tp = NULL;
	size_t ts_len = 0;
	unsigned ntp = 0;
	bool over = false;

	for (unsigned i = 0; i < head->nfields; i++) {
		const struct wire_http_field *f = &head->fields[i];
		size_t len;

		if (strcasecmp(f->name, "traceparent") == 0) {
			tp = f->value;
			ntp++;
		} else if (strcasecmp(f->name, "tracestate") == 0 && (len = strlen(f->value)) > 0) {
			if (ts_len + (ts_len > 0) + len > LEDGER_TRACESTATE_MAX) {
				over = true;
				continue;
			}
			if (ts_len > 0)
				ts[ts_len++] = ',';
			memcpy(ts + ts_len, f->value, len);
			ts_len += len;
		}
	}
	ts[ts_len] = '\0';
	if (ntp != 1)
		tp = NULL;
	if (over)
		ts_len = 0;
	ledger_trace_ctx_parse(out, tp, tp != NULL ? strlen(tp) : 0, ts_len > 0 ? ts : NULL,
			       ts_len);
}

void wire_trace_server(struct ledger_span *span, const char *authority, size_t len,
		       long default_port)
{
	const char *end = authority + len, *colon = NULL;
	long port = default_port;

	if (len == 0)
		return;
	if (authority[0] == '[') {
		const char *close = memchr(authority, ']', len);

		if (close == NULL)
			return;
		ledger_span_set_strn(span, "server.address", authority + 1,
				     (size_t)(close - authority - 1));
		colon = close + 1 < end && close[1] == ':' ? close + 1 : NULL;
	} else {
		colon = memrchr(authority, ':', len);
		ledger_span_set_strn(span, "server.address", authority,
				     colon != NULL ? (size_t)(colon - authority) : len);
	}
	if (colon != NULL) {
		port = 0;
		for (const char *p = colon + 1; p < end; p++) {
			if (*p < '0' || *p > '9' || port > 65535)
				return;
			port = port * 10 + (*p - '0');
		}
		if (port <= 0 || port > 65535)
			return;
	}
	if (port > 0)
		ledger_span_set_int(span, "server.port", port);
}
