/*
 * ledger/core/attempt.h: the router side of the domain: logical requests and
 * their inference attempts, as the pure decisions see them. An attempt has
 * rights (to claim, renew, deliver and finish) only while it is live within
 * its lease and its request is open; everything here is decided from rows
 * read under the request's lock, with leases already measured on the
 * database clock, and unit-tested without a database.
 */
#ifndef LEDGER_ATTEMPT_H
#define LEDGER_ATTEMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/core/decide.h"
#include "ledger/core/policy.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"

enum ledger_request_status {
	LEDGER_REQUEST_OPEN,
	LEDGER_REQUEST_COMPLETED,
	LEDGER_REQUEST_FAILED,
	LEDGER_REQUEST_TERMINATED,
	LEDGER_REQUEST_ABANDONED, /* the client went away; reopens if no delta was sent */
};

enum ledger_attempt_state {
	LEDGER_ATTEMPT_LIVE,             /* has rights while its lease runs */
	LEDGER_ATTEMPT_EXPIRED,          /* live, but its lease ran out: derived, never stored */
	LEDGER_ATTEMPT_CANCEL_REQUESTED, /* revoked; blocks the next attempt until ack or lease */
	LEDGER_ATTEMPT_CANCELLED,        /* the worker confirmed it stopped */
	LEDGER_ATTEMPT_DEAD,             /* the router saw the replica die */
	LEDGER_ATTEMPT_SUPERSEDED,       /* a newer attempt took over after it was fenced */
	LEDGER_ATTEMPT_FINISHED,         /* completed the request */
	LEDGER_ATTEMPT_FAILED,           /* ended in failure; the request stays open */
};

/* A logical request's row, as read under its lock. */
struct ledger_request {
	bool exists;
	enum ledger_request_status status;
	bool first_delta_sent;
	int64_t delivered_output_tokens;
	int64_t attempt_count;                    /* attempts created so far */
	int64_t max_attempts;                     /* fixed by the first attempt; 0 before */
	char model_revision[LEDGER_TEXT_MAX + 1]; /* the first attempt's; "" none */
	char input_sha256[LEDGER_SHA256_HEX + 1]; /* fixed by the first attempt giving one; "" */
	char created_at[LEDGER_TIMESTAMP_MAX];
};

/* An attempt's row, with its lease measured on the database clock. */
struct ledger_attempt {
	bool exists;
	char attempt_id[LEDGER_ID_MAX + 1];
	int64_t epoch;
	char replica[LEDGER_TEXT_MAX + 1];        /* "" when not given */
	char gateway[LEDGER_ID_MAX + 1];          /* the gateway process running it; "" none */
	char model_revision[LEDGER_TEXT_MAX + 1]; /* the effective revision */
	bool revision_given;                      /* the body named it */
	enum ledger_attempt_state state;          /* EXPIRED derived from the lease */
	int64_t lease_ms_left;                    /* > 0 only while the lease runs */
	bool is_retry;                            /* not the request's first attempt */
	int64_t delivered_output_tokens;
	char created_at[LEDGER_TIMESTAMP_MAX];
	char ended_at[LEDGER_TIMESTAMP_MAX]; /* when it lost its rights; "" while live */
};

/* A settled tool call of the request, for a rerun to take into account. */
struct ledger_settled_call {
	char tool_call_id[LEDGER_ID_MAX + 1];
	char tool[LEDGER_TEXT_MAX + 1];          /* "" none */
	char args_sha256[LEDGER_SHA256_HEX + 1]; /* "" none */
	bool succeeded;                          /* its outcome: succeeded, else failed */
};

/* What the request's tool calls mean for a rerun. */
struct ledger_calls_summary {
	int64_t held_by_newest_ms; /* longest lease left of a call held under the newest attempt */
	int64_t unknown; /* calls whose outcome is unknown and whose tool does not dedupe */
};

/* The tenant's attempts in the policy's sliding window. */
struct ledger_budget {
	int64_t attempts; /* created in the window */
	int64_t retries;  /* of which were retries */
};

/* Which budget refused a retry. */
enum ledger_budget_kind {
	LEDGER_BUDGET_NONE,    /* none did */
	LEDGER_BUDGET_REQUEST, /* the request's max_attempts are spent: for good */
	LEDGER_BUDGET_POOL,    /* the tenant's retries in the policy's window: for a while */
};

/*
 * One retry of the tenant's window, and the window as that retry's leaving
 * it will leave it (every attempt created no later than it gone too).
 */
struct ledger_budget_drop {
	int64_t in_ms;    /* when it leaves the window, from now */
	int64_t attempts; /* the window's attempts then */
	int64_t retries;  /* of which retries */
};

/** The API's names, and their inverses (@return -1 if unknown). */
const char *ledger_attempt_request_status_name(enum ledger_request_status s);
int ledger_attempt_request_status_parse(const char *s, enum ledger_request_status *out);
const char *ledger_attempt_state_name(enum ledger_attempt_state s);
int ledger_attempt_state_parse(const char *s, enum ledger_attempt_state *out);

/** True when @p a may claim, renew, deliver and finish (docs/design.md invariant 3). */
bool ledger_attempt_has_rights(const struct ledger_request *r, const struct ledger_attempt *a);

/**
 * How long @p a still blocks a newer attempt: its lease left while it is
 * live, or revoked but not yet acknowledged; 0 when it no longer blocks.
 */
int64_t ledger_attempt_blocking_ms(const struct ledger_attempt *a);

/** How a claim naming @p a stands (a missing attempt is NOT_FOUND). */
enum ledger_standing ledger_attempt_standing(const struct ledger_request *r,
					     const struct ledger_attempt *a);

