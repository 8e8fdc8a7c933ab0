/*
 * sdk/programs/ledger-mcp/http.c: ledger-mcp in front of a Streamable HTTP server. Every
 * request is forwarded to the server's origin and its answer streamed back
 * as it comes. A POSTed tools/call that names its ledger key runs through
 * mcp_intercept_run() on a thread of its own, so that its SSE events reach
 * the client live while the call is claimed, forwarded and recorded, and a
 * client that leaves mid-call stops neither the call nor its recording.
 */
#include "sdk/programs/ledger-mcp/http.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "ledger/common/buf.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"
#include "sdk/programs/ledger-mcp/intercept.h"
#include "sdk/programs/ledger-mcp/message.h"
#include "sdk/programs/ledger-mcp/call.h"
#include "sdk/programs/ledger-mcp/upstream.h"

#define MAX_BODY (32u << 20) /* a request body past this is refused: 413 */
#define POLL_MS 100          /* how often a waiting reader looks for the shutdown */
#define IDLE_TIMEOUT_S 300u  /* a keep-alive connection without a request is closed */
#define DRAIN_MS 10000u      /* how long passed-through requests may end once stopping */
#define END_MS 2000u         /* how long the streams left may take to end cleanly */
#define CHUNK (32u << 10)    /* the most written to the client at once */

static struct {
	struct mcp_proxy *p;  /* borrowed for the run */
	char *origin;         /* the upstream's scheme://host:port */
	char *path;           /* the upstream URL's path: the POSTs to it are read */
	pthread_mutex_t lock; /* guards the counts */
	pthread_cond_t idle;  /* a count went down */
	unsigned passing;     /* passed-through requests other than GET in flight */
	unsigned open;        /* requests not yet completed, GET streams included */
	atomic_bool draining; /* a signal came: no new connection, finish what runs */
	atomic_bool stopping; /* drained: end the streams left (GET streams) */
} srv = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* One client request, from its URI to its completion. */
struct exchange {
	char *url;                  /* where it goes: the upstream's origin, then uri */
	const char *uri;            /* path and query exactly as the client sent them */
	bool started;               /* the first access-handler call was made */
	bool oom;                   /* a header could not be kept */
	struct mcp_header *headers; /* the client's, less hop-by-hop ones */
	size_t n_headers, cap_headers;
	struct ledger_buf body;
	bool too_large;
	bool counted;                /* counted in srv.passing */
	struct mcp_upstream *up;     /* a passed-through request's transfer */
	struct mcp_upstream_tap tap; /* a tools/list answer, read for hints */
	long long length;            /* the answer's Content-Length, -1 if none */
	struct mcp_call *call;       /* an intercepted call: one reference */
};

/* Adds @p n header fields to @p r but the hop-by-hop ones. */
static void add_headers(struct MHD_Response *r, const struct mcp_header *h, size_t n)
{
	const char *connection = NULL;

	for (size_t i = 0; i < n; i++)
		if (strcasecmp(h[i].name, "Connection") == 0)
			connection = h[i].value;
	for (size_t i = 0; i < n; i++)
		if (!mcp_upstream_hop_by_hop(h[i].name, connection))
			MHD_add_response_header(r, h[i].name, h[i].value);
}

static enum MHD_Result queue(struct MHD_Connection *conn, unsigned status, struct MHD_Response *r)
{
	enum MHD_Result ret;

	if (r == NULL)
		return MHD_NO;
	if (atomic_load(&srv.draining))
		MHD_add_response_header(r, "Connection", "close"); /* no next request here */
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned status, const char *json,
				  size_t len)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, (void *)json, MHD_RESPMEM_MUST_COPY);

	if (r != NULL)
		MHD_add_response_header(r, "Content-Type", "application/json");
	return queue(conn, status, r);
}

/* The proxy's own HTTP error: {"error":{"code":CODE,"message":MESSAGE}}. */
static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status, const char *code,
				   const char *message)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	enum MHD_Result ret = MHD_NO;

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
	if (!b.oom)
		ret = reply_json(conn, status, b.data, b.len);
	ledger_buf_free(&b);
	return ret;
}

/* --- passing a request through --- */

static ssize_t pass_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct exchange *x = cls;

	for (;;) {
		size_t n = 0;
		const char *bytes = mcp_upstream_bytes(x->up, &n);

		if (n > 0) {
			n = n < max ? n : max;
			memcpy(buf, bytes, n);
			mcp_upstream_consume(x->up, n);
			mcp_upstream_tap_feed(&x->tap, srv.p, buf, n);
			/* With a length, the reader is not called past the last byte. */
			if (x->length >= 0 && pos + n == (uint64_t)x->length)
				mcp_upstream_tap_end(&x->tap, srv.p);
			return (ssize_t)n;
		}
		switch (mcp_upstream_outcome(x->up, NULL, 0)) {
		case MCP_UPSTREAM_RUNNING:
			break;
		case MCP_UPSTREAM_COMPLETE:
			mcp_upstream_tap_end(&x->tap, srv.p);
			return MHD_CONTENT_READER_END_OF_STREAM;
		default:
			return MHD_CONTENT_READER_END_WITH_ERROR; /* the server's answer broke off */
		}
		if (atomic_load(&srv.stopping))
			return MHD_CONTENT_READER_END_OF_STREAM;
		mcp_upstream_pump(x->up, POLL_MS);
	}
}

