/*
 * api/service/attempts.c: the router's endpoints: creating an attempt, its own
 * calls (renew, deliver, cancel, cancel-ack, finish, and the client events
 * a router reports), and failover. As in
 * api/service/toolcalls.c, parse() validates and names the store operation, and
 * answer() replies the outcome the store decided.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/service/attempts.h"

#include "api/service/answers.h"
#include "api/service/input.h"
#include "api/service/metrics.h"
#include "api/service/reply.h"
#include "ledger/common/json.h"
#include "ledger/common/json_number.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"
#include "ledger/core/render.h"

#define MAX_INT ((int64_t)LEDGER_MAX_SAFE_INT)
#define IDENTITY_MAX 4096            /* bytes of an attempt's identity object */
#define CLIENT_ERROR_MAX (16 * 1024) /* bytes of a client error a finish records */

/* An attempt's lease when none is asked: the policy's, within the settings' bounds. */
static int64_t default_lease(const struct api_request *req)
{
	int64_t ms = req->policy->default_lease_ms;

	if (ms > req->config->max_lease_ms)
		ms = req->config->max_lease_ms;
	if (ms < req->config->min_lease_ms)
		ms = req->config->min_lease_ms;
	return ms;
}

static enum ledger_err lease_or_reply(struct api_request *req, const struct ledger_json_value *obj,
				      int64_t *out)
{
	return api_input_int_or_reply(req, obj, "lease_ms", req->config->min_lease_ms,
				      req->config->max_lease_ms, default_lease(req), out);
}

/* One of @p names (NULL-terminated), required. @return its index, or -1 after replying. */
static int choice_or_reply(struct api_request *req, const struct ledger_json_value *obj,
			   const char *key, const char *const *names)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);
	struct ledger_buf list = LEDGER_BUF_INIT;

	if (v != NULL && v->type == LEDGER_JSON_STRING) {
		for (int i = 0; names[i] != NULL; i++) {
			if (strcmp(v->u.str.s, names[i]) == 0)
				return i;
		}
	}
	for (int i = 0; names[i] != NULL; i++)
		ledger_buf_printf(&list, "%s%s", i > 0 ? ", " : "", names[i]);
	api_reply_invalid_field(req, key, "must be one of %s", list.oom ? "..." : list.data);
	ledger_buf_free(&list);
	return -1;
}

/* --- replies --- */

static void write_client_error(struct ledger_jsonw *w, const char *client_error)
{
	ledger_jsonw_key(w, "client_error");
	if (client_error != NULL)
		ledger_jsonw_raw(w, client_error, strlen(client_error));
	else
		ledger_jsonw_null(w);
}

/* 422 request_mismatch for an input_sha256 other than the one the request fixed. */
static void reply_input_mismatch(struct api_request *req, const char *expected, const char *got)
{
	struct ledger_jsonw w;

	api_reply_error_begin(req, &w, 422, "request_mismatch",
			      "the request's input_sha256 is another: its first attempt had "
			      "another input");
	ledger_jsonw_key(&w, "field");
	ledger_jsonw_string(&w, "input_sha256");
	ledger_jsonw_key(&w, "expected_input_sha256");
	ledger_jsonw_string(&w, expected);
	ledger_jsonw_key(&w, "got_input_sha256");
	ledger_jsonw_string(&w, got);
	api_reply_error_end(req, &w);
}

static void reply_attempt_not_found(struct api_request *req, const char *attempt_id)
{
	struct ledger_jsonw w;

	api_reply_error_begin(req, &w, 404, "attempt_not_found",
			      "the request has no attempt with this id");
	ledger_jsonw_key(&w, "attempt_id");
	ledger_jsonw_string(&w, attempt_id);
	api_reply_error_end(req, &w);
}

