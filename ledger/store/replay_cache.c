/*
 * ledger/store/replay_cache.c: the replay cache behind ledger/store/replay_cache.h.
 *
 * A set-associative table: a key's hash picks one set of WAYS entries with
 * its own mutex and its own share of the byte budget, so lookups on
 * different sets never contend, memory stays within the budget, and a
 * flood of keys that land in one set only costs that set's hits. A full
 * set drops the entry nearest to its expiry. Entries are copied out under
 * the set's lock, so a reader never holds one that is being freed.
 */
#include "ledger/store/replay_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAYS 32
#define SET_BYTES (16 * 1024) /* the budget share a set gets, at least */
#define STAMPS 4096           /* request stamps; requests share one by hash */
/* Clocks of ledgerd and PostgreSQL may differ by this much. */
#define CLOCK_MARGIN_MS 60000

struct entry {
	int64_t expires_ns; /* monotonic */
	uint32_t stamp;
	size_t bytes; /* charged to the budget */
	enum ledger_call_state state;
	bool tool_dedupes;
	char args_sha256[LEDGER_SHA256_HEX + 1];
	char completed_at[LEDGER_TIMESTAMP_MAX];
	const char *tenant, *rid, *cid, *tool; /* into text[] */
	const char *result;                    /* into text[]; "" when not kept */
	size_t result_len;
	bool result_not_kept;                      /* only its digest was stored */
	struct ledger_result_digest result_digest; /* result_not_kept: its length and SHA-256 */
	char text[];
};

struct set {
	pthread_mutex_t lock;
	size_t bytes;
	uint64_t tag[WAYS]; /* each way's hash, so a lookup reads no entry but its own */
	struct entry *way[WAYS];
};

static struct set *sets;
static size_t nsets, set_budget;
static int64_t retention_ms;
static _Atomic uint32_t stamps[STAMPS];
static atomic_size_t held_entries, held_bytes;

static int64_t clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* FNV-1a over the strings, each with its NUL, continuing from @p h. */
static uint64_t hash_more(uint64_t h, const char *s)
{
	do {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ULL;
	} while (*s++ != '\0');
	return h;
}

static uint64_t hash_request(const char *tenant, const char *rid)
{
	return hash_more(hash_more(0xcbf29ce484222325ULL, tenant), rid);
}

static _Atomic uint32_t *stamp_of(uint64_t request_hash)
{
	return &stamps[(request_hash >> 32) % STAMPS];
}

bool ledger_replay_cache_init(size_t max_bytes, int64_t retention)
{
	size_t n = 1;

	ledger_replay_cache_free();
	if (max_bytes == 0)
		return true;
	while (n * 2 * SET_BYTES <= max_bytes)
		n *= 2;
	sets = calloc(n, sizeof(*sets));
	if (sets == NULL)
		return false;
	for (size_t i = 0; i < n; i++)
		pthread_mutex_init(&sets[i].lock, NULL);
	nsets = n;
	set_budget = max_bytes / n;
	retention_ms = retention;
	return true;
}

static void drop(struct set *s, unsigned way)
{
	struct entry *e = s->way[way];

	s->bytes -= e->bytes;
	atomic_fetch_sub(&held_entries, 1);
	atomic_fetch_sub(&held_bytes, e->bytes);
	free(e);
	s->way[way] = NULL;
}

void ledger_replay_cache_free(void)
{
	for (size_t i = 0; i < nsets; i++) {
		for (unsigned w = 0; w < WAYS; w++) {
			if (sets[i].way[w] != NULL)
				drop(&sets[i], w);
		}
		pthread_mutex_destroy(&sets[i].lock);
	}
	free(sets);
	sets = NULL;
	nsets = 0;
}

uint32_t ledger_replay_cache_stamp(const char *tenant, const char *rid)
{
	return atomic_load(stamp_of(hash_request(tenant, rid)));
}

void ledger_replay_cache_invalidate(const char *tenant, const char *rid)
{
	atomic_fetch_add(stamp_of(hash_request(tenant, rid)), 1);
}

/* "2026-11-30T01:29:43.123Z" as ms since the epoch; -1 if malformed. */
static int64_t parse_utc_ms(const char *s)
{
	struct tm tm;
	int ms = 0, used = 0;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
		   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms, &used) != 7 ||
	    used == 0 || s[used] != '\0')
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm) * 1000 + ms;
}

/* Whether way @p w of @p s holds the key. */
static bool holds(const struct set *s, unsigned w, uint64_t hash, const char *tenant,
		  const char *rid, const char *cid)
{
	const struct entry *e = s->way[w];

	return e != NULL && s->tag[w] == hash && strcmp(e->cid, cid) == 0 &&
	       strcmp(e->rid, rid) == 0 && strcmp(e->tenant, tenant) == 0;
}

/* Copies @p s into @p *at and returns where it went. */
static const char *place(char **at, const char *s, size_t len)
{
	char *p = *at;

	memcpy(p, s, len);
	p[len] = '\0';
	*at += len + 1;
	return p;
}

