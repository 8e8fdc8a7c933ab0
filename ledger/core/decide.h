/*
 * ledger/core/decide.h: the pure decisions of the tool-call ledger. Given a
 * call's row as read under its request's lock (lease arithmetic already
 * done with the database clock) and what the caller asks, each function
 * returns the one outcome docs/api.md prescribes; the store then performs the
 * write that outcome names. Nothing here touches SQL or HTTP, so every
 * state x operation x holder/token/lease case is unit-tested without a
 * database (tests/unit/test_decide.c).
 */
#ifndef LEDGER_DECIDE_H
#define LEDGER_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/core/call.h"
#include "ledger/core/role.h"

/* How the attempt named by a claim stands at the database instant. */
enum ledger_standing {
	LEDGER_STANDING_NOT_GIVEN,  /* the claim names no attempt */
	LEDGER_STANDING_NOT_FOUND,  /* no attempt of this request has that id */
	LEDGER_STANDING_HAS_RIGHTS, /* the live attempt, within its lease, request open */
	LEDGER_STANDING_FENCED,     /* any other attempt: it has no rights */
};

struct ledger_claim {
	const char *claim_id;    /* NULL: anonymous */
	const char *tool;        /* NULL: none */
	const char *args_sha256; /* NULL: none */
	bool tool_dedupes;
	const char *attempt_id; /* NULL: not under an attempt */
	const char *owner;      /* NULL: none */
	int64_t lease_ms;
};

enum ledger_claim_outcome {
	LEDGER_CLAIM_ATTEMPT_NOT_FOUND, /* 404 attempt_not_found */
	LEDGER_CLAIM_ATTEMPT_REQUIRED,  /* 409 attempt_required */
	LEDGER_CLAIM_ARGS_MISMATCH,     /* 422 args_mismatch */
	LEDGER_CLAIM_REPLAY,            /* 200 completed, replayed */
	LEDGER_CLAIM_RESULT_NOT_KEPT,   /* 409 result_not_kept: finished, its result not kept */
	LEDGER_CLAIM_RESULT_EXPIRED,    /* 410 result_expired */
	LEDGER_CLAIM_ATTEMPT_FENCED,    /* 409 attempt_fenced */
	LEDGER_CLAIM_HELD,              /* 200 claimed: the same holder again */
	LEDGER_CLAIM_IN_PROGRESS,       /* 409 in_progress */
	LEDGER_CLAIM_OUTCOME_UNKNOWN,   /* 409 outcome_unknown */
	LEDGER_CLAIM_NEW,               /* 201 claimed: insert, token 1 */
	LEDGER_CLAIM_RECLAIM,           /* 201 claimed: next token to a new holder */
};

/**
 * Decides a claim, checking docs/api.md's table in order.
 * @param claim, call borrowed for the call
 * @param request_has_attempts the request has at least one attempt
 * @param mismatch_out on ARGS_MISMATCH, the field that differs ("args",
 *        "tool" or "tool_dedupes"); a static string
 */
enum ledger_claim_outcome ledger_decide_claim(const struct ledger_claim *claim,
					      const struct ledger_call *call,
					      bool request_has_attempts,
					      enum ledger_standing attempt,
					      const char **mismatch_out);

/* A completion, or a retryable failure, reported by a holder. */
struct ledger_completion {
	int64_t fencing_token;
	bool succeeded;     /* outcome "succeeded"; false: "failed" */
	bool retryable;     /* a failure that may be retried: release, store nothing */
	const char *result; /* exact JSON text; borrowed; NULL when result_not_kept */
	size_t result_len;
	bool result_not_kept; /* a final outcome whose result is stored as its digest only */
	struct ledger_result_digest result_digest; /* result_not_kept: the result's; else filled
						      only where a comparison needs it */
};

enum ledger_complete_outcome {
	LEDGER_COMPLETE_NOT_FOUND,         /* 404 not_found: never claimed */
	LEDGER_COMPLETE_RESULT_EXPIRED,    /* 410 result_expired */
	LEDGER_COMPLETE_STALE_TOKEN,       /* 409 stale_token */
	LEDGER_COMPLETE_ALREADY_COMPLETED, /* 409 already_completed: stored one stands */
	LEDGER_COMPLETE_REPEATED,          /* 200: the same completion again, unchanged */
	LEDGER_COMPLETE_STORED,            /* 200 completed: from the current holder */
	LEDGER_COMPLETE_LATE,              /* 200 completed: older holder, effect happened */
	LEDGER_COMPLETE_RELEASED,          /* 200 released: holder's retryable failure */
};

