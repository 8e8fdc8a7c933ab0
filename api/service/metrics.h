/*
 * api/service/metrics.h: ledgerd's counters, gauges and histograms, exposed on
 * /metrics in the Prometheus text format. Counting is a relaxed atomic
 * add into fixed tables: free on the hot path, never a lock.
 */
#ifndef API_METRICS_H
#define API_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "ledger/common/buf.h"
#include "ledger/core/decide.h"
#include "ledger/core/failover.h"

/* Calls refused because their attempt has no rights. */
enum api_fenced_op {
	API_FENCED_CLAIM,
	API_FENCED_CLAIM_RENEW,
	API_FENCED_ATTEMPT_RENEW,
	API_FENCED_DELIVER,
	API_FENCED_FINISH,
};

/* Tool-call calls refused because their fencing token is not the current holder's. */
enum api_stale_op {
	API_STALE_CLAIM_RENEW,
	API_STALE_COMPLETE,
	API_STALE_RELEASE,
};

/**
 * Names the route at @p route_index of the routing table in the labels;
 * once per route, before any call. @p name is borrowed for good.
 */
void api_metrics_route_name(size_t route_index, const char *name);

/**
 * Counts one HTTP response and its latency.
 * @param route_index SIZE_MAX when unrouted
 */
void api_metrics_http(size_t route_index, unsigned status, double seconds);

/*
 * A token not in the lookup cache (result: found, unknown, unknown_remembered, absent), a
 * readiness check made.
 */
void api_metrics_token_lookup(const char *result);
void api_metrics_readiness_check(void);

/* A call the store answered "unavailable", and how many so far (/readyz reads it). */
void api_metrics_store_unreachable(void);
uint64_t api_metrics_store_unreachable_count(void);

void api_metrics_claim(enum ledger_claim_outcome o);
void api_metrics_failover(enum ledger_failover_action a);
void api_metrics_fenced(enum api_fenced_op op);
void api_metrics_stale_token(enum api_stale_op op);
void api_metrics_late_completion(void);
void api_metrics_conflicting_completion(void);
/**
 * Counts a not_executed resolution proved wrong by its holder's late final
 * outcome; @p duplicate: the key was claimed since, so it may have run twice.
 */
void api_metrics_contradiction(bool duplicate);
/* A replay answered from the replay cache, without the database. */
void api_metrics_replay_cache_hit(void);

/** Appends the exposition of every metric to @p out. */
void api_metrics_render(struct ledger_buf *out, size_t queue_depth, unsigned stalled,
			long in_flight);

#endif
