/*
 * sdk/programs/ledger-gateway/log.h: ledger-gateway's log lines, one JSON
 * object each on stderr, with the ids of the request they are about. Never
 * a key, a body or a token.
 */
#ifndef GATEWAY_LOG_H
#define GATEWAY_LOG_H

#include "sdk/c/ledger_client.h"

/**
 * Writes {"ts", "level": "info", "msg": @p msg, "request_id": @p rid, "attempt_id": @p aid,
 * "trace_id", "span_id"} (the trace ids of gateway_log_trace(), if set) and the JSON members @p fmt formats (no leading comma; NULL: none).
 * @p rid and @p aid may be NULL.
 */
void gateway_log(const char *msg, const char *rid, const char *aid, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/**
 * Logs why ledgerd refused or could not be asked (TLS, no answer, ...) as
 * @p msg with "status", "code", "tls" and "error": the client is told only
 * "ledger_unavailable", so the reason, a misconfigured CA file say, is here.
 */
void gateway_log_ledger_failure(const char *msg, const char *rid, const char *aid,
				const struct ledger_client_error *err);

/**
 * The calling thread's lines carry "trace_id" and "span_id" (lowercase hex)
 * from now on: those of the request or attempt it serves (trace.h). NULL:
 * none. Copied.
 */
void gateway_log_trace(const char *trace_id, const char *span_id);

/** Writes {"ts", "level": "warn", "msg": @p msg}: a setting that weakens a promise. */
void gateway_warn(const char *msg);

#endif
