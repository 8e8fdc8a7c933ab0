/*
 * api/wire/stream.c: replies written by a thread of the server's own
 * (api/wire/stream.h). The thread and the connection's polling thread
 * share a pipe: the thread frames what it sends into the pipe's buffer,
 * under the pipe's lock, and kicks the polling thread; the polling thread
 * takes the whole buffer once it wrote the previous one (api/wire/conn.c,
 * C_STREAM), so a slow client holds at most two buffers' worth, and a
 * thread that filled its buffer waits for the swap. The thread's function
 * returning hands the call back (stream_main()); until then the connection
 * is never freed, even once its client is gone. The thread is one of
 * ledger/common/workers.c's: a reply does not make a thread of its own.
 */
#include "api/wire/stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/wire/net_int.h"
#include "ledger/common/workers.h"

struct wire_pipe {
	pthread_mutex_t lock;
	pthread_cond_t room; /* the polling thread took the buffer, or the client left */
	/* Fixed when the call is handed off, on the polling thread. */
	unsigned minor;     /* the request's HTTP/1.<minor> */
	bool head_only;     /* a HEAD request: the body is never sent */
	bool keep_alive;    /* the connection may serve another request after this one */
	/* Under lock. */
	struct ledger_buf out; /* framed bytes the polling thread has not taken yet */
	bool kicked;           /* a kick is on its way to the polling thread */
	bool gone;             /* the client is gone: nothing more is queued */
	bool head_sent, ended, complete;
	bool chunked;      /* the body goes in chunks */
	bool bodiless;     /* the status has no body (1xx, 204, 304) */
	bool close_after;  /* the connection closes after the reply */
	int64_t length;    /* the Content-Length promised; -1: none */
	uint64_t body_len; /* body bytes queued so far */
};

/* What the thread of a handed-off call starts with. */
struct start {
	struct wire_conn *conn;
	void *(*run)(void *);
	void *arg;
};

/*
 * The thread of a handed-off call: the server's function, then the end of
 * a reply it left unended (cut short), then the call handed back: the
 * thread's last touch of the connection, which may be freed at once.
 */
static void stream_main(void *arg)
{
	struct start s = *(struct start *)arg;
	bool ended;

	free(arg);
	s.run(s.arg);
	pthread_mutex_lock(&s.conn->pipe->lock);
	ended = s.conn->pipe->ended;
	pthread_mutex_unlock(&s.conn->pipe->lock);
	if (!ended)
		wire_stream_end(s.conn, false);
	wire_wake_push(s.conn, WIRE_WAKE_RELEASE);
}

enum ledger_err wire_stream_start(struct wire_conn *c, void *(*run)(void *), void *arg)
{
	struct wire_pipe *p = calloc(1, sizeof(*p));
	struct start *s = malloc(sizeof(*s));

	if (p == NULL || s == NULL) {
		free(p);
		free(s);
		return LEDGER_ERR_NOMEM;
	}
	*s = (struct start){c, run, arg};
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->room, NULL);
	p->minor = c->head.minor;
	p->head_only = strcmp(c->head.method, "HEAD") == 0;
	/* A body the server did not read cannot be skipped on a stream: the connection ends. */
	p->keep_alive = c->head.keep_alive && (c->head.body == WIRE_HTTP_BODY_NONE || c->body_done);
	p->length = -1;
	c->pipe = p;
	c->held = true;
	if (!ledger_workers_run(stream_main, s)) {
		c->pipe = NULL;
		c->held = false;
		wire_stream_free(p);
		free(s);
		return LEDGER_ERR_NOMEM;
	}
	return LEDGER_OK;
}

/* Under the pipe's lock: asks the polling thread to take what is queued, once. */
static void kick(struct wire_conn *c, struct wire_pipe *p)
{
	if (!p->kicked) {
		p->kicked = true;
		wire_wake_push(c, WIRE_WAKE_KICK);
	}
}

