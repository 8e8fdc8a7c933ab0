/*
 * api/service/server.c: the driver of every call. api/wire/net.c reads a call's head
 * and hands it here; drive() walks it through its life, in the order the
 * API fixes: the path, then the token (from the head alone: nothing of
 * the body is read before the caller is known), then the body, parsed on
 * the polling thread when it is small and on an offload thread when it is
 * large, then the replay cache or the store's workers, with the call held
 * until a worker hands it back. A polling thread never waits on the
 * database.
 */
#include "api/service/server.h"

#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "api/service/input.h"
#include "api/service/metrics.h"
#include "api/wire/conn.h"
#include "api/wire/listen.h"
#include "api/wire/net.h"
#include "api/wire/offload.h"
#include "api/service/reply.h"
#include "api/service/routes.h"
#include "api/wire/tls.h"
#include "api/service/tokens.h"
#include "api/service/tracing.h"
#include "api/service/ui.h"
#include "ledger/common/base64.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"

/* Bodies up to this size are parsed on the polling thread: a few milliseconds at most. */
#define API_PARSE_INLINE_MAX (8 * 1024)

struct api_server {
	const struct api_config *cfg;       /* borrowed */
	const struct ledger_policy *policy; /* borrowed */
	struct ledger_store *store;         /* borrowed */
	struct wire_net *net;
	struct wire_net_ops ops; /* what net.c calls, with this server as its context */
	struct wire_offload *offload;
	struct wire_tls *tls; /* borrowed; NULL: plaintext */
	bool ops_apart;      /* --ops-listen is set: the API listener has no /metrics */
};

static int64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* --- replies --- */

/* The call's ids, as the route's pattern names its parameters. */
static struct ledger_log_ids ids_of(const struct api_request *req)
{
	struct ledger_log_ids ids = {NULL, NULL, NULL, NULL, NULL};
	const char *p = req->route != NULL ? req->route->pattern : "";
	unsigned n = 0;

	if (req->trace.trace_id[0] != '\0') {
		ids.trace_id = req->trace.trace_id;
		ids.span_id = req->trace.span_id;
	}

	while ((p = strchr(p, '{')) != NULL && n < API_MAX_PARAMS) {
		if (strncmp(p, "{rid}", 5) == 0)
			ids.request_id = req->params[n];
		else if (strncmp(p, "{cid}", 5) == 0)
			ids.tool_call_id = req->params[n];
		else if (strncmp(p, "{aid}", 5) == 0)
			ids.attempt_id = req->params[n];
		n++;
		p++;
	}
	return ids;
}

/*
 * One line per reply at debug; failures of ledgerd's own (5xx) at warn or
 * error whatever the level. Never a body: ids, status and time only.
 */
static void log_reply(const struct api_request *req)
{
	enum ledger_log_level level = req->reply.status >= 500 ? LEDGER_LOG_WARN : LEDGER_LOG_DEBUG;
	struct ledger_log_ids ids;
	char extra[96];

	if (req->reply.status == 500)
		level = LEDGER_LOG_ERROR;
	if (level < ledger_log_threshold)
		return;
	ids = req->route != NULL ? req->job.ids : ids_of(req);
	snprintf(extra, sizeof(extra), "\"status\":%u,\"ms\":%.3f", req->reply.status,
		 (double)(monotonic_ns() - req->started_ns) / 1e6);
	ledger_log_write(level, &ids, extra, "%s", req->route ? req->route->name : "unmatched");
}

static void send_reply(struct api_request *req)
{
	struct api_reply *r = &req->reply;
	char headers[1024];
	size_t len = 0, n;
	char *body = NULL;

	req->stage = API_STAGE_ANSWERED;
	if (r->body.oom) {
		ledger_buf_free(&r->body);
		api_reply_error(req, 500, "internal_error", "out of memory");
	}
	body = ledger_buf_steal(&r->body, &len);
	n = (size_t)snprintf(headers, sizeof(headers), "Content-Type: %s\r\n",
			     r->content_type != NULL ? r->content_type : "application/json");
	if (r->retry_after_ms > 0)
		n += (size_t)snprintf(headers + n, sizeof(headers) - n, "Retry-After: %lld\r\n",
				      (long long)((r->retry_after_ms + 999) / 1000));
	if (r->replayed)
		n += (size_t)snprintf(headers + n, sizeof(headers) - n,
				      "Idempotent-Replayed: true\r\n");
	if (r->allow != NULL)
		n += (size_t)snprintf(headers + n, sizeof(headers) - n, "Allow: %s\r\n", r->allow);
	if (r->headers != NULL)
		snprintf(headers + n, sizeof(headers) - n, "%s", r->headers);
	wire_conn_reply(req->conn, r->status, headers, body, len);
	api_metrics_http(req->route != NULL ? (size_t)(req->route - api_routes) : SIZE_MAX,
			 r->status, (double)(monotonic_ns() - req->started_ns) / 1e9);
	log_reply(req);
	api_tracing_end(req);
}

