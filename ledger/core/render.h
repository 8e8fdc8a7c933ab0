/*
 * ledger/core/render.h: the JSON forms of the router-side objects: a request, an
 * attempt as POST attempts returns it, a client error, a failover decision.
 * They live in the domain, not in api/, because a failover decision and a
 * client error are recorded as written (a retried call, or a late
 * attempt, gets back the very text the first answer had).
 */
#ifndef LEDGER_RENDER_H
#define LEDGER_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/core/attempt.h"
#include "ledger/common/buf.h"
#include "ledger/common/jsonw.h"

/**
 * Writes the client error OpenAI-compatible clients raise:
 * {"error": {"code", "type", "param", "message", "request_id",
 * "partial_output", "delivered_output_tokens", "retryable": false}}.
 * @param code one of upstream_decode_interrupted, retry_budget_exhausted,
 *        retry_cost_exceeded, tool_outcome_unknown, client_disconnected,
 *        tool_call_divergence
 * @param budget which budget a retry_budget_exhausted spent: its name is
 *        added as "budget" (NONE: nothing added)
 */
void ledger_render_client_error(struct ledger_buf *out, const char *code, const char *request_id,
				const struct ledger_request *r, enum ledger_budget_kind budget);

/**
 * Writes the request object as the API shows it.
 * @param client_error its recorded client error (JSON text), or NULL
 */
void ledger_render_request(struct ledger_jsonw *w, const char *request_id,
			   const struct ledger_request *r, const char *client_error);

/** The members of the request object, into an object the caller opened (and closes). */
void ledger_render_request_members(struct ledger_jsonw *w, const char *request_id,
				   const struct ledger_request *r, const char *client_error);

/**
 * Writes the attempt as POST attempts answers it: {"attempt_id", "epoch",
 * "attempt_number", "lease_ms", "gateway", "request": {...}}.
 */
void ledger_render_attempt(struct ledger_jsonw *w, const char *request_id,
			   const struct ledger_attempt *a, const struct ledger_request *r,
			   const char *client_error);

/** The members of the attempt object, into an object the caller opened (and closes). */
void ledger_render_attempt_members(struct ledger_jsonw *w, const char *request_id,
				   const struct ledger_attempt *a, const struct ledger_request *r,
				   const char *client_error);

/**
 * Writes settled_tool_calls: an array of {"tool_call_id", "tool",
 * "args_sha256", "outcome"}, @p n of @p calls (borrowed) in their order.
 */
void ledger_render_settled_calls(struct ledger_jsonw *w, const struct ledger_settled_call *calls,
				 size_t n);

#endif
