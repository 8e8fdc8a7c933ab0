/*
 * sdk/programs/ledger-mcp/intercept.c: a keyed tools/call, claimed in ledgerd before it
 * reaches the server. ledger_client_tool_call() owns the protocol (claim,
 * renew, wait, record); the "tool" it runs here is the transport's forward,
 * and what the server answered decides what is recorded:
 *
 *   result ─────────────────────────────> succeeded (isError: failed); over
 *                                           --max-result-bytes, as its digest
 *   JSON-RPC -32700/-32600/-32601/-32602 ─> released: the request was never run
 *   refused before delivery ─────────────> released
 *   any other error, death, broken stream > abandoned: the lease turns it unknown
 *
 * Traced, the forward carries the execute_tool span's context in _meta, so
 * the server's spans are its children.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"
#include "ledger/common/trace.h"
#include "sdk/programs/ledger-mcp/intercept.h"

/* One intercepted call while ledger_client_tool_call() runs it. */
struct run {
	struct mcp_proxy *p;
	const struct mcp_message *m;
	const struct mcp_origin *origin;
	const struct ledger_call *lc; /* what was claimed: its trace context */
	const struct mcp_tool_call *call;
	mcp_forward_fn fwd;
	void *fwd_ctx;
	bool forwarded;           /* fwd was called */
	struct mcp_forward f;     /* what it came to */
	struct mcp_message reply; /* f.response, read */
	struct mcp_response resp; /* what the reply says, when it is a response */
	bool server_ran;          /* the server answered a result: its answer is the client's */
};

static bool not_run_code(long code)
{
	return code == -32700 || code == -32600 || code == -32601 || code == -32602;
}

static enum ledger_tool_status forward_tool(void *ctx, const char *idempotency_key,
					    uint64_t fencing_token, char **result_json)
{
	struct run *r = ctx;
	struct mcp_send send = {r->origin->text, r->origin->len, NULL, NULL};
	struct ledger_buf rewritten = LEDGER_BUF_INIT;
	const char *tracestate = NULL;
	const char *traceparent = ledger_client_tool_traceparent(&tracestate);

	(void)idempotency_key, (void)fencing_token;
	*result_json = NULL;
	r->forwarded = true;
	/*
	 * Traced, the context is the execute_tool span's: the server gets it in
	 * _meta. Off (or no span could be made), the client's bytes stay as sent.
	 */
	if (ledger_trace_enabled() && traceparent != NULL &&
	    (r->lc->traceparent == NULL || strcmp(traceparent, r->lc->traceparent) != 0) &&
	    mcp_message_with_trace(r->m, r->origin->text, r->origin->len, traceparent, tracestate,
				   &rewritten) &&
	    !rewritten.oom) {
		send.text = rewritten.data;
		send.len = rewritten.len;
		send.traceparent = traceparent;
		send.tracestate = tracestate;
	}
	r->fwd(r->fwd_ctx, &send, &r->f);
	ledger_buf_free(&rewritten);
	if (r->f.sent == MCP_SENT_REFUSED)
		return LEDGER_TOOL_NOT_EXECUTED;
	if (r->f.sent != MCP_SENT_ANSWERED || r->f.response == NULL)
		return LEDGER_TOOL_UNKNOWN;
	if (mcp_message_parse(r->f.response, r->f.len, &r->reply) != LEDGER_OK ||
	    !mcp_message_response(&r->reply, &r->resp)) {
		snprintf(r->f.reason, sizeof(r->f.reason),
			 "the server answered something that is not a JSON-RPC response");
		return LEDGER_TOOL_UNKNOWN;
	}
	if (r->resp.result == NULL) {
		if (not_run_code(r->resp.error_code))
			return LEDGER_TOOL_NOT_EXECUTED;
		snprintf(r->f.reason, sizeof(r->f.reason),
			 "the server answered JSON-RPC error %ld, which does not say whether the "
			 "tool ran",
			 r->resp.error_code);
		return LEDGER_TOOL_UNKNOWN;
	}
	*result_json = strndup(r->resp.result, r->resp.result_len);
	r->server_ran = true;
	return r->resp.is_error ? LEDGER_TOOL_FAILED : LEDGER_TOOL_SUCCEEDED;
}