/* --- the life of a call --- */

static struct api_request *request_of(struct ledger_job *job)
{
	return (struct api_request *)(void *)((char *)job - offsetof(struct api_request, job));
}

/* On a worker: the call's operation was answered; its polling thread takes it on. */
static void job_done(struct ledger_job *job)
{
	/* The last touch: once woken, the polling thread may end the call. */
	wire_conn_wake(request_of(job)->conn);
}

/* Hands the call's operation to the store's workers; drive() goes on when it is back. */
static void queue(struct api_request *req, enum api_stage next)
{
	req->stage = next;
	req->job.done = job_done;
	wire_conn_hold(req->conn);
	ledger_store_submit(req->store, &req->job);
}

/* What the store said of the token. @return false after replying 401 or 503 */
static bool authenticate_from_store(struct api_request *req)
{
	const struct ledger_store_result *res = &req->job.res;
	bool ok = false;

	if (res->rc != LEDGER_OK) {
		if (res->rc == LEDGER_ERR_UNAVAILABLE)
			api_metrics_store_unreachable();
		api_reply_store_error(req, res->rc);
	} else if (!res->u.token.found) {
		api_metrics_token_lookup("unknown");
		api_tokens_unknown_put(req->token_sha256);
		api_reply_error(req, 401, "unauthorized", "the token is not valid");
	} else {
		snprintf(req->tenant, sizeof(req->tenant), "%s", res->u.token.tenant);
		req->role = res->u.token.role;
		req->authenticated = true;
		api_metrics_token_lookup("found");
		api_tokens_cache_put(req->token_sha256, req->tenant, req->role, res->began_ms);
		ok = true;
	}
	api_tracing_stored(req);
	ledger_store_result_clear(&req->job);
	return ok;
}

/* Replies what the store answered for the call's operation. */
static void answer(struct api_request *req)
{
	const struct api_handler *h = req->route->handler;
	enum ledger_err rc = req->job.res.rc;
	int64_t arrived_ms = req->started_ns / 1000000;

	/*
	 * Leases in the answer are the database's figures less the time since
	 * the call reached ledgerd (its head was in), not since a worker took
	 * it: the token lookup, the body, the parse and the queue all count,
	 * so no answer reports more lease than is left.
	 */
	if (req->job.res.began_ms > arrived_ms)
		req->job.res.began_ms = arrived_ms;

	if (rc == LEDGER_ERR_UNAVAILABLE)
		api_metrics_store_unreachable();
	if (rc != LEDGER_OK && !h->answers_errors)
		api_reply_store_error(req, rc);
	else
		h->answer(req, &req->job.res);
	api_tracing_stored(req);
	ledger_store_result_clear(&req->job);
	if (req->reply.status == 0) {
		LOG_ERROR("handler %s gave no reply", req->route->name);
		abort();
	}
}

/* Splits the query into the route's parameters. @return false after replying 400 */
static bool collect_query(struct api_request *req, const char *query)
{
	while (query != NULL && *query != '\0') {
		const char *amp = strchr(query, '&'), *eq;
		size_t plen = amp != NULL ? (size_t)(amp - query) : strlen(query);
		size_t klen = 0, vlen = 0, i;
		char *k = NULL, *v = NULL;

		if (plen == 0) {
			query++;
			continue;
		}
		eq = memchr(query, '=', plen);
		k = api_routes_percent_decode(query, eq != NULL ? (size_t)(eq - query) : plen,
					      &klen);
		if (k == NULL || strlen(k) != klen) {
			api_reply_invalid_field(req, "", "a query parameter name is malformed");
			goto fail;
		}
		for (i = 0; req->route->query[i] != NULL; i++) {
			if (strcmp(req->route->query[i], k) == 0)
				break;
		}
		if (req->route->query[i] == NULL) {
			/* Named back only when short, printable ASCII: a reply is valid UTF-8. */
			bool plain = klen <= 64;

			for (size_t j = 0; plain && j < klen; j++)
				plain = k[j] >= 0x20 && k[j] < 0x7f;
			api_reply_invalid_field(req, plain ? k : "", "unknown query parameter");
			goto fail;
		}
		if (eq != NULL)
			v = api_routes_percent_decode(eq + 1, plen - (size_t)(eq + 1 - query),
						      &vlen);
		if (v == NULL || strlen(v) != vlen) {
			api_reply_invalid_field(req, req->route->query[i], "is malformed");
			goto fail;
		}
		if (api_input_query(req, req->route->query[i]) != NULL ||
		    req->nquery == API_MAX_QUERY) {
			api_reply_invalid_field(req, req->route->query[i], "given twice");
			goto fail;
		}
		req->query_keys[req->nquery] = k;
		req->query_values[req->nquery] = v;
		req->nquery++;
		query += plen;
		continue;
	fail:
		free(k);
		free(v);
		return false;
	}
	return true;
}

