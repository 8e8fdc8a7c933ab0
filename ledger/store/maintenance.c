/*
 * ledger/store/maintenance.c: the background thread of ledgerd serve. It runs
 * retention in small batches (each its own short transaction, with a pause
 * between, so that a large backlog never hogs the database) and refreshes
 * the count of unknown outcomes that /metrics reports. Once a second it also
 * looks at its idle connection, so that a database that went away (or came
 * back) is noticed while no call comes.
 */
#include "ledger/store/maintenance.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/common/clock.h"
#include "ledger/common/log.h"
#include "ledger/store/conn.h"
#include "ledger/store/store.h"

#define COUNT_EVERY_MS 15000
#define BATCH_PAUSE_MS 20
#define RECONNECT_MS 1000

struct ledger_maintenance {
	struct ledger_maintenance_config cfg;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stopping;
	struct ledger_store_conn conn; /* the thread's own */
};

static atomic_llong unknown_outstanding = -1;

int64_t ledger_maintenance_unknown(void)
{
	return atomic_load(&unknown_outstanding);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps @p ms unless stopped. @return true when stopping. */
static bool pause_ms(struct ledger_maintenance *m, int64_t ms)
{
	struct timespec until = ledger_clock_after(CLOCK_REALTIME, ms > 0 ? (uint64_t)ms : 0);
	bool stopping;

	pthread_mutex_lock(&m->lock);
	while (!m->stopping && pthread_cond_timedwait(&m->wake, &m->lock, &until) != ETIMEDOUT)
		;
	stopping = m->stopping;
	pthread_mutex_unlock(&m->lock);
	return stopping;
}

/* Runs retention to the end, batch by batch. */
static void gc(struct ledger_maintenance *m)
{
	struct ledger_gc_stats stats;
	bool done = false;
	enum ledger_err rc = LEDGER_OK;

	memset(&stats, 0, sizeof(stats));
	while (!done) {
		rc = ledger_store_gc_batch(&m->conn, m->cfg.retention_ms, m->cfg.tombstone_ms,
					   m->cfg.gc_batch, &stats, &done);
		if (rc != LEDGER_OK || pause_ms(m, BATCH_PAUSE_MS))
			break;
	}
	if (stats.requests > 0 || stats.expired_tombstones > 0) {
		char extra[256];

		snprintf(extra, sizeof(extra),
			 "\"requests\":%lld,\"tool_calls\":%lld,\"tombstones\":%lld,"
			 "\"attempts\":%lld,\"events\":%lld,\"expired_tombstones\":%lld",
			 (long long)stats.requests, (long long)stats.tool_calls,
			 (long long)stats.tombstones, (long long)stats.attempts,
			 (long long)stats.events, (long long)stats.expired_tombstones);
		LEDGER_LOG(LEDGER_LOG_INFO, NULL, extra, "retention removed %lld settled requests",
			   (long long)stats.requests);
	}
	if (rc != LEDGER_OK)
		LOG_WARN("retention stopped early; it resumes at the next pass");
}

static void *run(void *arg)
{
	struct ledger_maintenance *m = arg;
	int64_t next_gc = now_ms(), next_count = now_ms();

	for (;;) {
		int64_t now = now_ms(), wait;

		store_conn_check_idle(&m->conn);
		if (store_conn_ready(&m->conn)) {
			if (now >= next_count) {
				int64_t n = 0;

				if (ledger_store_count_unknown(&m->conn, &n) == LEDGER_OK)
					atomic_store(&unknown_outstanding, n);
				next_count = now + COUNT_EVERY_MS;
			}
			if (now >= next_gc) {
				gc(m);
				next_gc = now_ms() + m->cfg.gc_interval_ms;
			}
			if (ledger_store_stuck(&m->conn)) {
				/*
				 * A wait ran past --db-timeout: the connection goes
				 * (what it sent is not cancelled) and a new one is
				 * made at the next pass, so stopping never waits.
				 */
				store_conn_drop(&m->conn);
			}
		}
		wait = (next_gc < next_count ? next_gc : next_count) - now_ms();
		if (pause_ms(m, wait > 1000 || m->conn.pg == NULL ? 1000 : (wait > 0 ? wait : 1)))
			break;
	}
	store_conn_drop(&m->conn);
	return NULL;
}

enum ledger_err ledger_maintenance_start(const struct ledger_maintenance_config *cfg,
					 struct ledger_maintenance **out)
{
	struct ledger_maintenance *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (m == NULL)
		return LEDGER_ERR_NOMEM;
	m->cfg = *cfg;
	store_conn_init(&m->conn, cfg->database_url, RECONNECT_MS);
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->wake, NULL);
	if (pthread_create(&m->thread, NULL, run, m) != 0) {
		pthread_mutex_destroy(&m->lock);
		pthread_cond_destroy(&m->wake);
		free(m);
		return LEDGER_ERR_INTERNAL;
	}
	*out = m;
	return LEDGER_OK;
}

void ledger_maintenance_stop(struct ledger_maintenance *m)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->stopping = true;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->thread, NULL);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->wake);
	free(m);
}