/*
 * Forwards the request as it came and streams the answer back. With @p tap
 * (a tools/list under --trust-annotations) the answer is also read for
 * hints, so it is asked for uncompressed.
 */
static enum MHD_Result pass(struct MHD_Connection *conn, const char *method, struct exchange *x,
			    bool tap)
{
	struct mcp_upstream_request req = {0};
	struct MHD_Response *r = NULL;
	char why[256];
	long status = 0;

	if (tap) /* read, so asked for uncompressed */
		x->n_headers =
			mcp_upstream_headers_drop(x->headers, x->n_headers, "Accept-Encoding");
	if (strcmp(method, "GET") != 0) {
		pthread_mutex_lock(&srv.lock);
		srv.passing++;
		pthread_mutex_unlock(&srv.lock);
		x->counted = true;
	}
	req = (struct mcp_upstream_request){method,       x->url,       x->headers,
					    x->n_headers, x->body.data, x->body.len};
	if (mcp_upstream_open(&req, &x->up) != LEDGER_OK)
		return reply_error(conn, 500, "internal", "out of memory");
	while (!mcp_upstream_head(x->up, &status) &&
	       mcp_upstream_outcome(x->up, why, sizeof(why)) == MCP_UPSTREAM_RUNNING &&
	       !atomic_load(&srv.stopping))
		mcp_upstream_pump(x->up, POLL_MS);
	if (!mcp_upstream_head(x->up, &status)) {
		mcp_upstream_outcome(x->up, why, sizeof(why));
		LEDGER_LOG(LEDGER_LOG_WARN, NULL, "\"status\":502", "upstream unreachable: %s",
			   why);
		return reply_error(conn, 502, "upstream_unreachable", why);
	}
	x->length = mcp_upstream_length(x->up);
	if (strcmp(method, "HEAD") == 0 || status < 200 || status == 204 || status == 304)
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	else
		r = MHD_create_response_from_callback(x->length >= 0 ? (uint64_t)x->length
								     : MHD_SIZE_UNKNOWN,
						      CHUNK, pass_read, x, NULL);
	x->tap.on = tap;
	mcp_upstream_tap_start(&x->tap, x->up);
	if (r != NULL) {
		size_t n = 0;
		const struct mcp_header *h = mcp_upstream_headers(x->up, &n);

		add_headers(r, h, n);
	}
	return queue(conn, (unsigned)status, r);
}

/* --- an intercepted call (call.c runs it) --- */

/* MHD_ContentReaderCallback of a streamed call: what the call's thread queued. */
static ssize_t call_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	ssize_t n = mcp_call_read(cls, buf, max);

	(void)pos;
	if (n > 0)
		return n;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void call_response_free(void *cls)
{
	mcp_call_release(cls);
}

/* Runs a keyed tools/call on its thread; answers once its first bytes are known. */
static enum MHD_Result serve_call(struct MHD_Connection *conn, struct exchange *x,
				  struct mcp_message *msg)
{
	struct mcp_call *c = mcp_call_start(srv.p, x->url, x->headers, x->n_headers, &x->body, msg);
	struct MHD_Response *r = NULL;
	struct mcp_call_head head;

	x->url = NULL; /* the call's now; x->uri, into it, is not read again */
	x->headers = NULL;
	x->n_headers = x->cap_headers = 0;
	if (c == NULL)
		return reply_error(conn, 503, "internal", "no memory or thread for the call");
	x->call = c;
	if (!mcp_call_head(c, &head))
		return reply_error(conn, 500, "internal", "out of memory");
	if (!head.stream) {
		r = MHD_create_response_from_buffer(head.len, (void *)head.body,
						    MHD_RESPMEM_MUST_COPY);
	} else {
		mcp_call_hold(c); /* the response's, dropped by call_response_free() */
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, CHUNK, call_read, c,
						      call_response_free);
		if (r == NULL)
			mcp_call_release(c);
	}
	if (r == NULL)
		return reply_error(conn, 500, "internal", "out of memory");
	if (head.headers != NULL)
		add_headers(r, head.headers, head.n_headers);
	else
		MHD_add_response_header(r, "Content-Type", "application/json");
	return queue(conn, (unsigned)head.status, r);
}

