/*
 * api/server.c: the HTTP server and its driver. libmicrohttpd's polling
 * threads route a call from its head and read its body; then drive()
 * walks it through its life: authenticate, parse, answer from the replay
 * cache, or queue its operation for the store's workers with the
 * connection suspended; the worker resumes it and drive() answers what
 * the store said. A polling thread never waits on the database.
 */
#include "api/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api/input.h"
#include "api/metrics.h"
#include "api/reply.h"
#include "api/tokens.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"

struct api_server {
	const struct api_settings *cfg;     /* borrowed */
	const struct ledger_policy *policy; /* borrowed */
	struct ledger_store *store;         /* borrowed */
	struct MHD_Daemon *daemon;
	atomic_long in_flight; /* requests between first byte and completion */
	atomic_bool draining;  /* shutting down: replies close their connection */
};

size_t api_server_queue_depth(const struct api_request *req)
{
	return ledger_store_queue_depth(req->server->store);
}

unsigned api_server_stalled(const struct api_request *req)
{
	return ledger_store_stalled(req->server->store);
}

long api_server_in_flight(const struct api_request *req)
{
	return atomic_load(&req->server->in_flight);
}

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
	struct ledger_log_ids ids = {NULL, NULL, NULL};
	const char *p = req->route != NULL ? req->route->pattern : "";
	unsigned n = 0;

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

static enum MHD_Result send_reply(struct api_request *req)
{
	struct api_reply *r = &req->reply;
	struct MHD_Response *resp = NULL;
	enum MHD_Result ret;
	size_t len = 0;
	char *body = NULL;

	if (r->body.oom) {
		ledger_buf_free(&r->body);
		api_reply_error(req, 500, "internal_error", "out of memory");
	}
	body = ledger_buf_steal(&r->body, &len);
	resp = MHD_create_response_from_buffer(len, body != NULL ? body : (char *)"",
					       body != NULL ? MHD_RESPMEM_MUST_FREE
							    : MHD_RESPMEM_PERSISTENT);
	if (resp == NULL) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				r->content_type != NULL ? r->content_type : "application/json");
	if (r->retry_after_ms > 0) {
		char secs[24];
		snprintf(secs, sizeof(secs), "%lld", (long long)((r->retry_after_ms + 999) / 1000));
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, secs);
	}
	if (r->replayed)
		MHD_add_response_header(resp, "Idempotent-Replayed", "true");
	if (r->allow != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
	if (atomic_load(&req->server->draining))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	ret = MHD_queue_response(req->conn, r->status, resp);
	MHD_destroy_response(resp);
	api_metrics_http(req->route != NULL ? (size_t)(req->route - api_routes) : SIZE_MAX,
			 r->status, (double)(monotonic_ns() - req->started_ns) / 1e9);
	log_reply(req);
	return ret;
}

/* --- the life of a call --- */

static struct api_request *request_of(struct ledger_job *job)
{
	return (struct api_request *)(void *)((char *)job - offsetof(struct api_request, job));
}

/* On a worker: the call's operation was answered; its polling thread takes it on. */
static void job_done(struct ledger_job *job)
{
	/* The last touch: once resumed, the polling thread may free the call. */
	MHD_resume_connection(request_of(job)->conn);
}

/* Hands the call's operation to the store's workers; drive() goes on when it is back. */
static void queue(struct api_request *req, enum api_stage next)
{
	req->stage = next;
	req->job.done = job_done;
	MHD_suspend_connection(req->conn);
	ledger_store_submit(req->server->store, &req->job);
}

/* Knows the token from the cache alone. @return false: the store must look it up */
static bool authenticate_from_cache(struct api_request *req)
{
	if (!api_tokens_cache_get(req->token_sha256, req->tenant, &req->role))
		return false;
	req->authenticated = true;
	return true;
}

/* What the store said of the token. @return false after replying 401 or 503 */
static bool authenticate_from_store(struct api_request *req)
{
	const struct ledger_store_result *res = &req->job.res;
	bool ok = false;

	if (res->rc != LEDGER_OK) {
		api_reply_store_error(req, res->rc);
	} else if (!res->u.token.found) {
		api_reply_error(req, 401, "unauthorized", "the token is not valid");
	} else {
		snprintf(req->tenant, sizeof(req->tenant), "%s", res->u.token.tenant);
		req->role = res->u.token.role;
		req->authenticated = true;
		api_tokens_cache_put(req->token_sha256, req->tenant, req->role);
		ok = true;
	}
	ledger_store_result_clear(&req->job);
	return ok;
}

