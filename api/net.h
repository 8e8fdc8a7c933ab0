/*
 * api/net.h: ledgerd's HTTP/1.1 connections (api/net.c): listening
 * sockets, polling threads, TLS, strict framing (api/http.h), the limits
 * that keep one client from holding the server (deadlines for the head
 * and the body, connections per address and in all), and keep-alive.
 *
 * A call is the server's (api/server.c): net.c and conn.c hand it each
 * event on the connection's polling thread through struct api_net_ops,
 * and the server answers with the api_conn_*() actions of api/conn.h,
 * also on that thread. An
 * action is recorded and carried out once the callback returns, so no
 * callback ever runs inside another.
 */
#ifndef API_NET_H
#define API_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/http.h"
#include "ledger/common/buf.h"
#include "ledger/common/err.h"

struct api_net;
struct api_net_conn;
struct api_tls;

struct api_net_ops {
	void *ctx;
	/*
	 * A head passed the wire checks: a call begins. @p head and its
	 * strings are valid until end(). @return the call, or NULL (out of
	 * memory: the connection closes)
	 */
	void *(*begin)(void *ctx, struct api_net_conn *conn, const struct api_http_head *head,
		       unsigned listener);
	/* The body asked for by api_conn_read_body() is in, or passed its limit (@p body NULL). */
	void (*body)(void *call, struct ledger_buf *body);
	/* After api_conn_wake(): the call goes on, on its connection's thread. */
	void (*resume)(void *call);
	/* The call is over: its reply was written (@p replied), or its connection is gone. */
	void (*end)(void *call, bool replied);
};

struct api_net_config {
	int64_t head_timeout_ms;  /* from a request's first byte to the end of its head */
	int64_t body_timeout_ms;  /* from the end of the head to the end of the body */
	int64_t idle_timeout_ms;  /* keep-alive without a request; a reply not read */
	unsigned max_connections; /* in all; more are closed at once */
	unsigned max_per_address; /* from one address; 0: no limit */
	size_t discard_max;       /* body bytes read and dropped after an early reply */
	unsigned threads;
};

struct api_net_listener {
	int fd;              /* owned from api_net_start() on */
	struct api_tls *tls; /* NULL: plaintext; borrowed */
	bool per_address;    /* counts towards the per-address limit (TCP) */
};

/**
 * Starts the polling threads on @p listeners (the index of each is what
 * begin() is told). @p ops and @p tls are borrowed until api_net_stop().
 */
LEDGER_MUSTCHECK enum ledger_err api_net_start(const struct api_net_config *cfg,
					       const struct api_net_ops *ops,
					       const struct api_net_listener *listeners,
					       unsigned nlisteners, struct api_net **out);

/** Stops accepting: the listeners close; calls in flight go on; replies close. */
void api_net_drain(struct api_net *net);

/** Stops the threads and closes every connection. */
void api_net_stop(struct api_net *net);

/** Calls begun and not yet ended. Thread-safe. */
long api_net_in_flight(const struct api_net *net);

#endif
