/*
 * sdk/programs/ledger-mcp/http.c: ledger-mcp in front of a Streamable HTTP
 * server, served on the project's own HTTP/1.1 layer (api/wire/), with its
 * framing, limits, deadlines and TLS. Every request is forwarded to the
 * server's origin and its answer streamed back as it comes, on a thread
 * of its own (api/wire/stream.h), since it waits on the server. A POSTed
 * tools/call that names its ledger key runs through mcp_intercept_run()
 * on yet another thread (call.c), so that its SSE events reach the client
 * live while the call is claimed, forwarded and recorded, and a client
 * that leaves mid-call stops neither the call nor its recording.
 */
#include "sdk/programs/ledger-mcp/http.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "api/wire/conn.h"
#include "api/wire/listen.h"
#include "api/wire/net.h"
#include "api/wire/stream.h"
#include "api/wire/tls.h"
#include "ledger/common/buf.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"
#include "sdk/programs/ledger-mcp/call.h"
#include "sdk/programs/ledger-mcp/intercept.h"
#include "sdk/programs/ledger-mcp/message.h"
#include "sdk/programs/ledger-mcp/upstream.h"

#define MAX_BODY (32u << 20)    /* a request body past this is refused: 413 */
#define POLL_MS 100             /* how often a waiting reader looks for the shutdown */
#define IDLE_TIMEOUT_MS 300000u /* a keep-alive connection without a request is closed */
#define DRAIN_MS 10000u         /* how long passed-through requests may end once stopping */
#define END_MS 2000u            /* how long the streams left may take to end cleanly */
#define CHUNK (32u << 10)       /* the most read from a call's answer at once */

static struct {
	struct mcp_proxy *p;  /* borrowed for the run */
	char *origin;         /* the upstream's scheme://host:port */
	char *path;           /* the upstream URL's path: the POSTs to it are read */
	pthread_mutex_t lock; /* guards the count */
	unsigned passing;     /* passed-through requests other than GET in flight */
	atomic_bool stopping; /* drained: end the streams left (GET streams) */
} srv = {.lock = PTHREAD_MUTEX_INITIALIZER};

/*
 * One client request, from its head to its end: begun on the polling
 * thread, served by a thread of its own (api/wire/stream.h), freed by
 * on_end() once that thread returned.
 */
struct exchange {
	struct wire_conn *conn;
	char *method;               /* as the client sent it */
	char *url;                  /* where it goes: the upstream's origin, then the target */
	const char *uri;            /* the target exactly as the client sent it, in url */
	struct mcp_header *headers; /* the client's, less hop-by-hop ones */
	size_t n_headers, cap_headers;
	struct ledger_buf body;
	bool counted;                /* counted in srv.passing */
	struct mcp_upstream *up;     /* a passed-through request's transfer */
	struct mcp_upstream_tap tap; /* a tools/list answer, read for hints */
	struct mcp_call *call;       /* an intercepted call: one reference */
};

/* Lets go of what the exchange holds of the server and of an intercepted call. */
static void let_go(struct exchange *x)
{
	if (x->call != NULL) {
		/* The call goes on: its thread still records what the server answers. */
		mcp_call_client_gone(x->call);
		mcp_call_release(x->call);
	}
	x->call = NULL;
	mcp_upstream_close(x->up); /* a passed-through stream ends with its client */
	x->up = NULL;
	if (x->counted) {
		pthread_mutex_lock(&srv.lock);
		srv.passing--;
		pthread_mutex_unlock(&srv.lock);
		x->counted = false;
	}
}

/* Appends @p n header fields as lines, but the hop-by-hop ones and the framing the wire adds. */
static void header_lines(struct ledger_buf *out, const struct mcp_header *h, size_t n)
{
	const char *connection = NULL;

	for (size_t i = 0; i < n; i++)
		if (strcasecmp(h[i].name, "Connection") == 0)
			connection = h[i].value;
	for (size_t i = 0; i < n; i++) {
		if (mcp_upstream_hop_by_hop(h[i].name, connection) ||
		    strcasecmp(h[i].name, "Date") == 0 ||
		    strpbrk(h[i].value, "\r\n") != NULL) /* a field may not smuggle another */
			continue;
		ledger_buf_printf(out, "%s: %s\r\n", h[i].name, h[i].value);
	}
}

