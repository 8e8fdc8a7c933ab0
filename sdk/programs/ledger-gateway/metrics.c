/*
 * sdk/programs/ledger-gateway/metrics.c: the counters of metrics.h and
 * their exposition. The histogram's buckets are the time a gateway adds
 * before the first byte: from a tenth of a millisecond to a second.
 */
#include "sdk/programs/ledger-gateway/metrics.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "ledger/common/buf.h"
#include "ledger/common/trace.h"
#include "sdk/programs/ledger-gateway/replica.h"

#define N_ACTIONS 6
#define N_ROWS 10 /* rows 1 to 9 of "A repeat of a key"; [0] unused */

static const double BUCKETS_S[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
				   0.01,   0.025,   0.05,   0.1,   0.25,   1.0};
#define N_BUCKETS (sizeof(BUCKETS_S) / sizeof(BUCKETS_S[0]))

static const char *const OUTCOMES[GATEWAY_OUTCOME_COUNT] = {"completed", "client_error",
							    "terminated", "refused", "abandoned"};

static struct {
	atomic_ullong requests[GATEWAY_OUTCOME_COUNT];
	atomic_ullong attempts;
	atomic_ullong failovers[N_ACTIONS];
	atomic_ullong resumes;
	atomic_ullong replays[N_ROWS];
	atomic_ullong first_byte_le[N_BUCKETS]; /* not cumulative: the exposition sums */
	atomic_ullong first_byte_count;
	atomic_ullong first_byte_sum_us;
} m;

void gateway_metrics_request(enum gateway_outcome outcome)
{
	if (outcome < GATEWAY_OUTCOME_COUNT)
		atomic_fetch_add_explicit(&m.requests[outcome], 1, memory_order_relaxed);
}

const char *gateway_metrics_outcome_name(enum gateway_outcome outcome)
{
	return outcome < GATEWAY_OUTCOME_COUNT ? OUTCOMES[outcome] : "unknown";
}

void gateway_metrics_attempt(void)
{
	atomic_fetch_add_explicit(&m.attempts, 1, memory_order_relaxed);
}

void gateway_metrics_failover(enum ledger_failover_action action)
{
	if ((unsigned)action < N_ACTIONS)
		atomic_fetch_add_explicit(&m.failovers[action], 1, memory_order_relaxed);
}

void gateway_metrics_resume(void)
{
	atomic_fetch_add_explicit(&m.resumes, 1, memory_order_relaxed);
}

void gateway_metrics_replay(int row)
{
	if (row > 0 && row < N_ROWS)
		atomic_fetch_add_explicit(&m.replays[row], 1, memory_order_relaxed);
}

