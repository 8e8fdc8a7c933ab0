/*
 * sdk/c/router.c: the router side of the C client. An attempt handle
 * carries one inference attempt through its life:
 *
 *   begin ──> [heartbeat renews] ──> deliver (first delta, then progress) ──> finish
 *     │                       └──> cancel ──> cancel-ack
 *     └ on an upstream failure: failover ──> the decision (and its next attempt)
 *
 * Once ledgerd says the attempt has no rights (attempt_fenced), a tool call
 * under it diverged, or a failover decision revoked it, the handle is
 * revoked for good and refuses to deliver, renew or finish without asking.
 * Every call on a handle carries the trace context it was given (its spec's,
 * ledger_client_attempt_set_trace()'s, or its source's after a failover);
 * the router writes the attempt's spans, the library none.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/base64.h"
#include "ledger/common/jsonw.h"
#include "sdk/c/client_int.h"

#define MIN_HEARTBEAT_MS 20u

struct ledger_attempt {
	struct ledger_client *c;
	char *request_id;
	char *attempt_id;
	uint64_t epoch;
	uint32_t lease_ms;             /* as granted by begin */
	char *settled;                 /* the begin answer's settled_tool_calls, or NULL */
	atomic_bool revoked;           /* lost its rights; never cleared */
	atomic_uint client_events;     /* client events recorded: the next one's n */
	struct client_ticker beat;     /* the heartbeat, when started */
	pthread_mutex_t trace_lock;    /* guards trace: set while the heartbeat reads it */
	struct ledger_trace_ctx trace; /* what its calls carry; not valid: nothing */
};

const char *ledger_client_attempt_id(const struct ledger_attempt *a)
{
	return a != NULL ? a->attempt_id : NULL;
}

const char *ledger_client_attempt_request_id(const struct ledger_attempt *a)
{
	return a != NULL ? a->request_id : NULL;
}

uint64_t ledger_client_attempt_epoch(const struct ledger_attempt *a)
{
	return a != NULL ? a->epoch : 0;
}

uint32_t ledger_client_attempt_lease_ms(const struct ledger_attempt *a)
{
	return a != NULL ? a->lease_ms : 0;
}

bool ledger_client_attempt_revoked(const struct ledger_attempt *a)
{
	return a != NULL && atomic_load(&a->revoked);
}

void client_attempt_revoke(struct ledger_attempt *a)
{
	atomic_store(&a->revoked, true);
}

const char *ledger_client_attempt_settled(const struct ledger_attempt *a)
{
	return a != NULL ? a->settled : NULL;
}

void ledger_client_attempt_free(struct ledger_attempt *a)
{
	if (a == NULL)
		return;
	client_ticker_stop(&a->beat);
	pthread_mutex_destroy(&a->trace_lock);
	free(a->request_id);
	free(a->attempt_id);
	free(a->settled);
	free(a);
}

/* A new handle of @p c on @p request_id (its copy NULL when out of memory); NULL: none. */
static struct ledger_attempt *attempt_new(struct ledger_client *c, const char *request_id)
{
	struct ledger_attempt *a = calloc(1, sizeof(*a));

	if (a == NULL)
		return NULL;
	a->c = c;
	atomic_init(&a->revoked, false);
	atomic_init(&a->client_events, 0);
	pthread_mutex_init(&a->trace_lock, NULL);
	a->request_id = strdup(request_id);
	return a;
}

/* A copy of @p a's trace context, for one call. */
static void trace_of(struct ledger_attempt *a, struct ledger_trace_ctx *out)
{
	pthread_mutex_lock(&a->trace_lock);
	*out = a->trace;
	pthread_mutex_unlock(&a->trace_lock);
}

static void trace_set(struct ledger_attempt *a, const struct ledger_trace_ctx *ctx)
{
	pthread_mutex_lock(&a->trace_lock);
	a->trace = *ctx;
	pthread_mutex_unlock(&a->trace_lock);
}

