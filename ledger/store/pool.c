/*
 * ledger/store/pool.c: the store's workers. Each owns one connection and
 * takes jobs from its lane's FIFO queue; when several jobs wait, a worker
 * offers each a place in one batch (ledger/store/batch.c) and commits their
 * fast paths together, then runs the rest alone. The HTTP layer never
 * waits on the database: it queues a job and the worker resumes it.
 *
 * Two lanes: the calls' (--workers workers) and the readiness probe's (one
 * worker), so /readyz never waits behind calls. Every job is answered by
 * its deadline (queued + --db-timeout): by its worker, or by the reaper
 * when it is still queued then; a lane whose queue is full, or whose
 * workers all wait on a database that stopped answering, answers at once.
 */
#include "ledger/store/job.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/common/log.h"
#include "ledger/store/step.h"

struct lane {
	const char *name;
	pthread_cond_t wake;            /* a job was queued, or the store stops */
	struct ledger_job *head, *tail; /* FIFO of waiting jobs; deadlines in order */
	size_t depth;                   /* under the store's lock */
	size_t max_depth;
	unsigned nworkers;
	unsigned started; /* workers running, to be joined */
	unsigned batch_max;
	atomic_uint stalled; /* workers settling a connection that stopped answering */
	pthread_t *threads;
	struct ledger_store_conn *conns; /* one per worker */
};

enum {
	LANE_CALLS,
	LANE_PROBE,
	NLANES
};

struct ledger_store {
	pthread_mutex_t lock;
	pthread_cond_t reap; /* the reaper's: a queue's head changed, or the store stops */
	bool stopping;
	bool reaper_started;
	pthread_t reaper;
	atomic_size_t depth; /* of the calls' lane, for /metrics without the lock */
	struct lane lanes[NLANES];
};

static atomic_ullong shed[LEDGER_STORE_SHED_KINDS];

uint64_t ledger_store_shed_count(enum ledger_store_shed why)
{
	return (unsigned)why < LEDGER_STORE_SHED_KINDS ? atomic_load(&shed[why]) : 0;
}

/* Answers @p job 503 without the database, on the calling thread. */
static void answer_unavailable(struct ledger_job *job, enum ledger_store_shed why)
{
	static const char *const said[LEDGER_STORE_SHED_KINDS] = {
		"the queue of database calls is full",
		"every database worker waits on a database that stopped answering",
		"the call waited for a database worker past --db-timeout",
	};

	atomic_fetch_add(&shed[why], 1);
	memset(&job->res, 0, sizeof(job->res));
	job->res.rc = LEDGER_ERR_UNAVAILABLE;
	job->res.began_ms = store_conn_now_ms();
	ledger_log_context_set(&job->ids);
	LOG_DEBUG("answered 503 without the database: %s", said[why]);
	ledger_log_context_set(NULL);
	job->done(job);
}

static struct lane *lane_of(struct ledger_store *s, const struct ledger_job *job)
{
	return &s->lanes[job->op.kind == LEDGER_STORE_SCHEMA_VERSION ? LANE_PROBE : LANE_CALLS];
}

/* --- the workers --- */

struct worker_arg {
	struct ledger_store *store;
	struct lane *lane;
	struct ledger_store_conn *conn;
};

/*
 * Takes the first waiting job (waiting for one if there is none) and up to
 * @p max - 1 more that are already there: a batch never waits to fill.
 * @return how many, 0 when the store stops
 */
static size_t queue_pop(struct ledger_store *s, struct lane *l, struct ledger_job **jobs,
			size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&s->lock);
	while (l->head == NULL && !s->stopping)
		pthread_cond_wait(&l->wake, &s->lock);
	while (l->head != NULL && n < max) {
		jobs[n++] = l->head;
		l->head = l->head->next;
	}
	if (l->head == NULL)
		l->tail = NULL;
	l->depth -= n;
	if (l == &s->lanes[LANE_CALLS])
		atomic_store(&s->depth, l->depth);
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* The readiness probe answers 503 while every call's worker is stalled. */
static void probe_sees_stalled_calls(struct ledger_store *s, struct ledger_job *job)
{
	struct lane *calls = &s->lanes[LANE_CALLS];

	if (job->res.rc == LEDGER_OK && atomic_load(&calls->stalled) >= calls->nworkers)
		job->res.rc = LEDGER_ERR_UNAVAILABLE;
}

