/*
 * api/wire/conn.c: a connection of api/wire/net.h, on the polling thread that
 * accepted it (api/wire/net.c): its I/O, plain or TLS, its replies, the
 * actions the server takes on its call (api/wire/conn.h), and its state
 * machine:
 *
 *   HANDSHAKE (TLS) -> HEAD -> CALL -> [BODY] -> CALL -> [DROP] -> WRITE
 *                       ^                                  \-> STREAM   |
 *                       '------------- keep-alive ---------------------'
 *                                                   or LINGER -> closed
 *
 * STREAM is a call handed to a thread of the server's (api/wire/stream.c):
 * what the thread queues is written as it comes, the client is watched
 * for EOF meanwhile, and the call ends once the thread let go.
 *
 * Every state but CALL has a deadline, checked once a second by its
 * thread (api/wire/net.c): a head
 * must be whole within --head-timeout of its first byte, a body within
 * --body-timeout of its head, and nothing may sit idle past
 * --idle-timeout. In CALL the server owns the call and bounds it itself.
 */
#include "api/wire/conn.h"
#include "api/wire/net_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/wire/stats.h"
#include "api/wire/tls.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"

int64_t wire_conn_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- I/O, plain or TLS --- */

enum io {
	IO_OK,    /* bytes moved */
	IO_AGAIN, /* would block; conn->events says on what */
	IO_EOF,   /* the peer closed */
	IO_ERROR, /* the connection is broken */
};

/* What a TLS operation waits for, from SSL_get_error(). */
static enum io tls_wait(struct wire_conn *c, int r, unsigned *want)
{
	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		*want = EPOLLIN;
		return IO_AGAIN;
	case SSL_ERROR_WANT_WRITE:
		*want = EPOLLOUT;
		return IO_AGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return IO_EOF;
	default:
		ERR_clear_error();
		return IO_ERROR;
	}
}

static enum io io_read(struct wire_conn *c, char *buf, size_t len, size_t *got, unsigned *want)
{
	*want = EPOLLIN;
	if (c->ssl != NULL) {
		int r = SSL_read(c->ssl, buf, (int)(len > INT32_MAX ? INT32_MAX : len));

		if (r > 0) {
			*got = (size_t)r;
			return IO_OK;
		}
		return tls_wait(c, r, want);
	}
	for (;;) {
		ssize_t r = recv(c->fd, buf, len, 0);

		if (r > 0) {
			*got = (size_t)r;
			return IO_OK;
		}
		if (r == 0)
			return IO_EOF;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN || errno == EWOULDBLOCK ? IO_AGAIN : IO_ERROR;
	}
}

static enum io io_write(struct wire_conn *c, const char *buf, size_t len, size_t *put,
			unsigned *want)
{
	*want = EPOLLOUT;
	if (c->ssl != NULL) {
		int r = SSL_write(c->ssl, buf, (int)(len > INT32_MAX ? INT32_MAX : len));

		if (r > 0) {
			*put = (size_t)r;
			return IO_OK;
		}
		return tls_wait(c, r, want);
	}
	for (;;) {
		ssize_t r = send(c->fd, buf, len, MSG_NOSIGNAL);

		if (r >= 0) {
			*put = (size_t)r;
			return IO_OK;
		}
		if (errno == EINTR)
			continue;
		return errno == EAGAIN || errno == EWOULDBLOCK ? IO_AGAIN : IO_ERROR;
	}
}

/* --- connections --- */

