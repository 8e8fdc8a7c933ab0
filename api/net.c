/*
 * api/net.c: the connections behind api/net.h. Each polling thread has an
 * epoll set holding every listener (EPOLLEXCLUSIVE: one thread wakes per
 * connection) and the connections it accepted, which stay on it for life;
 * an eventfd wakes it for the calls that workers hand back. A connection
 * is a small state machine:
 *
 *   HANDSHAKE (TLS) -> HEAD -> CALL -> [BODY] -> CALL -> [DROP] -> WRITE
 *                       ^------------- keep-alive ------------------'
 *                                                   or LINGER -> closed
 *
 * Every state but CALL has a deadline, checked once a second: a head
 * must be whole within --head-timeout of its first byte, a body within
 * --body-timeout of its head, and nothing may sit idle past
 * --idle-timeout. In CALL the server owns the call, and the store bounds
 * it (--db-timeout).
 */
#include "api/net.h"

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

#include "api/metrics.h"
#include "api/tls.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"

enum conn_state {
	C_HANDSHAKE, /* TLS handshake */
	C_HEAD,      /* reading a head */
	C_CALL,      /* the server has the call */
	C_BODY,      /* reading the body the server asked for */
	C_DROP,      /* the reply is ready; dropping the rest of the body first */
	C_WRITE,     /* writing the reply */
	C_LINGER,    /* reply written, write side shut: reading until the client closes */
};

/*
 * Once the reply of a refused or cut-short request is out, the input is
 * read and dropped for this long (and up to discard_max bytes), so that a
 * client still writing its body gets the reply rather than a reset.
 */
#define LINGER_MS 5000
/* After a refusal on the wire or at a deadline nothing worth waiting for is in flight. */
#define LINGER_REFUSED_MS 1000
#define FIRST_BUFFER 2048

struct addr_count;

struct api_net_conn {
	struct loop *loop;
	struct api_net *net;
	int fd;
	SSL *ssl;
	unsigned listener;
	struct addr_count *addr; /* NULL: not counted per address */
	enum conn_state state;
	struct api_net_conn *prev, *next; /* the loop's connections */

	size_t lingered; /* bytes dropped in LINGER */
	bool refused;    /* the reply is a refusal on the wire: a short linger */

	/* Input: in[0, in_len), of which the first in_off are consumed. */
	char *in;
	size_t in_len, in_cap, in_off, scanned;
	bool eof;

	/* The call. */
	void *call;
	struct api_http_head head;
	char *head_buf; /* the head, copied out of the input buffer for the call's life */
	bool held;      /* a worker will wake the call */
	bool woken;     /* wake arrived; resume() is due */
	struct api_net_conn *wake_next;
	bool body_asked, body_done, reply_ready;
	size_t body_max;
	uint64_t body_left; /* Content-Length bytes still to come */
	struct api_http_chunked chunked;
	struct ledger_buf body;

	/* Output. */
	char *out;
	size_t out_len, out_off;
	bool close_after;
	bool dead; /* the connection is gone; the call is ended once no worker holds it */

	int64_t since_ms;   /* when the current state's deadline started */
	int64_t last_io_ms; /* last byte in or out */
	bool head_started;  /* a byte of the next head arrived */
	unsigned events;    /* what the epoll set waits for now */
};

struct loop {
	struct api_net *net;
	pthread_t thread;
	int epfd, wakefd;
	struct api_net_conn *conns; /* every connection of this thread */
	pthread_mutex_t wake_lock;
	struct api_net_conn *woken; /* handed back by workers */
	bool started;
};

/* Connections per address, under the net's lock. */
struct addr_count {
	unsigned char key[17]; /* family byte, then the address */
	unsigned count;
	struct addr_count *next;
};

#define ADDR_BUCKETS 1024