/* What the client is told to do about each error. */
static const char *action_of(const char *name)
{
	static const struct {
		const char *name, *action;
	} actions[] = {
		{"in_progress", "another holder is running this call: retry after retry_after_ms; "
				"once it completes, its result is returned"},
		{"outcome_unknown",
		 "a holder stopped mid-call, so the tool may or may not have run: check the tool's "
		 "own records, then settle the call with `ledgerctl resolve REQUEST_ID TOOL_CALL_ID "
		 "--as succeeded|failed|not_executed`; the next call gets that result"},
		{"args_mismatch", "this key was first claimed with other arguments or another "
				  "tool: the rerun diverged; do not retry it under this key"},
		{"attempt_fenced", "the inference attempt named by io.ledgerd/attempt_id has lost "
				   "its rights (a failover fenced it): stop; its replacement makes "
				   "the call"},
		{"result_expired", "the call completed long ago and its result was removed by "
				   "retention: it will not run again"},
		{"result_not_kept",
		 "the call completed, but its result was too large to keep, so it cannot be "
		 "given again: it will not run again; outcome, result_bytes and result_sha256 say "
		 "what was recorded"},
		{"ledger_unavailable",
		 "ledgerd could not be reached, so the server was not called: retry later"},
		{"key_required",
		 "this proxy runs with --require-key: name the call in params._meta "
		 "with io.ledgerd/request_id and io.ledgerd/tool_call_id"},
		{"invalid_key", "send both io.ledgerd/request_id and io.ledgerd/tool_call_id, each "
				"1..128 bytes of [A-Za-z0-9._~-]"},
		{"outcome_left_unknown",
		 "the server was lost mid-call and may have run it: the claim is kept and turns "
		 "outcome_unknown when its lease runs out; check the tool's own records and settle "
		 "it with `ledgerctl resolve REQUEST_ID TOOL_CALL_ID --as ...`"},
		{"server_unreachable",
		 "the server could not be reached, so nothing ran and the key was released: retry"},
		{"batch_with_tool_call", "send each tools/call as a message of its own"},
		{"invalid_arguments", "the arguments cannot be fingerprinted (a number beyond the "
				      "double range?): fix the call"},
	};

	for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
		if (strcmp(actions[i].name, name) == 0)
			return actions[i].action;
	return "ledgerd refused the claim: see ledgerd.code and ledgerd.message";
}

/* The details of one error, all optional but the name. */
struct failure {
	int code;            /* the JSON-RPC code */
	const char *name;    /* data.code */
	const char *message; /* the error's message */
	const struct mcp_tool_call *call;
	bool server_called;
	uint64_t retry_after_ms;
	const char *reason;       /* what the transport saw */
	const char *ledgerd_body; /* ledgerd's answer, {"error": {...}} */
	size_t ledgerd_len;
	const char *server_error; /* the server's JSON-RPC error object */
	size_t server_error_len;
	const struct ledger_outcome *not_kept; /* result_not_kept: what was recorded */
};

/* Writes @p action with the call's own ids where it says REQUEST_ID TOOL_CALL_ID. */
static void put_action(struct ledger_jsonw *w, const char *action, const struct mcp_tool_call *call)
{
	static const char slot[] = "REQUEST_ID TOOL_CALL_ID";
	const char *at = strstr(action, slot);
	struct ledger_buf b = LEDGER_BUF_INIT;

	if (at == NULL || call == NULL || call->keys != MCP_KEYS_OK) {
		ledger_jsonw_string(w, action);
		return;
	}
	ledger_buf_append(&b, action, (size_t)(at - action));
	ledger_buf_printf(&b, "%s %s%s", call->request_id, call->tool_call_id, at + strlen(slot));
	ledger_jsonw_string_n(w, b.data != NULL ? b.data : "", b.len);
	w->out->oom |= b.oom;
	ledger_buf_free(&b);
}

