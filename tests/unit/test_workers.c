/*
 * tests/unit/test_workers.c: ledger/common/workers.c with real threads:
 * every job runs at once with the others, however many are busy (a job
 * never waits for a thread: each of these blocks until all of them run);
 * threads left idle take the next jobs instead of new ones; idle threads
 * end once their idle time runs out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "ledger/common/clock.h"
#include "ledger/common/workers.h"

#define JOBS 8
#define WAIT_MS 10000

/* A gate every job of a round waits at until all of them arrived. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static unsigned arrived, left;
static pthread_t ran_on[3 * JOBS];

/* Waits under the lock until *@p n reaches @p want; false after WAIT_MS. */
static bool wait_count(const unsigned *n, unsigned want)
{
	struct timespec at = ledger_clock_after(CLOCK_REALTIME, WAIT_MS);
	bool ok = true;

	while (*n < want && ok)
		ok = pthread_cond_timedwait(&changed, &lock, &at) == 0 || *n >= want;
	return *n >= want;
}

/* A job: notes its thread, waits for the whole round, leaves. */
static void gate_job(void *arg)
{
	uintptr_t i = (uintptr_t)arg;

	pthread_mutex_lock(&lock);
	ran_on[i] = pthread_self();
	arrived++;
	pthread_cond_broadcast(&changed);
	(void)wait_count(&arrived, (unsigned)(i / JOBS + 1) * JOBS);
	left++;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

/* Runs jobs @p first .. @p first + JOBS - 1; true once all of them ran at once and left. */
static bool round_of(unsigned first)
{
	bool ok;

	for (unsigned i = first; i < first + JOBS; i++)
		assert_true(ledger_workers_run(gate_job, (void *)(uintptr_t)i));
	pthread_mutex_lock(&lock);
	ok = wait_count(&left, first + JOBS);
	pthread_mutex_unlock(&lock);
	return ok;
}

/* Polls until @p count() is @p want; false after WAIT_MS. */
static bool becomes(unsigned (*count)(void), unsigned want)
{
	for (unsigned ms = 0; ms < WAIT_MS; ms += 10) {
		if (count() == want)
			return true;
		nanosleep(&(struct timespec){0, 10000000L}, NULL);
	}
	return false;
}

static void test_workers_run_every_job_at_once_then_reuse_their_threads(void **state)
{
	(void)state;
	assert_int_equal(ledger_workers_threads(), 0);
	/* Eight jobs, each blocked until all eight run: none waited for a thread. */
	assert_true(round_of(0));
	assert_int_equal(ledger_workers_threads(), JOBS);
	/* The next eight take the eight threads once idle: no new one. */
	assert_true(becomes(ledger_workers_idle, JOBS));
	assert_true(round_of(JOBS));
	assert_int_equal(ledger_workers_threads(), JOBS);
	for (unsigned i = JOBS; i < 2 * JOBS; i++) {
		bool seen = false;

		for (unsigned j = 0; j < JOBS; j++)
			seen = seen || pthread_equal(ran_on[i], ran_on[j]);
		assert_true(seen);
	}
}

static void note_job(void *arg)
{
	pthread_mutex_lock(&lock);
	(*(unsigned *)arg)++;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static void test_workers_idle_threads_end(void **state)
{
	unsigned done = 0;

	(void)state;
	assert_true(becomes(ledger_workers_idle, JOBS));
	ledger_workers_set_idle_ms(50);
	/* A round on the eight idle threads: each then waits 50 ms, not 30 s, and ends. */
	assert_true(round_of(2 * JOBS));
	assert_true(becomes(ledger_workers_threads, 0));
	/* And a job after that gets a new thread, which ends too. */
	assert_true(ledger_workers_run(note_job, &done));
	pthread_mutex_lock(&lock);
	assert_true(wait_count(&done, 1));
	pthread_mutex_unlock(&lock);
	assert_true(becomes(ledger_workers_threads, 0));
	ledger_workers_set_idle_ms(LEDGER_WORKERS_IDLE_MS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_workers_run_every_job_at_once_then_reuse_their_threads),
		cmocka_unit_test(test_workers_idle_threads_end),
	};

	return cmocka_run_group_tests_name("workers", tests, NULL, NULL);
}