static void reply_fenced(struct api_request *req, const struct ledger_attempt_call *call,
			 const struct ledger_attempt *a)
{
	struct ledger_jsonw w;

	if (call->op == LEDGER_OP_RENEW)
		api_metrics_fenced(API_FENCED_ATTEMPT_RENEW);
	else if (call->op == LEDGER_OP_DELIVER)
		api_metrics_fenced(API_FENCED_DELIVER);
	else
		api_metrics_fenced(API_FENCED_FINISH);

	api_reply_error_begin(req, &w, 409, "attempt_fenced",
			      "the attempt has no rights any more: it must neither publish nor "
			      "start a side effect");
	ledger_jsonw_key(&w, "attempt_state");
	ledger_jsonw_string(&w, ledger_attempt_state_name(a->state));
	api_reply_error_end(req, &w);
}

/* --- create --- */

struct create_input {
	struct ledger_attempt_request in;
};

static enum ledger_err parse_attempt_request(struct api_request *req,
					     const struct ledger_json_value *obj,
					     struct ledger_attempt_request *in, bool with_max)
{
	const struct ledger_json_value *identity = NULL;

	if (api_input_id_or_reply(req, obj, "attempt_id", 1, &in->attempt_id) ||
	    api_input_text_or_reply(req, obj, "replica", LEDGER_TEXT_MAX, &in->replica) ||
	    api_input_text_or_reply(req, obj, "model_revision", LEDGER_TEXT_MAX,
				    &in->model_revision) ||
	    lease_or_reply(req, obj, &in->lease_ms) ||
	    api_input_id_or_reply(req, obj, "gateway", 1, &in->gateway) ||
	    api_input_object_or_reply(req, obj, "identity", IDENTITY_MAX, &identity) ||
	    api_input_sha256_or_reply(req, obj, "input_sha256", &in->input_sha256))
		return LEDGER_ERR_INVALID;
	if (identity != NULL) {
		in->identity = identity->raw;
		in->identity_len = identity->raw_len;
	}
	if (in->attempt_id == NULL) {
		api_reply_invalid_field(req, "attempt_id", "is required");
		return LEDGER_ERR_INVALID;
	}
	if (with_max &&
	    api_input_int_or_reply(req, obj, "max_attempts", 1, req->policy->max_attempts_limit, 0,
				   &in->max_attempts))
		return LEDGER_ERR_INVALID;
	return LEDGER_OK;
}

static enum ledger_err create_parse(struct api_request *req)
{
	static const char *const fields[] = {"attempt_id", "replica",      "model_revision",
					     "lease_ms",   "max_attempts", "gateway",
					     "identity",   "input_sha256", NULL};
	const struct ledger_json_value *body = api_input_body_or_reply(req, fields);
	struct create_input *in = NULL;

	if (body == NULL)
		return LEDGER_ERR_INVALID;
	in = api_input_alloc_or_reply(req, sizeof(*in));
	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	req->job.op.kind = LEDGER_STORE_ATTEMPT_CREATE;
	req->job.op.in.attempt = &in->in;
	req->job.op.policy = req->policy;
	if (parse_attempt_request(req, body, &in->in, true) != LEDGER_OK)
		return LEDGER_ERR_INVALID;
	req->job.ids.attempt_id = in->in.attempt_id;
	return LEDGER_OK;
}

static void reply_attempt(struct api_request *req, unsigned status,
			  const struct ledger_store_result *r)
{
	const struct ledger_attempt_result *res = &r->u.attempt;
	struct ledger_attempt a = res->attempt;
	struct ledger_jsonw w;

	/* Never more lease than is left as the answer goes out. */
	a.lease_ms_left = api_reply_time_left(r, a.lease_ms_left);
	if (a.lease_ms_left <= 0 && a.state == LEDGER_ATTEMPT_LIVE) {
		api_reply_too_late(req);
		return;
	}
	api_reply_begin(req, &w, status);
	ledger_jsonw_object_begin(&w);
	ledger_render_attempt_members(&w, req->params[0], &a, &res->request, res->client_error);
	if (res->nsettled > 0) {
		/* what a rerun must take into account, as failover gives it */
		ledger_jsonw_key(&w, "settled_tool_calls");
		ledger_render_settled_calls(&w, res->settled, res->nsettled);
	}
	ledger_jsonw_object_end(&w);
}

