/*
 * tests/unit/test_attempt.c: the attempt decisions, table-driven: POST
 * attempts in the order of docs/api.md's table, an attempt's rights, standing
 * and blocking time, renew, finish and cancel, the pool-wide retry budget,
 * and the API's names and codes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ledger/core/attempt.h"
#include "ledger/core/policy.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* --- fixtures: requests and attempts as the store reads them --- */

enum request_kind {
	RQ_NEW,              /* no row yet */
	RQ_FRESH,            /* a row, no attempt yet */
	RQ_OPEN,             /* attempt 1 of 2, revision rev-1 */
	RQ_OPEN_NOREV,       /* attempt 1 of 2, the first attempt named no revision */
	RQ_OPEN_MAX,         /* attempt 2 of 2 */
	RQ_OPEN_1OF5,        /* attempt 1 of 5 */
	RQ_OPEN_4OF5,        /* attempt 4 of 5 */
	RQ_OPEN_5OF5,        /* attempt 5 of 5 */
	RQ_DELTA,            /* open, a delta sent */
	RQ_COMPLETED,        /* completed, no delta sent */
	RQ_COMPLETED_DELTA,  /* completed after a delta */
	RQ_FAILED,           /* failed, no delta sent */
	RQ_TERMINATED,       /* terminated before a delta (tool call divergence) */
	RQ_TERMINATED_DELTA, /* terminated after a delta */
	RQ_ABANDONED,        /* the client went away before a delta: attempt 1 of 2 */
	RQ_ABANDONED_MAX,    /* abandoned, attempt 2 of 2 */
};

static const struct {
	const char *name;
	bool exists;
	enum ledger_request_status status;
	bool delta;
	int64_t count, max_attempts;
	const char *revision;
} requests[] = {
	[RQ_NEW] = {"new", false, LEDGER_REQUEST_OPEN, false, 0, 0, ""},
	[RQ_FRESH] = {"fresh", true, LEDGER_REQUEST_OPEN, false, 0, 0, ""},
	[RQ_OPEN] = {"open 1/2", true, LEDGER_REQUEST_OPEN, false, 1, 2, "rev-1"},
	[RQ_OPEN_NOREV] = {"open 1/2 no rev", true, LEDGER_REQUEST_OPEN, false, 1, 2, ""},
	[RQ_OPEN_MAX] = {"open 2/2", true, LEDGER_REQUEST_OPEN, false, 2, 2, "rev-1"},
	[RQ_OPEN_1OF5] = {"open 1/5", true, LEDGER_REQUEST_OPEN, false, 1, 5, "rev-1"},
	[RQ_OPEN_4OF5] = {"open 4/5", true, LEDGER_REQUEST_OPEN, false, 4, 5, "rev-1"},
	[RQ_OPEN_5OF5] = {"open 5/5", true, LEDGER_REQUEST_OPEN, false, 5, 5, "rev-1"},
	[RQ_DELTA] = {"open, delta", true, LEDGER_REQUEST_OPEN, true, 1, 2, "rev-1"},
	[RQ_COMPLETED] = {"completed", true, LEDGER_REQUEST_COMPLETED, false, 1, 2, "rev-1"},
	[RQ_COMPLETED_DELTA] = {"completed, delta", true, LEDGER_REQUEST_COMPLETED, true, 1, 2,
				"rev-1"},
	[RQ_FAILED] = {"failed", true, LEDGER_REQUEST_FAILED, false, 1, 2, "rev-1"},
	[RQ_TERMINATED] = {"terminated", true, LEDGER_REQUEST_TERMINATED, false, 1, 2, "rev-1"},
	[RQ_TERMINATED_DELTA] = {"terminated, delta", true, LEDGER_REQUEST_TERMINATED, true, 1, 2,
				 "rev-1"},
	[RQ_ABANDONED] = {"abandoned 1/2", true, LEDGER_REQUEST_ABANDONED, false, 1, 2, "rev-1"},
	[RQ_ABANDONED_MAX] = {"abandoned 2/2", true, LEDGER_REQUEST_ABANDONED, false, 2, 2,
			      "rev-1"},
};

enum attempt_kind {
	AT_NONE,            /* no such attempt */
	AT_LIVE,            /* live, 5000 ms left; replica-a, rev-1 given */
	AT_LIVE_1MS,        /* live, 1 ms left */
	AT_EXPIRED,         /* live, its lease ran out */
	AT_CANCEL_REQ,      /* cancel requested, 4000 ms left */
	AT_CANCEL_REQ_PAST, /* cancel requested, its lease ran out */
	AT_CANCELLED,       /* each rightless state keeps 5000 ms of a stored lease */
	AT_DEAD,
	AT_SUPERSEDED,
	AT_FINISHED,
	AT_FAILED,
	AT_NOREV,     /* live, rev-1 taken from the request, none named */
	AT_NOREPLICA, /* live, no replica named */
	AT_LIVE2,     /* att-2, live, 5000 ms left */
};

static const struct {
	const char *name;
	bool exists;
	const char *id;
	const char *replica;
	bool revision_given;
	enum ledger_attempt_state state;
	int64_t lease;
} attempts[] = {
	[AT_NONE] = {"none", false, "", "", false, LEDGER_ATTEMPT_LIVE, 0},
	[AT_LIVE] = {"live", true, "att-1", "replica-a", true, LEDGER_ATTEMPT_LIVE, 5000},
	[AT_LIVE_1MS] = {"live 1ms", true, "att-1", "replica-a", true, LEDGER_ATTEMPT_LIVE, 1},
	[AT_EXPIRED] = {"expired", true, "att-1", "replica-a", true, LEDGER_ATTEMPT_EXPIRED, 0},
	[AT_CANCEL_REQ] = {"cancel_requested", true, "att-1", "replica-a", true,
			   LEDGER_ATTEMPT_CANCEL_REQUESTED, 4000},
	[AT_CANCEL_REQ_PAST] = {"cancel_requested past lease", true, "att-1", "replica-a", true,
				LEDGER_ATTEMPT_CANCEL_REQUESTED, 0},
	[AT_CANCELLED] = {"cancelled", true, "att-1", "replica-a", true, LEDGER_ATTEMPT_CANCELLED,
			  5000},
	[AT_DEAD] = {"dead", true, "att-1", "replica-a", true, LEDGER_ATTEMPT_DEAD, 5000},
	[AT_SUPERSEDED] = {"superseded", true, "att-1", "replica-a", true,
			   LEDGER_ATTEMPT_SUPERSEDED, 5000},
	[AT_FINISHED] = {"finished", true, "att-1", "replica-a", true, LEDGER_ATTEMPT_FINISHED,
			 5000},
	[AT_FAILED] = {"failed", true, "att-1", "replica-a", true, LEDGER_ATTEMPT_FAILED, 5000},
	[AT_NOREV] = {"live, no rev named", true, "att-1", "replica-a", false, LEDGER_ATTEMPT_LIVE,
		      5000},
	[AT_NOREPLICA] = {"live, no replica", true, "att-1", "", true, LEDGER_ATTEMPT_LIVE, 5000},
	[AT_LIVE2] = {"att-2 live", true, "att-2", "replica-b", true, LEDGER_ATTEMPT_LIVE, 5000},
};

static void make_request(int kind, struct ledger_request *r)
{
	memset(r, 0, sizeof(*r));
	r->exists = requests[kind].exists;
	r->status = requests[kind].status;
	r->first_delta_sent = requests[kind].delta;
	r->delivered_output_tokens = requests[kind].delta ? 37 : 0;
	r->attempt_count = requests[kind].count;
	r->max_attempts = requests[kind].max_attempts;
	strcpy(r->model_revision, requests[kind].revision);
}