static void *worker_main(void *arg)
{
	struct ledger_store *s = ((struct worker_arg *)arg)->store;
	struct lane *l = ((struct worker_arg *)arg)->lane;
	struct ledger_store_conn *conn = ((struct worker_arg *)arg)->conn;
	struct ledger_job **jobs = calloc(l->batch_max, sizeof(*jobs));
	struct ledger_job **joined = calloc(l->batch_max, sizeof(*joined));
	struct ledger_batch_op *ops = calloc(l->batch_max, sizeof(*ops));
	size_t n;

	free(arg);
	if (jobs == NULL || joined == NULL || ops == NULL) {
		LOG_ERROR("out of memory starting a database worker");
		abort();
	}
	(void)store_conn_ready(conn); /* connect before the first call needs it */
	/* Each operation connects again if it must, with its call's ids in the log. */
	while ((n = queue_pop(s, l, jobs, l->batch_max)) > 0) {
		if (n > 1 && ledger_store_fast_paths()) {
			ledger_store_execute_many(conn, jobs, n, ops, joined);
		} else {
			/* A batch is made of fast paths: without them, each job runs alone. */
			for (size_t i = 0; i < n; i++) {
				ledger_log_context_set(&jobs[i]->ids);
				ledger_store_execute(conn, jobs[i]);
				ledger_log_context_set(NULL);
				if (l == &s->lanes[LANE_PROBE])
					probe_sees_stalled_calls(s, jobs[i]);
				jobs[i]->done(jobs[i]);
			}
		}
		if (ledger_store_stuck(conn) && l == &s->lanes[LANE_PROBE]) {
			/*
			 * A readiness check is a read: it owes nothing to settle. Its
			 * connection goes at once, and the next check connects to
			 * whichever host answers, not after a host that vanished.
			 */
			store_conn_drop(conn);
		} else if (ledger_store_stuck(conn)) {
			/* Its calls were answered 503; the lane's others take the next ones. */
			atomic_fetch_add(&l->stalled, 1);
			ledger_store_settle(conn);
			atomic_fetch_sub(&l->stalled, 1);
		}
	}
	store_conn_drop(conn);
	free(jobs);
	free(joined);
	free(ops);
	return NULL;
}

/* --- the reaper: no job waits in a queue past its deadline --- */

static struct timespec abs_monotonic(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	return ts;
}