/* From the serving thread: a whole answer, then the end of the exchange's reply. */
static void send_whole(struct exchange *x, unsigned status, const char *headers, const char *body,
		       size_t len)
{
	bool whole = wire_stream_head(x->conn, status, headers, (int64_t)len) == LEDGER_OK &&
		     wire_stream_write(x->conn, body, len) == LEDGER_OK;

	wire_stream_end(x->conn, whole);
}

/* The proxy's own error: {"error":{"code":CODE,"message":MESSAGE}}. */
static char *error_body(const char *code, const char *message, size_t *len)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	struct ledger_jsonw w;

	ledger_jsonw_init(&w, &b);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "error");
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "code");
	ledger_jsonw_string(&w, code);
	ledger_jsonw_key(&w, "message");
	ledger_jsonw_string(&w, message);
	ledger_jsonw_object_end(&w);
	ledger_jsonw_object_end(&w);
	return ledger_buf_steal(&b, len);
}

static void send_error(struct exchange *x, unsigned status, const char *code, const char *message)
{
	size_t len = 0;
	char *body = error_body(code, message, &len);

	if (body == NULL)
		wire_stream_end(x->conn, false);
	else
		send_whole(x, status, "Content-Type: application/json\r\n", body, len);
	free(body);
}

/* On the polling thread: the proxy's own error, before any thread serves the request. */
static void reply_error(struct wire_conn *conn, unsigned status, const char *code,
			const char *message)
{
	size_t len = 0;
	char *body = error_body(code, message, &len);

	wire_conn_reply(conn, status, "Content-Type: application/json\r\n", body, len);
}

/* --- passing a request through --- */

/* Streams the server's answer to the client. @return true when it arrived whole */
static bool pass_body(struct exchange *x)
{
	for (;;) {
		size_t n = 0;
		const char *bytes = mcp_upstream_bytes(x->up, &n);

		if (n > 0) {
			if (wire_stream_write(x->conn, bytes, n) != LEDGER_OK)
				return false; /* the client is gone: the upstream closes with it */
			mcp_upstream_tap_feed(&x->tap, srv.p, bytes, n);
			mcp_upstream_consume(x->up, n);
			continue;
		}
		switch (mcp_upstream_outcome(x->up, NULL, 0)) {
		case MCP_UPSTREAM_RUNNING:
			break;
		case MCP_UPSTREAM_COMPLETE:
			mcp_upstream_tap_end(&x->tap, srv.p);
			return true;
		default:
			return false; /* the server's answer broke off */
		}
		if (atomic_load(&srv.stopping) || wire_stream_gone(x->conn))
			return atomic_load(&srv.stopping);
		mcp_upstream_pump(x->up, POLL_MS);
	}
}

/*
 * Forwards the request as it came and streams the answer back. With @p tap
 * (a tools/list under --trust-annotations) the answer is also read for
 * hints, so it is asked for uncompressed.
 */