void gateway_metrics_added_first_byte(uint64_t us)
{
	size_t b = 0;

	while (b < N_BUCKETS && (double)us / 1e6 > BUCKETS_S[b])
		b++;
	if (b < N_BUCKETS)
		atomic_fetch_add_explicit(&m.first_byte_le[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&m.first_byte_count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&m.first_byte_sum_us, us, memory_order_relaxed);
}

static unsigned long long get(atomic_ullong *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}

/* What the tracer counted (ledger/common/trace.h), named as ledgerd names it; zeros while off. */
static void render_tracing(struct ledger_buf *b)
{
	struct ledger_trace_stats st;

	ledger_trace_stats(&st);
	ledger_buf_printf(b,
			  "# HELP ledger_trace_spans_exported_total Spans the OTLP collector "
			  "accepted.\n# TYPE ledger_trace_spans_exported_total counter\n"
			  "ledger_trace_spans_exported_total %llu\n",
			  (unsigned long long)st.spans_exported);
	ledger_buf_printf(b,
			  "# HELP ledger_trace_spans_dropped_total Spans dropped as they ended "
			  "because the export queue was full.\n"
			  "# TYPE ledger_trace_spans_dropped_total counter\n"
			  "ledger_trace_spans_dropped_total %llu\n",
			  (unsigned long long)st.spans_dropped);
	ledger_buf_printf(b,
			  "# HELP ledger_trace_spans_failed_total Spans lost because their export "
			  "failed (collector unreachable or refusing).\n"
			  "# TYPE ledger_trace_spans_failed_total counter\n"
			  "ledger_trace_spans_failed_total %llu\n",
			  (unsigned long long)st.spans_failed);
	ledger_buf_printf(
		b,
		"# HELP ledger_trace_exports_failed_total Export requests to the OTLP "
		"collector that failed.\n# TYPE ledger_trace_exports_failed_total counter\n"
		"ledger_trace_exports_failed_total %llu\n",
		(unsigned long long)st.exports_failed);
}

char *gateway_metrics_text(struct gateway *gw)
{
	static const char *const states[4] = {"healthy", "slow", "down", "quarantined"};
	struct ledger_buf b = LEDGER_BUF_INIT;
	unsigned long long cumulative = 0;
	size_t counts[4];

	ledger_buf_printf(&b, "# HELP ledger_gateway_requests_total Logical requests answered, "
			      "by how their answer ended.\n"
			      "# TYPE ledger_gateway_requests_total counter\n");
	for (size_t i = 0; i < GATEWAY_OUTCOME_COUNT; i++)
		ledger_buf_printf(&b, "ledger_gateway_requests_total{outcome=\"%s\"} %llu\n",
				  OUTCOMES[i], get(&m.requests[i]));
	ledger_buf_printf(&b,
			  "# HELP ledger_gateway_attempts_total Attempts begun on replicas.\n"
			  "# TYPE ledger_gateway_attempts_total counter\n"
			  "ledger_gateway_attempts_total %llu\n",
			  get(&m.attempts));
	ledger_buf_printf(&b, "# HELP ledger_gateway_failovers_total Failover decisions, by "
			      "action.\n# TYPE ledger_gateway_failovers_total counter\n");
	for (size_t i = 0; i < N_ACTIONS; i++)
		ledger_buf_printf(&b, "ledger_gateway_failovers_total{action=\"%s\"} %llu\n",
				  ledger_client_action_name((enum ledger_failover_action)i),
				  get(&m.failovers[i]));
	gateway_replicas_count(gw, counts);
	ledger_buf_printf(&b, "# HELP ledger_gateway_replicas Replicas in each state.\n"
			      "# TYPE ledger_gateway_replicas gauge\n");
	for (size_t i = 0; i < 4; i++)
		ledger_buf_printf(&b, "ledger_gateway_replicas{state=\"%s\"} %zu\n", states[i],
				  counts[i]);
	ledger_buf_printf(&b,
			  "# HELP ledger_gateway_resumes_total Repeats that attached to a run "
			  "in flight.\n# TYPE ledger_gateway_resumes_total counter\n"
			  "ledger_gateway_resumes_total %llu\n",
			  get(&m.resumes));
	ledger_buf_printf(&b, "# HELP ledger_gateway_replays_total Repeats of a key, by the row "
			      "that answered them.\n# TYPE ledger_gateway_replays_total counter\n");
	for (int row = 1; row < N_ROWS; row++)
		ledger_buf_printf(&b, "ledger_gateway_replays_total{row=\"%d\"} %llu\n", row,
				  get(&m.replays[row]));
	ledger_buf_printf(&b, "# HELP ledger_gateway_added_first_byte_seconds From the engine's "
			      "first byte to the client's.\n"
			      "# TYPE ledger_gateway_added_first_byte_seconds histogram\n");
	for (size_t i = 0; i < N_BUCKETS; i++) {
		cumulative += get(&m.first_byte_le[i]);
		ledger_buf_printf(
			&b, "ledger_gateway_added_first_byte_seconds_bucket{le=\"%g\"} %llu\n",
			BUCKETS_S[i], cumulative);
	}
	ledger_buf_printf(&b,
			  "ledger_gateway_added_first_byte_seconds_bucket{le=\"+Inf\"} %llu\n"
			  "ledger_gateway_added_first_byte_seconds_sum %.6f\n"
			  "ledger_gateway_added_first_byte_seconds_count %llu\n",
			  get(&m.first_byte_count), (double)get(&m.first_byte_sum_us) / 1e6,
			  get(&m.first_byte_count));
	render_tracing(&b);
	if (b.oom) {
		ledger_buf_free(&b);
		return NULL;
	}
	return ledger_buf_steal(&b, NULL);
}
