/*
 * tests/fuzz/store_stub.c: the store as the HTTP fuzzer sees it. The
 * server runs in the fuzzer's process with every api/ file but no
 * database: each operation is answered at once, as a database that cannot
 * be reached answers (503), and a token lookup finds nothing (401). What
 * the fuzzer reaches is everything before the store: the wire, routing,
 * authentication, the query, every handler's parse() and the replies,
 * and the spans of a traced call: each operation says it ran in a
 * transaction of its own, so that its database span is made too.
 */
#include <string.h>
#include <time.h>

#include "ledger/common/trace.h"
#include "ledger/store/job.h"
#include "ledger/store/maintenance.h"
#include "ledger/store/migrate.h"
#include "ledger/store/replay_cache.h"
#include "ledger/store/store.h"

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ledger_store_submit(struct ledger_store *store, struct ledger_job *job)
{
	(void)store;
	memset(&job->res, 0, sizeof(job->res));
	job->res.began_ms = now_ms();
	if (job->op.kind == LEDGER_STORE_TOKEN_LOOKUP)
		job->res.rc = LEDGER_OK; /* found stays false: an unknown token */
	else
		job->res.rc = LEDGER_ERR_UNAVAILABLE;
	if (job->timed) {
		job->tx_began_ns = ledger_trace_now_ns();
		job->tx_ended_ns = job->tx_began_ns + 1000;
		job->tx_batch = 1;
	}
	job->done(job);
}

bool ledger_store_replay(struct ledger_job *job)
{
	(void)job;
	return false;
}

void ledger_store_result_clear(struct ledger_job *job)
{
	memset(&job->res, 0, sizeof(job->res));
}

size_t ledger_store_queue_depth(struct ledger_store *store)
{
	(void)store;
	return 0;
}

unsigned ledger_store_stalled(struct ledger_store *store)
{
	(void)store;
	return 0;
}

uint64_t ledger_store_errors(enum ledger_err kind)
{
	(void)kind;
	return 0;
}

uint64_t ledger_store_timeouts(void)
{
	return 0;
}

bool ledger_store_reachable(void)
{
	return true;
}

uint64_t ledger_store_shed_count(enum ledger_store_shed why)
{
	(void)why;
	return 0;
}

void ledger_store_batch_stats(uint64_t *batches, uint64_t *calls)
{
	*batches = *calls = 0;
}

const unsigned ledger_store_batch_bounds[LEDGER_STORE_BATCH_BUCKETS - 1] = {2, 4, 8, 16, 32, 64};

void ledger_store_batch_sizes(uint64_t counts[LEDGER_STORE_BATCH_BUCKETS])
{
	memset(counts, 0, LEDGER_STORE_BATCH_BUCKETS * sizeof(*counts));
}

uint64_t ledger_store_round_trips(void)
{
	return 0;
}

int64_t ledger_maintenance_unknown(void)
{
	return -1;
}

void ledger_replay_cache_stats(size_t *entries, size_t *bytes)
{
	*entries = *bytes = 0;
}

/* What ledger/store/migrate.c reads: one migration, so the schema expected is 3. */
const struct ledger_migration ledger_migrations[] = {{3, "003_stub.sql", "", 0}};
const unsigned ledger_migration_count = 1;
