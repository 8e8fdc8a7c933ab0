/*
 * api/service/tracing.c: the spans of a call to ledgerd. The SERVER span
 * follows OpenTelemetry's stable HTTP server conventions ("{METHOD}
 * {http.route}", http.*, url.*, error.type, ERROR only for 5xx) and adds
 * the ledger's own ledger.* attributes; each store transaction the call
 * waited on is a CLIENT span under it (the database conventions), made
 * after the fact from the times the store recorded on the job, so that
 * ledger/store/ knows nothing of spans. Probes and the page get no span.
 */
#include "api/service/tracing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/service/routes.h"
#include "api/wire/conn.h"
#include "api/wire/trace.h"
#include "ledger/common/trace.h"

/* The store's operations as db.operation.name says them, by enum ledger_store_op_kind. */
static const char *const op_names[] = {
	[LEDGER_STORE_NONE] = NULL,
	[LEDGER_STORE_TOKEN_LOOKUP] = "token_lookup",
	[LEDGER_STORE_SCHEMA_VERSION] = "schema_version",
	[LEDGER_STORE_CLAIM] = "claim",
	[LEDGER_STORE_COMPLETE] = "complete",
	[LEDGER_STORE_RENEW] = "renew",
	[LEDGER_STORE_RELEASE] = "release",
	[LEDGER_STORE_RESOLVE] = "resolve",
	[LEDGER_STORE_GET_CALL] = "get_call",
	[LEDGER_STORE_LIST_CALLS] = "list_calls",
	[LEDGER_STORE_ATTEMPT_CREATE] = "attempt_create",
	[LEDGER_STORE_ATTEMPT_CALL] = "attempt_call",
	[LEDGER_STORE_FAILOVER] = "failover",
	[LEDGER_STORE_REQUEST_VIEW] = "request_view",
	[LEDGER_STORE_LIST_REQUESTS] = "list_requests",
	[LEDGER_STORE_ANSWER_GET] = "answer_get",
	[LEDGER_STORE_CLIENT_EVENT] = "client_event",
};

/*
 * Paths that get no span: the probes (/healthz, /readyz, /metrics), asked
 * every few seconds by machines, and the page's files (/ui), which a
 * browser loads: noise that would crowd the calls out of a trace store.
 */
static bool untraced(const char *target)
{
	size_t n = strcspn(target, "?");

	return (n == 8 && strncmp(target, "/healthz", 8) == 0) ||
	       (n == 7 && strncmp(target, "/readyz", 7) == 0) ||
	       (n == 8 && strncmp(target, "/metrics", 8) == 0) ||
	       (n == 3 && strncmp(target, "/ui", 3) == 0) || strncmp(target, "/ui/", 4) == 0;
}

void api_tracing_begin(struct api_request *req, bool https)
{
	const struct wire_http_head *head = req->head;
	struct ledger_trace_ctx parent, own;
	const char *method, *ua, *host;
	char peer[64];

	/* Off: not even the traceparent is read. */
	if (!ledger_trace_enabled() || untraced(head->target))
		return;
	wire_trace_parent(head, &parent);
	method = req->trace.method = wire_trace_method(head->method);
	req->trace.span = ledger_span_start(method != NULL ? method : "HTTP", LEDGER_SPAN_SERVER,
					    &parent, 0);
	if (req->trace.span == NULL)
		return;
	ledger_span_context(req->trace.span, &parent, &own);
	if (parent.valid && parent.tracestate[0] != '\0')
		req->trace.tracestate = strdup(parent.tracestate); /* NULL: the children go without */
	ledger_trace_hex(own.trace_id, sizeof(own.trace_id), req->trace.trace_id);
	ledger_trace_hex(own.span_id, sizeof(own.span_id), req->trace.span_id);
	req->job.ids.trace_id = req->trace.trace_id;
	req->job.ids.span_id = req->trace.span_id;
	req->job.timed = true;
	if (!ledger_span_recording(req->trace.span))
		return;
	ledger_span_set_str(req->trace.span, "http.request.method",
			    method != NULL ? method : "_OTHER");
	if (method == NULL)
		ledger_span_set_str(req->trace.span, "http.request.method_original",
				    head->method);
	ledger_span_set_strn(req->trace.span, "url.path", head->target,
			     strcspn(head->target, "?"));
	ledger_span_set_str(req->trace.span, "url.scheme", https ? "https" : "http");
	ledger_span_set_str(req->trace.span, "network.protocol.version",
			    head->minor == 0 ? "1.0" : "1.1");
	host = wire_http_field(head, "Host");
	if (host != NULL)
		wire_trace_server(req->trace.span, host, strlen(host), https ? 443 : 80);
	if (wire_conn_peer(req->conn, peer, sizeof(peer)))
		ledger_span_set_str(req->trace.span, "client.address", peer);
	ua = wire_http_field(head, "User-Agent");
	if (ua != NULL)
		ledger_span_set_str(req->trace.span, "user_agent.original", ua);
}

static const char *db_error_name(enum ledger_err rc)
{
	switch (rc) {
	case LEDGER_OK:
		return NULL;
	case LEDGER_ERR_UNAVAILABLE:
		return "unavailable";
	case LEDGER_ERR_CONFLICT:
		return "conflict";
	case LEDGER_ERR_NOMEM:
		return "out_of_memory";
	case LEDGER_ERR_INVALID:
		return "invalid";
	case LEDGER_ERR_LIMIT:
		return "limit";
	case LEDGER_ERR_INTERNAL:
		break;
	}
	return "internal";
}

