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
	UPSTREAM_ANSWER, /* a whole answer: another status than 200, or a completion asked for
	                    without "stream"; upstream_answer() has it */
	UPSTREAM_SILENT, /* no byte for the soft timeout: slow, not failed (once per silence) */
	UPSTREAM_FAILED, /* the replica failed: see *signal */
	UPSTREAM_POKED,  /* *poke was set, or *wake_at passed: the caller has something to do */
};

/* Where a completion goes and how. Borrowed for upstream_open()'s call. */
struct upstream_target {
	const char *url;         /* the replica's base URL */
	const char *api_key;     /* sent as "Authorization: Bearer"; NULL: none */
	bool ledger_headers;     /* X-Ledger-Request-Id, -Attempt-Id and -Settled-Tool-Calls */
	bool stream;             /* the client asked for an SSE stream */
	const char *traceparent; /* the attempt's W3C trace context, sent as is; NULL: none */
	const char *tracestate;  /* its tracestate; NULL: none */
};

/**
 * Starts POSTing @p body to @p t's /v1/chat/completions, with the ledger
 * headers for @p request_id and @p attempt_id and @p settled (a JSON array)
 * when @p t asks for them. Nothing is read yet.
 * @return NULL when out of memory or libcurl refuses.
 */
struct upstream *upstream_open(const struct upstream_target *t, const char *body, size_t body_len,
			       const char *request_id, const char *attempt_id, const char *settled);

/**
 * Moves @p u's transfer on without waiting: the connection started and, when
 * it is up at once (a replica on the same host, or a near one), the request
 * written, so that the replica works while its caller waits for something
 * else. Whatever comes back is read by upstream_next(), later.
 */
void upstream_kick(struct upstream *u);

/**
 * Reads until one event, the end, a whole answer, a failure, a silence,
 * @p poke set (which it clears), or the monotonic millisecond *@p wake_at
 * passed (0: none; cleared once passed). @p poke and @p wake_at may be NULL.
 * @param event on UPSTREAM_EVENT a new string (caller frees), else NULL
 * @param signal on UPSTREAM_FAILED what the failover API is told:
 *        replica_exited (nothing listens), upstream_closed (the stream broke,
 *        carried an error event, or ended without [DONE]) or
 *        heartbeat_timeout (silent past @p stall_ms: it may be alive, so it
 *        must be fenced first)
 */
enum upstream_read upstream_next(struct upstream *u, uint32_t soft_ms, uint32_t stall_ms,
				 char **event, enum ledger_signal *signal, atomic_bool *poke,
				 _Atomic uint64_t *wake_at);

/* A whole answer of the replica, borrowed from the upstream until it is closed. */
struct upstream_answer {
	long status;
	const char *content_type; /* as the replica sent it; "" if none */
	const char *body;
	size_t len;
};

/** The answer behind UPSTREAM_ANSWER. */
struct upstream_answer upstream_answer(const struct upstream *u);

/** Counts the replica's silence from now: the caller did not read it for a while. */
void upstream_quiet_from_now(struct upstream *u);

/**
 * Sets up the connection cache every transfer shares, once, after
 * curl_global_init(). @return false when libcurl cannot: each transfer then
 * opens a connection of its own
 */
bool upstream_start(void);

/**
 * After a stream's [DONE]: reads the transfer to its end (the body's last
 * chunk) for at most @p max_ms, so that upstream_close() finds it whole and
 * leaves its connection to the next request. NULL-safe.
 */
void upstream_finish(struct upstream *u, uint32_t max_ms);

/**
 * Closes the transfer: the replica sees its stream cut, unless its answer
 * came whole (its connection then serves a later transfer). NULL-safe.
 */
void upstream_close(struct upstream *u);

/* A GET's outcome. */
struct upstream_reply {
	long status; /* 0: no answer (refused, reset, timed out) */
	char *body;  /* owned; NULL with status 0 */
	size_t len;
};

/**
 * GETs @p url, with @p api_key as a bearer unless NULL, within
 * @p timeout_ms. Free the reply with upstream_reply_clear().
 */
struct upstream_reply upstream_get(const char *url, const char *api_key, long timeout_ms);

/** Frees what @p r owns. */
void upstream_reply_clear(struct upstream_reply *r);

#endif
