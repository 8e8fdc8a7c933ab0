/*
 * sdk/programs/ledger-gateway/metrics.h: the counters behind GET /metrics
 * (GATEWAY.md, "Health, readiness, metrics"), in Prometheus's text format.
 * Counting is a relaxed atomic add: any thread, no lock.
 */
#ifndef GATEWAY_METRICS_H
#define GATEWAY_METRICS_H

#include <stdint.h>

#include <ledger_client.h>

#include "sdk/programs/ledger-gateway/config.h"

/* How a logical request's answer ended, as ledger_gateway_requests_total counts it. */
enum gateway_outcome {
	GATEWAY_OUTCOME_COMPLETED,    /* the whole answer */
	GATEWAY_OUTCOME_CLIENT_ERROR, /* the engine's answer to a bad request, passed on */
	GATEWAY_OUTCOME_TERMINATED,   /* an error event after the first byte */
	GATEWAY_OUTCOME_REFUSED,      /* an error before the first byte */
	GATEWAY_OUTCOME_ABANDONED,    /* its client left for good */
	GATEWAY_OUTCOME_COUNT,
};

void gateway_metrics_request(enum gateway_outcome outcome);
/** The outcome's label ("completed", ...): static text. */
const char *gateway_metrics_outcome_name(enum gateway_outcome outcome);
void gateway_metrics_attempt(void);
void gateway_metrics_failover(enum ledger_failover_action action);
void gateway_metrics_resume(void);
/** A repeat answered from what ledgerd kept or a run in flight: row 1 to 9. */
void gateway_metrics_replay(int row);
/** The time from the engine's first byte to the client's, in microseconds. */
void gateway_metrics_added_first_byte(uint64_t us);

/** The exposition, a new string (NULL: out of memory). */
char *gateway_metrics_text(struct gateway *gw);

#endif
