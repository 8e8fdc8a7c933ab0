/*
 * sdk/c/toolcall.c: the agent side of the C client. ledger_client_tool_call()
 * turns "run this side effect" into "run it at most once for this key":
 *
 *   claim ──201/200 claimed──> run tool (renewing) ──> complete | release | abandon
 *     │ 200 completed ──> REPLAYED (tool not called)
 *     │ 409 in_progress ──> wait (back-off, up to wait_ms) ──> claim again
 *     └ 409/410/422 ──> UNKNOWN, ATTEMPT_FENCED, ARGS_MISMATCH, RESULT_NOT_KEPT, ...
 *                       (tool not called)
 *
 * A completion sends a result over max_result_bytes as its length and
 * SHA-256 (result_not_kept), and sends it so again at once when a whole
 * one is answered 413 (ledgerd's body_too_large, or a reverse proxy's
 * limit): the effect happened, its record must never be lost to the size
 * of its result.
 *
 * With tracing on, a call is one execute_tool span (OpenTelemetry's GenAI
 * semantic conventions 1.37.0; docs/tracing-sdk-c.md), the parent of every
 * call it makes to ledgerd and of what the tool itself passes on
 * (ledger_client_tool_traceparent()).
 *
 * It also holds the fingerprint (the server's own JCS code) and stable ids.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/jcs.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/sha256.h"
#include "sdk/c/client_int.h"

#define DEFAULT_LEASE_MS 30000u
#define MIN_RENEW_INTERVAL_MS 20u
#define MAX_DEPTH 64
#define CLAIM_ID_BYTES 16 /* 128 random bits */

/* Renewals of a held claim while its tool runs. */
struct renewal {
	struct ledger_client *c;
	const char *path;
	const struct ledger_trace_ctx *trace; /* the call's */
	int64_t fencing_token;
	uint32_t lease_ms;
	char ended_by[48]; /* the refusal that ended renewing, "" if none; read after join */
};

static bool renew_tick(void *arg)
{
	struct renewal *r = arg;
	struct ledger_buf body = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	struct client_answer ans;
	struct ledger_client_error err = {0};
	enum ledger_client_err rc;

	ledger_jsonw_init(&w, &body);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "fencing_token");
	ledger_jsonw_int(&w, r->fencing_token);
	ledger_jsonw_key(&w, "lease_ms");
	ledger_jsonw_int(&w, r->lease_ms);
	ledger_jsonw_object_end(&w);
	/* One try per tick: the next tick is the retry. */
	rc = client_call(r->c, r->path, &body, 0, r->trace, &ans, &err);
	client_answer_clear(&ans);
	ledger_buf_free(&body);
	if (rc == LEDGER_CLIENT_ERR_REFUSED) {
		/* stale_token, outcome_unknown, attempt_fenced: renewing cannot help */
		snprintf(r->ended_by, sizeof(r->ended_by), "%s", err.code);
		ledger_client_error_clear(&err);
		return false;
	}
	ledger_client_error_clear(&err);
	return true;
}

void client_outcome_clear(struct ledger_outcome *o)
{
	if (o == NULL)
		return;
	free(o->result);
	free(o->idempotency_key);
	free(o->completed_at);
	ledger_client_error_clear(&o->error);
	memset(o, 0, sizeof(*o));
}

const char *ledger_client_outcome_name(enum ledger_outcome_kind kind)
{
	switch (kind) {
	case LEDGER_OUTCOME_EXECUTED:
		return "executed";
	case LEDGER_OUTCOME_REPLAYED:
		return "replayed";
	case LEDGER_OUTCOME_RELEASED:
		return "released";
	case LEDGER_OUTCOME_UNRECORDED:
		return "unrecorded";
	case LEDGER_OUTCOME_IN_PROGRESS:
		return "in_progress";
	case LEDGER_OUTCOME_UNKNOWN:
		return "outcome_unknown";
	case LEDGER_OUTCOME_ATTEMPT_FENCED:
		return "attempt_fenced";
	case LEDGER_OUTCOME_ARGS_MISMATCH:
		return "args_mismatch";
	case LEDGER_OUTCOME_RESULT_EXPIRED:
		return "result_expired";
	case LEDGER_OUTCOME_REFUSED:
		return "refused";
	case LEDGER_OUTCOME_ABANDONED:
		return "abandoned";
	case LEDGER_OUTCOME_RESULT_NOT_KEPT:
		return "result_not_kept";
	}
	return "unknown kind";
}

