/*
 * api/service/toolcalls.c: the tool-call endpoints: claim, renew, complete,
 * release, resolve, get and list. parse() turns a body into the store
 * operation it asks for; answer() writes the reply docs/api.md prescribes for
 * the outcome the store decided.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/service/toolcalls.h"

#include "api/service/input.h"
#include "api/service/metrics.h"
#include "api/service/reply.h"
#include "ledger/common/jcs.h"
#include "ledger/common/json_number.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"

#define DEFAULT_LEASE_MS 30000
#define DEFAULT_LIMIT 50
#define MAX_LIMIT 1000

static void write_key(struct ledger_jsonw *w, const struct api_request *req)
{
	char ikey[2 * LEDGER_ID_MAX + 2];

	snprintf(ikey, sizeof(ikey), "%s:%s", req->params[0], req->params[1]);
	ledger_jsonw_key(w, "idempotency_key");
	ledger_jsonw_string(w, ikey);
}

/* Writes @p s, or null when it is empty (the store's "not given"). */
static void write_text(struct ledger_jsonw *w, const char *key, const char *s)
{
	ledger_jsonw_key(w, key);
	if (s[0] == '\0')
		ledger_jsonw_null(w);
	else
		ledger_jsonw_string(w, s);
}

static int64_t lease_bound(const struct api_request *req, bool max)
{
	return max ? req->config->max_lease_ms : req->config->min_lease_ms;
}

/* The lease of a call that names none, within the configured bounds. */
static int64_t default_lease(const struct api_request *req)
{
	int64_t ms = DEFAULT_LEASE_MS;

	if (ms > lease_bound(req, true))
		ms = lease_bound(req, true);
	if (ms < lease_bound(req, false))
		ms = lease_bound(req, false);
	return ms;
}

/* An integer in 0..2^53-1, as docs/api.md bounds every integer. */
#define MAX_INT ((int64_t)LEDGER_MAX_SAFE_INT)

/* --- common replies --- */

/* A final call's result: itself, or that it was not kept, with its length and SHA-256. */
static void write_result(struct ledger_jsonw *w, const struct ledger_call *call, bool payload)
{
	if (call->result_not_kept) {
		ledger_jsonw_key(w, "result_kept");
		ledger_jsonw_bool(w, false);
		ledger_jsonw_key(w, "result_bytes");
		ledger_jsonw_int(w, call->result_digest.bytes);
		ledger_jsonw_key(w, "result_sha256");
		ledger_jsonw_string(w, call->result_digest.sha256);
	} else if (payload) {
		ledger_jsonw_key(w, "result");
		ledger_jsonw_raw(w, call->result, call->result_len);
	}
}

static void reply_completed(struct api_request *req, const struct ledger_call *call, bool replayed,
			    bool late)
{
	struct ledger_jsonw w;

	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	api_reply_status_member(req, &w, "completed");
	ledger_jsonw_key(&w, "outcome");
	ledger_jsonw_string(&w, ledger_call_state_name(call->state));
	write_result(&w, call, true);
	ledger_jsonw_key(&w, "completed_at");
	ledger_jsonw_string(&w, call->completed_at);
	write_key(&w, req);
	if (replayed) {
		ledger_jsonw_key(&w, "replayed");
		ledger_jsonw_bool(&w, true);
		req->reply.replayed = true;
	}
	if (late) {
		ledger_jsonw_key(&w, "late_completion");
		ledger_jsonw_bool(&w, true);
	}
	ledger_jsonw_object_end(&w);
}

static void reply_released(struct api_request *req, int64_t fencing_token)
{
	struct ledger_jsonw w;

	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	api_reply_status_member(req, &w, "released");
	write_key(&w, req);
	api_reply_fencing_token_member(req, &w, fencing_token);
	ledger_jsonw_object_end(&w);
}

/*
 * 409 result_not_kept: the call finished (the caller must not execute it),
 * and only its result's length and SHA-256 were stored, so nothing can be
 * replayed.
 */
static void reply_not_kept(struct api_request *req, const struct ledger_call *call)
{
	struct ledger_jsonw w;

	api_reply_error_begin(req, &w, 409, "result_not_kept",
			      "the call already finished and its result was not kept: do not run "
			      "it again; its result cannot be replayed");
	ledger_jsonw_key(&w, "outcome");
	ledger_jsonw_string(&w, ledger_call_state_name(call->state));
	ledger_jsonw_key(&w, "result_bytes");
	ledger_jsonw_int(&w, call->result_digest.bytes);
	ledger_jsonw_key(&w, "result_sha256");
	ledger_jsonw_string(&w, call->result_digest.sha256);
	ledger_jsonw_key(&w, "completed_at");
	ledger_jsonw_string(&w, call->completed_at);
	write_key(&w, req);
	api_reply_error_end(req, &w);
}

