/*
 * api/service/tokens.c: token generation, hashing and the lookup cache. The
 * cache is a small direct-mapped table indexed by the hash itself (it is
 * uniformly random), behind one mutex: a lookup is a few hundred
 * nanoseconds, against a database round trip.
 */
#include "api/service/tokens.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ledger/common/base64url.h"
#include "ledger/common/sha256.h"

#define CACHE_SLOTS 1024 /* a power of two */

struct cache_slot {
	unsigned char sha256[32];
	char tenant[LEDGER_ID_MAX + 1];
	enum ledger_role role;
	long long expires_ms; /* monotonic; 0: empty */
};

static struct cache_slot cache[CACHE_SLOTS];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

#define UNKNOWN_SLOTS 4096 /* a power of two: 160 KiB */

struct unknown_slot {
	unsigned char sha256[32];
	long long expires_ms; /* monotonic; 0: empty */
};

static struct unknown_slot unknown[UNKNOWN_SLOTS];

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

enum ledger_err api_tokens_generate(char out[API_TOKEN_LEN + 1])
{
	unsigned char raw[32]; /* 256 bits: 43 characters of base64url */

	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return LEDGER_ERR_INTERNAL;
	memcpy(out, "ldg_", 4);
	(void)ledger_base64url_encode(raw, sizeof(raw), out + 4, API_TOKEN_LEN + 1 - 4);
	OPENSSL_cleanse(raw, sizeof(raw));
	return LEDGER_OK;
}

void api_tokens_hash(const char *token, size_t len, unsigned char out[32])
{
	if (!ledger_sha256(token, len, out))
		abort(); /* only out of memory, at a size that cannot be short */
}

static struct cache_slot *slot_for(const unsigned char sha256[32])
{
	unsigned idx = ((unsigned)sha256[0] << 8 | sha256[1]) & (CACHE_SLOTS - 1);

	return &cache[idx];
}

bool api_tokens_cache_get(const unsigned char sha256[32], char *tenant, enum ledger_role *role)
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

void api_tokens_cache_put(const unsigned char sha256[32], const char *tenant, enum ledger_role role,
			  long long read_ms)
{
	struct cache_slot *s = slot_for(sha256);
	long long now = now_ms();

	pthread_mutex_lock(&cache_lock);
	memcpy(s->sha256, sha256, 32);
	snprintf(s->tenant, sizeof(s->tenant), "%s", tenant);
	s->role = role;
	/* From the read, not from now: a slow answer does not stretch a revocation's delay. */
	s->expires_ms = (read_ms < now ? read_ms : now) + API_TOKEN_CACHE_MS;
	pthread_mutex_unlock(&cache_lock);
}

static struct unknown_slot *unknown_slot_for(const unsigned char sha256[32])
{
	unsigned idx = ((unsigned)sha256[2] << 8 | sha256[3]) & (UNKNOWN_SLOTS - 1);

	return &unknown[idx];
}

bool api_tokens_unknown(const unsigned char sha256[32])
{
	struct unknown_slot *s = unknown_slot_for(sha256);
	bool hit;

	pthread_mutex_lock(&cache_lock);
	hit = s->expires_ms > now_ms() && CRYPTO_memcmp(s->sha256, sha256, 32) == 0;
	pthread_mutex_unlock(&cache_lock);
	return hit;
}

void api_tokens_unknown_put(const unsigned char sha256[32])
{
	struct unknown_slot *s = unknown_slot_for(sha256);

	pthread_mutex_lock(&cache_lock);
	memcpy(s->sha256, sha256, 32);
	s->expires_ms = now_ms() + API_TOKEN_UNKNOWN_MS;
	pthread_mutex_unlock(&cache_lock);
}