/* The outcome kind of an API refusal of a claim or completion. */
static enum ledger_outcome_kind kind_of(const char *code)
{
	static const struct {
		const char *code;
		enum ledger_outcome_kind kind;
	} map[] = {
		{"in_progress", LEDGER_OUTCOME_IN_PROGRESS},
		{"outcome_unknown", LEDGER_OUTCOME_UNKNOWN},
		{"attempt_fenced", LEDGER_OUTCOME_ATTEMPT_FENCED},
		{"args_mismatch", LEDGER_OUTCOME_ARGS_MISMATCH},
		{"result_expired", LEDGER_OUTCOME_RESULT_EXPIRED},
		{"result_not_kept", LEDGER_OUTCOME_RESULT_NOT_KEPT},
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(code, map[i].code) == 0)
			return map[i].kind;
	return LEDGER_OUTCOME_REFUSED;
}

static enum ledger_call_outcome call_outcome_of(const struct ledger_json_value *root)
{
	const struct ledger_json_value *v = ledger_json_get(root, "outcome");

	if (v == NULL || v->type != LEDGER_JSON_STRING)
		return LEDGER_CALL_NONE;
	if (strcmp(v->u.str.s, "succeeded") == 0)
		return LEDGER_CALL_SUCCEEDED;
	if (strcmp(v->u.str.s, "failed") == 0)
		return LEDGER_CALL_FAILED;
	return LEDGER_CALL_NONE;
}

/* 64 lowercase hex digits and a NUL: the form of a SHA-256 in the API. */
static bool is_sha256_hex(const struct ledger_json_value *v)
{
	if (v == NULL || v->type != LEDGER_JSON_STRING || v->u.str.len != 64)
		return false;
	for (size_t i = 0; i < 64; i++)
		if (!((v->u.str.s[i] >= '0' && v->u.str.s[i] <= '9') ||
		      (v->u.str.s[i] >= 'a' && v->u.str.s[i] <= 'f')))
			return false;
	return true;
}

/*
 * Takes the digest of a result not kept (result_bytes and result_sha256 of
 * @p obj, a completed answer or a result_not_kept error) into @p out.
 * @return false, with @p out unchanged, when either is missing or malformed
 */
static bool take_digest(const struct ledger_json_value *obj, struct ledger_outcome *out)
{
	const struct ledger_json_value *sha = ledger_json_get(obj, "result_sha256");
	uint64_t bytes = 0;

	if (!client_get_u64(obj, "result_bytes", &bytes) || !is_sha256_hex(sha))
		return false;
	memcpy(out->result_sha256, sha->u.str.s, 64);
	out->result_sha256[64] = '\0';
	out->result_bytes = bytes;
	return true;
}

/*
 * Takes a completed answer's stored result, outcome and time into @p out.
 * The answer to a completion (@p replay false) may instead say the result
 * was not kept ("result_kept": false, its digest, no result): then it is
 * on record as that digest, and out->result stays the tool's own. A claim
 * is never answered so: a call whose result was not kept is 409.
 */
static enum ledger_client_err take_completed(const struct client_answer *ans, bool replay,
					     struct ledger_outcome *out)
{
	const struct ledger_json_value *kept = ledger_json_get(ans->root, "result_kept");
	bool whole = kept == NULL || kept->type != LEDGER_JSON_FALSE;

	free(out->completed_at);
	out->completed_at = client_dup_string(ans->root, "completed_at");
	out->call = call_outcome_of(ans->root);
	if (whole) {
		free(out->result);
		out->result = client_dup_raw(ans->root, "result");
	}
	if ((whole ? out->result == NULL : replay || !take_digest(ans->root, out)) ||
	    out->completed_at == NULL || out->call == LEDGER_CALL_NONE) {
		client_error_set(&out->error, "", "a completed answer without its result");
		return LEDGER_CLIENT_ERR_PROTOCOL;
	}
	return LEDGER_CLIENT_OK;
}

/*
 * The details of a result_not_kept refusal: the stored outcome, its time
 * and its result's digest. Any that are missing stay unset: the kind is
 * the code's, whatever else the body holds.
 */
static void take_not_kept(struct ledger_outcome *out)
{
	struct ledger_json_doc *doc = NULL;
	const struct ledger_json_value *e = NULL;

	if (out->error.body == NULL || ledger_json_parse(out->error.body, out->error.body_len,
							 MAX_DEPTH, &doc, NULL) != LEDGER_OK)
		return;
	e = ledger_json_get(ledger_json_root(doc), "error");
	if (e != NULL && e->type == LEDGER_JSON_OBJECT) {
		out->call = call_outcome_of(e);
		free(out->completed_at);
		out->completed_at = client_dup_string(e, "completed_at");
		(void)take_digest(e, out);
	}
	ledger_json_free(doc);
}

