/*
 * api/wire/net.h: HTTP/1.1 connections (api/wire/net.c), the same for
 * every server of the project: listening
 * sockets, polling threads, TLS, strict framing (api/wire/http.h), the limits
 * that keep one client from holding the server (deadlines for the head,
 * the body and the reply, connections per address and in all, the reply
 * bytes slow readers may keep waiting), and keep-alive.
 *
 * A call is the server's: net.c and conn.c hand it each
 * event on the connection's polling thread through struct wire_net_ops,
 * and the server answers with the wire_conn_*() actions of api/wire/conn.h,
 * also on that thread. An
 * action is recorded and carried out once the callback returns, so no
 * callback ever runs inside another.
 */
#ifndef WIRE_NET_H
#define WIRE_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/wire/http.h"
#include "ledger/common/buf.h"
#include "ledger/common/err.h"

struct wire_net;
struct wire_conn;
struct wire_tls;

struct wire_net_ops {
	void *ctx;
	/*
	 * A head passed the wire checks: a call begins. @p head and its
	 * strings are valid until end(). @return the call, or NULL (out of
	 * memory: the connection closes)
	 */
	void *(*begin)(void *ctx, struct wire_conn *conn, const struct wire_http_head *head,
		       unsigned listener);
	/* The body asked for by wire_conn_read_body() is in, or passed its limit (@p body NULL). */
	void (*body)(void *call, struct ledger_buf *body);
	/* After wire_conn_wake(): the call goes on, on its connection's thread. */
	void (*resume)(void *call);
	/* The call is over: its reply was written (@p replied), or its connection is gone. */
	void (*end)(void *call, bool replied);
};

struct wire_net_config {
	int64_t head_timeout_ms;  /* from a request's first byte to the end of its head */
	int64_t body_timeout_ms;  /* from the end of the head to the end of the body */
	int64_t idle_timeout_ms;  /* keep-alive without a request; a reply not read */
	int64_t write_timeout_ms; /* a reply's time behind its reader, from its first byte */
	size_t max_unread;        /* reply bytes waiting on readers that are behind, in all */
	unsigned max_connections; /* in all; more are closed at once */
	unsigned max_per_address; /* from one address; 0: no limit */
	size_t discard_max;       /* body bytes read and dropped after an early reply */
	unsigned threads;
};

/* Limits for a server with no settings of its own: the defaults of the project's
 * --head-timeout, --body-timeout, --idle-timeout, --write-timeout,
 * --max-unread-output and connection limits. */
#define WIRE_NET_DEFAULTS                                                                   \
	{                                                                                   \
		.head_timeout_ms = 10000, .body_timeout_ms = 30000, .idle_timeout_ms = 60000, \
		.write_timeout_ms = 60000, .max_unread = (size_t)64 << 20,                    \
		.max_connections = 4096, .max_per_address = 256,                              \
		.discard_max = (size_t)9 << 20, .threads = 2,                                 \
	}

/* The connections an operations listener (health, readiness, metrics) takes
 * at once: probes and scrapers, a few each, never the API's clients. */
#define WIRE_OPS_MAX_CONNECTIONS 64

struct wire_net_listener {
	int fd;              /* owned from wire_net_start() on */
	struct wire_tls *tls; /* NULL: plaintext; borrowed */
	bool per_address;    /* counts towards the per-address limit (TCP) */
	unsigned max_connections; /* a budget of its own (an operations listener, which a
				   * flood on the API must not starve); 0: the shared one */
};

/**
 * Starts the polling threads on @p listeners (the index of each is what
 * begin() is told). @p ops and @p tls are borrowed until wire_net_stop().
 */
LEDGER_MUSTCHECK enum ledger_err wire_net_start(const struct wire_net_config *cfg,
					       const struct wire_net_ops *ops,
					       const struct wire_net_listener *listeners,
					       unsigned nlisteners, struct wire_net **out);

/** Stops accepting: the listeners close; calls in flight go on; replies close. */
void wire_net_drain(struct wire_net *net);

/**
 * Stops the threads and closes every connection. No call may be held by
 * another thread any more (a worker's, a stream's): wait for
 * wire_net_in_flight() to reach 0 after wire_net_drain() first.
 */
void wire_net_stop(struct wire_net *net);

/** Calls begun and not yet ended. Thread-safe. */
long wire_net_in_flight(const struct wire_net *net);

#endif
