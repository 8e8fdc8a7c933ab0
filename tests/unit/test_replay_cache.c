/*
 * tests/unit/test_replay_cache.c: unit tests of the replay cache
 * (ledger/store/replay_cache.c): what it serves, what it must never serve (a
 * stale stamp, a call near retention, another key), and that it keeps to
 * its byte budget, also under concurrent use.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/store/replay_cache.h"

#define DAY_MS (24LL * 3600 * 1000)
#define WEEK_MS (7 * DAY_MS)

/* A settled call completed @p age_ms ago, with @p result (JSON text). */
static void settled(struct ledger_call *call, const char *result, int64_t age_ms)
{
	time_t t = time(NULL) - (time_t)(age_ms / 1000);
	struct tm tm;

	memset(call, 0, sizeof(*call));
	call->state = LEDGER_CALL_SUCCEEDED;
	snprintf(call->tool, sizeof(call->tool), "email.send");
	memset(call->args_sha256, 'a', LEDGER_SHA256_HEX);
	call->tool_dedupes = true;
	call->result = (char *)result;
	call->result_len = strlen(result);
	gmtime_r(&t, &tm);
	strftime(call->completed_at, sizeof(call->completed_at), "%Y-%m-%dT%H:%M:%S.123Z", &tm);
}

static int teardown(void **state)
{
	(void)state;
	ledger_replay_cache_free();
	return 0;
}

static void test_a_hit_is_what_was_put(void **state)
{
	struct ledger_call in, out;

	(void)state;
	assert_true(ledger_replay_cache_init(1 << 20, WEEK_MS));
	settled(&in, "{\"id\":\"m-1\"}", 0);
	assert_false(ledger_replay_cache_get("t1", "r1", "c1", &out));
	ledger_replay_cache_put("t1", "r1", "c1", &in, ledger_replay_cache_stamp("t1", "r1"));
	assert_true(ledger_replay_cache_get("t1", "r1", "c1", &out));
	assert_int_equal(out.state, LEDGER_CALL_SUCCEEDED);
	assert_string_equal(out.tool, "email.send");
	assert_string_equal(out.args_sha256, in.args_sha256);
	assert_true(out.tool_dedupes);
	assert_string_equal(out.completed_at, in.completed_at);
	assert_int_equal(out.result_len, in.result_len);
	assert_memory_equal(out.result, in.result, in.result_len);
	ledger_call_clear(&out);
	/* Another tenant, request or call is another key. */
	assert_false(ledger_replay_cache_get("t2", "r1", "c1", &out));
	assert_false(ledger_replay_cache_get("t1", "r2", "c1", &out));
	assert_false(ledger_replay_cache_get("t1", "r1", "c2", &out));
	/* Keys are not confused by where one string ends and the next starts. */
	assert_false(ledger_replay_cache_get("t1r", "1", "c1", &out));
}

static void test_an_invalidated_request_is_not_served(void **state)
{
	struct ledger_call in, out;
	uint32_t before;

	(void)state;
	assert_true(ledger_replay_cache_init(1 << 20, WEEK_MS));
	settled(&in, "1", 0);
	ledger_replay_cache_put("t1", "r1", "c1", &in, ledger_replay_cache_stamp("t1", "r1"));
	ledger_replay_cache_put("t1", "r2", "c1", &in, ledger_replay_cache_stamp("t1", "r2"));
	ledger_replay_cache_invalidate("t1", "r1");
	assert_false(ledger_replay_cache_get("t1", "r1", "c1", &out));
	assert_true(ledger_replay_cache_get("t1", "r2", "c1", &out)); /* another stamp */
	ledger_call_clear(&out);

	/* A read that began before the attempt was created is never served. */
	before = ledger_replay_cache_stamp("t1", "r3");
	ledger_replay_cache_invalidate("t1", "r3");
	ledger_replay_cache_put("t1", "r3", "c1", &in, before);
	assert_false(ledger_replay_cache_get("t1", "r3", "c1", &out));
}