/* 410 result_expired, with what the tombstone still says. */
static void reply_expired(struct api_request *req, const struct ledger_call *call)
{
	struct ledger_jsonw w;

	api_reply_error_begin(req, &w, 410, "result_expired",
			      "the call was settled and its result removed by retention; "
			      "it must not run again");
	ledger_jsonw_key(&w, "outcome");
	ledger_jsonw_string(&w, ledger_call_state_name(call->settled_as));
	ledger_jsonw_key(&w, "completed_at");
	ledger_jsonw_string(&w, call->completed_at);
	api_reply_error_end(req, &w);
}

/*
 * Replies a refusal every tool-call operation may give, by the API's code
 * (ledger_*_code()), so that each code has one status and one wording.
 */
static void reply_refusal(struct api_request *req, const char *code, const struct ledger_call *call)
{
	struct ledger_jsonw w;

	if (strcmp(code, "not_found") == 0) {
		api_reply_error(req, 404, code, "no such tool call");
	} else if (strcmp(code, "result_expired") == 0) {
		reply_expired(req, call);
	} else if (strcmp(code, "stale_token") == 0) {
		api_reply_error(req, 409, code, "the fencing token is not the current holder's");
	} else if (strcmp(code, "attempt_fenced") == 0) {
		api_reply_error(req, 409, code,
				"the attempt is not the live attempt of this request: it may "
				"neither start nor extend a side effect");
	} else if (strcmp(code, "outcome_unknown") == 0) {
		api_reply_error_begin(req, &w, 409, code,
				      "a holder's lease ran out without a completion: the side "
				      "effect may or may not have happened; resolve it first");
		write_key(&w, req);
		api_reply_error_end(req, &w);
	} else if (strcmp(code, "already_completed") == 0) {
		api_reply_error_begin(req, &w, 409, code,
				      "the call was completed differently; the stored completion "
				      "stands");
		ledger_jsonw_key(&w, "outcome");
		ledger_jsonw_string(&w, ledger_call_state_name(call->state));
		ledger_jsonw_key(&w, "completed_at");
		ledger_jsonw_string(&w, call->completed_at);
		api_reply_error_end(req, &w);
	} else {
		LOG_ERROR("no reply for refusal %s", code);
		abort(); /* every code ledger/core/decide.c gives is handled above */
	}
}

/* --- claim --- */

static const char *const claim_fields[] = {"claim_id",     "tool",       "args",  "args_sha256",
					   "store_args",   "attempt_id", "owner", "lease_ms",
					   "tool_dedupes", NULL};

struct claim_input {
	struct ledger_claim_request req;
	char args_sha256[LEDGER_SHA256_HEX + 1];
	char args[]; /* the args kept (store_args), NUL-terminated for the store */
};