static void set_events(struct wire_conn *c, unsigned events)
{
	struct epoll_event ev = {.events = events, .data.ptr = c};

	if (events == c->events)
		return;
	c->events = events;
	epoll_ctl(c->loop->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

void wire_conn_enter(struct wire_conn *c, enum conn_state s)
{
	c->state = s;
	c->since_ms = wire_conn_now_ms();
}

/* Ends the call, if there is one and no worker holds it. */
void wire_conn_end_call(struct wire_conn *c, bool replied)
{
	void *call = c->call;

	if (call == NULL)
		return;
	c->call = NULL;
	free(c->head_buf);
	c->head_buf = NULL;
	ledger_buf_free(&c->body);
	atomic_fetch_sub(&c->net->in_flight, 1);
	c->net->ops->end(call, replied);
	wire_stream_free(c->pipe);
	c->pipe = NULL;
}

/* --- turns given up: the loop steps them after its batch (api/wire/net.c) --- */

/* @p c stops with requests waiting; it goes on once the others ready now had theirs. */
static void turn_later(struct wire_conn *c)
{
	if (!c->turn_listed) {
		c->turn_listed = true;
		c->turn_next = c->loop->turns;
		c->loop->turns = c;
	}
}

/* @p c is freed: off the list of turns. */
static void turn_forget(struct wire_conn *c)
{
	struct wire_conn **p = &c->loop->turns;

	if (!c->turn_listed)
		return;
	while (*p != NULL && *p != c)
		p = &(*p)->turn_next;
	if (*p == c)
		*p = c->turn_next;
	c->turn_listed = false;
}

static void release(struct wire_conn *c)
{
	free(c->in);
	free(c->out);
	free(c->head_buf);
	ledger_buf_free(&c->body);
	wire_stream_free(c->pipe);
	free(c);
}

void wire_conn_free(struct wire_conn *c)
{
	struct loop *l = c->loop;

	turn_forget(c);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		l->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	if (!l->in_batch) {
		release(c);
		return;
	}
	c->prev = NULL;
	c->next = l->graves;
	l->graves = c;
}

void wire_conn_bury(struct loop *l)
{
	while (l->graves != NULL) {
		struct wire_conn *c = l->graves;

		l->graves = c->next;
		release(c);
	}
}

/* --- a client behind its reply --- */

/* A write would block: the client is behind, and its output counts in the net's unread. */
static void fall_behind(struct wire_conn *c)
{
	if (c->behind_since_ms == 0) {
		int64_t now = wire_conn_now_ms();

		c->behind_since_ms = now > 0 ? now : 1;
	}
	if (c->unread != c->out_len) {
		if (c->out_len > c->unread)
			atomic_fetch_add(&c->net->unread, c->out_len - c->unread);
		else
			atomic_fetch_sub(&c->net->unread, c->unread - c->out_len);
		c->unread = c->out_len;
	}
}

/* The output went out whole, or the connection closed: no longer behind. */
static void caught_up(struct wire_conn *c)
{
	if (c->behind_since_ms != 0) {
		c->behind_ms += wire_conn_now_ms() - c->behind_since_ms;
		c->behind_since_ms = 0;
	}
	if (c->unread > 0) {
		atomic_fetch_sub(&c->net->unread, c->unread);
		c->unread = 0;
	}
}

int64_t wire_conn_behind_ms(const struct wire_conn *c, int64_t now)
{
	return c->behind_ms + (c->behind_since_ms != 0 ? now - c->behind_since_ms : 0);
}

/*
 * The connection's output becomes @p out, @p len bytes (owned; may be
 * NULL), the old one freed. Never while behind: between replies, or a
 * stream's output written whole.
 */
static void out_set(struct wire_conn *c, char *out, size_t len)
{
	caught_up(c);
	free(c->out);
	c->out = out;
	c->out_len = out != NULL ? len : 0;
	c->out_off = 0;
}

/*
 * The connection is gone, or done with. Its call ends now unless a
 * worker holds it; then when the worker hands it back.
 */
void wire_conn_close(struct wire_conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	epoll_ctl(c->loop->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	if (c->ssl != NULL)
		SSL_free(c->ssl);
	c->ssl = NULL;
	close(c->fd);
	c->fd = -1;
	caught_up(c);
	wire_addrs_give(c->net, c->addr);
	c->addr = NULL;
	atomic_fetch_sub(wire_net_budget(c->net, c->listener, NULL), 1);
	wire_stats_connections(-1);
	if (c->pipe != NULL)
		wire_stream_lost(c->pipe);
	if (!c->held) {
		wire_conn_end_call(c, false);
		wire_conn_free(c);
	}
}

void wire_conn_abort(struct wire_conn *c)
{
	struct linger now = {.l_onoff = 1, .l_linger = 0};

	if (c->dead)
		return;
	setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
	wire_conn_close(c);
}

/* Makes room for @p more bytes of input. @return false: out of memory */
static bool in_reserve(struct wire_conn *c, size_t more)
{
	size_t cap;
	char *p;

	if (c->in_off > 0 && c->in_off == c->in_len) {
		c->in_off = c->in_len = c->scanned = 0;
	} else if (c->in_off > 0 && c->in_cap - c->in_len < more) {
		memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
		c->in_len -= c->in_off;
		c->scanned = c->scanned > c->in_off ? c->scanned - c->in_off : 0;
		c->in_off = 0;
	}
	if (c->in_cap - c->in_len >= more)
		return true;
	cap = c->in_cap > 0 ? c->in_cap : FIRST_BUFFER;
	while (cap - c->in_len < more)
		cap *= 2;
	p = realloc(c->in, cap);
	if (p == NULL)
		return false;
	c->in = p;
	c->in_cap = cap;
	return true;
}

/*
 * Reads what the socket has, up to @p limit bytes held.
 * @return false when the connection closed or broke (c->eof set on EOF)
 */
static bool fill(struct wire_conn *c, size_t limit)
{
	for (;;) {
		size_t room, asked, got = 0;
		unsigned want;
		enum io r;

		if (c->in_len - c->in_off >= limit)
			return true;
		room = limit - (c->in_len - c->in_off);
		if (room > 16384)
			room = 16384;
		if (!in_reserve(c, room))
			return false;
		asked = c->in_cap - c->in_len;
		r = io_read(c, c->in + c->in_len, asked, &got, &want);
		if (r == IO_OK) {
			c->in_len += got;
			c->last_io_ms = wire_conn_now_ms();
			/*
			 * A short read drained the socket: epoll (level-triggered) says
			 * when more comes, so no read is spent on learning it. TLS may
			 * hold decrypted bytes the socket no longer shows: read on.
			 */
			if (c->ssl == NULL && got < asked)
				return true;
			continue;
		}
		if (r == IO_AGAIN)
			return true;
		if (r == IO_EOF)
			c->eof = true;
		return false;
	}
}

/* --- replies --- */

/* Queues the reply's bytes: head and body in one buffer, written as one. */
static bool compose(struct wire_conn *c, unsigned status, const char *headers, const char *body,
		    size_t len)
{
	char framing[48] = "Content-Length: ", digits[24], *out;
	size_t cap = 512 + (headers != NULL ? strlen(headers) : 0) + len, n, d = sizeof(digits);
	size_t v = len;

	/* The length in decimal, without printf's machinery: a reply is written per call. */
	digits[--d] = '\0';
	do
		digits[--d] = (char)('0' + v % 10);
	while ((v /= 10) > 0);
	strcat(strcat(framing, digits + d), "\r\n");
	if (strcmp(c->head.method != NULL ? c->head.method : "", "HEAD") == 0)
		len = 0; /* the head alone, with the length the body would have */
	out = malloc(cap);
	if (out == NULL)
		return false;
	n = wire_http_format_head(out, cap, status, time(NULL), framing, headers,
				  c->close_after       ? "close"
				  : c->head.minor == 0 ? "keep-alive"
						       : NULL);
	if (n == 0) {
		free(out);
		return false;
	}
	memcpy(out + n, body, len);
	out_set(c, out, n + len);
	return true;
}

/*
 * Refuses what arrived on the wire, before any call began: the JSON
 * envelope every error has, then the connection closes.
 */
void wire_conn_refuse(struct wire_conn *c, const struct wire_http_error *err)
{
	struct ledger_buf buf = {0};
	struct ledger_jsonw w;
	size_t len = 0;
	char *body;

	ledger_jsonw_init(&w, &buf);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "error");
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "code");
	ledger_jsonw_string(&w, err->code);
	ledger_jsonw_key(&w, "message");
	ledger_jsonw_string(&w, err->message);
	ledger_jsonw_object_end(&w);
	ledger_jsonw_object_end(&w);
	body = buf.oom ? NULL : ledger_buf_steal(&buf, &len);
	ledger_buf_free(&buf);
	c->close_after = true;
	c->refused = true;
	wire_stats_refused(err->code);
	if (body == NULL ||
	    !compose(c, err->status, "Content-Type: application/json\r\n", body, len)) {
		free(body);
		wire_conn_close(c);
		return;
	}
	free(body);
	wire_conn_enter(c, C_WRITE);
}

/*
 * The reply is ready and no more of the request will be read: write it.
 * Like every change of state outside wire_conn_step(), it only records the state:
 * wire_conn_step()'s loop carries it out, so no call of wire_conn_step() ever nests in another
 * (a client that keeps its requests coming would grow the stack without end).
 * The epoll set is left as it is: a reply nearly always fits the socket's
 * buffer, so C_WRITE waits for EPOLLOUT only when a write would block.
 */
void wire_conn_start_write(struct wire_conn *c)
{
	wire_conn_enter(c, C_WRITE);
}

/* --- the call's side --- */

void wire_conn_read_body(struct wire_conn *c, size_t max)
{
	c->body_asked = true;
	c->body_max = max;
}

void wire_conn_reply(struct wire_conn *c, unsigned status, const char *headers, char *body,
		    size_t len)
{
	bool body_unread = c->head.body != WIRE_HTTP_BODY_NONE && !c->body_done;

	if (atomic_load(&c->net->draining) || !c->head.keep_alive)
		c->close_after = true;
	/*
	 * A body the client is sending unasked is dropped when it is short,
	 * so the connection can go on; anything else closes it after the reply.
	 */
	if (body_unread && (c->head.body != WIRE_HTTP_BODY_LENGTH || c->head.expect_continue ||
			    c->body_left > c->net->cfg.discard_max))
		c->close_after = true;
	if (!compose(c, status, headers, body != NULL ? body : "", len)) {
		c->close_after = true;
		c->out = NULL;
		c->out_len = 0;
	}
	free(body);
	c->reply_ready = true;
}

void wire_conn_hold(struct wire_conn *c)
{
	c->held = true;
}

bool wire_conn_held(const struct wire_conn *c)
{
	return c->held;
}

void wire_conn_wake(struct wire_conn *c)
{
	wire_wake_push(c, WIRE_WAKE_RELEASE);
}

bool wire_conn_draining(const struct wire_conn *c)
{
	return atomic_load(&c->net->draining);
}

bool wire_conn_peer(const struct wire_conn *c, char *out, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	const void *a = NULL;

	if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) != 0)
		return false;
	if (ss.ss_family == AF_INET)
		a = &((const struct sockaddr_in *)(const void *)&ss)->sin_addr;
	else if (ss.ss_family == AF_INET6)
		a = &((const struct sockaddr_in6 *)(const void *)&ss)->sin6_addr;
	return a != NULL && inet_ntop(ss.ss_family, a, out, (socklen_t)cap) != NULL;
}