static void put_error(struct ledger_buf *out, const struct ledger_json_value *id,
		      const struct failure *f)
{
	struct ledger_buf data = LEDGER_BUF_INIT, msg = LEDGER_BUF_INIT;
	struct ledger_json_doc *doc = NULL;
	const struct ledger_json_value *lerr = NULL;
	struct ledger_jsonw w;

	if (f->ledgerd_body != NULL &&
	    ledger_json_parse(f->ledgerd_body, f->ledgerd_len, 64, &doc, NULL) == LEDGER_OK)
		lerr = ledger_json_get(ledger_json_root(doc), "error");
	ledger_jsonw_init(&w, &data);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "code");
	ledger_jsonw_string(&w, f->name);
	if (f->call != NULL && f->call->keys == MCP_KEYS_OK) {
		struct ledger_buf key = LEDGER_BUF_INIT;

		ledger_buf_printf(&key, "%s:%s", f->call->request_id, f->call->tool_call_id);
		ledger_jsonw_key(&w, "idempotency_key");
		ledger_jsonw_string(&w, key.data);
		ledger_buf_free(&key);
		ledger_jsonw_key(&w, "request_id");
		ledger_jsonw_string(&w, f->call->request_id);
		ledger_jsonw_key(&w, "tool_call_id");
		ledger_jsonw_string(&w, f->call->tool_call_id);
		if (f->call->attempt_id != NULL) {
			ledger_jsonw_key(&w, "attempt_id");
			ledger_jsonw_string(&w, f->call->attempt_id);
		}
	}
	ledger_jsonw_key(&w, "server_called");
	ledger_jsonw_bool(&w, f->server_called);
	ledger_jsonw_key(&w, "action");
	put_action(&w, action_of(f->name), f->call);
	if (f->retry_after_ms != 0) {
		ledger_jsonw_key(&w, "retry_after_ms");
		ledger_jsonw_int(&w, (int64_t)f->retry_after_ms);
	}
	if (f->reason != NULL && f->reason[0] != '\0') {
		ledger_jsonw_key(&w, "reason");
		ledger_jsonw_string(&w, f->reason);
	}
	if (f->not_kept != NULL && f->not_kept->call != LEDGER_CALL_NONE) {
		ledger_jsonw_key(&w, "outcome");
		ledger_jsonw_string(&w, f->not_kept->call == LEDGER_CALL_SUCCEEDED ? "succeeded"
										   : "failed");
	}
	if (f->not_kept != NULL && f->not_kept->result_sha256[0] != '\0') {
		ledger_jsonw_key(&w, "result_bytes");
		ledger_jsonw_int(&w, (int64_t)f->not_kept->result_bytes);
		ledger_jsonw_key(&w, "result_sha256");
		ledger_jsonw_string(&w, f->not_kept->result_sha256);
	}
	if (f->not_kept != NULL && f->not_kept->completed_at != NULL) {
		ledger_jsonw_key(&w, "completed_at");
		ledger_jsonw_string(&w, f->not_kept->completed_at);
	}
	if (f->server_error != NULL) {
		ledger_jsonw_key(&w, "server_error");
		ledger_jsonw_raw(&w, f->server_error, f->server_error_len);
	}
	if (lerr != NULL) {
		ledger_jsonw_key(&w, "ledgerd");
		ledger_jsonw_raw(&w, lerr->raw, lerr->raw_len);
	}
	ledger_jsonw_object_end(&w);
	ledger_buf_printf(&msg, "ledger-mcp: %s", f->message);
	if (!data.oom && !msg.oom)
		mcp_message_error(out, id, f->code, msg.data, data.data);
	else
		out->oom = true;
	ledger_json_free(doc);
	ledger_buf_free(&data);
	ledger_buf_free(&msg);
}