/* A refusal becomes the outcome; the attempt handle learns of a revocation. */
static enum ledger_client_err refused(const struct ledger_call *call, struct ledger_outcome *out)
{
	out->kind = kind_of(out->error.code);
	if (call->attempt != NULL && (out->kind == LEDGER_OUTCOME_ARGS_MISMATCH ||
				      out->kind == LEDGER_OUTCOME_ATTEMPT_FENCED))
		client_attempt_revoke(call->attempt);
	if (out->kind == LEDGER_OUTCOME_RESULT_NOT_KEPT)
		take_not_kept(out);
	return out->kind == LEDGER_OUTCOME_REFUSED ? LEDGER_CLIENT_ERR_REFUSED : LEDGER_CLIENT_OK;
}

enum ledger_client_err client_claim_read(const struct ledger_call *call, enum ledger_client_err rc,
					 const struct client_answer *ans,
					 struct ledger_outcome *out, uint64_t *fencing_token)
{
	uint64_t token = 0;
	char *state = NULL;

	*fencing_token = 0;
	if (rc == LEDGER_CLIENT_ERR_REFUSED)
		return refused(call, out);
	if (rc != LEDGER_CLIENT_OK)
		return rc;
	state = client_dup_string(ans->root, "status");
	if (state != NULL && strcmp(state, "completed") == 0) {
		out->kind = LEDGER_OUTCOME_REPLAYED;
		rc = take_completed(ans, true, out);
	} else if (state == NULL || strcmp(state, "claimed") != 0 ||
		   !client_get_u64(ans->root, "fencing_token", &token) || token == 0 ||
		   token > INT64_MAX) {
		client_error_set(&out->error, "", "a claim answer with no known status");
		rc = LEDGER_CLIENT_ERR_PROTOCOL;
	} else {
		out->fencing_token = token;
		*fencing_token = token;
	}
	free(state);
	return rc;
}

static void claim_body(struct ledger_buf *b, const struct ledger_call *call, const char *claim_id,
		       const char *attempt_id, const char *args_sha256)
{
	struct ledger_jsonw w;

	ledger_jsonw_init(&w, b);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "claim_id");
	ledger_jsonw_string(&w, claim_id);
	if (call->tool != NULL) {
		ledger_jsonw_key(&w, "tool");
		ledger_jsonw_string(&w, call->tool);
	}
	if (call->args_json != NULL && call->store_args) {
		ledger_jsonw_key(&w, "args");
		ledger_jsonw_raw(&w, call->args_json, strlen(call->args_json));
		ledger_jsonw_key(&w, "store_args");
		ledger_jsonw_bool(&w, true);
	} else if (call->args_json != NULL) {
		ledger_jsonw_key(&w, "args_sha256");
		ledger_jsonw_string(&w, args_sha256);
	}
	if (attempt_id != NULL) {
		ledger_jsonw_key(&w, "attempt_id");
		ledger_jsonw_string(&w, attempt_id);
	}
	if (call->owner != NULL) {
		ledger_jsonw_key(&w, "owner");
		ledger_jsonw_string(&w, call->owner);
	}
	if (call->lease_ms != 0) {
		ledger_jsonw_key(&w, "lease_ms");
		ledger_jsonw_int(&w, call->lease_ms);
	}
	ledger_jsonw_key(&w, "tool_dedupes");
	ledger_jsonw_bool(&w, call->tool_dedupes);
	ledger_jsonw_object_end(&w);
}

/*
 * What the tool returned, as JSON text to record: null for none, and a
 * JSON string holding it when it is not JSON (the effect happened: its
 * record must not be refused over the form of the result). Bytes that are
 * not UTF-8 are kept as \u00xx, each byte read as Latin-1.
 */
