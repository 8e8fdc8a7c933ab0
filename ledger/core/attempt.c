/*
 * ledger/core/attempt.c: the attempt state machine and the rules for creating
 * an attempt, as pure functions.
 *
 *          cancel                      cancel-ack
 *   LIVE ----------> CANCEL_REQUESTED ------------> CANCELLED
 *    | \  \                (blocks the next attempt until the ack
 *    |  \  \                or the end of its lease; no rights)
 *    |   \  `-- finish completed --> FINISHED (the request completes)
 *    |    `---- finish failed -----> FAILED   (the request stays open)
 *    |
 *    +-- lease runs out (derived) --> EXPIRED --- a newer attempt ---> SUPERSEDED
 *    `-- failover, replica certainly gone -----------------------> DEAD
 *
 * Only LIVE, of an OPEN request, has rights (ledger_attempt_has_rights()).
 */
#include "ledger/core/attempt.h"

#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
	[LEDGER_REQUEST_OPEN] = "open",           [LEDGER_REQUEST_COMPLETED] = "completed",
	[LEDGER_REQUEST_FAILED] = "failed",       [LEDGER_REQUEST_TERMINATED] = "terminated",
	[LEDGER_REQUEST_ABANDONED] = "abandoned",
};

static const char *const state_names[] = {
	[LEDGER_ATTEMPT_LIVE] = "live",
	[LEDGER_ATTEMPT_EXPIRED] = "expired",
	[LEDGER_ATTEMPT_CANCEL_REQUESTED] = "cancel_requested",
	[LEDGER_ATTEMPT_CANCELLED] = "cancelled",
	[LEDGER_ATTEMPT_DEAD] = "dead",
	[LEDGER_ATTEMPT_SUPERSEDED] = "superseded",
	[LEDGER_ATTEMPT_FINISHED] = "finished",
	[LEDGER_ATTEMPT_FAILED] = "failed",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int find_name(const char *const *names, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(names[i], s) == 0)
			return (int)i;
	}
	return -1;
}

const char *ledger_attempt_request_status_name(enum ledger_request_status s)
{
	if ((size_t)s >= COUNT(status_names))
		abort();
	return status_names[s];
}

int ledger_attempt_request_status_parse(const char *s, enum ledger_request_status *out)
{
	int i = find_name(status_names, COUNT(status_names), s);

	if (i < 0)
		return -1;
	*out = (enum ledger_request_status)i;
	return 0;
}

const char *ledger_attempt_state_name(enum ledger_attempt_state s)
{
	if ((size_t)s >= COUNT(state_names))
		abort();
	return state_names[s];
}

int ledger_attempt_state_parse(const char *s, enum ledger_attempt_state *out)
{
	int i = find_name(state_names, COUNT(state_names), s);

	if (i < 0)
		return -1;
	*out = (enum ledger_attempt_state)i;
	return 0;
}

bool ledger_attempt_has_rights(const struct ledger_request *r, const struct ledger_attempt *a)
{
	return a->exists && a->state == LEDGER_ATTEMPT_LIVE && a->lease_ms_left > 0 &&
	       r->status == LEDGER_REQUEST_OPEN;
}

int64_t ledger_attempt_blocking_ms(const struct ledger_attempt *a)
{
	if (!a->exists)
		return 0;
	if (a->state != LEDGER_ATTEMPT_LIVE && a->state != LEDGER_ATTEMPT_CANCEL_REQUESTED)
		return 0;
	return a->lease_ms_left > 0 ? a->lease_ms_left : 0;
}

enum ledger_standing ledger_attempt_standing(const struct ledger_request *r,
					     const struct ledger_attempt *a)
{
	if (!a->exists)
		return LEDGER_STANDING_NOT_FOUND;
	return ledger_attempt_has_rights(r, a) ? LEDGER_STANDING_HAS_RIGHTS
					       : LEDGER_STANDING_FENCED;
}

bool ledger_attempt_budget_allows_retry(const struct ledger_policy *p,
					const struct ledger_budget *b)
{
	/* retries < max(min, pct% of attempts), in integers: no rounding to argue about */
	if (b->retries < (int64_t)p->budget_min_retries)
		return true;
	return b->retries * 100 < (int64_t)p->budget_percent * b->attempts;
}

