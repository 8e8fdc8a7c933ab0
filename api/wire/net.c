/*
 * api/wire/net.c: the polling threads of api/wire/net.h, and their start and stop. Each has an epoll set
 * holding every listener (EPOLLEXCLUSIVE: one thread wakes per
 * connection) and the connections it accepted, which stay on it for life,
 * and an eventfd that wakes it for the calls workers hand back. Here too:
 * the limits on connections per address and in all, checked as each is
 * accepted; the deadlines, checked once a second; the bound on the
 * output waiting on slow readers; and the turns a pipelining connection
 * gave up, taken after each batch of events.
 */
#include "api/wire/net_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/wire/stats.h"
#include "api/wire/tls.h"
#include "ledger/common/log.h"

/* --- deadlines --- */

/*
 * A reply has an end: the time its client has been behind it, from its
 * first byte, is bounded by --write-timeout, however often it reads a
 * little. A reply written as it comes counts only the time the client
 * is behind, not the time its thread is silent.
 */
static bool too_slow(const struct wire_conn *c, int64_t now)
{
	int64_t limit = c->net->cfg.write_timeout_ms;

	return limit > 0 && wire_conn_behind_ms(c, now) >= limit;
}

static void sweep(struct loop *l, int64_t now)
{
	const struct wire_net_config *cfg = &l->net->cfg;
	struct wire_conn *c = l->conns, *next;

	for (; c != NULL; c = next) {
		next = c->next;
		if (c->dead)
			continue;
		switch (c->state) {
		case C_HANDSHAKE:
			if (now - c->since_ms >= cfg->head_timeout_ms) {
				wire_stats_timeout("head");
				wire_conn_close(c);
			}
			break;
		case C_HEAD:
			if (!c->head_started) {
				/* Nothing of a request yet: an idle keep-alive, closed quietly;
				 * one that never sent a byte holds a slot for --head-timeout
				 * alone (a flood of silent connections fills no budget). */
				int64_t limit =
					c->spoke || cfg->head_timeout_ms > cfg->idle_timeout_ms
						? cfg->idle_timeout_ms
						: cfg->head_timeout_ms;

				if (now - c->since_ms >= limit || atomic_load(&l->net->draining))
					wire_conn_close(c);
			} else if (now - c->since_ms >= cfg->head_timeout_ms) {
				static const struct wire_http_error late = {
					408, "request_timeout",
					"the request head did not arrive within --head-timeout"};

				wire_stats_timeout("head");
				wire_conn_refuse(c, &late);
				wire_conn_step(c);
			}
			break;
		case C_BODY:
		case C_DROP:
			if (now - c->since_ms >= cfg->body_timeout_ms) {
				static const struct wire_http_error late = {
					408, "request_timeout",
					"the request body did not arrive within --body-timeout"};

				wire_stats_timeout("body");
				if (c->state == C_DROP) {
					/* The reply is ready: it goes out, then the connection closes. */
					c->close_after = true;
					wire_conn_start_write(c);
					wire_conn_step(c);
					break;
				}
				c->body_done = true;
				ledger_buf_free(&c->body);
				wire_conn_refuse(c, &late);
				wire_conn_step(c);
			}
			break;
		case C_WRITE:
			if (now - c->last_io_ms >= cfg->idle_timeout_ms || too_slow(c, now)) {
				wire_stats_timeout("write");
				wire_conn_abort(c);
			}
			break;
		case C_LINGER:
			if (now - c->since_ms >= (c->refused ? LINGER_REFUSED_MS : LINGER_MS))
				wire_conn_close(c);
			break;
		case C_STREAM:
			/* A reader too slow for the bytes waiting; a thread's silence is its own. */
			if ((c->out_off < c->out_len && now - c->last_io_ms >= cfg->idle_timeout_ms) ||
			    too_slow(c, now)) {
				wire_stats_timeout("write");
				wire_conn_abort(c);
			}
			break;
		case C_CALL:
			break;
		}
	}
}

/* --- the output waiting on slow readers --- */

/*
 * The bytes of a reply the kernel takes before they can be sent. Without
 * a bound it takes megabytes (the send buffer grows to tcp_wmem's
 * maximum), so a reply to a client that reads a trickle sits whole in the
 * kernel, out of reach of --write-timeout and --max-unread-output. Bytes
 * in flight are not bounded by it: a fast link keeps its throughput.
 */
#define NOTSENT_LOWAT (16 * 1024)