static char *result_text(char *raw)
{
	static const char hex[] = "0123456789abcdef";
	struct ledger_json_doc *doc = NULL;
	struct ledger_buf b = LEDGER_BUF_INIT;
	size_t len;

	if (raw == NULL)
		return strdup("null");
	len = strlen(raw);
	if (ledger_json_parse(raw, len, MAX_DEPTH, &doc, NULL) == LEDGER_OK) {
		ledger_json_free(doc);
		return raw;
	}
	ledger_jsonw_escape(&b, raw, len);
	if (!b.oom && ledger_json_parse(b.data, b.len, 1, &doc, NULL) != LEDGER_OK) {
		ledger_buf_free(&b);
		ledger_buf_putc(&b, '"');
		for (const unsigned char *p = (const unsigned char *)raw; *p != '\0'; p++) {
			if (*p >= 0x80 || *p < 0x20 || *p == '"' || *p == '\\') {
				ledger_buf_puts(&b, "\\u00");
				ledger_buf_putc(&b, hex[*p >> 4]);
				ledger_buf_putc(&b, hex[*p & 0xf]);
			} else {
				ledger_buf_putc(&b, (char)*p);
			}
		}
		ledger_buf_putc(&b, '"');
	}
	ledger_json_free(doc);
	free(raw);
	return ledger_buf_steal(&b, NULL);
}

/* What a completion sends of the tool's result. */
enum result_form {
	RESULT_WHOLE,  /* "result": its text */
	RESULT_DIGEST, /* "result_not_kept": its text's length and SHA-256 */
	RESULT_NONE,   /* nothing: a retryable failure, which stores no result */
};

/* The form for a result the client has not yet sent whole. */
static enum result_form form_not_whole(enum ledger_tool_status status)
{
	return status == LEDGER_TOOL_RETRYABLE ? RESULT_NONE : RESULT_DIGEST;
}

/* The body of a complete (or a release) of what the tool reported, its result in @p form. */
static enum ledger_client_err record_body(struct ledger_buf *b, enum ledger_tool_status status,
					  int64_t fencing_token, const char *result,
					  enum result_form form)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[32];
	char sha[65];
	size_t len = strlen(result);
	struct ledger_jsonw w;

	ledger_buf_free(b);
	ledger_jsonw_init(&w, b);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "fencing_token");
	ledger_jsonw_int(&w, fencing_token);
	if (status == LEDGER_TOOL_NOT_EXECUTED) {
		ledger_jsonw_key(&w, "reason");
		ledger_jsonw_string(&w, "the tool reported that it did not run");
	} else {
		ledger_jsonw_key(&w, "outcome");
		ledger_jsonw_string(&w, status == LEDGER_TOOL_SUCCEEDED ? "succeeded" : "failed");
		if (form == RESULT_WHOLE) {
			ledger_jsonw_key(&w, "result");
			ledger_jsonw_raw(&w, result, len);
		} else if (form == RESULT_DIGEST) {
			if (!ledger_sha256(result, len, md))
				return LEDGER_CLIENT_ERR_NOMEM;
			for (size_t i = 0; i < sizeof(md); i++) {
				sha[2 * i] = hex[md[i] >> 4];
				sha[2 * i + 1] = hex[md[i] & 0xf];
			}
			sha[64] = '\0';
			ledger_jsonw_key(&w, "result_not_kept");
			ledger_jsonw_object_begin(&w);
			ledger_jsonw_key(&w, "bytes");
			ledger_jsonw_int(&w, (int64_t)len);
			ledger_jsonw_key(&w, "sha256");
			ledger_jsonw_string(&w, sha);
			ledger_jsonw_object_end(&w);
		}
		ledger_jsonw_key(&w, "retryable");
		ledger_jsonw_bool(&w, status == LEDGER_TOOL_RETRYABLE);
	}
	ledger_jsonw_object_end(&w);
	return b->oom ? LEDGER_CLIENT_ERR_NOMEM : LEDGER_CLIENT_OK;
}

/* Records what the tool reported, retrying for as long as the client allows. */
static enum ledger_client_err record(struct ledger_client *c, const struct ledger_call *call,
				     const struct ledger_trace_ctx *trace,
				     enum ledger_tool_status status, int64_t fencing_token,
				     struct ledger_outcome *out)
{
	struct ledger_buf path = LEDGER_BUF_INIT, body = LEDGER_BUF_INIT;
	struct client_answer ans = {0};
	enum ledger_client_err rc;
	bool release = status == LEDGER_TOOL_NOT_EXECUTED;
	enum result_form form =
		strlen(out->result) <= c->max_result_bytes ? RESULT_WHOLE : form_not_whole(status);