void ledger_client_attempt_set_trace(struct ledger_attempt *a, const char *traceparent,
				     const char *tracestate)
{
	struct ledger_trace_ctx ctx;

	if (a == NULL)
		return;
	client_trace_parse(&ctx, traceparent, tracestate);
	trace_set(a, &ctx);
}

enum ledger_client_err ledger_client_attempt_adopt(struct ledger_client *c, const char *request_id,
						   const char *attempt_id,
						   struct ledger_attempt **out)
{
	struct ledger_attempt *a = NULL;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	*out = NULL;
	if (c == NULL || !client_valid_id(request_id) || !client_valid_id(attempt_id))
		return LEDGER_CLIENT_ERR_INVALID;
	a = attempt_new(c, request_id);
	if (a == NULL)
		return LEDGER_CLIENT_ERR_NOMEM;
	a->attempt_id = strdup(attempt_id);
	if (a->request_id == NULL || a->attempt_id == NULL) {
		ledger_client_attempt_free(a);
		return LEDGER_CLIENT_ERR_NOMEM;
	}
	*out = a;
	return LEDGER_CLIENT_OK;
}

enum ledger_client_err client_attempt_from(struct ledger_client *c, const char *request_id,
					   const struct ledger_json_value *obj,
					   struct ledger_attempt **out,
					   struct ledger_client_error *err)
{
	struct ledger_attempt *a = NULL;
	uint64_t lease = 0;

	*out = NULL;
	a = attempt_new(c, request_id);
	if (a == NULL)
		return LEDGER_CLIENT_ERR_NOMEM;
	a->attempt_id = client_dup_string(obj, "attempt_id");
	if (a->request_id == NULL || a->attempt_id == NULL ||
	    !client_get_u64(obj, "epoch", &a->epoch) || !client_get_u64(obj, "lease_ms", &lease) ||
	    lease > UINT32_MAX) {
		ledger_client_attempt_free(a);
		client_error_set(err, "", "an attempt without its id, epoch or lease");
		return LEDGER_CLIENT_ERR_PROTOCOL;
	}
	a->lease_ms = (uint32_t)lease;
	*out = a;
	return LEDGER_CLIENT_OK;
}

static bool valid_spec(const struct ledger_attempt_spec *s)
{
	return s != NULL && client_valid_id(s->request_id) && client_valid_id(s->attempt_id) &&
	       (s->gateway == NULL || client_valid_id(s->gateway));
}

/* Writes @p key: @p json, a JSON text the caller vouches for, when it is set. */
static void write_raw(struct ledger_jsonw *w, const char *key, const char *json)
{
	if (json == NULL)
		return;
	ledger_jsonw_key(w, key);
	ledger_jsonw_raw(w, json, strlen(json));
}

static void write_str(struct ledger_jsonw *w, const char *key, const char *s)
{
	if (s == NULL)
		return;
	ledger_jsonw_key(w, key);
	ledger_jsonw_string(w, s);
}

/* The members of an attempt spec, as POST attempts and next_attempt take them. */
static void write_spec(struct ledger_jsonw *w, const struct ledger_attempt_spec *s, bool budget)
{
	ledger_jsonw_object_begin(w);
	ledger_jsonw_key(w, "attempt_id");
	ledger_jsonw_string(w, s->attempt_id);
	if (s->replica != NULL) {
		ledger_jsonw_key(w, "replica");
		ledger_jsonw_string(w, s->replica);
	}
	if (s->model_revision != NULL) {
		ledger_jsonw_key(w, "model_revision");
		ledger_jsonw_string(w, s->model_revision);
	}
	if (s->lease_ms != 0) {
		ledger_jsonw_key(w, "lease_ms");
		ledger_jsonw_int(w, s->lease_ms);
	}
	if (budget && s->max_attempts != 0) {
		ledger_jsonw_key(w, "max_attempts");
		ledger_jsonw_int(w, s->max_attempts);
	}
	write_str(w, "gateway", s->gateway);
	write_raw(w, "identity", s->identity);
	write_str(w, "input_sha256", s->input_sha256);
	ledger_jsonw_object_end(w);
}

