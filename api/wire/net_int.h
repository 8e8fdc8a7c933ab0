/*
 * api/wire/net_int.h: what api/wire/net.c (the polling threads, accepting, limits
 * and deadlines) and api/wire/conn.c (a connection's states and I/O) share,
 * and nothing outside them sees: the connection, the thread, the server's
 * state, and the moves of a connection the threads make. net.c calls
 * into conn.c, never the other way.
 */
#ifndef WIRE_NET_INT_H
#define WIRE_NET_INT_H

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "api/wire/net.h"

enum conn_state {
	C_HANDSHAKE, /* TLS handshake */
	C_HEAD,      /* reading a head */
	C_CALL,      /* the server has the call */
	C_BODY,      /* reading the body the server asked for */
	C_DROP,      /* the reply is ready; dropping the rest of the body first */
	C_WRITE,     /* writing the reply */
	C_LINGER,    /* reply written, write side shut: reading until the client closes */
	C_STREAM,    /* a thread of the server's writes the reply (api/wire/stream.h) */
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

struct wire_conn {
	struct loop *loop;
	struct wire_net *net;
	int fd;
	SSL *ssl;
	unsigned listener;
	struct addr_count *addr; /* NULL: not counted per address */
	enum conn_state state;
	struct wire_conn *prev, *next; /* the loop's connections */

	size_t lingered; /* bytes dropped in LINGER */
	bool refused;    /* the reply is a refusal on the wire: a short linger */

	/* Input: in[0, in_len), of which the first in_off are consumed. */
	char *in;
	size_t in_len, in_cap, in_off, scanned;
	bool eof;

	/* The call. */
	void *call;
	struct wire_http_head head;
	char *head_buf; /* the head, copied out of the input buffer for the call's life */
	bool held;              /* another thread has the call until it wakes it */
	struct wire_pipe *pipe; /* the call's reply comes from a thread (api/wire/stream.c) */
	/* The wake list (api/wire/wake.c). */
	unsigned wake_what;          /* under the loop's wake_lock: the WIRE_WAKE_* asked */
	bool wake_listed;            /* under the loop's wake_lock: on the loop's list */
	struct wire_conn *wake_next; /* under the loop's wake_lock */
	unsigned taken_what;         /* on the loop's thread: what the last take found */
	struct wire_conn *taken_next;
	bool body_asked, body_done, reply_ready;
	size_t body_max;
	uint64_t body_left; /* Content-Length bytes still to come */
	struct wire_http_chunked chunked;
	struct ledger_buf body;

	/* Output. */
	char *out;
	size_t out_len, out_off;
	bool close_after;
	bool dead; /* the connection is gone; the call is ended once no thread holds it */
	/*
	 * Behind: a write of the output would block, the client not reading
	 * it as fast as it is there. The time behind adds up over a reply
	 * (write_timeout_ms); while behind, out_len counts in the net's unread.
	 */
	int64_t behind_since_ms; /* 0: not behind */
	int64_t behind_ms;       /* behind in this reply before behind_since_ms */
	size_t unread;           /* what it adds to the net's unread */