static bool is_lower_hex(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

static enum ledger_err claim_parse(struct api_request *req)
{
	const struct ledger_json_value *body = api_input_body_or_reply(req, claim_fields);
	const struct ledger_json_value *args = NULL, *sha = NULL;
	struct claim_input *in = NULL;
	struct ledger_claim *c = NULL;
	bool store_args = false;

	if (body == NULL)
		return LEDGER_ERR_INVALID;
	args = ledger_json_get(body, "args");
	if (args != NULL && args->type == LEDGER_JSON_NULL)
		args = NULL;
	in = api_input_alloc_or_reply(req, sizeof(*in) + (args != NULL ? args->raw_len + 1 : 0));
	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	c = &in->req.claim;
	if (api_input_id_or_reply(req, body, "claim_id", LEDGER_CLAIM_ID_MIN, &c->claim_id) ||
	    api_input_text_or_reply(req, body, "tool", LEDGER_TEXT_MAX, &c->tool) ||
	    api_input_bool_or_reply(req, body, "store_args", false, &store_args) ||
	    api_input_id_or_reply(req, body, "attempt_id", 1, &c->attempt_id) ||
	    api_input_text_or_reply(req, body, "owner", LEDGER_TEXT_MAX, &c->owner) ||
	    api_input_int_or_reply(req, body, "lease_ms", lease_bound(req, false),
				   lease_bound(req, true), default_lease(req), &c->lease_ms) ||
	    api_input_bool_or_reply(req, body, "tool_dedupes", false, &c->tool_dedupes))
		return LEDGER_ERR_INVALID;

	sha = ledger_json_get(body, "args_sha256");
	if (sha != NULL && sha->type != LEDGER_JSON_NULL) {
		if (sha->type != LEDGER_JSON_STRING || sha->u.str.len != LEDGER_SHA256_HEX ||
		    !is_lower_hex(sha->u.str.s, sha->u.str.len)) {
			api_reply_invalid_field(req, "args_sha256",
						"must be 64 lowercase hex digits");
			return LEDGER_ERR_INVALID;
		}
		memcpy(in->args_sha256, sha->u.str.s, LEDGER_SHA256_HEX + 1);
	}
	if (args != NULL) {
		char computed[LEDGER_SHA256_HEX + 1];
		enum ledger_err rc = ledger_jcs_fingerprint(args, computed);

		if (rc == LEDGER_ERR_NOMEM) {
			api_reply_error(req, 500, "internal_error", "out of memory");
			return rc;
		}
		if (rc != LEDGER_OK) {
			/* JSON, but not JSON a fingerprint exists for (api.md, "Fingerprints") */
			api_reply_error(req, 400, "invalid_json",
					"args holds a number beyond the range of a double");
			return rc;
		}
		if (in->args_sha256[0] != '\0' && strcmp(in->args_sha256, computed) != 0) {
			api_reply_invalid_field(req, "args_sha256",
						"does not match the fingerprint of args");
			return LEDGER_ERR_INVALID;
		}
		memcpy(in->args_sha256, computed, sizeof(computed));
		if (store_args) {
			memcpy(in->args, args->raw, args->raw_len);
			in->args[args->raw_len] = '\0';
			in->req.args = in->args;
			in->req.args_len = args->raw_len;
		}
	}
	c->args_sha256 = in->args_sha256[0] != '\0' ? in->args_sha256 : NULL;
	req->job.op.kind = LEDGER_STORE_CLAIM;
	req->job.op.in.claim = &in->req;
	req->job.ids.attempt_id = c->attempt_id;
	return LEDGER_OK;
}

/* Replies a claim's outcome, however the store reached it. */
static void claim_answer(struct api_request *req, const struct ledger_store_result *r)
{
	const struct ledger_call_result res = r->u.call;
	const struct claim_input *in = req->input;
	struct ledger_jsonw w;
	int64_t lease_left = 0;

	api_metrics_claim(res.outcome.claim);
	if (res.outcome.claim == LEDGER_CLAIM_ATTEMPT_FENCED)
		api_metrics_fenced(API_FENCED_CLAIM);
	switch (res.outcome.claim) {
	case LEDGER_CLAIM_NEW:
	case LEDGER_CLAIM_RECLAIM:
	case LEDGER_CLAIM_HELD:
		/* Never more lease than is left as the answer goes out. */
		lease_left = api_reply_time_left(r, res.call.lease_ms_left);
		if (lease_left <= 0) {
			api_reply_too_late(req);
			break;
		}
		api_reply_begin(req, &w, res.outcome.claim == LEDGER_CLAIM_HELD ? 200 : 201);
		ledger_jsonw_object_begin(&w);
		api_reply_status_member(req, &w, "claimed");
		write_key(&w, req);
		api_reply_fencing_token_member(req, &w, res.call.fencing_token);
		ledger_jsonw_key(&w, "lease_ms");
		ledger_jsonw_int(&w, lease_left);
		ledger_jsonw_object_end(&w);
		break;
	case LEDGER_CLAIM_REPLAY:
		reply_completed(req, &res.call, true, false);
		break;
	case LEDGER_CLAIM_RESULT_NOT_KEPT:
		reply_not_kept(req, &res.call);
		break;
	case LEDGER_CLAIM_ATTEMPT_NOT_FOUND:
		api_reply_error_begin(req, &w, 404, "attempt_not_found",
				      "the attempt_id names no attempt of this request");
		ledger_jsonw_key(&w, "attempt_id");
		ledger_jsonw_string(&w, in->req.claim.attempt_id);
		api_reply_error_end(req, &w);
		break;
	case LEDGER_CLAIM_ATTEMPT_REQUIRED:
		api_reply_error(req, 409, "attempt_required",
				"this request has attempts: a claim must name its attempt_id");
		break;
	case LEDGER_CLAIM_ARGS_MISMATCH:
		api_reply_error_begin(req, &w, 422, "args_mismatch",
				      "the key was first claimed for another call; it is never "
				      "replayed for this one");
		ledger_jsonw_key(&w, "field");
		ledger_jsonw_string(&w, res.mismatch);
		write_text(&w, "expected_args_sha256", res.call.args_sha256);
		write_text(&w, "got_args_sha256", in->args_sha256);
		api_reply_error_end(req, &w);
		break;
	case LEDGER_CLAIM_RESULT_EXPIRED:
	case LEDGER_CLAIM_ATTEMPT_FENCED:
	case LEDGER_CLAIM_OUTCOME_UNKNOWN:
		reply_refusal(req, ledger_decide_claim_code(res.outcome.claim), &res.call);
		break;
	case LEDGER_CLAIM_IN_PROGRESS:
		api_reply_error_begin(req, &w, 409, "in_progress",
				      "another holder's lease is running; retry after it");
		ledger_jsonw_key(&w, "retry_after_ms");
		ledger_jsonw_int(&w, res.call.lease_ms_left);
		ledger_jsonw_key(&w, "holder");
		ledger_jsonw_object_begin(&w);
		write_text(&w, "attempt_id", res.call.attempt_id);
		write_text(&w, "owner", res.call.owner);
		ledger_jsonw_object_end(&w);
		api_reply_error_end(req, &w);
		req->reply.retry_after_ms = res.call.lease_ms_left;
		break;
	}
}

const struct api_handler api_toolcalls_claim = {.parse = claim_parse, .answer = claim_answer};

/* --- renew --- */

struct renew_input {
	int64_t fencing_token;
	int64_t lease_ms;
};

static enum ledger_err renew_parse(struct api_request *req)
{
	static const char *const fields[] = {"fencing_token", "lease_ms", NULL};
	const struct ledger_json_value *body = api_input_body_or_reply(req, fields);
	struct renew_input *in = NULL;

	if (body == NULL)
		return LEDGER_ERR_INVALID;
	in = api_input_alloc_or_reply(req, sizeof(*in));
	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	if (api_input_int_or_reply(req, body, "fencing_token", 0, MAX_INT, -1,
				   &in->fencing_token) ||
	    api_input_int_or_reply(req, body, "lease_ms", lease_bound(req, false),
				   lease_bound(req, true), default_lease(req), &in->lease_ms))
		return LEDGER_ERR_INVALID;
	req->job.op.kind = LEDGER_STORE_RENEW;
	req->job.op.in.renew.fencing_token = in->fencing_token;
	req->job.op.in.renew.lease_ms = in->lease_ms;
	return LEDGER_OK;
}

static void reply_renewed(struct api_request *req, const struct renew_input *in,
			  const struct ledger_store_result *r)
{
	struct ledger_jsonw w;
	/* The new deadline is the database's now plus lease_ms: what is left of it now. */
	int64_t left = api_reply_time_left(r, in->lease_ms);

	if (left <= 0) {
		api_reply_too_late(req);
		return;
	}
	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "lease_ms");
	ledger_jsonw_int(&w, left);
	api_reply_fencing_token_member(req, &w, in->fencing_token);
	ledger_jsonw_object_end(&w);
}

