/*
 * api/service/tokens.c: token generation, hashing, the lookup cache, the
 * table of unknown tokens and the known set. The cache is a small
 * direct-mapped table indexed by the hash itself (it is uniformly random),
 * behind one mutex: a lookup is a few hundred nanoseconds, against a
 * database round trip. The known set is an open-addressing table indexed
 * the same way, built whole by each load and swapped in under a mutex of
 * its own, so that readers never see half of one.
 */
#include "api/service/tokens.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* --- the known set --- */

struct known_slot {
	unsigned char sha256[32];
	bool used;
};

/* Immutable once built; replaced whole. */
struct known_set {
	struct known_slot *slots;
	size_t mask; /* slots - 1: a power of two, at least twice the hashes */
};

static struct known_set *known; /* NULL: never loaded */
static bool known_trusted;      /* false: not loaded, or a change may be missing from it */
static int64_t known_read_ms;   /* monotonic, of the read that loaded it */
static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t known_index(const struct known_set *set, const unsigned char sha256[32])
{
	uint64_t h = 0;

	for (int i = 0; i < 8; i++)
		h = h << 8 | sha256[i];
	return (size_t)h & set->mask;
}

/* Linear probing: the slot that holds @p sha256, or the empty one where it would be. */
static struct known_slot *known_probe(const struct known_set *set, const unsigned char sha256[32])
{
	size_t i = known_index(set, sha256);

	while (set->slots[i].used && CRYPTO_memcmp(set->slots[i].sha256, sha256, 32) != 0)
		i = (i + 1) & set->mask;
	return &set->slots[i];
}

static void known_free(struct known_set *set)
{
	if (set == NULL)
		return;
	free(set->slots);
	free(set);
}

/* A new set of @p n hashes (a repeated one kept once). @return NULL when out of memory */
static struct known_set *known_build(const unsigned char (*hashes)[32], size_t n)
{
	struct known_set *set = calloc(1, sizeof(*set));
	size_t slots = 16;

	if (set == NULL)
		return NULL;
	while (slots < 2 * n && slots <= SIZE_MAX / 4 / sizeof(struct known_slot))
		slots *= 2;
	if (slots < 2 * n || (set->slots = calloc(slots, sizeof(*set->slots))) == NULL) {
		free(set);
		return NULL;
	}
	set->mask = slots - 1;
	for (size_t i = 0; i < n; i++) {
		struct known_slot *s = known_probe(set, hashes[i]);

		memcpy(s->sha256, hashes[i], 32);
		s->used = true;
	}
	return set;
}

enum api_tokens_presence api_tokens_known(const unsigned char sha256[32])
{
	enum api_tokens_presence p = API_TOKENS_UNSURE;

	pthread_mutex_lock(&known_lock);
	if (known != NULL && known_trusted && now_ms() < known_read_ms + API_TOKEN_SET_TTL_MS)
		p = known_probe(known, sha256)->used ? API_TOKENS_PRESENT : API_TOKENS_ABSENT;
	pthread_mutex_unlock(&known_lock);
	return p;
}

enum ledger_err api_tokens_known_load(const unsigned char (*hashes)[32], size_t n, int64_t read_ms)
{
	struct known_set *set = known_build(hashes, n), *old = NULL;
	int64_t now = now_ms();

	pthread_mutex_lock(&known_lock);
	if (set != NULL) {
		old = known;
		known = set;
		known_read_ms = read_ms < now ? read_ms : now;
	}
	known_trusted = set != NULL;
	pthread_mutex_unlock(&known_lock);
	known_free(old);
	return set != NULL ? LEDGER_OK : LEDGER_ERR_NOMEM;
}

void api_tokens_known_stale(void)
{
	pthread_mutex_lock(&known_lock);
	known_trusted = false;
	pthread_mutex_unlock(&known_lock);
}

/* --- the allowance of lookups for hashes the known set lacks: a token bucket --- */

static int64_t absent_credit = API_TOKEN_ABSENT_LOOKUPS * 1000; /* thousandths of a lookup */
static int64_t absent_at;                                       /* monotonic ms of its count */

bool api_tokens_absent_lookup(void)
{
	const int64_t full = API_TOKEN_ABSENT_LOOKUPS * 1000;
	int64_t now = now_ms();
	bool allowed = false;

	pthread_mutex_lock(&known_lock);
	if (now > absent_at) {
		int64_t ms = now - absent_at;

		/* API_TOKEN_ABSENT_LOOKUPS a second is as many thousandths a millisecond. */
		absent_credit += ms < full ? ms * API_TOKEN_ABSENT_LOOKUPS : full;
		if (absent_credit > full)
			absent_credit = full;
		absent_at = now;
	}
	if (absent_credit >= 1000) {
		absent_credit -= 1000;
		allowed = true;
	}
	pthread_mutex_unlock(&known_lock);
	return allowed;
}
