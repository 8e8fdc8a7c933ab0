/*
 * sdk/programs/ledger-gateway/run_int.h: what run.c (a run's life and its
 * thread's course), attempt.c (its attempts and the failovers between them)
 * and events.c (its events and the clients attached to them) share, and
 * nothing outside them sees: the run itself, and the calls its files make of
 * each other. run.c calls into attempt.c and events.c; they call back only
 * for the helpers declared under run.c below.
 */
#ifndef GATEWAY_RUN_INT_H
#define GATEWAY_RUN_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <ledger_client.h>

#include "sdk/programs/ledger-gateway/log.h"
#include "sdk/programs/ledger-gateway/metrics.h"
#include "sdk/programs/ledger-gateway/run.h"
#include "sdk/programs/ledger-gateway/trace.h"

#define MAX_PRELUDE 8 /* events held before the first output, at most */

/* One event for the clients: "id: N\n" and the engine's event, or the run's last. */
struct event {
	char *text;
	size_t len;
	uint64_t tokens; /* output tokens in the run's events up to this one */
};

/* Where the run's client stands, as its thread last recorded it in ledgerd. */
struct seen {
	uint64_t gen;  /* the attachment recorded last */
	bool detached; /* its detachment recorded */
};

/* The run, under run.h's name: reference-counted (gateway_run_release()). */
struct gateway_run {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* an event, the end, an attachment or a detachment */
	unsigned refs;          /* the table's, the thread's, each client's */
	struct gateway_run *next_listed;
	bool listed;
	char rid[64];
	bool keyed;
	char input_sha256[65];
	atomic_bool poke;         /* the run's thread has a client change to look at */
	_Atomic uint64_t wake_at; /* and a hold that ends then (monotonic ms; 0: none) */

	/* The engine side: the run's thread alone. */
	char *body; /* the client's request, sent unchanged to every attempt */
	size_t body_len;
	unsigned attempts;              /* the request's attempts so far: named a1, a2, ... */
	struct ledger_attempt *attempt; /* the current one */
	size_t replica;                 /* its replica */
	bool counted;                   /* the run holds a request in flight on it */
	bool stream;                    /* an SSE stream was asked for; else one JSON answer */
	char *model;                    /* the model asked for, or NULL */
	char *revision;                 /* the request's model revision, or NULL */
	struct upstream *up;
	bool up_whole; /* its stream came to [DONE]: read to its end, its connection serves again */
	char *prelude[MAX_PRELUDE]; /* the attempt's events before its first output (a role) */
	size_t n_prelude;
	uint64_t delivered; /* content tokens published */
	bool settled_any;   /* a tool call of the request is settled: a rerun under another
	                         request id would run it again */
	struct seen seen;
	struct ledger_trace_ctx parent; /* the attempts' parent: the starting request's span */
	struct ledger_span *span;       /* the current attempt's span, or NULL */
	struct ledger_span *next_span;  /* the rerun's, made before ledgerd decides on it */
	const char *attempt_end;        /* how the current attempt ended, as its span says */
	char attempt_error[64];         /* its error.type, or "" */

	/* Under lock. */
	struct gateway_trace *trace; /* the span of the client attached last (held): the run's
	                                events and outcome go there */
	struct event *events;
	size_t n_events, cap_events;
	bool ended;             /* no event will come */
	bool closing;           /* every client gone past the hold: none may attach again */
	long refusal_status;    /* ended before any event: the answer */
	char *refusal_body;     /* owned */
	char *refusal_type;     /* its Content-Type, owned; NULL: application/json */
	bool refusal_retryable; /* x-should-retry */
	uint64_t refusal_retry_after_s;
	uint64_t gen;         /* attachments so far; the current client is the gen-th */
	bool attached;        /* a client is attached now */
	int64_t resumed_from; /* the last event id the latest client had; -1: none */
	size_t written;       /* events written to a client, the most any client got */
	uint64_t hold_until;  /* no client attached: when the hold ends (monotonic ms) */
	_Atomic uint64_t
		engine_first_us; /* when the engine's first event came (monotonic µs); 0: none */
	atomic_bool first_byte_timed; /* the time added before the first byte was counted */
};

/* The current attempt's id, or NULL. */
static inline const char *aid_of(const struct gateway_run *r)
{
	return r->attempt != NULL ? ledger_client_attempt_id(r->attempt) : NULL;
}

/* Logs why ledgerd refused the run's call, or could not be asked. */
static inline void log_ledger_failure(const char *msg, const struct gateway_run *r,
				      const struct ledger_client_error *err)
{
	gateway_log_ledger_failure(msg, r->rid, aid_of(r), err);
}

/* The monotonic clock in microseconds. */
static inline uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* --- run.c --- */

/** The span the run's events go to, with a reference for the caller (or NULL). */
struct gateway_trace *gateway_run_trace(struct gateway_run *r);

