/*
 * sdk/programs/ledger-gateway/trace.c: the spans of trace.h. The SERVER
 * span follows OpenTelemetry's stable HTTP server conventions ("{METHOD}
 * {http.route}", ERROR only for 5xx) and the GenAI conventions (v1.37.0)
 * for what a completion asks; an attempt is a GenAI inference CLIENT span
 * toward its engine. The ledger's own facts are ledger.* attributes, the
 * turning points (first_delta, failover, a client's leaving and coming
 * back) events. A request's span is touched by two threads (its request's
 * and its run's), so it sits behind a lock of its own.
 */
#include "sdk/programs/ledger-gateway/trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/wire/trace.h"
#include "sdk/programs/ledger-gateway/log.h"
#include "sdk/programs/ledger-gateway/replica.h"

struct gateway_trace {
	pthread_mutex_t lock;
	unsigned refs;
	struct ledger_span *span;     /* under lock; NULL once ended, or tracing off */
	struct ledger_trace_ctx ctx;  /* what it passes on: set at begin, then read-only */
	struct ledger_trace_ctx from; /* its client's context (for the tracestate) */
	char trace_id[33];            /* ctx's ids in hex, for the log lines */
	char span_id[17];
	char method[16]; /* the known method, or "" */
	unsigned status; /* the answer's status; 0: none written */
	char code[64];   /* a refusal's error code, or "" */
};

static __thread struct gateway_trace *current;

void gateway_trace_start(void)
{
	ledger_trace_init("ledger-gateway", LEDGER_VERSION);
}

void gateway_trace_stop(void)
{
	ledger_trace_shutdown();
}

/* Probes, asked every few seconds by machines: noise that would crowd requests out. */
static bool untraced(const char *target)
{
	size_t n = strcspn(target, "?");

	return (n == 8 && strncmp(target, "/healthz", 8) == 0) ||
	       (n == 7 && strncmp(target, "/readyz", 7) == 0) ||
	       (n == 8 && strncmp(target, "/metrics", 8) == 0);
}

struct gateway_trace *gateway_trace_begin(const struct wire_http_head *head, struct wire_conn *conn,
					  bool https)
{
	struct gateway_trace *t;
	struct ledger_trace_ctx parent;
	const char *method, *host, *ua;
	char peer[64];

	if (untraced(head->target))
		return NULL;
	wire_trace_parent(head, &parent);
	/* Off, a context still passes on to the engines and ledgerd, as it came. */
	if (!ledger_trace_enabled() && !parent.valid)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (t == NULL)
		return NULL;
	pthread_mutex_init(&t->lock, NULL);
	t->refs = 1;
	t->from = parent;
	method = wire_trace_method(head->method);
	snprintf(t->method, sizeof(t->method), "%s", method != NULL ? method : "");
	t->span =
		ledger_span_start(method != NULL ? method : "HTTP", LEDGER_SPAN_SERVER, &parent, 0);
	ledger_span_context(t->span, &parent, &t->ctx);
	if (t->ctx.valid) {
		ledger_trace_hex(t->ctx.trace_id, sizeof(t->ctx.trace_id), t->trace_id);
		ledger_trace_hex(t->ctx.span_id, sizeof(t->ctx.span_id), t->span_id);
	}
	if (!ledger_span_recording(t->span))
		return t;
	ledger_span_set_str(t->span, "http.request.method", method != NULL ? method : "_OTHER");
	if (method == NULL)
		ledger_span_set_str(t->span, "http.request.method_original", head->method);
	ledger_span_set_strn(t->span, "url.path", head->target, strcspn(head->target, "?"));
	ledger_span_set_str(t->span, "url.scheme", https ? "https" : "http");
	ledger_span_set_str(t->span, "network.protocol.name", "http");
	ledger_span_set_str(t->span, "network.protocol.version", head->minor == 0 ? "1.0" : "1.1");
	host = wire_http_field(head, "Host");
	if (host != NULL)
		wire_trace_server(t->span, host, strlen(host), https ? 443 : 80);
	if (wire_conn_peer(conn, peer, sizeof(peer)))
		ledger_span_set_str(t->span, "client.address", peer);
	ua = wire_http_field(head, "User-Agent");
	if (ua != NULL)
		ledger_span_set_str(t->span, "user_agent.original", ua);
	return t;
}

void gateway_trace_hold(struct gateway_trace *t)
{
	if (t == NULL)
		return;
	pthread_mutex_lock(&t->lock);
	t->refs++;
	pthread_mutex_unlock(&t->lock);
}