enum ledger_client_err client_attempt_begin(struct ledger_client *c,
						   const struct ledger_attempt_spec *spec,
						   struct ledger_attempt **out,
						   struct ledger_client_error *err)
{
	struct ledger_buf path = LEDGER_BUF_INIT, body = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	struct client_answer ans;
	struct ledger_trace_ctx trace;
	enum ledger_client_err rc;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	*out = NULL;
	if (c == NULL || !valid_spec(spec)) {
		client_error_set(err, "",
				 "a client and valid request and attempt ids are required");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	client_path(&path, spec->request_id, "attempts", (const char *)NULL);
	ledger_jsonw_init(&w, &body);
	write_spec(&w, spec, true);
	client_trace_parse(&trace, spec->traceparent, spec->tracestate);
	rc = path.oom ? LEDGER_CLIENT_ERR_NOMEM
		      : client_call(c, path.data, &body, c->retry_ms, &trace, &ans, err);
	if (rc == LEDGER_CLIENT_OK) {
		rc = client_attempt_from(c, spec->request_id, ans.root, out, err);
		if (rc == LEDGER_CLIENT_OK) {
			(*out)->settled = client_dup_raw(ans.root, "settled_tool_calls");
			(*out)->trace = trace;
		}
		client_answer_clear(&ans);
	}
	ledger_buf_free(&path);
	ledger_buf_free(&body);
	return rc;
}

/* POSTs @p body to the attempt's @p verb; attempt_fenced revokes the handle. */
static enum ledger_client_err attempt_post(struct ledger_attempt *a, const char *verb,
					   const struct ledger_buf *body,
					   struct ledger_client_error *err)
{
	struct ledger_buf path = LEDGER_BUF_INIT;
	struct client_answer ans;
	struct ledger_client_error local = {0};
	struct ledger_trace_ctx trace;
	enum ledger_client_err rc;

	if (err == NULL)
		err = &local;
	trace_of(a, &trace);
	client_path(&path, a->request_id, "attempts", a->attempt_id, verb, (const char *)NULL);
	rc = path.oom || body->oom
		     ? LEDGER_CLIENT_ERR_NOMEM
		     : client_call(a->c, path.data, body, a->c->retry_ms, &trace, &ans, err);
	if (rc == LEDGER_CLIENT_OK)
		client_answer_clear(&ans);
	if (rc == LEDGER_CLIENT_ERR_REFUSED && strcmp(err->code, "attempt_fenced") == 0)
		client_attempt_revoke(a);
	ledger_buf_free(&path);
	ledger_client_error_clear(&local);
	return rc;
}

/* The answer a revoked handle gives without asking: it has no rights to use. */
static bool refuse_revoked(const struct ledger_attempt *a, struct ledger_client_error *err)
{
	if (!ledger_client_attempt_revoked(a))
		return false;
	client_error_set(err, "attempt_fenced", "the attempt was revoked; it has no rights");
	if (err != NULL)
		err->status = 409;
	return true;
}

enum ledger_client_err ledger_client_attempt_renew(struct ledger_attempt *a, uint32_t lease_ms,
						   struct ledger_client_error *err)
{
	struct ledger_buf body = LEDGER_BUF_INIT;
	enum ledger_client_err rc;