/*
 * After a callback: carries out what the server asked. A reply wins over
 * a body still to read; without either, the call waits for its worker.
 */
void wire_conn_after_call(struct wire_conn *c)
{
	if (c->dead)
		return;
	if (c->pipe != NULL) {
		/* A thread writes the reply; meanwhile the client is watched for EOF. */
		wire_conn_enter(c, C_STREAM);
		set_events(c, EPOLLRDHUP);
		return;
	}
	if (c->reply_ready) {
		bool unread = c->head.body != WIRE_HTTP_BODY_NONE && !c->body_done;

		if (c->out == NULL) {
			wire_conn_close(c);
			return;
		}
		if (unread && !c->close_after) {
			wire_conn_enter(c, C_DROP);
			set_events(c, EPOLLIN);
			return;
		}
		wire_conn_start_write(c);
		return;
	}
	if (c->body_asked && !c->body_done && c->state == C_CALL) {
		if (c->head.body == WIRE_HTTP_BODY_NONE) {
			struct ledger_buf empty = {0};

			c->body_done = true;
			c->net->ops->body(c->call, &empty);
			wire_conn_after_call(c);
			return;
		}
		if (c->head.body == WIRE_HTTP_BODY_LENGTH && c->head.content_length > c->body_max) {
			c->body_done = false;
			c->net->ops->body(c->call, NULL);
			wire_conn_after_call(c);
			return;
		}
		if (c->head.expect_continue) {
			static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
			size_t put = 0;
			unsigned want;

			/* Eight bytes short of a full send buffer is not a case worth a state. */
			if (io_write(c, cont, sizeof(cont) - 1, &put, &want) != IO_OK ||
			    put != sizeof(cont) - 1) {
				wire_conn_close(c);
				return;
			}
		}
		wire_conn_enter(c, C_BODY);
		set_events(c, EPOLLIN);
		return;
	}
}