/** Counts how the request's answer ended, and says it on the span of its client. */
void gateway_run_count_outcome(struct gateway_run *r, enum gateway_outcome outcome);

/**
 * Notes how the current attempt ended, for its span; the first word stays.
 * @p outcome: a literal; @p error: copied (NULL: none)
 */
void gateway_run_attempt_ended(struct gateway_run *r, const char *outcome, const char *error);

/**
 * The run's own error: gateway_run_error_body() for @p r's request, never
 * retryable once a keyless request settled a tool call. A new string, or NULL.
 */
char *gateway_run_local_error(const struct gateway_run *r, const char *code, const char *message,
			      bool retryable);

/** The client_error a refusal of ledgerd carries (request_closed, ...): a new string, or NULL. */
char *gateway_run_refusal_error(const struct ledger_client_error *err);

/** Forgets (frees) the events held before an attempt's first output. */
void gateway_run_prelude_clear(struct gateway_run *r);

/* --- attempt.c: the run's thread alone --- */

/** Remembers the settings (borrowed for the process's life). */
void gateway_attempt_setup(struct gateway *gw);

/** Starts the attempt the run was handed. @return NULL, or the client error to answer with */
char *gateway_attempt_begin(struct gateway_run *r);

/**
 * Ends the current attempt: its upstream closed, its replica's request in
 * flight given back, its span ended and the attempt freed (its heartbeat stops).
 */
void gateway_attempt_drop(struct gateway_run *r);

/**
 * The replica failed, or the client is gone: reports what the client got,
 * asks ledgerd (waiting out wait_for_fence) and carries out its decision; a
 * failed replica is ejected. A decision that ends the request keeps @p kept
 * (borrowed; may be NULL).
 * @return LEDGER_CLIENT_OK with the decision in @p d, or the refusal in @p err
 */
enum ledger_client_err gateway_attempt_ask_failover(struct gateway_run *r,
						    enum ledger_signal signal,
						    const struct ledger_kept_answer *kept,
						    struct ledger_decision *d,
						    struct ledger_client_error *err);

/** A decision that ends the request: the client error it carries (a new string, or NULL). */
char *gateway_attempt_ending_error(struct gateway_run *r, struct ledger_decision *d);

/**
 * Acts on a failure before the first delta, which may be rerun unseen;
 * @p mark_down false: the replica is not ejected (the attempt recorded what
 * it saw of it). @return NULL to read on (the same attempt, or the rerun
 * ledgerd began), or the client error to answer with (a new string)
 */
char *gateway_attempt_fail_over_early(struct gateway_run *r, enum ledger_signal signal,
				      bool mark_down);

/** The client left before the first delta and its hold is over: nothing is kept running. */
void gateway_attempt_abandon(struct gateway_run *r);

/* --- events.c --- */

/* The run's client, as the run's thread sees it. */
enum client_state {
	CLIENT_HERE, /* a client is attached */
	CLIENT_HELD, /* none, and the hold runs */
	CLIENT_GONE, /* none, and the hold is over */
};

/** Remembers the settings (borrowed for the process's life). */
void gateway_events_setup(struct gateway *gw);

/**
 * On the run's thread: looks at the run's client, and records in the
 * request's history what changed since the last look (an attachment that
 * resumed, a detachment with its hold, a hold that ran out).
 */
enum client_state gateway_events_look_at_client(struct gateway_run *r);

/** On the run's thread: waits until a client attaches or the hold is over. @return the state */
enum client_state gateway_events_wait_for_client(struct gateway_run *r);

/**
 * Adds the event @p text (taken) as the next one, numbered, and counts the
 * output tokens published (r->delivered). @return false: out of memory
 */
bool gateway_events_publish(struct gateway_run *r, char *text);

/** The run ends before its first event: @p client_error (taken; may be NULL) is its answer. */
void gateway_events_refuse(struct gateway_run *r, char *client_error, long status);

/*
 * The answer to keep: the first @p n events' bytes, or past the bound
 * their count and SHA-256. Owned by @p kept until freed with
 * gateway_events_kept_clear().
 */
struct kept {
	struct ledger_kept_answer answer;
	char *bytes;
	char sha256[65];
};

/**
 * Fills @p k with the run's first @p n events and then @p last (borrowed; may
 * be NULL), numbered as gateway_events_publish() will number it.
 */
void gateway_events_kept_make(struct gateway_run *r, size_t n, const char *last, struct kept *k);

/** Frees what @p k owns. */
void gateway_events_kept_clear(struct kept *k);

/** The events a client got or, attached, is about to get: what the stream's end keeps. */
size_t gateway_events_delivered(struct gateway_run *r);

/** The output tokens in the run's first @p n events. */
uint64_t gateway_events_tokens_in(struct gateway_run *r, size_t n);

#endif