	if (a == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	if (refuse_revoked(a, err))
		return LEDGER_CLIENT_ERR_REFUSED;
	ledger_buf_printf(&body, "{\"lease_ms\":%u}", lease_ms != 0 ? lease_ms : a->lease_ms);
	rc = attempt_post(a, "renew", &body, err);
	ledger_buf_free(&body);
	return rc;
}

static bool heartbeat_tick(void *arg)
{
	struct ledger_attempt *a = arg;
	struct ledger_buf body = LEDGER_BUF_INIT;
	struct ledger_buf path = LEDGER_BUF_INIT;
	struct client_answer ans;
	struct ledger_client_error err = {0};
	struct ledger_trace_ctx trace;
	enum ledger_client_err rc = LEDGER_CLIENT_ERR_NOMEM;

	if (ledger_client_attempt_revoked(a))
		return false;
	trace_of(a, &trace);
	/* One try per tick: the next tick is the retry. */
	ledger_buf_printf(&body, "{\"lease_ms\":%u}", a->lease_ms);
	client_path(&path, a->request_id, "attempts", a->attempt_id, "renew", (const char *)NULL);
	if (!body.oom && !path.oom)
		rc = client_call(a->c, path.data, &body, 0, &trace, &ans, &err);
	if (rc == LEDGER_CLIENT_OK)
		client_answer_clear(&ans);
	if (rc == LEDGER_CLIENT_ERR_REFUSED && strcmp(err.code, "attempt_fenced") == 0)
		client_attempt_revoke(a);
	ledger_client_error_clear(&err);
	ledger_buf_free(&body);
	ledger_buf_free(&path);
	return !ledger_client_attempt_revoked(a);
}

enum ledger_client_err ledger_client_heartbeat_start(struct ledger_attempt *a, uint32_t interval_ms)
{
	if (a == NULL || a->beat.running)
		return LEDGER_CLIENT_ERR_INVALID;
	if (interval_ms == 0)
		interval_ms = a->lease_ms / 3;
	if (interval_ms < MIN_HEARTBEAT_MS)
		interval_ms = MIN_HEARTBEAT_MS;
	return client_ticker_start(&a->beat, interval_ms, heartbeat_tick, a)
		       ? LEDGER_CLIENT_OK
		       : LEDGER_CLIENT_ERR_INTERNAL;
}

void ledger_client_heartbeat_stop(struct ledger_attempt *a)
{
	if (a != NULL)
		client_ticker_stop(&a->beat);
}

enum ledger_client_err ledger_client_attempt_deliver(struct ledger_attempt *a,
						     uint64_t delivered_output_tokens,
						     struct ledger_client_error *err)
{
	struct ledger_buf body = LEDGER_BUF_INIT;
	enum ledger_client_err rc;

	if (a == NULL || delivered_output_tokens > LEDGER_CLIENT_MAX_INT)
		return LEDGER_CLIENT_ERR_INVALID;
	if (refuse_revoked(a, err))
		return LEDGER_CLIENT_ERR_REFUSED;
	ledger_buf_printf(&body, "{\"delivered_output_tokens\":%llu}",
			  (unsigned long long)delivered_output_tokens);
	rc = attempt_post(a, "deliver", &body, err);
	ledger_buf_free(&body);
	return rc;
}

enum ledger_client_err ledger_client_attempt_cancel(struct ledger_attempt *a, const char *reason,
						    struct ledger_client_error *err)
{
	struct ledger_buf body = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	enum ledger_client_err rc;

	if (a == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	ledger_jsonw_init(&w, &body);
	ledger_jsonw_object_begin(&w);
	if (reason != NULL) {
		ledger_jsonw_key(&w, "reason");
		ledger_jsonw_string(&w, reason);
	}
	ledger_jsonw_object_end(&w);
	/* Cancelling revokes: whatever ledgerd answers, this handle acts no more. */
	client_attempt_revoke(a);
	rc = attempt_post(a, "cancel", &body, err);
	ledger_buf_free(&body);
	return rc;
}

enum ledger_client_err ledger_client_attempt_cancel_ack(struct ledger_attempt *a,
							struct ledger_client_error *err)
{
	struct ledger_buf body = LEDGER_BUF_INIT;
	enum ledger_client_err rc;

