/*
 * sdk/programs/ledger-gateway/upstream.h: one streamed completion from a replica, read an
 * SSE event at a time. The gateway pulls events when it is ready to write
 * them, so the replica's pace, its silence and its failure are all seen in
 * one place, with the signal the failover API wants for each.
 */
#ifndef GATEWAY_UPSTREAM_H
#define GATEWAY_UPSTREAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ledger_client.h>

struct upstream; /* opaque: a libcurl transfer and the bytes not yet read */

enum upstream_read {
	UPSTREAM_EVENT,  /* one event, "data: ...\n\n", in *event */
	UPSTREAM_DONE,   /* "data: [DONE]": the completion ended well */
	UPSTREAM_SILENT, /* no byte for the soft timeout: slow, not failed (once per silence) */
	UPSTREAM_FAILED, /* the replica failed: see *signal */
	UPSTREAM_POKED,  /* *poke was set, or *wake_at passed: the caller has something to do */
};

/**
 * Starts POSTing @p body to @p url with the ledger headers for @p request_id
 * and @p attempt_id, and @p settled (a JSON array) for the rerun. Nothing is
 * read yet. @return NULL when out of memory or libcurl refuses.
 */
struct upstream *upstream_open(const char *url, const char *body, size_t body_len,
			       const char *request_id, const char *attempt_id, const char *settled);

/**
 * Reads until one event, the end, a failure, a silence, @p poke set (which
 * it clears), or the monotonic millisecond *@p wake_at passed (0: none;
 * cleared once passed). @p poke and @p wake_at may be NULL.
 * @param event on UPSTREAM_EVENT a new string (caller frees), else NULL
 * @param signal on UPSTREAM_FAILED what the failover API is told:
 *        replica_exited (nothing listens), upstream_closed (the stream broke
 *        or ended without [DONE]) or heartbeat_timeout (silent past
 *        @p stall_ms: it may be alive, so it must be fenced first)
 */
enum upstream_read upstream_next(struct upstream *u, uint32_t soft_ms, uint32_t stall_ms,
				 char **event, enum ledger_signal *signal, atomic_bool *poke,
				 _Atomic uint64_t *wake_at);

/** Counts the replica's silence from now: the caller did not read it for a while. */
void upstream_quiet_from_now(struct upstream *u);

/** Closes the transfer: the replica sees its stream cut. NULL-safe. */
void upstream_close(struct upstream *u);

/**
 * GETs @p url and returns its body as a new string, or NULL on any
 * failure (no answer in @p timeout_ms, a status other than 200).
 */
char *upstream_get(const char *url, long timeout_ms);

#endif