/* Parses the body into the call's operation, wherever it runs. */
static void parse(struct api_request *req)
{
	req->job.op.kind = LEDGER_STORE_NONE;
	req->job.op.key.tenant = req->tenant;
	if (req->route->handler->parse(req) != LEDGER_OK || req->reply.status != 0)
		return;
	if (req->job.op.kind == LEDGER_STORE_NONE) {
		LOG_ERROR("handler %s neither replied nor named an operation", req->route->name);
		abort();
	}
}

static void drive(struct api_request *req);

static void parse_run(struct wire_offload_job *job)
{
	struct api_request *req =
		(struct api_request *)(void *)((char *)job -
					       offsetof(struct api_request, parse_job));

	ledger_log_context_set(&req->job.ids);
	parse(req);
	ledger_log_context_set(NULL);
}

static void parse_done(struct wire_offload_job *job)
{
	wire_conn_wake(((struct api_request *)(void *)((char *)job -
						      offsetof(struct api_request, parse_job)))
			      ->conn);
}

/*
 * The room a kept answer at --max-kept-answer-bytes needs in a body: its
 * base64, and 4 KiB for the answer's other members.
 */
static int64_t answer_room(const struct api_config *cfg)
{
	return (int64_t)ledger_base64_len((size_t)cfg->max_kept_answer_bytes) + 4096;
}

/*
 * The largest body @p req's route takes: --max-body, and on the routes
 * that take a kept answer (finish, failover) room for one at its bound.
 */
static int64_t body_limit(const struct api_request *req)
{
	int64_t limit = req->config->max_body_bytes;

	if (req->route != NULL && req->route->handler->takes_answer)
		limit += answer_room(req->config);
	return limit;
}

/*
 * The caller is known (or the route needs no token): the role, the query,
 * then the body's size from the head, then the body itself.
 */
static void authenticated(struct api_request *req)
{
	const struct api_route *route = req->route;
	const char *q = strchr(req->head->target, '?');

	if (route->roles != 0 && (route->roles & LEDGER_ROLE_BIT(req->role)) == 0) {
		api_reply_error(req, 403, "forbidden", "the role %s may not call %s %s",
				ledger_role_name(req->role), route->method, route->pattern);
		return;
	}
	if (q != NULL && !collect_query(req, q + 1))
		return;
	if (req->head->body == WIRE_HTTP_BODY_LENGTH &&
	    req->head->content_length > (uint64_t)body_limit(req)) {
		api_reply_error(req, 413, "body_too_large", "the body is larger than %lld bytes",
				(long long)body_limit(req));
		return;
	}
	req->stage = API_STAGE_BODY;
	wire_conn_read_body(req->conn, (size_t)body_limit(req));
}

/* The body is parsed: the replay cache, or the store. */
static void parsed(struct api_request *req)
{
	if (req->reply.status != 0)
		return;
	if (ledger_store_replay(&req->job)) {
		api_metrics_replay_cache_hit();
		answer(req);
		return;
	}
	queue(req, API_STAGE_STORING);
}

/*
 * The life of a call after its head, on its polling thread: again each
 * time a worker or an offload thread hands it back. A stage that waits
 * holds the call and returns; the call ends with a reply.
 */