	if (a == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	client_attempt_revoke(a);
	ledger_buf_puts(&body, "{}");
	rc = attempt_post(a, "cancel-ack", &body, err);
	ledger_buf_free(&body);
	return rc;
}

/* The members of a kept answer: its bytes in base64, or their count and hash. */
static void write_answer(struct ledger_jsonw *w, const char *key,
			 const struct ledger_kept_answer *a)
{
	char *b64 = NULL;

	if (a == NULL)
		return;
	ledger_jsonw_key(w, key);
	ledger_jsonw_object_begin(w);
	ledger_jsonw_key(w, "status");
	ledger_jsonw_int(w, a->status);
	write_str(w, "content_type", a->content_type != NULL ? a->content_type : "");
	if (a->body != NULL) {
		/* RFC 4648 base64, with padding: how a kept answer's bytes travel. */
		size_t cap = ledger_base64_len(a->len) + 1;

		b64 = malloc(cap);
		if (b64 == NULL) {
			w->out->oom = true;
			return;
		}
		ledger_base64_encode(a->body, a->len, b64, cap);
		ledger_jsonw_key(w, "body_b64");
		ledger_jsonw_string_n(w, b64, cap - 1);
	} else {
		ledger_jsonw_key(w, "kept");
		ledger_jsonw_bool(w, false);
		ledger_jsonw_key(w, "bytes");
		ledger_jsonw_int(w, (int64_t)a->len);
		write_str(w, "sha256", a->sha256);
	}
	ledger_jsonw_object_end(w);
	free(b64);
}

enum ledger_client_err client_attempt_end(struct ledger_attempt *a, bool completed,
						 uint64_t delivered_output_tokens,
						 const struct ledger_finish_opts *opts,
						 struct ledger_client_error *err)
{
	const struct ledger_finish_opts none = {0};
	struct ledger_buf body = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	enum ledger_client_err rc;

	if (opts == NULL)
		opts = &none;
	if (a == NULL || delivered_output_tokens > LEDGER_CLIENT_MAX_INT ||
	    (completed && opts->client_error != NULL))
		return LEDGER_CLIENT_ERR_INVALID;
	if (refuse_revoked(a, err))
		return LEDGER_CLIENT_ERR_REFUSED;
	ledger_jsonw_init(&w, &body);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "outcome");
	ledger_jsonw_string(&w, completed ? "completed" : "failed");
	ledger_jsonw_key(&w, "delivered_output_tokens");
	ledger_jsonw_int(&w, (int64_t)delivered_output_tokens);
	write_str(&w, "reason", opts->reason);
	write_raw(&w, "client_error", opts->client_error);
	write_answer(&w, "answer", opts->answer);
	ledger_jsonw_object_end(&w);
	rc = attempt_post(a, "finish", &body, err);
	ledger_buf_free(&body);
	return rc;
}

enum ledger_client_err ledger_client_attempt_finish(struct ledger_attempt *a, bool completed,
						    uint64_t delivered_output_tokens,
						    const char *reason,
						    struct ledger_client_error *err)
{
	const struct ledger_finish_opts opts = {.reason = reason};

	return client_attempt_end(a, completed, delivered_output_tokens, &opts, err);
}

enum ledger_client_err ledger_client_attempt_client_event(struct ledger_attempt *a,
							  enum ledger_client_event event,
							  int64_t last_event_id, int64_t hold_ms,
							  struct ledger_client_error *err)
{
	static const char *const names[] = {
		[LEDGER_CLIENT_EVENT_DISCONNECTED] = "disconnected",
		[LEDGER_CLIENT_EVENT_RESUMED] = "resumed",
		[LEDGER_CLIENT_EVENT_HOLD_ENDED] = "hold_ended",
	};
	struct ledger_buf body = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	enum ledger_client_err rc;

