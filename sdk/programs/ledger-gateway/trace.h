/*
 * sdk/programs/ledger-gateway/trace.h: ledger-gateway's spans
 * (docs/tracing-gateway.md) on the tracer of ledger/common/trace.h. A
 * request is a SERVER span, child of its client's traceparent; each
 * attempt is a CLIENT span under the SERVER span of the request that
 * started its run, and its context is what the engine and ledgerd get in
 * traceparent. The SERVER span is shared by the request's thread and its
 * run's (reference-counted, locked); an attempt's span belongs to the
 * run's thread. Every function is NULL-safe: with tracing off and no
 * traceparent, nothing is allocated.
 */
#ifndef GATEWAY_TRACE_H
#define GATEWAY_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/wire/conn.h"
#include "api/wire/http.h"
#include "ledger/common/trace.h"
#include "sdk/programs/ledger-gateway/config.h"

struct gateway_trace; /* a request's SERVER span and the context it passes on */

/** Starts the tracer (ledger_trace_init("ledger-gateway", version)), from OTEL_*. */
void gateway_trace_start(void);

/** Sends what is queued and stops the tracer: after the streams drained. */
void gateway_trace_stop(void);

/**
 * On the polling thread, from a head the wire took: the request's SERVER
 * span, child of its traceparent (a malformed one starts a new trace; a
 * request is never refused for it), with the HTTP server attributes.
 * Probes (/healthz, /readyz, /metrics) get none.
 * @return a new reference, or NULL: tracing off and no context to pass on,
 *         a probe, or out of memory
 */
struct gateway_trace *gateway_trace_begin(const struct wire_http_head *head, struct wire_conn *conn,
					  bool https);

/** Takes one more reference of @p t (the run keeps one). */
void gateway_trace_hold(struct gateway_trace *t);

/** Drops a reference; the last frees @p t (its span ended or dropped first). */
void gateway_trace_release(struct gateway_trace *t);

/* What a request's span ends with, from its call (gateway.c's on_end). Borrowed. */
struct gateway_trace_end {
	const char *route; /* the route served ("/v1/chat/completions"), or NULL: none */
	const char *rid;   /* the logical request, or NULL */
	bool keyed;        /* its client named it with a key (never the key itself) */
	const char *model; /* the model asked for, or NULL */
	bool chat;         /* a completion: the GenAI attributes apply */
};

/**
 * The call ended: @p t's span gets its route, ids and status, and ends;
 * later events of its run go nowhere. Drops the caller's reference.
 */
void gateway_trace_end(struct gateway_trace *t, const struct gateway_trace_end *end);

/** The answer's status and, for a refusal, its GATEWAY.md error code (or NULL). */
void gateway_trace_reply(struct gateway_trace *t, unsigned status, const char *code);

/**
 * How the request ended: ledger_gateway_requests_total's outcome for a run
 * of this process, ledgerd's status of the request for a replay, after
 * @p attempts of it (-1: not known).
 */
void gateway_trace_outcome(struct gateway_trace *t, const char *outcome, int64_t attempts);

/** A repeat of a key, answered by @p row of GATEWAY.md's table (4: attached to a run). */
void gateway_trace_repeat(struct gateway_trace *t, int row);

/**
 * A repeat attached to the run in flight that @p original's request
 * started (row 4): its span says so (ledger.original.trace_id, _span_id)
 * and records a "resumed" event with @p last_event_id (-1: none sent).
 */
void gateway_trace_resumed(struct gateway_trace *t, int64_t last_event_id,
			   const struct ledger_trace_ctx *original);

/** Adds an event now; @p attrs copied. */
void gateway_trace_event(struct gateway_trace *t, const char *name,
			 const struct ledger_trace_attr *attrs, size_t n);

/**
 * A failover decision, as the "failover" event: ledgerd told @p signal
 * about attempt @p aid answered @p action, with the rerun @p next_aid (or NULL).
 */
void gateway_trace_failover(struct gateway_trace *t, const char *signal, const char *action,
			    const char *aid, const char *next_aid);

/** The context @p t passes on (its span's, or its client's when tracing is off); none for NULL. */
void gateway_trace_context(const struct gateway_trace *t, struct ledger_trace_ctx *out);

/**
 * The request the calling thread serves: its log lines carry its trace_id
 * and span_id, and request.c and events.c find it with gateway_trace_current().
 * @p t borrowed until gateway_trace_leave().
 */
void gateway_trace_enter(struct gateway_trace *t);
void gateway_trace_leave(void);
struct gateway_trace *gateway_trace_current(void);

/* ---------------------------------------------------------------------- */
/* Attempts                                                               */
/* ---------------------------------------------------------------------- */

/* An attempt's context as headers: what the engine and ledgerd are sent. */
struct gateway_trace_wire {
	char traceparent[LEDGER_TRACEPARENT_LEN + 1]; /* "" when there is no context */
	char tracestate[LEDGER_TRACESTATE_MAX + 1];   /* "" when none */
};

/**
 * Starts the CLIENT span of attempt @p aid on replica @p k, "chat {model}"
 * as the GenAI client conventions name an inference call, under @p parent.
 * @return a span owned by the caller until gateway_trace_attempt_end(), or NULL
 */
struct ledger_span *gateway_trace_attempt_start(const struct ledger_trace_ctx *parent,
						struct gateway *gw, size_t k, const char *model,
						const char *aid);

/** The headers of @p s's context (of @p parent's when @p s is NULL). */
void gateway_trace_attempt_wire(const struct ledger_span *s, const struct ledger_trace_ctx *parent,
				struct gateway_trace_wire *out);

/** ledgerd began the attempt with fencing epoch @p epoch. */
void gateway_trace_attempt_begun(struct ledger_span *s, uint64_t epoch);

/**
 * Ends @p s: @p outcome is how the attempt ended (finished, failed, fenced,
 * cancelled, abandoned, not_begun); @p error, when set, is error.type (the
 * failover signal or ledgerd's refusal code) and makes the status ERROR.
 */
void gateway_trace_attempt_end(struct ledger_span *s, const char *outcome, const char *error);

/** Forgets a span made for an attempt ledgerd did not begin after all: never exported. */
void gateway_trace_attempt_discard(struct ledger_span *s);

/** The calling thread's log lines carry @p s's ids (the run's thread, per attempt). */
void gateway_trace_log_span(const struct ledger_span *s, const struct ledger_trace_ctx *parent);

#endif