	client_path(&path, call->request_id, "tool-calls", call->tool_call_id,
		    release ? "release" : "complete", (const char *)NULL);
	rc = record_body(&body, status, fencing_token, out->result, form);
	if (rc != LEDGER_CLIENT_OK || path.oom) {
		client_error_set(&out->error, "", "no memory for the completion");
		rc = LEDGER_CLIENT_ERR_NOMEM;
		goto out;
	}
	rc = client_call(c, path.data, &body, c->complete_retry_ms, trace, &ans, &out->error);
	if ((rc == LEDGER_CLIENT_ERR_REFUSED || rc == LEDGER_CLIENT_ERR_PROTOCOL) &&
	    form == RESULT_WHOLE && out->error.status == 413) {
		/*
		 * ledgerd's --max-body (413 body_too_large), or a reverse proxy's own
		 * limit (a 413 page, no envelope), is under the client's bound: the
		 * body was refused unread, and the digest always fits.
		 */
		ledger_client_error_clear(&out->error);
		rc = record_body(&body, status, fencing_token, out->result, form_not_whole(status));
		if (rc != LEDGER_CLIENT_OK) {
			client_error_set(&out->error, "", "no memory for the completion");
			goto out;
		}
		rc = client_call(c, path.data, &body, c->complete_retry_ms, trace, &ans,
				 &out->error);
	}
	rc = client_record_read(call, rc, &ans, out);
out:
	client_answer_clear(&ans);
	ledger_buf_free(&path);
	ledger_buf_free(&body);
	return rc;
}

enum ledger_client_err client_record_read(const struct ledger_call *call, enum ledger_client_err rc,
					  const struct client_answer *ans,
					  struct ledger_outcome *out)
{
	char *state = NULL;

	switch (rc) {
	case LEDGER_CLIENT_OK:
		state = client_dup_string(ans->root, "status");
		if (state != NULL && strcmp(state, "completed") == 0) {
			out->kind = LEDGER_OUTCOME_EXECUTED;
			rc = take_completed(ans, false, out);
		} else if (state != NULL && strcmp(state, "released") == 0) {
			out->kind = LEDGER_OUTCOME_RELEASED;
		} else {
			client_error_set(&out->error, "", "an answer with no known status");
			rc = LEDGER_CLIENT_ERR_PROTOCOL;
		}
		break;
	case LEDGER_CLIENT_ERR_UNAVAILABLE:
		/* The effect happened (or, on a release, did not): say it is not on record. */
		out->kind = LEDGER_OUTCOME_UNRECORDED;
		rc = LEDGER_CLIENT_OK;
		break;
	case LEDGER_CLIENT_ERR_REFUSED:
		rc = refused(call, out);
		break;
	default:
		break;
	}
	free(state);
	return rc;
}

/* The context a running tool passes on, formatted; restored when the tool returns. */
struct tool_trace {
	char traceparent[LEDGER_TRACEPARENT_LEN + 1];
	const char *tracestate; /* borrowed from the call's context; NULL: none */
};

/* The tool this thread runs now (tool_fn runs on the caller's thread), or NULL. */
static _Thread_local const struct tool_trace *running_tool;

const char *ledger_client_tool_traceparent(const char **tracestate)
{
	const struct tool_trace *t = running_tool;

	if (tracestate != NULL)
		*tracestate = t != NULL ? t->tracestate : NULL;
	return t != NULL ? t->traceparent : NULL;
}

/* Calls the tool with @p trace as the context it passes on (a tool may call another). */
static enum ledger_tool_status run_tool(const struct ledger_trace_ctx *trace,
					ledger_tool_fn tool_fn, void *ctx, const char *key,
					uint64_t fencing_token, char **raw)
{
	const struct tool_trace *outer = running_tool;
	struct tool_trace mine;
	enum ledger_tool_status status;

	if (trace->valid) {
		ledger_trace_ctx_format(trace, mine.traceparent);
		mine.tracestate = trace->tracestate[0] != '\0' ? trace->tracestate : NULL;
		running_tool = &mine;
	} else {
		running_tool = NULL;
	}
	status = tool_fn(ctx, key, fencing_token, raw);
	running_tool = outer;
	return status;
}