struct api_net {
	struct api_net_config cfg;
	const struct api_net_ops *ops;
	struct api_net_listener *listeners;
	unsigned nlisteners;
	struct loop *loops;
	atomic_bool stopping, draining;
	atomic_uint connections;
	atomic_long in_flight;
	pthread_mutex_t lock;
	struct addr_count *addrs[ADDR_BUCKETS];
	int spare_fd; /* closed to accept and shed a connection when the process is out of files */
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- per-address counting --- */

static unsigned addr_hash(const unsigned char key[17])
{
	unsigned h = 2166136261u;

	for (int i = 0; i < 17; i++)
		h = (h ^ key[i]) * 16777619u;
	return h & (ADDR_BUCKETS - 1);
}

/* The address's key; IPv4 mapped into IPv6 counts as IPv4. */
static void addr_key(const struct sockaddr_storage *ss, unsigned char key[17])
{
	memset(key, 0, 17);
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)ss;

		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			key[0] = 4;
			memcpy(key + 1, in6->sin6_addr.s6_addr + 12, 4);
		} else {
			key[0] = 6;
			memcpy(key + 1, in6->sin6_addr.s6_addr, 16);
		}
	} else if (ss->ss_family == AF_INET) {
		key[0] = 4;
		memcpy(key + 1, &((const struct sockaddr_in *)(const void *)ss)->sin_addr, 4);
	}
}

/* Counts one more connection from @p key. @return NULL when the address is at its limit */
static struct addr_count *addr_take(struct api_net *net, const unsigned char key[17], bool *full)
{
	unsigned b = addr_hash(key);
	struct addr_count *a;

	*full = false;
	pthread_mutex_lock(&net->lock);
	for (a = net->addrs[b]; a != NULL; a = a->next) {
		if (memcmp(a->key, key, 17) == 0)
			break;
	}
	if (a != NULL && a->count >= net->cfg.max_per_address) {
		*full = true;
		a = NULL;
	} else if (a == NULL && (a = calloc(1, sizeof(*a))) != NULL) {
		memcpy(a->key, key, 17);
		a->next = net->addrs[b];
		net->addrs[b] = a;
	}
	if (a != NULL)
		a->count++;
	pthread_mutex_unlock(&net->lock);
	return a;
}

static void addr_give(struct api_net *net, struct addr_count *a)
{
	unsigned b;

	if (a == NULL)
		return;
	b = addr_hash(a->key);
	pthread_mutex_lock(&net->lock);
	if (--a->count == 0) {
		struct addr_count **pp = &net->addrs[b];

		while (*pp != a)
			pp = &(*pp)->next;
		*pp = a->next;
		free(a);
	}
	pthread_mutex_unlock(&net->lock);
}

/* --- I/O, plain or TLS --- */

enum io {
	IO_OK,    /* bytes moved */
	IO_AGAIN, /* would block; conn->events says on what */
	IO_EOF,   /* the peer closed */
	IO_ERROR, /* the connection is broken */
};

/* What a TLS operation waits for, from SSL_get_error(). */
static enum io tls_wait(struct api_net_conn *c, int r, unsigned *want)
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

static enum io io_read(struct api_net_conn *c, char *buf, size_t len, size_t *got, unsigned *want)
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