static void reply_create_refusal(struct api_request *req, const struct create_input *in,
				 const struct ledger_attempt_result *res)
{
	enum ledger_create_outcome o = res->outcome.create;
	const char *code = ledger_attempt_create_code(o);
	struct ledger_jsonw w;
	unsigned status = o == LEDGER_CREATE_REQUEST_MISMATCH ? 422 : 409;
	const char *message = "";

	if (o == LEDGER_CREATE_REQUEST_MISMATCH && res->input_mismatch) {
		reply_input_mismatch(req, res->request.input_sha256, in->in.input_sha256);
		return;
	}
	switch (o) {
	case LEDGER_CREATE_REQUEST_MISMATCH:
		message = "this attempt_id was created with another replica or model_revision";
		break;
	case LEDGER_CREATE_FIRST_DELTA_SENT:
		message =
			"a delta of this request already reached the client: no new attempt, ever";
		break;
	case LEDGER_CREATE_REQUEST_CLOSED:
		message = "the request is closed";
		break;
	case LEDGER_CREATE_BUDGET_EXHAUSTED:
		message =
			res->budget == LEDGER_BUDGET_POOL
				? "the tenant's retries in the pool-wide window are spent: a retry "
				  "is welcome again after retry_after_ms"
				: "the request's attempts are spent: it is never retried";
		break;
	case LEDGER_CREATE_REVISION_MISMATCH:
		message = "the policy requires the model_revision of the first attempt";
		break;
	case LEDGER_CREATE_SOURCE_NOT_FENCED:
		message = "the previous attempt may still act: wait until it is cancelled, "
			  "acknowledged or past its lease";
		break;
	case LEDGER_CREATE_TOOL_CALL_IN_PROGRESS:
		message = "a tool call of the previous attempt is still held";
		break;
	case LEDGER_CREATE_TOOL_OUTCOME_UNKNOWN:
		message = "a tool call of this request has an unknown outcome: a rerun could "
			  "repeat it; resolve it first";
		break;
	case LEDGER_CREATE_REPEATED:
	case LEDGER_CREATE_CREATED:
		abort(); /* not refusals */
	}
	api_reply_error_begin(req, &w, status, code, message);
	if (o == LEDGER_CREATE_FIRST_DELTA_SENT || o == LEDGER_CREATE_REQUEST_CLOSED)
		write_client_error(&w, res->client_error);
	if (o == LEDGER_CREATE_BUDGET_EXHAUSTED) {
		ledger_jsonw_key(&w, "budget");
		ledger_jsonw_string(&w, ledger_attempt_budget_name(res->budget));
	}
	if (o == LEDGER_CREATE_REVISION_MISMATCH) {
		ledger_jsonw_key(&w, "expected_model_revision");
		ledger_jsonw_string(&w, res->request.model_revision);
		ledger_jsonw_key(&w, "got_model_revision");
		ledger_jsonw_string(&w, in->in.model_revision);
	}
	if (res->retry_after_ms > 0) {
		ledger_jsonw_key(&w, "retry_after_ms");
		ledger_jsonw_int(&w, res->retry_after_ms);
		req->reply.retry_after_ms = res->retry_after_ms;
	}
	api_reply_error_end(req, &w);
}

static void create_answer(struct api_request *req, const struct ledger_store_result *r)
{
	const struct create_input *in = req->input;
	const struct ledger_attempt_result *res = &r->u.attempt;

	if (res->outcome.create == LEDGER_CREATE_CREATED)
		reply_attempt(req, 201, r);
	else if (res->outcome.create == LEDGER_CREATE_REPEATED)
		reply_attempt(req, 200, r);
	else
		reply_create_refusal(req, in, res);
}

