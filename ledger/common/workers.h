/*
 * ledger/common/workers.h: threads kept for jobs that would each have been
 * a detached thread of their own.
 */
#ifndef LEDGER_COMMON_WORKERS_H
#define LEDGER_COMMON_WORKERS_H

#include <stdbool.h>

/** How long a thread waits for its next job before it ends, by default. */
#define LEDGER_WORKERS_IDLE_MS 30000u

/**
 * Runs @p fn(@p arg) on a thread of its own for as long as it takes: an
 * idle thread of the process's, else a new one. Nothing waits for it; a
 * caller that must know when it ended has @p fn say so.
 * @return false when no thread could be had (@p fn did not run)
 */
bool ledger_workers_run(void (*fn)(void *arg), void *arg);

/** Sets how long an idle thread waits for a job before it ends, from its next wait (tests). */
void ledger_workers_set_idle_ms(unsigned ms);

/** How many threads the pool has, busy and idle (tests). */
unsigned ledger_workers_threads(void);

/** How many of them wait for a job (tests). */
unsigned ledger_workers_idle(void);

#endif