static void make_attempt(int kind, struct ledger_attempt *a)
{
	memset(a, 0, sizeof(*a));
	if (!attempts[kind].exists)
		return;
	a->exists = true;
	strcpy(a->attempt_id, attempts[kind].id);
	a->epoch = strcmp(attempts[kind].id, "att-2") == 0 ? 2 : 1;
	strcpy(a->replica, attempts[kind].replica);
	strcpy(a->model_revision, "rev-1");
	a->revision_given = attempts[kind].revision_given;
	a->state = attempts[kind].state;
	a->lease_ms_left = attempts[kind].lease;
	a->is_retry = a->epoch > 1;
}

static const char *const create_names[] = {
	"REPEATED",          "REQUEST_MISMATCH",      "FIRST_DELTA_SENT",
	"REQUEST_CLOSED",    "BUDGET_EXHAUSTED",      "REVISION_MISMATCH",
	"SOURCE_NOT_FENCED", "TOOL_CALL_IN_PROGRESS", "TOOL_OUTCOME_UNKNOWN",
	"CREATED",
};

#define CNAME(o) ((size_t)(o) < N(create_names) ? create_names[(size_t)(o)] : "(out of range)")
#define STR(s) ((s) != NULL ? (s) : "NULL")

static bool same_str(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/* --- POST attempts --- */

struct create_row {
	const char *what;
	int req;    /* enum request_kind */
	int same;   /* enum attempt_kind: the attempt with the body's attempt_id */
	int newest; /* enum attempt_kind: the request's newest attempt */
	const char *replica, *revision;
	int64_t lease_ms, max_attempts;
	int64_t held, unknown;             /* the request's tool calls */
	int64_t win_attempts, win_retries; /* the tenant's window */
	bool same_revision;                /* policy require_same_revision */
	enum ledger_create_outcome want;   /* and, for the 409s that wait: */
	int64_t retry_after_ms;            /* and, for CREATED: */
	bool is_retry, reopen, supersede;
	int64_t max;
	const char *revision_out;
};

#define C(o) LEDGER_CREATE_##o
#define REFUSED(o) C(o), 0, false, false, false, 0, NULL
#define WAITS(o, ms) C(o), ms, false, false, false, 0, NULL
#define CREATED(retry, reopen, supersede, max, rev)                                                \
	C(CREATED), 0, retry, reopen, supersede, max, rev
#define FIRST(max, rev) CREATED(false, false, false, max, rev)
#define RETRY(supersede, max, rev) CREATED(true, false, supersede, max, rev)
#define REOPEN(supersede, max, rev) CREATED(true, true, supersede, max, rev)
/* The body of the attempt the fixtures hold, and of a new one. */
#define SAME_BODY "replica-a", "rev-1", 30000, 0
#define NEW_BODY "replica-b", NULL, 30000, 0
#define NOCALLS 0, 0
#define WIN0 100, 0
#define STRICT true
#define LAX false

static const struct create_row create_rows[] = {
	/* 200: the same attempt_id with the same body, before anything else */
	{"same body", RQ_OPEN, AT_LIVE, AT_LIVE, SAME_BODY, NOCALLS, WIN0, STRICT,
	 REFUSED(REPEATED)},
	{"same body, no revision either time", RQ_OPEN, AT_NOREV, AT_NOREV, "replica-a", NULL,
	 30000, 0, NOCALLS, WIN0, STRICT, REFUSED(REPEATED)},
	{"same body, no replica either time", RQ_OPEN, AT_NOREPLICA, AT_NOREPLICA, NULL, "rev-1",
	 30000, 0, NOCALLS, WIN0, STRICT, REFUSED(REPEATED)},
	{"same replica and revision, other lease", RQ_OPEN, AT_LIVE, AT_LIVE, "replica-a", "rev-1",
	 60000, 0, NOCALLS, WIN0, STRICT, REFUSED(REPEATED)},
	{"same replica and revision, max_attempts named", RQ_OPEN, AT_LIVE, AT_LIVE, "replica-a",
	 "rev-1", 30000, 2, NOCALLS, WIN0, STRICT, REFUSED(REPEATED)},
	{"same body, request completed", RQ_COMPLETED_DELTA, AT_FINISHED, AT_FINISHED, SAME_BODY,
	 NOCALLS, WIN0, STRICT, REFUSED(REPEATED)},
	{"same body, delta sent", RQ_DELTA, AT_LIVE, AT_LIVE, SAME_BODY, NOCALLS, WIN0, STRICT,
	 REFUSED(REPEATED)},
	{"same body, budget spent", RQ_OPEN_MAX, AT_LIVE, AT_LIVE, SAME_BODY, NOCALLS, 10, 3,
	 STRICT, REFUSED(REPEATED)},
	{"same body, an older attempt", RQ_OPEN_MAX, AT_DEAD, AT_LIVE2, SAME_BODY, NOCALLS, WIN0,
	 STRICT, REFUSED(REPEATED)},
	{"same body, calls held and unknown", RQ_OPEN, AT_LIVE, AT_LIVE, SAME_BODY, 8000, 1, WIN0,
	 STRICT, REFUSED(REPEATED)},
	{"same body, abandoned", RQ_ABANDONED, AT_CANCELLED, AT_CANCELLED, SAME_BODY, NOCALLS, WIN0,
	 STRICT, REFUSED(REPEATED)},
	/* 422: the same attempt_id with another replica or revision */
	{"other replica", RQ_OPEN, AT_LIVE, AT_LIVE, "replica-b", "rev-1", 30000, 0, NOCALLS, WIN0,
	 STRICT, REFUSED(REQUEST_MISMATCH)},
	{"other revision", RQ_OPEN, AT_LIVE, AT_LIVE, "replica-a", "rev-2", 30000, 0, NOCALLS, WIN0,
	 STRICT, REFUSED(REQUEST_MISMATCH)},
	{"revision named, none the first time", RQ_OPEN, AT_NOREV, AT_NOREV, "replica-a", "rev-2",
	 30000, 0, NOCALLS, WIN0, STRICT, REFUSED(REQUEST_MISMATCH)},
	{"revision omitted, named the first time", RQ_OPEN, AT_LIVE, AT_LIVE, "replica-a", NULL,
	 30000, 0, NOCALLS, WIN0, STRICT, REFUSED(REQUEST_MISMATCH)},
	{"replica omitted, named the first time", RQ_OPEN, AT_LIVE, AT_LIVE, NULL, "rev-1", 30000,
	 0, NOCALLS, WIN0, STRICT, REFUSED(REQUEST_MISMATCH)},
	{"replica named, none the first time", RQ_OPEN, AT_NOREPLICA, AT_NOREPLICA, "replica-a",
	 "rev-1", 30000, 0, NOCALLS, WIN0, STRICT, REFUSED(REQUEST_MISMATCH)},
	{"other replica, revision policy off", RQ_OPEN, AT_LIVE, AT_LIVE, "replica-b", "rev-1",
	 30000, 0, NOCALLS, WIN0, LAX, REFUSED(REQUEST_MISMATCH)},
	{"other replica, delta sent", RQ_DELTA, AT_LIVE, AT_LIVE, "replica-b", "rev-1", 30000, 0,
	 NOCALLS, WIN0, STRICT, REFUSED(REQUEST_MISMATCH)},
	{"other replica, request terminated", RQ_TERMINATED_DELTA, AT_DEAD, AT_DEAD, "replica-b",
	 "rev-1", 30000, 0, NOCALLS, WIN0, STRICT, REFUSED(REQUEST_MISMATCH)},
	/* 409 first_delta_sent: no new attempt, ever */
	{"delta sent", RQ_DELTA, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, WIN0, STRICT,
	 REFUSED(FIRST_DELTA_SENT)},
	{"delta sent, source live", RQ_DELTA, AT_NONE, AT_LIVE, NEW_BODY, NOCALLS, WIN0, STRICT,
	 REFUSED(FIRST_DELTA_SENT)},
	{"delta sent, terminated", RQ_TERMINATED_DELTA, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, WIN0,
	 STRICT, REFUSED(FIRST_DELTA_SENT)},
	{"delta sent, completed", RQ_COMPLETED_DELTA, AT_NONE, AT_FINISHED, NEW_BODY, NOCALLS, WIN0,
	 STRICT, REFUSED(FIRST_DELTA_SENT)},
	{"delta sent, budget spent", RQ_DELTA, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, 10, 3, STRICT,
	 REFUSED(FIRST_DELTA_SENT)},
	/* 409 request_closed: completed, failed or terminated */
	{"completed", RQ_COMPLETED, AT_NONE, AT_FINISHED, NEW_BODY, NOCALLS, WIN0, STRICT,
	 REFUSED(REQUEST_CLOSED)},
	{"failed", RQ_FAILED, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, WIN0, STRICT,
	 REFUSED(REQUEST_CLOSED)},
	{"terminated", RQ_TERMINATED, AT_NONE, AT_CANCEL_REQ, NEW_BODY, NOCALLS, WIN0, STRICT,
	 REFUSED(REQUEST_CLOSED)},
	{"failed, budget spent", RQ_FAILED, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, 10, 3, STRICT,
	 REFUSED(REQUEST_CLOSED)},
	{"failed, other revision", RQ_FAILED, AT_NONE, AT_DEAD, "replica-b", "rev-2", 30000, 0,
	 NOCALLS, WIN0, STRICT, REFUSED(REQUEST_CLOSED)},
	/* an abandoned request reopens, as a retry within its budget */
	{"abandoned, source acknowledged", RQ_ABANDONED, AT_NONE, AT_CANCELLED, NEW_BODY, NOCALLS,
	 WIN0, STRICT, REOPEN(false, 2, "rev-1")},
	{"abandoned, source expired", RQ_ABANDONED, AT_NONE, AT_EXPIRED, NEW_BODY, NOCALLS, WIN0,
	 STRICT, REOPEN(true, 2, "rev-1")},
	{"abandoned, source past its lease", RQ_ABANDONED, AT_NONE, AT_CANCEL_REQ_PAST, NEW_BODY,
	 NOCALLS, WIN0, STRICT, REOPEN(false, 2, "rev-1")},
	{"abandoned, source not fenced", RQ_ABANDONED, AT_NONE, AT_CANCEL_REQ, NEW_BODY, NOCALLS,
	 WIN0, STRICT, WAITS(SOURCE_NOT_FENCED, 4000)},
	{"abandoned, max_attempts reached", RQ_ABANDONED_MAX, AT_NONE, AT_CANCELLED, NEW_BODY,
	 NOCALLS, WIN0, STRICT, REFUSED(BUDGET_EXHAUSTED)},
	{"abandoned, pool spent", RQ_ABANDONED, AT_NONE, AT_CANCELLED, NEW_BODY, NOCALLS, 100, 20,
	 STRICT, REFUSED(BUDGET_EXHAUSTED)},
	{"abandoned, other revision", RQ_ABANDONED, AT_NONE, AT_CANCELLED, "replica-b", "rev-2",
	 30000, 0, NOCALLS, WIN0, STRICT, REFUSED(REVISION_MISMATCH)},
	{"abandoned, call held", RQ_ABANDONED, AT_NONE, AT_CANCELLED, NEW_BODY, 6000, 0, WIN0,
	 STRICT, WAITS(TOOL_CALL_IN_PROGRESS, 6000)},
	{"abandoned, outcome unknown", RQ_ABANDONED, AT_NONE, AT_CANCELLED, NEW_BODY, 0, 1, WIN0,
	 STRICT, REFUSED(TOOL_OUTCOME_UNKNOWN)},
	/* 409 retry_budget_exhausted: max_attempts, or the pool for retries only */
	{"attempt 2 of 2", RQ_OPEN_MAX, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, WIN0, STRICT,
	 REFUSED(BUDGET_EXHAUSTED)},
	{"attempt 4 of 5", RQ_OPEN_4OF5, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, WIN0, STRICT,
	 RETRY(false, 5, "rev-1")},
	{"attempt 5 of 5", RQ_OPEN_5OF5, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, WIN0, STRICT,
	 REFUSED(BUDGET_EXHAUSTED)},
	{"attempt 2 of 2, a larger max_attempts named", RQ_OPEN_MAX, AT_NONE, AT_DEAD, "replica-b",
	 NULL, 30000, 5, NOCALLS, WIN0, STRICT, REFUSED(BUDGET_EXHAUSTED)},
	{"pool 20 of 100", RQ_OPEN, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, 100, 20, STRICT,
	 REFUSED(BUDGET_EXHAUSTED)},
	{"pool 19 of 100", RQ_OPEN, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, 100, 19, STRICT,
	 RETRY(false, 2, "rev-1")},
	{"pool 3 of 10", RQ_OPEN, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, 10, 3, STRICT,
	 REFUSED(BUDGET_EXHAUSTED)},
	{"pool 2 of 10", RQ_OPEN, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, 10, 2, STRICT,
	 RETRY(false, 2, "rev-1")},
	{"first attempt, pool spent", RQ_FRESH, AT_NONE, AT_NONE, NEW_BODY, NOCALLS, 100, 100,
	 STRICT, FIRST(2, NULL)},
	{"first attempt, new request, pool spent", RQ_NEW, AT_NONE, AT_NONE, NEW_BODY, NOCALLS, 10,
	 3, STRICT, FIRST(2, NULL)},
	{"budget before revision", RQ_OPEN_MAX, AT_NONE, AT_DEAD, "replica-b", "rev-2", 30000, 0,
	 NOCALLS, WIN0, STRICT, REFUSED(BUDGET_EXHAUSTED)},
	{"budget before the fence", RQ_OPEN, AT_NONE, AT_LIVE, NEW_BODY, 8000, 1, 10, 3, STRICT,
	 REFUSED(BUDGET_EXHAUSTED)},
	/* 409 revision_mismatch: only with the policy and a request revision */
	{"other revision", RQ_OPEN, AT_NONE, AT_DEAD, "replica-b", "rev-2", 30000, 0, NOCALLS, WIN0,
	 STRICT, REFUSED(REVISION_MISMATCH)},
	{"other revision, policy off", RQ_OPEN, AT_NONE, AT_DEAD, "replica-b", "rev-2", 30000, 0,
	 NOCALLS, WIN0, LAX, RETRY(false, 2, "rev-2")},
	{"a revision, the request has none", RQ_OPEN_NOREV, AT_NONE, AT_DEAD, "replica-b", "rev-2",
	 30000, 0, NOCALLS, WIN0, STRICT, RETRY(false, 2, "rev-2")},
	{"the same revision named", RQ_OPEN, AT_NONE, AT_DEAD, "replica-b", "rev-1", 30000, 0,
	 NOCALLS, WIN0, STRICT, RETRY(false, 2, "rev-1")},
	{"revision omitted: the request's", RQ_OPEN, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, WIN0,
	 STRICT, RETRY(false, 2, "rev-1")},
	{"revision omitted, the request has none", RQ_OPEN_NOREV, AT_NONE, AT_DEAD, NEW_BODY,
	 NOCALLS, WIN0, STRICT, RETRY(false, 2, NULL)},
	{"revision before the fence", RQ_OPEN, AT_NONE, AT_LIVE, "replica-b", "rev-2", 30000, 0,
	 8000, 1, WIN0, STRICT, REFUSED(REVISION_MISMATCH)},
	/* 409 source_not_fenced: live, or revoked and neither acknowledged nor past its lease */
	{"newest live", RQ_OPEN, AT_NONE, AT_LIVE, NEW_BODY, NOCALLS, WIN0, STRICT,
	 WAITS(SOURCE_NOT_FENCED, 5000)},
	{"newest live, 1 ms left", RQ_OPEN, AT_NONE, AT_LIVE_1MS, NEW_BODY, NOCALLS, WIN0, STRICT,
	 WAITS(SOURCE_NOT_FENCED, 1)},
	{"newest cancel requested", RQ_OPEN, AT_NONE, AT_CANCEL_REQ, NEW_BODY, NOCALLS, WIN0,
	 STRICT, WAITS(SOURCE_NOT_FENCED, 4000)},
	{"newest live, a call held longer", RQ_OPEN, AT_NONE, AT_LIVE, NEW_BODY, 8000, 0, WIN0,
	 STRICT, WAITS(SOURCE_NOT_FENCED, 5000)},
	{"newest live, outcome unknown", RQ_OPEN, AT_NONE, AT_LIVE, NEW_BODY, 0, 1, WIN0, STRICT,
	 WAITS(SOURCE_NOT_FENCED, 5000)},
	{"newest expired", RQ_OPEN, AT_NONE, AT_EXPIRED, NEW_BODY, NOCALLS, WIN0, STRICT,
	 RETRY(true, 2, "rev-1")},
	{"newest cancel requested, past its lease", RQ_OPEN, AT_NONE, AT_CANCEL_REQ_PAST, NEW_BODY,
	 NOCALLS, WIN0, STRICT, RETRY(false, 2, "rev-1")},
	{"newest cancelled", RQ_OPEN, AT_NONE, AT_CANCELLED, NEW_BODY, NOCALLS, WIN0, STRICT,
	 RETRY(false, 2, "rev-1")},
	{"newest dead", RQ_OPEN, AT_NONE, AT_DEAD, NEW_BODY, NOCALLS, WIN0, STRICT,
	 RETRY(false, 2, "rev-1")},
	{"newest superseded", RQ_OPEN, AT_NONE, AT_SUPERSEDED, NEW_BODY, NOCALLS, WIN0, STRICT,
	 RETRY(false, 2, "rev-1")},
	{"newest finished", RQ_OPEN, AT_NONE, AT_FINISHED, NEW_BODY, NOCALLS, WIN0, STRICT,
	 RETRY(false, 2, "rev-1")},
	{"newest failed", RQ_OPEN, AT_NONE, AT_FAILED, NEW_BODY, NOCALLS, WIN0, STRICT,
	 RETRY(false, 2, "rev-1")},
	/* 409 tool_call_in_progress: a call of the newest attempt still held */
	{"a call held", RQ_OPEN, AT_NONE, AT_DEAD, NEW_BODY, 8000, 0, WIN0, STRICT,
	 WAITS(TOOL_CALL_IN_PROGRESS, 8000)},
	{"a call held 1 ms", RQ_OPEN, AT_NONE, AT_EXPIRED, NEW_BODY, 1, 0, WIN0, STRICT,
	 WAITS(TOOL_CALL_IN_PROGRESS, 1)},
	{"a call held, revoked source past its lease", RQ_OPEN, AT_NONE, AT_CANCEL_REQ_PAST,
	 NEW_BODY, 3000, 0, WIN0, STRICT, WAITS(TOOL_CALL_IN_PROGRESS, 3000)},
	{"a call held, outcome unknown", RQ_OPEN, AT_NONE, AT_CANCELLED, NEW_BODY, 3000, 2, WIN0,
	 STRICT, WAITS(TOOL_CALL_IN_PROGRESS, 3000)},
	/* 409 tool_outcome_unknown */
	{"outcome unknown", RQ_OPEN, AT_NONE, AT_DEAD, NEW_BODY, 0, 1, WIN0, STRICT,
	 REFUSED(TOOL_OUTCOME_UNKNOWN)},
	{"outcomes unknown, expired source", RQ_OPEN, AT_NONE, AT_EXPIRED, NEW_BODY, 0, 3, WIN0,
	 STRICT, REFUSED(TOOL_OUTCOME_UNKNOWN)},
	{"no unknown outcome (dedupe-safe)", RQ_OPEN, AT_NONE, AT_DEAD, NEW_BODY, 0, 0, WIN0,
	 STRICT, RETRY(false, 2, "rev-1")},
	/* 201: the first attempt fixes max_attempts; later ones keep it */
	{"first, defaults", RQ_FRESH, AT_NONE, AT_NONE, NEW_BODY, NOCALLS, WIN0, STRICT,
	 FIRST(2, NULL)},
	{"first, new request", RQ_NEW, AT_NONE, AT_NONE, NEW_BODY, NOCALLS, WIN0, STRICT,
	 FIRST(2, NULL)},
	{"first, max_attempts 5", RQ_FRESH, AT_NONE, AT_NONE, "replica-a", NULL, 30000, 5, NOCALLS,
	 WIN0, STRICT, FIRST(5, NULL)},
	{"first, max_attempts 1", RQ_FRESH, AT_NONE, AT_NONE, "replica-a", NULL, 30000, 1, NOCALLS,
	 WIN0, STRICT, FIRST(1, NULL)},
	{"first, a revision", RQ_FRESH, AT_NONE, AT_NONE, "replica-a", "rev-9", 30000, 0, NOCALLS,
	 WIN0, STRICT, FIRST(2, "rev-9")},
	{"first, no replica", RQ_FRESH, AT_NONE, AT_NONE, NULL, "rev-1", 30000, 3, NOCALLS, WIN0,
	 LAX, FIRST(3, "rev-1")},
	{"retry keeps max_attempts 5", RQ_OPEN_1OF5, AT_NONE, AT_DEAD, "replica-b", NULL, 30000, 2,
	 NOCALLS, WIN0, STRICT, RETRY(false, 5, "rev-1")},
	{"retry keeps max_attempts 2", RQ_OPEN, AT_NONE, AT_DEAD, "replica-b", NULL, 30000, 5,
	 NOCALLS, WIN0, STRICT, RETRY(false, 2, "rev-1")},
	{"retry, another lease", RQ_OPEN, AT_NONE, AT_FAILED, "replica-b", NULL, 600000, 0, NOCALLS,
	 WIN0, STRICT, RETRY(false, 2, "rev-1")},
};

static void describe_create(const struct create_row *row, char *buf, size_t len)
{
	snprintf(buf, len,
		 "%s: request %s, same id %s, newest %s; body replica %s revision %s "
		 "lease %lld max %lld; held %lld unknown %lld; window %lld retries of %lld; %s",
		 row->what, requests[row->req].name, attempts[row->same].name,
		 attempts[row->newest].name, STR(row->replica), STR(row->revision),
		 (long long)row->lease_ms, (long long)row->max_attempts, (long long)row->held,
		 (long long)row->unknown, (long long)row->win_retries, (long long)row->win_attempts,
		 row->same_revision ? "same revision required" : "any revision");
}

static bool check_create(size_t i, const struct create_row *row)
{
	struct ledger_policy p;
	struct ledger_request r;
	struct ledger_attempt same, newest;
	struct ledger_calls_summary calls = {.held_by_newest_ms = row->held,
					     .unknown = row->unknown};
	struct ledger_budget budget = {.attempts = row->win_attempts, .retries = row->win_retries};
	struct ledger_attempt_request in;
	struct ledger_create_decision d;
	char desc[600];
	bool ok = true;

	ledger_policy_default(&p);
	p.require_same_revision = row->same_revision;
	make_request(row->req, &r);
	make_attempt(row->same, &same);
	make_attempt(row->newest, &newest);
	memset(&in, 0, sizeof(in));
	in.attempt_id = same.exists ? same.attempt_id : "att-new";
	in.replica = row->replica;
	in.model_revision = row->revision;
	in.lease_ms = row->lease_ms;
	in.max_attempts = row->max_attempts;
	memset(&d, 0, sizeof(d));
	ledger_attempt_decide_create(&in, &r, &same, &newest, &calls, &budget, &p, &d);
	describe_create(row, desc, sizeof(desc));

	if (d.outcome != row->want) {
		print_error("create row %zu (%s): %s, want %s\n", i, desc, CNAME(d.outcome),
			    CNAME(row->want));
		return false;
	}
	if ((row->want == C(SOURCE_NOT_FENCED) || row->want == C(TOOL_CALL_IN_PROGRESS)) &&
	    d.retry_after_ms != row->retry_after_ms) {
		print_error("create row %zu (%s): retry_after_ms %lld, want %lld\n", i, desc,
			    (long long)d.retry_after_ms, (long long)row->retry_after_ms);
		ok = false;
	}
	if (row->want != C(CREATED))
		return ok;
	if (d.is_retry != row->is_retry || d.reopen != row->reopen ||
	    d.supersede_newest != row->supersede) {
		print_error("create row %zu (%s): is_retry %d reopen %d supersede %d, "
			    "want %d %d %d\n",
			    i, desc, d.is_retry, d.reopen, d.supersede_newest, row->is_retry,
			    row->reopen, row->supersede);
		ok = false;
	}
	if (d.max_attempts != row->max) {
		print_error("create row %zu (%s): max_attempts %lld, want %lld\n", i, desc,
			    (long long)d.max_attempts, (long long)row->max);
		ok = false;
	}
	if (!same_str(d.model_revision, row->revision_out)) {
		print_error("create row %zu (%s): model_revision %s, want %s\n", i, desc,
			    STR(d.model_revision), STR(row->revision_out));
		ok = false;
	}
	return ok;
}

static void test_attempt_create_table(void **state)
{
	size_t failed = 0, first = 0;

	(void)state;
	for (size_t i = 0; i < N(create_rows); i++) {
		if (!check_create(i, &create_rows[i]) && failed++ == 0)
			first = i;
	}
	if (failed > 0) {
		char desc[600];

		describe_create(&create_rows[first], desc, sizeof(desc));
		fail_msg("%zu of %zu create rows failed; first: row %zu (%s)", failed,
			 N(create_rows), first, desc);
	}
}

/* Every refusal has its API code; REPEATED and CREATED have none. */
static void test_attempt_create_codes(void **state)
{
	(void)state;
	assert_null(ledger_attempt_create_code(C(REPEATED)));
	assert_string_equal(ledger_attempt_create_code(C(REQUEST_MISMATCH)), "request_mismatch");
	assert_string_equal(ledger_attempt_create_code(C(FIRST_DELTA_SENT)), "first_delta_sent");
	assert_string_equal(ledger_attempt_create_code(C(REQUEST_CLOSED)), "request_closed");
	assert_string_equal(ledger_attempt_create_code(C(BUDGET_EXHAUSTED)),
			    "retry_budget_exhausted");
	assert_string_equal(ledger_attempt_create_code(C(REVISION_MISMATCH)), "revision_mismatch");
	assert_string_equal(ledger_attempt_create_code(C(SOURCE_NOT_FENCED)), "source_not_fenced");
	assert_string_equal(ledger_attempt_create_code(C(TOOL_CALL_IN_PROGRESS)),
			    "tool_call_in_progress");
	assert_string_equal(ledger_attempt_create_code(C(TOOL_OUTCOME_UNKNOWN)),
			    "tool_outcome_unknown");
	assert_null(ledger_attempt_create_code(C(CREATED)));
}

/* --- an attempt's rights, standing, blocking time, renew --- */

#define OP_DONE LEDGER_ATTEMPT_OP_DONE
#define OP_REPEATED LEDGER_ATTEMPT_OP_REPEATED
#define OP_FENCED LEDGER_ATTEMPT_OP_FENCED
#define ST_RIGHTS LEDGER_STANDING_HAS_RIGHTS
#define ST_FENCED LEDGER_STANDING_FENCED
#define ST_NOT_FOUND LEDGER_STANDING_NOT_FOUND

struct rights_row {
	int req; /* enum request_kind */
	int att; /* enum attempt_kind */
	bool rights;
	enum ledger_standing standing;
	int64_t blocking_ms;
	enum ledger_attempt_op_outcome renew;
};

static const struct rights_row rights_rows[] = {
	{RQ_OPEN, AT_LIVE, true, ST_RIGHTS, 5000, OP_DONE},
	{RQ_OPEN, AT_LIVE_1MS, true, ST_RIGHTS, 1, OP_DONE},
	{RQ_OPEN, AT_NOREV, true, ST_RIGHTS, 5000, OP_DONE},
	{RQ_DELTA, AT_LIVE, true, ST_RIGHTS, 5000, OP_DONE},
	{RQ_OPEN_MAX, AT_LIVE, true, ST_RIGHTS, 5000, OP_DONE},
	/* a closed request takes every attempt's rights; a live one still blocks */
	{RQ_COMPLETED, AT_LIVE, false, ST_FENCED, 5000, OP_FENCED},
	{RQ_COMPLETED_DELTA, AT_LIVE, false, ST_FENCED, 5000, OP_FENCED},
	{RQ_FAILED, AT_LIVE, false, ST_FENCED, 5000, OP_FENCED},
	{RQ_TERMINATED, AT_LIVE, false, ST_FENCED, 5000, OP_FENCED},
	{RQ_TERMINATED_DELTA, AT_LIVE, false, ST_FENCED, 5000, OP_FENCED},
	{RQ_ABANDONED, AT_LIVE, false, ST_FENCED, 5000, OP_FENCED},
	/* only live within its lease has rights; only it, and a revoke in its lease, block */
	{RQ_OPEN, AT_EXPIRED, false, ST_FENCED, 0, OP_FENCED},
	{RQ_OPEN, AT_CANCEL_REQ, false, ST_FENCED, 4000, OP_FENCED},
	{RQ_OPEN, AT_CANCEL_REQ_PAST, false, ST_FENCED, 0, OP_FENCED},
	{RQ_OPEN, AT_CANCELLED, false, ST_FENCED, 0, OP_FENCED},
	{RQ_OPEN, AT_DEAD, false, ST_FENCED, 0, OP_FENCED},
	{RQ_OPEN, AT_SUPERSEDED, false, ST_FENCED, 0, OP_FENCED},
	{RQ_OPEN, AT_FINISHED, false, ST_FENCED, 0, OP_FENCED},
	{RQ_COMPLETED, AT_FINISHED, false, ST_FENCED, 0, OP_FENCED},
	{RQ_OPEN, AT_FAILED, false, ST_FENCED, 0, OP_FENCED},
	{RQ_ABANDONED, AT_CANCEL_REQ, false, ST_FENCED, 4000, OP_FENCED},
	/* no such attempt */
	{RQ_OPEN, AT_NONE, false, ST_NOT_FOUND, 0, OP_FENCED},
};

static void test_attempt_rights_table(void **state)
{
	size_t failed = 0;

	(void)state;
	for (size_t i = 0; i < N(rights_rows); i++) {
		const struct rights_row *row = &rights_rows[i];
		struct ledger_request r;
		struct ledger_attempt a;
		bool rights;
		enum ledger_standing standing;
		int64_t blocking;

		make_request(row->req, &r);
		make_attempt(row->att, &a);
		rights = ledger_attempt_has_rights(&r, &a);
		standing = ledger_attempt_standing(&r, &a);
		blocking = ledger_attempt_blocking_ms(&a);
		if (rights != row->rights || standing != row->standing ||
		    blocking != row->blocking_ms) {
			print_error("rights row %zu (request %s, attempt %s): rights %d "
				    "standing %d blocking %lld, want %d %d %lld\n",
				    i, requests[row->req].name, attempts[row->att].name, rights,
				    standing, (long long)blocking, row->rights, row->standing,
				    (long long)row->blocking_ms);
			failed++;
			continue;
		}
		if (a.exists && ledger_attempt_decide_renew(&r, &a) != row->renew) {
			print_error("rights row %zu (request %s, attempt %s): renew %d, want %d\n",
				    i, requests[row->req].name, attempts[row->att].name,
				    ledger_attempt_decide_renew(&r, &a), row->renew);
			failed++;
		}
	}
	if (failed > 0)
		fail_msg("%zu of %zu rights rows failed", failed, N(rights_rows));
}

/* --- finish --- */

struct finish_row {
	int req, att;
	bool completed; /* the outcome asked */
	enum ledger_attempt_op_outcome want;
};

static const struct finish_row finish_rows[] = {
	/* with rights */
	{RQ_OPEN, AT_LIVE, true, OP_DONE},
	{RQ_OPEN, AT_LIVE, false, OP_DONE},
	{RQ_DELTA, AT_LIVE, true, OP_DONE},
	{RQ_DELTA, AT_LIVE_1MS, false, OP_DONE},
	/* the same finish again: repeated, though it has no rights any more */
	{RQ_COMPLETED_DELTA, AT_FINISHED, true, OP_REPEATED},
	{RQ_COMPLETED, AT_FINISHED, true, OP_REPEATED},
	{RQ_OPEN, AT_FAILED, false, OP_REPEATED},
	{RQ_FAILED, AT_FAILED, false, OP_REPEATED},
	{RQ_TERMINATED_DELTA, AT_FAILED, false, OP_REPEATED},
	/* another outcome without rights */
	{RQ_COMPLETED_DELTA, AT_FINISHED, false, OP_FENCED},
	{RQ_OPEN, AT_FAILED, true, OP_FENCED},
	{RQ_FAILED, AT_FAILED, true, OP_FENCED},
	/* no rights */
	{RQ_OPEN, AT_EXPIRED, true, OP_FENCED},
	{RQ_OPEN, AT_EXPIRED, false, OP_FENCED},
	{RQ_OPEN, AT_CANCEL_REQ, true, OP_FENCED},
	{RQ_OPEN, AT_CANCEL_REQ, false, OP_FENCED},
	{RQ_OPEN, AT_CANCELLED, true, OP_FENCED},
	{RQ_OPEN, AT_CANCELLED, false, OP_FENCED},
	{RQ_OPEN, AT_DEAD, true, OP_FENCED},
	{RQ_OPEN, AT_DEAD, false, OP_FENCED},
	{RQ_OPEN, AT_SUPERSEDED, true, OP_FENCED},
	{RQ_OPEN, AT_SUPERSEDED, false, OP_FENCED},
	{RQ_TERMINATED_DELTA, AT_LIVE, true, OP_FENCED},
	{RQ_TERMINATED, AT_LIVE, false, OP_FENCED},
	{RQ_ABANDONED, AT_LIVE, true, OP_FENCED},
	{RQ_FAILED, AT_LIVE, false, OP_FENCED},
	{RQ_COMPLETED, AT_LIVE, true, OP_FENCED},
};

static void test_attempt_finish_table(void **state)
{
	size_t failed = 0;

	(void)state;
	for (size_t i = 0; i < N(finish_rows); i++) {
		const struct finish_row *row = &finish_rows[i];
		struct ledger_request r;
		struct ledger_attempt a;
		enum ledger_attempt_op_outcome got;

		make_request(row->req, &r);
		make_attempt(row->att, &a);
		got = ledger_attempt_decide_finish(&r, &a, row->completed);
		if (got != row->want) {
			print_error("finish row %zu (request %s, attempt %s, %s): %d, want %d\n", i,
				    requests[row->req].name, attempts[row->att].name,
				    row->completed ? "completed" : "failed", got, row->want);
			failed++;
		}
	}
	if (failed > 0)
		fail_msg("%zu of %zu finish rows failed", failed, N(finish_rows));
}

/* --- cancel and cancel-ack --- */

struct cancel_row {
	int att;
	bool ack;
	enum ledger_attempt_op_outcome want;
};

static const struct cancel_row cancel_rows[] = {
	{AT_LIVE, false, OP_DONE},
	{AT_LIVE_1MS, false, OP_DONE},
	{AT_EXPIRED, false, OP_DONE},
	{AT_CANCEL_REQ, false, OP_REPEATED},
	{AT_CANCEL_REQ_PAST, false, OP_REPEATED},
	{AT_CANCELLED, false, OP_REPEATED},
	{AT_DEAD, false, OP_REPEATED},
	{AT_SUPERSEDED, false, OP_REPEATED},
	{AT_FINISHED, false, OP_REPEATED},
	{AT_FAILED, false, OP_REPEATED},
	{AT_LIVE, true, OP_DONE},
	{AT_LIVE_1MS, true, OP_DONE},
	{AT_EXPIRED, true, OP_DONE},
	{AT_CANCEL_REQ, true, OP_DONE},
	{AT_CANCEL_REQ_PAST, true, OP_DONE},
	{AT_CANCELLED, true, OP_REPEATED},
	{AT_DEAD, true, OP_REPEATED},
	{AT_SUPERSEDED, true, OP_REPEATED},
	{AT_FINISHED, true, OP_REPEATED},
	{AT_FAILED, true, OP_REPEATED},
};

static void test_attempt_cancel_table(void **state)
{
	size_t failed = 0;

	(void)state;
	for (size_t i = 0; i < N(cancel_rows); i++) {
		const struct cancel_row *row = &cancel_rows[i];
		struct ledger_attempt a;
		enum ledger_attempt_op_outcome got;

		make_attempt(row->att, &a);
		got = ledger_attempt_decide_cancel(&a, row->ack);
		if (got != row->want) {
			print_error("cancel row %zu (attempt %s, %s): %d, want %d\n", i,
				    attempts[row->att].name, row->ack ? "cancel-ack" : "cancel",
				    got, row->want);
			failed++;
		}
	}
	if (failed > 0)
		fail_msg("%zu of %zu cancel rows failed", failed, N(cancel_rows));
}

/* --- the pool-wide retry budget --- */

struct budget_row {
	unsigned percent, min_retries; /* the policy's; the defaults are 20 and 3 */
	int64_t attempts, retries;     /* the window's */
	bool allows;
};

static const struct budget_row budget_rows[] = {
	{20, 3, 0, 0, true},
	{20, 3, 0, 2, true},
	{20, 3, 0, 3, false},
	{20, 3, 3, 3, false},
	{20, 3, 10, 2, true},
	{20, 3, 10, 3, false},
	{20, 3, 15, 2, true},
	{20, 3, 15, 3, false},
	{20, 3, 20, 3, true}, /* 20% of 20 is 4 */
	{20, 3, 20, 4, false},
	{20, 3, 100, 19, true},
	{20, 3, 100, 20, false},
	{20, 3, 100, 21, false},
	{20, 3, 1000, 199, true},
	{20, 3, 1000, 200, false},
	/* a fraction counts: 20% of 16 is 3.2, of 101 is 20.2 */
	{20, 3, 16, 3, true},
	{20, 3, 16, 4, false},
	{20, 3, 101, 20, true},
	{20, 3, 101, 21, false},
	/* other policies */
	{0, 0, 0, 0, false},
	{0, 0, 100, 0, false},
	{0, 1, 100, 0, true},
	{0, 1, 100, 1, false},
	{100, 0, 10, 9, true},
	{100, 0, 10, 10, false},
	{50, 0, 1, 0, true}, /* 50% of 1 is 0.5 */
	{50, 0, 0, 0, false},
	{20, 5, 10, 4, true},
	{20, 5, 10, 5, false},
};

static void test_attempt_budget_allows_retry(void **state)
{
	size_t failed = 0;

	(void)state;
	for (size_t i = 0; i < N(budget_rows); i++) {
		const struct budget_row *row = &budget_rows[i];
		struct ledger_policy p;
		struct ledger_budget b = {.attempts = row->attempts, .retries = row->retries};
		bool got;

		ledger_policy_default(&p);
		p.budget_percent = row->percent;
		p.budget_min_retries = row->min_retries;
		got = ledger_attempt_budget_allows_retry(&p, &b);
		if (got != row->allows) {
			print_error("budget row %zu (%u%%, min %u; %lld retries of %lld attempts): "
				    "%s, want %s\n",
				    i, row->percent, row->min_retries, (long long)row->retries,
				    (long long)row->attempts, got ? "allows" : "refuses",
				    row->allows ? "allows" : "refuses");
			failed++;
		}
	}
	if (failed > 0)
		fail_msg("%zu of %zu budget rows failed", failed, N(budget_rows));
}

/*
 * API 1.1 in row 2: an input_sha256 other than the request's is
 * request_mismatch before anything else but a repeat of the same body; a
 * repeat with another gateway is another body.
 */
static void test_attempt_create_input_and_gateway(void **state)
{
	static const char sha_a[] =
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
	static const char sha_b[] =
		"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
	static const struct {
		const char *what;
		int req, same;
		const char *request_sha, *sha, *gateway, *same_gateway;
		enum ledger_create_outcome want;
		bool input_mismatch;
	} rows[] = {
		{"other input", RQ_OPEN, AT_NONE, sha_a, sha_b, NULL, "", C(REQUEST_MISMATCH),
		 true},
		{"same input", RQ_OPEN, AT_NONE, sha_a, sha_a, NULL, "", C(CREATED), false},
		{"no input named", RQ_OPEN, AT_NONE, sha_a, NULL, NULL, "", C(CREATED), false},
		{"the request has none", RQ_OPEN, AT_NONE, "", sha_b, NULL, "", C(CREATED), false},
		{"other input before first_delta_sent", RQ_DELTA, AT_NONE, sha_a, sha_b, NULL, "",
		 C(REQUEST_MISMATCH), true},
		{"other input before request_closed", RQ_FAILED, AT_NONE, sha_a, sha_b, NULL, "",
		 C(REQUEST_MISMATCH), true},
		{"other input before the budget", RQ_OPEN_MAX, AT_NONE, sha_a, sha_b, NULL, "",
		 C(REQUEST_MISMATCH), true},
		{"same attempt, other input", RQ_OPEN, AT_LIVE, sha_a, sha_b, NULL, "",
		 C(REQUEST_MISMATCH), true},
		{"same attempt, no input named", RQ_OPEN, AT_LIVE, sha_a, NULL, NULL, "",
		 C(REPEATED), false},
		{"same attempt, an input the request lacks", RQ_OPEN, AT_LIVE, "", sha_b, NULL, "",
		 C(REPEATED), false},
		{"same attempt and gateway", RQ_OPEN, AT_LIVE, "", NULL, "gw-1", "gw-1",
		 C(REPEATED), false},
		{"same attempt, other gateway", RQ_OPEN, AT_LIVE, "", NULL, "gw-2", "gw-1",
		 C(REQUEST_MISMATCH), false},
		{"same attempt, gateway dropped", RQ_OPEN, AT_LIVE, "", NULL, NULL, "gw-1",
		 C(REQUEST_MISMATCH), false},
		{"same attempt, gateway added", RQ_OPEN, AT_LIVE, "", NULL, "gw-1", "",
		 C(REQUEST_MISMATCH), false},
		{"other gateway and input: the body first", RQ_OPEN, AT_LIVE, sha_a, sha_b, "gw-2",
		 "gw-1", C(REQUEST_MISMATCH), false},
	};

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		struct ledger_policy p;
		struct ledger_request r;
		struct ledger_attempt same, newest;
		struct ledger_calls_summary calls = {0, 0};
		struct ledger_budget b = {100, 0};
		struct ledger_attempt_request in;
		struct ledger_create_decision d;

		ledger_policy_default(&p);
		make_request(rows[i].req, &r);
		strcpy(r.input_sha256, rows[i].request_sha);
		make_attempt(rows[i].same, &same);
		strcpy(same.gateway, rows[i].same_gateway);
		make_attempt(AT_DEAD, &newest);
		memset(&in, 0, sizeof(in));
		in.attempt_id = same.exists ? same.attempt_id : "att-new";
		in.replica = same.exists ? same.replica : "replica-b";
		in.model_revision = same.exists ? "rev-1" : NULL;
		in.lease_ms = 30000;
		in.input_sha256 = rows[i].sha;
		in.gateway = rows[i].gateway;
		ledger_attempt_decide_create(&in, &r, &same, &newest, &calls, &b, &p, &d);
		if (d.outcome != rows[i].want || d.input_mismatch != rows[i].input_mismatch)
			fail_msg("row %zu (%s): %s input_mismatch %d, want %s %d", i, rows[i].what,
				 CNAME(d.outcome), d.input_mismatch, CNAME(rows[i].want),
				 rows[i].input_mismatch);
		/* the check failover's next_attempt shares: the input alone */
		assert_int_equal(ledger_attempt_input_conflicts(&in, &r),
				 rows[i].sha != NULL && rows[i].request_sha[0] != '\0' &&
					 strcmp(rows[i].sha, rows[i].request_sha) != 0);
	}
}

