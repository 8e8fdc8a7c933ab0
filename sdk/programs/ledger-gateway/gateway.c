/*
 * sdk/programs/ledger-gateway/gateway.c: ledger-gateway, a router on the C
 * SDK and the project's own HTTP layer (api/wire/). It serves OpenAI's
 * POST /v1/chat/completions, streamed or not, and GET /v1/models in front
 * of the engines people run, one logical request however often its client
 * retries (GATEWAY.md). This file is the
 * HTTP side: routing, the checks a head alone decides (the path, the
 * method, the size, the key), and the process's start and stop; a request
 * whose body is in is served on a thread of its own (request.c), from a
 * run of its attempts (run.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <ledger_client.h>

#include "api/wire/conn.h"
#include "api/wire/listen.h"
#include "api/wire/net.h"
#include "api/wire/stream.h"
#include "api/wire/tls.h"
#include "sdk/programs/ledger-gateway/config.h"
#include "sdk/programs/ledger-gateway/key.h"
#include "sdk/programs/ledger-gateway/log.h"
#include "sdk/programs/ledger-gateway/metrics.h"
#include "sdk/programs/ledger-gateway/replica.h"
#include "sdk/programs/ledger-gateway/request.h"
#include "sdk/programs/ledger-gateway/run.h"
#include "sdk/programs/ledger-gateway/trace.h"
#include "sdk/programs/ledger-gateway/upstream.h"

#define MAX_BODY (1u << 20)
#define DRAIN_MS 30000u /* how long a stop waits for the streams in flight */
#define API_LISTENER 0  /* the listeners, as wire_net_start() numbers them */
#define OPS_LISTENER 1

static struct gateway gw;

/*
 * A call as the wire hands it over: begun on the polling thread, served by
 * a thread of its own (api/wire/stream.h), freed by on_end() once that
 * thread returned.
 */
struct call {
	struct gateway_request q;
	const char *route; /* the route it took, as its span names it; NULL: none */
};

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/*
 * On the polling thread: answers a request error before any thread serves
 * it, in OpenAI's shape with API.md's @p code. A retry of the same request
 * helps only after a 503 (x-should-retry).
 */
static void reply_invalid(struct call *c, unsigned status, const char *code, const char *message,
			  const char *allow)
{
	json_t *e =
		json_pack("{s:{s:s,s:s,s:s,s:n,s:s,s:b}}", "error", "code", code, "message",
			  message, "type", status >= 500 ? "server_error" : "invalid_request_error",
			  "param", "request_id", c->q.rid, "retryable", status == 503);
	char *text = e != NULL ? json_dumps(e, JSON_COMPACT) : NULL;
	char headers[220];

	json_decref(e);
	gateway_trace_reply(c->q.trace, status, code);
	gateway_trace_enter(c->q.trace); /* the polling thread's line names the request's trace */
	gateway_log("refused", c->q.rid, NULL, "\"status\":%u,\"code\":\"%s\"", status, code);
	gateway_trace_leave();
	snprintf(headers, sizeof(headers),
		 "Content-Type: application/json\r\nx-request-id: %s\r\nx-should-retry: %s\r\n"
		 "%s%s%s",
		 c->q.rid, status == 503 ? "true" : "false", allow != NULL ? "Allow: " : "",
		 allow != NULL ? allow : "", allow != NULL ? "\r\n" : "");
	if (text == NULL)
		text = strdup("{}");
	wire_conn_reply(c->q.conn, status, headers, text, text != NULL ? strlen(text) : 0);
}

/* The request's thread: the request, until its reply ended. */
static void *serve(void *arg)
{
	struct call *c = arg;

	gateway_trace_enter(c->q.trace);
	gateway_request_serve(&c->q);
	gateway_trace_leave();
	return NULL;
}

/* A keyed request's Last-Event-ID: a decimal event id, or -1 when absent or not one. */
static int64_t last_event_id(const struct wire_http_head *head)
{
	const char *v = wire_http_field(head, "Last-Event-ID");
	int64_t id = 0;

	if (v == NULL || *v == '\0' || wire_http_field_count(head, "Last-Event-ID") != 1)
		return -1;
	for (; *v != '\0'; v++) {
		if (*v < '0' || *v > '9' || id > (INT64_MAX - 9) / 10)
			return -1;
		id = id * 10 + (*v - '0');
	}
	return id;
}

/*
 * The logical request a head names, if any. @return false when the head
 * was answered (a bad or a missing key)
 */