static struct entry *entry_new(const char *tenant, const char *rid, const char *cid,
			       const struct ledger_call *call, uint32_t stamp)
{
	size_t lt = strlen(tenant), lr = strlen(rid), lc = strlen(cid), lo = strlen(call->tool);
	size_t bytes = sizeof(struct entry) + lt + lr + lc + lo + call->result_len + 5;
	struct entry *e = NULL;
	char *at = NULL;

	if (bytes > set_budget)
		return NULL;
	e = malloc(bytes);
	if (e == NULL)
		return NULL;
	e->expires_ns = clock_ns(CLOCK_MONOTONIC) + (int64_t)LEDGER_REPLAY_CACHE_TTL_MS * 1000000;
	e->stamp = stamp;
	e->bytes = bytes;
	e->state = call->state;
	e->tool_dedupes = call->tool_dedupes;
	memcpy(e->args_sha256, call->args_sha256, sizeof(e->args_sha256));
	memcpy(e->completed_at, call->completed_at, sizeof(e->completed_at));
	at = e->text;
	e->tenant = place(&at, tenant, lt);
	e->rid = place(&at, rid, lr);
	e->cid = place(&at, cid, lc);
	e->tool = place(&at, call->tool, lo);
	e->result = place(&at, call->result != NULL ? call->result : "", call->result_len);
	e->result_len = call->result_len;
	e->result_not_kept = call->result_not_kept;
	e->result_digest = call->result_digest;
	return e;
}

void ledger_replay_cache_put(const char *tenant, const char *rid, const char *cid,
			     const struct ledger_call *call, uint32_t stamp)
{
	uint64_t h = 0;
	int64_t completed_ms = 0, now = 0;
	struct entry *e = NULL;
	struct set *s = NULL;
	unsigned free_way = WAYS;

	/* A settled call: its result, or (not kept) the digest a claim is told. */
	if (sets == NULL || (call->result == NULL && !call->result_not_kept) ||
	    (call->state != LEDGER_CALL_SUCCEEDED && call->state != LEDGER_CALL_FAILED))
		return;
	/* Keep nothing that retention could remove while it is held. */
	completed_ms = parse_utc_ms(call->completed_at);
	if (completed_ms < 0 || completed_ms + retention_ms - clock_ns(CLOCK_REALTIME) / 1000000 <=
					LEDGER_REPLAY_CACHE_TTL_MS + CLOCK_MARGIN_MS)
		return;
	h = hash_more(hash_request(tenant, rid), cid);
	e = entry_new(tenant, rid, cid, call, stamp);
	if (e == NULL)
		return;
	s = &sets[h % nsets];
	now = clock_ns(CLOCK_MONOTONIC);
	pthread_mutex_lock(&s->lock);
	for (unsigned w = 0; w < WAYS; w++) {
		struct entry *old = s->way[w];

		if (old != NULL && (old->expires_ns <= now || holds(s, w, h, tenant, rid, cid)))
			drop(s, w);
	}
	for (;;) {
		unsigned oldest = WAYS;

		free_way = WAYS;
		for (unsigned w = 0; w < WAYS; w++) {
			if (s->way[w] == NULL)
				free_way = w;
			else if (oldest == WAYS ||
				 s->way[w]->expires_ns < s->way[oldest]->expires_ns)
				oldest = w;
		}
		if (free_way < WAYS && s->bytes + e->bytes <= set_budget)
			break;
		drop(s, oldest); /* e->bytes <= set_budget: the set is not empty */
	}
	s->way[free_way] = e;
	s->tag[free_way] = h;
	s->bytes += e->bytes;
	atomic_fetch_add(&held_entries, 1);
	atomic_fetch_add(&held_bytes, e->bytes);
	pthread_mutex_unlock(&s->lock);
}

bool ledger_replay_cache_get(const char *tenant, const char *rid, const char *cid,
			     struct ledger_call *call)
{
	uint64_t rh = 0, h = 0;
	uint32_t stamp = 0;
	struct set *s = NULL;
	bool hit = false;

	memset(call, 0, sizeof(*call));
	call->state = LEDGER_CALL_ABSENT;
	if (sets == NULL)
		return false;
	rh = hash_request(tenant, rid);
	h = hash_more(rh, cid);
	stamp = atomic_load(stamp_of(rh));
	s = &sets[h % nsets];
	pthread_mutex_lock(&s->lock);
	for (unsigned w = 0; w < WAYS; w++) {
		const struct entry *e = s->way[w];

		if (!holds(s, w, h, tenant, rid, cid))
			continue;
		if (e->stamp != stamp || e->expires_ns <= clock_ns(CLOCK_MONOTONIC)) {
			drop(s, w);
			break;
		}
		if (e->result_not_kept) {
			call->result_not_kept = true;
			call->result_digest = e->result_digest;
		} else {
			call->result = malloc(e->result_len + 1);
			if (call->result == NULL)
				break;
			memcpy(call->result, e->result, e->result_len + 1);
			call->result_len = e->result_len;
		}
		call->state = e->state;
		call->tool_dedupes = e->tool_dedupes;
		snprintf(call->tool, sizeof(call->tool), "%s", e->tool);
		memcpy(call->args_sha256, e->args_sha256, sizeof(call->args_sha256));
		memcpy(call->completed_at, e->completed_at, sizeof(call->completed_at));
		hit = true;
		break;
	}
	pthread_mutex_unlock(&s->lock);
	return hit;
}

void ledger_replay_cache_stats(size_t *entries, size_t *bytes)
{
	*entries = atomic_load(&held_entries);
	*bytes = atomic_load(&held_bytes);
}