	if (a == NULL || (unsigned)event >= sizeof(names) / sizeof(names[0]))
		return LEDGER_CLIENT_ERR_INVALID;
	ledger_jsonw_init(&w, &body);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "event");
	ledger_jsonw_string(&w, names[event]);
	/* The same n on a re-sent call: ledgerd records the event once. */
	ledger_jsonw_key(&w, "n");
	ledger_jsonw_int(&w, (int64_t)atomic_fetch_add(&a->client_events, 1) + 1);
	if (event == LEDGER_CLIENT_EVENT_RESUMED && last_event_id >= 0) {
		ledger_jsonw_key(&w, "last_event_id");
		ledger_jsonw_int(&w, last_event_id);
	}
	if (event == LEDGER_CLIENT_EVENT_DISCONNECTED && hold_ms >= 0) {
		ledger_jsonw_key(&w, "hold_ms");
		ledger_jsonw_int(&w, hold_ms);
	}
	ledger_jsonw_object_end(&w);
	rc = attempt_post(a, "client", &body, err);
	ledger_buf_free(&body);
	return rc;
}

const char *ledger_client_signal_name(enum ledger_signal s)
{
	switch (s) {
	case LEDGER_SIGNAL_REPLICA_EXITED:
		return "replica_exited";
	case LEDGER_SIGNAL_POD_LOST:
		return "pod_lost";
	case LEDGER_SIGNAL_UPSTREAM_CLOSED:
		return "upstream_closed";
	case LEDGER_SIGNAL_NETWORK_ERROR:
		return "network_error";
	case LEDGER_SIGNAL_HEARTBEAT_TIMEOUT:
		return "heartbeat_timeout";
	case LEDGER_SIGNAL_OVERLOADED:
		return "overloaded";
	case LEDGER_SIGNAL_CLIENT_DISCONNECTED:
		return "client_disconnected";
	}
	return "unknown";
}

/* The actions by their API names, in both directions. */
static const struct {
	const char *name;
	enum ledger_failover_action action;
} actions[] = {
	{"retry_prefill", LEDGER_FAILOVER_RETRY_PREFILL},
	{"wait_for_fence", LEDGER_FAILOVER_WAIT_FOR_FENCE},
	{"keep_waiting", LEDGER_FAILOVER_KEEP_WAITING},
	{"cancel_upstream", LEDGER_FAILOVER_CANCEL_UPSTREAM},
	{"terminate_stream", LEDGER_FAILOVER_TERMINATE_STREAM},
	{"reject", LEDGER_FAILOVER_REJECT},
};

const char *ledger_client_action_name(enum ledger_failover_action action)
{
	for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
		if (actions[i].action == action)
			return actions[i].name;
	return "unknown";
}

static bool action_of(const char *name, enum ledger_failover_action *out)
{
	for (size_t i = 0; name != NULL && i < sizeof(actions) / sizeof(actions[0]); i++) {
		if (strcmp(name, actions[i].name) == 0) {
			*out = actions[i].action;
			return true;
		}
	}
	return false;
}

void client_decision_clear(struct ledger_decision *d)
{
	if (d == NULL)
		return;
	free(d->client_error);
	free(d->sse_event);
	ledger_client_attempt_free(d->next);
	free(d->settled_tool_calls);
	free(d->body);
	memset(d, 0, sizeof(*d));
}

struct ledger_attempt *ledger_client_decision_take_next(struct ledger_decision *d)
{
	struct ledger_attempt *next = NULL;

	if (d != NULL) {
		next = d->next;
		d->next = NULL;
	}
	return next;
}

enum ledger_client_err client_decision_read(struct ledger_attempt *source,
					    const struct client_answer *ans,
					    struct ledger_decision *out,
					    struct ledger_client_error *err)
{
	const struct ledger_json_value *next = NULL;
	char *action = client_dup_string(ans->root, "action");
	enum ledger_client_err rc = LEDGER_CLIENT_ERR_PROTOCOL;