/* --- libmicrohttpd's callbacks --- */

/*
 * MHD_OPTION_URI_LOG_CALLBACK: the request's state is made here rather than
 * in the first access-handler call because only here is the URI whole:
 * libmicrohttpd gives the handler its path decoded and its query parsed.
 */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct exchange *x = calloc(1, sizeof(*x));

	(void)cls, (void)conn;
	if (x == NULL)
		return NULL;
	if (asprintf(&x->url, "%s%s", srv.origin, uri) < 0) {
		free(x);
		return NULL;
	}
	x->uri = x->url + strlen(srv.origin);
	pthread_mutex_lock(&srv.lock);
	srv.open++;
	pthread_mutex_unlock(&srv.lock);
	return x;
}

struct collect {
	struct exchange *x;
	const char *connection; /* the client's Connection header */
};

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
				      const char *value)
{
	struct collect *k = cls;
	struct exchange *x = k->x;

	(void)kind;
	/* Expect was answered here; libmicrohttpd read the body whole. */
	if (mcp_upstream_hop_by_hop(key, k->connection) || strcasecmp(key, "Expect") == 0)
		return MHD_YES;
	if (value == NULL)
		value = "";
	x->oom = !mcp_upstream_headers_add(&x->headers, &x->n_headers, &x->cap_headers, key,
					   strlen(key), value, strlen(value));
	return x->oom ? MHD_NO : MHD_YES;
}

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
static enum MHD_Result serve_post(struct MHD_Connection *conn, struct exchange *x)
{
	struct mcp_message msg = {0};
	struct ledger_buf answer = LEDGER_BUF_INIT;
	enum MHD_Result ret;

	if (mcp_message_parse(x->body.data != NULL ? x->body.data : "", x->body.len, &msg) !=
	    LEDGER_OK) {
		ret = pass(conn, "POST", x, false); /* not JSON: the server answers it */
		goto out;
	}
	switch (mcp_intercept_plan(srv.p, &msg, &answer)) {
	case MCP_PLAN_REFUSE:
		ret = answer.oom ? reply_error(conn, 500, "internal", "out of memory")
				 : reply_json(conn, 200, answer.data, answer.len);
		break;
	case MCP_PLAN_CLAIM:
		ret = serve_call(conn, x, &msg);
		break;
	default:
		if (msg.kind == MCP_MSG_NOTIFICATION &&
		    strcmp(msg.method, "notifications/cancelled") == 0)
			mcp_call_cancel(x->headers, x->n_headers, &msg);
		ret = pass(conn, "POST", x, is_tools_list(&msg));
		break;
	}
out:
	mcp_message_free(&msg);
	ledger_buf_free(&answer);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **req_cls)
{
	struct exchange *x = *req_cls;

	(void)cls, (void)url, (void)version;
	if (x == NULL)
		return MHD_NO; /* out of memory in on_uri() */
	if (!x->started) {
		struct collect k = {
			x, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Connection")};

		x->started = true;
		/* A request waits on its server as long as that takes (a GET stream: hours). */
		MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
		MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_header, &k);
		return x->oom ? MHD_NO : MHD_YES;
	}
	if (*upload_size != 0) {
		if (x->body.len + *upload_size > MAX_BODY)
			x->too_large = true;
		else
			ledger_buf_append(&x->body, upload, *upload_size);
		*upload_size = 0;
		return x->body.oom ? MHD_NO : MHD_YES;
	}
	if (x->too_large)
		return reply_error(conn, 413, "body_too_large", "the request body is over 32 MiB");
	if (x->uri[0] != '/')
		return reply_error(conn, 400, "bad_request", "the request target is not a path");
	if (strcmp(method, "POST") == 0 && on_path(x->uri))
		return serve_post(conn, x);
	return pass(conn, method, x, false);
}

/* The request is over: its answer was sent or its client went away. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
			 enum MHD_RequestTerminationCode why)
{
	struct exchange *x = *req_cls;

	(void)cls, (void)why;
	if (x == NULL)
		return;
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, IDLE_TIMEOUT_S);
	if (x->call != NULL) {
		/* The call goes on: its thread still records what the server answers. */
		mcp_call_client_gone(x->call);
		mcp_call_release(x->call);
	}
	mcp_upstream_close(x->up); /* a passed-through stream ends with its client */
	mcp_upstream_tap_free(&x->tap);
	mcp_upstream_headers_free(x->headers, x->n_headers);
	ledger_buf_free(&x->body);
	pthread_mutex_lock(&srv.lock);
	srv.passing -= x->counted ? 1 : 0;
	srv.open--;
	pthread_cond_broadcast(&srv.idle);
	pthread_mutex_unlock(&srv.lock);
	free(x->url);
	free(x);
	*req_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/* libmicrohttpd's own messages, as log lines like every other. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char text[256];
	size_t n;

	(void)cls;
	vsnprintf(text, sizeof(text), fmt, ap);
	n = strlen(text);
	while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
		text[--n] = '\0';
	LEDGER_LOG(LEDGER_LOG_WARN, NULL, NULL, "libmicrohttpd: %s", text);
}

/* --- start and stop --- */