enum ledger_err wire_stream_head(struct wire_conn *c, unsigned status, const char *headers,
				 int64_t length)
{
	struct wire_pipe *p = c->pipe;
	char framing[64] = "";
	size_t cap = 512 + (headers != NULL ? strlen(headers) : 0), n;
	enum ledger_err rc = LEDGER_OK;
	char *head = malloc(cap);

	if (head == NULL)
		return LEDGER_ERR_NOMEM;
	pthread_mutex_lock(&p->lock);
	if (p->gone || p->head_sent) {
		rc = LEDGER_ERR_UNAVAILABLE;
		goto out;
	}
	p->bodiless = wire_http_bodiless(status);
	p->close_after = !p->keep_alive || atomic_load(&c->net->draining);
	if (p->bodiless) {
		p->length = 0;
	} else if (length >= 0) {
		p->length = length;
		snprintf(framing, sizeof(framing), "Content-Length: %lld\r\n", (long long)length);
	} else if (p->minor >= 1) {
		p->chunked = true;
		snprintf(framing, sizeof(framing), "Transfer-Encoding: chunked\r\n");
	} else {
		p->close_after = true; /* HTTP/1.0: the body ends where the connection does */
	}
	n = wire_http_format_head(head, cap, status, time(NULL), framing, headers,
				  p->close_after ? "close"
				  : p->minor == 0 ? "keep-alive"
						  : NULL);
	if (n == 0) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	ledger_buf_append(&p->out, head, n);
	p->head_sent = true;
	kick(c, p);
out:
	pthread_mutex_unlock(&p->lock);
	free(head);
	return rc;
}

enum ledger_err wire_stream_write(struct wire_conn *c, const void *data, size_t len)
{
	struct wire_pipe *p = c->pipe;
	enum ledger_err rc = LEDGER_OK;

	pthread_mutex_lock(&p->lock);
	while (!p->gone && p->out.len >= WIRE_STREAM_QUEUE_MAX)
		pthread_cond_wait(&p->room, &p->lock);
	if (p->gone || !p->head_sent || p->ended) {
		rc = LEDGER_ERR_UNAVAILABLE;
		goto out;
	}
	if (p->length >= 0 && p->body_len + len > (uint64_t)p->length)
		len = (size_t)((uint64_t)p->length - p->body_len); /* never past the length */
	p->body_len += len;
	if (len == 0 || p->head_only || p->bodiless)
		goto out;
	if (p->chunked)
		ledger_buf_printf(&p->out, "%zx\r\n", len);
	ledger_buf_append(&p->out, data, len);
	if (p->chunked)
		ledger_buf_append(&p->out, "\r\n", 2);
	if (p->out.oom) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	kick(c, p);
out:
	pthread_mutex_unlock(&p->lock);
	return rc;
}

bool wire_stream_gone(struct wire_conn *c)
{
	struct wire_pipe *p = c->pipe;
	bool gone;

	pthread_mutex_lock(&p->lock);
	gone = p->gone;
	pthread_mutex_unlock(&p->lock);
	return gone;
}

void wire_stream_end(struct wire_conn *c, bool complete)
{
	struct wire_pipe *p = c->pipe;

	pthread_mutex_lock(&p->lock);
	if (!p->ended) {
		complete = complete && p->head_sent && !p->out.oom &&
			   (p->head_only || p->length < 0 || p->body_len == (uint64_t)p->length);
		if (complete && p->chunked && !p->head_only)
			ledger_buf_append(&p->out, "0\r\n\r\n", 5);
		p->complete = complete && !p->out.oom;
		p->ended = true;
		kick(c, p); /* what is left goes out while the thread cleans up */
	}
	pthread_mutex_unlock(&p->lock);
}

/* --- the polling thread's side (api/wire/net_int.h) --- */

enum wire_stream_pull wire_stream_pull(struct wire_conn *c, bool *close_after, char **out,
				       size_t *len)
{
	struct wire_pipe *p = c->pipe;
	enum wire_stream_pull r = WIRE_STREAM_WAIT;

	*out = NULL;
	*len = 0;
	pthread_mutex_lock(&p->lock);
	p->kicked = false;
	if (p->out.len > 0) {
		*out = ledger_buf_steal(&p->out, len);
		pthread_cond_broadcast(&p->room);
		r = *out != NULL ? WIRE_STREAM_MORE : WIRE_STREAM_CUT;
	} else if (p->ended && !c->held) {
		r = p->complete ? WIRE_STREAM_DONE : WIRE_STREAM_CUT;
	}
	*close_after = p->close_after;
	pthread_mutex_unlock(&p->lock);
	return r;
}

void wire_stream_lost(struct wire_pipe *p)
{
	pthread_mutex_lock(&p->lock);
	p->gone = true;
	ledger_buf_free(&p->out);
	pthread_cond_broadcast(&p->room);
	pthread_mutex_unlock(&p->lock);
}

void wire_stream_free(struct wire_pipe *p)
{
	if (p == NULL)
		return;
	ledger_buf_free(&p->out);
	pthread_cond_destroy(&p->room);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
