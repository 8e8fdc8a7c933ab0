/*
 * api/wire/listen.h: opening the sockets a server listens on, and sizing
 * its connection limit to what the process's file limit allows.
 */
#ifndef WIRE_LISTEN_H
#define WIRE_LISTEN_H

#include <stdbool.h>
#include <stddef.h>

/**
 * Opens the listening socket @p spec names ("HOST:PORT", "[V6]:PORT" or
 * "unix:/path"; port 0: a free one), non-blocking.
 * @param bound receives the address actually bound (the port of ":0")
 * @param err receives one line on failure
 * @return the socket; -1 if it cannot be opened; -2 if @p spec is malformed
 */
int wire_listen_open(const char *spec, char *bound, size_t boundlen, char *err, size_t errlen);

/** True when @p fd listens on a loopback address or a unix socket. */
bool wire_listen_private(int fd);

/**
 * The connections the process can hold: its file limit, raised to the
 * hard one, less @p reserved descriptors (a server's own connections) and a few
 * for logs and listeners, so that accepting never fails for want of a
 * descriptor; at most @p wanted.
 */
unsigned wire_listen_room(unsigned wanted, unsigned reserved);

#endif