/* Which budget refused: the request's first (it never comes back), then the pool's. */
static void test_attempt_create_names_the_budget(void **state)
{
	static const struct {
		const char *what;
		int req;
		int64_t win_attempts, win_retries;
		enum ledger_create_outcome want;
		enum ledger_budget_kind budget;
	} rows[] = {
		{"attempt 2 of 2", RQ_OPEN_MAX, 100, 0, C(BUDGET_EXHAUSTED), LEDGER_BUDGET_REQUEST},
		{"attempt 2 of 2, pool spent too", RQ_OPEN_MAX, 10, 3, C(BUDGET_EXHAUSTED),
		 LEDGER_BUDGET_REQUEST},
		{"pool 3 of 10", RQ_OPEN, 10, 3, C(BUDGET_EXHAUSTED), LEDGER_BUDGET_POOL},
		{"abandoned, pool 3 of 10", RQ_ABANDONED, 10, 3, C(BUDGET_EXHAUSTED),
		 LEDGER_BUDGET_POOL},
		{"pool 2 of 10", RQ_OPEN, 10, 2, C(CREATED), LEDGER_BUDGET_NONE},
	};

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		struct ledger_policy p;
		struct ledger_request r;
		struct ledger_attempt same, newest;
		struct ledger_calls_summary calls = {0, 0};
		struct ledger_budget b = {rows[i].win_attempts, rows[i].win_retries};
		struct ledger_attempt_request in = {.attempt_id = "att-new", .lease_ms = 30000};
		struct ledger_create_decision d;

		ledger_policy_default(&p);
		make_request(rows[i].req, &r);
		make_attempt(AT_NONE, &same);
		make_attempt(rows[i].req == RQ_ABANDONED ? AT_CANCELLED : AT_DEAD, &newest);
		ledger_attempt_decide_create(&in, &r, &same, &newest, &calls, &b, &p, &d);
		if (d.outcome != rows[i].want || d.budget != rows[i].budget)
			fail_msg("row %zu (%s): %s budget %d, want %s budget %d", i, rows[i].what,
				 CNAME(d.outcome), (int)d.budget, CNAME(rows[i].want),
				 (int)rows[i].budget);
	}
	assert_string_equal(ledger_attempt_budget_name(LEDGER_BUDGET_REQUEST), "request");
	assert_string_equal(ledger_attempt_budget_name(LEDGER_BUDGET_POOL), "pool");
	assert_null(ledger_attempt_budget_name(LEDGER_BUDGET_NONE));
}

