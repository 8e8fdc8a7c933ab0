/*
 * tests/unit/test_tokens.c: API tokens (api/service/tokens.c): the format of a new
 * token, its SHA-256, and the lookup cache: hit, miss, overwrite, eviction
 * by a token of the same slot, expiry API_TOKEN_CACHE_MS after the lookup's
 * read, and use from several threads at once. Then the known set of live
 * tokens' hashes: what a load holds, how long it is trusted, its
 * replacement under readers; and the allowance of lookups for hashes it
 * lacks: its rate, its savings and a flood.
 *
 * The cache reads CLOCK_MONOTONIC through clock_gettime() and has no seam for
 * a test clock. Rather than sleep API_TOKEN_CACHE_MS per case, this program
 * defines clock_gettime() itself (the executable's definition is the one every
 * object of it calls): it asks the kernel, and while a test has frozen the
 * monotonic clock it answers the frozen time instead. The expiry tests fail,
 * not pass, if that interposition is ever lost: a real clock never reaches
 * the deadline in time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "api/service/tokens.h"
#include "ledger/common/base64url.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* A read time to come: api_tokens_cache_put() counts it as now. */
#define NOW LLONG_MAX
#define SLOTS 1024 /* api/service/tokens.c's CACHE_SLOTS: a hash's first 10 bits pick its slot */

/* --- the test clock ------------------------------------------------------------ */

static bool clock_frozen;
static struct timespec frozen_at;

int clock_gettime(clockid_t clk, struct timespec *ts)
{
	if (syscall(SYS_clock_gettime, clk, ts) != 0)
		return -1;
	if (clk == CLOCK_MONOTONIC && clock_frozen)
		*ts = frozen_at;
	return 0;
}

/*
 * Stops the monotonic clock at the present, or where a test last left it if
 * that is later: frozen, it never runs back, as CLOCK_MONOTONIC never does.
 */
static void freeze(void)
{
	struct timespec now;

	assert_int_equal(syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &now), 0);
	if (now.tv_sec > frozen_at.tv_sec ||
	    (now.tv_sec == frozen_at.tv_sec && now.tv_nsec > frozen_at.tv_nsec))
		frozen_at = now;
	clock_frozen = true;
}

/* Moves the stopped clock on by @ms. */
static void advance_ms(long long ms)
{
	long long ns = frozen_at.tv_nsec + (ms % 1000) * 1000000;

	frozen_at.tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
	frozen_at.tv_nsec = (long)(ns % 1000000000);
}

static int thaw(void **state)
{
	(void)state;
	clock_frozen = false;
	return 0;
}

static void test_tokens_test_clock_is_in_effect(void **state)
{
	struct timespec a, b;

	(void)state;
	freeze();
	assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &a), 0);
	advance_ms(1500);
	assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &b), 0);
	assert_int_equal(
		(long long)(b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000, 1500);
}

/* --- tokens ------------------------------------------------------------------ */