/* Replies what the store answered for the call's operation. */
static void answer(struct api_request *req)
{
	const struct api_handler *h = req->route->handler;
	enum ledger_err rc = req->job.res.rc;

	if (rc != LEDGER_OK && !h->answers_errors)
		api_reply_store_error(req, rc);
	else
		h->answer(req, &req->job.res);
	ledger_store_result_clear(&req->job);
	if (req->reply.status == 0) {
		LOG_ERROR("handler %s gave no reply", req->route->name);
		abort();
	}
}

/*
 * The life of a call, once its body is in: parse, authenticate, check the
 * role, then answer from the replay cache or queue the operation for a
 * worker, and answer what the store said. It runs on the polling thread,
 * again each time a worker hands the call back; a stage that needs the
 * database queues the call and returns. It ends with a reply.
 */
static void drive(struct api_request *req)
{
	const struct api_route *route = req->route;

	switch (req->stage) {
	case API_STAGE_HEAD:
		if (req->body_too_large) {
			api_reply_error(req, 413, "body_too_large",
					"the body is larger than %lld bytes",
					(long long)req->settings->max_body_bytes);
			return;
		}
		if (req->body.oom) {
			api_reply_error(req, 500, "internal_error", "out of memory");
			return;
		}
		req->job.op.kind = LEDGER_STORE_NONE;
		req->job.op.key.tenant = req->tenant; /* filled in by authentication */
		if (route->handler->parse(req) != LEDGER_OK || req->reply.status != 0)
			return;
		if (req->job.op.kind == LEDGER_STORE_NONE) {
			LOG_ERROR("handler %s neither replied nor named an operation", route->name);
			abort();
		}
		if (route->roles != 0 && !authenticate_from_cache(req)) {
			req->stash = req->job.op;
			req->job.op.kind = LEDGER_STORE_TOKEN_LOOKUP;
			req->job.op.in.token_sha256 = req->token_sha256;
			queue(req, API_STAGE_AUTHENTICATING);
			return;
		}
		break;
	case API_STAGE_AUTHENTICATING:
		if (!authenticate_from_store(req))
			return;
		req->job.op = req->stash;
		break;
	case API_STAGE_STORING:
		answer(req);
		return;
	case API_STAGE_ANSWERED:
		return;
	}
	if (route->roles != 0 && (route->roles & LEDGER_ROLE_BIT(req->role)) == 0) {
		api_reply_error(req, 403, "forbidden", "the role %s may not call %s %s",
				ledger_role_name(req->role), route->method, route->pattern);
		return;
	}
	if (ledger_store_replay(&req->job)) {
		api_metrics_replay_cache_hit();
		answer(req);
		return;
	}
	queue(req, API_STAGE_STORING);
}

/* --- the polling thread's side --- */

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct api_request *req = cls;
	size_t klen = 0, vlen = 0;
	char *k = NULL, *v = NULL;

	(void)kind;
	if (req->reply.status != 0)
		return MHD_NO;
	k = api_routes_percent_decode(key, strlen(key), &klen);
	if (k == NULL || strlen(k) != klen) {
		api_reply_invalid_field(req, "", "a query parameter name is malformed");
		goto fail;
	}
	for (size_t i = 0; req->route->query[i] != NULL; i++) {
		const char *name = req->route->query[i];

		if (strcmp(name, k) != 0)
			continue;
		if (value != NULL)
			v = api_routes_percent_decode(value, strlen(value), &vlen);
		if (v == NULL || strlen(v) != vlen) {
			api_reply_invalid_field(req, name, "is malformed");
			goto fail;
		}
		if (api_input_query(req, name) != NULL) {
			api_reply_invalid_field(req, name, "given twice");
			goto fail;
		}
		req->query_keys[req->nquery] = k;
		req->query_values[req->nquery] = v;
		req->nquery++;
		return MHD_YES;
	}
	api_reply_invalid_field(req, klen <= 64 ? k : "", "unknown query parameter");
fail:
	free(k);
	free(v);
	return MHD_NO;
}

/* Reads "Authorization: Bearer <token>" into the request's token hash. */
static void read_token(struct api_request *req)
{
	const char *h = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
						    MHD_HTTP_HEADER_AUTHORIZATION);
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

