/*
 * api/service/tokens.h: API tokens. A token is "ldg_" and 43 characters of
 * base64url (256 random bits); the database keeps only its SHA-256. A small
 * cache of recent lookups spares the database a query per call; an entry
 * lives API_TOKEN_CACHE_MS from the moment its lookup began, so a token
 * stops working within that time of its revocation's commit (or of its
 * revoked_at, when that was set in the future).
 *
 * The set of every live token's hash (the known set) spares the database a
 * query per made-up token: a hash absent from a set known to be fresh is no
 * token, but for one minted since the set's read, whose first calls a small
 * allowance of lookups lets through (API_TOKEN_ABSENT_LOOKUPS a second).
 * ledger/store/token_watch.c keeps the set fresh; when it cannot say that
 * it is, every hash counts as possibly there, and is looked up as before.
 */
#ifndef API_TOKENS_H
#define API_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/err.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"

#define API_TOKEN_LEN 47 /* "ldg_" + 43 */
#define API_TOKEN_CACHE_MS 10000
/* A token the database did not know is refused without asking again for this long. */
#define API_TOKEN_UNKNOWN_MS 10000
/* The known set is read again at least this often, announced change or not. */
#define API_TOKEN_SET_RELOAD_MS 5000
/* A known set read longer ago than this is not trusted: its reader is late or stuck. */
#define API_TOKEN_SET_TTL_MS (2 * API_TOKEN_SET_RELOAD_MS)
/* Lookups of hashes the known set lacks: this many a second, and at most this many at once. */
#define API_TOKEN_ABSENT_LOOKUPS 10

/**
 * Creates a new random token.
 * @param out receives the token and a NUL
 * @return LEDGER_OK, or LEDGER_ERR_INTERNAL if no randomness is available
 */
LEDGER_MUSTCHECK enum ledger_err api_tokens_generate(char out[API_TOKEN_LEN + 1]);

/** SHA-256 of @p len bytes of @p token. */
void api_tokens_hash(const char *token, size_t len, unsigned char out[32]);

/**
 * Looks @p sha256 up in the cache. Thread-safe.
 * @param tenant receives the tenant (LEDGER_ID_MAX + 1 bytes) on a hit
 * @return true on a hit that has not expired
 */
bool api_tokens_cache_get(const unsigned char sha256[32], char *tenant, enum ledger_role *role);

/**
 * Remembers a token the database knows, until API_TOKEN_CACHE_MS after
 * @p read_ms: the CLOCK_MONOTONIC milliseconds at which the lookup that
 * found it began (no later than its read), so that the entry never outlives
 * a revocation committed after that read by more than API_TOKEN_CACHE_MS.
 * A @p read_ms in the future counts as now. Thread-safe.
 */
void api_tokens_cache_put(const unsigned char sha256[32], const char *tenant, enum ledger_role role,
			  long long read_ms);

/**
 * True when the database said of @p sha256, within API_TOKEN_UNKNOWN_MS,
 * that no such token exists. Thread-safe.
 */
bool api_tokens_unknown(const unsigned char sha256[32]);

/**
 * Remembers that the database knows no token @p sha256. The table is
 * bounded and apart from the known tokens', so a flood of made-up tokens
 * evicts only made-up tokens. Thread-safe.
 */
void api_tokens_unknown_put(const unsigned char sha256[32]);

/* What the known set says of a hash. */
enum api_tokens_presence {
	API_TOKENS_UNSURE,  /* the set is not known to be fresh: look the hash up */
	API_TOKENS_PRESENT, /* a live token's, as of the set's read: look it up for its tenant */
	API_TOKENS_ABSENT,  /* no token's, unless one minted since the set's read */
};

/**
 * What the known set says of @p sha256: UNSURE before the first load,
 * after api_tokens_known_stale(), and from API_TOKEN_SET_TTL_MS after the
 * read of the last load. Thread-safe.
 */
enum api_tokens_presence api_tokens_known(const unsigned char sha256[32]);

/**
 * Replaces the known set with @p n hashes (borrowed for the call) and
 * trusts it from now on, as of @p read_ms: the CLOCK_MONOTONIC milliseconds
 * at which the read that found them was sent (no later than its snapshot;
 * one in the future counts as now). Thread-safe.
 * @return LEDGER_OK, or LEDGER_ERR_NOMEM with the set no longer trusted
 */
LEDGER_MUSTCHECK enum ledger_err api_tokens_known_load(const unsigned char (*hashes)[32], size_t n,
						       int64_t read_ms);

/** Stops trusting the known set until the next load. Thread-safe. */
void api_tokens_known_stale(void);

/**
 * Takes one lookup from the allowance of hashes absent from the known set:
 * API_TOKEN_ABSENT_LOOKUPS a second, saved up to API_TOKEN_ABSENT_LOOKUPS.
 * Thread-safe.
 * @return true when the hash may be looked up; false when it is refused unasked
 */
bool api_tokens_absent_lookup(void);

#endif
