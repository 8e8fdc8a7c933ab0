/*
 * api/net_loop.c: the polling threads of api/net.h. Each has an epoll set
 * holding every listener (EPOLLEXCLUSIVE: one thread wakes per
 * connection) and the connections it accepted, which stay on it for life,
 * and an eventfd that wakes it for the calls workers hand back. Here too:
 * the limits on connections per address and in all, checked as each is
 * accepted, and the deadlines, checked once a second.
 */
#include "api/net_int.h"

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

#include "api/metrics.h"
#include "api/tls.h"
#include "ledger/common/log.h"

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

void api_net_loop_addr_give(struct api_net *net, struct addr_count *a)
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
				api_net_conn_close(c);
			}
			break;
		case C_HEAD:
			if (!c->head_started) {
				/* Nothing of a request yet: an idle keep-alive, closed quietly. */
				if (now - c->since_ms >= cfg->idle_timeout_ms ||
				    atomic_load(&l->net->draining))
					api_net_conn_close(c);
			} else if (now - c->since_ms >= cfg->head_timeout_ms) {
				static const struct api_http_error late = {
					408, "request_timeout",
					"the request head did not arrive within --head-timeout"};

				api_metrics_http_timeout("head");
				api_net_conn_refuse(c, &late);
				api_net_conn_step(c);
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
					api_net_conn_start_write(c);
					api_net_conn_step(c);
					break;
				}
				c->body_done = true;
				ledger_buf_free(&c->body);
				api_net_conn_refuse(c, &late);
				api_net_conn_step(c);
			}
			break;
		case C_WRITE:
			if (now - c->last_io_ms >= cfg->idle_timeout_ms) {
				api_metrics_http_timeout("write");
				api_net_conn_close(c);
			}
			break;
		case C_LINGER:
			if (now - c->since_ms >= (c->refused ? LINGER_REFUSED_MS : LINGER_MS))
				api_net_conn_close(c);
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
			api_net_loop_addr_give(net, addr);
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
		c->last_io_ms = api_net_now_ms();
		c->next = l->conns;
		if (l->conns != NULL)
			l->conns->prev = c;
		l->conns = c;
		api_metrics_http_connections(1);
		if (lst->tls != NULL) {
			c->ssl = api_tls_session(lst->tls, fd);
			if (c->ssl == NULL) {
				api_net_conn_close(c);
				continue;
			}
			api_net_conn_enter(c, C_HANDSHAKE);
		} else {
			api_net_conn_enter(c, C_HEAD);
		}
		c->events = EPOLLIN;
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
			api_net_conn_close(c);
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
			api_net_conn_end_call(c, false);
			api_net_conn_free(c);
			continue;
		}
		c->net->ops->resume(c->call);
		api_net_conn_after_call(c);
		api_net_conn_step(c);
	}
}

void *api_net_loop_main(void *arg)
{
	struct loop *l = arg;
	struct api_net *net = l->net;
	int64_t last_sweep = api_net_now_ms();

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
					api_net_conn_close(c);
					continue;
				}
				api_net_conn_step(c);
			}
		}
		now = api_net_now_ms();
		if (now - last_sweep >= 1000 || atomic_load(&net->draining)) {
			sweep(l, now);
			last_sweep = now;
		}
	}
	return NULL;
}