const struct api_handler api_attempts_create = {.parse = create_parse, .answer = create_answer};

/* --- an attempt's own calls --- */

/*
 * finish's optional client_error: {"error": {...}} and an optional integer
 * http_status, at most CLIENT_ERROR_MAX bytes, only with outcome failed.
 */
static enum ledger_err client_error_or_reply(struct api_request *req,
					     const struct ledger_json_value *body,
					     struct ledger_attempt_call *call)
{
	const struct ledger_json_value *ce = NULL, *error, *status, *code;
	uint64_t http_status = 0;

	if (api_input_object_or_reply(req, body, "client_error", CLIENT_ERROR_MAX, &ce) !=
	    LEDGER_OK)
		return LEDGER_ERR_INVALID;
	if (ce == NULL)
		return LEDGER_OK;
	error = ledger_json_get(ce, "error");
	status = ledger_json_get(ce, "http_status");
	if (error == NULL || error->type != LEDGER_JSON_OBJECT ||
	    ce->u.obj.count != (status != NULL ? 2u : 1u)) {
		api_reply_invalid_field(req, "client_error",
					"must be {\"error\": {...}}, with an optional http_status");
		return LEDGER_ERR_INVALID;
	}
	if (status != NULL && status->type != LEDGER_JSON_NULL &&
	    (status->type != LEDGER_JSON_NUMBER ||
	     ledger_json_number_uint(status, 599, &http_status) != LEDGER_OK ||
	     http_status < 100)) {
		api_reply_invalid_field(req, "client_error",
					"http_status must be an integer from 100 to 599");
		return LEDGER_ERR_INVALID;
	}
	if (call->completed) {
		api_reply_invalid_field(req, "client_error",
					"only a finish with outcome failed carries a client error");
		return LEDGER_ERR_INVALID;
	}
	call->client_error = ce->raw;
	call->client_error_len = ce->raw_len;
	code = ledger_json_get(error, "code");
	if (code != NULL && code->type == LEDGER_JSON_STRING && code->u.str.len > 0 &&
	    code->u.str.len <= LEDGER_TEXT_MAX)
		call->client_error_code = code->u.str.s;
	return LEDGER_OK;
}

/* An attempt's own call as parsed: the call first, so req->input is the call. */
struct call_input {
	struct ledger_attempt_call call;
	struct ledger_answer answer; /* FINISH: the answer kept with the request */
};

/* finish's body beyond its outcome: the tokens, the reason, a client error, an answer. */
static enum ledger_err finish_or_reply(struct api_request *req,
				       const struct ledger_json_value *body, struct call_input *in)
{
	struct ledger_attempt_call *call = &in->call;
	bool given = false;

	if (api_input_int_or_reply(req, body, "delivered_output_tokens", 0, MAX_INT, 0,
				   &call->delivered_output_tokens) ||
	    api_input_text_or_reply(req, body, "reason", LEDGER_TEXT_MAX, &call->reason) ||
	    client_error_or_reply(req, body, call) ||
	    api_answers_parse_or_reply(req, body, "answer", &in->answer, &given))
		return LEDGER_ERR_INVALID;
	if (given && !call->completed && call->client_error == NULL) {
		api_reply_invalid_field(
			req, "answer",
			"is kept only by a finish that ends the request: completed, "
			"or failed with a client_error");
		return LEDGER_ERR_INVALID;
	}
	call->answer = given ? &in->answer : NULL;
	return LEDGER_OK;
}