static void drive(struct api_request *req)
{
	switch (req->stage) {
	case API_STAGE_HEAD:
		/* begin() decided from the head; nothing is left for here. */
		return;
	case API_STAGE_AUTHENTICATING:
		if (authenticate_from_store(req))
			authenticated(req);
		return;
	case API_STAGE_BODY:
		if (req->body.len > API_PARSE_INLINE_MAX) {
			req->stage = API_STAGE_PARSING;
			req->parse_job.run = parse_run;
			req->parse_job.done = parse_done;
			wire_conn_hold(req->conn);
			wire_offload_submit(req->server->offload, &req->parse_job);
			return;
		}
		parse(req);
		parsed(req);
		return;
	case API_STAGE_PARSING:
		parsed(req);
		return;
	case API_STAGE_STORING:
		answer(req);
		return;
	case API_STAGE_ANSWERED:
		return;
	}
}

/* Sends the reply once drive() made one. */
static void drive_and_reply(struct api_request *req)
{
	ledger_log_context_set(&req->job.ids);
	drive(req);
	ledger_log_context_set(NULL);
	/*
	 * Handed off, the call is its worker's or offload thread's until the
	 * wake: a parse there may be writing its refusal into req->reply right
	 * now, and the wake answers it. Answered here as well, the call would be
	 * freed under the thread and woken after.
	 */
	if (wire_conn_held(req->conn))
		return;
	if (req->reply.status != 0 && req->stage != API_STAGE_ANSWERED)
		send_reply(req);
}

/* --- what api/wire/net.c hands over --- */

/* Reads "Authorization: Bearer <token>" into the call's token hash. */
static void read_token(struct api_request *req)
{
	const char *h = wire_http_field(req->head, "Authorization");
	const char *t = NULL;

	if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
		return;
	t = h + 7;
	while (*t == ' ')
		t++;
	if (*t == '\0')
		return;
	api_tokens_hash(t, strlen(t), req->token_sha256);
	req->has_token = true;
}

/* Routes the call from its path, and decides what the head alone can. */
static void route(struct api_request *req)
{
	const char *allow = NULL, *bad = NULL, *target = req->head->target;
	size_t plen = strcspn(target, "?");
	char *path = strndup(target, plen);
	enum api_tokens_presence presence;
	enum api_match m;

	if (path == NULL) {
		api_reply_error(req, 500, "internal_error", "out of memory");
		return;
	}
	if (req->listener == API_LISTENER_API && req->config->ui && api_ui_answer(req, path)) {
		free(path);
		return;
	}
	m = api_routes_match(req->head->method, path, &req->route, req->params, &allow, &bad);
	free(path);
	/* On the ops listener only the routes without a token exist; /metrics only there. */
	if (m == API_MATCH_OK && ((req->listener == API_LISTENER_OPS && req->route->roles != 0) ||
				  (req->listener == API_LISTENER_API && req->server->ops_apart &&
				   req->route->ops_only))) {
		for (unsigned i = 0; i < API_MAX_PARAMS; i++) {
			free(req->params[i]);
			req->params[i] = NULL;
		}
		req->route = NULL;
		m = API_MATCH_NOT_FOUND;
	}
	switch (m) {
	case API_MATCH_OK:
		break;
	case API_MATCH_NOT_FOUND:
		api_reply_error(req, 404, "not_found", "no such path");
		return;
	case API_MATCH_METHOD_NOT_ALLOWED:
		api_reply_error(req, 405, "method_not_allowed", "this path takes %s", allow);
		req->reply.allow = allow;
		return;
	case API_MATCH_INVALID_ID: {
		struct ledger_jsonw w;
		api_reply_error_begin(req, &w, 400, "invalid_id",
				      "ids are 1 to 128 characters of [A-Za-z0-9._~-]");
		ledger_jsonw_key(&w, "field");
		ledger_jsonw_string(&w, bad);
		api_reply_error_end(req, &w);
		return;
	}
	}
	req->job.ids = ids_of(req);
	req->job.op.key.request_id = req->job.ids.request_id;
	req->job.op.key.tool_call_id = req->job.ids.tool_call_id;
	req->job.op.attempt_id = req->job.ids.attempt_id;
	if (req->route->roles == 0) {
		authenticated(req);
		return;
	}
	read_token(req);
	if (!req->has_token) {
		api_reply_error(req, 401, "unauthorized",
				"an Authorization: Bearer token is required");
		return;
	}
	if (api_tokens_cache_get(req->token_sha256, req->tenant, &req->role)) {
		req->authenticated = true;
		authenticated(req);
		return;
	}
	/*
	 * A hash the set of live tokens holds was a live token's at the set's
	 * read: a "no such token" the database said before then is out of date
	 * (a token stored after a client tried it), and one it said since costs
	 * a lookup at most.
	 */
	presence = api_tokens_known(req->token_sha256);
	if (presence != API_TOKENS_PRESENT && api_tokens_unknown(req->token_sha256)) {
		api_metrics_token_lookup("unknown_remembered");
		api_reply_error(req, 401, "unauthorized", "the token is not valid");
		return;
	}
	/*
	 * Not among the live tokens as of a fresh read: made up, unless minted
	 * since that read, which the allowance of lookups lets through unless a
	 * flood of made-up tokens spent it (api/service/tokens.h).
	 */
	if (presence == API_TOKENS_ABSENT && !api_tokens_absent_lookup()) {
		api_metrics_token_lookup("absent");
		api_reply_error(req, 401, "unauthorized", "the token is not valid");
		return;
	}
	req->job.op.kind = LEDGER_STORE_TOKEN_LOOKUP;
	req->job.op.in.token_sha256 = req->token_sha256;
	queue(req, API_STAGE_AUTHENTICATING);
}