/*
 * The connection is readable while its call runs: a client that sends
 * before its answer came (a pipelined request, or the end of its side).
 * What it sent waits in the socket until the call ends; until then the
 * epoll set stops waiting on it, or it would wake the loop without end.
 * Left armed otherwise, so a call costs no change of the epoll set.
 */
void wire_conn_hold_input(struct wire_conn *c)
{
	set_events(c, 0);
}

/* Feeds the body from the input buffer. @return false once the body is done or refused */
static bool take_body(struct wire_conn *c)
{
	while (c->in_off < c->in_len) {
		const char *p = c->in + c->in_off, *data = NULL;
		size_t n = c->in_len - c->in_off, used = 0, dlen = 0;
		struct wire_http_error err;
		enum wire_http_verdict v;

		if (c->head.body == WIRE_HTTP_BODY_LENGTH) {
			if ((uint64_t)n > c->body_left)
				n = (size_t)c->body_left;
			data = p;
			dlen = used = n;
			c->body_left -= n;
			v = c->body_left == 0 ? WIRE_HTTP_DONE : WIRE_HTTP_INCOMPLETE;
		} else {
			v = wire_http_chunked_step(&c->chunked, p, n, &used, &data, &dlen, &err);
		}
		c->in_off += used;
		if (v == WIRE_HTTP_REFUSED) {
			c->close_after = true;
			if (c->state == C_BODY) {
				/* The call has begun: the refusal is still one JSON error. */
				c->body_done = true;
				ledger_buf_free(&c->body);
				wire_conn_refuse(c, &err);
				return false;
			}
			wire_conn_start_write(c);
			return false;
		}
		if (c->state == C_BODY && dlen > 0) {
			if (c->body.len + dlen > c->body_max) {
				/* Too large: answered now, the rest never read. */
				ledger_buf_free(&c->body);
				wire_conn_enter(c, C_CALL);
				c->net->ops->body(c->call, NULL);
				wire_conn_after_call(c);
				return false;
			}
			ledger_buf_append(&c->body, data, dlen);
		} else if (c->state == C_DROP && dlen > 0) {
			if (c->body_left > c->net->cfg.discard_max) {
				c->close_after = true;
				wire_conn_start_write(c);
				return false;
			}
		}
		if (v == WIRE_HTTP_DONE) {
			c->body_done = true;
			if (c->state == C_DROP) {
				wire_conn_start_write(c);
				return false;
			}
			wire_conn_enter(c, C_CALL);
			if (c->body.oom) {
				ledger_buf_free(&c->body);
				c->net->ops->body(c->call, NULL);
			} else {
				c->net->ops->body(c->call, &c->body);
			}
			wire_conn_after_call(c);
			return false;
		}
	}
	return true;
}