/* The first call for a request: everything knowable from its head alone. */
static void start(struct api_request *req, const char *url, const char *method)
{
	const char *allow = NULL, *bad = NULL;
	const char *clen = NULL;

	switch (api_routes_match(method, url, &req->route, req->params, &allow, &bad)) {
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
	if (req->route->roles != 0) {
		read_token(req);
		if (!req->has_token) {
			api_reply_error(req, 401, "unauthorized",
					"an Authorization: Bearer token is required");
			return;
		}
	}
	clen = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
					   MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (clen != NULL &&
	    strtoull(clen, NULL, 10) > (unsigned long long)req->settings->max_body_bytes) {
		api_reply_error(req, 413, "body_too_large", "the body is larger than %lld bytes",
				(long long)req->settings->max_body_bytes);
		return;
	}
	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, collect_query, req);
}

/*
 * A body still being sent when the answer is known (from the head, or
 * once it is too large) is read and dropped up to this much, so that a
 * client that writes its whole body before it reads (most scripts) gets
 * the answer rather than a connection reset; past it the connection is
 * answered and closed at once.
 */
#define DISCARD_MAX(cfg) ((size_t)(cfg)->max_body_bytes + (size_t)8 * 1024 * 1024)

/* True when the client will send a body it has not been told to hold back. */
static bool body_follows_unasked(struct api_request *req)
{
	struct MHD_Connection *c = req->conn;
	const char *clen =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	const char *te =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
	const char *expect =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);

	/* A client that asked "Expect: 100-continue" reads the early answer instead. */
	if (expect != NULL && strcasecmp(expect, "100-continue") == 0)
		return false;
	if (te != NULL)
		return true;
	return clen != NULL && strtoull(clen, NULL, 10) > 0 &&
	       strtoull(clen, NULL, 10) <= DISCARD_MAX(req->settings);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **req_cls)
{
	struct api_server *srv = cls;
	struct api_request *req = *req_cls;

	(void)version;
	if (req == NULL) {
		req = calloc(1, sizeof(*req));
		if (req == NULL)
			return MHD_NO;
		req->server = srv;
		req->settings = srv->cfg;
		req->policy = srv->policy;
		req->conn = conn;
		req->started_ns = monotonic_ns();
		*req_cls = req;
		atomic_fetch_add(&srv->in_flight, 1);
		start(req, url, method);
		/*
		 * Errors known from the head alone need no body: to a client that
		 * waits for "100 Continue" they go out at once; one that is
		 * sending its body anyway gets them once it is read and dropped.
		 */
		if (req->reply.status != 0 && !body_follows_unasked(req))
			return send_reply(req);
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		if (req->reply.status == 0 && !req->body_too_large &&
		    req->body.len + *upload_data_size > (size_t)srv->cfg->max_body_bytes) {
			req->body_too_large = true;
			req->discarded = req->body.len;
			ledger_buf_free(&req->body);
		}
		if (req->reply.status != 0 || req->body_too_large) {
			req->discarded += *upload_data_size;
			*upload_data_size = 0;
			if (req->discarded <= DISCARD_MAX(srv->cfg))
				return MHD_YES;
			/* Too much to drop: answer now, and the connection closes. */
			if (req->reply.status == 0)
				drive(req);
			req->stage = API_STAGE_ANSWERED;
			return send_reply(req);
		}
		ledger_buf_append(&req->body, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (req->reply.status == 0) {
		/* The whole body is in, or a worker handed the call back. */
		ledger_log_context_set(&req->job.ids);
		drive(req);
		ledger_log_context_set(NULL);
	}
	if (req->reply.status == 0)
		return MHD_YES; /* queued: suspended until its worker resumes it */
	req->stage = API_STAGE_ANSWERED;
	return send_reply(req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct api_server *srv = cls;
	struct api_request *req = *req_cls;

	(void)conn;
	(void)toe;
	if (req == NULL)
		return;
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
	*req_cls = NULL;
	atomic_fetch_sub(&srv->in_flight, 1);
}

/* Keeps the raw URL: routes.c decodes parameters itself, after matching. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
	(void)cls;
	(void)conn;
	return strlen(s);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	LOG_WARN("http: %s", msg);
}

/* --- listening --- */

static int listen_unix(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "unix socket path too long");
		return -1;
	}
	strcpy(sa.sun_path, path);
	/* A socket left by an earlier run is replaced; any other file is not. */
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1024) != 0) {
		snprintf(err, errlen, "cannot listen on unix:%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int listen_tcp(const char *spec, char *bound, size_t boundlen, char *err, size_t errlen)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	const char *h = host;
	struct addrinfo hints, *ai = NULL;
	int fd = -1, one = 1, gai;
	size_t hlen;

	if (colon == NULL || colon == spec || colon[1] == '\0') {
		snprintf(err, errlen, "--listen: expected HOST:PORT, [V6]:PORT or unix:/path");
		return -2;
	}
	hlen = (size_t)(colon - spec);
	if (hlen >= sizeof(host)) {
		snprintf(err, errlen, "--listen: host too long");
		return -2;
	}
	memcpy(host, spec, hlen);
	host[hlen] = '\0';
	if (host[0] == '[' && hlen >= 2 && host[hlen - 1] == ']') {
		host[hlen - 1] = '\0';
		h = host + 1;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	gai = getaddrinfo(h, colon + 1, &hints, &ai);
	if (gai != 0) {
		snprintf(err, errlen, "--listen: %s: %s", spec, gai_strerror(gai));
		return -2;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char addr[INET6_ADDRSTRLEN] = "?";
		unsigned port = 0;

		getsockname(fd, (struct sockaddr *)&ss, &sl);
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *in = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &in->sin_addr, addr, sizeof(addr));
			port = ntohs(in->sin_port);
			snprintf(bound, boundlen, "%s:%u", addr, port);
		} else {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
			port = ntohs(in6->sin6_port);
			snprintf(bound, boundlen, "[%s]:%u", addr, port);
		}
	}
	return fd;
}