/* The JSON-RPC code and message of a ledgerd refusal that stopped the call. */
static void refusal_of(enum ledger_outcome_kind kind, struct failure *f)
{
	switch (kind) {
	case LEDGER_OUTCOME_IN_PROGRESS:
		f->code = MCP_ERR_IN_PROGRESS, f->name = "in_progress";
		f->message = "another holder is still running this tool call";
		break;
	case LEDGER_OUTCOME_UNKNOWN:
		f->code = MCP_ERR_OUTCOME_UNKNOWN, f->name = "outcome_unknown";
		f->message = "the outcome of this tool call is unknown: a person must resolve it";
		break;
	case LEDGER_OUTCOME_ARGS_MISMATCH:
		f->code = MCP_ERR_ARGS_MISMATCH, f->name = "args_mismatch";
		f->message = "this key was claimed with other arguments";
		break;
	case LEDGER_OUTCOME_ATTEMPT_FENCED:
		f->code = MCP_ERR_ATTEMPT_FENCED, f->name = "attempt_fenced";
		f->message = "the inference attempt was fenced: it may not start a tool call";
		break;
	case LEDGER_OUTCOME_RESULT_EXPIRED:
		f->code = MCP_ERR_RESULT_EXPIRED, f->name = "result_expired";
		f->message = "this tool call was settled and its result has expired";
		break;
	case LEDGER_OUTCOME_RESULT_NOT_KEPT:
		f->code = MCP_ERR_RESULT_NOT_KEPT, f->name = "result_not_kept";
		f->message = "this tool call completed, and its result was too large to keep";
		break;
	default:
		f->code = MCP_ERR_REFUSED, f->name = NULL; /* ledgerd's own code */
		f->message = "ledgerd refused the tool call";
		break;
	}
}

/* The tool's hint, when the server is trusted and listed it. */
static bool hint_of(struct mcp_proxy *p, const char *name, struct mcp_tool_hint *out)
{
	bool found = false;

	memset(out, 0, sizeof(*out));
	if (!p->set->trust_annotations || name == NULL)
		return false;
	pthread_mutex_lock(&p->hints_lock);
	for (size_t i = 0; i < p->n_hints && !found; i++) {
		if (strcmp(p->hints[i].name, name) == 0) {
			out->read_only = p->hints[i].read_only;
			out->idempotent = p->hints[i].idempotent;
			found = true;
		}
	}
	pthread_mutex_unlock(&p->hints_lock);
	return found;
}

enum mcp_plan mcp_intercept_plan(struct mcp_proxy *p, const struct mcp_message *m,
				 struct ledger_buf *answer)
{
	struct mcp_tool_call call;
	struct mcp_tool_hint hint;
	struct failure f = {0};

	if (mcp_message_batch_has_tool_call(m)) {
		f.code = MCP_ERR_BATCH, f.name = "batch_with_tool_call";
		f.message = "a batch may not hold a tools/call: ledger-mcp claims each call alone";
		put_error(answer, NULL, &f);
		return MCP_PLAN_REFUSE;
	}
	if (!mcp_message_tool_call(m, &call))
		return MCP_PLAN_PASS;
	f.call = &call;
	switch (call.keys) {
	case MCP_KEYS_INVALID:
		f.code = MCP_ERR_INVALID_KEY, f.name = "invalid_key", f.message = call.why;
		put_error(answer, m->id, &f);
		return MCP_PLAN_REFUSE;
	case MCP_KEYS_NONE:
		if (!p->set->require_key)
			return MCP_PLAN_PASS;
		f.code = MCP_ERR_KEY_REQUIRED, f.name = "key_required";
		f.message = "this tools/call names no io.ledgerd/request_id and "
			    "io.ledgerd/tool_call_id in params._meta";
		put_error(answer, m->id, &f);
		return MCP_PLAN_REFUSE;
	case MCP_KEYS_OK:
		break;
	}
	if (hint_of(p, call.name, &hint) && hint.read_only)
		return MCP_PLAN_PASS; /* a trusted server says it changes nothing */
	return MCP_PLAN_CLAIM;
}