/* A whole head is at in[in_off + start, + end): check it and begin the call. */
static void begin_call(struct wire_conn *c, size_t start, size_t end)
{
	struct wire_http_error err;
	char *copy = malloc(end + 1);

	if (copy == NULL) {
		wire_conn_close(c);
		return;
	}
	memcpy(copy, c->in + c->in_off + start, end);
	copy[end] = '\0';
	c->turn_requests++;
	c->in_off += start + end;
	c->scanned = c->in_off;
	free(c->head_buf);
	c->head_buf = copy;
	if (wire_http_parse_head(copy, end, &c->head, &err) != WIRE_HTTP_DONE) {
		wire_conn_refuse(c, &err);
		return;
	}
	c->body_asked = c->body_done = c->reply_ready = false;
	c->body_left = c->head.body == WIRE_HTTP_BODY_LENGTH ? c->head.content_length : 0;
	memset(&c->chunked, 0, sizeof(c->chunked));
	c->close_after = false;
	wire_conn_enter(c, C_CALL);
	atomic_fetch_add(&c->net->in_flight, 1);
	c->call = c->net->ops->begin(c->net->ops->ctx, c, &c->head, c->listener);
	if (c->call == NULL) {
		atomic_fetch_sub(&c->net->in_flight, 1);
		wire_conn_close(c);
		return;
	}
	wire_conn_after_call(c);
}

