/*
 * ledger/store/pool.c: the store's workers. Each owns one connection and
 * takes jobs from one FIFO queue; when several jobs wait, a worker offers
 * each a place in one batch (ledger/store/batch.c) and commits their fast
 * paths together, then runs the rest alone. The HTTP layer never waits on
 * the database: it queues a job and the worker resumes it.
 */
#include "ledger/store/job.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/log.h"
#include "ledger/store/step.h"

struct ledger_store {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct ledger_job *head, *tail; /* FIFO of waiting jobs */
	atomic_size_t depth;
	bool stopping;
	unsigned nworkers;
	unsigned batch_max;
	pthread_t *threads;
	struct ledger_store_conn *conns; /* one per worker */
};

/* --- the pool --- */

struct worker_arg {
	struct ledger_store *store;
	struct ledger_store_conn *conn;
};

/*
 * Takes the first waiting job (waiting for one if there is none) and up to
 * @p max - 1 more that are already there: a batch never waits to fill.
 * @return how many, 0 when the store stops
 */
static size_t queue_pop(struct ledger_store *s, struct ledger_job **jobs, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&s->lock);
	while (s->head == NULL && !s->stopping)
		pthread_cond_wait(&s->wake, &s->lock);
	while (s->head != NULL && n < max) {
		jobs[n++] = s->head;
		s->head = s->head->next;
	}
	if (s->head == NULL)
		s->tail = NULL;
	atomic_fetch_sub(&s->depth, n);
	pthread_mutex_unlock(&s->lock);
	return n;
}

static void *worker_main(void *arg)
{
	struct ledger_store *s = ((struct worker_arg *)arg)->store;
	struct ledger_store_conn *conn = ((struct worker_arg *)arg)->conn;
	struct ledger_job **jobs = calloc(s->batch_max, sizeof(*jobs));
	struct ledger_job **joined = calloc(s->batch_max, sizeof(*joined));
	struct ledger_batch_op *ops = calloc(s->batch_max, sizeof(*ops));
	size_t n;

	free(arg);
	if (jobs == NULL || joined == NULL || ops == NULL) {
		LOG_ERROR("out of memory starting a database worker");
		abort();
	}
	(void)store_conn_ready(conn); /* connect before the first call needs it */
	/* Each operation connects again if it must, with its call's ids in the log. */
	while ((n = queue_pop(s, jobs, s->batch_max)) > 0) {
		if (n > 1 && ledger_store_fast_paths()) {
			ledger_store_execute_many(conn, jobs, n, ops, joined);
			continue;
		}
		/* A batch is made of fast paths: without them, each job runs alone. */
		for (size_t i = 0; i < n; i++) {
			ledger_log_context_set(&jobs[i]->ids);
			ledger_store_execute(conn, jobs[i]);
			ledger_log_context_set(NULL);
			jobs[i]->done(jobs[i]);
		}
	}
	store_conn_drop(conn);
	free(jobs);
	free(joined);
	free(ops);
	return NULL;
}

enum ledger_err ledger_store_open(const struct ledger_store_config *cfg, struct ledger_store **out)
{
	struct ledger_store *s = calloc(1, sizeof(*s));
	enum ledger_err rc = LEDGER_ERR_NOMEM;

	*out = NULL;
	if (s == NULL)
		return LEDGER_ERR_NOMEM;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, NULL);
	atomic_init(&s->depth, 0);
	s->batch_max = cfg->batch_max > 0 ? cfg->batch_max : 1;
	s->threads = calloc(cfg->workers, sizeof(*s->threads));
	s->conns = calloc(cfg->workers, sizeof(*s->conns));
	if (s->threads == NULL || s->conns == NULL)
		goto out;
	for (unsigned i = 0; i < cfg->workers; i++) {
		struct worker_arg *arg = malloc(sizeof(*arg));

		if (arg == NULL)
			goto out;
		store_conn_init(&s->conns[i], cfg->database_url, cfg->reconnect_ms);
		arg->store = s;
		arg->conn = &s->conns[i];
		if (pthread_create(&s->threads[i], NULL, worker_main, arg) != 0) {
			free(arg);
			rc = LEDGER_ERR_INTERNAL;
			goto out;
		}
		s->nworkers++;
	}
	*out = s;
	return LEDGER_OK;
out:
	ledger_store_close(s);
	return rc;
}

void ledger_store_submit(struct ledger_store *s, struct ledger_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&s->lock);
	if (s->tail != NULL)
		s->tail->next = job;
	else
		s->head = job;
	s->tail = job;
	atomic_fetch_add(&s->depth, 1);
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
}

size_t ledger_store_queue_depth(struct ledger_store *s)
{
	return atomic_load(&s->depth);
}

void ledger_store_close(struct ledger_store *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_broadcast(&s->wake);
	pthread_mutex_unlock(&s->lock);
	for (unsigned i = 0; i < s->nworkers; i++)
		pthread_join(s->threads[i], NULL);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->wake);
	free(s->threads);
	free(s->conns);
	free(s);
}
