/*
 * api/wire/offload.c: the threads behind api/wire/offload.h: one FIFO under a
 * mutex. The work is rare and large, so nothing cleverer pays.
 */
#include "api/wire/offload.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct wire_offload {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct wire_offload_job *head, *tail;
	bool stopping;
	unsigned nthreads;
	pthread_t *threads;
};

static void *offload_main(void *arg)
{
	struct wire_offload *o = arg;

	pthread_mutex_lock(&o->lock);
	for (;;) {
		struct wire_offload_job *job;

		while (o->head == NULL && !o->stopping)
			pthread_cond_wait(&o->wake, &o->lock);
		if (o->head == NULL)
			break;
		job = o->head;
		o->head = job->next;
		if (o->head == NULL)
			o->tail = NULL;
		pthread_mutex_unlock(&o->lock);
		job->run(job);
		job->done(job);
		pthread_mutex_lock(&o->lock);
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

enum ledger_err wire_offload_start(unsigned threads, struct wire_offload **out)
{
	struct wire_offload *o = calloc(1, sizeof(*o));

	*out = NULL;
	if (o == NULL || (o->threads = calloc(threads, sizeof(*o->threads))) == NULL) {
		free(o);
		return LEDGER_ERR_NOMEM;
	}
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->wake, NULL);
	for (; o->nthreads < threads; o->nthreads++) {
		if (pthread_create(&o->threads[o->nthreads], NULL, offload_main, o) != 0) {
			wire_offload_stop(o);
			return LEDGER_ERR_INTERNAL;
		}
	}
	*out = o;
	return LEDGER_OK;
}

void wire_offload_submit(struct wire_offload *o, struct wire_offload_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&o->lock);
	if (o->tail != NULL)
		o->tail->next = job;
	else
		o->head = job;
	o->tail = job;
	pthread_cond_signal(&o->wake);
	pthread_mutex_unlock(&o->lock);
}

void wire_offload_stop(struct wire_offload *o)
{
	if (o == NULL)
		return;
	pthread_mutex_lock(&o->lock);
	o->stopping = true;
	pthread_cond_broadcast(&o->wake);
	pthread_mutex_unlock(&o->lock);
	for (unsigned i = 0; i < o->nthreads; i++)
		pthread_join(o->threads[i], NULL);
	pthread_cond_destroy(&o->wake);
	pthread_mutex_destroy(&o->lock);
	free(o->threads);
	free(o);
}