/* Runs the tool with its claim renewed, then records what it reported. */
static enum ledger_client_err execute(struct ledger_client *c, const struct ledger_call *call,
				      const struct ledger_trace_ctx *trace, int64_t fencing_token,
				      ledger_tool_fn tool_fn, void *ctx, struct ledger_outcome *out)
{
	struct ledger_buf renew_path = LEDGER_BUF_INIT;
	struct client_ticker ticker;
	struct renewal r = {0};
	uint32_t lease = call->lease_ms != 0 ? call->lease_ms : DEFAULT_LEASE_MS;
	uint32_t interval = lease / 3 > MIN_RENEW_INTERVAL_MS ? lease / 3 : MIN_RENEW_INTERVAL_MS;
	enum ledger_tool_status status;
	char *raw = NULL;

	client_path(&renew_path, call->request_id, "tool-calls", call->tool_call_id, "renew",
		    (const char *)NULL);
	if (renew_path.oom)
		return LEDGER_CLIENT_ERR_NOMEM;
	r.c = c;
	r.path = renew_path.data;
	r.trace = trace;
	r.fencing_token = fencing_token;
	r.lease_ms = lease;
	/* Without a renewal thread a tool longer than its lease ends unknown: refuse to start. */
	if (!client_ticker_start(&ticker, interval, renew_tick, &r)) {
		ledger_buf_free(&renew_path);
		client_error_set(&out->error, "", "could not start the renewal thread");
		return LEDGER_CLIENT_ERR_INTERNAL;
	}
	status = run_tool(trace, tool_fn, ctx, out->idempotency_key, (uint64_t)fencing_token, &raw);
	client_ticker_stop(&ticker);
	ledger_buf_free(&renew_path);
	out->executed = true;
	out->result = result_text(raw);
	if (out->result == NULL)
		return LEDGER_CLIENT_ERR_NOMEM;
	if (status == LEDGER_TOOL_UNKNOWN) {
		/* Neither a completion nor a release would be true: the lease decides. */
		out->kind = LEDGER_OUTCOME_ABANDONED;
		return LEDGER_CLIENT_OK;
	}
	if (status > LEDGER_TOOL_UNKNOWN)
		status =
			LEDGER_TOOL_FAILED; /* an out-of-range report: the effect may have happened */
	return record(c, call, trace, status, fencing_token, out);
}

/* Claims the key (waiting while another holder runs it), then runs the tool or replays. */
static enum ledger_client_err claim_and_run(struct ledger_client *c, const struct ledger_call *call,
					    const char *attempt_id, const char *sha,
					    const struct ledger_trace_ctx *trace,
					    ledger_tool_fn tool_fn, void *ctx,
					    struct ledger_outcome *out, uint64_t *fencing_token)
{
	struct ledger_buf path = LEDGER_BUF_INIT, body = LEDGER_BUF_INIT;
	struct client_answer ans = {0};
	char claim_id[2 * CLAIM_ID_BYTES + 1];
	enum ledger_client_err rc = LEDGER_CLIENT_ERR_NOMEM;
	uint64_t start = client_now_ms();
	uint32_t delay = 50;

	*fencing_token = 0;
	if (!client_random_hex(claim_id, CLAIM_ID_BYTES)) {
		client_error_set(&out->error, "", "no randomness for a claim_id");
		return LEDGER_CLIENT_ERR_INTERNAL;
	}
	client_path(&path, call->request_id, "tool-calls", call->tool_call_id, "claim",
		    (const char *)NULL);
	claim_body(&body, call, claim_id, attempt_id, sha);
	if (path.oom || body.oom ||
	    asprintf(&out->idempotency_key, "%s:%s", call->request_id, call->tool_call_id) < 0) {
		out->idempotency_key = NULL;
		goto out;
	}

	for (;;) {
		uint64_t waited;

		rc = client_call(c, path.data, &body, c->retry_ms, trace, &ans, &out->error);
		if (rc != LEDGER_CLIENT_ERR_REFUSED || strcmp(out->error.code, "in_progress") != 0)
			break;
		waited = client_now_ms() - start;
		if (waited >= call->wait_ms)
			break;
		/* Another holder runs it: its answer will be ours once it completes. */
		client_backoff(&delay, out->error.retry_after_ms, call->wait_ms - waited);
		ledger_client_error_clear(&out->error);
	}
	rc = client_claim_read(call, rc, &ans, out, fencing_token);
	client_answer_clear(&ans);
	if (rc == LEDGER_CLIENT_OK && *fencing_token != 0)
		rc = execute(c, call, trace, (int64_t)*fencing_token, tool_fn, ctx, out);
out:
	client_answer_clear(&ans);
	ledger_buf_free(&path);
	if (body.data != NULL)
		explicit_bzero(body.data, body.len); /* it carries the claim_id */
	ledger_buf_free(&body);
	explicit_bzero(claim_id, sizeof(claim_id));
	return rc;
}