/* The reply is out: the next request, or the end. */
static void written(struct wire_conn *c)
{
	out_set(c, NULL, 0);
	c->behind_ms = 0; /* the next reply's time behind counts from its own first byte */
	wire_conn_end_call(c, true);
	if (c->close_after || atomic_load(&c->net->draining)) {
		if (c->ssl != NULL)
			(void)SSL_shutdown(c->ssl);
		shutdown(c->fd, SHUT_WR);
		wire_conn_enter(c, C_LINGER);
		c->lingered = c->in_len - c->in_off;
		c->in_off = c->in_len = c->scanned = 0;
		set_events(c, EPOLLIN);
		return;
	}
	wire_conn_enter(c, C_HEAD);
	c->head_started = c->in_off < c->in_len;
	memset(&c->head, 0, sizeof(c->head));
	set_events(c, EPOLLIN); /* wire_conn_step() goes on: a pipelined request may be in already */
}

/* --- the states' steps: each true when the connection may go on at once --- */

static bool step_handshake(struct wire_conn *c)
{
	int r = SSL_do_handshake(c->ssl);
	unsigned want = EPOLLIN;

	if (r == 1) {
		wire_conn_enter(c, C_HEAD);
		set_events(c, EPOLLIN);
		return true;
	}
	if (tls_wait(c, r, &want) != IO_AGAIN) {
		wire_conn_close(c);
		return false;
	}
	set_events(c, want);
	return false;
}

static bool step_head(struct wire_conn *c)
{
	size_t start = 0, end = 0;
	size_t scanned = c->scanned > c->in_off ? c->scanned - c->in_off : 0;
	struct wire_http_error err;
	enum wire_http_verdict v;
	bool open = fill(c, WIRE_HTTP_MAX_HEAD + 4);

	if (c->in_off < c->in_len && !c->head_started) {
		c->head_started = true;
		c->spoke = true;
		c->since_ms = wire_conn_now_ms();
	}
	v = wire_http_find_head(c->in + c->in_off, c->in_len - c->in_off, &scanned, &start, &end,
				&err);
	if (v == WIRE_HTTP_DONE) {
		begin_call(c, start, end);
		return true;
	}
	c->scanned = c->in_len;
	if (v == WIRE_HTTP_REFUSED) {
		wire_conn_refuse(c, &err);
		return true;
	}
	if (!open)
		wire_conn_close(c); /* a client that closes between requests is done; mid-head, broken */
	return false;
}