/* Fills @p out once ledger_client_tool_call() has said what happened. */
static void answer_of(const struct run *r, enum ledger_client_err rc,
		      const struct ledger_outcome *o, struct mcp_answer *out)
{
	const struct ledger_json_value *id = r->m->id;
	struct failure f = {.call = r->call, .server_called = r->forwarded};

	if (r->server_ran || (r->forwarded && r->f.sent == MCP_SENT_ANSWERED &&
			      r->resp.result == NULL && not_run_code(r->resp.error_code))) {
		/* The server's own answer, whatever became of its record. */
		out->source = MCP_FROM_SERVER;
		ledger_buf_append(&out->text, r->f.response, r->f.len);
		return;
	}
	out->source = MCP_FROM_PROXY;
	if (rc == LEDGER_CLIENT_OK && o->kind == LEDGER_OUTCOME_REPLAYED) {
		mcp_message_replay(&out->text, id, o->result, strlen(o->result),
				   o->call == LEDGER_CALL_FAILED);
		return;
	}
	if (r->forwarded && r->f.sent == MCP_SENT_REFUSED) {
		out->source = MCP_FROM_REFUSAL;
		f.code = MCP_ERR_SERVER_UNREACHABLE, f.name = "server_unreachable";
		f.message = "the server could not be reached: nothing ran";
		f.reason = r->f.reason;
		f.server_called = false;
	} else if (r->forwarded) {
		f.code = MCP_ERR_LEFT_UNKNOWN, f.name = "outcome_left_unknown";
		f.message = "the server was lost mid-call: whether the tool ran is unknown";
		f.reason = r->f.reason;
		f.server_error = r->resp.error;
		f.server_error_len = r->resp.error_len;
	} else if (rc == LEDGER_CLIENT_ERR_UNAVAILABLE) {
		f.code = MCP_ERR_LEDGER_UNAVAILABLE, f.name = "ledger_unavailable";
		f.message = "ledgerd could not be reached: the tool call was not started";
		f.reason = o->error.message;
	} else if (rc == LEDGER_CLIENT_ERR_INVALID) {
		f.code = -32602, f.name = "invalid_arguments";
		f.message = "the tool call's arguments cannot be fingerprinted";
	} else if (rc == LEDGER_CLIENT_OK || rc == LEDGER_CLIENT_ERR_REFUSED) {
		refusal_of(o->kind, &f);
		if (o->kind == LEDGER_OUTCOME_RESULT_NOT_KEPT)
			f.not_kept = o;
		if (f.name == NULL)
			f.name = o->error.code[0] != '\0' ? o->error.code : "refused";
		f.retry_after_ms = o->error.retry_after_ms;
		f.ledgerd_body = o->error.body;
		f.ledgerd_len = o->error.body_len;
	} else {
		f.code = -32603, f.name = "proxy_error";
		f.message = "ledger-mcp could not ask ledgerd";
		f.reason = o->error.message;
	}
	put_error(&out->text, id, &f);
}

enum ledger_err mcp_intercept_run(struct mcp_proxy *p, const struct mcp_message *m,
				  const struct mcp_origin *origin, mcp_forward_fn fwd, void *ctx,
				  struct mcp_answer *out)
{
	struct mcp_tool_call call;
	struct mcp_tool_hint hint;
	struct ledger_outcome o = {0};
	struct ledger_call lc = {0};
	struct run r = {.p = p,
			.m = m,
			.origin = origin,
			.lc = &lc,
			.call = &call,
			.fwd = fwd,
			.fwd_ctx = ctx};
	struct ledger_log_ids ids = {0};
	char trace_id[33], span_id[17];
	enum ledger_client_err rc;
	char *args = NULL;
	enum ledger_err e = LEDGER_ERR_NOMEM;

