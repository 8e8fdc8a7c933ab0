/*
 * ledger/common/clock.c: deadlines for timed waits (clock.h).
 */
#include "ledger/common/clock.h"

struct timespec ledger_clock_after(clockid_t clock, uint64_t ms)
{
	struct timespec t;

	clock_gettime(clock, &t);
	t.tv_sec += (time_t)(ms / 1000u);
	t.tv_nsec += (long)(ms % 1000u) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}
