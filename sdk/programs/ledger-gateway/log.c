/*
 * sdk/programs/ledger-gateway/log.c: the log lines of log.h, each written
 * with one write(2), so that lines of several threads never interleave.
 */
#include "sdk/programs/ledger-gateway/log.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* The trace of the request the thread serves (trace.h), or "": none. */
static __thread char log_trace_id[33], log_span_id[17];

void gateway_log_trace(const char *trace_id, const char *span_id)
{
	snprintf(log_trace_id, sizeof(log_trace_id), "%s", trace_id != NULL ? trace_id : "");
	snprintf(log_span_id, sizeof(log_span_id), "%s", span_id != NULL ? span_id : "");
}

static void put_line(const char *level, const char *msg, const char *rid, const char *aid,
		     const char *extra)
{
	struct timespec ts;
	char ids[200] = "", trace[80] = "", line[1300];
	int n;

	if (rid != NULL && rid[0] != '\0')
		snprintf(ids, sizeof(ids), ",\"request_id\":\"%s\"%s%s%s", rid,
			 aid != NULL ? ",\"attempt_id\":\"" : "", aid != NULL ? aid : "",
			 aid != NULL ? "\"" : "");
	if (log_trace_id[0] != '\0')
		snprintf(trace, sizeof(trace), ",\"trace_id\":\"%s\",\"span_id\":\"%s\"",
			 log_trace_id, log_span_id);
	clock_gettime(CLOCK_REALTIME, &ts);
	n = snprintf(line, sizeof(line),
		     "{\"ts\":%lld.%03ld,\"level\":\"%s\",\"msg\":\"%s\"%s%s%s%s}\n",
		     (long long)ts.tv_sec, ts.tv_nsec / 1000000L, level, msg, ids, trace,
		     extra[0] != '\0' ? "," : "", extra);
	if (n > 0 && write(STDERR_FILENO, line,
			   (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) < 0) {
		/* Nowhere to say it. */
	}
}

void gateway_log(const char *msg, const char *rid, const char *aid, const char *fmt, ...)
{
	char extra[768] = "";
	va_list ap;

	if (fmt != NULL) {
		va_start(ap, fmt);
		vsnprintf(extra, sizeof(extra), fmt, ap);
		va_end(ap);
	}
	put_line("info", msg, rid, aid, extra);
}

void gateway_warn(const char *msg)
{
	put_line("warn", msg, NULL, NULL, "");
}

void gateway_log_ledger_failure(const char *msg, const char *rid, const char *aid,
				const struct ledger_client_error *err)
{
	/* Both strings come from the peer: quoted by jansson, whatever they hold. */
	json_t *code = json_string(err->code), *text = json_string(err->message);
	char *qcode = code != NULL ? json_dumps(code, JSON_ENCODE_ANY) : NULL;
	char *qtext = text != NULL ? json_dumps(text, JSON_ENCODE_ANY) : NULL;

	gateway_log(msg, rid, aid, "\"status\":%ld,\"code\":%s,\"tls\":%s,\"error\":%s",
		    err->status, qcode != NULL ? qcode : "null",
		    err->failure == LEDGER_CLIENT_FAILURE_TLS ? "true" : "false",
		    qtext != NULL ? qtext : "null");
	free(qcode);
	free(qtext);
	json_decref(code);
	json_decref(text);
}