static void *reaper_main(void *arg)
{
	struct ledger_store *s = arg;

	pthread_mutex_lock(&s->lock);
	while (!s->stopping) {
		int64_t now = store_conn_now_ms(), next = INT64_MAX;
		struct ledger_job *late = NULL, **end = &late;

		for (int i = 0; i < NLANES; i++) {
			struct lane *l = &s->lanes[i];

			while (l->head != NULL && l->head->deadline_ms != 0 &&
			       l->head->deadline_ms <= now) {
				*end = l->head;
				end = &l->head->next;
				l->head = l->head->next;
				l->depth--;
			}
			*end = NULL;
			if (l->head == NULL)
				l->tail = NULL;
			if (l->head != NULL && l->head->deadline_ms != 0 &&
			    l->head->deadline_ms < next)
				next = l->head->deadline_ms;
		}
		atomic_store(&s->depth, s->lanes[LANE_CALLS].depth);
		if (late != NULL) {
			pthread_mutex_unlock(&s->lock);
			while (late != NULL) {
				struct ledger_job *job = late;

				late = late->next;
				answer_unavailable(job, LEDGER_STORE_SHED_EXPIRED);
			}
			pthread_mutex_lock(&s->lock);
			continue;
		}
		if (next == INT64_MAX) {
			pthread_cond_wait(&s->reap, &s->lock);
		} else {
			struct timespec until = abs_monotonic(next);

			(void)pthread_cond_timedwait(&s->reap, &s->lock, &until);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* --- the store --- */

static enum ledger_err lane_start(struct ledger_store *s, struct lane *l,
				  const struct ledger_store_config *cfg)
{
	pthread_cond_init(&l->wake, NULL);
	l->threads = calloc(l->nworkers, sizeof(*l->threads));
	l->conns = calloc(l->nworkers, sizeof(*l->conns));
	if (l->threads == NULL || l->conns == NULL)
		return LEDGER_ERR_NOMEM;
	atomic_init(&l->stalled, 0);
	for (unsigned i = 0; i < l->nworkers; i++) {
		struct worker_arg *arg = malloc(sizeof(*arg));

		if (arg == NULL)
			return LEDGER_ERR_NOMEM;
		store_conn_init(&l->conns[i], cfg->database_url, cfg->reconnect_ms);
		arg->store = s;
		arg->lane = l;
		arg->conn = &l->conns[i];
		if (pthread_create(&l->threads[i], NULL, worker_main, arg) != 0) {
			free(arg);
			return LEDGER_ERR_INTERNAL;
		}
		l->started++;
	}
	return LEDGER_OK;
}

enum ledger_err ledger_store_open(const struct ledger_store_config *cfg, struct ledger_store **out)
{
	struct ledger_store *s = calloc(1, sizeof(*s));
	pthread_condattr_t attr;
	enum ledger_err rc = LEDGER_OK;

	*out = NULL;
	if (s == NULL)
		return LEDGER_ERR_NOMEM;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* deadlines are monotonic */
	pthread_cond_init(&s->reap, &attr);
	pthread_condattr_destroy(&attr);
	atomic_init(&s->depth, 0);
	s->lanes[LANE_CALLS] = (struct lane){
		.name = "calls",
		.nworkers = cfg->workers,
		.batch_max = cfg->batch_max > 0 ? cfg->batch_max : 1,
		.max_depth = cfg->queue_max > 0 ? cfg->queue_max : SIZE_MAX,
	};
	/* Probes are cheap and few: a small queue, one at a time. */
	s->lanes[LANE_PROBE] =
		(struct lane){.name = "probe", .nworkers = 1, .batch_max = 1, .max_depth = 64};
	for (int i = 0; i < NLANES && rc == LEDGER_OK; i++)
		rc = lane_start(s, &s->lanes[i], cfg);
	if (rc == LEDGER_OK && pthread_create(&s->reaper, NULL, reaper_main, s) != 0)
		rc = LEDGER_ERR_INTERNAL;
	s->reaper_started = rc == LEDGER_OK;
	if (rc != LEDGER_OK) {
		ledger_store_close(s);
		return rc;
	}
	*out = s;
	return LEDGER_OK;
}

void ledger_store_submit(struct ledger_store *s, struct ledger_job *job)
{
	struct lane *l = lane_of(s, job);
	int64_t bound = ledger_store_timeout();
	enum ledger_store_shed refused = LEDGER_STORE_SHED_QUEUE_FULL;
	bool taken = false;

	job->next = NULL;
	job->deadline_ms = bound > 0 ? store_conn_now_ms() + bound : 0;
	job->tx_began_ns = job->tx_ended_ns = 0; /* none yet: it may be shed */
	job->tx_batch = 0;
	pthread_mutex_lock(&s->lock);
	if (atomic_load(&l->stalled) >= l->nworkers) {
		refused = LEDGER_STORE_SHED_STALLED;
	} else if (l->depth < l->max_depth) {
		if (l->tail != NULL)
			l->tail->next = job;
		else
			l->head = job;
		if (l->head == job)
			pthread_cond_signal(&s->reap);
		l->tail = job;
		l->depth++;
		if (l == &s->lanes[LANE_CALLS])
			atomic_store(&s->depth, l->depth);
		pthread_cond_signal(&l->wake);
		taken = true;
	}
	pthread_mutex_unlock(&s->lock);
	if (!taken)
		answer_unavailable(job, refused);
}

size_t ledger_store_queue_depth(struct ledger_store *s)
{
	return atomic_load(&s->depth);
}

unsigned ledger_store_stalled(struct ledger_store *s)
{
	return atomic_load(&s->lanes[LANE_CALLS].stalled);
}

void ledger_store_close(struct ledger_store *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	for (int i = 0; i < NLANES; i++)
		pthread_cond_broadcast(&s->lanes[i].wake);
	pthread_cond_broadcast(&s->reap);
	pthread_mutex_unlock(&s->lock);
	for (int i = 0; i < NLANES; i++) {
		struct lane *l = &s->lanes[i];

		for (unsigned k = 0; k < l->started; k++)
			pthread_join(l->threads[k], NULL);
		pthread_cond_destroy(&l->wake);
		free(l->threads);
		free(l->conns);
	}
	if (s->reaper_started)
		pthread_join(s->reaper, NULL);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->reap);
	free(s);
}