static void renew_answer(struct api_request *req, const struct ledger_store_result *r)
{
	const struct ledger_call_result *res = &r->u.call;
	const char *code = ledger_decide_renew_code(res->outcome.renew);

	if (res->outcome.renew == LEDGER_RENEW_ATTEMPT_FENCED)
		api_metrics_fenced(API_FENCED_CLAIM_RENEW);
	else if (res->outcome.renew == LEDGER_RENEW_STALE_TOKEN)
		api_metrics_stale_token(API_STALE_CLAIM_RENEW);
	if (code != NULL)
		reply_refusal(req, code, &res->call);
	else
		reply_renewed(req, req->input, r);
}

const struct api_handler api_toolcalls_renew = {.parse = renew_parse, .answer = renew_answer};

/* --- complete --- */

static enum ledger_err outcome_or_reply(struct api_request *req,
					const struct ledger_json_value *body, const char *key,
					const char *const *names, int *out)
{
	const struct ledger_json_value *v = ledger_json_get(body, key);

	if (v == NULL || v->type == LEDGER_JSON_NULL) {
		api_reply_invalid_field(req, key, "is required");
		return LEDGER_ERR_INVALID;
	}
	if (v->type == LEDGER_JSON_STRING) {
		for (int i = 0; names[i] != NULL; i++) {
			if (strcmp(v->u.str.s, names[i]) == 0) {
				*out = i;
				return LEDGER_OK;
			}
		}
	}
	if (names[2] != NULL)
		api_reply_invalid_field(req, key, "must be \"%s\", \"%s\" or \"%s\"", names[0],
					names[1], names[2]);
	else
		api_reply_invalid_field(req, key, "must be \"%s\" or \"%s\"", names[0], names[1]);
	return LEDGER_ERR_INVALID;
}

struct complete_input {
	struct ledger_completion c;
	char result[]; /* the result's exact text, NUL-terminated for the store; "" not kept */
};

#define NOT_KEPT_SHAPE "{\"bytes\": <integer from 0 to 2^53-1>, \"sha256\": \"<64 lowercase hex>\"}"