/* The error.type of a call the library could not carry through. */
static const char *err_type(enum ledger_client_err rc)
{
	switch (rc) {
	case LEDGER_CLIENT_ERR_INVALID:
		return "invalid_argument";
	case LEDGER_CLIENT_ERR_NOMEM:
		return "out_of_memory";
	case LEDGER_CLIENT_ERR_UNAVAILABLE:
		return "ledger_unavailable";
	case LEDGER_CLIENT_ERR_PROTOCOL:
		return "protocol_error";
	default:
		return "_OTHER"; /* the semantic conventions' fallback */
	}
}

/*
 * The error.type of an outcome, NULL for success: a tool that ran (or was
 * replayed) and failed is "tool_failed"; a refusal the library knows is
 * its outcome's name, any other ledgerd's code; an outcome that did not
 * record what ran (released, unrecorded, abandoned) its name too.
 */
static const char *outcome_error_type(const struct ledger_outcome *o)
{
	switch (o->kind) {
	case LEDGER_OUTCOME_EXECUTED:
	case LEDGER_OUTCOME_REPLAYED:
		return o->call == LEDGER_CALL_FAILED ? "tool_failed" : NULL;
	case LEDGER_OUTCOME_REFUSED:
		return o->error.code[0] != '\0' ? o->error.code : "refused";
	default:
		return ledger_client_outcome_name(o->kind);
	}
}

/* The span's attributes known before the claim. */
static void span_begin(struct ledger_span *span, const struct ledger_call *call,
		       const char *attempt_id)
{
	char key[2 * LEDGER_CLIENT_ID_MAX + 2];

	if (span == NULL)
		return;
	snprintf(key, sizeof(key), "%s:%s", call->request_id, call->tool_call_id);
	ledger_span_set_str(span, "gen_ai.operation.name", "execute_tool");
	if (call->tool != NULL)
		ledger_span_set_str(span, "gen_ai.tool.name", call->tool);
	ledger_span_set_str(span, "gen_ai.tool.call.id", call->tool_call_id);
	ledger_span_set_str(span, "ledger.request_id", call->request_id);
	ledger_span_set_str(span, "ledger.tool_call_id", call->tool_call_id);
	ledger_span_set_str(span, "ledger.idempotency_key", key);
	if (attempt_id != NULL)
		ledger_span_set_str(span, "ledger.attempt_id", attempt_id);
}

/* What the call came to, and the span's end. */
static void span_finish(struct ledger_span *span, enum ledger_client_err rc,
			const struct ledger_outcome *o, uint64_t fencing_token)
{
	const char *error_type = NULL;

	if (span == NULL)
		return;
	if (fencing_token != 0)
		ledger_span_set_int(span, "ledger.fencing_token", (int64_t)fencing_token);
	/* A refusal the library has no outcome for is still an outcome: "refused". */
	if (rc == LEDGER_CLIENT_OK || rc == LEDGER_CLIENT_ERR_REFUSED) {
		ledger_span_set_str(span, "ledger.outcome", ledger_client_outcome_name(o->kind));
		error_type = outcome_error_type(o);
	} else {
		error_type = o->error.code[0] != '\0' ? o->error.code : err_type(rc);
	}
	ledger_span_set_bool(span, "ledger.replayed",
			     rc == LEDGER_CLIENT_OK && o->kind == LEDGER_OUTCOME_REPLAYED);
	ledger_span_set_bool(span, "ledger.executed", o->executed);
	if (o->error.code[0] != '\0')
		ledger_span_set_str(span, "ledger.error_code", o->error.code);
	/* No message: as the other SDKs, a span carries no error text, results or arguments. */
	if (error_type != NULL) {
		ledger_span_set_str(span, "error.type", error_type);
		ledger_span_set_status(span, LEDGER_SPAN_STATUS_ERROR, NULL);
	}
	ledger_span_end(span, 0);
}