	if (!action_of(action, &out->action)) {
		client_error_set(err, "", "a decision with no known action");
		goto out;
	}
	rc = LEDGER_CLIENT_ERR_NOMEM;
	out->body = strndup(ans->body, ans->len);
	if (out->body == NULL)
		goto out;
	if (!client_get_u64(ans->root, "retry_after_ms", &out->retry_after_ms))
		out->retry_after_ms = 0;
	out->client_error = client_dup_raw(ans->root, "client_error");
	if (out->client_error != NULL && strcmp(out->client_error, "null") == 0) {
		free(out->client_error);
		out->client_error = NULL;
	}
	/* OpenAI-compatible clients raise an error event; [DONE] never follows it. */
	if (out->client_error != NULL &&
	    asprintf(&out->sse_event, "data: %s\n\n", out->client_error) < 0) {
		out->sse_event = NULL;
		goto out;
	}
	out->settled_tool_calls = client_dup_raw(ans->root, "settled_tool_calls");
	next = ledger_json_get(ans->root, "attempt");
	if (next != NULL && next->type == LEDGER_JSON_OBJECT) {
		rc = client_attempt_from(source->c, source->request_id, next, &out->next, err);
		if (rc != LEDGER_CLIENT_OK)
			goto out;
		trace_of(source, &out->next->trace); /* the same request, the same trace */
	}
	if (out->action != LEDGER_FAILOVER_KEEP_WAITING)
		client_attempt_revoke(source);
	rc = LEDGER_CLIENT_OK;
out:
	free(action);
	return rc;
}

enum ledger_client_err client_failover(struct ledger_attempt *source,
					      enum ledger_signal signal,
					      const struct ledger_failover_opts *opts,
					      struct ledger_decision *out,
					      struct ledger_client_error *err)
{
	struct ledger_buf path = LEDGER_BUF_INIT, body = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	struct client_answer ans;
	struct ledger_trace_ctx trace;
	const char *name = ledger_client_signal_name(signal);
	enum ledger_client_err rc = LEDGER_CLIENT_ERR_NOMEM;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	memset(out, 0, sizeof(*out));
	if (source == NULL || strcmp(name, "unknown") == 0 ||
	    (opts != NULL && opts->next != NULL &&
	     !client_valid_id(opts->next->attempt_id)) ||
	    (opts != NULL && opts->retry_prefill_tokens > LEDGER_CLIENT_MAX_INT)) {
		client_error_set(err, "",
				 "an attempt, a known signal and valid options are required");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	client_path(&path, source->request_id, "failover", (const char *)NULL);
	ledger_jsonw_init(&w, &body);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "attempt_id");
	ledger_jsonw_string(&w, source->attempt_id);
	ledger_jsonw_key(&w, "signal");
	ledger_jsonw_string(&w, name);
	if (opts != NULL && opts->has_retry_prefill_tokens) {
		ledger_jsonw_key(&w, "retry_prefill_tokens");
		ledger_jsonw_int(&w, (int64_t)opts->retry_prefill_tokens);
	}
	if (opts != NULL && opts->next != NULL) {
		ledger_jsonw_key(&w, "next_attempt");
		write_spec(&w, opts->next, false);
	}
	if (opts != NULL)
		write_answer(&w, "delivered_answer", opts->delivered_answer);
	ledger_jsonw_object_end(&w);
	if (path.oom || body.oom)
		goto out;
	trace_of(source, &trace);
	rc = client_call(source->c, path.data, &body, source->c->retry_ms, &trace, &ans, err);
	if (rc == LEDGER_CLIENT_OK) {
		rc = client_decision_read(source, &ans, out, err);
		client_answer_clear(&ans);
		if (rc != LEDGER_CLIENT_OK)
			client_decision_clear(out);
		else if (out->next != NULL && opts != NULL && opts->next != NULL &&
			 opts->next->traceparent != NULL) {
			/* A next attempt given a context of its own runs in it. */
			client_trace_parse(&trace, opts->next->traceparent,
					   opts->next->tracestate);
			if (trace.valid)
				out->next->trace = trace;
		}
	} else if (rc == LEDGER_CLIENT_ERR_REFUSED && err != NULL &&
		   (strcmp(err->code, "attempt_fenced") == 0 ||
		    strcmp(err->code, "request_closed") == 0)) {
		client_attempt_revoke(source);
	}
out:
	ledger_buf_free(&path);
	ledger_buf_free(&body);
	return rc;
}
