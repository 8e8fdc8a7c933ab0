/*
 * sdk/c/ticker.c: a thread that calls a function at an interval until it
 * is stopped or the function says so (client_int.h: attempt heartbeats and
 * claim renewals). The thread is one of ledger/common/workers.c's, kept for
 * the next ticker once this one ends.
 */
#include "sdk/c/client_int.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "ledger/common/clock.h"
#include "ledger/common/workers.h"

static void ticker_main(void *arg)
{
	struct client_ticker *t = arg;
	struct timespec at;

	pthread_mutex_lock(&t->lock);
	while (!t->stop) {
		at = ledger_clock_after(CLOCK_MONOTONIC, t->interval_ms);
		while (!t->stop && pthread_cond_timedwait(&t->wake, &t->lock, &at) != ETIMEDOUT)
			;
		if (t->stop)
			break;
		pthread_mutex_unlock(&t->lock);
		bool more = t->tick(t->arg);
		pthread_mutex_lock(&t->lock);
		if (!more)
			break;
	}
	/* The last touch of @p t: client_ticker_stop() frees it once it sees this. */
	t->ended = true;
	pthread_cond_broadcast(&t->wake);
	pthread_mutex_unlock(&t->lock);
}

bool client_ticker_start(struct client_ticker *t, uint32_t interval_ms, bool (*tick)(void *),
			 void *arg)
{
	pthread_condattr_t attr;

	memset(t, 0, sizeof(*t));
	t->interval_ms = interval_ms;
	t->tick = tick;
	t->arg = arg;
	pthread_mutex_init(&t->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&t->wake, &attr);
	pthread_condattr_destroy(&attr);
	if (!ledger_workers_run(ticker_main, t)) {
		pthread_cond_destroy(&t->wake);
		pthread_mutex_destroy(&t->lock);
		return false;
	}
	t->running = true;
	return true;
}

void client_ticker_stop(struct client_ticker *t)
{
	if (!t->running)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	pthread_cond_broadcast(&t->wake);
	while (!t->ended)
		pthread_cond_wait(&t->wake, &t->lock);
	pthread_mutex_unlock(&t->lock);
	pthread_cond_destroy(&t->wake);
	pthread_mutex_destroy(&t->lock);
	t->running = false;
}