static enum ledger_err call_prepare(struct api_request *req, enum ledger_attempt_op op,
				    const char *const *fields)
{
	static const char *const outcomes[] = {"completed", "failed", NULL};
	const struct ledger_json_value *body = api_input_body_or_reply(req, fields);
	struct call_input *in = NULL;
	struct ledger_attempt_call *call = NULL;

	if (body == NULL)
		return LEDGER_ERR_INVALID;
	in = api_input_alloc_or_reply(req, sizeof(*in));
	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	call = &in->call;
	call->op = op;
	call->delivered_output_tokens = -1;
	req->job.op.kind = LEDGER_STORE_ATTEMPT_CALL;
	req->job.op.in.attempt_call = call;
	switch (op) {
	case LEDGER_OP_RENEW:
		return lease_or_reply(req, body, &call->lease_ms);
	case LEDGER_OP_DELIVER:
		return api_input_int_or_reply(req, body, "delivered_output_tokens", 0, MAX_INT, 0,
					      &call->delivered_output_tokens);
	case LEDGER_OP_CANCEL:
		return api_input_text_or_reply(req, body, "reason", LEDGER_TEXT_MAX, &call->reason);
	case LEDGER_OP_CANCEL_ACK:
		return LEDGER_OK;
	case LEDGER_OP_FINISH: {
		int outcome = choice_or_reply(req, body, "outcome", outcomes);

		if (outcome < 0)
			return LEDGER_ERR_INVALID;
		call->completed = outcome == 0;
		return finish_or_reply(req, body, in);
	}
	}
	abort();
}

static enum ledger_err renew_parse(struct api_request *req)
{
	static const char *const fields[] = {"lease_ms", NULL};

	return call_prepare(req, LEDGER_OP_RENEW, fields);
}

static enum ledger_err deliver_parse(struct api_request *req)
{
	static const char *const fields[] = {"delivered_output_tokens", NULL};

	return call_prepare(req, LEDGER_OP_DELIVER, fields);
}

static enum ledger_err cancel_parse(struct api_request *req)
{
	static const char *const fields[] = {"reason", NULL};

	return call_prepare(req, LEDGER_OP_CANCEL, fields);
}

static enum ledger_err cancel_ack_parse(struct api_request *req)
{
	static const char *const fields[] = {NULL};

	return call_prepare(req, LEDGER_OP_CANCEL_ACK, fields);
}

static enum ledger_err finish_parse(struct api_request *req)
{
	static const char *const fields[] = {
		"outcome", "delivered_output_tokens", "reason", "client_error", "answer", NULL};

	return call_prepare(req, LEDGER_OP_FINISH, fields);
}

static void reply_call_done(struct api_request *req, const struct ledger_attempt_call *call,
			    const struct ledger_store_result *r)
{
	const struct ledger_attempt_result *res = &r->u.attempt;
	/* A renewal's deadline is the database's now plus lease_ms: what is left of it now. */
	int64_t left = api_reply_time_left(r, call->lease_ms);
	struct ledger_jsonw w;

	if (call->op == LEDGER_OP_RENEW && left <= 0) {
		api_reply_too_late(req);
		return;
	}
	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	switch (call->op) {
	case LEDGER_OP_DELIVER:
		ledger_jsonw_key(&w, "request_id");
		ledger_jsonw_string(&w, req->params[0]);
		ledger_jsonw_key(&w, "attempt_id");
		ledger_jsonw_string(&w, res->attempt.attempt_id);
		ledger_jsonw_key(&w, "first_delta_sent");
		ledger_jsonw_bool(&w, res->request.first_delta_sent);
		ledger_jsonw_key(&w, "phase");
		ledger_jsonw_string(&w, res->request.first_delta_sent ? "decode" : "prefill");
		ledger_jsonw_key(&w, "delivered_output_tokens");
		ledger_jsonw_int(&w, res->request.delivered_output_tokens);
		break;
	case LEDGER_OP_RENEW:
		ledger_jsonw_key(&w, "attempt_id");
		ledger_jsonw_string(&w, res->attempt.attempt_id);
		ledger_jsonw_key(&w, "epoch");
		ledger_jsonw_int(&w, res->attempt.epoch);
		ledger_jsonw_key(&w, "lease_ms");
		ledger_jsonw_int(&w, left);
		break;
	case LEDGER_OP_CANCEL:
	case LEDGER_OP_CANCEL_ACK:
	case LEDGER_OP_FINISH:
		ledger_jsonw_key(&w, "attempt_id");
		ledger_jsonw_string(&w, res->attempt.attempt_id);
		ledger_jsonw_key(&w, "epoch");
		ledger_jsonw_int(&w, res->attempt.epoch);
		ledger_jsonw_key(&w, "state");
		ledger_jsonw_string(&w, ledger_attempt_state_name(res->attempt.state));
		ledger_jsonw_key(&w, "request");
		ledger_render_request(&w, req->params[0], &res->request, res->client_error);
		break;
	}
	ledger_jsonw_object_end(&w);
}

