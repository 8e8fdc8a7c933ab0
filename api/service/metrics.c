/*
 * api/service/metrics.c: fixed tables of atomic counters, one cell per label set,
 * and the Prometheus text exposition of them. Names follow the Prometheus
 * conventions: a ledger_ prefix, base units (seconds), _total on counters.
 */
#include "api/service/metrics.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "api/wire/stats.h"
#include "ledger/common/trace.h"
#include "ledger/store/maintenance.h"
#include "ledger/store/replay_cache.h"
#include "ledger/store/store.h"

#define MAX_ROUTES 32
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The statuses ledgerd answers; anything else lands in "other". */
static const unsigned statuses[] = {200, 201, 400, 401, 403, 404, 405,
				    409, 410, 413, 422, 500, 503};
#define NSTATUS COUNT(statuses)

static atomic_ullong http[MAX_ROUTES + 1][NSTATUS + 1];

/* Latency buckets, in seconds: 0.5 ms to 5 s, where a durable commit lives. */
static const double bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
				0.1,    0.25,  0.5,    1,     2.5,  5};
#define NBOUNDS COUNT(bounds)

struct histogram {
	atomic_ullong buckets[NBOUNDS + 1]; /* the last is +Inf */
	atomic_ullong sum_us;               /* microseconds: an integer sum stays exact */
};

static struct histogram latency[MAX_ROUTES + 1];

static const char *const claim_names[] = {
	[LEDGER_CLAIM_ATTEMPT_NOT_FOUND] = "attempt_not_found",
	[LEDGER_CLAIM_ATTEMPT_REQUIRED] = "attempt_required",
	[LEDGER_CLAIM_ARGS_MISMATCH] = "args_mismatch",
	[LEDGER_CLAIM_REPLAY] = "replayed",
	[LEDGER_CLAIM_RESULT_NOT_KEPT] = "result_not_kept",
	[LEDGER_CLAIM_RESULT_EXPIRED] = "result_expired",
	[LEDGER_CLAIM_ATTEMPT_FENCED] = "attempt_fenced",
	[LEDGER_CLAIM_HELD] = "held",
	[LEDGER_CLAIM_IN_PROGRESS] = "in_progress",
	[LEDGER_CLAIM_OUTCOME_UNKNOWN] = "outcome_unknown",
	[LEDGER_CLAIM_NEW] = "claimed",
	[LEDGER_CLAIM_RECLAIM] = "reclaimed",
};
static atomic_ullong claims[COUNT(claim_names)];

#define NACTIONS (LEDGER_FAILOVER_RETRY_PREFILL + 1)
static atomic_ullong failovers[NACTIONS];

static const char *const fenced_names[] = {
	[API_FENCED_CLAIM] = "claim",
	[API_FENCED_CLAIM_RENEW] = "claim_renew",
	[API_FENCED_ATTEMPT_RENEW] = "attempt_renew",
	[API_FENCED_DELIVER] = "deliver",
	[API_FENCED_FINISH] = "finish",
};
static atomic_ullong fenced[COUNT(fenced_names)];

static const char *const stale_names[] = {
	[API_STALE_CLAIM_RENEW] = "claim_renew",
	[API_STALE_COMPLETE] = "complete",
	[API_STALE_RELEASE] = "release",
};
static atomic_ullong stale[COUNT(stale_names)];

static const char *const token_results[] = {"found", "unknown", "unknown_remembered", "absent"};
static atomic_ullong token_lookups[COUNT(token_results)];
static atomic_ullong readiness_checks;
static atomic_ullong store_unreachable; /* calls the store answered LEDGER_ERR_UNAVAILABLE */

static atomic_ullong late_completions, conflicting_completions, replay_cache_hits;
static atomic_ullong resolve_contradictions, duplicate_executions;

static void add(atomic_ullong *cell)
{
	atomic_fetch_add_explicit(cell, 1, memory_order_relaxed);
}

static unsigned long long get(atomic_ullong *cell)
{
	return atomic_load_explicit(cell, memory_order_relaxed);
}

