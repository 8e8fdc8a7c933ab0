/*
 * api/wire/conn.h: what the server may do with the connection
 * of a call, on that connection's polling thread, during a callback of
 * struct wire_net_ops (api/wire/net.h); wire_conn_wake() alone from any thread.
 */
#ifndef WIRE_CONN_H
#define WIRE_CONN_H

#include <stdbool.h>
#include <stddef.h>

struct wire_conn;

/**
 * Reads the call's body, at most @p max bytes; body() follows. An
 * "Expect: 100-continue" is answered now, and not before.
 */
void wire_conn_read_body(struct wire_conn *conn, size_t max);

/**
 * Sends the reply: @p status, @p headers (whole lines, each ending in
 * CRLF; Content-Length, Date and Connection are added) and @p body, which
 * net.c frees with free() once written. A reply before the body was read
 * drops the rest of the body when it is short, or closes the connection.
 */
void wire_conn_reply(struct wire_conn *conn, unsigned status, const char *headers, char *body,
		    size_t len);

/** The call will be woken by wire_conn_wake(); its connection waits for it. */
void wire_conn_hold(struct wire_conn *conn);

/**
 * Whether the call is held: handed to a worker or an offload thread that
 * may be writing it now. On the connection's thread; until the wake the
 * call is not to be read or answered.
 */
bool wire_conn_held(const struct wire_conn *conn);

/** From any thread, once per wire_conn_hold(): resume() follows on the connection's thread. */
void wire_conn_wake(struct wire_conn *conn);

/** True when replies close their connection (draining). */
bool wire_conn_draining(const struct wire_conn *conn);

/**
 * The peer's IP address as text ("127.0.0.1", "::1") into @p out, for
 * traces; a system call, so for the calls that are traced only.
 * @return false: not an IP connection (a unix socket), or gone
 */
bool wire_conn_peer(const struct wire_conn *conn, char *out, size_t cap);

#endif