static void call_answer(struct api_request *req, const struct ledger_store_result *r)
{
	const struct ledger_attempt_call *call = req->input;
	const struct ledger_attempt_result *res = &r->u.attempt;

	if (!res->found)
		reply_attempt_not_found(req, req->params[1]);
	else if (res->outcome.op == LEDGER_ATTEMPT_OP_FENCED)
		reply_fenced(req, call, &res->attempt);
	else
		reply_call_done(req, call, r);
}

const struct api_handler api_attempts_renew = {.parse = renew_parse, .answer = call_answer};
const struct api_handler api_attempts_deliver = {.parse = deliver_parse, .answer = call_answer};
const struct api_handler api_attempts_cancel = {.parse = cancel_parse, .answer = call_answer};
const struct api_handler api_attempts_cancel_ack = {.parse = cancel_ack_parse,
						    .answer = call_answer};
const struct api_handler api_attempts_finish = {
	.parse = finish_parse, .answer = call_answer, .takes_answer = true};

/* --- client events (ledgerd's own: history for incident review) --- */

/* An optional integer from 0; *@p out is -1 when it is absent. */
static enum ledger_err count_or_reply(struct api_request *req, const struct ledger_json_value *body,
				      const char *key, int64_t *out)
{
	const struct ledger_json_value *v = ledger_json_get(body, key);

	*out = -1;
	if (v == NULL || v->type == LEDGER_JSON_NULL)
		return LEDGER_OK;
	return api_input_int_or_reply(req, body, key, 0, MAX_INT, 0, out);
}

static enum ledger_err client_parse(struct api_request *req)
{
	static const char *const fields[] = {"event", "n", "last_event_id", "hold_ms", NULL};
	static const char *const events[] = {"disconnected", "resumed", "hold_ended", NULL};
	static const char *const types[] = {"client_disconnected", "client_resumed",
					    "client_hold_ended"};
	const struct ledger_json_value *body = api_input_body_or_reply(req, fields);
	struct ledger_client_event *in = NULL;
	int event;

	if (body == NULL)
		return LEDGER_ERR_INVALID;
	in = api_input_alloc_or_reply(req, sizeof(*in));
	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	event = choice_or_reply(req, body, "event", events);
	if (event < 0 || api_input_int_or_reply(req, body, "n", 1, MAX_INT, -1, &in->n) ||
	    count_or_reply(req, body, "last_event_id", &in->last_event_id) ||
	    count_or_reply(req, body, "hold_ms", &in->hold_ms))
		return LEDGER_ERR_INVALID;
	if (in->last_event_id >= 0 && event != 1) {
		api_reply_invalid_field(req, "last_event_id", "goes only with event resumed");
		return LEDGER_ERR_INVALID;
	}
	if (in->hold_ms >= 0 && event != 0) {
		api_reply_invalid_field(req, "hold_ms", "goes only with event disconnected");
		return LEDGER_ERR_INVALID;
	}
	in->type = types[event];
	req->job.op.kind = LEDGER_STORE_CLIENT_EVENT;
	req->job.op.in.client_event = in;
	return LEDGER_OK;
}