int api_server_listen(const char *spec, char *bound, size_t boundlen, char *err, size_t errlen)
{
	if (strncmp(spec, "unix:", 5) == 0) {
		if (spec[5] != '/') {
			snprintf(err, errlen, "--listen: unix: needs an absolute path");
			return -2;
		}
		snprintf(bound, boundlen, "%s", spec);
		return listen_unix(spec + 5, err, errlen);
	}
	return listen_tcp(spec, bound, boundlen, err, errlen);
}

/* --- running --- */

/*
 * A connection's memory holds a request's head and read buffer (bodies are
 * copied out as they arrive), and libmicrohttpd clears all of it after
 * every request: 16 KiB leaves room for 8 KiB of headers at half the
 * clearing of the default 32 KiB (8% of a replay's CPU, measured).
 */
#define API_CONNECTION_MEMORY (16 * 1024)

int api_server_run(const struct api_settings *cfg, const struct ledger_policy *policy,
		   struct ledger_store *store, int fd, const char *bound)
{
	struct api_server srv;
	char extra[400];
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
			 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	int64_t deadline_ns;
	sigset_t stop;
	int sig = 0;

	memset(&srv, 0, sizeof(srv));
	srv.cfg = cfg;
	srv.policy = policy;
	srv.store = store;
	atomic_init(&srv.in_flight, 0);
	atomic_init(&srv.draining, false);

	srv.daemon = MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, &srv,
		/* First, so that every message of libmicrohttpd is a log line. */
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
		MHD_OPTION_THREAD_POOL_SIZE,
		(unsigned)(cfg->http_threads > 1 ? cfg->http_threads : 0),
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, &srv, MHD_OPTION_UNESCAPE_CALLBACK,
		keep_escaped, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 120u,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)API_CONNECTION_MEMORY, MHD_OPTION_END);
	if (srv.daemon == NULL) {
		fprintf(stderr, "ledgerd: cannot start the HTTP server on %s\n", bound);
		close(fd);
		return 1;
	}
	snprintf(extra, sizeof(extra), "\"address\":\"%s\",\"version\":\"%s\"", bound,
		 LEDGER_VERSION);
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, extra, "listening on %s", bound);

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	while (sigwait(&stop, &sig) != 0)
		;
	LOG_INFO("%s: draining %ld calls in flight", sig == SIGTERM ? "SIGTERM" : "SIGINT",
		 atomic_load(&srv.in_flight));

	atomic_store(&srv.draining, true);
	fd = MHD_quiesce_daemon(srv.daemon);
	if (fd >= 0)
		close(fd);
	deadline_ns = monotonic_ns() + cfg->drain_timeout_ms * 1000000;
	for (;;) {
		struct timespec pause = {0, 10 * 1000 * 1000};

		if (atomic_load(&srv.in_flight) == 0)
			break;
		if (monotonic_ns() >= deadline_ns) {
			/* Nothing acknowledged is lost: a reply follows its commit. */
			LOG_ERROR("drain timed out with %ld calls in flight",
				  atomic_load(&srv.in_flight));
			_exit(1);
		}
		nanosleep(&pause, NULL);
	}
	MHD_stop_daemon(srv.daemon);
	if (strncmp(cfg->listen, "unix:", 5) == 0)
		unlink(cfg->listen + 5);
	LOG_INFO("stopped");
	return 0;
}