static void *on_begin(void *ctx, struct wire_conn *conn, const struct wire_http_head *head,
		      unsigned listener)
{
	struct api_server *srv = ctx;
	struct api_request *req = calloc(1, sizeof(*req));

	if (req == NULL)
		return NULL;
	req->server = srv;
	req->config = srv->cfg;
	req->store = srv->store;
	req->net = srv->net;
	req->policy = srv->policy;
	req->conn = conn;
	req->head = head;
	req->listener = listener;
	req->started_ns = monotonic_ns();
	req->stage = API_STAGE_HEAD;
	api_tracing_begin(req, listener == API_LISTENER_API && srv->tls != NULL);
	ledger_log_context_set(&req->job.ids);
	route(req);
	ledger_log_context_set(NULL);
	if (req->reply.status != 0)
		send_reply(req);
	return req;
}

static void on_body(void *call, struct ledger_buf *body)
{
	struct api_request *req = call;

	if (body == NULL) {
		api_reply_error(req, 413, "body_too_large", "the body is larger than %lld bytes",
				(long long)body_limit(req));
		send_reply(req);
		return;
	}
	req->body = *body;
	memset(body, 0, sizeof(*body));
	drive_and_reply(req);
}

static void on_resume(void *call)
{
	drive_and_reply(call);
}

static void on_end(void *call, bool replied)
{
	struct api_request *req = call;

	api_tracing_abandon(req, replied); /* a span not ended by a reply of send_reply()'s */
	for (unsigned i = 0; i < API_MAX_PARAMS; i++)
		free(req->params[i]);
	for (unsigned i = 0; i < req->nquery; i++) {
		free(req->query_keys[i]);
		free(req->query_values[i]);
	}
	ledger_buf_free(&req->body);
	ledger_buf_free(&req->reply.body);
	ledger_json_free(req->doc);
	free(req->input);
	free(req);
}

/* --- running --- */