void gateway_trace_release(struct gateway_trace *t)
{
	bool last;

	if (t == NULL)
		return;
	pthread_mutex_lock(&t->lock);
	last = --t->refs == 0;
	pthread_mutex_unlock(&t->lock);
	if (!last)
		return;
	ledger_span_end(t->span, 0); /* ended already, unless its call never ended it */
	pthread_mutex_destroy(&t->lock);
	free(t);
}

void gateway_trace_end(struct gateway_trace *t, const struct gateway_trace_end *end)
{
	struct ledger_span *span;
	char name[96], status[16];

	if (t == NULL)
		return;
	pthread_mutex_lock(&t->lock);
	span = t->span;
	t->span = NULL;
	if (ledger_span_recording(span)) {
		if (end->route != NULL) {
			snprintf(name, sizeof(name), "%s %s",
				 t->method[0] != '\0' ? t->method : "HTTP", end->route);
			ledger_span_set_name(span, name);
			ledger_span_set_str(span, "http.route", end->route);
		}
		if (end->rid != NULL && end->rid[0] != '\0')
			ledger_span_set_str(span, "ledger.request_id", end->rid);
		if (end->chat) {
			ledger_span_set_bool(span, "ledger.keyed", end->keyed);
			ledger_span_set_str(span, "gen_ai.operation.name", "chat");
			if (end->model != NULL)
				ledger_span_set_str(span, "gen_ai.request.model", end->model);
		}
		if (t->status != 0)
			ledger_span_set_int(span, "http.response.status_code", t->status);
		/* A refusal is named by its GATEWAY.md code; a 5xx without one by its status. */
		if (t->code[0] != '\0') {
			ledger_span_set_str(span, "error.type", t->code);
		} else if (t->status >= 500) {
			snprintf(status, sizeof(status), "%u", t->status);
			ledger_span_set_str(span, "error.type", status);
		} else if (t->status == 0) {
			ledger_span_set_str(span, "error.type", "connection_closed");
		}
		if (t->status >= 500 || t->status == 0)
			ledger_span_set_status(span, LEDGER_SPAN_STATUS_ERROR,
					       t->code[0] != '\0' ? t->code : NULL);
	}
	pthread_mutex_unlock(&t->lock);
	ledger_span_end(span, 0);
	gateway_trace_release(t);
}

void gateway_trace_reply(struct gateway_trace *t, unsigned status, const char *code)
{
	if (t == NULL)
		return;
	pthread_mutex_lock(&t->lock);
	if (t->status == 0)
		t->status = status;
	if (code != NULL && t->code[0] == '\0')
		snprintf(t->code, sizeof(t->code), "%s", code);
	pthread_mutex_unlock(&t->lock);
}

void gateway_trace_outcome(struct gateway_trace *t, const char *outcome, int64_t attempts)
{
	if (t == NULL)
		return;
	pthread_mutex_lock(&t->lock);
	ledger_span_set_str(t->span, "ledger.outcome", outcome);
	if (attempts >= 0)
		ledger_span_set_int(t->span, "ledger.attempts", attempts);
	pthread_mutex_unlock(&t->lock);
}

void gateway_trace_repeat(struct gateway_trace *t, int row)
{
	if (t == NULL)
		return;
	pthread_mutex_lock(&t->lock);
	ledger_span_set_bool(t->span, "ledger.repeat", true);
	ledger_span_set_int(t->span, "ledger.repeat.row", row);
	pthread_mutex_unlock(&t->lock);
}

void gateway_trace_resumed(struct gateway_trace *t, int64_t last_event_id,
			   const struct ledger_trace_ctx *original)
{
	struct ledger_trace_attr attr = {
		"ledger.last_event_id", LEDGER_ATTR_INT, {.i = last_event_id}};
	char trace_id[33], span_id[17];

	if (t == NULL)
		return;
	pthread_mutex_lock(&t->lock);
	if (original->valid) {
		ledger_trace_hex(original->trace_id, sizeof(original->trace_id), trace_id);
		ledger_trace_hex(original->span_id, sizeof(original->span_id), span_id);
		ledger_span_set_str(t->span, "ledger.original.trace_id", trace_id);
		ledger_span_set_str(t->span, "ledger.original.span_id", span_id);
	}
	ledger_span_add_event(t->span, "resumed", 0, &attr, last_event_id >= 0 ? 1 : 0);
	pthread_mutex_unlock(&t->lock);
}

void gateway_trace_event(struct gateway_trace *t, const char *name,
			 const struct ledger_trace_attr *attrs, size_t n)
{
	if (t == NULL)
		return;
	pthread_mutex_lock(&t->lock);
	ledger_span_add_event(t->span, name, 0, attrs, n);
	pthread_mutex_unlock(&t->lock);
}

