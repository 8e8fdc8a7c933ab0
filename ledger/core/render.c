/*
 * ledger/core/render.c: JSON forms of requests, attempts and client errors (see
 * render.h for why they are here and not in api/).
 */
#include "ledger/core/render.h"

#include <stdlib.h>
#include <string.h>

static const struct {
	const char *code;
	const char *message;
} client_errors[] = {
	{"upstream_decode_interrupted",
	 "the model server failed after part of the answer was sent; the answer is incomplete "
	 "and will not be retried"},
	{"retry_budget_exhausted",
	 "the model server failed and the request's retry budget is spent; it was not retried"},
	{"retry_cost_exceeded",
	 "the model server failed and a retry would cost more than allowed; it was not retried"},
	{"tool_outcome_unknown",
	 "the model server failed while the outcome of a tool call is unknown; a retry could "
	 "repeat it, so none was made"},
	{"client_disconnected",
	 "the client went away after part of the answer was sent; the answer is incomplete and "
	 "will not be retried"},
	{"tool_call_divergence",
	 "a retry of the request asked for a different tool call than the first run; it was "
	 "stopped so that no action repeats"},
};

void ledger_render_client_error(struct ledger_buf *out, const char *code, const char *request_id,
				const struct ledger_request *r, enum ledger_budget_kind budget)
{
	const char *message = NULL;
	struct ledger_jsonw w;

	for (size_t i = 0; i < sizeof(client_errors) / sizeof(client_errors[0]); i++) {
		if (strcmp(client_errors[i].code, code) == 0)
			message = client_errors[i].message;
	}
	if (message == NULL)
		abort(); /* every code the domain gives has its message above */
	ledger_jsonw_init(&w, out);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "error");
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "code");
	ledger_jsonw_string(&w, code);
	ledger_jsonw_key(&w, "type");
	ledger_jsonw_string(&w, "server_error");
	ledger_jsonw_key(&w, "param");
	ledger_jsonw_null(&w);
	ledger_jsonw_key(&w, "message");
	ledger_jsonw_string(&w, message);
	ledger_jsonw_key(&w, "request_id");
	ledger_jsonw_string(&w, request_id);
	ledger_jsonw_key(&w, "partial_output");
	ledger_jsonw_bool(&w, r->first_delta_sent);
	ledger_jsonw_key(&w, "delivered_output_tokens");
	ledger_jsonw_int(&w, r->delivered_output_tokens);
	ledger_jsonw_key(&w, "retryable");
	ledger_jsonw_bool(&w, false);
	if (budget != LEDGER_BUDGET_NONE) {
		ledger_jsonw_key(&w, "budget");
		ledger_jsonw_string(&w, ledger_attempt_budget_name(budget));
	}
	ledger_jsonw_object_end(&w);
	ledger_jsonw_object_end(&w);
}

void ledger_render_request(struct ledger_jsonw *w, const char *request_id,
			   const struct ledger_request *r, const char *client_error)
{
	ledger_jsonw_object_begin(w);
	ledger_render_request_members(w, request_id, r, client_error);
	ledger_jsonw_object_end(w);
}

void ledger_render_request_members(struct ledger_jsonw *w, const char *request_id,
				   const struct ledger_request *r, const char *client_error)
{
	ledger_jsonw_key(w, "request_id");
	ledger_jsonw_string(w, request_id);
	ledger_jsonw_key(w, "status");
	ledger_jsonw_string(w, ledger_attempt_request_status_name(r->status));
	ledger_jsonw_key(w, "phase");
	ledger_jsonw_string(w, r->first_delta_sent ? "decode" : "prefill");
	ledger_jsonw_key(w, "first_delta_sent");
	ledger_jsonw_bool(w, r->first_delta_sent);
	ledger_jsonw_key(w, "delivered_output_tokens");
	ledger_jsonw_int(w, r->delivered_output_tokens);
	ledger_jsonw_key(w, "attempts");
	ledger_jsonw_int(w, r->attempt_count);
	ledger_jsonw_key(w, "max_attempts");
	ledger_jsonw_int(w, r->max_attempts);
	ledger_jsonw_key(w, "model_revision");
	ledger_jsonw_string(w, r->model_revision[0] != '\0' ? r->model_revision : NULL);
	ledger_jsonw_key(w, "input_sha256");
	ledger_jsonw_string(w, r->input_sha256[0] != '\0' ? r->input_sha256 : NULL);
	if (client_error != NULL) {
		ledger_jsonw_key(w, "client_error");
		ledger_jsonw_raw(w, client_error, strlen(client_error));
	}
	ledger_jsonw_key(w, "created_at");
	ledger_jsonw_string(w, r->created_at);
}

void ledger_render_attempt(struct ledger_jsonw *w, const char *request_id,
			   const struct ledger_attempt *a, const struct ledger_request *r,
			   const char *client_error)
{
	ledger_jsonw_object_begin(w);
	ledger_render_attempt_members(w, request_id, a, r, client_error);
	ledger_jsonw_object_end(w);
}

void ledger_render_attempt_members(struct ledger_jsonw *w, const char *request_id,
				   const struct ledger_attempt *a, const struct ledger_request *r,
				   const char *client_error)
{
	ledger_jsonw_key(w, "attempt_id");
	ledger_jsonw_string(w, a->attempt_id);
	ledger_jsonw_key(w, "epoch");
	ledger_jsonw_int(w, a->epoch);
	ledger_jsonw_key(w, "attempt_number");
	ledger_jsonw_int(w, a->epoch);
	ledger_jsonw_key(w, "lease_ms");
	ledger_jsonw_int(w, a->lease_ms_left);
	ledger_jsonw_key(w, "gateway");
	ledger_jsonw_string(w, a->gateway[0] != '\0' ? a->gateway : NULL);
	ledger_jsonw_key(w, "request");
	ledger_render_request(w, request_id, r, client_error);
}

void ledger_render_settled_calls(struct ledger_jsonw *w, const struct ledger_settled_call *calls,
				 size_t n)
{
	ledger_jsonw_array_begin(w);
	for (size_t i = 0; i < n; i++) {
		const struct ledger_settled_call *c = &calls[i];

		ledger_jsonw_object_begin(w);
		ledger_jsonw_key(w, "tool_call_id");
		ledger_jsonw_string(w, c->tool_call_id);
		ledger_jsonw_key(w, "tool");
		ledger_jsonw_string(w, c->tool[0] != '\0' ? c->tool : NULL);
		ledger_jsonw_key(w, "args_sha256");
		ledger_jsonw_string(w, c->args_sha256[0] != '\0' ? c->args_sha256 : NULL);
		ledger_jsonw_key(w, "outcome");
		ledger_jsonw_string(w, c->succeeded ? "succeeded" : "failed");
		ledger_jsonw_object_end(w);
	}
	ledger_jsonw_array_end(w);
}