static bool read_key_or_reply(struct call *c, const struct wire_http_head *head)
{
	char key[GATEWAY_KEY_MAX + 1], *owned = NULL;
	const char *scope;
	bool ok;

	switch (gateway_key_read(head, gw.key_header, key)) {
	case GATEWAY_KEY_INVALID:
		reply_invalid(c, 400, "invalid_idempotency_key",
			      "the idempotency key must be 1 to 255 characters in 0x21-0x7E, "
			      "given once",
			      NULL);
		return false;
	case GATEWAY_KEY_NONE:
		if (!gw.require_key)
			return true; /* a new logical request, under the id on_begin drew */
		reply_invalid(c, 400, "idempotency_key_required",
			      "this gateway serves only requests that carry an idempotency key",
			      NULL);
		return false;
	case GATEWAY_KEY_OK:
		break;
	}
	if (gw.key_secret == NULL) {
		reply_invalid(c, 500, "key_secret_missing",
			      "the gateway has no GATEWAY_KEY_SECRET to name keyed requests by",
			      NULL);
		return false;
	}
	scope = gateway_key_scope(head, gw.scope_header, &owned);
	ok = gateway_key_request_id(gw.key_secret, scope, key, c->q.rid);
	explicit_bzero(key, sizeof(key)); /* a key is a secret: it lives no longer than this */
	free(owned);
	if (!ok) {
		reply_invalid(c, 500, "internal_error", "the key's request id failed", NULL);
		return false;
	}
	c->q.keyed = true;
	c->q.last_event_id = last_event_id(head);
	return true;
}

/* The path of @p target, without its query, equals @p path. */
static bool path_is(const char *target, const char *path)
{
	size_t n = strcspn(target, "?");

	return strlen(path) == n && strncmp(target, path, n) == 0;
}

/* Answers @p doc (taken) as JSON with @p status. */
static void reply_json(struct call *c, unsigned status, json_t *doc)
{
	char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;

	json_decref(doc);
	if (text == NULL) {
		reply_invalid(c, 503, "unavailable", "out of memory", NULL);
		return;
	}
	gateway_trace_reply(c->q.trace, status, NULL);
	wire_conn_reply(c->q.conn, status, "Content-Type: application/json\r\n", text,
			strlen(text));
}

/*
 * The GETs: health, readiness (ledgerd and a replica ready), the models of
 * the healthy replicas, the metrics. The operations listener serves the
 * first two and the metrics alone; with it, the API listener has no
 * metrics. @return false: not one of them
 */
static bool serve_get(struct call *c, const char *target, unsigned listener)
{
	bool ops = listener == OPS_LISTENER;

	if (path_is(target, "/healthz")) {
		reply_json(c, 200, json_pack("{s:s}", "status", "ok"));
	} else if (path_is(target, "/readyz")) {
		struct ledger_client_error err = {0};
		bool replica_ready = false, ledger_ready;
		json_t *replicas = gateway_replicas_readiness(&gw, &replica_ready);

		struct ledger_client_answer none = {0};

		/* ledgerd answers, and its store does: a request that is not there is a 404. */
		ledger_ready = ledger_client_answer_get(gw.ledger, "readyz-probe", &none, &err) ==
				       LEDGER_CLIENT_OK ||
			       err.status == 404;
		ledger_client_answer_clear(&none);
		ledger_client_error_clear(&err);
		reply_json(c, ledger_ready && replica_ready ? 200 : 503,
			   json_pack("{s:s,s:b,s:o}", "status",
				     ledger_ready && replica_ready ? "ready" : "not_ready",
				     "ledger", ledger_ready, "replicas", replicas));
	} else if (!ops && path_is(target, "/v1/models")) {
		c->route = "/v1/models";
		reply_json(c, 200, gateway_replicas_models(&gw));
	} else if ((ops || gw.ops_listen == NULL) && path_is(target, "/metrics")) {
		char *text = gateway_metrics_text(&gw);

		if (text == NULL)
			reply_invalid(c, 503, "unavailable", "out of memory", NULL);
		else
			wire_conn_reply(
				c->q.conn, 200,
				"Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n", text,
				strlen(text));
	} else {
		return false;
	}
	return true;
}

