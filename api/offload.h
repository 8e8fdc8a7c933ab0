/*
 * api/offload.h: a few threads for the CPU work of a call that could hold
 * a polling thread too long (parsing and fingerprinting a large body), so
 * that one caller's big body never delays another's small one.
 */
#ifndef API_OFFLOAD_H
#define API_OFFLOAD_H

#include "ledger/common/err.h"

struct api_offload;

struct api_offload_job {
	void (*run)(struct api_offload_job *job);  /* on an offload thread */
	void (*done)(struct api_offload_job *job); /* then, on the same thread */
	struct api_offload_job *next;
};

LEDGER_MUSTCHECK enum ledger_err api_offload_start(unsigned threads, struct api_offload **out);

/** Queues @p job; run() and done() follow on an offload thread. Thread-safe. */
void api_offload_submit(struct api_offload *o, struct api_offload_job *job);

/** Runs what is queued, then stops the threads. */
void api_offload_stop(struct api_offload *o);

#endif