void gateway_trace_failover(struct gateway_trace *t, const char *signal, const char *action,
			    const char *aid, const char *next_aid)
{
	struct ledger_trace_attr attrs[] = {
		{"ledger.signal", LEDGER_ATTR_STR, {.s = signal}},
		{"ledger.action", LEDGER_ATTR_STR, {.s = action}},
		{"ledger.attempt_id", LEDGER_ATTR_STR, {.s = aid != NULL ? aid : ""}},
		{"ledger.next_attempt_id", LEDGER_ATTR_STR, {.s = next_aid}},
	};

	gateway_trace_event(t, "failover", attrs, next_aid != NULL ? 4 : 3);
}

void gateway_trace_context(const struct gateway_trace *t, struct ledger_trace_ctx *out)
{
	if (t == NULL)
		memset(out, 0, sizeof(*out));
	else
		*out = t->ctx;
}

void gateway_trace_enter(struct gateway_trace *t)
{
	current = t;
	if (t != NULL && t->ctx.valid)
		gateway_log_trace(t->trace_id, t->span_id);
	else
		gateway_log_trace(NULL, NULL);
}

void gateway_trace_leave(void)
{
	current = NULL;
	gateway_log_trace(NULL, NULL);
}

struct gateway_trace *gateway_trace_current(void)
{
	return current;
}

/* --- attempts --- */

/* The authority of an "http(s)://authority/..." URL, and the scheme's port. */
static const char *authority_of(const char *url, size_t *len, long *port)
{
	const char *at = strstr(url, "://");

	*port = strncmp(url, "https:", 6) == 0 ? 443 : 80;
	if (at == NULL)
		return NULL;
	at += 3;
	*len = strcspn(at, "/?#");
	return at;
}

struct ledger_span *gateway_trace_attempt_start(const struct ledger_trace_ctx *parent,
						struct gateway *gw, size_t k, const char *model,
						const char *aid)
{
	const struct replica *rep = &gw->replicas[k];
	struct ledger_span *s;
	const char *authority;
	char name[160];
	size_t len = 0;
	long port;

	snprintf(name, sizeof(name), "chat%s%s", model != NULL ? " " : "",
		 model != NULL ? model : "");
	s = ledger_span_start(name, LEDGER_SPAN_CLIENT, parent, 0);
	if (!ledger_span_recording(s))
		return s;
	ledger_span_set_str(s, "gen_ai.operation.name", "chat");
	ledger_span_set_str(s, "gen_ai.provider.name", gateway_replica_kind_name(gw, k));
	if (model != NULL)
		ledger_span_set_str(s, "gen_ai.request.model", model);
	ledger_span_set_str(s, "ledger.attempt_id", aid);
	ledger_span_set_str(s, "ledger.replica", rep->name);
	authority = authority_of(rep->url, &len, &port);
	if (authority != NULL)
		wire_trace_server(s, authority, len, port);
	return s;
}

void gateway_trace_attempt_wire(const struct ledger_span *s, const struct ledger_trace_ctx *parent,
				struct gateway_trace_wire *out)
{
	struct ledger_trace_ctx ctx;

	ledger_span_context(s, parent, &ctx);
	out->traceparent[0] = '\0';
	out->tracestate[0] = '\0';
	if (!ctx.valid)
		return;
	ledger_trace_ctx_format(&ctx, out->traceparent);
	snprintf(out->tracestate, sizeof(out->tracestate), "%s", ctx.tracestate);
}

void gateway_trace_attempt_begun(struct ledger_span *s, uint64_t epoch)
{
	if (epoch > 0)
		ledger_span_set_int(s, "ledger.epoch", (int64_t)epoch);
}

void gateway_trace_attempt_end(struct ledger_span *s, const char *outcome, const char *error)
{
	if (s == NULL)
		return;
	ledger_span_set_str(s, "ledger.attempt.outcome", outcome);
	if (error != NULL) {
		ledger_span_set_str(s, "error.type", error);
		ledger_span_set_status(s, LEDGER_SPAN_STATUS_ERROR, error);
	}
	ledger_span_end(s, 0);
}

void gateway_trace_attempt_discard(struct ledger_span *s)
{
	/* One that never stood for an attempt is not exported. */
	ledger_span_discard(s);
}

void gateway_trace_log_span(const struct ledger_span *s, const struct ledger_trace_ctx *parent)
{
	struct ledger_trace_ctx ctx;
	char trace_id[33], span_id[17];

	ledger_span_context(s, parent, &ctx);
	if (!ctx.valid) {
		gateway_log_trace(NULL, NULL);
		return;
	}
	ledger_trace_hex(ctx.trace_id, sizeof(ctx.trace_id), trace_id);
	ledger_trace_hex(ctx.span_id, sizeof(ctx.span_id), span_id);
	gateway_log_trace(trace_id, span_id);
}