/* A head passed the wire's checks: what the head alone decides, or the body asked for. */
static void *on_begin(void *ctx, struct wire_conn *conn, const struct wire_http_head *head,
		      unsigned listener)
{
	struct call *c = calloc(1, sizeof(*c));

	(void)ctx;
	if (c == NULL)
		return NULL;
	c->q.conn = conn;
	c->q.last_event_id = -1;
	/* The span starts before anything can refuse the request: a refusal is traced too. */
	c->q.trace =
		gateway_trace_begin(head, conn, listener == API_LISTENER && gw.tls_cert != NULL);
	if (listener == API_LISTENER && path_is(head->target, "/v1/chat/completions"))
		c->route = "/v1/chat/completions";
	/* Every answer names a request: a keyed one's id replaces this one. */
	if (!gateway_key_new_request_id(c->q.rid)) {
		gateway_trace_release(c->q.trace);
		free(c);
		return NULL;
	}
	/* HEAD wherever GET: the wire writes the same head and no body. */
	if ((strcmp(head->method, "GET") == 0 || strcmp(head->method, "HEAD") == 0) &&
	    serve_get(c, head->target, listener)) {
		/* answered */
	} else if (listener == OPS_LISTENER || !path_is(head->target, "/v1/chat/completions")) {
		reply_invalid(c, 404, "not_found", "no such path", NULL);
	} else if (strcmp(head->method, "POST") != 0) {
		reply_invalid(c, 405, "method_not_allowed", "only POST is served", "POST");
	} else if (head->body == WIRE_HTTP_BODY_LENGTH && head->content_length > MAX_BODY) {
		reply_invalid(c, 413, "body_too_large", "the body is over 1 MiB", NULL);
	} else if (read_key_or_reply(c, head)) {
		wire_conn_read_body(conn, MAX_BODY);
	}
	return c;
}

/* The body is in (NULL: over the limit): a streamed completion goes to a thread of its own. */
static void on_body(void *call, struct ledger_buf *body)
{
	struct call *c = call;
	json_t *doc = NULL;

	if (body == NULL) {
		reply_invalid(c, 413, "body_too_large", "the body is over 1 MiB", NULL);
		return;
	}
	doc = json_loadb(body->data != NULL ? body->data : "", body->len, 0, NULL);
	if (!json_is_object(doc)) {
		reply_invalid(c, 400, "invalid_json", "the body is not a JSON object", NULL);
	} else if (json_object_get(doc, "model") != NULL &&
		   !json_is_string(json_object_get(doc, "model"))) {
		reply_invalid(c, 400, "invalid_field", "\"model\" is a string", NULL);
	} else if (json_object_get(doc, "stream") != NULL &&
		   !json_is_boolean(json_object_get(doc, "stream")) &&
		   !json_is_null(json_object_get(doc, "stream"))) {
		reply_invalid(c, 400, "invalid_field", "\"stream\" is true or false", NULL);
	} else if (json_is_string(json_object_get(doc, "model")) &&
		   (c->q.model = strdup(json_string_value(json_object_get(doc, "model")))) ==
			   NULL) {
		reply_invalid(c, 503, "unavailable", "out of memory", NULL);
	} else {
		c->q.stream = json_is_true(json_object_get(doc, "stream"));
		c->q.body = body->data;
		c->q.body_len = body->len;
		memset(body, 0, sizeof(*body));
		if (wire_stream_start(c->q.conn, serve, c) != LEDGER_OK)
			reply_invalid(c, 503, "unavailable", "no thread for the request", NULL);
	}
	json_decref(doc);
}

static void on_resume(void *call)
{
	(void)call; /* nothing is held but handed-off streams, which end on their own */
}

/* The call is over: its thread, if it had one, returned. */
static void on_end(void *call, bool replied)
{
	struct call *c = call;
	bool chat = c->route != NULL && strcmp(c->route, "/v1/chat/completions") == 0;

	(void)replied;
	gateway_trace_end(c->q.trace, &(struct gateway_trace_end){.route = c->route,
								  .rid = c->q.rid,
								  .keyed = c->q.keyed,
								  .model = c->q.model,
								  .chat = chat});
	free(c->q.body);
	free(c->q.model);
	free(c);
}

/* Waits for the calls in flight, at most @p ms. @return true once none is left */
static bool drain(struct wire_net *net, unsigned ms)
{
	for (unsigned waited = 0; wire_net_in_flight(net) > 0; waited += 10) {
		if (waited >= ms)
			return false;
		sleep_ms(10);
	}
	return true;
}

