/*
 * ledger/core/failover.c: the failover decision of docs/design.md's policy, in the
 * order of docs/api.md's table. Before the first delta a rerun is allowed once
 * the source can no longer act (it is fenced: certainly dead, acknowledged
 * its cancel, or its lease ran out) and no tool call of the request could
 * run twice; after it, the stream ends with a non-retryable error. Every
 * action but keep_waiting revokes the source.
 */
#include "ledger/core/failover.h"

#include <stdlib.h>
#include <string.h>

static const char *const signal_names[] = {
	[LEDGER_SIGNAL_REPLICA_EXITED] = "replica_exited",
	[LEDGER_SIGNAL_POD_LOST] = "pod_lost",
	[LEDGER_SIGNAL_UPSTREAM_CLOSED] = "upstream_closed",
	[LEDGER_SIGNAL_NETWORK_ERROR] = "network_error",
	[LEDGER_SIGNAL_HEARTBEAT_TIMEOUT] = "heartbeat_timeout",
	[LEDGER_SIGNAL_OVERLOADED] = "overloaded",
	[LEDGER_SIGNAL_CLIENT_DISCONNECTED] = "client_disconnected",
};

static const char *const action_names[] = {
	[LEDGER_FAILOVER_ATTEMPT_FENCED] = "attempt_fenced",
	[LEDGER_FAILOVER_REQUEST_CLOSED] = "request_closed",
	[LEDGER_FAILOVER_KEEP_WAITING] = "keep_waiting",
	[LEDGER_FAILOVER_CANCEL_UPSTREAM] = "cancel_upstream",
	[LEDGER_FAILOVER_TERMINATE_STREAM] = "terminate_stream",
	[LEDGER_FAILOVER_REJECT] = "reject",
	[LEDGER_FAILOVER_WAIT_FOR_FENCE] = "wait_for_fence",
	[LEDGER_FAILOVER_RETRY_PREFILL] = "retry_prefill",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

const char *ledger_failover_signal_name(enum ledger_signal s)
{
	if ((size_t)s >= COUNT(signal_names))
		abort();
	return signal_names[s];
}

int ledger_failover_signal_parse(const char *s, enum ledger_signal *out)
{
	for (size_t i = 0; i < COUNT(signal_names); i++) {
		if (strcmp(signal_names[i], s) == 0) {
			*out = (enum ledger_signal)i;
			return 0;
		}
	}
	return -1;
}

const char *ledger_failover_action_name(enum ledger_failover_action a)
{
	if ((size_t)a >= COUNT(action_names))
		abort();
	return action_names[a];
}

bool ledger_failover_closes(const struct ledger_failover_decision *d)
{
	return d->final && (d->request_after == LEDGER_REQUEST_FAILED ||
			    d->request_after == LEDGER_REQUEST_TERMINATED);
}

static bool certainly_gone(enum ledger_signal s)
{
	return s == LEDGER_SIGNAL_REPLICA_EXITED || s == LEDGER_SIGNAL_POD_LOST ||
	       s == LEDGER_SIGNAL_UPSTREAM_CLOSED;
}

/*
 * The source's state once revoked: DEAD when its replica is certainly gone;
 * otherwise CANCEL_REQUESTED, since it may still run and must be told. An
 * attempt already without rights keeps the state that says why.
 */
static enum ledger_attempt_state revoked(const struct ledger_attempt *a, enum ledger_signal s)
{
	if (a->state != LEDGER_ATTEMPT_LIVE && a->state != LEDGER_ATTEMPT_EXPIRED &&
	    a->state != LEDGER_ATTEMPT_CANCEL_REQUESTED)
		return a->state;
	if (certainly_gone(s))
		return LEDGER_ATTEMPT_DEAD;
	return LEDGER_ATTEMPT_CANCEL_REQUESTED;
}

/* The source as a rerun leaves it: fenced for good, DEAD or SUPERSEDED. */
static enum ledger_attempt_state replaced(const struct ledger_attempt *a, enum ledger_signal s)
{
	enum ledger_attempt_state after = revoked(a, s);

	return after == LEDGER_ATTEMPT_CANCEL_REQUESTED ? LEDGER_ATTEMPT_SUPERSEDED : after;
}

static void end(struct ledger_failover_decision *out, enum ledger_failover_action action,
		enum ledger_request_status request_after, const char *client_error)
{
	out->action = action;
	out->request_after = request_after;
	out->client_error = client_error;
	out->final = true;
}

void ledger_failover_decide(const struct ledger_request *r, const struct ledger_attempt *source,
			    const struct ledger_failover_input *in,
			    const struct ledger_calls_summary *calls,
			    const struct ledger_budget *budget, const struct ledger_policy *p,
			    struct ledger_failover_decision *out)
{
	int64_t fence_ms;

	memset(out, 0, sizeof(*out));
	out->source_after = source->state;
	out->request_after = r->status;

	/* 2, 3: only the newest attempt of an open request is failed over */
	if (!in->source_is_newest) {
		out->action = LEDGER_FAILOVER_ATTEMPT_FENCED;
		return;
	}
	if (r->status != LEDGER_REQUEST_OPEN) {
		out->action = LEDGER_FAILOVER_REQUEST_CLOSED;
		return;
	}
	/* 4: a slow replica is not a failed one, before or after a delta */
	if (in->signal == LEDGER_SIGNAL_OVERLOADED) {
		out->action = LEDGER_FAILOVER_KEEP_WAITING;
		return;
	}
	/*
	 * 5: nobody is listening any more. After a delta the stream was cut:
	 * its client error says so, for whoever asks about the request later.
	 */
	if (in->signal == LEDGER_SIGNAL_CLIENT_DISCONNECTED) {
		out->source_after = revoked(source, in->signal);
		if (r->first_delta_sent)
			end(out, LEDGER_FAILOVER_CANCEL_UPSTREAM, LEDGER_REQUEST_TERMINATED,
			    "client_disconnected");
		else
			end(out, LEDGER_FAILOVER_CANCEL_UPSTREAM, LEDGER_REQUEST_ABANDONED, NULL);
		return;
	}
	out->source_after = revoked(source, in->signal);
	/* 6: a delta reached the client: never rerun (docs/design.md invariant 2) */
	if (r->first_delta_sent) {
		end(out, LEDGER_FAILOVER_TERMINATE_STREAM, LEDGER_REQUEST_TERMINATED,
		    "upstream_decode_interrupted");
		return;
	}
	/* 7: the budget, per request and pool-wide, and the cost of a rerun */
	if (r->attempt_count >= r->max_attempts || !ledger_attempt_budget_allows_retry(p, budget)) {
		end(out, LEDGER_FAILOVER_REJECT, LEDGER_REQUEST_FAILED, "retry_budget_exhausted");
		out->budget = r->attempt_count >= r->max_attempts ? LEDGER_BUDGET_REQUEST
								  : LEDGER_BUDGET_POOL;
		return;
	}
	if (in->retry_prefill_tokens > p->max_retry_prefill_tokens) {
		end(out, LEDGER_FAILOVER_REJECT, LEDGER_REQUEST_FAILED, "retry_cost_exceeded");
		return;
	}
	/* 8: a rerun could repeat a side effect whose outcome nobody knows */
	if (calls->unknown > 0) {
		end(out, LEDGER_FAILOVER_REJECT, LEDGER_REQUEST_FAILED, "tool_outcome_unknown");
		return;
	}
	/*
	 * 9: the source may still act (uncertain liveness, neither acknowledged
	 * nor past its lease), or one of its tool calls is still held: wait
	 * for whichever ends last, with the source revoked meanwhile.
	 */
	fence_ms = certainly_gone(in->signal) ? 0 : ledger_attempt_blocking_ms(source);
	if (calls->held_by_newest_ms > fence_ms)
		fence_ms = calls->held_by_newest_ms;
	if (fence_ms > 0) {
		/* docs/api.md: the source waits revoked as cancel_requested, whatever the signal */
		if (out->source_after == LEDGER_ATTEMPT_DEAD &&
		    source->state != LEDGER_ATTEMPT_DEAD)
			out->source_after = LEDGER_ATTEMPT_CANCEL_REQUESTED;
		out->action = LEDGER_FAILOVER_WAIT_FOR_FENCE;
		out->retry_after_ms = fence_ms;
		return;
	}
	/* 10: fenced, within budget, nothing held or unknown: rerun */
	out->source_after = replaced(source, in->signal);
	end(out, LEDGER_FAILOVER_RETRY_PREFILL, LEDGER_REQUEST_OPEN, NULL);
}