/*
 * result_not_kept, the client's word that the result's exact JSON text had
 * this length and SHA-256 and is not sent (docs/api.md, "Results not kept").
 */
static enum ledger_err not_kept_or_reply(struct api_request *req, const struct ledger_json_value *v,
					 struct ledger_result_digest *out)
{
	const struct ledger_json_value *bytes = NULL, *sha = NULL;
	uint64_t n = 0;

	if (v->type == LEDGER_JSON_OBJECT) {
		bytes = ledger_json_get(v, "bytes");
		sha = ledger_json_get(v, "sha256");
	}
	if (bytes == NULL || sha == NULL || v->u.obj.count != 2) {
		api_reply_invalid_field(req, "result_not_kept", "must be " NOT_KEPT_SHAPE);
		return LEDGER_ERR_INVALID;
	}
	if (bytes->type != LEDGER_JSON_NUMBER ||
	    ledger_json_number_uint(bytes, LEDGER_MAX_SAFE_INT, &n) != LEDGER_OK) {
		api_reply_invalid_field(req, "result_not_kept",
					"bytes must be an integer from 0 to 2^53-1");
		return LEDGER_ERR_INVALID;
	}
	if (sha->type != LEDGER_JSON_STRING || sha->u.str.len != LEDGER_SHA256_HEX ||
	    !is_lower_hex(sha->u.str.s, sha->u.str.len)) {
		api_reply_invalid_field(req, "result_not_kept",
					"sha256 must be 64 lowercase hex digits");
		return LEDGER_ERR_INVALID;
	}
	out->bytes = (int64_t)n;
	memcpy(out->sha256, sha->u.str.s, LEDGER_SHA256_HEX + 1);
	return LEDGER_OK;
}

static enum ledger_err complete_parse(struct api_request *req)
{
	static const char *const fields[] = {"fencing_token",   "outcome",   "result",
					     "result_not_kept", "retryable", NULL};
	static const char *const outcomes[] = {"succeeded", "failed", NULL};
	const struct ledger_json_value *body = api_input_body_or_reply(req, fields);
	const struct ledger_json_value *result = NULL, *not_kept = NULL;
	struct complete_input *input = NULL;
	struct ledger_completion *in = NULL;
	const char *text = "null"; /* a result left out is null, as in API 1 */
	size_t len = 4;
	bool whole = true;
	int outcome = 0;

	if (body == NULL)
		return LEDGER_ERR_INVALID;
	result = ledger_json_get(body, "result"); /* null is a result: the text "null" */
	not_kept = ledger_json_get(body, "result_not_kept");
	if (not_kept != NULL && not_kept->type == LEDGER_JSON_NULL)
		not_kept = NULL;
	if (result != NULL) {
		text = result->raw;
		len = result->raw_len;
	}
	/* Past the bound a final result keeps its digest only; the completion goes on. */
	whole = not_kept == NULL && (int64_t)len <= req->config->max_result_bytes;
	input = api_input_alloc_or_reply(req, sizeof(*input) + (whole ? len : 0) + 1);
	if (input == NULL)
		return LEDGER_ERR_NOMEM;
	in = &input->c;
	if (api_input_int_or_reply(req, body, "fencing_token", 0, MAX_INT, -1,
				   &in->fencing_token) ||
	    outcome_or_reply(req, body, "outcome", outcomes, &outcome) ||
	    api_input_bool_or_reply(req, body, "retryable", false, &in->retryable))
		return LEDGER_ERR_INVALID;
	in->succeeded = outcome == 0;
	if (in->retryable && in->succeeded) {
		api_reply_invalid_field(req, "retryable", "only a failed outcome can be retryable");
		return LEDGER_ERR_INVALID;
	}
	if (not_kept != NULL) {
		if (result != NULL) {
			api_reply_invalid_field(req, "result_not_kept",
						"send result or result_not_kept, not both");
			return LEDGER_ERR_INVALID;
		}
		if (in->retryable) {
			api_reply_invalid_field(req, "result_not_kept",
						"a retryable failure stores no result: leave "
						"result_not_kept out");
			return LEDGER_ERR_INVALID;
		}
		if (not_kept_or_reply(req, not_kept, &in->result_digest) != LEDGER_OK)
			return LEDGER_ERR_INVALID;
		in->result_not_kept = true;
	} else if (!whole && !in->retryable) {
		if (!ledger_call_digest_result(text, len, &in->result_digest)) {
			api_reply_error(req, 500, "internal_error", "out of memory");
			return LEDGER_ERR_NOMEM;
		}
		in->result_not_kept = true;
	}
	if (whole) {
		memcpy(input->result, text, len);
		input->result[len] = '\0';
		in->result_len = len;
	}
	/* A retryable failure stores nothing: what it sent is not needed. */
	in->result = in->result_not_kept ? NULL : input->result;
	req->job.op.kind = LEDGER_STORE_COMPLETE;
	req->job.op.in.completion = in;
	return LEDGER_OK;
}