const char *ledger_attempt_budget_name(enum ledger_budget_kind k)
{
	switch (k) {
	case LEDGER_BUDGET_REQUEST:
		return "request";
	case LEDGER_BUDGET_POOL:
		return "pool";
	case LEDGER_BUDGET_NONE:
		break;
	}
	return NULL;
}

int64_t ledger_attempt_budget_retry_after(const struct ledger_policy *p,
					  const struct ledger_budget_drop *drops, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct ledger_budget b = {drops[i].attempts, drops[i].retries};

		if (ledger_attempt_budget_allows_retry(p, &b))
			return drops[i].in_ms > 0 ? drops[i].in_ms : 1;
	}
	return p->budget_window_ms > 0 ? p->budget_window_ms : 1;
}

/* The revision a new attempt runs: its own, or else the request's. */
static const char *effective_revision(const struct ledger_attempt_request *in,
				      const struct ledger_request *r)
{
	if (in->model_revision != NULL)
		return in->model_revision;
	return r->model_revision[0] != '\0' ? r->model_revision : NULL;
}

/* The same attempt_id again: the same replica and gateway, and no other revision. */
static bool same_attempt(const struct ledger_attempt_request *in, const struct ledger_attempt *a)
{
	if (strcmp(in->replica != NULL ? in->replica : "", a->replica) != 0 ||
	    strcmp(in->gateway != NULL ? in->gateway : "", a->gateway) != 0)
		return false;
	if (in->model_revision != NULL)
		return a->revision_given && strcmp(in->model_revision, a->model_revision) == 0;
	return !a->revision_given;
}

void ledger_attempt_decide_create(const struct ledger_attempt_request *in,
				  const struct ledger_request *r,
				  const struct ledger_attempt *same_id,
				  const struct ledger_attempt *newest,
				  const struct ledger_calls_summary *calls,
				  const struct ledger_budget *budget, const struct ledger_policy *p,
				  struct ledger_create_decision *out)
{
	const char *revision = effective_revision(in, r);

	memset(out, 0, sizeof(*out));
	/*
	 * Row 2 holds both mismatches: the same attempt_id with another body,
	 * and any attempt whose input is not the request's.
	 */
	if (same_id->exists && !same_attempt(in, same_id)) {
		out->outcome = LEDGER_CREATE_REQUEST_MISMATCH;
		return;
	}
	if (ledger_attempt_input_conflicts(in, r)) {
		out->outcome = LEDGER_CREATE_REQUEST_MISMATCH;
		out->input_mismatch = true;
		return;
	}
	if (same_id->exists) {
		out->outcome = LEDGER_CREATE_REPEATED;
		return;
	}
	if (r->first_delta_sent) {
		out->outcome = LEDGER_CREATE_FIRST_DELTA_SENT;
		return;
	}
	if (r->status != LEDGER_REQUEST_OPEN && r->status != LEDGER_REQUEST_ABANDONED) {
		out->outcome = LEDGER_CREATE_REQUEST_CLOSED;
		return;
	}
	/* Every attempt after the first is a retry, a reopen included. */
	out->is_retry = r->attempt_count > 0;
	out->max_attempts = r->attempt_count > 0   ? r->max_attempts
			    : in->max_attempts > 0 ? in->max_attempts
						   : (int64_t)p->max_attempts;
	if (r->attempt_count >= out->max_attempts) {
		out->outcome = LEDGER_CREATE_BUDGET_EXHAUSTED;
		out->budget = LEDGER_BUDGET_REQUEST;
		return;
	}
	if (out->is_retry && !ledger_attempt_budget_allows_retry(p, budget)) {
		out->outcome = LEDGER_CREATE_BUDGET_EXHAUSTED;
		out->budget = LEDGER_BUDGET_POOL;
		return;
	}
	if (p->require_same_revision && r->model_revision[0] != '\0' && revision != NULL &&
	    strcmp(revision, r->model_revision) != 0) {
		out->outcome = LEDGER_CREATE_REVISION_MISMATCH;
		return;
	}
	out->retry_after_ms = ledger_attempt_blocking_ms(newest);
	if (out->retry_after_ms > 0) {
		out->outcome = LEDGER_CREATE_SOURCE_NOT_FENCED;
		return;
	}
	if (calls->held_by_newest_ms > 0) {
		out->outcome = LEDGER_CREATE_TOOL_CALL_IN_PROGRESS;
		out->retry_after_ms = calls->held_by_newest_ms;
		return;
	}
	if (calls->unknown > 0) {
		out->outcome = LEDGER_CREATE_TOOL_OUTCOME_UNKNOWN;
		return;
	}
	out->outcome = LEDGER_CREATE_CREATED;
	out->reopen = r->status == LEDGER_REQUEST_ABANDONED;
	out->supersede_newest = newest->exists && newest->state == LEDGER_ATTEMPT_EXPIRED;
	out->model_revision = revision;
}