void api_tracing_stored(struct api_request *req)
{
	struct ledger_job *job = &req->job;
	struct ledger_span *span = req->trace.span;
	enum ledger_store_op_kind kind = job->op.kind;
	const char *name = (size_t)kind < sizeof(op_names) / sizeof(op_names[0])
				   ? op_names[kind]
				   : NULL;
	struct ledger_trace_ctx self;
	struct ledger_span *db = NULL;
	const char *error;

	if (!ledger_span_recording(span) || job->tx_began_ns == 0 || name == NULL)
		goto out;
	if (kind != LEDGER_STORE_TOKEN_LOOKUP) {
		ledger_span_set_bool(span, "ledger.batched", job->tx_batch > 1);
		ledger_span_set_int(span, "ledger.batch_size", job->tx_batch);
	}
	/* A child carries the trace's tracestate, as its parent does. */
	ledger_span_context(span, NULL, &self);
	if (req->trace.tracestate != NULL)
		snprintf(self.tracestate, sizeof(self.tracestate), "%s", req->trace.tracestate);
	db = ledger_span_start(name, LEDGER_SPAN_CLIENT, &self, job->tx_began_ns);
	ledger_span_set_str(db, "db.system.name", "postgresql");
	ledger_span_set_str(db, "db.operation.name", name);
	if (job->tx_batch > 1)
		ledger_span_set_int(db, "db.operation.batch.size", job->tx_batch);
	error = db_error_name(job->res.rc);
	if (error != NULL) {
		ledger_span_set_str(db, "error.type", error);
		ledger_span_set_status(db, LEDGER_SPAN_STATUS_ERROR, error);
	}
	ledger_span_end(db, job->tx_ended_ns > job->tx_began_ns ? job->tx_ended_ns
								 : job->tx_began_ns);
out:
	/* Consumed: the call's next job must not find this one's times. */
	job->tx_began_ns = job->tx_ended_ns = 0;
	job->tx_batch = 0;
}

/*
 * "{METHOD} {http.route}", or "{METHOD}" unrouted; "HTTP" stands for an
 * unknown method. Not from the head: at the call's end it may be gone.
 */
static void name_span(const struct api_request *req, struct ledger_span *span)
{
	const char *method = req->trace.method;
	char name[160];

	if (req->route == NULL)
		return; /* named for its method as it started */
	snprintf(name, sizeof(name), "%s %s", method != NULL ? method : "HTTP",
		 req->route->pattern);
	ledger_span_set_name(span, name);
	ledger_span_set_str(span, "http.route", req->route->pattern);
}

void api_tracing_end(struct api_request *req)
{
	struct ledger_span *span = req->trace.span;
	const struct api_reply *r = &req->reply;
	char status[16];

	if (span == NULL)
		return;
	req->trace.span = NULL;
	free(req->trace.tracestate);
	req->trace.tracestate = NULL;
	if (!ledger_span_recording(span))
		goto end;
	name_span(req, span);
	ledger_span_set_int(span, "http.response.status_code", r->status);
	if (req->route != NULL) {
		const struct ledger_log_ids *ids = &req->job.ids;

		if (ids->request_id != NULL)
			ledger_span_set_str(span, "ledger.request_id", ids->request_id);
		if (ids->tool_call_id != NULL)
			ledger_span_set_str(span, "ledger.tool_call_id", ids->tool_call_id);
		if (ids->attempt_id != NULL)
			ledger_span_set_str(span, "ledger.attempt_id", ids->attempt_id);
	}
	if (r->status >= 200 && r->status < 300 && r->outcome != NULL)
		ledger_span_set_str(span, "ledger.outcome", r->outcome);
	if (r->replayed || req->job.op.kind == LEDGER_STORE_CLAIM)
		ledger_span_set_bool(span, "ledger.replayed", r->replayed);
	if (r->status >= 200 && r->status < 300 && r->fencing_token > 0)
		ledger_span_set_int(span, "ledger.fencing_token", r->fencing_token);
	/* A refusal is named by the API's code; a 5xx without one by its status. */
	if (r->error_code[0] != '\0') {
		ledger_span_set_str(span, "error.type", r->error_code);
	} else if (r->status >= 500) {
		snprintf(status, sizeof(status), "%u", r->status);
		ledger_span_set_str(span, "error.type", status);
	}
	if (r->status >= 500)
		ledger_span_set_status(span, LEDGER_SPAN_STATUS_ERROR,
				       r->error_code[0] != '\0' ? r->error_code : NULL);
end:
	ledger_span_end(span, 0);
}

void api_tracing_abandon(struct api_request *req, bool replied)
{
	struct ledger_span *span = req->trace.span;

	free(req->trace.tracestate);
	req->trace.tracestate = NULL;
	if (span == NULL)
		return;
	req->trace.span = NULL;
	if (!ledger_span_recording(span)) {
		ledger_span_end(span, 0);
		return;
	}
	name_span(req, span);
	if (replied) {
		/* The wire refused the body (its framing, its deadline): a 4xx of its own. */
		ledger_span_set_str(span, "error.type", "wire_refusal");
	} else {
		/* No status was sent: an error, whoever closed the connection. */
		ledger_span_set_str(span, "error.type", "connection_closed");
		ledger_span_set_status(span, LEDGER_SPAN_STATUS_ERROR,
				       "the connection closed before the reply");
	}
	ledger_span_end(span, 0);
}
