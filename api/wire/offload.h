/*
 * api/wire/offload.h: a few threads for the CPU work of a call that could hold
 * a polling thread too long (parsing and fingerprinting a large body), so
 * that one caller's big body never delays another's small one.
 */
#ifndef WIRE_OFFLOAD_H
#define WIRE_OFFLOAD_H

#include "ledger/common/err.h"

struct wire_offload;

struct wire_offload_job {
	void (*run)(struct wire_offload_job *job);  /* on an offload thread */
	void (*done)(struct wire_offload_job *job); /* then, on the same thread */
	struct wire_offload_job *next;
};

LEDGER_MUSTCHECK enum ledger_err wire_offload_start(unsigned threads, struct wire_offload **out);

/** Queues @p job; run() and done() follow on an offload thread. Thread-safe. */
void wire_offload_submit(struct wire_offload *o, struct wire_offload_job *job);

/** Runs what is queued, then stops the threads. */
void wire_offload_stop(struct wire_offload *o);

#endif
