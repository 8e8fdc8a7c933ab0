/*
 * sdk/programs/ledger-gateway/run.h: a logical request being served by
 * this process: its attempts on the engines, driven by a thread of the
 * run's own, and the events they produced, numbered from 1, kept for the
 * clients that attach to it. A client's connection attaches; when it drops,
 * a keyed request's run goes on for a hold, and a repeat of the request
 * attaches again and is served from the event after its Last-Event-ID
 * (GATEWAY.md, "Events, holds and resuming"). Nothing is delivered to no
 * one: the first delta is recorded only while a client is attached.
 * events.h serves a run's events to a client.
 */
#ifndef GATEWAY_RUN_H
#define GATEWAY_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ledger_client.h>

#include "sdk/programs/ledger-gateway/config.h"
#include "sdk/programs/ledger-gateway/trace.h"

struct gateway_run; /* reference-counted */
struct upstream;    /* upstream.h */

/* How a run begins. Pointers borrowed for the call unless said taken. */
struct gateway_run_start {
	const char *request_id;   /* the logical request */
	bool keyed;               /* its client named it: holds apply, repeats attach */
	const char *input_sha256; /* the fingerprint of its input, sent with every attempt */
	char *body;               /* the client's request, taken */
	size_t body_len;
	unsigned attempts;              /* the request's attempts, the begun one included */
	struct ledger_attempt *attempt; /* the attempt begun for the run, taken */
	size_t replica;    /* its replica, whose request in flight the run takes (and gives back) */
	bool stream;       /* an SSE stream was asked for; else one JSON answer */
	const char *model; /* the model asked for, or NULL */
	const char *revision;        /* the request's model revision: every rerun's */
	struct gateway_trace *trace; /* the span of the request that starts the run, or NULL:
	                                the run holds a reference; its attempts' parent */
	struct ledger_span *span;    /* the begun attempt's span, taken; or NULL */
	struct upstream *up;         /* its engine request, sent ahead of the begin
	                                (gateway_run_engine_ahead()), taken; or NULL */
};

/** Remembers the settings every run reads (borrowed for the process's life). */
void gateway_run_setup(struct gateway *gw);

/**
 * Starts a run on a thread of its own, from the attempt begun for it, and,
 * keyed, lists it under its request id for repeats to find.
 * @return the run with one reference for the caller, or NULL (no memory or
 *         thread: nothing was begun; @p st's taken members are freed, and its
 *         replica's request in flight given back)
 */
struct gateway_run *gateway_run_start(struct gateway_run_start *st);

/**
 * Sends the client's request @p body to replica @p replica ahead of the
 * begin of its attempt, in the attempt's trace context @p w, so that the
 * engine connects and prefills while ledgerd begins it. Nothing of it is
 * read before a run takes it (gateway_run_start()'s @p up), which is only
 * once ledgerd began the attempt; a refused begin closes it
 * (upstream_close()), which the engine takes as an abort.
 * @return a new upstream (the caller's), or NULL: the replica gets the
 *         attempt's X-Ledger-* headers and is asked only once the attempt
 *         exists, or no memory (the run then asks it itself)
 */
struct upstream *gateway_run_engine_ahead(size_t replica, const char *body, size_t body_len,
					  bool stream, const struct gateway_trace_wire *w);

/** The listed run of @p request_id with a reference for the caller, or NULL. */
struct gateway_run *gateway_run_find(const char *request_id);

/** Whether @p r's input is @p input_sha256 (a repeat of the same request). */
bool gateway_run_same_input(const struct gateway_run *r, const char *input_sha256);

/** Drops one reference; the last frees the run. NULL-safe. */
void gateway_run_release(struct gateway_run *r);

/**
 * An OpenAI-compatible error, as the client gets it: {"error": {"code",
 * "type", "param", "message", "request_id", "partial_output",
 * "delivered_output_tokens", "retryable"}}. A new string, or NULL.
 */
char *gateway_run_error_body(const char *request_id, const char *code, const char *type,
			     const char *message, uint64_t delivered, bool retryable);

#endif