/* Each route's label, named by the server as it starts; NULL: no such route. */
static const char *route_names[MAX_ROUTES];

void api_metrics_route_name(size_t route_index, const char *name)
{
	if (route_index < MAX_ROUTES)
		route_names[route_index] = name;
}

static size_t route_slot(size_t route_index)
{
	return route_index < MAX_ROUTES && route_names[route_index] != NULL ? route_index
									    : MAX_ROUTES;
}

void api_metrics_http(size_t route_index, unsigned status, double seconds)
{
	size_t r = route_slot(route_index), s = NSTATUS, b = 0;

	for (size_t i = 0; i < NSTATUS; i++) {
		if (statuses[i] == status)
			s = i;
	}
	add(&http[r][s]);
	while (b < NBOUNDS && seconds > bounds[b])
		b++;
	add(&latency[r].buckets[b]);
	atomic_fetch_add_explicit(&latency[r].sum_us, (unsigned long long)(seconds * 1e6),
				  memory_order_relaxed);
}

/* The index of @p name in @p names, or @p n when it is not there. */
static size_t index_of(const char *const *names, size_t n, const char *name)
{
	size_t i = 0;

	while (i < n && strcmp(names[i], name) != 0)
		i++;
	return i;
}

void api_metrics_token_lookup(const char *result)
{
	size_t i = index_of(token_results, COUNT(token_results), result);

	if (i < COUNT(token_results))
		add(&token_lookups[i]);
}

void api_metrics_readiness_check(void)
{
	add(&readiness_checks);
}

void api_metrics_store_unreachable(void)
{
	add(&store_unreachable);
}

uint64_t api_metrics_store_unreachable_count(void)
{
	return get(&store_unreachable);
}

void api_metrics_claim(enum ledger_claim_outcome o)
{
	if ((size_t)o < COUNT(claim_names))
		add(&claims[o]);
}

void api_metrics_failover(enum ledger_failover_action a)
{
	if ((size_t)a < NACTIONS)
		add(&failovers[a]);
}

void api_metrics_fenced(enum api_fenced_op op)
{
	if ((size_t)op < COUNT(fenced_names))
		add(&fenced[op]);
}

void api_metrics_stale_token(enum api_stale_op op)
{
	if ((size_t)op < COUNT(stale_names))
		add(&stale[op]);
}

void api_metrics_late_completion(void)
{
	add(&late_completions);
}

void api_metrics_contradiction(bool duplicate)
{
	add(duplicate ? &duplicate_executions : &resolve_contradictions);
}

void api_metrics_conflicting_completion(void)
{
	add(&conflicting_completions);
}

void api_metrics_replay_cache_hit(void)
{
	add(&replay_cache_hits);
}

static const char *route_name(size_t r)
{
	return r < MAX_ROUTES && route_names[r] != NULL ? route_names[r] : "unmatched";
}