static void complete_answer(struct api_request *req, const struct ledger_store_result *r)
{
	const struct ledger_call_result *res = &r->u.call;
	const char *code = ledger_decide_complete_code(res->outcome.complete);

	if (res->outcome.complete == LEDGER_COMPLETE_LATE)
		api_metrics_late_completion();
	else if (res->outcome.complete == LEDGER_COMPLETE_ALREADY_COMPLETED)
		api_metrics_conflicting_completion();
	else if (res->outcome.complete == LEDGER_COMPLETE_STALE_TOKEN)
		api_metrics_stale_token(API_STALE_COMPLETE);
	if (res->contradiction != LEDGER_CONTRADICTION_NONE)
		api_metrics_contradiction(res->contradiction == LEDGER_CONTRADICTION_DUPLICATE);
	if (code != NULL)
		reply_refusal(req, code, &res->call);
	else if (res->call.state == LEDGER_CALL_RELEASED)
		reply_released(req, res->call.fencing_token);
	else
		reply_completed(req, &res->call, false,
				res->call.completed_by == LEDGER_COMPLETED_LATE);
}

const struct api_handler api_toolcalls_complete = {.parse = complete_parse,
						   .answer = complete_answer};

/* --- release --- */

struct release_input {
	int64_t fencing_token;
	const char *reason;
};

static enum ledger_err release_parse(struct api_request *req)
{
	static const char *const fields[] = {"fencing_token", "reason", NULL};
	const struct ledger_json_value *body = api_input_body_or_reply(req, fields);
	struct release_input *in = NULL;

	if (body == NULL)
		return LEDGER_ERR_INVALID;
	in = api_input_alloc_or_reply(req, sizeof(*in));
	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	if (api_input_int_or_reply(req, body, "fencing_token", 0, MAX_INT, -1,
				   &in->fencing_token) ||
	    api_input_text_or_reply(req, body, "reason", LEDGER_TEXT_MAX, &in->reason))
		return LEDGER_ERR_INVALID;
	req->job.op.kind = LEDGER_STORE_RELEASE;
	req->job.op.in.release.fencing_token = in->fencing_token;
	req->job.op.in.release.reason = in->reason;
	return LEDGER_OK;
}

static void release_answer(struct api_request *req, const struct ledger_store_result *r)
{
	const struct ledger_call_result *res = &r->u.call;
	const char *code = ledger_decide_release_code(res->outcome.release);

	if (res->outcome.release == LEDGER_RELEASE_STALE_TOKEN)
		api_metrics_stale_token(API_STALE_RELEASE);
	if (code != NULL)
		reply_refusal(req, code, &res->call);
	else
		reply_released(req, res->call.fencing_token);
}

const struct api_handler api_toolcalls_release = {.parse = release_parse, .answer = release_answer};

/* --- resolve --- */

struct resolve_input {
	enum ledger_resolution resolution;
	const char *note;
	char result[]; /* the result's exact text, NUL-terminated for the store */
};

static enum ledger_err resolve_parse(struct api_request *req)
{
	static const char *const fields[] = {"resolution", "result", "note", NULL};
	static const char *const resolutions[] = {"succeeded", "failed", "not_executed", NULL};
	const struct ledger_json_value *body = api_input_body_or_reply(req, fields);
	const struct ledger_json_value *result = NULL;
	struct resolve_input *in = NULL;
	int resolution = 0;

	if (body == NULL)
		return LEDGER_ERR_INVALID;
	result = ledger_json_get(body, "result");
	if (result != NULL && result->type == LEDGER_JSON_NULL)
		result = NULL;
	in = api_input_alloc_or_reply(req,
				      sizeof(*in) + (result != NULL ? result->raw_len : 0) + 1);
	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	if (outcome_or_reply(req, body, "resolution", resolutions, &resolution) ||
	    api_input_text_or_reply(req, body, "note", LEDGER_TEXT_MAX, &in->note))
		return LEDGER_ERR_INVALID;
	in->resolution = (enum ledger_resolution)resolution;
	req->job.op.kind = LEDGER_STORE_RESOLVE;
	req->job.op.in.resolve.resolution = in->resolution;
	req->job.op.in.resolve.note = in->note;
	if (result != NULL) {
		if (in->resolution == LEDGER_RESOLVE_NOT_EXECUTED) {
			api_reply_invalid_field(req, "result",
						"a call that did not run has no result");
			return LEDGER_ERR_INVALID;
		}
		memcpy(in->result, result->raw, result->raw_len);
		in->result[result->raw_len] = '\0';
		req->job.op.in.resolve.result = in->result;
		req->job.op.in.resolve.result_len = result->raw_len;
	}
	return LEDGER_OK;
}

