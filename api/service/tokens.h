/*
 * api/service/tokens.h: API tokens. A token is "ldg_" and 43 characters of
 * base64url (256 random bits); the database keeps only its SHA-256. A small
 * cache of recent lookups spares the database a query per call; an entry
 * lives API_TOKEN_CACHE_MS from the moment its lookup began, so a token
 * stops working within that time of its revocation's commit (or of its
 * revoked_at, when that was set in the future).
 */
#ifndef API_TOKENS_H
#define API_TOKENS_H

#include <stdbool.h>
#include <stddef.h>

#include "ledger/common/err.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"

#define API_TOKEN_LEN 47 /* "ldg_" + 43 */
#define API_TOKEN_CACHE_MS 10000
/* A token the database did not know is refused without asking again for this long. */
#define API_TOKEN_UNKNOWN_MS 10000

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

#endif