static int behind_longer(const void *a, const void *b)
{
	const struct wire_conn *x = *(struct wire_conn *const *)a;
	const struct wire_conn *y = *(struct wire_conn *const *)b;

	return (x->behind_since_ms > y->behind_since_ms) - (x->behind_since_ms < y->behind_since_ms);
}

/*
 * The replies waiting on readers that are behind are over --max-unread-output
 * in all: this thread's connections behind longest are closed first, until
 * the total is under it again (another thread sheds its own). Outside any
 * callback: after each connection's step, so the total passes the bound by
 * one reply at most.
 */
static void shed_unread(struct loop *l)
{
	struct wire_net *net = l->net;
	struct wire_conn **behind = NULL, *c;
	size_t n = 0, cap = 0;

	if (net->cfg.max_unread == 0 || atomic_load(&net->unread) <= net->cfg.max_unread)
		return;
	for (c = l->conns; c != NULL; c = c->next) {
		if (c->dead || c->behind_since_ms == 0)
			continue;
		if (n == cap) {
			size_t more = cap == 0 ? 64 : cap * 2;
			struct wire_conn **grown = realloc(behind, more * sizeof(*grown));

			if (grown == NULL)
				break; /* those found so far are shed; the rest at the next look */
			behind = grown;
			cap = more;
		}
		behind[n++] = c;
	}
	if (n > 0)
		qsort(behind, n, sizeof(*behind), behind_longer);
	for (size_t i = 0; i < n && atomic_load(&net->unread) > net->cfg.max_unread; i++) {
		wire_stats_shed();
		wire_conn_abort(behind[i]);
	}
	free(behind);
}

/* --- accepting --- */

/*
 * Out of files: the connection waiting would wake every poll again. The
 * spare descriptor makes room to accept it and close it at once.
 * @return true when one was shed
 */
static bool shed_one(struct wire_net *net, int lfd)
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
	wire_stats_connection_refused("files");
	LOG_WARN("http: out of file descriptors; a connection was closed unanswered");
	return fd >= 0;
}

static void accept_on(struct loop *l, unsigned li)
{
	struct wire_net *net = l->net;
	const struct wire_net_listener *lst = &net->listeners[li];

	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		struct wire_conn *c;
		struct addr_count *addr = NULL;
		struct epoll_event ev;
		unsigned max;
		atomic_uint *count = wire_net_budget(net, li, &max);
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
		if (atomic_fetch_add(count, 1) >= max) {
			atomic_fetch_sub(count, 1);
			wire_stats_connection_refused("total");
			close(fd);
			continue;
		}
		if (lst->per_address && net->cfg.max_per_address > 0) {
			unsigned char key[17];
			bool full = false;

			wire_addrs_key(&ss, key);
			addr = wire_addrs_take(net, key, &full);
			if (addr == NULL) {
				atomic_fetch_sub(count, 1);
				wire_stats_connection_refused(full ? "per_address"
									 : "memory");
				close(fd);
				continue;
			}
		}
		c = calloc(1, sizeof(*c));
		if (c == NULL) {
			wire_addrs_give(net, addr);
			atomic_fetch_sub(count, 1);
			close(fd);
			continue;
		}
		if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
			int lowat = NOTSENT_LOWAT;

			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat));
		}
		c->loop = l;
		c->net = net;
		c->fd = fd;
		c->listener = li;
		c->addr = addr;
		c->last_io_ms = wire_conn_now_ms();
		c->next = l->conns;
		if (l->conns != NULL)
			l->conns->prev = c;
		l->conns = c;
		wire_stats_connections(1);
		if (lst->tls != NULL) {
			c->ssl = wire_tls_session(lst->tls, fd);
			if (c->ssl == NULL) {
				wire_conn_close(c);
				continue;
			}
			wire_conn_enter(c, C_HANDSHAKE);
		} else {
			wire_conn_enter(c, C_HEAD);
		}
		c->events = EPOLLIN;
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
			wire_conn_close(c);
			continue;
		}
	}
}

/* Steps the connections that gave their turn up, once the batch of events in hand is done. */
static void take_turns(struct loop *l)
{
	struct wire_conn *c = l->turns, *next;

	l->turns = NULL;
	for (; c != NULL; c = next) {
		next = c->turn_next;
		c->turn_listed = false;
		if (!c->dead)
			wire_conn_step(c);
	}
}

/* --- the polling threads --- */