static void header(struct ledger_buf *out, const char *name, const char *type, const char *help)
{
	ledger_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample per cell of @p cells, labelled @p label with its name in @p names. */
static void labelled(struct ledger_buf *out, const char *name, const char *label,
		     const char *const *names, atomic_ullong *cells, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ledger_buf_printf(out, "%s{%s=\"%s\"} %llu\n", name, label, names[i],
				  get(&cells[i]));
}

static void render_http(struct ledger_buf *out)
{
	header(out, "ledger_http_requests_total", "counter", "HTTP responses by route and status.");
	for (size_t r = 0; r <= MAX_ROUTES; r++) {
		for (size_t s = 0; s <= NSTATUS; s++) {
			unsigned long long n = get(&http[r][s]);

			if (n == 0)
				continue;
			if (s < NSTATUS)
				ledger_buf_printf(out,
						  "ledger_http_requests_total{route=\"%s\","
						  "status=\"%u\"} %llu\n",
						  route_name(r), statuses[s], n);
			else
				ledger_buf_printf(out,
						  "ledger_http_requests_total{route=\"%s\","
						  "status=\"other\"} %llu\n",
						  route_name(r), n);
		}
	}
	header(out, "ledger_http_request_duration_seconds", "histogram",
	       "Time from a request's first byte to its reply being queued, by route.");
	for (size_t r = 0; r <= MAX_ROUTES; r++) {
		unsigned long long cumulative = 0;

		if (r < MAX_ROUTES && route_names[r] == NULL)
			continue;
		for (size_t b = 0; b <= NBOUNDS; b++) {
			cumulative += get(&latency[r].buckets[b]);
			if (b < NBOUNDS)
				ledger_buf_printf(out,
						  "ledger_http_request_duration_seconds_bucket{"
						  "route=\"%s\",le=\"%g\"} %llu\n",
						  route_name(r), bounds[b], cumulative);
			else
				ledger_buf_printf(out,
						  "ledger_http_request_duration_seconds_bucket{"
						  "route=\"%s\",le=\"+Inf\"} %llu\n",
						  route_name(r), cumulative);
		}
		ledger_buf_printf(out,
				  "ledger_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n"
				  "ledger_http_request_duration_seconds_count{route=\"%s\"} %llu\n",
				  route_name(r), (double)get(&latency[r].sum_us) / 1e6,
				  route_name(r), cumulative);
	}
}

/* How many calls each batch carried to its commit. */
static void batch_histogram(struct ledger_buf *out, uint64_t calls)
{
	uint64_t counts[LEDGER_STORE_BATCH_BUCKETS];
	unsigned long long cumulative = 0;

	ledger_store_batch_sizes(counts);
	header(out, "ledger_store_batch_calls", "histogram",
	       "Calls committed by each batch (transactions of two calls or more).");
	for (unsigned b = 0; b < LEDGER_STORE_BATCH_BUCKETS; b++) {
		cumulative += counts[b];
		if (b < LEDGER_STORE_BATCH_BUCKETS - 1)
			ledger_buf_printf(out, "ledger_store_batch_calls_bucket{le=\"%u\"} %llu\n",
					  ledger_store_batch_bounds[b], cumulative);
		else
			ledger_buf_printf(out,
					  "ledger_store_batch_calls_bucket{le=\"+Inf\"} %llu\n",
					  cumulative);
	}
	ledger_buf_printf(
		out, "ledger_store_batch_calls_sum %llu\nledger_store_batch_calls_count %llu\n",
		(unsigned long long)calls, cumulative);
}

/* What the tool calls and failovers came to. */
static void render_outcomes(struct ledger_buf *out)
{
	int64_t unknown = ledger_maintenance_unknown();

	header(out, "ledger_claim_outcomes_total", "counter", "Tool-call claims by outcome.");
	for (size_t i = 0; i < COUNT(claim_names); i++)
		ledger_buf_printf(out, "ledger_claim_outcomes_total{outcome=\"%s\"} %llu\n",
				  claim_names[i], get(&claims[i]));
	header(out, "ledger_failover_actions_total", "counter",
	       "Failover decisions taken (not replayed), by action.");
	for (size_t i = 0; i < NACTIONS; i++)
		ledger_buf_printf(out, "ledger_failover_actions_total{action=\"%s\"} %llu\n",
				  ledger_failover_action_name((enum ledger_failover_action)i),
				  get(&failovers[i]));
	header(out, "ledger_fenced_refusals_total", "counter",
	       "Calls refused because their attempt had no rights, by operation.");
	for (size_t i = 0; i < COUNT(fenced_names); i++)
		ledger_buf_printf(out, "ledger_fenced_refusals_total{operation=\"%s\"} %llu\n",
				  fenced_names[i], get(&fenced[i]));
	header(out, "ledger_stale_token_refusals_total", "counter",
	       "Tool-call calls refused because their fencing token is not the current "
	       "holder's (stale_token), by operation.");
	labelled(out, "ledger_stale_token_refusals_total", "operation", stale_names, stale,
		 COUNT(stale_names));
	header(out, "ledger_late_completions_total", "counter",
	       "Final outcomes accepted from an older holder or after the lease.");
	ledger_buf_printf(out, "ledger_late_completions_total %llu\n", get(&late_completions));
	header(out, "ledger_resolve_contradictions_total", "counter",
	       "not_executed resolutions proved wrong by the holder's late final outcome, "
	       "nobody having claimed the key since.");
	ledger_buf_printf(out, "ledger_resolve_contradictions_total %llu\n",
			  get(&resolve_contradictions));
	header(out, "ledger_duplicate_executions_total", "counter",
	       "Side effects that may have run twice: a not_executed resolution proved wrong "
	       "after the key was claimed again.");
	ledger_buf_printf(out, "ledger_duplicate_executions_total %llu\n",
			  get(&duplicate_executions));
	header(out, "ledger_conflicting_completions_total", "counter",
	       "Completions refused because another one was stored.");
	ledger_buf_printf(out, "ledger_conflicting_completions_total %llu\n",
			  get(&conflicting_completions));
	if (unknown >= 0) {
		header(out, "ledger_unknown_outcomes", "gauge",
		       "Tool calls whose outcome is unknown, all tenants (counted every 15 s).");
		ledger_buf_printf(out, "ledger_unknown_outcomes %lld\n", (long long)unknown);
	}
}

/* The replay cache: what it answered and what it holds. */
static void render_cache(struct ledger_buf *out)
{
	size_t cache_entries = 0, cache_bytes = 0;

	ledger_replay_cache_stats(&cache_entries, &cache_bytes);
	header(out, "ledger_replay_cache_hits_total", "counter",
	       "Replays answered from memory, without the database.");
	ledger_buf_printf(out, "ledger_replay_cache_hits_total %llu\n", get(&replay_cache_hits));
	header(out, "ledger_replay_cache_entries", "gauge",
	       "Settled calls held by the replay cache.");
	ledger_buf_printf(out, "ledger_replay_cache_entries %zu\n", cache_entries);
	header(out, "ledger_replay_cache_bytes", "gauge", "Memory held by the replay cache.");
	ledger_buf_printf(out, "ledger_replay_cache_bytes %zu\n", cache_bytes);
}

/* The database and the workers that talk to it. */
static void render_store(struct ledger_buf *out, size_t queue_depth, unsigned stalled)
{
	static const char *const shed_names[LEDGER_STORE_SHED_KINDS] = {
		[LEDGER_STORE_SHED_QUEUE_FULL] = "queue_full",
		[LEDGER_STORE_SHED_STALLED] = "stalled",
		[LEDGER_STORE_SHED_EXPIRED] = "expired",
	};
	static const struct {
		enum ledger_err kind;
		const char *name;
	} db_errors[] = {
		{LEDGER_ERR_UNAVAILABLE, "unavailable"},
		{LEDGER_ERR_CONFLICT, "conflict"},
		{LEDGER_ERR_INTERNAL, "internal"},
	};
	uint64_t batches = 0, batched = 0;

	header(out, "ledger_database_up", "gauge",
	       "1 while this process's connection attempts reach the database, 0 from the "
	       "first that failed until one succeeds.");
	ledger_buf_printf(out, "ledger_database_up %d\n", ledger_store_reachable() ? 1 : 0);
	header(out, "ledger_database_errors_total", "counter", "Database failures by kind.");
	for (size_t i = 0; i < COUNT(db_errors); i++)
		ledger_buf_printf(out, "ledger_database_errors_total{kind=\"%s\"} %llu\n",
				  db_errors[i].name,
				  (unsigned long long)ledger_store_errors(db_errors[i].kind));
	ledger_store_batch_stats(&batches, &batched);
	header(out, "ledger_store_batches_total", "counter",
	       "Transactions that committed several calls together.");
	ledger_buf_printf(out, "ledger_store_batches_total %llu\n", (unsigned long long)batches);
	header(out, "ledger_store_batched_calls_total", "counter",
	       "Calls committed in those transactions.");
	ledger_buf_printf(out, "ledger_store_batched_calls_total %llu\n",
			  (unsigned long long)batched);
	batch_histogram(out, batched);
	header(out, "ledger_store_round_trips_total", "counter",
	       "Round trips to the database: statements sent, then their results awaited.");
	ledger_buf_printf(out, "ledger_store_round_trips_total %llu\n",
			  (unsigned long long)ledger_store_round_trips());
	header(out, "ledger_store_queue_depth", "gauge", "Calls waiting for a database worker.");
	ledger_buf_printf(out, "ledger_store_queue_depth %zu\n", queue_depth);
	header(out, "ledger_store_timeouts_total", "counter",
	       "Waits for the database that ran past --db-timeout (each call answered 503).");
	ledger_buf_printf(out, "ledger_store_timeouts_total %llu\n",
			  (unsigned long long)ledger_store_timeouts());
	header(out, "ledger_store_shed_total", "counter",
	       "Calls answered 503 without reaching the database, by reason.");
	for (int i = 0; i < LEDGER_STORE_SHED_KINDS; i++)
		ledger_buf_printf(
			out, "ledger_store_shed_total{reason=\"%s\"} %llu\n", shed_names[i],
			(unsigned long long)ledger_store_shed_count((enum ledger_store_shed)i));
	header(out, "ledger_store_stalled_workers", "gauge",
	       "Database workers waiting on a database that stopped answering.");
	ledger_buf_printf(out, "ledger_store_stalled_workers %u\n", stalled);
}

/* What the tracer counted (ledger/common/trace.h); zeros while tracing is off. */
static void render_tracing(struct ledger_buf *out)
{
	struct ledger_trace_stats st;

	ledger_trace_stats(&st);
	header(out, "ledger_trace_spans_exported_total", "counter",
	       "Spans the OTLP collector accepted.");
	ledger_buf_printf(out, "ledger_trace_spans_exported_total %llu\n",
			  (unsigned long long)st.spans_exported);
	header(out, "ledger_trace_spans_dropped_total", "counter",
	       "Spans dropped as they ended because the export queue was full.");
	ledger_buf_printf(out, "ledger_trace_spans_dropped_total %llu\n",
			  (unsigned long long)st.spans_dropped);
	header(out, "ledger_trace_spans_failed_total", "counter",
	       "Spans lost because their export failed (collector unreachable or refusing).");
	ledger_buf_printf(out, "ledger_trace_spans_failed_total %llu\n",
			  (unsigned long long)st.spans_failed);
	header(out, "ledger_trace_exports_failed_total", "counter",
	       "Export requests to the OTLP collector that failed.");
	ledger_buf_printf(out, "ledger_trace_exports_failed_total %llu\n",
			  (unsigned long long)st.exports_failed);
}

void api_metrics_render(struct ledger_buf *out, size_t queue_depth, unsigned stalled,
			long in_flight)
{
	render_http(out);
	render_outcomes(out);
	render_cache(out);
	render_store(out, queue_depth, stalled);
	header(out, "ledger_http_in_flight", "gauge", "HTTP calls being served.");
	ledger_buf_printf(out, "ledger_http_in_flight %ld\n", in_flight);
	header(out, "ledger_token_lookups_total", "counter",
	       "Tokens not in memory: looked up in the database (found, unknown), or refused "
	       "because the database said so a moment ago (unknown_remembered), or because no "
	       "live token has that hash (absent).");
	labelled(out, "ledger_token_lookups_total", "result", token_results, token_lookups,
		 COUNT(token_results));
	header(out, "ledger_readiness_checks_total", "counter",
	       "Readiness checks that asked the database (a /readyz within a second of one "
	       "that found it ready, with no call since finding it unreachable, is answered "
	       "from it).");
	ledger_buf_printf(out, "ledger_readiness_checks_total %llu\n", get(&readiness_checks));
	render_tracing(out);
	wire_stats_render(out, "ledger_");
}