static void client_answer(struct api_request *req, const struct ledger_store_result *r)
{
	const struct ledger_client_event_result *res = &r->u.client_event;
	struct ledger_jsonw w;

	if (!res->found) {
		reply_attempt_not_found(req, req->params[1]);
		return;
	}
	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "recorded");
	ledger_jsonw_string(&w, res->recorded);
	ledger_jsonw_object_end(&w);
}

const struct api_handler api_attempts_client = {.parse = client_parse, .answer = client_answer};

/* --- failover --- */

struct failover_input {
	struct ledger_failover_request in;
	struct ledger_attempt_request next;
	struct ledger_answer delivered; /* kept if the decision ends the request */
};

static enum ledger_err failover_parse(struct api_request *req)
{
	static const char *const fields[] = {"attempt_id",           "signal",
					     "retry_prefill_tokens", "next_attempt",
					     "delivered_answer",     NULL};
	static const char *const next_fields[] = {"attempt_id",   "replica", "model_revision",
						  "lease_ms",     "gateway", "identity",
						  "input_sha256", NULL};
	static const char *const signals[] = {
		"replica_exited",    "pod_lost",   "upstream_closed",     "network_error",
		"heartbeat_timeout", "overloaded", "client_disconnected", NULL};
	const struct ledger_json_value *body = api_input_body_or_reply(req, fields);
	const struct ledger_json_value *next = NULL;
	struct failover_input *in = NULL;
	bool delivered = false;
	int signal;

	if (body == NULL)
		return LEDGER_ERR_INVALID;
	in = api_input_alloc_or_reply(req, sizeof(*in));
	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	if (api_input_id_or_reply(req, body, "attempt_id", 1, &in->in.source_attempt_id))
		return LEDGER_ERR_INVALID;
	if (in->in.source_attempt_id == NULL) {
		api_reply_invalid_field(req, "attempt_id", "is required");
		return LEDGER_ERR_INVALID;
	}
	signal = choice_or_reply(req, body, "signal", signals);
	if (signal < 0 || ledger_failover_signal_parse(signals[signal], &in->in.signal) != 0)
		return LEDGER_ERR_INVALID;
	if (api_input_int_or_reply(req, body, "retry_prefill_tokens", 0, MAX_INT, 0,
				   &in->in.retry_prefill_tokens))
		return LEDGER_ERR_INVALID;
	next = ledger_json_get(body, "next_attempt");
	if (next != NULL && next->type != LEDGER_JSON_NULL) {
		if (next->type != LEDGER_JSON_OBJECT) {
			api_reply_invalid_field(req, "next_attempt", "must be an object");
			return LEDGER_ERR_INVALID;
		}
		for (size_t i = 0; i < next->u.obj.count; i++) {
			const char *k = next->u.obj.members[i].key;
			bool known = false;

			for (size_t j = 0; next_fields[j] != NULL; j++)
				known = known || strcmp(k, next_fields[j]) == 0;
			if (!known) {
				api_reply_invalid_field(req, "next_attempt",
							"has an unknown field");
				return LEDGER_ERR_INVALID;
			}
		}
		if (parse_attempt_request(req, next, &in->next, false))
			return LEDGER_ERR_INVALID;
		in->in.next = &in->next;
	}
	/* Taken whatever the decision; kept only if it ends the request. */
	if (api_answers_parse_or_reply(req, body, "delivered_answer", &in->delivered, &delivered))
		return LEDGER_ERR_INVALID;
	in->in.delivered_answer = delivered ? &in->delivered : NULL;
	req->job.op.kind = LEDGER_STORE_FAILOVER;
	req->job.op.in.failover = &in->in;
	req->job.op.policy = req->policy;
	req->job.ids.attempt_id = in->in.source_attempt_id;
	return LEDGER_OK;
}

