/*
 * ledger/common/clock.h: deadlines for timed waits.
 */
#ifndef LEDGER_COMMON_CLOCK_H
#define LEDGER_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/**
 * The time @p ms milliseconds from now on @p clock: the deadline of a
 * pthread_cond_timedwait() on a condition of that clock (CLOCK_REALTIME
 * for one made with PTHREAD_COND_INITIALIZER or default attributes).
 */
struct timespec ledger_clock_after(clockid_t clock, uint64_t ms);

#endif