static void resolve_answer(struct api_request *req, const struct ledger_store_result *r)
{
	const struct ledger_call_result *res = &r->u.call;
	const char *code = ledger_decide_resolve_code(res->outcome.resolve);

	if (code != NULL)
		reply_refusal(req, code, &res->call);
	else if (res->call.state == LEDGER_CALL_RELEASED)
		reply_released(req, res->call.fencing_token);
	else
		reply_completed(req, &res->call, false, false);
}

const struct api_handler api_toolcalls_resolve = {.parse = resolve_parse, .answer = resolve_answer};

/* --- get and list --- */

void api_toolcalls_write_call(struct ledger_jsonw *w, const char *rid, const char *cid,
			      const struct ledger_call *call, bool payload, int64_t elapsed_ms)
{
	char ikey[2 * LEDGER_ID_MAX + 2];
	bool held = call->state == LEDGER_CALL_IN_PROGRESS || call->state == LEDGER_CALL_UNKNOWN;
	bool final = call->state == LEDGER_CALL_SUCCEEDED || call->state == LEDGER_CALL_FAILED;

	snprintf(ikey, sizeof(ikey), "%s:%s", rid, cid);
	ledger_jsonw_object_begin(w);
	ledger_jsonw_key(w, "request_id");
	ledger_jsonw_string(w, rid);
	ledger_jsonw_key(w, "tool_call_id");
	ledger_jsonw_string(w, cid);
	ledger_jsonw_key(w, "idempotency_key");
	ledger_jsonw_string(w, ikey);
	write_text(w, "tool", call->tool);
	ledger_jsonw_key(w, "state");
	ledger_jsonw_string(w, ledger_call_state_name(call->state));
	ledger_jsonw_key(w, "fencing_token");
	ledger_jsonw_int(w, call->fencing_token);
	ledger_jsonw_key(w, "holder");
	if (held) {
		/* Never the claim_id: whoever knows it can pose as the holder. */
		ledger_jsonw_object_begin(w);
		write_text(w, "attempt_id", call->attempt_id);
		write_text(w, "owner", call->owner);
		ledger_jsonw_object_end(w);
	} else {
		ledger_jsonw_null(w);
	}
	ledger_jsonw_key(w, "lease_ms_left");
	ledger_jsonw_int(w,
			 call->state == LEDGER_CALL_IN_PROGRESS && call->lease_ms_left > elapsed_ms
				 ? call->lease_ms_left - elapsed_ms
				 : 0);
	write_text(w, "args_sha256", call->args_sha256);
	if (payload && call->args != NULL) {
		ledger_jsonw_key(w, "args");
		ledger_jsonw_raw(w, call->args, call->args_len);
	}
	ledger_jsonw_key(w, "tool_dedupes");
	ledger_jsonw_bool(w, call->tool_dedupes);
	if (final) {
		ledger_jsonw_key(w, "outcome");
		ledger_jsonw_string(w, ledger_call_state_name(call->state));
		/* Not kept: every view says so, with the digest (metadata, not payload). */
		write_result(w, call, payload);
	}
	ledger_jsonw_key(w, "created_at");
	ledger_jsonw_string(w, call->created_at);
	if (final) {
		ledger_jsonw_key(w, "completed_at");
		ledger_jsonw_string(w, call->completed_at);
	}
	ledger_jsonw_object_end(w);
}

static enum ledger_err get_parse(struct api_request *req)
{
	req->job.op.kind = LEDGER_STORE_GET_CALL;
	return LEDGER_OK;
}

static void get_answer(struct api_request *req, const struct ledger_store_result *res)
{
	const struct ledger_call *call = &res->u.call.call;
	struct ledger_jsonw w;

	if (call->state == LEDGER_CALL_ABSENT) {
		reply_refusal(req, "not_found", call);
	} else if (call->state == LEDGER_CALL_TOMBSTONE) {
		reply_refusal(req, "result_expired", call);
	} else {
		api_reply_begin(req, &w, 200);
		api_toolcalls_write_call(&w, req->params[0], req->params[1], call, true,
					 api_reply_elapsed_ms(res));
	}
}

const struct api_handler api_toolcalls_get = {.parse = get_parse, .answer = get_answer};