/**
 * True while the pool-wide budget allows one more retry: the window's
 * retries are fewer than max(min_retries, percent_of_attempts% of its
 * attempts).
 */
bool ledger_attempt_budget_allows_retry(const struct ledger_policy *p,
					const struct ledger_budget *b);

/** The API's name of a budget ("request", "pool"); NULL for NONE. */
const char *ledger_attempt_budget_name(enum ledger_budget_kind k);

/**
 * When the pool-wide budget next allows a retry, in ms from now (at least
 * 1), given the window's retries in the order they leave it (@p n of
 * @p drops, borrowed). Only a retry's leaving can make room (an attempt
 * that is no retry leaving only lowers the percentage), so the first drop
 * after which ledger_attempt_budget_allows_retry() holds is the answer;
 * when none is, the whole window.
 */
int64_t ledger_attempt_budget_retry_after(const struct ledger_policy *p,
					  const struct ledger_budget_drop *drops, size_t n);

/* --- creating an attempt (POST /v1/requests/{rid}/attempts) --- */

struct ledger_attempt_request {
	const char *attempt_id;
	const char *replica;        /* NULL: not given */
	const char *model_revision; /* NULL: take the request's */
	int64_t lease_ms;
	int64_t max_attempts;     /* 0: not given */
	const char *gateway;      /* NULL: not given */
	const char *identity;     /* a JSON object's exact text (not NUL-terminated); NULL none */
	size_t identity_len;      /* its bytes */
	const char *input_sha256; /* 64 lowercase hex; NULL: not given */
};

enum ledger_create_outcome {
	LEDGER_CREATE_REPEATED,              /* 200: the same attempt again */
	LEDGER_CREATE_REQUEST_MISMATCH,      /* 422 request_mismatch */
	LEDGER_CREATE_FIRST_DELTA_SENT,      /* 409 first_delta_sent */
	LEDGER_CREATE_REQUEST_CLOSED,        /* 409 request_closed */
	LEDGER_CREATE_BUDGET_EXHAUSTED,      /* 409 retry_budget_exhausted */
	LEDGER_CREATE_REVISION_MISMATCH,     /* 409 revision_mismatch */
	LEDGER_CREATE_SOURCE_NOT_FENCED,     /* 409 source_not_fenced */
	LEDGER_CREATE_TOOL_CALL_IN_PROGRESS, /* 409 tool_call_in_progress */
	LEDGER_CREATE_TOOL_OUTCOME_UNKNOWN,  /* 409 tool_outcome_unknown */
	LEDGER_CREATE_CREATED,               /* 201 */
};

struct ledger_create_decision {
	enum ledger_create_outcome outcome;
	int64_t retry_after_ms;         /* SOURCE_NOT_FENCED, TOOL_CALL_IN_PROGRESS */
	enum ledger_budget_kind budget; /* BUDGET_EXHAUSTED: which one */
	bool input_mismatch;            /* REQUEST_MISMATCH: input_sha256 is another */
	bool is_retry;                  /* CREATED: not the request's first attempt */
	bool reopen;                    /* CREATED: an abandoned request opens again */
	bool supersede_newest;          /* CREATED: the newest attempt, expired, is superseded */
	int64_t max_attempts;           /* CREATED: the request's (fixed by its first attempt) */
	const char *model_revision;     /* CREATED: the attempt's revision, borrowed; NULL none */
};

/**
 * Decides POST attempts in docs/api.md's order.
 * @param same_id the attempt of this request with in->attempt_id (exists
 *        false if none); @param newest the request's newest attempt
 * All borrowed for the call; out->model_revision borrows from them.
 */
void ledger_attempt_decide_create(const struct ledger_attempt_request *in,
				  const struct ledger_request *r,
				  const struct ledger_attempt *same_id,
				  const struct ledger_attempt *newest,
				  const struct ledger_calls_summary *calls,
				  const struct ledger_budget *budget, const struct ledger_policy *p,
				  struct ledger_create_decision *out);

/**
 * True when @p in names an input_sha256 other than the one @p r fixed. An
 * attempt that names none, or a request that has none yet, never conflicts.
 */
bool ledger_attempt_input_conflicts(const struct ledger_attempt_request *in,
				    const struct ledger_request *r);

/** The API's error code of a refused creation, NULL for REPEATED and CREATED. */
const char *ledger_attempt_create_code(enum ledger_create_outcome o);

/* --- an attempt's own calls --- */

enum ledger_attempt_op_outcome {
	LEDGER_ATTEMPT_OP_DONE,     /* 200, the change made */
	LEDGER_ATTEMPT_OP_REPEATED, /* 200, nothing changed: it was done before */
	LEDGER_ATTEMPT_OP_FENCED,   /* 409 attempt_fenced: no rights */
};

/** renew and deliver: only with rights. */
enum ledger_attempt_op_outcome ledger_attempt_decide_renew(const struct ledger_request *r,
							   const struct ledger_attempt *a);

/**
 * finish: only with rights, but the same finish again is REPEATED.
 * @param completed the outcome asked ("completed"; false: "failed")
 */
enum ledger_attempt_op_outcome ledger_attempt_decide_finish(const struct ledger_request *r,
							    const struct ledger_attempt *a,
							    bool completed);

/**
 * cancel (@p ack false) takes a live attempt to CANCEL_REQUESTED; cancel-ack
 * (@p ack true) takes a live or revoked one to CANCELLED. Anything already
 * there, or past it, is REPEATED. Never FENCED: revoking needs no rights.
 */
enum ledger_attempt_op_outcome ledger_attempt_decide_cancel(const struct ledger_attempt *a,
							    bool ack);

#endif