enum ledger_client_err client_tool_call(struct ledger_client *c,
					       const struct ledger_call *call,
					       ledger_tool_fn tool_fn, void *ctx,
					       struct ledger_outcome *out)
{
	struct ledger_trace_ctx parent, trace;
	struct ledger_span *span = NULL;
	struct ledger_buf name = LEDGER_BUF_INIT;
	char sha[65] = "";
	const char *attempt_id = NULL;
	enum ledger_client_err rc = LEDGER_CLIENT_ERR_INVALID;
	uint64_t fencing_token = 0;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	memset(out, 0, sizeof(*out));
	out->kind = LEDGER_OUTCOME_REFUSED;
	if (c == NULL || call == NULL || tool_fn == NULL || !client_valid_id(call->request_id) ||
	    !client_valid_id(call->tool_call_id)) {
		client_error_set(&out->error, "", "a client, a tool and valid ids are required");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	attempt_id = call->attempt_id;
	if (attempt_id == NULL && call->attempt != NULL)
		attempt_id = ledger_client_attempt_id(call->attempt);
	if (attempt_id != NULL && !client_valid_id(attempt_id)) {
		client_error_set(&out->error, "", "the attempt id is not a valid id");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	if (call->args_json != NULL) {
		rc = ledger_client_args_sha256(call->args_json, strlen(call->args_json), sha);
		if (rc != LEDGER_CLIENT_OK) {
			client_error_set(&out->error, "",
					 "args_json is not JSON a fingerprint can take");
			return rc;
		}
	}
	/* A malformed traceparent is no reason to refuse a call: it starts a new trace. */
	client_trace_parse(&parent, call->traceparent, call->tracestate);
	if (ledger_trace_enabled()) {
		ledger_buf_puts(&name, "execute_tool");
		if (call->tool != NULL) {
			ledger_buf_putc(&name, ' ');
			ledger_buf_puts(&name, call->tool);
		}
		if (!name.oom)
			span = ledger_span_start(name.data, LEDGER_SPAN_INTERNAL, &parent, 0);
		ledger_buf_free(&name);
	}
	span_begin(span, call, attempt_id);
	/* Tracing off: the caller's own context goes on to ledgerd unchanged. */
	ledger_span_context(span, &parent, &trace);
	if (trace.valid)
		ledger_trace_ctx_format(&trace, out->traceparent);
	rc = claim_and_run(c, call, attempt_id, sha, &trace, tool_fn, ctx, out, &fencing_token);
	span_finish(span, rc, out, fencing_token);
	return rc;
}

enum ledger_client_err ledger_client_stable_call_id(unsigned k, char *out, size_t size)
{
	int n;

	if (out == NULL || size == 0)
		return LEDGER_CLIENT_ERR_INVALID;
	n = snprintf(out, size, "call_%02u", k);
	if (n < 0 || (size_t)n >= size) {
		out[0] = '\0';
		return LEDGER_CLIENT_ERR_INVALID;
	}
	return LEDGER_CLIENT_OK;
}

/* Parses @p json as ledgerd parses arguments, into @p doc. */
static enum ledger_client_err parse_for_jcs(const char *json, size_t len,
					    struct ledger_json_doc **doc)
{
	enum ledger_err e;

	if (json == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	e = ledger_json_parse(json, len, MAX_DEPTH, doc, NULL);
	if (e == LEDGER_ERR_NOMEM)
		return LEDGER_CLIENT_ERR_NOMEM;
	return e == LEDGER_OK ? LEDGER_CLIENT_OK : LEDGER_CLIENT_ERR_INVALID;
}

static enum ledger_client_err from_ledger_err(enum ledger_err e)
{
	switch (e) {
	case LEDGER_OK:
		return LEDGER_CLIENT_OK;
	case LEDGER_ERR_NOMEM:
		return LEDGER_CLIENT_ERR_NOMEM;
	default:
		return LEDGER_CLIENT_ERR_INVALID;
	}
}

enum ledger_client_err ledger_client_canonicalize(const char *json, size_t len, char **out,
						  size_t *out_len)
{
	struct ledger_json_doc *doc = NULL;
	struct ledger_buf b = LEDGER_BUF_INIT;
	enum ledger_client_err rc;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	*out = NULL;
	rc = parse_for_jcs(json, len, &doc);
	if (rc == LEDGER_CLIENT_OK)
		rc = from_ledger_err(ledger_jcs_canonicalize(ledger_json_root(doc), &b));
	if (rc == LEDGER_CLIENT_OK) {
		*out = ledger_buf_steal(&b, out_len);
		if (*out == NULL)
			rc = LEDGER_CLIENT_ERR_NOMEM;
	}
	ledger_buf_free(&b);
	ledger_json_free(doc);
	return rc;
}

enum ledger_client_err ledger_client_args_sha256(const char *json, size_t len, char hex_out[65])
{
	struct ledger_json_doc *doc = NULL;
	enum ledger_client_err rc;

	if (hex_out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	hex_out[0] = '\0';
	rc = parse_for_jcs(json, len, &doc);
	if (rc == LEDGER_CLIENT_OK)
		rc = from_ledger_err(ledger_jcs_fingerprint(ledger_json_root(doc), hex_out));
	ledger_json_free(doc);
	return rc;
}
