/*
 * ledger/common/sha256.h: SHA-256 through libcrypto, with the algorithm fetched
 * once per process (OpenSSL 3 fetches it again at every EVP_sha256()
 * call: a lock and a lookup per digest, measured at 6% of a replay's CPU).
 */
#ifndef LEDGER_SHA256_H
#define LEDGER_SHA256_H

#include <stdbool.h>
#include <stddef.h>

/**
 * Digests @p len bytes of @p data into @p out. Thread-safe.
 * @return false only if libcrypto could not allocate (its error queue is
 *         left clean)
 */
bool ledger_sha256(const void *data, size_t len, unsigned char out[32]);

#endif
