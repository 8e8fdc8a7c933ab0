/*
 * ledger/common/workers.c: threads that run one job at a time and then
 * wait for the next. A job that would have been a detached thread of its
 * own (a streamed reply's writer, a gateway's run, an attempt's heartbeat)
 * takes an idle thread when there is one, else a new one, so that a thread
 * is not made and ended per request: a clone, a stack handed back with
 * madvise (and the other core's TLB shot down), the scheduler's work.
 *
 * A job has its thread to itself until it returns: jobs never wait for a
 * thread, so a job may block on another (a writer waits for a run). A
 * thread idle for the idle time ends, so the pool follows the most jobs
 * that ran at once lately. Each queued job has an idle thread waiting to
 * take it (queued <= idle, under the lock): that is what lets run() hand
 * a job to the queue instead of making a thread.
 */
#include "ledger/common/workers.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "ledger/common/clock.h"

struct job {
	void (*fn)(void *arg);
	void *arg;
	struct job *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t more = PTHREAD_COND_INITIALIZER; /* a job was queued */
static struct job *head, *tail;
static unsigned queued, idle, threads;
static atomic_uint idle_ms = LEDGER_WORKERS_IDLE_MS;

/* Under the lock: the next queued job, or NULL once the idle time ran out without one. */
static struct job *wait_for_job(void)
{
	/* the clock of PTHREAD_COND_INITIALIZER */
	struct timespec until = ledger_clock_after(CLOCK_REALTIME, atomic_load(&idle_ms));
	struct job *j;

	idle++;
	while (queued == 0) {
		if (pthread_cond_timedwait(&more, &lock, &until) == ETIMEDOUT && queued == 0) {
			idle--;
			return NULL;
		}
	}
	j = head;
	head = j->next;
	if (head == NULL)
		tail = NULL;
	queued--;
	idle--;
	return j;
}

static void *worker_main(void *arg)
{
	struct job *j = arg;

	while (j != NULL) {
		j->fn(j->arg);
		free(j);
		pthread_mutex_lock(&lock);
		j = wait_for_job();
		if (j == NULL)
			threads--;
		pthread_mutex_unlock(&lock);
	}
	return NULL;
}

bool ledger_workers_run(void (*fn)(void *arg), void *arg)
{
	struct job *j = malloc(sizeof(*j));
	pthread_attr_t attr;
	pthread_t thread;
	int rc;

	if (j == NULL)
		return false;
	*j = (struct job){fn, arg, NULL};
	pthread_mutex_lock(&lock);
	if (idle > queued) {
		if (tail != NULL)
			tail->next = j;
		else
			head = j;
		tail = j;
		queued++;
		pthread_cond_signal(&more);
		pthread_mutex_unlock(&lock);
		return true;
	}
	threads++;
	pthread_mutex_unlock(&lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&thread, &attr, worker_main, j);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		pthread_mutex_lock(&lock);
		threads--;
		pthread_mutex_unlock(&lock);
		free(j);
		return false;
	}
	return true;
}

void ledger_workers_set_idle_ms(unsigned ms)
{
	atomic_store(&idle_ms, ms); /* from each thread's next wait */
}

unsigned ledger_workers_threads(void)
{
	unsigned n;

	pthread_mutex_lock(&lock);
	n = threads;
	pthread_mutex_unlock(&lock);
	return n;
}

unsigned ledger_workers_idle(void)
{
	unsigned n;

	pthread_mutex_lock(&lock);
	n = idle - queued;
	pthread_mutex_unlock(&lock);
	return n;
}