/*
 * When the pool next allows a retry: at the first leaving retry after which
 * the window allows one, never before it, at least 1 ms; the whole window
 * when no leaving does.
 */
static void test_attempt_budget_retry_after(void **state)
{
	/* Each row: the policy, then up to 4 drops (in_ms, attempts, retries), and the answer. */
	static const struct {
		const char *what;
		unsigned percent, min_retries;
		int64_t window_ms;
		size_t n;
		struct ledger_budget_drop drops[4];
		int64_t want;
	} rows[] = {
		{"min 3: the first retry to leave makes room",
		 20,
		 3,
		 10000,
		 2,
		 {{1200, 9, 2}, {4000, 8, 1}},
		 1200},
		{"min 2 of 4 retries: the third to leave",
		 0,
		 2,
		 2000,
		 4,
		 {{100, 3, 3}, {200, 2, 2}, {300, 1, 1}, {400, 0, 0}},
		 300},
		{"20% of 40 attempts, 8 retries: one retry leaving is enough",
		 20,
		 3,
		 10000,
		 1,
		 {{500, 39, 7}},
		 500},
		{"20%, the first leaving takes many attempts with it",
		 20,
		 0,
		 10000,
		 2,
		 {{700, 20, 4}, {900, 10, 1}},
		 900},
		{"a retry leaving now still counts as 1 ms", 20, 3, 10000, 1, {{0, 0, 0}}, 1},
		{"no retry in the window any more", 20, 3, 10000, 0, {{0, 0, 0}}, 10000},
		{"a policy that never allows one: the window",
		 0,
		 0,
		 5000,
		 2,
		 {{100, 1, 1}, {200, 0, 0}},
		 5000},
	};

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		struct ledger_policy p;
		int64_t got;

		ledger_policy_default(&p);
		p.budget_percent = rows[i].percent;
		p.budget_min_retries = rows[i].min_retries;
		p.budget_window_ms = rows[i].window_ms;
		got = ledger_attempt_budget_retry_after(&p, rows[i].drops, rows[i].n);
		if (got != rows[i].want)
			fail_msg("row %zu (%s): %lld ms, want %lld", i, rows[i].what,
				 (long long)got, (long long)rows[i].want);
	}
}