static void pass(struct exchange *x, bool tap)
{
	struct mcp_upstream_request req = {0};
	struct ledger_buf headers = LEDGER_BUF_INIT;
	const struct mcp_header *h = NULL;
	char why[256];
	long status = 0;
	size_t n = 0;
	long long length;

	if (tap) /* read, so asked for uncompressed */
		x->n_headers =
			mcp_upstream_headers_drop(x->headers, x->n_headers, "Accept-Encoding");
	if (strcmp(x->method, "GET") != 0) {
		pthread_mutex_lock(&srv.lock);
		srv.passing++;
		pthread_mutex_unlock(&srv.lock);
		x->counted = true;
	}
	req = (struct mcp_upstream_request){x->method,    x->url,       x->headers,
					    x->n_headers, x->body.data, x->body.len};
	if (mcp_upstream_open(&req, &x->up) != LEDGER_OK) {
		send_error(x, 500, "internal", "out of memory");
		return;
	}
	while (!mcp_upstream_head(x->up, &status) &&
	       mcp_upstream_outcome(x->up, why, sizeof(why)) == MCP_UPSTREAM_RUNNING &&
	       !atomic_load(&srv.stopping) && !wire_stream_gone(x->conn))
		mcp_upstream_pump(x->up, POLL_MS);
	if (!mcp_upstream_head(x->up, &status)) {
		mcp_upstream_outcome(x->up, why, sizeof(why));
		LEDGER_LOG(LEDGER_LOG_WARN, NULL, "\"status\":502", "upstream unreachable: %s",
			   why);
		send_error(x, 502, "upstream_unreachable", why);
		return;
	}
	length = mcp_upstream_length(x->up);
	x->tap.on = tap;
	mcp_upstream_tap_start(&x->tap, x->up);
	h = mcp_upstream_headers(x->up, &n);
	header_lines(&headers, h, n);
	if (headers.oom || wire_stream_head(x->conn, (unsigned)status, headers.data,
					    length >= 0 ? length : -1) != LEDGER_OK) {
		ledger_buf_free(&headers);
		wire_stream_end(x->conn, false);
		return;
	}
	ledger_buf_free(&headers);
	wire_stream_end(x->conn, strcmp(x->method, "HEAD") == 0 ||
					 wire_http_bodiless((unsigned)status) || pass_body(x));
}

/* --- an intercepted call (call.c runs it) --- */

/* Answers with what the keyed tools/call's thread queues, as it comes. */
static void serve_call(struct exchange *x, struct mcp_message *msg)
{
	struct ledger_buf headers = LEDGER_BUF_INIT;
	struct mcp_call_head head;
	struct mcp_call *c = mcp_call_start(srv.p, x->url, x->headers, x->n_headers, &x->body, msg);
	char buf[CHUNK];
	bool whole = false;
	ssize_t got;

	x->url = NULL; /* the call's now; x->uri, into it, is not read again */
	x->headers = NULL;
	x->n_headers = x->cap_headers = 0;
	if (c == NULL) {
		send_error(x, 503, "internal", "no memory or thread for the call");
		return;
	}
	x->call = c;
	if (!mcp_call_head(c, &head)) {
		send_error(x, 500, "internal", "out of memory");
		return;
	}
	if (head.headers != NULL)
		header_lines(&headers, head.headers, head.n_headers);
	else
		ledger_buf_puts(&headers, "Content-Type: application/json\r\n");
	if (headers.oom) {
		ledger_buf_free(&headers);
		send_error(x, 500, "internal", "out of memory");
		return;
	}
	if (!head.stream) {
		send_whole(x, (unsigned)head.status, headers.data, head.body, head.len);
		ledger_buf_free(&headers);
		return;
	}
	if (wire_stream_head(x->conn, (unsigned)head.status, headers.data, -1) == LEDGER_OK) {
		while ((got = mcp_call_read(c, buf, sizeof(buf))) > 0 &&
		       wire_stream_write(x->conn, buf, (size_t)got) == LEDGER_OK)
			;
		whole = got == 0;
	}
	ledger_buf_free(&headers);
	wire_stream_end(x->conn, whole);
}

/* --- the exchange's thread --- */

static bool on_path(const char *uri)
{
	size_t n = strcspn(uri, "?#");

	return strlen(srv.path) == n && strncmp(uri, srv.path, n) == 0;
}

static bool is_tools_list(const struct mcp_message *m)
{
	return srv.p->set->trust_annotations && m->kind == MCP_MSG_REQUEST && m->method != NULL &&
	       strcmp(m->method, "tools/list") == 0;
}

/* A POST to the server's endpoint: a keyed tools/call is intercepted. */
static void serve_post(struct exchange *x)
{
	struct mcp_message msg = {0};
	struct ledger_buf answer = LEDGER_BUF_INIT;

	if (mcp_message_parse(x->body.data != NULL ? x->body.data : "", x->body.len, &msg) !=
	    LEDGER_OK) {
		pass(x, false); /* not JSON: the server answers it */
		goto out;
	}
	switch (mcp_intercept_plan(srv.p, &msg, &answer)) {
	case MCP_PLAN_REFUSE:
		if (answer.oom)
			send_error(x, 500, "internal", "out of memory");
		else
			send_whole(x, 200, "Content-Type: application/json\r\n", answer.data,
				   answer.len);
		break;
	case MCP_PLAN_CLAIM:
		serve_call(x, &msg);
		break;
	default:
		if (msg.kind == MCP_MSG_NOTIFICATION &&
		    strcmp(msg.method, "notifications/cancelled") == 0)
			mcp_call_cancel(x->headers, x->n_headers, &msg);
		pass(x, is_tools_list(&msg));
		break;
	}
out:
	mcp_message_free(&msg);
	ledger_buf_free(&answer);
}