	if (!mcp_message_tool_call(m, &call) || call.keys != MCP_KEYS_OK) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "a message that is no keyed tools/call");
		abort(); /* mcp_intercept_plan() said CLAIM: a bug of the transport */
	}
	if (call.args != NULL && (args = strndup(call.args, call.args_len)) == NULL)
		goto out;
	lc.request_id = call.request_id;
	lc.tool_call_id = call.tool_call_id;
	lc.attempt_id = call.attempt_id;
	lc.tool = call.name;
	lc.args_json = args;
	lc.store_args = p->set->store_args;
	lc.owner = p->set->owner;
	lc.lease_ms = p->set->lease_ms;
	lc.wait_ms = p->set->wait_ms;
	lc.tool_dedupes = hint_of(p, call.name, &hint) && hint.idempotent;
	/* _meta's context first; the HTTP request's only when _meta has none. */
	if (call.traceparent != NULL) {
		lc.traceparent = call.traceparent;
		lc.tracestate = call.tracestate;
	} else {
		lc.traceparent = origin->traceparent;
		lc.tracestate = origin->tracestate;
	}
	rc = ledger_client_tool_call(p->client, &lc, forward_tool, &r, &o);
	answer_of(&r, rc, &o, out);
	ids.request_id = call.request_id;
	ids.tool_call_id = call.tool_call_id;
	ids.attempt_id = call.attempt_id;
	/* The call's trace: its execute_tool span's ids ("00-<trace>-<span>-<flags>"). */
	if (strlen(o.traceparent) == LEDGER_TRACEPARENT_LEN) {
		snprintf(trace_id, sizeof(trace_id), "%.32s", o.traceparent + 3);
		snprintf(span_id, sizeof(span_id), "%.16s", o.traceparent + 36);
		ids.trace_id = trace_id;
		ids.span_id = span_id;
	}
	if (r.server_ran && o.kind != LEDGER_OUTCOME_EXECUTED)
		LEDGER_LOG(LEDGER_LOG_ERROR, &ids, NULL,
			   "the tool ran but its result is not on record (%s: %s): a retry gets "
			   "outcome_unknown",
			   rc == LEDGER_CLIENT_OK ? ledger_client_outcome_name(o.kind)
						  : ledger_client_strerror(rc),
			   o.error.message);
	else if (o.kind == LEDGER_OUTCOME_EXECUTED && o.result_sha256[0] != '\0')
		LEDGER_LOG(LEDGER_LOG_INFO, &ids, NULL,
			   "tool call %s: executed; its result of %llu bytes kept as its digest",
			   call.name != NULL ? call.name : "(no name)",
			   (unsigned long long)o.result_bytes);
	else
		LEDGER_LOG(LEDGER_LOG_INFO, &ids, NULL, "tool call %s: %s",
			   call.name != NULL ? call.name : "(no name)",
			   rc == LEDGER_CLIENT_OK ? ledger_client_outcome_name(o.kind)
						  : ledger_client_strerror(rc));
	e = out->text.oom ? LEDGER_ERR_NOMEM : LEDGER_OK;
out:
	ledger_client_outcome_clear(&o);
	mcp_message_free(&r.reply);
	free(r.f.response);
	free(args);
	return e;
}

static void note_tool(void *ctx, const char *name, bool read_only, bool idempotent)
{
	struct mcp_proxy *p = ctx;
	struct mcp_tool_hint *h = NULL;

	for (size_t i = 0; i < p->n_hints && h == NULL; i++)
		if (strcmp(p->hints[i].name, name) == 0)
			h = &p->hints[i];
	if (h == NULL) {
		if (p->n_hints == p->cap_hints) {
			size_t cap = p->cap_hints != 0 ? 2 * p->cap_hints : 16;
			struct mcp_tool_hint *grown = realloc(p->hints, cap * sizeof(*grown));

			if (grown == NULL)
				return; /* no hint: the tool is claimed like any other */
			p->hints = grown;
			p->cap_hints = cap;
		}
		h = &p->hints[p->n_hints];
		if ((h->name = strdup(name)) == NULL)
			return;
		p->n_hints++;
	}
	h->read_only = read_only;
	h->idempotent = idempotent;
}

void mcp_intercept_note_tools(struct mcp_proxy *p, const struct mcp_message *m)
{
	if (!p->set->trust_annotations)
		return;
	pthread_mutex_lock(&p->hints_lock);
	(void)mcp_message_tools_each(m, note_tool, p);
	pthread_mutex_unlock(&p->hints_lock);
}

void mcp_intercept_free_hints(struct mcp_proxy *p)
{
	for (size_t i = 0; i < p->n_hints; i++)
		free(p->hints[i].name);
	free(p->hints);
	p->hints = NULL;
	p->n_hints = p->cap_hints = 0;
}