	int64_t since_ms;   /* when the current state's deadline started */
	int64_t last_io_ms; /* last byte in or out */
	bool head_started;  /* a byte of the next head arrived */
	bool spoke;         /* a byte of a request ever arrived on it */
	unsigned turn_requests; /* requests begun in the current turn */
	bool turn_listed;   /* on its loop's turns, to go on after the others */
	struct wire_conn *turn_next;
	unsigned events;    /* what the epoll set waits for now */
};

struct loop {
	struct wire_net *net;
	pthread_t thread;
	int epfd, wakefd;
	struct wire_conn *conns; /* every connection of this thread */
	pthread_mutex_t wake_lock;
	struct wire_conn *woken; /* woken by other threads, newest first (api/wire/wake.c) */
	struct wire_conn *turns; /* gave their turn up with requests waiting; the loop's own */
	bool in_batch;           /* handling a batch of events: frees wait for its end */
	struct wire_conn *graves; /* freed in this batch, linked by next: its events may name them */
	bool started;
};

/* Connections per address, under the net's lock. */
struct addr_count {
	unsigned char key[17]; /* family byte, then the address */
	unsigned count;
	struct addr_count *next;
};

#define ADDR_BUCKETS 1024

struct wire_net {
	struct wire_net_config cfg;
	const struct wire_net_ops *ops;
	struct wire_net_listener *listeners;
	unsigned nlisteners;
	struct loop *loops;
	atomic_bool stopping, draining;
	atomic_uint connections;      /* of the listeners that share cfg.max_connections */
	atomic_uint *own_connections; /* [nlisteners]: of those with a budget of their own */
	atomic_long in_flight;
	atomic_size_t unread; /* output of connections that are behind, in bytes */
	pthread_mutex_t lock;
	struct addr_count *addrs[ADDR_BUCKETS];
	int spare_fd; /* closed to accept and shed a connection when the process is out of files */
};

/* The count that listener @p li's connections take from; its limit in @p max (may be NULL). */
static inline atomic_uint *wire_net_budget(struct wire_net *net, unsigned li, unsigned *max)
{
	bool own = li < net->nlisteners && net->listeners[li].max_connections > 0;

	if (max != NULL)
		*max = own ? net->listeners[li].max_connections : net->cfg.max_connections;
	return own ? &net->own_connections[li] : &net->connections;
}

/* What another thread asks of a connection's polling thread. */
enum {
	WIRE_WAKE_RELEASE = 1, /* the thread that held the call lets go of it */
	WIRE_WAKE_KICK = 2,    /* a stream's thread queued bytes */
};

/* Requests one connection begins in one turn of its loop: a client that
 * pipelines keeps a polling thread no longer than this, then the others
 * that are ready have their turn. */
#define WIRE_TURN_REQUESTS 16

/* From any thread: puts @p c on its loop's wake list, asking @p what. */
void wire_wake_push(struct wire_conn *c, unsigned what);

/*
 * On the loop's thread: takes the wake list, oldest first, linked by
 * taken_next, each connection's asks in taken_what.
 */
struct wire_conn *wire_wake_take(struct loop *l);

/* What a stream's pipe holds for the polling thread (api/wire/stream.c). */
enum wire_stream_pull {
	WIRE_STREAM_MORE, /* bytes for the connection's output (owned by the caller) */
	WIRE_STREAM_WAIT, /* nothing yet: the thread kicks when there is */
	WIRE_STREAM_DONE, /* the reply ended whole and the thread let go */
	WIRE_STREAM_CUT,  /* the reply ended cut short, or could not be kept */
};

struct wire_pipe;

/* On the polling thread, its output written: takes what the thread queued (MORE: in
 * @p out, @p len bytes, for the connection's output). */
enum wire_stream_pull wire_stream_pull(struct wire_conn *c, bool *close_after, char **out,
				       size_t *len);

/* The client is gone: the thread's next write says so, and a waiting one wakes. */
void wire_stream_lost(struct wire_pipe *p);

/* Frees a pipe no thread uses any more. NULL-safe. */
void wire_stream_free(struct wire_pipe *p);

/* Monotonic milliseconds. */
int64_t wire_conn_now_ms(void);

/* Enters state @p s; its deadline counts from now. */
void wire_conn_enter(struct wire_conn *c, enum conn_state s);

/* Ends the call, if there is one and no worker holds it. */
void wire_conn_end_call(struct wire_conn *c, bool replied);

/*
 * Unlinks and frees a connection already closed. Within a batch of events
 * the memory stays until wire_conn_bury() at the batch's end: a later event
 * of the batch may name the connection (it finds it dead).
 */
void wire_conn_free(struct wire_conn *c);

/* The batch of events is done: frees the connections wire_conn_free() kept. */
void wire_conn_bury(struct loop *l);

/* Closes the connection; its call ends now, or when its worker hands it back. */
void wire_conn_close(struct wire_conn *c);

/*
 * Closes the connection with a reset: what the kernel still holds of its
 * reply is dropped at once rather than sent on to a client too slow for it.
 */
void wire_conn_abort(struct wire_conn *c);

/* Answers a refusal on the wire in the JSON envelope, then closes. */
void wire_conn_refuse(struct wire_conn *c, const struct wire_http_error *err);

/* How long the connection has been behind in its current reply, at @p now. */
int64_t wire_conn_behind_ms(const struct wire_conn *c, int64_t now);

/* The reply is ready: write it (step() carries it out). */
void wire_conn_start_write(struct wire_conn *c);

/* After a callback of the server's: carries out what it asked. */
void wire_conn_after_call(struct wire_conn *c);

/* Moves the connection on as far as its input and output allow. */
void wire_conn_step(struct wire_conn *c);

/* Input arrived while the connection's call runs: stop waiting on it until the call ends. */
void wire_conn_hold_input(struct wire_conn *c);

/* api/wire/addrs.c: the per-address key of a peer's address (IPv4 mapped into
 * IPv6 as IPv4, IPv6 by its /64). */
void wire_addrs_key(const struct sockaddr_storage *ss, unsigned char key[17]);

/* One more connection from @p key; NULL and @p full set when it is at its limit. */
struct addr_count *wire_addrs_take(struct wire_net *net, const unsigned char key[17], bool *full);

/* One connection fewer from the address @p a counts. */
void wire_addrs_give(struct wire_net *net, struct addr_count *a);

#endif
