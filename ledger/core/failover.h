/*
 * ledger/core/failover.h: what a router may do when an attempt fails, decided
 * by one pure function of the request, its source attempt, the request's
 * tool calls, the signal, the retry budget and the policy, in the order of
 * docs/api.md's failover table. The store runs it under the request's lock and
 * writes what it returns in the same transaction.
 */
#ifndef LEDGER_FAILOVER_H
#define LEDGER_FAILOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "ledger/core/attempt.h"
#include "ledger/core/policy.h"

enum ledger_signal {
	LEDGER_SIGNAL_REPLICA_EXITED,      /* the replica is certainly gone */
	LEDGER_SIGNAL_POD_LOST,            /* certainly gone */
	LEDGER_SIGNAL_UPSTREAM_CLOSED,     /* certainly gone */
	LEDGER_SIGNAL_NETWORK_ERROR,       /* liveness uncertain */
	LEDGER_SIGNAL_HEARTBEAT_TIMEOUT,   /* liveness uncertain */
	LEDGER_SIGNAL_OVERLOADED,          /* slow, not failed */
	LEDGER_SIGNAL_CLIENT_DISCONNECTED, /* the client went away */
};

enum ledger_failover_action {
	LEDGER_FAILOVER_ATTEMPT_FENCED, /* 409: the source is not the newest attempt */
	LEDGER_FAILOVER_REQUEST_CLOSED, /* 409: the request is not open */
	LEDGER_FAILOVER_KEEP_WAITING,
	LEDGER_FAILOVER_CANCEL_UPSTREAM,
	LEDGER_FAILOVER_TERMINATE_STREAM,
	LEDGER_FAILOVER_REJECT,
	LEDGER_FAILOVER_WAIT_FOR_FENCE,
	LEDGER_FAILOVER_RETRY_PREFILL,
};

struct ledger_failover_input {
	enum ledger_signal signal;
	int64_t retry_prefill_tokens; /* what a rerun would prefill */
	bool source_is_newest;        /* the source is the request's newest attempt */
};

struct ledger_failover_decision {
	enum ledger_failover_action action;
	enum ledger_attempt_state source_after;   /* the source's state afterwards */
	enum ledger_request_status request_after; /* the request's status afterwards */
	const char *client_error;                 /* the client error's code, or NULL; static */
	enum ledger_budget_kind budget; /* client_error retry_budget_exhausted: which one */
	int64_t retry_after_ms;         /* WAIT_FOR_FENCE: when to ask again */
	bool final;                     /* recorded: a retried call gets it back as it is */
};

/** The API's names of signals and actions; @return -1 for an unknown signal. */
const char *ledger_failover_signal_name(enum ledger_signal s);
int ledger_failover_signal_parse(const char *s, enum ledger_signal *out);
const char *ledger_failover_action_name(enum ledger_failover_action a);

/**
 * True when @p d ends the request (reject: failed; terminate_stream, or
 * cancel_upstream after a delta: terminated): the answer its client was
 * sent is kept with it. Abandoning a request does not end it: it may reopen.
 */
bool ledger_failover_closes(const struct ledger_failover_decision *d);

/**
 * Decides a failover. The caller answers rows 1 (a recorded decision) and
 * the source's existence itself; @p source must exist.
 * All borrowed for the call.
 */
void ledger_failover_decide(const struct ledger_request *r, const struct ledger_attempt *source,
			    const struct ledger_failover_input *in,
			    const struct ledger_calls_summary *calls,
			    const struct ledger_budget *budget, const struct ledger_policy *p,
			    struct ledger_failover_decision *out);

#endif