static void *serve(void *arg)
{
	struct exchange *x = arg;

	if (strcmp(x->method, "POST") == 0 && on_path(x->uri))
		serve_post(x);
	else
		pass(x, false);
	let_go(x);
	return NULL;
}

/* --- the wire's callbacks, on the polling threads --- */

/* Keeps the client's header fields for the server: all but hop-by-hop ones and Expect. */
static bool collect_headers(struct exchange *x, const struct wire_http_head *head)
{
	const char *connection = wire_http_field(head, "Connection");

	for (unsigned i = 0; i < head->nfields; i++) {
		const struct wire_http_field *f = &head->fields[i];

		/* Expect was answered here, and the body read whole. */
		if (mcp_upstream_hop_by_hop(f->name, connection) ||
		    strcasecmp(f->name, "Expect") == 0)
			continue;
		if (!mcp_upstream_headers_add(&x->headers, &x->n_headers, &x->cap_headers, f->name,
					      strlen(f->name), f->value, strlen(f->value)))
			return false;
	}
	return true;
}

static void *on_begin(void *ctx, struct wire_conn *conn, const struct wire_http_head *head,
		      unsigned listener)
{
	struct exchange *x = calloc(1, sizeof(*x));

	(void)ctx, (void)listener;
	if (x == NULL)
		return NULL;
	x->conn = conn;
	x->method = strdup(head->method);
	if (asprintf(&x->url, "%s%s", srv.origin, head->target) < 0)
		x->url = NULL;
	if (x->method == NULL || x->url == NULL || !collect_headers(x, head)) {
		reply_error(conn, 500, "internal", "out of memory");
		return x;
	}
	x->uri = x->url + strlen(srv.origin);
	if (head->body == WIRE_HTTP_BODY_LENGTH && head->content_length > MAX_BODY)
		reply_error(conn, 413, "body_too_large", "the request body is over 32 MiB");
	else
		wire_conn_read_body(conn, MAX_BODY);
	return x;
}

static void on_body(void *call, struct ledger_buf *body)
{
	struct exchange *x = call;

	if (body == NULL) {
		reply_error(x->conn, 413, "body_too_large", "the request body is over 32 MiB");
		return;
	}
	x->body = *body;
	memset(body, 0, sizeof(*body));
	if (wire_stream_start(x->conn, serve, x) != LEDGER_OK)
		reply_error(x->conn, 503, "internal", "no thread for the request");
}

static void on_resume(void *call)
{
	(void)call; /* nothing is held but handed-off exchanges, which end on their own */
}

/* The request is over: its thread, if it had one, returned. */
static void on_end(void *call, bool replied)
{
	struct exchange *x = call;

	(void)replied;
	let_go(x);
	mcp_upstream_tap_free(&x->tap);
	mcp_upstream_headers_free(x->headers, x->n_headers);
	ledger_buf_free(&x->body);
	free(x->method);
	free(x->url);
	free(x);
}

/* --- start and stop --- */

/* Waits until @p done() says so, or @p ms passed. @return whether it did */
static bool wait_for(bool (*done)(struct wire_net *net), struct wire_net *net, unsigned ms)
{
	struct timespec pause = {0, 10 * 1000 * 1000};

	for (unsigned waited = 0; !done(net); waited += 10) {
		if (waited >= ms)
			return false;
		nanosleep(&pause, NULL);
	}
	return true;
}

static bool nothing_passing(struct wire_net *net)
{
	unsigned n;

	(void)net;
	pthread_mutex_lock(&srv.lock);
	n = srv.passing;
	pthread_mutex_unlock(&srv.lock);
	return n == 0;
}

static bool nothing_in_flight(struct wire_net *net)
{
	return wire_net_in_flight(net) == 0;
}