static enum io io_write(struct api_net_conn *c, const char *buf, size_t len, size_t *put,
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

static void set_events(struct api_net_conn *c, unsigned events)
{
	struct epoll_event ev = {.events = events, .data.ptr = c};

	if (events == c->events)
		return;
	c->events = events;
	epoll_ctl(c->loop->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void enter(struct api_net_conn *c, enum conn_state s)
{
	c->state = s;
	c->since_ms = now_ms();
}

/* Ends the call, if there is one and no worker holds it. */
static void end_call(struct api_net_conn *c, bool replied)
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
}

static void conn_free(struct api_net_conn *c)
{
	struct loop *l = c->loop;

	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		l->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	free(c->in);
	free(c->out);
	free(c->head_buf);
	ledger_buf_free(&c->body);
	free(c);
}

/*
 * The connection is gone, or done with. Its call ends now unless a
 * worker holds it; then when the worker hands it back.
 */
static void conn_close(struct api_net_conn *c)
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
	addr_give(c->net, c->addr);
	c->addr = NULL;
	atomic_fetch_sub(&c->net->connections, 1);
	api_metrics_http_connections(-1);
	if (!c->held) {
		end_call(c, false);
		conn_free(c);
	}
}

/* Makes room for @p more bytes of input. @return false: out of memory */
static bool in_reserve(struct api_net_conn *c, size_t more)
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
static bool fill(struct api_net_conn *c, size_t limit)
{
	for (;;) {
		size_t room, got = 0;
		unsigned want;
		enum io r;

		if (c->in_len - c->in_off >= limit)
			return true;
		room = limit - (c->in_len - c->in_off);
		if (room > 16384)
			room = 16384;
		if (!in_reserve(c, room))
			return false;
		r = io_read(c, c->in + c->in_len, c->in_cap - c->in_len, &got, &want);
		if (r == IO_OK) {
			c->in_len += got;
			c->last_io_ms = now_ms();
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

static void http_date(char *out, size_t outlen)
{
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, outlen, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* Queues the reply's bytes: head and body in one buffer, written as one. */
static bool compose(struct api_net_conn *c, unsigned status, const char *headers, const char *body,
		    size_t len)
{
	char date[64], *out;
	int n;
	size_t hlen = headers != NULL ? strlen(headers) : 0, cap;

	http_date(date, sizeof(date));
	cap = 256 + hlen + len;
	out = malloc(cap);
	if (out == NULL)
		return false;
	n = snprintf(out, cap, "HTTP/1.1 %u %s\r\nDate: %s\r\nContent-Length: %zu\r\n%s%s\r\n",
		     status, api_http_reason(status), date, len, headers != NULL ? headers : "",
		     c->close_after       ? "Connection: close\r\n"
		     : c->head.minor == 0 ? "Connection: keep-alive\r\n"
					  : "");
	if (n < 0 || (size_t)n + len >= cap) {
		free(out);
		return false;
	}
	if (strcmp(c->head.method != NULL ? c->head.method : "", "HEAD") != 0)
		memcpy(out + n, body, len);
	else
		len = 0;
	free(c->out);
	c->out = out;
	c->out_len = (size_t)n + len;
	c->out_off = 0;
	return true;
}

/*
 * Refuses what arrived on the wire, before any call began: the JSON
 * envelope every error has, then the connection closes.
 */
static void refuse(struct api_net_conn *c, const struct api_http_error *err)
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
	api_metrics_http_refused(err->code);
	if (body == NULL ||
	    !compose(c, err->status, "Content-Type: application/json\r\n", body, len)) {
		free(body);
		conn_close(c);
		return;
	}
	free(body);
	enter(c, C_WRITE);
	set_events(c, EPOLLOUT);
}

static void step(struct api_net_conn *c);

/*
 * The reply is ready and no more of the request will be read: write it.
 * Like every change of state outside step(), it only records the state:
 * step()'s loop carries it out, so no call of step() ever nests in another
 * (a client that keeps its requests coming would grow the stack without end).
 */
static void start_write(struct api_net_conn *c)
{
	enter(c, C_WRITE);
	set_events(c, EPOLLOUT);
}

/* --- the call's side --- */

void api_net_read_body(struct api_net_conn *c, size_t max)
{
	c->body_asked = true;
	c->body_max = max;
}

void api_net_reply(struct api_net_conn *c, unsigned status, const char *headers, char *body,
		   size_t len)
{
	bool body_unread = c->head.body != API_HTTP_BODY_NONE && !c->body_done;

	if (atomic_load(&c->net->draining) || !c->head.keep_alive)
		c->close_after = true;
	/*
	 * A body the client is sending unasked is dropped when it is short,
	 * so the connection can go on; anything else closes it after the reply.
	 */
	if (body_unread && (c->head.body != API_HTTP_BODY_LENGTH || c->head.expect_continue ||
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

void api_net_hold(struct api_net_conn *c)
{
	c->held = true;
}

void api_net_wake(struct api_net_conn *c)
{
	struct loop *l = c->loop;
	uint64_t one = 1;
	bool first;

	pthread_mutex_lock(&l->wake_lock);
	first = l->woken == NULL;
	c->wake_next = l->woken;
	l->woken = c;
	pthread_mutex_unlock(&l->wake_lock);
	if (first && write(l->wakefd, &one, sizeof(one)) < 0) {
		/* The counter is only full when the loop is far behind; it will see the list. */
	}
}

bool api_net_draining(const struct api_net_conn *c)
{
	return atomic_load(&c->net->draining);
}

long api_net_in_flight(const struct api_net *net)
{
	return atomic_load(&net->in_flight);
}

/*
 * After a callback: carries out what the server asked. A reply wins over
 * a body still to read; without either, the call waits for its worker.
 */
static void after_call(struct api_net_conn *c)
{
	if (c->dead)
		return;
	if (c->reply_ready) {
		bool unread = c->head.body != API_HTTP_BODY_NONE && !c->body_done;

		if (c->out == NULL) {
			conn_close(c);
			return;
		}
		if (unread && !c->close_after) {
			enter(c, C_DROP);
			set_events(c, EPOLLIN);
			return;
		}
		start_write(c);
		return;
	}
	if (c->body_asked && !c->body_done && c->state == C_CALL) {
		if (c->head.body == API_HTTP_BODY_NONE) {
			struct ledger_buf empty = {0};

			c->body_done = true;
			c->net->ops->body(c->call, &empty);
			after_call(c);
			return;
		}
		if (c->head.body == API_HTTP_BODY_LENGTH && c->head.content_length > c->body_max) {
			c->body_done = false;
			c->net->ops->body(c->call, NULL);
			after_call(c);
			return;
		}
		if (c->head.expect_continue) {
			static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
			size_t put = 0;
			unsigned want;

			/* Eight bytes short of a full send buffer is not a case worth a state. */
			if (io_write(c, cont, sizeof(cont) - 1, &put, &want) != IO_OK ||
			    put != sizeof(cont) - 1) {
				conn_close(c);
				return;
			}
		}
		enter(c, C_BODY);
		set_events(c, EPOLLIN);
		return;
	}
	if (c->state == C_CALL)
		set_events(c, 0);
}

/* Feeds the body from the input buffer. @return false once the body is done or refused */
static bool take_body(struct api_net_conn *c)
{
	while (c->in_off < c->in_len) {
		const char *p = c->in + c->in_off, *data = NULL;
		size_t n = c->in_len - c->in_off, used = 0, dlen = 0;
		struct api_http_error err;
		enum api_http_verdict v;

		if (c->head.body == API_HTTP_BODY_LENGTH) {
			if ((uint64_t)n > c->body_left)
				n = (size_t)c->body_left;
			data = p;
			dlen = used = n;
			c->body_left -= n;
			v = c->body_left == 0 ? API_HTTP_DONE : API_HTTP_INCOMPLETE;
		} else {
			v = api_http_chunked_step(&c->chunked, p, n, &used, &data, &dlen, &err);
		}
		c->in_off += used;
		if (v == API_HTTP_REFUSED) {
			c->close_after = true;
			if (c->state == C_BODY) {
				/* The call has begun: the refusal is still one JSON error. */
				c->body_done = true;
				ledger_buf_free(&c->body);
				refuse(c, &err);
				return false;
			}
			start_write(c);
			return false;
		}
		if (c->state == C_BODY && dlen > 0) {
			if (c->body.len + dlen > c->body_max) {
				/* Too large: answered now, the rest never read. */
				ledger_buf_free(&c->body);
				enter(c, C_CALL);
				c->net->ops->body(c->call, NULL);
				after_call(c);
				return false;
			}
			ledger_buf_append(&c->body, data, dlen);
		} else if (c->state == C_DROP && dlen > 0) {
			if (c->body_left > c->net->cfg.discard_max) {
				c->close_after = true;
				start_write(c);
				return false;
			}
		}
		if (v == API_HTTP_DONE) {
			c->body_done = true;
			if (c->state == C_DROP) {
				start_write(c);
				return false;
			}
			enter(c, C_CALL);
			if (c->body.oom) {
				ledger_buf_free(&c->body);
				c->net->ops->body(c->call, NULL);
			} else {
				c->net->ops->body(c->call, &c->body);
			}
			after_call(c);
			return false;
		}
	}
	return true;
}

/* A whole head is at in[in_off + start, + end): check it and begin the call. */
static void begin_call(struct api_net_conn *c, size_t start, size_t end)
{
	struct api_http_error err;
	char *copy = malloc(end + 1);

	if (copy == NULL) {
		conn_close(c);
		return;
	}
	memcpy(copy, c->in + c->in_off + start, end);
	copy[end] = '\0';
	c->in_off += start + end;
	c->scanned = c->in_off;
	free(c->head_buf);
	c->head_buf = copy;
	if (api_http_parse_head(copy, end, &c->head, &err) != API_HTTP_DONE) {
		refuse(c, &err);
		return;
	}
	c->body_asked = c->body_done = c->reply_ready = false;
	c->body_left = c->head.body == API_HTTP_BODY_LENGTH ? c->head.content_length : 0;
	memset(&c->chunked, 0, sizeof(c->chunked));
	c->close_after = false;
	enter(c, C_CALL);
	atomic_fetch_add(&c->net->in_flight, 1);
	c->call = c->net->ops->begin(c->net->ops->ctx, c, &c->head, c->listener);
	if (c->call == NULL) {
		atomic_fetch_sub(&c->net->in_flight, 1);
		conn_close(c);
		return;
	}
	after_call(c);
}

/* The reply is out: the next request, or the end. */
static void written(struct api_net_conn *c)
{
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_off = 0;
	end_call(c, true);
	if (c->close_after || atomic_load(&c->net->draining)) {
		if (c->ssl != NULL)
			(void)SSL_shutdown(c->ssl);
		shutdown(c->fd, SHUT_WR);
		enter(c, C_LINGER);
		c->lingered = c->in_len - c->in_off;
		c->in_off = c->in_len = c->scanned = 0;
		set_events(c, EPOLLIN);
		return;
	}
	enter(c, C_HEAD);
	c->head_started = c->in_off < c->in_len;
	memset(&c->head, 0, sizeof(c->head));
	set_events(c, EPOLLIN); /* step() goes on: a pipelined request may be in already */
}

/* Moves the connection on as far as its input and output allow. */
static void step(struct api_net_conn *c)
{
	for (;;) {
		if (c->dead)
			return;
		switch (c->state) {
		case C_HANDSHAKE: {
			int r = SSL_do_handshake(c->ssl);
			unsigned want = EPOLLIN;

			if (r == 1) {
				enter(c, C_HEAD);
				set_events(c, EPOLLIN);
				break;
			}
			if (tls_wait(c, r, &want) != IO_AGAIN) {
				conn_close(c);
				return;
			}
			set_events(c, want);
			return;
		}
		case C_HEAD: {
			size_t start = 0, end = 0;
			size_t scanned = c->scanned > c->in_off ? c->scanned - c->in_off : 0;
			struct api_http_error err;
			enum api_http_verdict v;
			bool open = fill(c, API_HTTP_MAX_HEAD + 4);

			if (c->in_off < c->in_len && !c->head_started) {
				c->head_started = true;
				c->since_ms = now_ms();
			}
			v = api_http_find_head(c->in + c->in_off, c->in_len - c->in_off, &scanned,
					       &start, &end, &err);
			if (v == API_HTTP_DONE) {
				begin_call(c, start, end);
				break;
			}
			c->scanned = c->in_len;
			if (v == API_HTTP_REFUSED) {
				refuse(c, &err);
				break;
			}
			if (!open) {
				/* A client that closes between requests is done; mid-head, broken. */
				conn_close(c);
				return;
			}
			return;
		}
		case C_BODY:
		case C_DROP: {
			bool open = fill(c, 65536);

			if (!take_body(c))
				break; /* done, refused or answered: on in its new state */
			if (c->in_off == c->in_len)
				c->in_off = c->in_len = c->scanned = 0;
			if (!open) {
				conn_close(c);
				return;
			}
			return;
		}
		case C_WRITE: {
			size_t put = 0;
			unsigned want;
			enum io r;

			while (c->out_off < c->out_len) {
				r = io_write(c, c->out + c->out_off, c->out_len - c->out_off, &put,
					     &want);
				if (r == IO_OK) {
					c->out_off += put;
					c->last_io_ms = now_ms();
					continue;
				}
				if (r == IO_AGAIN) {
					set_events(c, want);
					return;
				}
				conn_close(c);
				return;
			}
			written(c);
			break;
		}
		case C_LINGER: {
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
				conn_close(c);
			return;
		}
		case C_CALL:
			return;
		}
	}
}

/* --- deadlines --- */

static void sweep(struct loop *l, int64_t now)
{
	const struct api_net_config *cfg = &l->net->cfg;
	struct api_net_conn *c = l->conns, *next;

	for (; c != NULL; c = next) {
		next = c->next;
		if (c->dead)
			continue;
		switch (c->state) {
		case C_HANDSHAKE:
			if (now - c->since_ms >= cfg->head_timeout_ms) {
				api_metrics_http_timeout("head");
				conn_close(c);
			}
			break;
		case C_HEAD:
			if (!c->head_started) {
				/* Nothing of a request yet: an idle keep-alive, closed quietly. */
				if (now - c->since_ms >= cfg->idle_timeout_ms ||
				    atomic_load(&l->net->draining))
					conn_close(c);
			} else if (now - c->since_ms >= cfg->head_timeout_ms) {
				static const struct api_http_error late = {
					408, "request_timeout",
					"the request head did not arrive within --head-timeout"};

				api_metrics_http_timeout("head");
				refuse(c, &late);
				step(c);
			}
			break;
		case C_BODY:
		case C_DROP:
			if (now - c->since_ms >= cfg->body_timeout_ms) {
				static const struct api_http_error late = {
					408, "request_timeout",
					"the request body did not arrive within --body-timeout"};

				api_metrics_http_timeout("body");
				if (c->state == C_DROP) {
					/* The reply is ready: it goes out, then the connection closes. */
					c->close_after = true;
					start_write(c);
					step(c);
					break;
				}
				c->body_done = true;
				ledger_buf_free(&c->body);
				refuse(c, &late);
				step(c);
			}
			break;
		case C_WRITE:
			if (now - c->last_io_ms >= cfg->idle_timeout_ms) {
				api_metrics_http_timeout("write");
				conn_close(c);
			}
			break;
		case C_LINGER:
			if (now - c->since_ms >= (c->refused ? LINGER_REFUSED_MS : LINGER_MS))
				conn_close(c);
			break;
		case C_CALL:
			break;
		}
	}
}

/* --- accepting --- */

/*
 * Out of files: the connection waiting would wake every poll again. The
 * spare descriptor makes room to accept it and close it at once.
 * @return true when one was shed
 */
static bool shed_one(struct api_net *net, int lfd)
{
	int fd;

	pthread_mutex_lock(&net->lock);
	if (net->spare_fd < 0) {
		pthread_mutex_unlock(&net->lock);
		return false;
	}
	close(net->spare_fd);
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0)
		close(fd);
	net->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pthread_mutex_unlock(&net->lock);
	api_metrics_http_connection_refused("files");
	LOG_WARN("http: out of file descriptors; a connection was closed unanswered");
	return fd >= 0;
}

static void accept_on(struct loop *l, unsigned li)
{
	struct api_net *net = l->net;
	const struct api_net_listener *lst = &net->listeners[li];

	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		struct api_net_conn *c;
		struct addr_count *addr = NULL;
		struct epoll_event ev;
		int fd =
			accept4(lst->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		int one = 1;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if ((errno == EMFILE || errno == ENFILE) && shed_one(net, lst->fd))
				continue;
			return;
		}
		if (atomic_fetch_add(&net->connections, 1) >= net->cfg.max_connections) {
			atomic_fetch_sub(&net->connections, 1);
			api_metrics_http_connection_refused("total");
			close(fd);
			continue;
		}
		if (lst->per_address && net->cfg.max_per_address > 0) {
			unsigned char key[17];
			bool full = false;

			addr_key(&ss, key);
			addr = addr_take(net, key, &full);
			if (addr == NULL) {
				atomic_fetch_sub(&net->connections, 1);
				api_metrics_http_connection_refused(full ? "per_address"
									 : "memory");
				close(fd);
				continue;
			}
		}
		c = calloc(1, sizeof(*c));
		if (c == NULL) {
			addr_give(net, addr);
			atomic_fetch_sub(&net->connections, 1);
			close(fd);
			continue;
		}
		if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->loop = l;
		c->net = net;
		c->fd = fd;
		c->listener = li;
		c->addr = addr;
		c->last_io_ms = now_ms();
		c->next = l->conns;
		if (l->conns != NULL)
			l->conns->prev = c;
		l->conns = c;
		api_metrics_http_connections(1);
		if (lst->tls != NULL) {
			c->ssl = api_tls_session(lst->tls, fd);
			if (c->ssl == NULL) {
				conn_close(c);
				continue;
			}
			enter(c, C_HANDSHAKE);
		} else {
			enter(c, C_HEAD);
		}
		c->events = EPOLLIN;
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
			conn_close(c);
			continue;
		}
	}
}

/* --- the polling threads --- */

static void take_woken(struct loop *l)
{
	struct api_net_conn *c, *next;
	uint64_t n;

	if (read(l->wakefd, &n, sizeof(n)) < 0) {
		/* EAGAIN: a wake raced the read; the list below is what counts. */
	}
	pthread_mutex_lock(&l->wake_lock);
	c = l->woken;
	l->woken = NULL;
	pthread_mutex_unlock(&l->wake_lock);
	/* Handed back in the order they were queued. */
	{
		struct api_net_conn *rev = NULL;

		for (; c != NULL; c = next) {
			next = c->wake_next;
			c->wake_next = rev;
			rev = c;
		}
		c = rev;
	}
	for (; c != NULL; c = next) {
		next = c->wake_next;
		c->held = false;
		if (c->dead) {
			end_call(c, false);
			conn_free(c);
			continue;
		}
		c->net->ops->resume(c->call);
		after_call(c);
		step(c);
	}
}

static void *loop_main(void *arg)
{
	struct loop *l = arg;
	struct api_net *net = l->net;
	int64_t last_sweep = now_ms();

	while (!atomic_load(&net->stopping)) {
		struct epoll_event evs[64];
		int n = epoll_wait(l->epfd, evs, 64, 250);
		int64_t now;

		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;

			if (p == &l->wakefd) {
				take_woken(l);
			} else if ((uintptr_t)p >= 1 && (uintptr_t)p <= net->nlisteners) {
				/* A listener's data is its index + 1; a connection's, its address. */
				accept_on(l, (unsigned)((uintptr_t)p - 1));
			} else {
				struct api_net_conn *c = p;

				if ((evs[i].events & (EPOLLERR | EPOLLHUP)) != 0 &&
				    (evs[i].events & EPOLLIN) == 0) {
					conn_close(c);
					continue;
				}
				step(c);
			}
		}
		now = now_ms();
		if (now - last_sweep >= 1000 || atomic_load(&net->draining)) {
			sweep(l, now);
			last_sweep = now;
		}
	}
	return NULL;
}

enum ledger_err api_net_start(const struct api_net_config *cfg, const struct api_net_ops *ops,
			      const struct api_net_listener *listeners, unsigned nlisteners,
			      struct api_net **out)
{
	struct api_net *net = calloc(1, sizeof(*net));

	*out = NULL;
	if (net == NULL)
		return LEDGER_ERR_NOMEM;
	net->cfg = *cfg;
	net->ops = ops;
	net->nlisteners = nlisteners;
	net->listeners = calloc(nlisteners, sizeof(*net->listeners));
	net->loops = calloc(cfg->threads, sizeof(*net->loops));
	pthread_mutex_init(&net->lock, NULL);
	net->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (net->listeners == NULL || net->loops == NULL)
		goto fail;
	memcpy(net->listeners, listeners, nlisteners * sizeof(*listeners));
	for (unsigned i = 0; i < cfg->threads; i++) {
		struct loop *l = &net->loops[i];
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->wakefd};

		l->net = net;
		pthread_mutex_init(&l->wake_lock, NULL);
		l->epfd = epoll_create1(EPOLL_CLOEXEC);
		l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (l->epfd < 0 || l->wakefd < 0 ||
		    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &ev) != 0)
			goto fail;
		for (unsigned j = 0; j < nlisteners; j++) {
			struct epoll_event lev = {.events = EPOLLIN | EPOLLEXCLUSIVE,
						  .data.ptr = (void *)(uintptr_t)(j + 1)};

			if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, listeners[j].fd, &lev) != 0)
				goto fail;
		}
	}
	for (unsigned i = 0; i < cfg->threads; i++) {
		if (pthread_create(&net->loops[i].thread, NULL, loop_main, &net->loops[i]) != 0)
			goto fail;
		net->loops[i].started = true;
	}
	*out = net;
	return LEDGER_OK;
