/*
 * ledger/core/types.h: the domain's vocabulary: roles, the states of a tool
 * call, and a tool call's row as the decision functions see it. Strings
 * live in fixed arrays sized by the contract's limits, so a row can be
 * copied out of a query result without allocations.
 */
#ifndef LEDGER_TYPES_H
#define LEDGER_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LEDGER_ID_MAX 128       /* bytes of a request, tool call or attempt id */
#define LEDGER_TEXT_MAX 256     /* bytes of a free-text field */
#define LEDGER_CLAIM_ID_MIN 16  /* characters of a claim_id, at least */
#define LEDGER_SHA256_HEX 64    /* lowercase hex digits of a fingerprint */
#define LEDGER_TIMESTAMP_MAX 32 /* "2026-11-30T01:29:43.123Z" and a NUL, with room */
#define LEDGER_MAX_SAFE_INT 9007199254740991ULL /* 2^53 - 1 */

enum ledger_role {
	LEDGER_ROLE_AGENT,
	LEDGER_ROLE_ROUTER,
	LEDGER_ROLE_REVIEWER,
	LEDGER_ROLE_ADMIN,
};

/* Bit per role, for the routing table's "who may call" column. */
#define LEDGER_ROLE_BIT(r) (1u << (r))

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
	char *result; /* owned; NULL unless final */
	size_t result_len;
	char *args; /* owned; stored args, or NULL */
	size_t args_len;
	char created_at[LEDGER_TIMESTAMP_MAX];   /* RFC 3339 UTC, ms */
	char completed_at[LEDGER_TIMESTAMP_MAX]; /* "" unless final or TOMBSTONE */
	enum ledger_call_state settled_as;       /* TOMBSTONE: SUCCEEDED or FAILED */
};

/** Frees what @p call owns and leaves it ABSENT. NULL-safe. */
void ledger_call_clear(struct ledger_call *call);

/** The API's name of a state ("in_progress", "unknown", ...). */
const char *ledger_call_state_name(enum ledger_call_state s);

/** The API's name of a role, and its inverse. @return -1 if unknown. */
const char *ledger_role_name(enum ledger_role r);
int ledger_role_parse(const char *s, enum ledger_role *out);

/**
 * True when @p s (of @p len bytes) is a valid id: 1..128 bytes of
 * [A-Za-z0-9._~-]. A claim_id is also an id, with at least 16 of them.
 */
bool ledger_id_valid(const char *s, size_t len);

#endif