static void test_nothing_near_retention_is_kept(void **state)
{
	struct ledger_call in, out;

	(void)state;
	assert_true(ledger_replay_cache_init(1 << 20, WEEK_MS));
	/* Removable within two minutes (a TTL and the clock margin): not kept. */
	settled(&in, "1", WEEK_MS - 100 * 1000);
	ledger_replay_cache_put("t1", "old", "c1", &in, ledger_replay_cache_stamp("t1", "old"));
	assert_false(ledger_replay_cache_get("t1", "old", "c1", &out));
	settled(&in, "1", WEEK_MS - 10 * 60 * 1000);
	ledger_replay_cache_put("t1", "older", "c1", &in, ledger_replay_cache_stamp("t1", "older"));
	assert_true(ledger_replay_cache_get("t1", "older", "c1", &out));
	ledger_call_clear(&out);
	/* A completion time that cannot be read is not trusted. */
	settled(&in, "1", 0);
	snprintf(in.completed_at, sizeof(in.completed_at), "yesterday");
	ledger_replay_cache_put("t1", "bad", "c1", &in, ledger_replay_cache_stamp("t1", "bad"));
	assert_false(ledger_replay_cache_get("t1", "bad", "c1", &out));
}

static void test_only_settled_calls_are_kept(void **state)
{
	struct ledger_call in, out;

	(void)state;
	assert_true(ledger_replay_cache_init(1 << 20, WEEK_MS));
	settled(&in, "1", 0);
	in.state = LEDGER_CALL_IN_PROGRESS;
	ledger_replay_cache_put("t1", "r1", "c1", &in, ledger_replay_cache_stamp("t1", "r1"));
	assert_false(ledger_replay_cache_get("t1", "r1", "c1", &out));
	in.state = LEDGER_CALL_FAILED;
	ledger_replay_cache_put("t1", "r1", "c1", &in, ledger_replay_cache_stamp("t1", "r1"));
	assert_true(ledger_replay_cache_get("t1", "r1", "c1", &out));
	assert_int_equal(out.state, LEDGER_CALL_FAILED);
	ledger_call_clear(&out);
}

/*
 * A call whose result was not kept is kept with its digest, and served as
 * such: the claim it answers is told result_not_kept, never given a result.
 */
static void test_a_result_not_kept_is_served_as_its_digest(void **state)
{
	struct ledger_call in, out;

	(void)state;
	assert_true(ledger_replay_cache_init(1 << 20, WEEK_MS));
	settled(&in, "", 0);
	in.result = NULL;
	in.result_not_kept = true;
	in.result_digest.bytes = 2097152;
	memset(in.result_digest.sha256, 'b', LEDGER_SHA256_HEX);
	ledger_replay_cache_put("t1", "r1", "c1", &in, ledger_replay_cache_stamp("t1", "r1"));
	assert_true(ledger_replay_cache_get("t1", "r1", "c1", &out));
	assert_int_equal(out.state, LEDGER_CALL_SUCCEEDED);
	assert_true(out.result_not_kept);
	assert_null(out.result);
	assert_int_equal(out.result_len, 0);
	assert_int_equal(out.result_digest.bytes, 2097152);
	assert_string_equal(out.result_digest.sha256, in.result_digest.sha256);
	assert_string_equal(out.completed_at, in.completed_at);
	ledger_call_clear(&out);
	/* A kept result put over it is served whole again, with no digest. */
	settled(&in, "[1]", 0);
	ledger_replay_cache_put("t1", "r1", "c1", &in, ledger_replay_cache_stamp("t1", "r1"));
	assert_true(ledger_replay_cache_get("t1", "r1", "c1", &out));
	assert_false(out.result_not_kept);
	assert_memory_equal(out.result, "[1]", 3);
	ledger_call_clear(&out);
}

static void test_off_keeps_nothing(void **state)
{
	struct ledger_call in, out;
	size_t entries, bytes;

	(void)state;
	assert_true(ledger_replay_cache_init(0, WEEK_MS));
	settled(&in, "1", 0);
	ledger_replay_cache_put("t1", "r1", "c1", &in, ledger_replay_cache_stamp("t1", "r1"));
	assert_false(ledger_replay_cache_get("t1", "r1", "c1", &out));
	ledger_replay_cache_stats(&entries, &bytes);
	assert_int_equal(entries, 0);
	assert_int_equal(bytes, 0);
}