static bool step_body(struct wire_conn *c)
{
	bool open = fill(c, 65536);

	if (!take_body(c))
		return true; /* done, refused or answered: on in its new state */
	if (c->in_off == c->in_len)
		c->in_off = c->in_len = c->scanned = 0;
	if (!open)
		wire_conn_close(c);
	return false;
}

enum out {
	OUT_DRAINED, /* every byte of the output is written */
	OUT_BLOCKED, /* the socket is full: the epoll set waits for it */
	OUT_BROKEN,  /* the connection is closed */
};

/* Writes what the output holds; when it blocks, waits for the socket and @p also. */
static enum out write_out(struct wire_conn *c, unsigned also)
{
	while (c->out_off < c->out_len) {
		size_t put = 0;
		unsigned want;
		enum io r = io_write(c, c->out + c->out_off, c->out_len - c->out_off, &put, &want);

		if (r == IO_OK) {
			c->out_off += put;
			c->last_io_ms = wire_conn_now_ms();
		} else if (r == IO_AGAIN) {
			fall_behind(c);
			set_events(c, want | also);
			return OUT_BLOCKED;
		} else {
			wire_conn_close(c);
			return OUT_BROKEN;
		}
	}
	caught_up(c);
	return OUT_DRAINED;
}

/*
 * After a reply: whether a next request may be waiting to be read. Nothing
 * of one buffered: epoll, waiting for input again, says when one is in the
 * socket (at once, for a client that pipelines), so no read is spent on an
 * empty one. TLS may hold a request decrypted already: read on.
 */
static bool next_may_wait(const struct wire_conn *c)
{
	return c->state != C_HEAD || c->in_off < c->in_len || c->ssl != NULL;
}

static bool step_write(struct wire_conn *c)
{
	if (write_out(c, 0) != OUT_DRAINED)
		return false;
	written(c);
	return next_may_wait(c);
}

static bool step_stream(struct wire_conn *c)
{
	bool close_after = false;
	char *more;
	size_t len;

	if (write_out(c, EPOLLRDHUP) != OUT_DRAINED)
		return false;
	switch (wire_stream_pull(c, &close_after, &more, &len)) {
	case WIRE_STREAM_MORE:
		out_set(c, more, len);
		return true;
	case WIRE_STREAM_WAIT:
		set_events(c, EPOLLRDHUP);
		return false;
	case WIRE_STREAM_DONE:
		c->close_after = c->close_after || close_after;
		written(c);
		return next_may_wait(c);
	case WIRE_STREAM_CUT:
		break;
	}
	wire_conn_close(c);
	return false;
}

static bool step_linger(struct wire_conn *c)
{
	char sink[16384];
	size_t got = 0;
	unsigned want;
	enum io r;

	while ((r = io_read(c, sink, sizeof(sink), &got, &want)) == IO_OK) {
		c->lingered += got;
		if (c->lingered > c->net->cfg.discard_max)
			break;
	}
	if (r != IO_AGAIN)
		wire_conn_close(c);
	return false;
}

/* Moves the connection on as far as its input and output allow. */
void wire_conn_step(struct wire_conn *c)
{
	bool more = true;

	c->turn_requests = 0;
	while (more && !c->dead) {
		if (c->state == C_HEAD && c->turn_requests >= WIRE_TURN_REQUESTS) {
			turn_later(c); /* after the others ready now */
			break;
		}
		switch (c->state) {
		case C_HANDSHAKE:
			more = step_handshake(c);
			break;
		case C_HEAD:
			more = step_head(c);
			break;
		case C_BODY:
		case C_DROP:
			more = step_body(c);
			break;
		case C_WRITE:
			more = step_write(c);
			break;
		case C_STREAM:
			more = step_stream(c);
			break;
		case C_LINGER:
			more = step_linger(c);
			break;
		case C_CALL:
			more = false;
			break;
		}
	}
}