int main(int argc, char **argv)
{
	static const struct wire_net_ops ops = {
		.begin = on_begin, .body = on_body, .resume = on_resume, .end = on_end};
	struct ledger_client_options opts = {0};
	struct wire_net *net = NULL;
	struct wire_tls *tls = NULL;
	struct wire_net_listener listeners[2];
	struct wire_net_config ncfg = WIRE_NET_DEFAULTS;
	char bound[300], ops_bound[300] = "", err[400];
	sigset_t stop;
	int fd, ops_fd = -1, sig = 0;

	config_parse(&gw, argc, argv);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		config_usage_exit("libcurl does not start");
	if (!upstream_start())
		gateway_log("replica connections are not shared", NULL, NULL, NULL);
	gateway_trace_start(); /* off unless OTEL_* name an endpoint */
	gateway_replicas_start(&gw);
	gateway_run_setup(&gw);
	gateway_request_setup(&gw);
	opts.url = gw.ledger_url;
	opts.token = gw.ledger_token;
	opts.ca_file = gw.ledger_ca_file;
	opts.retry_ms = 5000;
	if (ledger_client_open(&opts, &gw.ledger) != LEDGER_CLIENT_OK)
		config_usage_exit("the ledger URL must be http(s)://HOST:PORT");
	if (gw.tls_cert != NULL &&
	    wire_tls_open(gw.tls_cert, gw.tls_key, &tls, err, sizeof(err)) != LEDGER_OK)
		config_usage_exit(err);
	fd = wire_listen_open(gw.listen, bound, sizeof(bound), err, sizeof(err));
	if (fd == -2)
		config_usage_exit(err);
	if (fd < 0) {
		fprintf(stderr, "ledger-gateway: %s\n", err);
		return 1;
	}
	if (gw.ops_listen != NULL) {
		ops_fd = wire_listen_open(gw.ops_listen, ops_bound, sizeof(ops_bound), err,
					  sizeof(err));
		if (ops_fd < 0) {
			fprintf(stderr, "ledger-gateway: --ops-listen: %s\n", err);
			return ops_fd == -2 ? 2 : 1;
		}
	}

	/* SIGTERM, SIGINT and SIGHUP are taken by main alone; every other thread blocks them. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);

	listeners[API_LISTENER] =
		(struct wire_net_listener){fd, tls, strncmp(gw.listen, "unix:", 5) != 0, 0};
	if (ops_fd >= 0)
		listeners[OPS_LISTENER] =
			(struct wire_net_listener){ops_fd, NULL, false, WIRE_OPS_MAX_CONNECTIONS};
	ncfg.max_connections = wire_listen_room(ncfg.max_connections, 0);
	ncfg.discard_max = MAX_BODY + (size_t)8 * 1024 * 1024;
	if (wire_net_start(&ncfg, &ops, listeners, ops_fd >= 0 ? 2 : 1, &net) != LEDGER_OK) {
		fprintf(stderr, "ledger-gateway: cannot start serving on %s\n", bound);
		return 1;
	}
	if (gw.scope_header == NULL)
		gateway_warn("no --client-scope-header: every client's keys share one scope");
	if (gw.key_secret == NULL)
		gateway_warn("no GATEWAY_KEY_SECRET: requests that carry a key are refused");
	fprintf(stderr,
		"{\"level\":\"info\",\"msg\":\"listening\",\"address\":\"%s\",\"tls\":%s,\"replicas\":%zu}\n",
		bound, tls != NULL ? "true" : "false", gw.n_replicas);
	if (ops_fd >= 0)
		fprintf(stderr,
			"{\"level\":\"info\",\"msg\":\"operations (/healthz, /readyz, /metrics) "
			"listening\",\"ops_address\":\"%s\"}\n",
			ops_bound);
	while (sigwait(&stop, &sig) == 0 && sig == SIGHUP) {
		if (tls == NULL)
			gateway_log("SIGHUP: no TLS credentials to reload", NULL, NULL, NULL);
		else if (wire_tls_reload(tls, err, sizeof(err)) != LEDGER_OK)
			gateway_log("SIGHUP: TLS credentials not reloaded, the old ones stay", NULL,
				    NULL, NULL);
		else
			gateway_log("SIGHUP: TLS credentials reloaded", NULL, NULL, NULL);
	}
	/* Streams in flight end as the engine ends them, within the drain bound. */
	wire_net_drain(net);
	if (!drain(net, DRAIN_MS)) {
		gateway_log("drain timed out", NULL, NULL, "\"in_flight\":%ld",
			    wire_net_in_flight(net));
		_exit(1);
	}
	wire_net_stop(net);
	gateway_trace_stop(); /* the spans of the drained streams go out before the exit */
	wire_tls_close(tls);
	ledger_client_close(gw.ledger);
	return 0;
}
