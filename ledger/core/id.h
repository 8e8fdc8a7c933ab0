/*
 * ledger/core/id.h: the contract's limits on what a caller sends, and the
 * one check of an id (a request, tool call or attempt id, or a claim_id).
 */
#ifndef LEDGER_ID_H
#define LEDGER_ID_H

#include <stdbool.h>
#include <stddef.h>

#define LEDGER_ID_MAX 128       /* bytes of a request, tool call or attempt id */
#define LEDGER_TEXT_MAX 256     /* bytes of a free-text field */
#define LEDGER_CLAIM_ID_MIN 16  /* characters of a claim_id, at least */
#define LEDGER_SHA256_HEX 64    /* lowercase hex digits of a fingerprint */
#define LEDGER_TIMESTAMP_MAX 32 /* "2026-11-30T01:29:43.123Z" and a NUL, with room */
#define LEDGER_MAX_SAFE_INT 9007199254740991ULL /* 2^53 - 1 */

/**
 * True when @p s (of @p len bytes) is a valid id: 1..128 bytes of
 * [A-Za-z0-9._~-]. A claim_id is also an id, with at least 16 of them.
 */
bool ledger_id_valid(const char *s, size_t len);

#endif
