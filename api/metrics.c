/*
 * api/metrics.c: fixed tables of atomic counters, one cell per label set,
 * so that counting never allocates or locks.
 */
#include "api/metrics.h"

#include <stdatomic.h>
#include <stdint.h>

#include "api/server.h"

#define MAX_ROUTES 32

/* The statuses ledgerd answers; anything else lands in "other". */
static const unsigned statuses[] = {200, 201, 400, 401, 403, 404, 405,
				    409, 410, 413, 422, 500, 503};
#define NSTATUS (sizeof(statuses) / sizeof(statuses[0]))

static atomic_ullong http[MAX_ROUTES + 1][NSTATUS + 1];

static const char *const claim_names[] = {
	[LEDGER_CLAIM_ATTEMPT_NOT_FOUND] = "attempt_not_found",
	[LEDGER_CLAIM_ATTEMPT_REQUIRED] = "attempt_required",
	[LEDGER_CLAIM_ARGS_MISMATCH] = "args_mismatch",
	[LEDGER_CLAIM_REPLAY] = "replayed",
	[LEDGER_CLAIM_RESULT_EXPIRED] = "result_expired",
	[LEDGER_CLAIM_ATTEMPT_FENCED] = "attempt_fenced",
	[LEDGER_CLAIM_HELD] = "held",
	[LEDGER_CLAIM_IN_PROGRESS] = "in_progress",
	[LEDGER_CLAIM_OUTCOME_UNKNOWN] = "outcome_unknown",
	[LEDGER_CLAIM_NEW] = "claimed",
	[LEDGER_CLAIM_RECLAIM] = "reclaimed",
};
#define NCLAIM (sizeof(claim_names) / sizeof(claim_names[0]))

static atomic_ullong claims[NCLAIM];

void api_metrics_http(size_t route_index, unsigned status)
{
	size_t r = route_index < api_route_count && route_index < MAX_ROUTES ? route_index
									     : MAX_ROUTES;
	size_t s = NSTATUS;

	for (size_t i = 0; i < NSTATUS; i++) {
		if (statuses[i] == status) {
			s = i;
			break;
		}
	}
	atomic_fetch_add_explicit(&http[r][s], 1, memory_order_relaxed);
}

void api_metrics_claim(enum ledger_claim_outcome o)
{
	if ((size_t)o < NCLAIM)
		atomic_fetch_add_explicit(&claims[o], 1, memory_order_relaxed);
}

void api_metrics_render(struct ledger_buf *out, size_t queue_depth, long in_flight)
{
	ledger_buf_puts(out,
			"# HELP ledger_http_requests_total HTTP responses by route and status.\n"
			"# TYPE ledger_http_requests_total counter\n");
	for (size_t r = 0; r <= MAX_ROUTES; r++) {
		const char *route = r < api_route_count ? api_routes[r].name : "unmatched";

		if (r >= api_route_count && r != MAX_ROUTES)
			continue;
		for (size_t s = 0; s <= NSTATUS; s++) {
			unsigned long long n =
				atomic_load_explicit(&http[r][s], memory_order_relaxed);
			if (n == 0)
				continue;
			if (s < NSTATUS)
				ledger_buf_printf(
					out,
					"ledger_http_requests_total{route=\"%s\",status=\"%u\"} %llu\n",
					route, statuses[s], n);
			else
				ledger_buf_printf(
					out,
					"ledger_http_requests_total{route=\"%s\",status=\"other\"} %llu\n",
					route, n);
		}
	}
	ledger_buf_puts(out, "# HELP ledger_claim_outcomes_total Tool-call claims by outcome.\n"
			     "# TYPE ledger_claim_outcomes_total counter\n");
	for (size_t i = 0; i < NCLAIM; i++)
		ledger_buf_printf(out, "ledger_claim_outcomes_total{outcome=\"%s\"} %llu\n",
				  claim_names[i],
				  atomic_load_explicit(&claims[i], memory_order_relaxed));
	ledger_buf_printf(out,
			  "# HELP ledger_store_queue_depth Calls waiting for a database worker.\n"
			  "# TYPE ledger_store_queue_depth gauge\n"
			  "ledger_store_queue_depth %zu\n"
			  "# HELP ledger_http_in_flight HTTP calls being served.\n"
			  "# TYPE ledger_http_in_flight gauge\n"
			  "ledger_http_in_flight %ld\n",
			  queue_depth, in_flight);
}