/* A page cursor is the last key of the page, "rid:cid": ids never hold ':'. */
static void cursor_encode(const char *rid, const char *cid, char *out, size_t cap)
{
	char raw[2 * LEDGER_ID_MAX + 2];
	int n = snprintf(raw, sizeof(raw), "%s:%s", rid, cid);

	api_input_cursor_encode(raw, (size_t)n, out, cap);
}

/* @return false unless @p cursor decodes to two valid ids. */
static bool cursor_decode(const char *cursor, char *rid, char *cid)
{
	char raw[2 * LEDGER_ID_MAX + 2];
	char *colon = NULL;
	int n = api_input_cursor_decode(cursor, raw, sizeof(raw));

	if (n <= 0 || strlen(raw) != (size_t)n || (colon = strchr(raw, ':')) == NULL)
		return false;
	*colon = '\0';
	if (!ledger_id_valid(raw, strlen(raw)) || !ledger_id_valid(colon + 1, strlen(colon + 1)))
		return false;
	strcpy(rid, raw);
	strcpy(cid, colon + 1);
	return true;
}

struct list_input {
	enum ledger_call_state state;
	unsigned limit;
	bool has_cursor;
	char after_rid[LEDGER_ID_MAX + 1];
	char after_cid[LEDGER_ID_MAX + 1];
};

static enum ledger_err list_parse(struct api_request *req)
{
	static const enum ledger_call_state states[] = {LEDGER_CALL_IN_PROGRESS,
							LEDGER_CALL_UNKNOWN, LEDGER_CALL_SUCCEEDED,
							LEDGER_CALL_FAILED, LEDGER_CALL_RELEASED};
	const char *state = api_input_query(req, "state");
	const char *limit = api_input_query(req, "limit");
	const char *cursor = api_input_query(req, "cursor");
	struct list_input *in = api_input_alloc_or_reply(req, sizeof(*in));

	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	in->state = LEDGER_CALL_ABSENT;
	if (state != NULL) {
		for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
			if (strcmp(state, ledger_call_state_name(states[i])) == 0)
				in->state = states[i];
		}
		if (in->state == LEDGER_CALL_ABSENT) {
			api_reply_invalid_field(req, "state",
						"must be in_progress, unknown, succeeded, failed "
						"or released");
			return LEDGER_ERR_INVALID;
		}
	}
	in->limit = DEFAULT_LIMIT;
	if (limit != NULL) {
		char *end = NULL;
		unsigned long v = strtoul(limit, &end, 10);
		if (limit[0] < '0' || limit[0] > '9' || *end != '\0' || v < 1 || v > MAX_LIMIT) {
			api_reply_invalid_field(req, "limit", "must be an integer from 1 to %d",
						MAX_LIMIT);
			return LEDGER_ERR_INVALID;
		}
		in->limit = (unsigned)v;
	}
	if (cursor != NULL) {
		if (!cursor_decode(cursor, in->after_rid, in->after_cid)) {
			api_reply_invalid_field(req, "cursor", "is not a cursor this list gave");
			return LEDGER_ERR_INVALID;
		}
		in->has_cursor = true;
	}
	req->job.op.kind = LEDGER_STORE_LIST_CALLS;
	req->job.op.in.list_calls.state = in->state;
	req->job.op.in.list_calls.after_request_id = in->has_cursor ? in->after_rid : NULL;
	req->job.op.in.list_calls.after_tool_call_id = in->has_cursor ? in->after_cid : NULL;
	/* One row more than the page tells whether there is a next page. */
	req->job.op.in.list_calls.limit = in->limit + 1;
	return LEDGER_OK;
}

static void list_answer(struct api_request *req, const struct ledger_store_result *res)
{
	const struct list_input *in = req->input;
	const struct ledger_listed_call *items = res->u.calls.items;
	size_t n = res->u.calls.count;
	struct ledger_jsonw w;

	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "items");
	ledger_jsonw_array_begin(&w);
	for (size_t i = 0; i < n && i < in->limit; i++)
		api_toolcalls_write_call(&w, items[i].request_id, items[i].tool_call_id,
					 &items[i].call, false, api_reply_elapsed_ms(res));
	ledger_jsonw_array_end(&w);
	ledger_jsonw_key(&w, "next_cursor");
	if (n > in->limit) {
		char cursor[4 * (2 * LEDGER_ID_MAX + 2) / 3 + 8];
		cursor_encode(items[in->limit - 1].request_id, items[in->limit - 1].tool_call_id,
			      cursor, sizeof(cursor));
		ledger_jsonw_string(&w, cursor);
	} else {
		ledger_jsonw_null(&w);
	}
	ledger_jsonw_object_end(&w);
}

const struct api_handler api_toolcalls_list = {.parse = list_parse, .answer = list_answer};
