/*
 * ledger/store/maintenance.h: what ledgerd serve does in the background, on a
 * connection of its own so that the store's workers never wait for it:
 * retention every --gc-interval, and a count of the unknown outcomes
 * outstanding for /metrics.
 */
#ifndef LEDGER_MAINTENANCE_H
#define LEDGER_MAINTENANCE_H

#include <stdint.h>

#include "ledger/common/err.h"

struct ledger_maintenance_config {
	const char *database_url; /* borrowed for the thread's lifetime */
	int64_t retention_ms;
	int64_t tombstone_ms;
	int64_t gc_interval_ms;
	unsigned gc_batch;
};

struct ledger_maintenance;

/** Starts the thread; it connects (and reconnects) by itself. */
LEDGER_MUSTCHECK enum ledger_err
ledger_maintenance_start(const struct ledger_maintenance_config *cfg,
			 struct ledger_maintenance **out);

/** Stops the thread at its next pause and frees @p m. NULL-safe. */
void ledger_maintenance_stop(struct ledger_maintenance *m);

/** The unknown outcomes counted last (at most 15 s ago); -1 before the first count. */
int64_t ledger_maintenance_unknown(void);

#endif