/*
 * A decision's answer as recorded, but for its new attempt's lease_ms:
 * what is left of the lease now, as every lease in an answer says, not the
 * lease as granted when the decision was taken. A body that names another
 * attempt (a retried call with another next_attempt) is sent as recorded.
 */
static void write_decision(struct ledger_jsonw *w, const struct ledger_failover_result *res,
			   const struct ledger_store_result *r)
{
	const char *body = res->body;
	size_t len = strlen(body);
	struct ledger_json_doc *doc = NULL;
	const struct ledger_json_value *att = NULL, *id = NULL, *lease = NULL;
	struct ledger_buf aged = LEDGER_BUF_INIT;

	if (res->lease_attempt_id[0] != '\0' &&
	    ledger_json_parse(body, len, 8, &doc, NULL) == LEDGER_OK) {
		att = ledger_json_get(ledger_json_root(doc), "attempt");
		id = ledger_json_get(att, "attempt_id");
		lease = ledger_json_get(att, "lease_ms");
	}
	if (id != NULL && id->type == LEDGER_JSON_STRING &&
	    strcmp(id->u.str.s, res->lease_attempt_id) == 0 && lease != NULL &&
	    lease->type == LEDGER_JSON_NUMBER) {
		size_t at = (size_t)(lease->raw - body);

		ledger_buf_append(&aged, body, at);
		ledger_buf_printf(&aged, "%lld",
				  (long long)api_reply_time_left(r, res->lease_ms_left));
		ledger_buf_append(&aged, body + at + lease->raw_len, len - at - lease->raw_len);
	}
	if (aged.len > 0 && !aged.oom)
		ledger_jsonw_raw(w, aged.data, aged.len);
	else
		ledger_jsonw_raw(w, body, len);
	ledger_buf_free(&aged);
	ledger_json_free(doc);
}

static void failover_answer(struct api_request *req, const struct ledger_store_result *r)
{
	const struct failover_input *in = req->input;
	const struct ledger_failover_result res = r->u.failover;
	struct ledger_jsonw w;

	if ((res.status == LEDGER_FAILOVER_ANSWERED && !res.replayed) ||
	    res.status == LEDGER_FAILOVER_REFUSED)
		api_metrics_failover(res.decision.action);
	switch (res.status) {
	case LEDGER_FAILOVER_ANSWERED:
		api_reply_begin(req, &w, 200);
		write_decision(&w, &res, r);
		if (res.decision.action == LEDGER_FAILOVER_WAIT_FOR_FENCE)
			req->reply.retry_after_ms = res.decision.retry_after_ms;
		break;
	case LEDGER_FAILOVER_NO_ATTEMPT:
		reply_attempt_not_found(req, in->in.source_attempt_id);
		break;
	case LEDGER_FAILOVER_NEXT_MISMATCH:
		api_reply_error(req, 422, "request_mismatch",
				"next_attempt's attempt_id is already an attempt of this request");
		break;
	case LEDGER_FAILOVER_NEXT_INPUT:
		reply_input_mismatch(req, res.input_sha256, in->next.input_sha256);
		break;
	case LEDGER_FAILOVER_NEXT_REVISION:
		api_reply_error(req, 409, "revision_mismatch",
				"the policy requires the model_revision of the first attempt");
		break;
	case LEDGER_FAILOVER_REFUSED:
		if (res.decision.action == LEDGER_FAILOVER_ATTEMPT_FENCED) {
			api_reply_error_begin(req, &w, 409, "attempt_fenced",
					      "the attempt is not the newest of this request");
			ledger_jsonw_key(&w, "current_attempt_id");
			ledger_jsonw_string(&w, res.current_attempt_id);
		} else {
			api_reply_error_begin(req, &w, 409, "request_closed",
					      "the request is not open");
			write_client_error(&w, res.client_error);
		}
		api_reply_error_end(req, &w);
		break;
	}
}

const struct api_handler api_attempts_failover = {
	.parse = failover_parse, .answer = failover_answer, .takes_answer = true};
