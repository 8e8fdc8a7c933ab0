/*
 * api/wire/stream.h: a reply written by a thread of the server's own, as it
 * comes. Some calls block for their answer (on an upstream server, say) and
 * send it in pieces (server-sent events); the polling threads must never
 * block, so the call is handed to a thread that writes its reply through
 * these functions while the connection's polling thread frames it, writes
 * it to the client at the client's pace, and watches the client for EOF or
 * a reset meanwhile.
 *
 *   callback on the polling thread:  wire_stream_start(conn, run, arg)
 *   run(arg) on its own thread:      wire_stream_head(), wire_stream_write()...,
 *                                    wire_stream_end(), then whatever cleaning up
 *                                    it does before it returns
 *
 * The call ends (the server's end() callback, on the polling thread) once
 * run() has returned and the reply is written or the client is gone, and
 * never before: until run() returns, the connection and whatever the call
 * shares with the server stay valid for the thread.
 */
#ifndef WIRE_STREAM_H
#define WIRE_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/err.h"

struct wire_conn;

/* Bytes a thread may queue for a slow client before wire_stream_write() waits. */
#define WIRE_STREAM_QUEUE_MAX (256u * 1024u)

/**
 * On the connection's polling thread, in a callback of the server's (once
 * the body it wants is read): hands the call to a new thread that runs
 * @p run(@p arg). The thread owns the reply from now on and ends it with
 * wire_stream_end(); a reply run() leaves without an end is cut short.
 * @return LEDGER_OK, or LEDGER_ERR_NOMEM when no thread could start (the
 *         call is the server's still: it answers with wire_conn_reply())
 */
LEDGER_MUSTCHECK enum ledger_err wire_stream_start(struct wire_conn *conn, void *(*run)(void *),
						   void *arg);

/**
 * From the call's thread, once: the reply's status and @p headers (whole
 * lines, each ending in CRLF; Date, the framing and Connection are added).
 * @param length the body's length, or -1 when it is not known: then the
 *        body is sent chunked (close-delimited to an HTTP/1.0 client)
 * @return LEDGER_OK, or LEDGER_ERR_UNAVAILABLE once the client is gone
 */
LEDGER_MUSTCHECK enum ledger_err wire_stream_head(struct wire_conn *conn, unsigned status,
						  const char *headers, int64_t length);

/**
 * From the call's thread: queues @p len bytes of the body (copied; none
 * are sent for a HEAD request), waiting while WIRE_STREAM_QUEUE_MAX bytes
 * wait for the client.
 * @return LEDGER_OK, or LEDGER_ERR_UNAVAILABLE once the client is gone
 */
LEDGER_MUSTCHECK enum ledger_err wire_stream_write(struct wire_conn *conn, const void *data,
						   size_t len);

/** From the call's thread: whether the client went away (EOF, a reset, a failed write). */
bool wire_stream_gone(struct wire_conn *conn);

/**
 * From the call's thread, once: the reply is over. @p complete: it ends as
 * its framing says (the last chunk; the whole Content-Length), and the
 * connection may serve another request; otherwise the connection closes
 * with the reply cut short, so the client sees that it broke off. What is
 * queued goes out while the thread cleans up; the call ends once run()
 * returned.
 */
void wire_stream_end(struct wire_conn *conn, bool complete);

#endif