/**
 * Decides a completion. A final call is completed again only by the same
 * completion: the same token, outcome and result text, or, where either
 * side's result is kept as its digest only, the same length and SHA-256.
 * The caller fills the digest of a side that is kept whole when the other
 * is not (ledger_decide_complete_wants_digest()); an empty one never matches.
 */
enum ledger_complete_outcome ledger_decide_complete(const struct ledger_completion *c,
						    const struct ledger_call *call);

/**
 * Whether deciding @p c against @p call compares digests whose kept side
 * has none yet and whose lengths agree (when they differ, no digest is
 * needed to tell the completions apart). Pure.
 * @return true: fill the kept side's result_digest first
 */
bool ledger_decide_complete_wants_digest(const struct ledger_completion *c,
					 const struct ledger_call *call);

enum ledger_renew_outcome {
	LEDGER_RENEW_NOT_FOUND,       /* 404 not_found */
	LEDGER_RENEW_RESULT_EXPIRED,  /* 410 result_expired */
	LEDGER_RENEW_STALE_TOKEN,     /* 409 stale_token: not the holder */
	LEDGER_RENEW_ATTEMPT_FENCED,  /* 409 attempt_fenced */
	LEDGER_RENEW_OUTCOME_UNKNOWN, /* 409 outcome_unknown: the lease ran out */
	LEDGER_RENEW_RENEWED,         /* 200: deadline = now + lease_ms */
};

/**
 * @param attempt how the attempt the call was claimed under stands
 *        (NOT_GIVEN when it was claimed without one)
 */
enum ledger_renew_outcome ledger_decide_renew(int64_t fencing_token, const struct ledger_call *call,
					      enum ledger_standing attempt);

enum ledger_release_outcome {
	LEDGER_RELEASE_NOT_FOUND,      /* 404 not_found */
	LEDGER_RELEASE_RESULT_EXPIRED, /* 410 result_expired */
	LEDGER_RELEASE_STALE_TOKEN,    /* 409 stale_token: not the current holder */
	LEDGER_RELEASE_REPEATED,       /* 200 released, unchanged */
	LEDGER_RELEASE_RELEASED,       /* 200 released */
};

enum ledger_release_outcome ledger_decide_release(int64_t fencing_token,
						  const struct ledger_call *call);

enum ledger_resolution {
	LEDGER_RESOLVE_SUCCEEDED,
	LEDGER_RESOLVE_FAILED,
	LEDGER_RESOLVE_NOT_EXECUTED,
};

enum ledger_resolve_outcome {
	LEDGER_RESOLVE_NOT_FOUND,         /* 404 not_found */
	LEDGER_RESOLVE_RESULT_EXPIRED,    /* 410 result_expired */
	LEDGER_RESOLVE_ALREADY_COMPLETED, /* 409 already_completed */
	LEDGER_RESOLVE_REPEATED,          /* 200, unchanged */
	LEDGER_RESOLVE_SETTLED,           /* 200: final, or released; the token grows */
};

/**
 * @param result the exact JSON text given with the resolution (NULL: the
 *        JSON null); borrowed
 */
enum ledger_resolve_outcome ledger_decide_resolve(enum ledger_resolution resolution,
						  const char *result, size_t result_len,
						  const struct ledger_call *call);

/*
 * The API's error code of a refusal ("in_progress", "stale_token", ...), or
 * NULL for an outcome that is not one. Events and responses share them.
 */
const char *ledger_decide_claim_code(enum ledger_claim_outcome o);
const char *ledger_decide_complete_code(enum ledger_complete_outcome o);
const char *ledger_decide_renew_code(enum ledger_renew_outcome o);
const char *ledger_decide_release_code(enum ledger_release_outcome o);
const char *ledger_decide_resolve_code(enum ledger_resolve_outcome o);

#endif