fail:
	atomic_store(&net->stopping, true);
	api_net_stop(net);
	return LEDGER_ERR_INTERNAL;
}

void api_net_drain(struct api_net *net)
{
	atomic_store(&net->draining, true);
	for (unsigned i = 0; i < net->cfg.threads; i++) {
		for (unsigned j = 0; j < net->nlisteners; j++)
			epoll_ctl(net->loops[i].epfd, EPOLL_CTL_DEL, net->listeners[j].fd, NULL);
	}
	for (unsigned j = 0; j < net->nlisteners; j++) {
		if (net->listeners[j].fd >= 0)
			close(net->listeners[j].fd);
		net->listeners[j].fd = -1;
	}
}

void api_net_stop(struct api_net *net)
{
	if (net == NULL)
		return;
	atomic_store(&net->stopping, true);
	for (unsigned i = 0; net->loops != NULL && i < net->cfg.threads; i++) {
		struct loop *l = &net->loops[i];

		if (l->started)
			pthread_join(l->thread, NULL);
		while (l->conns != NULL) {
			struct api_net_conn *c = l->conns;

			if (!c->dead) {
				c->held = false; /* nothing is in flight once the server drained */
				conn_close(c);
			} else {
				conn_free(c);
			}
		}
		if (l->epfd > 0)
			close(l->epfd);
		if (l->wakefd > 0)
			close(l->wakefd);
		pthread_mutex_destroy(&l->wake_lock);
	}
	for (unsigned j = 0; net->listeners != NULL && j < net->nlisteners; j++) {
		if (net->listeners[j].fd >= 0)
			close(net->listeners[j].fd);
	}
	for (unsigned b = 0; b < ADDR_BUCKETS; b++) {
		while (net->addrs[b] != NULL) {
			struct addr_count *a = net->addrs[b];
			net->addrs[b] = a->next;
			free(a);
		}
	}
	if (net->spare_fd >= 0)
		close(net->spare_fd);
	pthread_mutex_destroy(&net->lock);
	free(net->listeners);
	free(net->loops);
	free(net);
}
