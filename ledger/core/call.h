/*
 * ledger/core/call.h: a tool call as the decision functions see it: its
 * states and its row at the database instant it was read. Strings live in
 * fixed arrays sized by the contract's limits, so a row can be copied out
 * of a query result without allocations.
 */
#ifndef LEDGER_CALL_H
#define LEDGER_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/core/id.h"

enum ledger_call_state {
	LEDGER_CALL_ABSENT,      /* never claimed */
	LEDGER_CALL_IN_PROGRESS, /* held, its lease running */
	LEDGER_CALL_UNKNOWN,     /* held, its lease ran out: derived, never stored */
	LEDGER_CALL_SUCCEEDED,   /* final: replayed to every claim */
	LEDGER_CALL_FAILED,      /* final: replayed to every claim */
	LEDGER_CALL_RELEASED,    /* claimable again */
	LEDGER_CALL_TOMBSTONE,   /* settled, then removed by retention */
};

enum ledger_completed_by {
	LEDGER_COMPLETED_NONE,
	LEDGER_COMPLETED_HOLDER,  /* the current holder, within its lease */
	LEDGER_COMPLETED_LATE,    /* an older holder: the effect happened */
	LEDGER_COMPLETED_RESOLVE, /* an operator, after checking the tool */
};

/*
 * What is stored of a final result that is not kept whole (docs/api.md,
 * "Results not kept"): the length and the SHA-256 of its exact JSON text.
 */
struct ledger_result_digest {
	int64_t bytes;                      /* the text's length in bytes */
	char sha256[LEDGER_SHA256_HEX + 1]; /* its SHA-256, lowercase hex; "": not computed */
};

/* A tool call's row at the database instant it was read, under the lock. */
struct ledger_call {
	enum ledger_call_state state;
	int64_t fencing_token;                   /* the highest token issued */
	char claim_id[LEDGER_ID_MAX + 1];        /* current holder; "" anonymous */
	char attempt_id[LEDGER_ID_MAX + 1];      /* "" when not under an attempt */
	char owner[LEDGER_TEXT_MAX + 1];         /* "" when not given */
	char tool[LEDGER_TEXT_MAX + 1];          /* "" when not given */
	char args_sha256[LEDGER_SHA256_HEX + 1]; /* "" when not given */
	bool tool_dedupes;                       /* fixed by the first claim */
	int64_t lease_ms_left;                   /* > 0 only while IN_PROGRESS */
	int64_t completed_token;                 /* token the stored completion carried */
	enum ledger_completed_by completed_by;
	char *result; /* owned; NULL unless final and kept */
	size_t result_len;
	bool result_not_kept;                      /* final, and only result_digest is stored */
	struct ledger_result_digest result_digest; /* result_not_kept: what is stored; kept:
						      filled only where a comparison needs it */
	char *args; /* owned; stored args, or NULL */
	size_t args_len;
	char created_at[LEDGER_TIMESTAMP_MAX];   /* RFC 3339 UTC, ms */
	char completed_at[LEDGER_TIMESTAMP_MAX]; /* "" unless final or TOMBSTONE */
	enum ledger_call_state settled_as;       /* TOMBSTONE: SUCCEEDED or FAILED */
};

/** Frees what @p call owns and leaves it ABSENT. NULL-safe. */
void ledger_call_clear(struct ledger_call *call);

/**
 * Fills @p out with the length and SHA-256 of @p len bytes of @p text.
 * Thread-safe. @return false only if memory ran out (then @p out is "")
 */
bool ledger_call_digest_result(const char *text, size_t len, struct ledger_result_digest *out);

/** The API's name of a state ("in_progress", "unknown", ...). */
const char *ledger_call_state_name(enum ledger_call_state s);

#endif