bool ledger_attempt_input_conflicts(const struct ledger_attempt_request *in,
				    const struct ledger_request *r)
{
	return in->input_sha256 != NULL && r->input_sha256[0] != '\0' &&
	       strcmp(in->input_sha256, r->input_sha256) != 0;
}

const char *ledger_attempt_create_code(enum ledger_create_outcome o)
{
	switch (o) {
	case LEDGER_CREATE_REQUEST_MISMATCH:
		return "request_mismatch";
	case LEDGER_CREATE_FIRST_DELTA_SENT:
		return "first_delta_sent";
	case LEDGER_CREATE_REQUEST_CLOSED:
		return "request_closed";
	case LEDGER_CREATE_BUDGET_EXHAUSTED:
		return "retry_budget_exhausted";
	case LEDGER_CREATE_REVISION_MISMATCH:
		return "revision_mismatch";
	case LEDGER_CREATE_SOURCE_NOT_FENCED:
		return "source_not_fenced";
	case LEDGER_CREATE_TOOL_CALL_IN_PROGRESS:
		return "tool_call_in_progress";
	case LEDGER_CREATE_TOOL_OUTCOME_UNKNOWN:
		return "tool_outcome_unknown";
	case LEDGER_CREATE_REPEATED:
	case LEDGER_CREATE_CREATED:
		break;
	}
	return NULL;
}

enum ledger_attempt_op_outcome ledger_attempt_decide_renew(const struct ledger_request *r,
							   const struct ledger_attempt *a)
{
	return ledger_attempt_has_rights(r, a) ? LEDGER_ATTEMPT_OP_DONE : LEDGER_ATTEMPT_OP_FENCED;
}

enum ledger_attempt_op_outcome ledger_attempt_decide_finish(const struct ledger_request *r,
							    const struct ledger_attempt *a,
							    bool completed)
{
	enum ledger_attempt_state done =
		completed ? LEDGER_ATTEMPT_FINISHED : LEDGER_ATTEMPT_FAILED;

	if (a->exists && a->state == done)
		return LEDGER_ATTEMPT_OP_REPEATED;
	return ledger_attempt_decide_renew(r, a);
}

enum ledger_attempt_op_outcome ledger_attempt_decide_cancel(const struct ledger_attempt *a,
							    bool ack)
{
	switch (a->state) {
	case LEDGER_ATTEMPT_LIVE:
	case LEDGER_ATTEMPT_EXPIRED:
		return LEDGER_ATTEMPT_OP_DONE;
	case LEDGER_ATTEMPT_CANCEL_REQUESTED:
		return ack ? LEDGER_ATTEMPT_OP_DONE : LEDGER_ATTEMPT_OP_REPEATED;
	case LEDGER_ATTEMPT_CANCELLED:
	case LEDGER_ATTEMPT_DEAD:
	case LEDGER_ATTEMPT_SUPERSEDED:
	case LEDGER_ATTEMPT_FINISHED:
	case LEDGER_ATTEMPT_FAILED:
		break;
	}
	return LEDGER_ATTEMPT_OP_REPEATED;
}