struct api_server *api_server_start(const struct api_config *cfg,
				    const struct ledger_policy *policy, struct ledger_store *store,
				    const struct api_server_sockets *sk)
{
	static const struct wire_net_ops ops = {
		.begin = on_begin, .body = on_body, .resume = on_resume, .end = on_end};
	struct api_server *srv = calloc(1, sizeof(*srv));
	struct wire_net_listener ls[2];
	struct wire_net_config ncfg = {
		.head_timeout_ms = cfg->head_timeout_ms,
		.body_timeout_ms = cfg->body_timeout_ms,
		.idle_timeout_ms = cfg->idle_timeout_ms,
		.write_timeout_ms = cfg->write_timeout_ms,
		.max_unread = (size_t)cfg->max_unread_output,
		.max_connections = wire_listen_room((unsigned)cfg->max_connections,
						   (unsigned)cfg->workers),
		.max_per_address = (unsigned)cfg->max_connections_per_address,
		/*
		 * A body still being sent when the answer is known (from the head,
		 * or once it is too large) is read and dropped up to this much, so
		 * that a client that writes its whole body before it reads (most
		 * scripts) gets the answer rather than a connection reset.
		 */
		.discard_max = (size_t)cfg->max_body_bytes + (size_t)8 * 1024 * 1024,
		.threads = (unsigned)cfg->http_threads,
	};
	unsigned nls = 0;
	char extra[700], who[400];

	if (srv == NULL)
		return NULL;
	srv->cfg = cfg;
	srv->policy = policy;
	srv->store = store;
	srv->tls = sk->tls;
	srv->ops_apart = sk->ops_fd >= 0;
	srv->ops = ops;
	srv->ops.ctx = srv;
	for (size_t i = 0; i < api_routes_count; i++)
		api_metrics_route_name(i, api_routes[i].name);
	if (ncfg.max_connections < (unsigned)cfg->max_connections)
		LOG_WARN("--max-connections %lld is more than the file limit allows: %u",
			 (long long)cfg->max_connections, ncfg.max_connections);
	ls[nls++] = (struct wire_net_listener){sk->api_fd, sk->tls,
					      strncmp(cfg->listen, "unix:", 5) != 0, 0};
	if (sk->ops_fd >= 0)
		ls[nls++] = (struct wire_net_listener){sk->ops_fd, NULL, false,
						      WIRE_OPS_MAX_CONNECTIONS};
	if (wire_offload_start(2, &srv->offload) != LEDGER_OK ||
	    wire_net_start(&ncfg, &srv->ops, ls, nls, &srv->net) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: cannot start the HTTP server on %s\n", sk->api_bound);
		wire_offload_stop(srv->offload);
		free(srv);
		return NULL;
	}
	snprintf(extra, sizeof(extra), "\"address\":\"%s\",\"version\":\"%s\",\"tls\":%s",
		 sk->api_bound, LEDGER_VERSION, sk->tls != NULL ? "true" : "false");
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, extra, "listening on %s%s", sk->api_bound,
		   sk->tls != NULL ? " (TLS)" : "");
	if (sk->tls != NULL) {
		wire_tls_describe(sk->tls, who, sizeof(who));
		LOG_INFO("TLS certificate: %s", who);
	} else if (!wire_listen_private(sk->api_fd)) {
		LOG_WARN("serving plaintext HTTP on %s, which is not a loopback address: tokens "
			 "cross the network in the clear (set --tls-cert and --tls-key)",
			 sk->api_bound);
	}
	if (sk->ops_fd >= 0) {
		snprintf(extra, sizeof(extra), "\"address\":\"%s\"", sk->ops_bound);
		LEDGER_LOG(LEDGER_LOG_INFO, NULL, extra,
			   "operations (/healthz, /readyz, /metrics) on %s", sk->ops_bound);
	}
	return srv;
}

void api_server_reload(struct api_server *srv)
{
	char err[400], who[400];

	if (srv->tls == NULL) {
		LOG_INFO("SIGHUP: no TLS credentials to reload");
	} else if (wire_tls_reload(srv->tls, err, sizeof(err)) != LEDGER_OK) {
		LOG_ERROR("SIGHUP: TLS credentials not reloaded, the old ones stay: %s", err);
	} else {
		wire_tls_describe(srv->tls, who, sizeof(who));
		LOG_INFO("SIGHUP: TLS credentials reloaded: %s", who);
	}
}

bool api_server_drain(struct api_server *srv)
{
	int64_t deadline_ns = monotonic_ns() + srv->cfg->drain_timeout_ms * 1000000;

	wire_net_drain(srv->net);
	while (wire_net_in_flight(srv->net) > 0) {
		struct timespec pause = {0, 10 * 1000 * 1000};

		if (monotonic_ns() >= deadline_ns)
			return false;
		nanosleep(&pause, NULL);
	}
	return true;
}

void api_server_stop(struct api_server *srv)
{
	if (srv == NULL)
		return;
	wire_net_stop(srv->net);
	wire_offload_stop(srv->offload);
	if (strncmp(srv->cfg->listen, "unix:", 5) == 0)
		unlink(srv->cfg->listen + 5);
	free(srv);
}

int api_server_run(const struct api_config *cfg, const struct ledger_policy *policy,
		   struct ledger_store *store, const struct api_server_sockets *sk)
{
	struct api_server *srv = api_server_start(cfg, policy, store, sk);
	sigset_t stop;
	int sig = 0;

	if (srv == NULL)
		return 1;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	for (;;) {
		if (sigwait(&stop, &sig) != 0)
			continue;
		if (sig != SIGHUP)
			break;
		api_server_reload(srv);
	}
	LOG_INFO("%s: draining %ld calls in flight", sig == SIGTERM ? "SIGTERM" : "SIGINT",
		 wire_net_in_flight(srv->net));
	if (!api_server_drain(srv)) {
		/* Nothing acknowledged is lost: a reply follows its commit. */
		LOG_ERROR("drain timed out with %ld calls in flight", wire_net_in_flight(srv->net));
		_exit(1);
	}
	api_server_stop(srv);
	LOG_INFO("stopped");
	return 0;
}