/* The policy this file assumes is the built-in one. */
static void test_attempt_policy_default(void **state)
{
	struct ledger_policy p;

	(void)state;
	ledger_policy_default(&p);
	assert_int_equal(p.max_attempts, 2);
	assert_int_equal(p.max_attempts_limit, 5);
	assert_int_equal(p.default_lease_ms, 30000);
	assert_int_equal(p.max_retry_prefill_tokens, 32768);
	assert_true(p.require_same_revision);
	assert_int_equal(p.budget_percent, 20);
	assert_int_equal(p.budget_window_ms, 10000);
	assert_int_equal(p.budget_min_retries, 3);
}

/* --- the API's names --- */

static void test_attempt_names_round_trip(void **state)
{
	static const char *const statuses[] = {"open", "completed", "failed", "terminated",
					       "abandoned"};
	static const char *const states[] = {"live", "expired",    "cancel_requested", "cancelled",
					     "dead", "superseded", "finished",         "failed"};
	enum ledger_request_status rs;
	enum ledger_attempt_state as;

	(void)state;
	for (size_t i = 0; i < N(statuses); i++) {
		const char *name =
			ledger_attempt_request_status_name((enum ledger_request_status)i);

		assert_non_null(name);
		assert_string_equal(name, statuses[i]);
		rs = LEDGER_REQUEST_ABANDONED;
		assert_int_equal(ledger_attempt_request_status_parse(name, &rs), 0);
		assert_int_equal(rs, i);
	}
	for (size_t i = 0; i < N(states); i++) {
		const char *name = ledger_attempt_state_name((enum ledger_attempt_state)i);

		assert_non_null(name);
		assert_string_equal(name, states[i]);
		as = LEDGER_ATTEMPT_FAILED;
		assert_int_equal(ledger_attempt_state_parse(name, &as), 0);
		assert_int_equal(as, i);
	}
	assert_int_equal(ledger_attempt_request_status_parse("", &rs), -1);
	assert_int_equal(ledger_attempt_request_status_parse("Open", &rs), -1);
	assert_int_equal(ledger_attempt_request_status_parse("closed", &rs), -1);
	assert_int_equal(ledger_attempt_state_parse("", &as), -1);
	assert_int_equal(ledger_attempt_state_parse("cancel-requested", &as), -1);
	assert_int_equal(ledger_attempt_state_parse("live ", &as), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attempt_policy_default),
		cmocka_unit_test(test_attempt_create_table),
		cmocka_unit_test(test_attempt_create_codes),
		cmocka_unit_test(test_attempt_rights_table),
		cmocka_unit_test(test_attempt_finish_table),
		cmocka_unit_test(test_attempt_cancel_table),
		cmocka_unit_test(test_attempt_budget_allows_retry),
		cmocka_unit_test(test_attempt_create_input_and_gateway),
		cmocka_unit_test(test_attempt_create_names_the_budget),
		cmocka_unit_test(test_attempt_budget_retry_after),
		cmocka_unit_test(test_attempt_names_round_trip),
	};

	return cmocka_run_group_tests_name("attempt", tests, NULL, NULL);
}