/*
 * Stops listening, waits for the calls in flight, gives the other requests
 * a while, then ends the streams left (GET streams) with their last chunk.
 * @return false when some are still running: the threads cannot be stopped
 */
static bool drain(struct wire_net *net)
{
	wire_net_drain(net);
	mcp_call_drain();
	wait_for(nothing_passing, net, DRAIN_MS);
	atomic_store(&srv.stopping, true); /* the readers left end their streams now */
	return wait_for(nothing_in_flight, net, END_MS);
}

/* Serves until SIGTERM or SIGINT; SIGHUP reloads the TLS credentials. */
static int serve_until_stopped(struct wire_net *net, struct wire_tls *tls)
{
	sigset_t stop;
	char err[400];
	int sig = 0;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	while (sigwait(&stop, &sig) != 0 || sig == SIGHUP) {
		if (sig != SIGHUP)
			continue;
		if (tls == NULL)
			LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, "SIGHUP: no TLS credentials to reload");
		else if (wire_tls_reload(tls, err, sizeof(err)) != LEDGER_OK)
			LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL,
				   "SIGHUP: TLS credentials not reloaded, the old ones stay: %s", err);
		else
			LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, "SIGHUP: TLS credentials reloaded");
		sig = 0;
	}
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, "signal %d: stopping", sig);
	if (!drain(net)) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "%ld requests did not end in time",
			   wire_net_in_flight(net));
		return 1;
	}
	wire_net_stop(net);
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, "stopped");
	return 0;
}

int mcp_http_run(struct mcp_proxy *p)
{
	static const struct wire_net_ops ops = {
		.begin = on_begin, .body = on_body, .resume = on_resume, .end = on_end};
	struct wire_net_config cfg = WIRE_NET_DEFAULTS;
	struct ledger_buf extra = LEDGER_BUF_INIT;
	struct wire_net_listener listener;
	struct wire_tls *tls = NULL;
	struct wire_net *net = NULL;
	sigset_t stop;
	char bound[300], err[400];
	int fd = -1, rc = 1;

	srv.p = p;
	if (p->set->listen == NULL || p->set->upstream == NULL ||
	    !mcp_upstream_split(p->set->upstream, &srv.origin, &srv.path)) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "--upstream is not an http(s) URL");
		goto out;
	}
	/* SIGTERM, SIGINT and SIGHUP are the main thread's, by sigwait(); every thread blocks them. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (p->set->tls_cert != NULL &&
	    wire_tls_open(p->set->tls_cert, p->set->tls_key, &tls, err, sizeof(err)) != LEDGER_OK) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "%s", err);
		goto out;
	}
	fd = wire_listen_open(p->set->listen, bound, sizeof(bound), err, sizeof(err));
	if (fd < 0) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "cannot listen on %s: %s", p->set->listen,
			   err);
		goto out;
	}
	listener =
		(struct wire_net_listener){fd, tls, strncmp(p->set->listen, "unix:", 5) != 0, 0};
	cfg.idle_timeout_ms = IDLE_TIMEOUT_MS;
	cfg.max_connections = wire_listen_room(cfg.max_connections, 0);
	cfg.discard_max = MAX_BODY + (size_t)8 * 1024 * 1024;
	if (wire_net_start(&cfg, &ops, &listener, 1, &net) != LEDGER_OK) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "cannot start serving on %s", bound);
		goto out;
	}
	fd = -1; /* the net's now */
	ledger_buf_puts(&extra, "\"address\":");
	ledger_jsonw_escape(&extra, bound, strlen(bound));
	ledger_buf_puts(&extra, tls != NULL ? ",\"tls\":true" : ",\"tls\":false");
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, extra.oom ? NULL : extra.data, "listening");
	rc = serve_until_stopped(net, tls);
	if (rc != 0)
		_exit(rc); /* threads still run: the process ends under them */
	wire_tls_close(tls);
	tls = NULL;
out:
	if (fd >= 0)
		close(fd);
	wire_tls_close(tls);
	ledger_buf_free(&extra);
	free(srv.origin);
	free(srv.path);
	srv.origin = srv.path = NULL;
	return rc;
}
