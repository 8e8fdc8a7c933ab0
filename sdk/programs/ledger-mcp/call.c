/*
 * sdk/programs/ledger-mcp/call.c: an intercepted tools/call of the Streamable HTTP
 * transport. Its thread runs mcp_intercept_run() with the forward of
 * upstream.c and queues the answer's bytes; the connection's thread reads
 * them. The call is shared by both (and by a streamed response), and the
 * last to let go frees it:
 *
 *   WAITING ──the server streams (call_stream)──> STREAMING ──deliver──> the last event
 *      └────────────deliver (a whole answer)────> ANSWERED
 */
#include "sdk/programs/ledger-mcp/call.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "ledger/common/log.h"
#include "sdk/programs/ledger-mcp/intercept.h"
#include "sdk/programs/ledger-mcp/sse.h"

#define MAX_QUEUED (1u << 20) /* bytes queued for a slow client before the stream waits */
#define POLL_MS 100           /* how often a stream's rest looks for the shutdown */

enum call_phase {
	CALL_WAITING,   /* nothing for the client yet */
	CALL_STREAMING, /* the server's event stream began: status and headers are set */
	CALL_ANSWERED,  /* the whole answer is in out: status and headers are set */
};

struct mcp_call {
	pthread_mutex_t lock;
	pthread_cond_t cond;          /* the phase moved, bytes were queued or read */
	unsigned refs;                /* the connection, the thread, a streamed response */
	struct mcp_proxy *p;          /* borrowed */
	struct mcp_upstream_call fwd; /* its forward, read by the thread; the head once in */
	char *url;                    /* where it is forwarded */
	struct mcp_header *headers;   /* the client's, sent with it */
	size_t n_headers;
	struct ledger_buf body; /* the client's bytes; msg borrows from them */
	struct mcp_message msg;
	char *id_key;               /* mcp_message_id_key() of its id */
	char *session;              /* the client's Mcp-Session-Id, or NULL */
	struct mcp_call *next_live; /* calls.live, under calls.lock */
	/* under lock */
	enum call_phase phase;
	bool framed;           /* the client's answer has the server's status and headers */
	struct ledger_buf out; /* bytes for the client; those before out_off are sent */
	size_t out_off;
	bool out_end;     /* nothing more will be queued */
	bool client_gone; /* the request completed: queue nothing more */
};

/* Every call alive, for a cancellation to find and for the shutdown to wait on. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t idle; /* a call ended */
	struct mcp_call *live;
	unsigned count;
	atomic_bool draining;
} calls = {.lock = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER};

void mcp_call_hold(struct mcp_call *c)
{
	pthread_mutex_lock(&c->lock);
	c->refs++;
	pthread_mutex_unlock(&c->lock);
}

