/*
 * ledger/tokens.c: token generation, hashing and the lookup cache. The
 * cache is a small direct-mapped table indexed by the hash itself (it is
 * uniformly random), behind one mutex: a lookup is a few hundred
 * nanoseconds, against a database round trip.
 */
#include "ledger/tokens.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ledger/sha256.h"

#define CACHE_SLOTS 1024 /* a power of two */

struct cache_slot {
	unsigned char sha256[32];
	char tenant[LEDGER_ID_MAX + 1];
	enum ledger_role role;
	long long expires_ms; /* monotonic; 0: empty */
};

static struct cache_slot cache[CACHE_SLOTS];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

enum ledger_err ledger_token_generate(char out[LEDGER_TOKEN_LEN + 1])
{
	static const char b64url[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	unsigned char raw[33]; /* 256 bits, padded to a multiple of 3 bytes */
	size_t o = 4;

	if (RAND_bytes(raw, 32) != 1)
		return LEDGER_ERR_INTERNAL;
	raw[32] = 0;
	memcpy(out, "ldg_", 4);
	for (size_t i = 0; i < 33; i += 3) {
		unsigned v = (unsigned)raw[i] << 16 | (unsigned)raw[i + 1] << 8 | raw[i + 2];
		out[o++] = b64url[(v >> 18) & 63];
		out[o++] = b64url[(v >> 12) & 63];
		out[o++] = b64url[(v >> 6) & 63];
		out[o++] = b64url[v & 63];
	}
	/* 44 characters came out; the last encodes only padding. */
	out[LEDGER_TOKEN_LEN] = '\0';
	OPENSSL_cleanse(raw, sizeof(raw));
	return LEDGER_OK;
}

void ledger_token_hash(const char *token, size_t len, unsigned char out[32])
{
	if (!ledger_sha256(token, len, out))
		abort(); /* only out of memory, at a size that cannot be short */
}

static struct cache_slot *slot_for(const unsigned char sha256[32])
{
	unsigned idx = ((unsigned)sha256[0] << 8 | sha256[1]) & (CACHE_SLOTS - 1);

	return &cache[idx];
}

bool ledger_token_cache_get(const unsigned char sha256[32], char *tenant, enum ledger_role *role)
{
	struct cache_slot *s = slot_for(sha256);
	bool hit = false;

	pthread_mutex_lock(&cache_lock);
	if (s->expires_ms > now_ms() && CRYPTO_memcmp(s->sha256, sha256, 32) == 0) {
		memcpy(tenant, s->tenant, sizeof(s->tenant));
		*role = s->role;
		hit = true;
	}
	pthread_mutex_unlock(&cache_lock);
	return hit;
}

void ledger_token_cache_put(const unsigned char sha256[32], const char *tenant,
			    enum ledger_role role)
{
	struct cache_slot *s = slot_for(sha256);

	pthread_mutex_lock(&cache_lock);
	memcpy(s->sha256, sha256, 32);
	snprintf(s->tenant, sizeof(s->tenant), "%s", tenant);
	s->role = role;
	s->expires_ms = now_ms() + LEDGER_TOKEN_CACHE_MS;
	pthread_mutex_unlock(&cache_lock);
}