static void test_the_budget_holds(void **state)
{
	const size_t budget = 1 << 20;
	char result[1001], rid[32];
	struct ledger_call in, out;
	size_t entries, bytes, found = 0;

	(void)state;
	assert_true(ledger_replay_cache_init(budget, WEEK_MS));
	memset(result, '7', sizeof(result) - 1);
	result[sizeof(result) - 1] = '\0';
	settled(&in, result, 0);
	for (int i = 0; i < 20000; i++) {
		snprintf(rid, sizeof(rid), "r%d", i);
		ledger_replay_cache_put("t1", rid, "c1", &in, ledger_replay_cache_stamp("t1", rid));
	}
	ledger_replay_cache_stats(&entries, &bytes);
	assert_true(bytes <= budget);
	assert_true(bytes > budget / 2); /* and uses it */
	assert_true(entries > 500 && entries < 1100);
	for (int i = 20000 - 100; i < 20000; i++) {
		snprintf(rid, sizeof(rid), "r%d", i);
		if (ledger_replay_cache_get("t1", rid, "c1", &out))
			found++;
		ledger_call_clear(&out);
	}
	assert_true(found >= 90); /* the newest stay */

	/* A result larger than a set's share is not kept, and evicts nothing. */
	{
		char *big = malloc(64 * 1024);

		assert_non_null(big);
		memset(big, '1', 64 * 1024 - 1);
		big[64 * 1024 - 1] = '\0';
		settled(&in, big, 0);
		ledger_replay_cache_put("t1", "big", "c1", &in,
					ledger_replay_cache_stamp("t1", "big"));
		assert_false(ledger_replay_cache_get("t1", "big", "c1", &out));
		ledger_replay_cache_stats(&entries, &bytes);
		assert_true(bytes <= budget);
		free(big);
	}
}

/* Threads put, get and invalidate over shared keys; every hit is whole. */
static void *churn(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	char rid[32], cid[32], result[64];
	struct ledger_call in, out;

	for (int i = 0; i < 50000; i++) {
		int k = (int)(rand_r(&seed) % 2000);

		snprintf(rid, sizeof(rid), "r%d", k % 500);
		snprintf(cid, sizeof(cid), "c%d", k);
		switch (rand_r(&seed) % 8) {
		case 0:
			ledger_replay_cache_invalidate("t1", rid);
			break;
		case 1:
		case 2:
			snprintf(result, sizeof(result), "{\"k\":%d}", k);
			settled(&in, result, 0);
			ledger_replay_cache_put("t1", rid, cid, &in,
						ledger_replay_cache_stamp("t1", rid));
			break;
		default:
			if (ledger_replay_cache_get("t1", rid, cid, &out)) {
				snprintf(result, sizeof(result), "{\"k\":%d}", k);
				if (strcmp(out.result, result) != 0)
					abort();
			}
			ledger_call_clear(&out);
		}
	}
	return NULL;
}

static void test_concurrent_use(void **state)
{
	pthread_t t[4];
	size_t entries, bytes;

	(void)state;
	assert_true(ledger_replay_cache_init(256 * 1024, WEEK_MS));
	for (uintptr_t i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(i + 1)), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	ledger_replay_cache_stats(&entries, &bytes);
	assert_true(bytes <= 256 * 1024);
	assert_true(entries > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_a_hit_is_what_was_put, teardown),
		cmocka_unit_test_teardown(test_an_invalidated_request_is_not_served, teardown),
		cmocka_unit_test_teardown(test_nothing_near_retention_is_kept, teardown),
		cmocka_unit_test_teardown(test_only_settled_calls_are_kept, teardown),
		cmocka_unit_test_teardown(test_a_result_not_kept_is_served_as_its_digest, teardown),
		cmocka_unit_test_teardown(test_off_keeps_nothing, teardown),
		cmocka_unit_test_teardown(test_the_budget_holds, teardown),
		cmocka_unit_test_teardown(test_concurrent_use, teardown),
	};

	return cmocka_run_group_tests_name("replay_cache", tests, NULL, NULL);
}