/* The connections other threads handed back, in the order they came. */
static void take_woken(struct loop *l)
{
	struct wire_conn *c, *next;
	uint64_t n;

	if (read(l->wakefd, &n, sizeof(n)) < 0) {
		/* EAGAIN: a wake raced the read; the list is what counts. */
	}
	for (c = wire_wake_take(l); c != NULL; c = next) {
		next = c->taken_next;
		if ((c->taken_what & WIRE_WAKE_RELEASE) != 0) {
			c->held = false;
			if (c->dead) {
				wire_conn_end_call(c, false);
				wire_conn_free(c);
				continue;
			}
			if (c->pipe == NULL) {
				c->net->ops->resume(c->call);
				wire_conn_after_call(c);
			}
		} else if (c->dead) {
			continue; /* a stream's bytes for a client that is gone */
		}
		wire_conn_step(c);
		shed_unread(l);
	}
}

static void *loop_main(void *arg)
{
	struct loop *l = arg;
	struct wire_net *net = l->net;
	int64_t last_sweep = wire_conn_now_ms();

	while (!atomic_load(&net->stopping)) {
		struct epoll_event evs[64];
		/* Connections that gave their turn up go on at once, after this batch. */
		int n = epoll_wait(l->epfd, evs, 64, l->turns != NULL ? 0 : 250);
		int64_t now;

		l->in_batch = true;
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;

			if (p == &l->wakefd) {
				take_woken(l);
			} else if ((uintptr_t)p >= 1 && (uintptr_t)p <= net->nlisteners) {
				/* A listener's data is its index + 1; a connection's, its address. */
				accept_on(l, (unsigned)((uintptr_t)p - 1));
			} else {
				struct wire_conn *c = p;

				if (c->dead)
					continue; /* closed earlier in this batch (its memory waits) */
				if ((evs[i].events & (EPOLLERR | EPOLLHUP)) != 0 &&
				    (evs[i].events & EPOLLIN) == 0) {
					wire_conn_close(c);
					continue;
				}
				if (c->state == C_STREAM && (evs[i].events & EPOLLRDHUP) != 0) {
					/* The client left while a thread writes its reply. */
					wire_conn_close(c);
					continue;
				}
				if (c->state == C_CALL) {
					wire_conn_hold_input(c);
					continue;
				}
				wire_conn_step(c);
				shed_unread(l);
			}
		}
		take_turns(l);
		shed_unread(l);
		l->in_batch = false;
		wire_conn_bury(l);
		now = wire_conn_now_ms();
		if (now - last_sweep >= 1000 || atomic_load(&net->draining)) {
			sweep(l, now);
			last_sweep = now;
		}
	}
	return NULL;
}

/* --- starting and stopping --- */

long wire_net_in_flight(const struct wire_net *net)
{
	return atomic_load(&net->in_flight);
}

enum ledger_err wire_net_start(const struct wire_net_config *cfg, const struct wire_net_ops *ops,
			      const struct wire_net_listener *listeners, unsigned nlisteners,
			      struct wire_net **out)
{
	struct wire_net *net = calloc(1, sizeof(*net));

	*out = NULL;
	if (net == NULL)
		return LEDGER_ERR_NOMEM;
	net->cfg = *cfg;
	net->ops = ops;
	net->nlisteners = nlisteners;
	net->listeners = calloc(nlisteners, sizeof(*net->listeners));
	net->own_connections = calloc(nlisteners, sizeof(*net->own_connections));
	net->loops = calloc(cfg->threads, sizeof(*net->loops));
	pthread_mutex_init(&net->lock, NULL);
	net->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (net->listeners == NULL || net->own_connections == NULL || net->loops == NULL)
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
	wire_net_stop(net);
	return LEDGER_ERR_INTERNAL;
}

void wire_net_drain(struct wire_net *net)
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

void wire_net_stop(struct wire_net *net)
{
	if (net == NULL)
		return;
	atomic_store(&net->stopping, true);
	for (unsigned i = 0; net->loops != NULL && i < net->cfg.threads; i++) {
		struct loop *l = &net->loops[i];

		if (l->started)
			pthread_join(l->thread, NULL);
		while (l->conns != NULL) {
			struct wire_conn *c = l->conns;

			if (!c->dead) {
				c->held = false; /* nothing is in flight once the server drained */
				wire_conn_close(c);
			} else {
				wire_conn_free(c);
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
	free(net->own_connections);
	free(net->loops);
	free(net);
}