static bool is_base64url(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

static int by_text(const void *a, const void *b)
{
	return strcmp(a, b);
}

#define N_TOKENS 2000

/* "ldg_" and 43 characters of base64url: 256 bits, written canonically. */
static void test_tokens_generate_format(void **state)
{
	static char tokens[N_TOKENS][API_TOKEN_LEN + 1];

	(void)state;
	assert_int_equal(API_TOKEN_LEN, 4 + 43);
	for (size_t i = 0; i < N_TOKENS; i++) {
		char *t = tokens[i];
		unsigned char raw[33];
		char again[API_TOKEN_LEN + 1];

		memset(t, 'x', API_TOKEN_LEN + 1);
		assert_int_equal(api_tokens_generate(t), LEDGER_OK);
		assert_int_equal(t[API_TOKEN_LEN], '\0');
		assert_int_equal(strlen(t), API_TOKEN_LEN);
		assert_memory_equal(t, "ldg_", 4);
		for (size_t k = 4; k < API_TOKEN_LEN; k++) {
			if (!is_base64url(t[k]))
				fail_msg("token %s: character %zu is not base64url", t, k);
		}
		/* the last character carries 4 bits and two zero bits */
		if (strchr("AEIMQUYcgkosw048", t[API_TOKEN_LEN - 1]) == NULL)
			fail_msg("token %s: its last character is not canonical", t);
		assert_int_equal(ledger_base64url_decode(t + 4, raw, sizeof(raw)), 32);
		memcpy(again, "ldg_", 4);
		assert_int_equal(ledger_base64url_encode(raw, 32, again + 4, sizeof(again) - 4),
				 43);
		assert_string_equal(again, t);
	}
	/* 256 random bits: never twice */
	qsort(tokens, N_TOKENS, sizeof(tokens[0]), by_text);
	for (size_t i = 1; i < N_TOKENS; i++) {
		if (strcmp(tokens[i - 1], tokens[i]) == 0)
			fail_msg("token %s was made twice", tokens[i]);
	}
}

/* SHA-256 of @len bytes of @in (FIPS 180-2 vectors, then what a length means). */
static const struct {
	const char *in;
	size_t len;
	const char *hex;
} hash_rows[] = {
	{"", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	{"abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
	 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
	/* only @len bytes are hashed */
	{"abcdef", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	{"abc\0def", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	/* ... and a NUL among them is hashed like any byte */
	{"\0", 1, "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"},
};

static void test_tokens_hash_is_sha256(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(hash_rows); i++) {
		unsigned char out[32];
		char hex[65];

		api_tokens_hash(hash_rows[i].in, hash_rows[i].len, out);
		for (size_t k = 0; k < 32; k++)
			snprintf(hex + 2 * k, 3, "%02x", out[k]);
		if (strcmp(hex, hash_rows[i].hex) != 0)
			fail_msg("row %zu: %s, want %s", i, hex, hash_rows[i].hex);
	}
}

/* --- the cache ------------------------------------------------------------------- */

/*
 * A hash that lands in @slot; @tag fills the bytes the slot does not use,
 * so each test's hashes are its own and two tags of a slot differ.
 */
static void hash_in(unsigned slot, unsigned char tag, unsigned char out[32])
{
	memset(out, tag, 32);
	out[0] = (unsigned char)((tag & 0xfc) | ((slot >> 8) & 3));
	out[1] = (unsigned char)(slot & 0xff);
}

/* A tenant and a role that a lookup must find, or not. */
struct lookup {
	bool hit;
	const char *tenant;
	enum ledger_role role;
};

static void expect(const unsigned char sha[32], struct lookup want, const char *what)
{
	char tenant[LEDGER_ID_MAX + 1];
	enum ledger_role role = (enum ledger_role)99;
	bool hit;

	strcpy(tenant, "untouched");
	hit = api_tokens_cache_get(sha, tenant, &role);
	if (hit != want.hit)
		fail_msg("%s: %s, want %s", what, hit ? "hit" : "miss", want.hit ? "hit" : "miss");
	if (!hit) {
		/* a miss leaves the outputs alone */
		assert_string_equal(tenant, "untouched");
		assert_int_equal(role, 99);
		return;
	}
	if (strcmp(tenant, want.tenant) != 0 || role != want.role)
		fail_msg("%s: %s as role %d, want %s as role %d", what, tenant, (int)role,
			 want.tenant, (int)want.role);
}

#define HIT(t, r) ((struct lookup){true, (t), (r)})
#define MISS ((struct lookup){false, NULL, LEDGER_ROLE_AGENT})

static void test_tokens_cache_miss_when_never_put(void **state)
{
	unsigned char sha[32];

	(void)state;
	hash_in(1, 0x10, sha);
	expect(sha, MISS, "never put");
}

/* Each role, and tenants at the contract's bounds, come back as put. */
static const struct {
	unsigned slot;
	const char *tenant;
	enum ledger_role role;
} hit_rows[] = {
	{10, "t1", LEDGER_ROLE_AGENT},
	{11, "t1", LEDGER_ROLE_ROUTER},
	{12, "acme-prod", LEDGER_ROLE_REVIEWER},
	{13, "acme-prod", LEDGER_ROLE_ADMIN},
	{14, "x", LEDGER_ROLE_AGENT},
	{15,
	 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	 LEDGER_ROLE_ADMIN}, /* 128 bytes, the longest id */
};

static void test_tokens_cache_hit_is_what_was_put(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(hit_rows); i++) {
		unsigned char sha[32];
		char what[32];

		hash_in(hit_rows[i].slot, 0x20, sha);
		api_tokens_cache_put(sha, hit_rows[i].tenant, hit_rows[i].role, NOW);
		snprintf(what, sizeof(what), "row %zu", i);
		expect(sha, HIT(hit_rows[i].tenant, hit_rows[i].role), what);
	}
	/* and each stays while the others were put */
	for (size_t i = 0; i < COUNT(hit_rows); i++) {
		unsigned char sha[32];

		hash_in(hit_rows[i].slot, 0x20, sha);
		expect(sha, HIT(hit_rows[i].tenant, hit_rows[i].role), "after the others");
	}
}

/* A tenant longer than an id is cut to LEDGER_ID_MAX bytes. */
static void test_tokens_cache_cuts_a_longer_tenant(void **state)
{
	unsigned char sha[32];
	char tenant[200];

	(void)state;
	memset(tenant, 'T', sizeof(tenant) - 1);
	tenant[sizeof(tenant) - 1] = '\0';
	hash_in(20, 0x30, sha);
	api_tokens_cache_put(sha, tenant, LEDGER_ROLE_AGENT, NOW);
	tenant[LEDGER_ID_MAX] = '\0';
	expect(sha, HIT(tenant, LEDGER_ROLE_AGENT), "200-byte tenant");
}

static void test_tokens_cache_put_again_overwrites(void **state)
{
	unsigned char sha[32];

	(void)state;
	hash_in(30, 0x40, sha);
	api_tokens_cache_put(sha, "t1", LEDGER_ROLE_AGENT, NOW);
	api_tokens_cache_put(sha, "t2", LEDGER_ROLE_ADMIN, NOW);
	expect(sha, HIT("t2", LEDGER_ROLE_ADMIN), "second put");
}

/*
 * One entry a slot: a token of the same slot evicts the one before (the
 * next lookup of that one goes to the database), and a lookup compares the
 * whole hash, not the slot.
 */
static void test_tokens_cache_same_slot_evicts(void **state)
{
	unsigned char a[32], b[32], a_but_last[32], other_slot[32];

	(void)state;
	hash_in(40, 0x50, a);
	hash_in(40, 0x54, b); /* differs from a after the slot bits */
	memcpy(a_but_last, a, 32);
	a_but_last[31] ^= 1;
	hash_in(41, 0x50, other_slot);

	api_tokens_cache_put(a, "ta", LEDGER_ROLE_AGENT, NOW);
	api_tokens_cache_put(other_slot, "to", LEDGER_ROLE_ROUTER, NOW);
	expect(a, HIT("ta", LEDGER_ROLE_AGENT), "a");
	expect(a_but_last, MISS, "a with its last bit flipped");
	api_tokens_cache_put(b, "tb", LEDGER_ROLE_ADMIN, NOW);
	expect(b, HIT("tb", LEDGER_ROLE_ADMIN), "b");
	expect(a, MISS, "a, evicted by b");
	expect(other_slot, HIT("to", LEDGER_ROLE_ROUTER), "the neighbouring slot");
}

/* An entry answers for API_TOKEN_CACHE_MS after its put, not a millisecond more. */
static const struct {
	long long after_ms; /* since the put */
	bool hit;
} expiry_rows[] = {
	{0, true},
	{1, true},
	{API_TOKEN_CACHE_MS / 2, true},
	{API_TOKEN_CACHE_MS - 1, true},
	{API_TOKEN_CACHE_MS, false},
	{API_TOKEN_CACHE_MS + 1, false},
	{24LL * 3600 * 1000, false},
};

static void test_tokens_cache_expires_after_cache_ms(void **state)
{
	(void)state;
	assert_int_equal(API_TOKEN_CACHE_MS, 10000);
	for (size_t i = 0; i < COUNT(expiry_rows); i++) {
		unsigned char sha[32];
		char what[64];

		hash_in(100 + (unsigned)i, 0x60, sha);
		freeze();
		api_tokens_cache_put(sha, "t1", LEDGER_ROLE_ROUTER, NOW);
		advance_ms(expiry_rows[i].after_ms);
		snprintf(what, sizeof(what), "%lld ms after the put", expiry_rows[i].after_ms);
		expect(sha, expiry_rows[i].hit ? HIT("t1", LEDGER_ROLE_ROUTER) : MISS, what);
		thaw(NULL);
	}
}

/* A put renews the entry: its time counts from the latest put. */
static void test_tokens_cache_put_again_renews(void **state)
{
	unsigned char sha[32];

	(void)state;
	hash_in(200, 0x70, sha);
	freeze();
	api_tokens_cache_put(sha, "t1", LEDGER_ROLE_AGENT, NOW);
	advance_ms(API_TOKEN_CACHE_MS - 1000);
	api_tokens_cache_put(sha, "t1", LEDGER_ROLE_AGENT, NOW);
	advance_ms(API_TOKEN_CACHE_MS - 1);
	expect(sha, HIT("t1", LEDGER_ROLE_AGENT), "just before the second put's deadline");
	advance_ms(1);
	expect(sha, MISS, "at the second put's deadline");
	/* an expired entry is put again like a new one */
	api_tokens_cache_put(sha, "t2", LEDGER_ROLE_ADMIN, NOW);
	expect(sha, HIT("t2", LEDGER_ROLE_ADMIN), "put after expiry");
}

/*
 * An entry's time counts from the read its lookup began with, not from the
 * put: a lookup that answered late (a slow database) does not keep a token
 * that was revoked meanwhile any longer than API_TOKEN_CACHE_MS.
 */
static void test_tokens_cache_counts_from_the_read(void **state)
{
	unsigned char sha[32];
	long long read_ms;

	(void)state;
	hash_in(210, 0x74, sha);
	freeze();
	read_ms = (long long)frozen_at.tv_sec * 1000 + frozen_at.tv_nsec / 1000000;
	advance_ms(3000); /* the answer took 3 s */
	api_tokens_cache_put(sha, "t1", LEDGER_ROLE_AGENT, read_ms);
	advance_ms(API_TOKEN_CACHE_MS - 3000 - 1);
	expect(sha, HIT("t1", LEDGER_ROLE_AGENT), "just before the read's deadline");
	advance_ms(1);
	expect(sha, MISS, "at the read's deadline, 3 s short of the put's");
}

/* --- several threads ---------------------------------------------------------------- */

#define THREADS 8
#define ROUNDS 20000
#define SHARED 48       /* hashes every thread puts and gets */
#define SHARED_SLOT 512 /* the first of their slots; two hashes a slot */

static enum ledger_role role_of(unsigned h)
{
	return (enum ledger_role)(h % 4);
}

struct worker {
	unsigned id;
	unsigned long hits, torn;
};

/*
 * Puts and gets the shared hashes in its own order. Every hit must be one
 * entry as some thread put it: the tenant names the hash it was put for and
 * the role is that hash's, never a mix of two puts.
 */
static void *work(void *arg)
{
	struct worker *w = arg;
	unsigned seed = w->id * 2654435761u + 1;

	for (unsigned i = 0; i < ROUNDS; i++) {
		unsigned h, k;
		unsigned char sha[32];
		char tenant[LEDGER_ID_MAX + 1], want[32];
		enum ledger_role role;

		seed = seed * 1103515245u + 12345u;
		h = (seed >> 8) % SHARED;
		hash_in(SHARED_SLOT + h / 2, (unsigned char)(0x80 + 4 * (h % 2)), sha);
		if ((seed >> 4) % 3 == 0) {
			snprintf(tenant, sizeof(tenant), "h%u-by-%u", h, w->id);
			api_tokens_cache_put(sha, tenant, role_of(h), NOW);
			continue;
		}
		if (!api_tokens_cache_get(sha, tenant, &role))
			continue;
		w->hits++;
		snprintf(want, sizeof(want), "h%u-by-", h);
		k = (unsigned)strlen(want);
		if (strncmp(tenant, want, k) != 0 || role != role_of(h))
			w->torn++;
	}
	return NULL;
}

static void test_tokens_cache_concurrent_use(void **state)
{
	pthread_t threads[THREADS];
	struct worker workers[THREADS];
	unsigned long hits = 0;

	(void)state;
	for (unsigned i = 0; i < THREADS; i++) {
		workers[i] = (struct worker){.id = i};
		assert_int_equal(pthread_create(&threads[i], NULL, work, &workers[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		assert_int_equal(pthread_join(threads[i], NULL), 0);
		if (workers[i].torn != 0)
			fail_msg("thread %u read %lu entries that no put wrote", i,
				 workers[i].torn);
		hits += workers[i].hits;
	}
	assert_true(hits > 0); /* the gets did meet the puts */
	/* afterwards every slot still answers what was last put into it */
	for (unsigned h = 0; h < SHARED; h++) {
		unsigned char sha[32];

		hash_in(SHARED_SLOT + h / 2, (unsigned char)(0x80 + 4 * (h % 2)), sha);
		api_tokens_cache_put(sha, "after", role_of(h), NOW);
		expect(sha, HIT("after", role_of(h)), "after the threads");
	}
}

/* --- the known set ----------------------------------------------------------------- */

/* A hash of its own for @i: sha256("known-set" i), spread like a real token's. */
static void known_hash(unsigned i, unsigned char out[32])
{
	char text[32];

	snprintf(text, sizeof(text), "known-set %u", i);
	api_tokens_hash(text, strlen(text), out);
}

static long long mono_ms(void)
{
	struct timespec ts;

	assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define KNOWN 3000

/* Loads hashes 0 .. @n - 1 (and @n again, as a repeated row would be) as read now. */
static void load_known(unsigned n)
{
	static unsigned char hashes[KNOWN + 1][32];

	assert_true(n < KNOWN);
	for (unsigned i = 0; i < n; i++)
		known_hash(i, hashes[i]);
	memcpy(hashes[n], hashes[0], 32);
	assert_int_equal(api_tokens_known_load(hashes, n > 0 ? n + 1 : 0, mono_ms()), LEDGER_OK);
}

static void expect_presence(unsigned from, unsigned to, enum api_tokens_presence want,
			    const char *what)
{
	for (unsigned i = from; i < to; i++) {
		unsigned char sha[32];
		enum api_tokens_presence got;

		known_hash(i, sha);
		got = api_tokens_known(sha);
		if (got != want)
			fail_msg("%s: hash %u is %d, want %d", what, i, (int)got, (int)want);
	}
}

/*
 * Every hash loaded is present, every other one absent, whatever the size:
 * an empty set, one hash, and sets that fill the table's probes.
 */
static void test_tokens_known_set_holds_what_was_loaded(void **state)
{
	static const unsigned sizes[] = {0, 1, 7, 8, 9, 100, 1024, KNOWN - 1};

	(void)state;
	for (size_t k = 0; k < COUNT(sizes); k++) {
		char what[48];

		load_known(sizes[k]);
		snprintf(what, sizeof(what), "set of %u, loaded", sizes[k]);
		expect_presence(0, sizes[k], API_TOKENS_PRESENT, what);
		snprintf(what, sizeof(what), "set of %u, not loaded", sizes[k]);
		expect_presence(sizes[k], KNOWN + 200, API_TOKENS_ABSENT, what);
	}
}

/*
 * The set is trusted from its load until API_TOKEN_SET_TTL_MS after its
 * read, or until it is said to be stale, whichever comes first; then every
 * hash, in it or not, is UNSURE until the next load.
 */
static const struct {
	long long read_before_ms; /* how long before the load its read began */
	long long after_ms;       /* the lookup, since the load */
	bool stale;               /* api_tokens_known_stale() between the two */
	enum api_tokens_presence in, out;
} trust_rows[] = {
	{0, 0, false, API_TOKENS_PRESENT, API_TOKENS_ABSENT},
	{0, API_TOKEN_SET_TTL_MS - 1, false, API_TOKENS_PRESENT, API_TOKENS_ABSENT},
	{0, API_TOKEN_SET_TTL_MS, false, API_TOKENS_UNSURE, API_TOKENS_UNSURE},
	{0, 24LL * 3600 * 1000, false, API_TOKENS_UNSURE, API_TOKENS_UNSURE},
	/* counted from the read, not the load */
	{3000, API_TOKEN_SET_TTL_MS - 3001, false, API_TOKENS_PRESENT, API_TOKENS_ABSENT},
	{3000, API_TOKEN_SET_TTL_MS - 3000, false, API_TOKENS_UNSURE, API_TOKENS_UNSURE},
	/* a read from the future counts as now */
	{-5000, API_TOKEN_SET_TTL_MS - 1, false, API_TOKENS_PRESENT, API_TOKENS_ABSENT},
	{-5000, API_TOKEN_SET_TTL_MS, false, API_TOKENS_UNSURE, API_TOKENS_UNSURE},
	{0, 0, true, API_TOKENS_UNSURE, API_TOKENS_UNSURE},
	{0, 1, true, API_TOKENS_UNSURE, API_TOKENS_UNSURE},
};

static void test_tokens_known_set_is_trusted_until_stale_or_old(void **state)
{
	static unsigned char hashes[4][32];

	(void)state;
	for (unsigned i = 0; i < COUNT(hashes); i++)
		known_hash(i, hashes[i]);
	for (size_t i = 0; i < COUNT(trust_rows); i++) {
		unsigned char in[32], out[32];
		enum api_tokens_presence got_in, got_out;
		long long now;

		known_hash(0, in);
		known_hash(KNOWN + 1, out);
		freeze();
		now = mono_ms();
		assert_int_equal(api_tokens_known_load(hashes, COUNT(hashes),
						       now - trust_rows[i].read_before_ms),
				 LEDGER_OK);
		if (trust_rows[i].stale)
			api_tokens_known_stale();
		advance_ms(trust_rows[i].after_ms);
		got_in = api_tokens_known(in);
		got_out = api_tokens_known(out);
		thaw(NULL);
		if (got_in != trust_rows[i].in || got_out != trust_rows[i].out)
			fail_msg("row %zu: a loaded hash is %d (want %d), another %d (want %d)", i,
				 (int)got_in, (int)trust_rows[i].in, (int)got_out,
				 (int)trust_rows[i].out);
	}
	/* the next load trusts it again */
	load_known(4);
	expect_presence(0, 4, API_TOKENS_PRESENT, "loaded after stale");
	expect_presence(4, 100, API_TOKENS_ABSENT, "not loaded after stale");
}

/* A load replaces the set whole: a hash of the old one only is absent from then on. */
static void test_tokens_known_set_load_replaces(void **state)
{
	static unsigned char hashes[2][32];

	(void)state;
	load_known(50);
	known_hash(40, hashes[0]);
	known_hash(KNOWN + 7, hashes[1]);
	assert_int_equal(api_tokens_known_load(hashes, 2, mono_ms()), LEDGER_OK);
	expect_presence(40, 41, API_TOKENS_PRESENT, "kept");
	expect_presence(KNOWN + 7, KNOWN + 8, API_TOKENS_PRESENT, "added");
	expect_presence(0, 40, API_TOKENS_ABSENT, "dropped");
	expect_presence(41, 50, API_TOKENS_ABSENT, "dropped");
}

#define READERS 6

struct reader {
	pthread_t thread;
	atomic_bool *stop;
	unsigned long reads, wrong;
};

/*
 * Hash 0 is in every set loaded, hash KNOWN + 1 in none: whatever load a
 * reader meets, half done or not, it never sees them otherwise.
 */
static void *read_known(void *arg)
{
	struct reader *r = arg;
	unsigned char always[32], never[32];

	known_hash(0, always);
	known_hash(KNOWN + 1, never);
	while (!atomic_load(r->stop)) {
		enum api_tokens_presence a = api_tokens_known(always), n = api_tokens_known(never);

		r->reads++;
		if (a == API_TOKENS_ABSENT || n == API_TOKENS_PRESENT)
			r->wrong++;
	}
	return NULL;
}

static void test_tokens_known_set_concurrent_loads_and_reads(void **state)
{
	struct reader readers[READERS];
	atomic_bool stop = false;
	unsigned long reads = 0;

	(void)state;
	load_known(10);
	for (unsigned i = 0; i < READERS; i++) {
		readers[i] = (struct reader){.stop = &stop};
		assert_int_equal(pthread_create(&readers[i].thread, NULL, read_known, &readers[i]),
				 0);
	}
	for (unsigned k = 0; k < 300; k++) {
		load_known(1 + (k * 37) % 2000);
		if (k % 7 == 0)
			api_tokens_known_stale();
	}
	atomic_store(&stop, true);
	for (unsigned i = 0; i < READERS; i++) {
		assert_int_equal(pthread_join(readers[i].thread, NULL), 0);
		if (readers[i].wrong != 0)
			fail_msg("reader %u saw %lu answers no load gave", i, readers[i].wrong);
		reads += readers[i].reads;
	}
	assert_true(reads > 0);
}

/* --- the allowance of lookups for absent hashes -------------------------------------- */

/* Lookups the allowance grants now, taking them all. */
static unsigned drain(void)
{
	unsigned n = 0;

	while (api_tokens_absent_lookup()) {
		n++;
		assert_true(n <= API_TOKEN_ABSENT_LOOKUPS);
	}
	return n;
}

/* On a frozen clock: fills the allowance and takes it all, to the last thousandth. */
static void spend_all(void)
{
	advance_ms(2000);
	assert_int_equal(drain(), API_TOKEN_ABSENT_LOOKUPS);
	assert_false(api_tokens_absent_lookup());
}

/* API_TOKEN_ABSENT_LOOKUPS a second, saved up to API_TOKEN_ABSENT_LOOKUPS, never more. */
static const struct {
	long long after_ms; /* since the allowance was last spent */
	unsigned granted;
} allowance_rows[] = {
	{0, 0},
	{1, 0},
	{1000 / API_TOKEN_ABSENT_LOOKUPS - 1, 0},
	{1000 / API_TOKEN_ABSENT_LOOKUPS, 1},
	{3 * 1000 / API_TOKEN_ABSENT_LOOKUPS + 1, 3},
	{1000 - 1, API_TOKEN_ABSENT_LOOKUPS - 1},
	{1000, API_TOKEN_ABSENT_LOOKUPS},
	{60000, API_TOKEN_ABSENT_LOOKUPS},
	{24LL * 3600 * 1000, API_TOKEN_ABSENT_LOOKUPS},
};

static void test_tokens_absent_lookups_are_rationed(void **state)
{
	(void)state;
	assert_int_equal(API_TOKEN_ABSENT_LOOKUPS, 10);
	for (size_t i = 0; i < COUNT(allowance_rows); i++) {
		unsigned got;

		freeze();
		spend_all();
		advance_ms(allowance_rows[i].after_ms);
		got = drain();
		thaw(NULL);
		if (got != allowance_rows[i].granted)
			fail_msg("%lld ms after it was spent: %u lookups, want %u",
				 allowance_rows[i].after_ms, got, allowance_rows[i].granted);
	}
}

/* What a flood asks for, a lookup at every millisecond, is granted at the rate alone. */
static void test_tokens_absent_lookups_under_a_flood(void **state)
{
	unsigned granted = 0;

	(void)state;
	freeze();
	spend_all();
	for (unsigned ms = 0; ms < 20000; ms++) {
		advance_ms(1);
		for (unsigned k = 0; k < 5; k++)
			granted += api_tokens_absent_lookup();
	}
	thaw(NULL);
	assert_int_equal(granted, 20 * API_TOKEN_ABSENT_LOOKUPS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_tokens_test_clock_is_in_effect, thaw),
		cmocka_unit_test(test_tokens_generate_format),
		cmocka_unit_test(test_tokens_hash_is_sha256),
		cmocka_unit_test(test_tokens_cache_miss_when_never_put),
		cmocka_unit_test(test_tokens_cache_hit_is_what_was_put),
		cmocka_unit_test(test_tokens_cache_cuts_a_longer_tenant),
		cmocka_unit_test(test_tokens_cache_put_again_overwrites),
		cmocka_unit_test(test_tokens_cache_same_slot_evicts),
		cmocka_unit_test_teardown(test_tokens_cache_expires_after_cache_ms, thaw),
		cmocka_unit_test_teardown(test_tokens_cache_put_again_renews, thaw),
		cmocka_unit_test_teardown(test_tokens_cache_counts_from_the_read, thaw),
		cmocka_unit_test(test_tokens_cache_concurrent_use),
		cmocka_unit_test(test_tokens_known_set_holds_what_was_loaded),
		cmocka_unit_test_teardown(test_tokens_known_set_is_trusted_until_stale_or_old,
					  thaw),
		cmocka_unit_test(test_tokens_known_set_load_replaces),
		cmocka_unit_test(test_tokens_known_set_concurrent_loads_and_reads),
		cmocka_unit_test_teardown(test_tokens_absent_lookups_are_rationed, thaw),
		cmocka_unit_test_teardown(test_tokens_absent_lookups_under_a_flood, thaw),
	};

	return cmocka_run_group_tests_name("tokens", tests, NULL, NULL);
}