/*
 * Binds HOST:PORT (PORT 0: a free one; HOST a name, an IPv4 address or
 * [IPv6]) and says in @p bound which address it got.
 * @return the listening socket, or -1 (logged)
 */
static int listen_on(const char *spec, char *bound, size_t bound_len, bool *v6)
{
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
				 .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	char host[256], addr[NI_MAXHOST], port[NI_MAXSERV];
	int fd = -1, one = 1, rc;

	if (colon == NULL || (size_t)(colon - spec) >= sizeof(host)) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "--listen is HOST:PORT");
		return -1;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	rc = getaddrinfo(host[0] != '\0' ? host : NULL, colon + 1, &hints, &res);
	if (rc != 0) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "cannot listen on %s: %s", spec,
			   gai_strerror(rc));
		return -1;
	}
	for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
		    bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
			close(fd);
			fd = -1;
		}
	}
	rc = errno;
	freeaddrinfo(res);
	if (fd < 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0 ||
	    getnameinfo((struct sockaddr *)&sa, len, addr, sizeof(addr), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "cannot listen on %s: %s", spec,
			   strerror(rc));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*v6 = sa.ss_family == AF_INET6;
	snprintf(bound, bound_len, *v6 ? "[%s]:%s" : "%s:%s", addr, port);
	return fd;
}

/* Waits under srv.lock until *count is 0, or @p ms passed (0: no bound). */
static void wait_zero(const unsigned *count, unsigned ms)
{
	struct timespec until;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += ms / 1000u;
	until.tv_nsec += (long)(ms % 1000u) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	while (*count > 0) {
		if (ms == 0)
			pthread_cond_wait(&srv.idle, &srv.lock);
		else if (pthread_cond_timedwait(&srv.idle, &srv.lock, &until) != 0)
			return;
	}
}

/*
 * Stops listening, waits for the calls in flight, gives the other requests
 * a while, then ends the streams left (GET streams) with their last chunk.
 */
static void drain(struct MHD_Daemon *d)
{
	MHD_socket fd;

	atomic_store(&srv.draining, true);
	fd = MHD_quiesce_daemon(d);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	mcp_call_drain();
	pthread_mutex_lock(&srv.lock);
	wait_zero(&srv.passing, DRAIN_MS);
	atomic_store(&srv.stopping, true); /* the readers left end their streams now */
	wait_zero(&srv.open, END_MS);
	pthread_mutex_unlock(&srv.lock);
	MHD_stop_daemon(d);
}

int mcp_http_run(struct mcp_proxy *p)
{
	struct MHD_Daemon *d = NULL;
	struct ledger_buf extra = LEDGER_BUF_INIT;
	pthread_condattr_t attr;
	sigset_t stop;
	char bound[NI_MAXHOST + NI_MAXSERV + 4];
	int fd = -1, sig = 0, rc = 1;
	bool v6 = false;

	srv.p = p;
	if (p->set->listen == NULL || p->set->upstream == NULL ||
	    !mcp_upstream_split(p->set->upstream, &srv.origin, &srv.path)) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "--upstream is not an http(s) URL");
		goto out;
	}
	/* SIGTERM and SIGINT are the main thread's, by sigwait(); every thread blocks them. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&srv.idle, &attr);
	pthread_condattr_destroy(&attr);

	fd = listen_on(p->set->listen, bound, sizeof(bound), &v6);
	if (fd < 0)
		goto out;
	/* A thread per connection: each blocks on its server and on ledgerd. */
	d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
				     MHD_USE_POLL | MHD_USE_ITC | (v6 ? MHD_USE_IPv6 : 0),
			     0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
			     MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL, MHD_OPTION_NOTIFY_COMPLETED,
			     on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT_S,
			     MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL, MHD_OPTION_END);
	if (d == NULL) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "libmicrohttpd would not start");
		goto out;
	}
	fd = -1; /* the daemon's now */
	ledger_buf_puts(&extra, "\"address\":");
	ledger_jsonw_escape(&extra, bound, strlen(bound));
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, extra.oom ? NULL : extra.data, "listening");
	while (sigwait(&stop, &sig) != 0)
		;
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, "signal %d: stopping", sig);
	drain(d);
	d = NULL;
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, "stopped");
	rc = 0;
out:
	if (d != NULL)
		MHD_stop_daemon(d);
	if (fd >= 0)
		close(fd);
	ledger_buf_free(&extra);
	free(srv.origin);
	free(srv.path);
	srv.origin = srv.path = NULL;
	return rc;
}