void mcp_call_release(struct mcp_call *c)
{
	bool last;

	if (c == NULL)
		return;
	pthread_mutex_lock(&c->lock);
	last = --c->refs == 0;
	pthread_mutex_unlock(&c->lock);
	if (!last)
		return;
	pthread_mutex_lock(&calls.lock);
	for (struct mcp_call **pp = &calls.live; *pp != NULL; pp = &(*pp)->next_live) {
		if (*pp == c) {
			*pp = c->next_live;
			break;
		}
	}
	calls.count--;
	pthread_cond_broadcast(&calls.idle);
	pthread_mutex_unlock(&calls.lock);
	mcp_upstream_call_free(&c->fwd);
	mcp_upstream_headers_free(c->headers, c->n_headers);
	mcp_message_free(&c->msg);
	ledger_buf_free(&c->body);
	ledger_buf_free(&c->out);
	free(c->url);
	free(c->id_key);
	free(c->session);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

void mcp_call_client_gone(struct mcp_call *c)
{
	pthread_mutex_lock(&c->lock);
	c->client_gone = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* mcp_upstream_sink.event: queues bytes for the client; none once it is gone. */
static void call_queue(void *ctx, const char *bytes, size_t n)
{
	struct mcp_call *c = ctx;

	pthread_mutex_lock(&c->lock);
	if (!c->client_gone && n > 0) {
		ledger_buf_append(&c->out, bytes, n);
		pthread_cond_broadcast(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
}

/* mcp_upstream_sink.stream: the server streams; so does the client's answer, at once. */
static void call_stream(void *ctx)
{
	struct mcp_call *c = ctx;

	pthread_mutex_lock(&c->lock);
	c->phase = CALL_STREAMING;
	c->framed = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* The value of the client's header @p name, or NULL. */
static const char *header_of(const struct mcp_call *c, const char *name)
{
	for (size_t i = 0; i < c->n_headers; i++)
		if (strcasecmp(c->headers[i].name, name) == 0)
			return c->headers[i].value;
	return NULL;
}

/*
 * The W3C headers the server gets once the context changed: the span's, in
 * place of the client's, so its HTTP spans nest where its _meta says.
 * @return false when out of memory (the client's headers stay)
 */
static bool set_trace_headers(struct mcp_call *c, const struct mcp_send *send)
{
	size_t cap = c->n_headers;

	c->n_headers = mcp_upstream_headers_drop(c->headers, c->n_headers, "traceparent");
	c->n_headers = mcp_upstream_headers_drop(c->headers, c->n_headers, "tracestate");
	if (!mcp_upstream_headers_add(&c->headers, &c->n_headers, &cap, "traceparent", 11,
				      send->traceparent, strlen(send->traceparent)))
		return false;
	return send->tracestate == NULL ||
	       mcp_upstream_headers_add(&c->headers, &c->n_headers, &cap, "tracestate", 10,
					send->tracestate, strlen(send->tracestate));
}

static void forward(void *ctx, const struct mcp_send *send, struct mcp_forward *out)
{
	struct mcp_call *c = ctx;

	c->fwd.req.body = send->text;
	c->fwd.req.body_len = send->len;
	if (send->traceparent != NULL && !set_trace_headers(c, send))
		LEDGER_LOG(LEDGER_LOG_WARN, NULL, NULL,
			   "out of memory for the trace headers: the server gets the client's");
	c->fwd.req.headers = c->headers;
	c->fwd.req.n_headers = c->n_headers;
	mcp_upstream_forward(&c->fwd, out);
}

/*
 * Puts what mcp_intercept_run() answered where the client gets it: as the
 * last event of a stream already begun, or as the whole answer, in the
 * server's framing when the server answered.
 */
static void deliver(struct mcp_call *c, const struct mcp_answer *a)
{
	const char *text = a->text.data != NULL ? a->text.data : "";

	pthread_mutex_lock(&c->lock);
	if (c->phase == CALL_STREAMING && a->source == MCP_FROM_SERVER) {
		mcp_sse_write(&c->out, c->fwd.event_head.data, c->fwd.event_head.len, text,
			      a->text.len);
	} else if (c->phase == CALL_STREAMING) {
		mcp_sse_write(&c->out, "event: message\n", 15, text, a->text.len);
		c->out_end = true;
	} else if (a->source == MCP_FROM_REFUSAL && c->fwd.answer == MCP_UPSTREAM_ANSWER_REFUSAL) {
		ledger_buf_append(&c->out, c->fwd.refusal.data, c->fwd.refusal.len);
		c->framed = true;
		c->phase = CALL_ANSWERED;
	} else {
		ledger_buf_append(&c->out, text, a->text.len);
		c->framed =
			a->source == MCP_FROM_SERVER && c->fwd.answer == MCP_UPSTREAM_ANSWER_JSON;
		c->phase = CALL_ANSWERED;
	}
	if (c->phase == CALL_ANSWERED)
		c->out_end = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* After the response event: the rest of the server's stream, as it comes. */
static void pass_rest(struct mcp_call *c)
{
	size_t n = 0;
	const char *bytes = mcp_sse_held(&c->fwd.events, &n);

	call_queue(c, bytes, n);
	for (;;) {
		bool gone;

		bytes = mcp_upstream_bytes(c->fwd.up, &n);
		call_queue(c, bytes, n);
		mcp_upstream_consume(c->fwd.up, n);
		if (mcp_upstream_outcome(c->fwd.up, NULL, 0) != MCP_UPSTREAM_RUNNING)
			return;
		pthread_mutex_lock(&c->lock);
		while (!c->client_gone && c->out.len - c->out_off > MAX_QUEUED)
			pthread_cond_wait(&c->cond, &c->lock);
		gone = c->client_gone;
		pthread_mutex_unlock(&c->lock);
		if (gone || atomic_load(&calls.draining))
			return;
		mcp_upstream_pump(c->fwd.up, POLL_MS);
	}
}

static void *call_main(void *arg)
{
	struct mcp_call *c = arg;
	struct mcp_answer a = {0};

	/* Copies: the forward may put others in the headers' place. */
	char *tp = header_of(c, "traceparent") != NULL ? strdup(header_of(c, "traceparent")) : NULL;
	char *ts = header_of(c, "tracestate") != NULL ? strdup(header_of(c, "tracestate")) : NULL;
	const struct mcp_origin origin = {c->body.data, c->body.len, tp, ts};

	if (mcp_intercept_run(c->p, &c->msg, &origin, forward, c, &a) != LEDGER_OK || a.text.oom) {
		ledger_buf_free(&a.text);
		a.source = MCP_FROM_PROXY;
		mcp_message_error(&a.text, c->msg.id, -32603, "ledger-mcp: out of memory", NULL);
	}
	deliver(c, &a);
	if (c->phase == CALL_STREAMING && a.source == MCP_FROM_SERVER)
		pass_rest(c);
	pthread_mutex_lock(&c->lock);
	c->out_end = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	ledger_buf_free(&a.text);
	free(tp);
	free(ts);
	mcp_call_release(c);
	return NULL;
}

ssize_t mcp_call_read(struct mcp_call *c, char *buf, size_t max)
{
	bool broken;
	size_t n;

	pthread_mutex_lock(&c->lock);
	while (c->out_off == c->out.len && !c->out_end)
		pthread_cond_wait(&c->cond, &c->lock);
	n = c->out.len - c->out_off < max ? c->out.len - c->out_off : max;
	if (n > 0)
		memcpy(buf, c->out.data + c->out_off, n);
	c->out_off += n;
	if (c->out_off == c->out.len)
		c->out.len = c->out_off = 0;
	broken = c->out.oom;
	pthread_cond_broadcast(&c->cond); /* room for pass_rest() */
	pthread_mutex_unlock(&c->lock);
	if (n > 0)
		return (ssize_t)n;
	return broken ? -1 : 0;
}

/* The client's Mcp-Session-Id among @p n headers, copied; NULL if none. */
static char *session_of(const struct mcp_header *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(h[i].name, "Mcp-Session-Id") == 0)
			return strdup(h[i].value);
	return NULL;
}

/*
 * notifications/cancelled of an intercepted call of the same session: the
 * forward waits for the server's answer one lease more, then gives up (the
 * claim stays: a cancellation is no proof that nothing ran).
 */
void mcp_call_cancel(const struct mcp_header *headers, size_t n_headers,
		     const struct mcp_message *m)
{
	const struct ledger_json_value *params = ledger_json_get(m->root, "params");
	char *key = mcp_message_id_key(ledger_json_get(params, "requestId"));
	char *session = session_of(headers, n_headers);
	uint64_t none = 0;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	pthread_mutex_lock(&calls.lock);
	for (struct mcp_call *c = calls.live; c != NULL && key != NULL; c = c->next_live) {
		if (c->id_key == NULL || strcmp(c->id_key, key) != 0 ||
		    (c->session == NULL) != (session == NULL) ||
		    (session != NULL && strcmp(c->session, session) != 0))
			continue;
		atomic_compare_exchange_strong(&c->fwd.cancelled_ms, &none,
					       (uint64_t)ts.tv_sec * 1000 +
						       (uint64_t)ts.tv_nsec / 1000000);
	}
	pthread_mutex_unlock(&calls.lock);
	free(session);
	free(key);
}

struct mcp_call *mcp_call_start(struct mcp_proxy *p, char *url, struct mcp_header *headers,
				size_t n_headers, struct ledger_buf *body, struct mcp_message *msg)
{
	struct mcp_call *c = calloc(1, sizeof(*c));
	pthread_attr_t attr;
	pthread_t thread;
	int rc;

	if (c == NULL) {
		free(url);
		mcp_upstream_headers_free(headers, n_headers);
		mcp_message_free(msg);
		ledger_buf_free(body);
		return NULL;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->refs = 2; /* the caller's and the thread's */
	c->p = p;
	/* The message borrows the body's bytes, which move with it unchanged. */
	c->body = *body;
	*body = (struct ledger_buf)LEDGER_BUF_INIT;
	c->msg = *msg;
	memset(msg, 0, sizeof(*msg));
	/* The answer is read: it must come uncompressed. */
	c->n_headers = mcp_upstream_headers_drop(headers, n_headers, "Accept-Encoding");
	c->headers = headers;
	c->url = url;
	c->id_key = mcp_message_id_key(c->msg.id);
	c->session = session_of(c->headers, c->n_headers);
	c->fwd.req = (struct mcp_upstream_request){"POST",       c->url,       c->headers,
						   c->n_headers, c->body.data, c->body.len};
	c->fwd.id_key = c->id_key;
	c->fwd.timeout_ms = p->set->call_timeout_ms;
	c->fwd.cancel_grace_ms = p->set->lease_ms;
	c->fwd.sink = (struct mcp_upstream_sink){c, call_stream, call_queue};
	pthread_mutex_lock(&calls.lock);
	c->next_live = calls.live;
	calls.live = c;
	calls.count++;
	pthread_mutex_unlock(&calls.lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&thread, &attr, call_main, c);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		c->refs = 1; /* no thread: nothing was claimed or sent */
		mcp_call_release(c);
		return NULL;
	}
	return c;
}

bool mcp_call_head(struct mcp_call *c, struct mcp_call_head *out)
{
	bool ok = true;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&c->lock);
	while (c->phase == CALL_WAITING)
		pthread_cond_wait(&c->cond, &c->lock);
	out->stream = c->phase == CALL_STREAMING;
	if (!out->stream) {
		/* Whole: nothing is queued after it, so the bytes stay as they are. */
		ok = !c->out.oom;
		out->body = c->out.data != NULL ? c->out.data : "";
		out->len = c->out.len;
	}
	if (c->framed && mcp_upstream_head(c->fwd.up, &out->status))
		out->headers = mcp_upstream_headers(c->fwd.up, &out->n_headers);
	else
		out->status = 200;
	pthread_mutex_unlock(&c->lock);
	return ok;
}

void mcp_call_drain(void)
{
	atomic_store(&calls.draining, true);
	pthread_mutex_lock(&calls.lock);
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, "stopping: %u call(s) in flight", calls.count);
	while (calls.count > 0)
		pthread_cond_wait(&calls.idle, &calls.lock);
	pthread_mutex_unlock(&calls.lock);
}
