/*
 * tests/unit/test_failover.c: ledger_failover_decide, table-driven: every
 * signal x phase x source state x budget x retry cost (rows generated from
 * docs/api.md's failover table by tests/unit/gen_failover_table.py into
 * tests/data/failover_rows.tsv, read at run time), then fencing, closed
 * requests, unknown and held tool calls, and budget boundaries.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ledger/core/attempt.h"
#include "ledger/core/failover.h"
#include "ledger/core/policy.h"

/* Short names, so a row fits on one line. */
#define SIG_EXITED LEDGER_SIGNAL_REPLICA_EXITED
#define SIG_POD_LOST LEDGER_SIGNAL_POD_LOST
#define SIG_CLOSED LEDGER_SIGNAL_UPSTREAM_CLOSED
#define SIG_NETWORK LEDGER_SIGNAL_NETWORK_ERROR
#define SIG_HEARTBEAT LEDGER_SIGNAL_HEARTBEAT_TIMEOUT
#define SIG_OVERLOADED LEDGER_SIGNAL_OVERLOADED
#define SIG_CLIENT_GONE LEDGER_SIGNAL_CLIENT_DISCONNECTED

#define A_FENCED LEDGER_FAILOVER_ATTEMPT_FENCED
#define A_CLOSED LEDGER_FAILOVER_REQUEST_CLOSED
#define A_KEEP_WAITING LEDGER_FAILOVER_KEEP_WAITING
#define A_CANCEL LEDGER_FAILOVER_CANCEL_UPSTREAM
#define A_TERMINATE LEDGER_FAILOVER_TERMINATE_STREAM
#define A_REJECT LEDGER_FAILOVER_REJECT
#define A_WAIT LEDGER_FAILOVER_WAIT_FOR_FENCE
#define A_RETRY LEDGER_FAILOVER_RETRY_PREFILL

#define S_LIVE LEDGER_ATTEMPT_LIVE
#define S_EXPIRED LEDGER_ATTEMPT_EXPIRED
#define S_CANCEL_REQ LEDGER_ATTEMPT_CANCEL_REQUESTED
#define S_CANCELLED LEDGER_ATTEMPT_CANCELLED
#define S_DEAD LEDGER_ATTEMPT_DEAD
#define S_SUPERSEDED LEDGER_ATTEMPT_SUPERSEDED
#define S_FINISHED LEDGER_ATTEMPT_FINISHED
#define S_FAILED LEDGER_ATTEMPT_FAILED

#define R_OPEN LEDGER_REQUEST_OPEN
#define R_COMPLETED LEDGER_REQUEST_COMPLETED
#define R_FAILED LEDGER_REQUEST_FAILED
#define R_TERMINATED LEDGER_REQUEST_TERMINATED
#define R_ABANDONED LEDGER_REQUEST_ABANDONED

#define E_DECODE "upstream_decode_interrupted"
#define E_BUDGET "retry_budget_exhausted"
#define E_COST "retry_cost_exceeded"
#define E_UNKNOWN "tool_outcome_unknown"
#define E_DISCONNECTED "client_disconnected"

/* The test's own names, so a failure reads without trusting the module's. */
static const char *const signal_names[] = {
	"replica_exited",    "pod_lost",   "upstream_closed",     "network_error",
	"heartbeat_timeout", "overloaded", "client_disconnected",
};
static const char *const action_names[] = {
	"attempt_fenced",   "request_closed", "keep_waiting",   "cancel_upstream",
	"terminate_stream", "reject",         "wait_for_fence", "retry_prefill",
};
static const char *const state_names[] = {
	"live", "expired",    "cancel_requested", "cancelled",
	"dead", "superseded", "finished",         "failed",
};
static const char *const status_names[] = {
	"open", "completed", "failed", "terminated", "abandoned",
};

#define NAME(tab, v)                                                                               \
	((size_t)(v) < sizeof(tab) / sizeof(tab[0]) ? tab[(size_t)(v)] : "(out of range)")

/* What a decision must be. */
struct want {
	enum ledger_failover_action action;
	enum ledger_attempt_state source_after;
	enum ledger_request_status request_after;
	const char *client_error; /* NULL: none */
	int64_t retry_after_ms;   /* checked for WAIT_FOR_FENCE only */
	bool final;
};

/* One case: the decision's every input, and what it must be. */
struct fo_case {
	const char *what;
	enum ledger_request_status status;
	bool delta;                    /* first_delta_sent */
	int64_t count;                 /* the request's attempt_count */
	int64_t max_attempts;          /* the request's max_attempts */
	enum ledger_attempt_state src; /* the source's state */
	int64_t lease;                 /* the source's lease_ms_left */
	bool newest;                   /* the source is the newest attempt */
	enum ledger_signal signal;
	int64_t tokens; /* retry_prefill_tokens */
	int64_t held;   /* held_by_newest_ms */
	int64_t unknown;
	int64_t win_attempts; /* the tenant's window */
	int64_t win_retries;
	struct want want;
};

static void describe(const struct fo_case *c, char *buf, size_t len)
{
	snprintf(buf, len,
		 "%s%ssignal %s; request %s, %s, attempt %lld of %lld; source %s, "
		 "lease %lld, %s; tokens %lld; held %lld, unknown %lld; "
		 "window %lld attempts, %lld retries",
		 c->what != NULL ? c->what : "", c->what != NULL ? ": " : "",
		 NAME(signal_names, c->signal), NAME(status_names, c->status),
		 c->delta ? "delta sent" : "no delta", (long long)c->count,
		 (long long)c->max_attempts, NAME(state_names, c->src), (long long)c->lease,
		 c->newest ? "newest" : "not newest", (long long)c->tokens, (long long)c->held,
		 (long long)c->unknown, (long long)c->win_attempts, (long long)c->win_retries);
}

static bool same_str(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

static void decide(const struct fo_case *c, struct ledger_failover_decision *out)
{
	struct ledger_policy p;
	struct ledger_request r;
	struct ledger_attempt a;
	struct ledger_failover_input in = {
		.signal = c->signal,
		.retry_prefill_tokens = c->tokens,
		.source_is_newest = c->newest,
	};
	struct ledger_calls_summary calls = {.held_by_newest_ms = c->held, .unknown = c->unknown};
	struct ledger_budget budget = {.attempts = c->win_attempts, .retries = c->win_retries};

	ledger_policy_default(&p);
	memset(&r, 0, sizeof(r));
	r.exists = true;
	r.status = c->status;
	r.first_delta_sent = c->delta;
	r.delivered_output_tokens = c->delta ? 37 : 0;
	r.attempt_count = c->count;
	r.max_attempts = c->max_attempts;
	strcpy(r.model_revision, "rev-1");
	memset(&a, 0, sizeof(a));
	a.exists = true;
	strcpy(a.attempt_id, "att-1");
	a.epoch = c->count;
	strcpy(a.replica, "replica-a");
	strcpy(a.model_revision, "rev-1");
	a.revision_given = true;
	a.state = c->src;
	a.lease_ms_left = c->lease;
	a.is_retry = c->count > 1;
	memset(out, 0, sizeof(*out));
	ledger_failover_decide(&r, &a, &in, &calls, &budget, &p, out);
}

/*
 * Checks one case; prints every difference. @return true when it passed.
 */
static bool check_case(const char *table, size_t i, const struct fo_case *c)
{
	struct ledger_failover_decision d;
	const struct want *w = &c->want;
	char desc[512];
	bool ok = true;

	decide(c, &d);
	describe(c, desc, sizeof(desc));
	if (d.action != w->action) {
		print_error("%s row %zu (%s): action %s, want %s\n", table, i, desc,
			    NAME(action_names, d.action), NAME(action_names, w->action));
		ok = false;
	}
	if (d.source_after != w->source_after) {
		print_error("%s row %zu (%s): source_after %s, want %s\n", table, i, desc,
			    NAME(state_names, d.source_after), NAME(state_names, w->source_after));
		ok = false;
	}
	if (d.request_after != w->request_after) {
		print_error("%s row %zu (%s): request_after %s, want %s\n", table, i, desc,
			    NAME(status_names, d.request_after),
			    NAME(status_names, w->request_after));
		ok = false;
	}
	if (!same_str(d.client_error, w->client_error)) {
		print_error("%s row %zu (%s): client_error %s, want %s\n", table, i, desc,
			    d.client_error != NULL ? d.client_error : "NULL",
			    w->client_error != NULL ? w->client_error : "NULL");
		ok = false;
	}
	if (w->action == A_WAIT && d.retry_after_ms != w->retry_after_ms) {
		print_error("%s row %zu (%s): retry_after_ms %lld, want %lld\n", table, i, desc,
			    (long long)d.retry_after_ms, (long long)w->retry_after_ms);
		ok = false;
	}
	if (d.final != w->final) {
		print_error("%s row %zu (%s): final %d, want %d\n", table, i, desc, d.final,
			    w->final);
		ok = false;
	}
	return ok;
}

/* Runs a table; fails with the first failing row after printing them all. */
static void run_cases(const char *table, const struct fo_case *cases, size_t n)
{
	size_t failed = 0, first = 0;

	for (size_t i = 0; i < n; i++) {
		if (!check_case(table, i, &cases[i]) && failed++ == 0)
			first = i;
	}
	if (failed > 0) {
		char desc[512];

		describe(&cases[first], desc, sizeof(desc));
		fail_msg("%zu of %zu %s rows failed; first: row %zu (%s)", failed, n, table, first,
			 desc);
	}
}

/* --- the cross product: signal x phase x source x budget x cost --- */

enum source_kind {
	K_LIVE,       /* live, within its lease */
	K_EXPIRED,    /* live, its lease ran out */
	K_CANCEL_REQ, /* cancel requested, within its lease */
	K_CANCELLED,
	K_DEAD,
	K_SUPERSEDED,
	K_FINISHED, /* the request is then completed */
	K_FAILED,
};

static const struct {
	enum ledger_attempt_state state;
	int64_t lease; /* a rightless attempt's stored lease may still run */
	enum ledger_request_status status;
} sources[] = {
	[K_LIVE] = {S_LIVE, 5000, R_OPEN},
	[K_EXPIRED] = {S_EXPIRED, 0, R_OPEN},
	[K_CANCEL_REQ] = {S_CANCEL_REQ, 5000, R_OPEN},
	[K_CANCELLED] = {S_CANCELLED, 5000, R_OPEN},
	[K_DEAD] = {S_DEAD, 5000, R_OPEN},
	[K_SUPERSEDED] = {S_SUPERSEDED, 5000, R_OPEN},
	[K_FINISHED] = {S_FINISHED, 5000, R_COMPLETED},
	[K_FAILED] = {S_FAILED, 5000, R_OPEN},
};

enum budget_kind {
	B_LEFT, /* attempt 1 of 2, the window's retries 0 of 100 attempts */
	B_MAX,  /* attempt 2 of 2 */
	B_POOL, /* the window's retries at the limit: 20 of 100 attempts */
};

static const struct {
	int64_t count, max_attempts, win_attempts, win_retries;
} budgets[] = {
	[B_LEFT] = {1, 2, 100, 0},
	[B_MAX] = {2, 2, 100, 0},
	[B_POOL] = {1, 2, 100, 20},
};

enum cost_kind {
	C_WITHIN, /* 4096 tokens */
	C_OVER,   /* 40000 tokens, over max_retry_prefill_tokens 32768 */
};

static const int64_t costs[] = {[C_WITHIN] = 4096, [C_OVER] = 40000};

struct cross_row {
	enum ledger_signal signal;
	int delta;
	enum source_kind source;
	enum budget_kind budget;
	enum cost_kind cost;
	enum ledger_failover_action action;
	enum ledger_attempt_state source_after;
	enum ledger_request_status request_after;
	const char *client_error;
	int64_t retry_after_ms;
	int final;
};

/*
 * The rows are data: tests/data/failover_rows.tsv, written by
 * tests/unit/gen_failover_table.py (make unit checks the file is what it
 * writes) and read once, before the tests, from the repository root (where
 * make unit runs them) or from the file LEDGER_FAILOVER_ROWS names.
 */
#define CROSS_FILE "tests/data/failover_rows.tsv"
#define CROSS_HEADER                                                                               \
	"signal\tdelta\tsource\tbudget\tcost\taction\tsource_after\trequest_after\tclient_error\t" \
	"retry_after_ms\tfinal"
#define N_PRODUCT (7 * 2 * 8 * 3 * 2)
#define N_COLUMNS 11

static struct cross_row cross_rows[N_PRODUCT];
static unsigned cross_lines[N_PRODUCT]; /* each row's line in the file */
static size_t n_cross;
static const char *cross_path = CROSS_FILE;

/* A word of the file and the value it stands for. */
struct word {
	const char *text;
	int value;
};

#define WORDS(t) t, sizeof(t) / sizeof(t[0])

static const struct word signal_words[] = {
	{"replica_exited", SIG_EXITED},           {"pod_lost", SIG_POD_LOST},
	{"upstream_closed", SIG_CLOSED},          {"network_error", SIG_NETWORK},
	{"heartbeat_timeout", SIG_HEARTBEAT},     {"overloaded", SIG_OVERLOADED},
	{"client_disconnected", SIG_CLIENT_GONE},
};
static const struct word source_words[] = {
	{"live", K_LIVE},           {"expired", K_EXPIRED}, {"cancel_requested", K_CANCEL_REQ},
	{"cancelled", K_CANCELLED}, {"dead", K_DEAD},       {"superseded", K_SUPERSEDED},
	{"finished", K_FINISHED},   {"failed", K_FAILED},
};
static const struct word budget_words[] = {{"left", B_LEFT}, {"max", B_MAX}, {"pool", B_POOL}};
static const struct word cost_words[] = {{"within", C_WITHIN}, {"over", C_OVER}};
static const struct word action_words[] = {
	{"attempt_fenced", A_FENCED},      {"request_closed", A_CLOSED},
	{"keep_waiting", A_KEEP_WAITING},  {"cancel_upstream", A_CANCEL},
	{"terminate_stream", A_TERMINATE}, {"reject", A_REJECT},
	{"wait_for_fence", A_WAIT},        {"retry_prefill", A_RETRY},
};
static const struct word state_words[] = {
	{"live", S_LIVE},           {"expired", S_EXPIRED}, {"cancel_requested", S_CANCEL_REQ},
	{"cancelled", S_CANCELLED}, {"dead", S_DEAD},       {"superseded", S_SUPERSEDED},
	{"finished", S_FINISHED},   {"failed", S_FAILED},
};
static const struct word status_words[] = {
	{"open", R_OPEN},           {"completed", R_COMPLETED},
	{"failed", R_FAILED},       {"terminated", R_TERMINATED},
	{"abandoned", R_ABANDONED},
};
static const struct word flag_words[] = {{"0", 0}, {"1", 1}};
/* The client errors a decision may carry; "-" in the file: none. */
static const char *const client_errors[] = {E_DECODE, E_BUDGET, E_COST, E_UNKNOWN, E_DISCONNECTED};

/* @return the value of @text in @words, or -1 with a complaint in @why. */
static int word_value(const struct word *words, size_t n, const char *column, const char *text,
		      char *why, size_t whylen)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(words[i].text, text) == 0)
			return words[i].value;
	}
	snprintf(why, whylen, "%s \"%.40s\" is not one the test knows", column, text);
	return -1;
}

/* Parses one data line (no newline) into @x. @return false with @why filled. */
static bool parse_cross_line(char *line, struct cross_row *x, char *why, size_t whylen)
{
	char *col[N_COLUMNS];
	size_t n = 0;
	char *end = NULL;
	long long ms;
	int v[9];

	for (char *p = line;; p++) {
		if (n == N_COLUMNS) {
			snprintf(why, whylen, "more than %d columns", N_COLUMNS);
			return false;
		}
		col[n++] = p;
		p = strchr(p, '\t');
		if (p == NULL)
			break;
		*p = '\0';
	}
	if (n != N_COLUMNS) {
		snprintf(why, whylen, "%zu columns, want %d", n, N_COLUMNS);
		return false;
	}
	if ((v[0] = word_value(WORDS(signal_words), "signal", col[0], why, whylen)) < 0 ||
	    (v[1] = word_value(WORDS(flag_words), "delta", col[1], why, whylen)) < 0 ||
	    (v[2] = word_value(WORDS(source_words), "source", col[2], why, whylen)) < 0 ||
	    (v[3] = word_value(WORDS(budget_words), "budget", col[3], why, whylen)) < 0 ||
	    (v[4] = word_value(WORDS(cost_words), "cost", col[4], why, whylen)) < 0 ||
	    (v[5] = word_value(WORDS(action_words), "action", col[5], why, whylen)) < 0 ||
	    (v[6] = word_value(WORDS(state_words), "source_after", col[6], why, whylen)) < 0 ||
	    (v[7] = word_value(WORDS(status_words), "request_after", col[7], why, whylen)) < 0 ||
	    (v[8] = word_value(WORDS(flag_words), "final", col[10], why, whylen)) < 0)
		return false;
	memset(x, 0, sizeof(*x));
	x->signal = (enum ledger_signal)v[0];
	x->delta = v[1];
	x->source = (enum source_kind)v[2];
	x->budget = (enum budget_kind)v[3];
	x->cost = (enum cost_kind)v[4];
	x->action = (enum ledger_failover_action)v[5];
	x->source_after = (enum ledger_attempt_state)v[6];
	x->request_after = (enum ledger_request_status)v[7];
	x->final = v[8];
	x->client_error = NULL;
	for (size_t i = 0; i < sizeof(client_errors) / sizeof(client_errors[0]); i++) {
		if (strcmp(col[8], client_errors[i]) == 0)
			x->client_error = client_errors[i];
	}
	if (x->client_error == NULL && strcmp(col[8], "-") != 0) {
		snprintf(why, whylen, "client_error \"%.40s\" is not one the test knows", col[8]);
		return false;
	}
	errno = 0;
	ms = strtoll(col[9], &end, 10);
	if (col[9][0] < '0' || col[9][0] > '9' || *end != '\0' || errno != 0) {
		snprintf(why, whylen, "retry_after_ms \"%.40s\" is not a count of ms", col[9]);
		return false;
	}
	x->retry_after_ms = ms;
	return true;
}

/*
 * Group setup: reads the rows into cross_rows. Anything amiss (no file, another
 * header, a word the test does not know, too many rows) fails every test.
 */
static int load_cross_rows(void **state)
{
	char line[512];
	unsigned lineno = 0;
	bool header = false;
	FILE *f = NULL;
	int rc = -1;

	(void)state;
	if (getenv("LEDGER_FAILOVER_ROWS") != NULL)
		cross_path = getenv("LEDGER_FAILOVER_ROWS");
	n_cross = 0;
	f = fopen(cross_path, "r");
	if (f == NULL) {
		print_error("cannot open %s: %s (run the tests from the repository root, as "
			    "make unit does, or name the file in LEDGER_FAILOVER_ROWS)\n",
			    cross_path, strerror(errno));
		goto out;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		size_t len = strlen(line);
		char why[128];

		lineno++;
		if (len == 0 || line[len - 1] != '\n') {
			print_error("%s:%u: longer than %zu bytes or not ended by a newline\n",
				    cross_path, lineno, sizeof(line) - 2);
			goto out;
		}
		line[len - 1] = '\0';
		if (line[0] == '#')
			continue;
		if (!header) {
			if (strcmp(line, CROSS_HEADER) != 0) {
				print_error("%s:%u: the header is not \"%s\"\n", cross_path, lineno,
					    CROSS_HEADER);
				goto out;
			}
			header = true;
			continue;
		}
		if (n_cross == N_PRODUCT) {
			print_error("%s:%u: more rows than the %d of the product\n", cross_path,
				    lineno, N_PRODUCT);
			goto out;
		}
		if (!parse_cross_line(line, &cross_rows[n_cross], why, sizeof(why))) {
			print_error("%s:%u: %s\n", cross_path, lineno, why);
			goto out;
		}
		cross_lines[n_cross++] = lineno;
	}
	if (ferror(f) || !header) {
		print_error("%s: %s\n", cross_path, ferror(f) ? "cannot be read" : "has no header");
		goto out;
	}
	rc = 0;
out:
	if (f != NULL)
		fclose(f);
	return rc;
}

/* The table covers the whole product, each combination once. */
static void test_failover_cross_table_is_complete(void **state)
{
	static unsigned char seen[7][2][8][3][2];

	(void)state;
	assert_int_equal(n_cross, N_PRODUCT);
	memset(seen, 0, sizeof(seen));
	for (size_t i = 0; i < n_cross; i++) {
		const struct cross_row *x = &cross_rows[i];

		assert_true(x->signal <= SIG_CLIENT_GONE && x->delta >= 0 && x->delta <= 1);
		assert_true(x->source <= K_FAILED && x->budget <= B_POOL && x->cost <= C_OVER);
		if (seen[x->signal][x->delta][x->source][x->budget][x->cost]++ != 0)
			fail_msg("cross row %zu repeats a combination", i);
	}
}

/* A cross row as a case: the source is the newest attempt, nothing is held. */
static void cross_case(const struct cross_row *x, struct fo_case *c)
{
	memset(c, 0, sizeof(*c));
	c->status = sources[x->source].status;
	c->delta = x->delta != 0;
	c->count = budgets[x->budget].count;
	c->max_attempts = budgets[x->budget].max_attempts;
	c->src = sources[x->source].state;
	c->lease = sources[x->source].lease;
	c->newest = true;
	c->signal = x->signal;
	c->tokens = costs[x->cost];
	c->win_attempts = budgets[x->budget].win_attempts;
	c->win_retries = budgets[x->budget].win_retries;
	c->want.action = x->action;
	c->want.source_after = x->source_after;
	c->want.request_after = x->request_after;
	c->want.client_error = x->client_error;
	c->want.retry_after_ms = x->retry_after_ms;
	c->want.final = x->final != 0;
}

static void test_failover_cross_table(void **state)
{
	struct fo_case c;
	size_t failed = 0, first = 0;

	(void)state;
	for (size_t i = 0; i < n_cross; i++) {
		cross_case(&cross_rows[i], &c);
		if (check_case("cross", i, &c))
			continue;
		print_error("    (cross row %zu is %s:%u)\n", i, cross_path, cross_lines[i]);
		if (failed++ == 0)
			first = i;
	}
	if (failed > 0) {
		char desc[512];

		cross_case(&cross_rows[first], &c);
		describe(&c, desc, sizeof(desc));
		fail_msg("%zu of %zu cross rows failed; first: row %zu, %s:%u (%s)", failed,
			 n_cross, first, cross_path, cross_lines[first], desc);
	}
}

/* --- hand-written rows --- */

#define W(a, s, r, e, ms, f)                                                                       \
	{                                                                                          \
		a, s, r, e, ms, f                                                                  \
	}
/* A source that is the newest; budget left; 4096 tokens; nothing held. */
#define OPEN1 R_OPEN, false, 1, 2
#define NEWEST true
#define STALE false
#define NOCALLS 0, 0
#define WIN0 100, 0

/* Row 2: a source that is not the newest attempt changes nothing, whatever else. */
static const struct fo_case fenced_rows[] = {
	{"not newest", OPEN1, S_LIVE, 5000, STALE, SIG_EXITED, 4096, NOCALLS, WIN0,
	 W(A_FENCED, S_LIVE, R_OPEN, NULL, 0, false)},
	{"not newest", OPEN1, S_LIVE, 5000, STALE, SIG_POD_LOST, 4096, NOCALLS, WIN0,
	 W(A_FENCED, S_LIVE, R_OPEN, NULL, 0, false)},
	{"not newest", OPEN1, S_LIVE, 5000, STALE, SIG_CLOSED, 4096, NOCALLS, WIN0,
	 W(A_FENCED, S_LIVE, R_OPEN, NULL, 0, false)},
	{"not newest", OPEN1, S_LIVE, 5000, STALE, SIG_NETWORK, 4096, NOCALLS, WIN0,
	 W(A_FENCED, S_LIVE, R_OPEN, NULL, 0, false)},
	{"not newest", OPEN1, S_LIVE, 5000, STALE, SIG_HEARTBEAT, 4096, NOCALLS, WIN0,
	 W(A_FENCED, S_LIVE, R_OPEN, NULL, 0, false)},
	{"not newest", OPEN1, S_LIVE, 5000, STALE, SIG_OVERLOADED, 4096, NOCALLS, WIN0,
	 W(A_FENCED, S_LIVE, R_OPEN, NULL, 0, false)},
	{"not newest", OPEN1, S_LIVE, 5000, STALE, SIG_CLIENT_GONE, 4096, NOCALLS, WIN0,
	 W(A_FENCED, S_LIVE, R_OPEN, NULL, 0, false)},
	{"not newest, superseded", OPEN1, S_SUPERSEDED, 0, STALE, SIG_EXITED, 4096, NOCALLS, WIN0,
	 W(A_FENCED, S_SUPERSEDED, R_OPEN, NULL, 0, false)},
	/* row 2 comes before row 3 and everything after it */
	{"not newest, request terminated", R_TERMINATED, true, 2, 2, S_DEAD, 0, STALE, SIG_NETWORK,
	 4096, NOCALLS, WIN0, W(A_FENCED, S_DEAD, R_TERMINATED, NULL, 0, false)},
	{"not newest, request completed", R_COMPLETED, false, 1, 2, S_CANCEL_REQ, 3000, STALE,
	 SIG_CLIENT_GONE, 4096, NOCALLS, WIN0,
	 W(A_FENCED, S_CANCEL_REQ, R_COMPLETED, NULL, 0, false)},
	{"not newest, delta, budget spent, calls held and unknown", R_OPEN, true, 2, 2, S_LIVE,
	 5000, STALE, SIG_NETWORK, 99999, 8000, 1, 100, 20,
	 W(A_FENCED, S_LIVE, R_OPEN, NULL, 0, false)},
};

static void test_failover_not_newest_is_fenced(void **state)
{
	(void)state;
	run_cases("fenced", fenced_rows, sizeof(fenced_rows) / sizeof(fenced_rows[0]));
}

/* Row 3: a request that is not open changes nothing, before any signal is read. */
static const struct fo_case closed_rows[] = {
	{"completed", R_COMPLETED, false, 1, 2, S_FINISHED, 0, NEWEST, SIG_EXITED, 4096, NOCALLS,
	 WIN0, W(A_CLOSED, S_FINISHED, R_COMPLETED, NULL, 0, false)},
	{"completed after a delta", R_COMPLETED, true, 1, 2, S_FINISHED, 0, NEWEST, SIG_NETWORK,
	 4096, NOCALLS, WIN0, W(A_CLOSED, S_FINISHED, R_COMPLETED, NULL, 0, false)},
	{"failed", R_FAILED, false, 2, 2, S_FAILED, 0, NEWEST, SIG_POD_LOST, 4096, NOCALLS, WIN0,
	 W(A_CLOSED, S_FAILED, R_FAILED, NULL, 0, false)},
	{"failed, source revoked", R_FAILED, false, 1, 2, S_CANCEL_REQ, 5000, NEWEST, SIG_HEARTBEAT,
	 4096, NOCALLS, WIN0, W(A_CLOSED, S_CANCEL_REQ, R_FAILED, NULL, 0, false)},
	{"terminated", R_TERMINATED, true, 1, 2, S_DEAD, 0, NEWEST, SIG_CLOSED, 4096, NOCALLS, WIN0,
	 W(A_CLOSED, S_DEAD, R_TERMINATED, NULL, 0, false)},
	{"abandoned", R_ABANDONED, false, 1, 2, S_CANCEL_REQ, 5000, NEWEST, SIG_EXITED, 4096,
	 NOCALLS, WIN0, W(A_CLOSED, S_CANCEL_REQ, R_ABANDONED, NULL, 0, false)},
	{"abandoned, source cancelled", R_ABANDONED, false, 1, 2, S_CANCELLED, 0, NEWEST,
	 SIG_NETWORK, 4096, NOCALLS, WIN0, W(A_CLOSED, S_CANCELLED, R_ABANDONED, NULL, 0, false)},
	/* row 3 comes before rows 4 and 5 */
	{"terminated, overloaded", R_TERMINATED, true, 1, 2, S_CANCEL_REQ, 5000, NEWEST,
	 SIG_OVERLOADED, 4096, NOCALLS, WIN0,
	 W(A_CLOSED, S_CANCEL_REQ, R_TERMINATED, NULL, 0, false)},
	{"abandoned, client disconnected again", R_ABANDONED, false, 1, 2, S_CANCEL_REQ, 5000,
	 NEWEST, SIG_CLIENT_GONE, 4096, NOCALLS, WIN0,
	 W(A_CLOSED, S_CANCEL_REQ, R_ABANDONED, NULL, 0, false)},
	{"failed, live source within its lease", R_FAILED, false, 1, 2, S_LIVE, 5000, NEWEST,
	 SIG_EXITED, 4096, NOCALLS, WIN0, W(A_CLOSED, S_LIVE, R_FAILED, NULL, 0, false)},
	{"completed, calls held and unknown", R_COMPLETED, false, 2, 2, S_FINISHED, 0, NEWEST,
	 SIG_NETWORK, 99999, 8000, 2, 100, 20,
	 W(A_CLOSED, S_FINISHED, R_COMPLETED, NULL, 0, false)},
};

static void test_failover_closed_request(void **state)
{
	(void)state;
	run_cases("closed", closed_rows, sizeof(closed_rows) / sizeof(closed_rows[0]));
}

/*
 * Row 8: a tool call with an unknown outcome whose tool does not dedupe
 * refuses a rerun; checked after budget and cost, before the fence. Calls
 * of dedupe-safe tools are not counted (unknown == 0).
 */
static const struct fo_case unknown_rows[] = {
	{"one unknown", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, 0, 1, WIN0,
	 W(A_REJECT, S_DEAD, R_FAILED, E_UNKNOWN, 0, true)},
	{"three unknown", OPEN1, S_EXPIRED, 0, NEWEST, SIG_POD_LOST, 4096, 0, 3, WIN0,
	 W(A_REJECT, S_DEAD, R_FAILED, E_UNKNOWN, 0, true)},
	{"none unknown (dedupe-safe)", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, 0, 0, WIN0,
	 W(A_RETRY, S_DEAD, R_OPEN, NULL, 0, true)},
	{"none unknown, uncertain, fenced", OPEN1, S_EXPIRED, 0, NEWEST, SIG_NETWORK, 4096, 0, 0,
	 WIN0, W(A_RETRY, S_SUPERSEDED, R_OPEN, NULL, 0, true)},
	{"unknown, uncertain source", OPEN1, S_LIVE, 5000, NEWEST, SIG_NETWORK, 4096, 0, 1, WIN0,
	 W(A_REJECT, S_CANCEL_REQ, R_FAILED, E_UNKNOWN, 0, true)},
	{"unknown, expired source", OPEN1, S_EXPIRED, 0, NEWEST, SIG_HEARTBEAT, 4096, 0, 1, WIN0,
	 W(A_REJECT, S_CANCEL_REQ, R_FAILED, E_UNKNOWN, 0, true)},
	{"unknown, cancelled source", OPEN1, S_CANCELLED, 0, NEWEST, SIG_NETWORK, 4096, 0, 1, WIN0,
	 W(A_REJECT, S_CANCELLED, R_FAILED, E_UNKNOWN, 0, true)},
	{"unknown, a call held (8 before 9)", OPEN1, S_LIVE, 5000, NEWEST, SIG_CLOSED, 4096, 8000,
	 1, WIN0, W(A_REJECT, S_DEAD, R_FAILED, E_UNKNOWN, 0, true)},
	/* budget and cost come first */
	{"unknown, max_attempts reached", R_OPEN, false, 2, 2, S_LIVE, 5000, NEWEST, SIG_EXITED,
	 4096, 0, 1, WIN0, W(A_REJECT, S_DEAD, R_FAILED, E_BUDGET, 0, true)},
	{"unknown, pool spent", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, 0, 1, 100, 20,
	 W(A_REJECT, S_DEAD, R_FAILED, E_BUDGET, 0, true)},
	{"unknown, cost over", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 40000, 0, 1, WIN0,
	 W(A_REJECT, S_DEAD, R_FAILED, E_COST, 0, true)},
	/* and rows 4..6 before them */
	{"unknown, delta sent", R_OPEN, true, 1, 2, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, 0, 1,
	 WIN0, W(A_TERMINATE, S_DEAD, R_TERMINATED, E_DECODE, 0, true)},
	{"unknown, overloaded", OPEN1, S_LIVE, 5000, NEWEST, SIG_OVERLOADED, 4096, 0, 1, WIN0,
	 W(A_KEEP_WAITING, S_LIVE, R_OPEN, NULL, 0, false)},
	{"unknown, client gone", OPEN1, S_LIVE, 5000, NEWEST, SIG_CLIENT_GONE, 4096, 0, 1, WIN0,
	 W(A_CANCEL, S_CANCEL_REQ, R_ABANDONED, NULL, 0, true)},
};

static void test_failover_unknown_outcome(void **state)
{
	(void)state;
	run_cases("unknown", unknown_rows, sizeof(unknown_rows) / sizeof(unknown_rows[0]));
}

/*
 * Row 9: a tool call of the source still held waits for it; retry_after_ms
 * is the longer of the source's lease left (only while its liveness is
 * uncertain and it is not fenced) and the held call's lease left.
 */
static const struct fo_case held_rows[] = {
	{"held longer than the lease", OPEN1, S_LIVE, 5000, NEWEST, SIG_NETWORK, 4096, 8000, 0,
	 WIN0, W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 8000, false)},
	{"held shorter than the lease", OPEN1, S_LIVE, 5000, NEWEST, SIG_HEARTBEAT, 4096, 3000, 0,
	 WIN0, W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 5000, false)},
	{"held as long as the revoked lease", OPEN1, S_CANCEL_REQ, 4000, NEWEST, SIG_NETWORK, 4096,
	 4000, 0, WIN0, W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 4000, false)},
	{"held, revoked lease longer", OPEN1, S_CANCEL_REQ, 9000, NEWEST, SIG_HEARTBEAT, 4096, 4000,
	 0, WIN0, W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 9000, false)},
	/* a certainly dead replica's lease does not count; its held call does */
	/* waiting, the source is cancel_requested whatever the signal (docs/api.md row 9) */
	{"held, replica exited", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, 3000, 0, WIN0,
	 W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 3000, false)},
	{"held, pod lost, expired source", OPEN1, S_EXPIRED, 0, NEWEST, SIG_POD_LOST, 4096, 7000, 0,
	 WIN0, W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 7000, false)},
	{"held, upstream closed, revoked source", OPEN1, S_CANCEL_REQ, 5000, NEWEST, SIG_CLOSED,
	 4096, 2000, 0, WIN0, W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 2000, false)},
	/* a fenced source's lease does not count either */
	{"held, expired source", OPEN1, S_EXPIRED, 0, NEWEST, SIG_NETWORK, 4096, 3000, 0, WIN0,
	 W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 3000, false)},
	{"held, cancelled source", OPEN1, S_CANCELLED, 5000, NEWEST, SIG_NETWORK, 4096, 3000, 0,
	 WIN0, W(A_WAIT, S_CANCELLED, R_OPEN, NULL, 3000, false)},
	{"held, dead source", OPEN1, S_DEAD, 5000, NEWEST, SIG_HEARTBEAT, 4096, 2500, 0, WIN0,
	 W(A_WAIT, S_DEAD, R_OPEN, NULL, 2500, false)},
	{"held, failed source", OPEN1, S_FAILED, 5000, NEWEST, SIG_HEARTBEAT, 4096, 1, 0, WIN0,
	 W(A_WAIT, S_FAILED, R_OPEN, NULL, 1, false)},
	{"held, superseded source", OPEN1, S_SUPERSEDED, 0, NEWEST, SIG_EXITED, 4096, 600, 0, WIN0,
	 W(A_WAIT, S_SUPERSEDED, R_OPEN, NULL, 600, false)},
	{"held, revoked source past its lease", OPEN1, S_CANCEL_REQ, 0, NEWEST, SIG_NETWORK, 4096,
	 1500, 0, WIN0, W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 1500, false)},
	{"nothing held", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, 0, 0, WIN0,
	 W(A_RETRY, S_DEAD, R_OPEN, NULL, 0, true)},
	/* rows 4..7 come first */
	{"held, overloaded", OPEN1, S_LIVE, 5000, NEWEST, SIG_OVERLOADED, 4096, 8000, 0, WIN0,
	 W(A_KEEP_WAITING, S_LIVE, R_OPEN, NULL, 0, false)},
	{"held, client gone", OPEN1, S_LIVE, 5000, NEWEST, SIG_CLIENT_GONE, 4096, 8000, 0, WIN0,
	 W(A_CANCEL, S_CANCEL_REQ, R_ABANDONED, NULL, 0, true)},
	{"held, delta sent", R_OPEN, true, 1, 2, S_LIVE, 5000, NEWEST, SIG_NETWORK, 4096, 8000, 0,
	 WIN0, W(A_TERMINATE, S_CANCEL_REQ, R_TERMINATED, E_DECODE, 0, true)},
	{"held, max_attempts reached", R_OPEN, false, 2, 2, S_LIVE, 5000, NEWEST, SIG_NETWORK, 4096,
	 8000, 0, WIN0, W(A_REJECT, S_CANCEL_REQ, R_FAILED, E_BUDGET, 0, true)},
	{"held, cost over", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 32769, 8000, 0, WIN0,
	 W(A_REJECT, S_DEAD, R_FAILED, E_COST, 0, true)},
};

static void test_failover_held_call(void **state)
{
	(void)state;
	run_cases("held", held_rows, sizeof(held_rows) / sizeof(held_rows[0]));
}

/* "Liveness uncertain and not yet fenced" needs a lease left > 0. */
static const struct fo_case lease_rows[] = {
	{"live, 1 ms left", OPEN1, S_LIVE, 1, NEWEST, SIG_NETWORK, 4096, NOCALLS, WIN0,
	 W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 1, false)},
	{"live, long lease", OPEN1, S_LIVE, 3600000, NEWEST, SIG_HEARTBEAT, 4096, NOCALLS, WIN0,
	 W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 3600000, false)},
	{"revoked, 1 ms left", OPEN1, S_CANCEL_REQ, 1, NEWEST, SIG_HEARTBEAT, 4096, NOCALLS, WIN0,
	 W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 1, false)},
	{"revoked, past its lease", OPEN1, S_CANCEL_REQ, 0, NEWEST, SIG_NETWORK, 4096, NOCALLS,
	 WIN0, W(A_RETRY, S_SUPERSEDED, R_OPEN, NULL, 0, true)},
	{"revoked, past its lease, replica exited", OPEN1, S_CANCEL_REQ, 0, NEWEST, SIG_EXITED,
	 4096, NOCALLS, WIN0, W(A_RETRY, S_DEAD, R_OPEN, NULL, 0, true)},
	{"cancelled, no lease", OPEN1, S_CANCELLED, 0, NEWEST, SIG_HEARTBEAT, 4096, NOCALLS, WIN0,
	 W(A_RETRY, S_CANCELLED, R_OPEN, NULL, 0, true)},
	{"dead, no lease", OPEN1, S_DEAD, 0, NEWEST, SIG_NETWORK, 4096, NOCALLS, WIN0,
	 W(A_RETRY, S_DEAD, R_OPEN, NULL, 0, true)},
	{"failed, no lease", OPEN1, S_FAILED, 0, NEWEST, SIG_NETWORK, 4096, NOCALLS, WIN0,
	 W(A_RETRY, S_FAILED, R_OPEN, NULL, 0, true)},
	{"superseded, no lease", OPEN1, S_SUPERSEDED, 0, NEWEST, SIG_POD_LOST, 4096, NOCALLS, WIN0,
	 W(A_RETRY, S_SUPERSEDED, R_OPEN, NULL, 0, true)},
	{"live, long lease, certainly dead", OPEN1, S_LIVE, 3600000, NEWEST, SIG_CLOSED, 4096,
	 NOCALLS, WIN0, W(A_RETRY, S_DEAD, R_OPEN, NULL, 0, true)},
};

static void test_failover_uncertain_needs_lease(void **state)
{
	(void)state;
	run_cases("lease", lease_rows, sizeof(lease_rows) / sizeof(lease_rows[0]));
}

/*
 * Row 7 boundaries: the pool refuses a retry once the window's retries
 * reach max(min_retries 3, 20% of its attempts); max_attempts per request;
 * retry_prefill_tokens over 32768.
 */
#define RETRY_OK W(A_RETRY, S_DEAD, R_OPEN, NULL, 0, true)
#define NO_BUDGET W(A_REJECT, S_DEAD, R_FAILED, E_BUDGET, 0, true)
#define NO_COST W(A_REJECT, S_DEAD, R_FAILED, E_COST, 0, true)

static const struct fo_case budget_rows[] = {
	{"pool 19 of 100", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 100, 19,
	 RETRY_OK},
	{"pool 20 of 100", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 100, 20,
	 NO_BUDGET},
	{"pool 21 of 100", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 100, 21,
	 NO_BUDGET},
	{"pool 2 of 10 (min_retries)", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 10,
	 2, RETRY_OK},
	{"pool 3 of 10 (min_retries)", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 10,
	 3, NO_BUDGET},
	{"pool empty window", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 0, 0,
	 RETRY_OK},
	{"pool 2 of 2", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 2, 2, RETRY_OK},
	{"pool 3 of 3", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 3, 3, NO_BUDGET},
	{"pool 3 of 20 (20% is 4)", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 20, 3,
	 RETRY_OK},
	{"pool 4 of 20 (20% is 4)", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 20, 4,
	 NO_BUDGET},
	{"pool 199 of 1000", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 1000, 199,
	 RETRY_OK},
	{"pool 200 of 1000", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 1000, 200,
	 NO_BUDGET},
	{"attempt 1 of 1", R_OPEN, false, 1, 1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS,
	 WIN0, NO_BUDGET},
	{"attempt 4 of 5", R_OPEN, false, 4, 5, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS,
	 WIN0, RETRY_OK},
	{"attempt 5 of 5", R_OPEN, false, 5, 5, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS,
	 WIN0, NO_BUDGET},
	{"attempt 3 of 2", R_OPEN, false, 3, 2, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS,
	 WIN0, NO_BUDGET},
	{"no tokens", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 0, NOCALLS, WIN0, RETRY_OK},
	{"32768 tokens", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 32768, NOCALLS, WIN0, RETRY_OK},
	{"32769 tokens", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 32769, NOCALLS, WIN0, NO_COST},
	{"2^53-1 tokens", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 9007199254740991LL, NOCALLS,
	 WIN0, NO_COST},
	{"budget before cost", R_OPEN, false, 2, 2, S_LIVE, 5000, NEWEST, SIG_EXITED, 32769,
	 NOCALLS, WIN0, NO_BUDGET},
	{"pool before cost", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 32769, NOCALLS, 10, 3,
	 NO_BUDGET},
	/* a slow replica or a departed client never spends budget */
	{"overloaded, nothing left", R_OPEN, false, 2, 2, S_LIVE, 5000, NEWEST, SIG_OVERLOADED,
	 99999, NOCALLS, 10, 3, W(A_KEEP_WAITING, S_LIVE, R_OPEN, NULL, 0, false)},
	{"client gone, nothing left", R_OPEN, false, 2, 2, S_LIVE, 5000, NEWEST, SIG_CLIENT_GONE,
	 99999, NOCALLS, 10, 3, W(A_CANCEL, S_CANCEL_REQ, R_ABANDONED, NULL, 0, true)},
};

static void test_failover_budget_boundaries(void **state)
{
	(void)state;
	run_cases("budget", budget_rows, sizeof(budget_rows) / sizeof(budget_rows[0]));
}

/* A reject for the budget names which one; the request's comes first when both are spent. */
static void test_failover_names_the_budget(void **state)
{
	static const struct {
		struct fo_case c;
		enum ledger_budget_kind budget;
	} rows[] = {
		{{"attempt 2 of 2", R_OPEN, false, 2, 2, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096,
		  NOCALLS, WIN0, W(A_REJECT, S_DEAD, R_FAILED, E_BUDGET, 0, true)},
		 LEDGER_BUDGET_REQUEST},
		{{"pool 3 of 3", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, 3, 3,
		  W(A_REJECT, S_DEAD, R_FAILED, E_BUDGET, 0, true)},
		 LEDGER_BUDGET_POOL},
		{{"both spent", R_OPEN, false, 2, 2, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096,
		  NOCALLS, 3, 3, W(A_REJECT, S_DEAD, R_FAILED, E_BUDGET, 0, true)},
		 LEDGER_BUDGET_REQUEST},
		{{"cost", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 32769, NOCALLS, WIN0,
		  W(A_REJECT, S_DEAD, R_FAILED, E_COST, 0, true)},
		 LEDGER_BUDGET_NONE},
		{{"retry", OPEN1, S_LIVE, 5000, NEWEST, SIG_EXITED, 4096, NOCALLS, WIN0,
		  W(A_RETRY, S_DEAD, R_OPEN, NULL, 0, true)},
		 LEDGER_BUDGET_NONE},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct ledger_failover_decision d;

		assert_true(check_case("budget kind", i, &rows[i].c));
		decide(&rows[i].c, &d);
		if (d.budget != rows[i].budget)
			fail_msg("budget kind row %zu (%s): budget %d, want %d", i, rows[i].c.what,
				 (int)d.budget, (int)rows[i].budget);
	}
}

/*
 * Which decisions end the request, and so keep the answer its client was
 * sent: reject, terminate_stream, and cancel_upstream after a delta; never
 * an abandon (it may reopen), a wait or a rerun. Every final decision of
 * the cross table, checked against its request_after.
 */
static void test_failover_closes_only_what_ends_the_request(void **state)
{
	(void)state;
	for (size_t i = 0; i < n_cross; i++) {
		const struct cross_row *x = &cross_rows[i];
		struct ledger_failover_decision d = {
			.action = x->action, .request_after = x->request_after, .final = x->final};
		bool want = x->final && (x->action == A_REJECT || x->action == A_TERMINATE ||
					 (x->action == A_CANCEL && x->delta));

		if (ledger_failover_closes(&d) != want)
			fail_msg("line %u: %s, request %s: closes %d, want %d", cross_lines[i],
				 NAME(action_names, x->action),
				 NAME(status_names, x->request_after), ledger_failover_closes(&d),
				 want);
	}
}

/*
 * wait_for_fence, then the same call again once the source is fenced (by
 * its cancel-ack, by its lease running out, or by its held call ending):
 * retry_prefill, the source fenced for good.
 */
static void test_failover_wait_then_retry(void **state)
{
	struct ledger_failover_decision d;
	struct fo_case c = {"wait then retry",
			    OPEN1,
			    S_LIVE,
			    5000,
			    NEWEST,
			    SIG_NETWORK,
			    4096,
			    NOCALLS,
			    WIN0,
			    W(A_WAIT, S_CANCEL_REQ, R_OPEN, NULL, 5000, false)};

	(void)state;
	decide(&c, &d);
	assert_int_equal(d.action, A_WAIT);
	assert_int_equal(d.source_after, S_CANCEL_REQ);
	assert_int_equal(d.request_after, R_OPEN);
	assert_int_equal(d.retry_after_ms, 5000);
	assert_false(d.final);

	/* asked again too early: still waiting, for what is left */
	c.src = d.source_after;
	c.lease = 1200;
	decide(&c, &d);
	assert_int_equal(d.action, A_WAIT);
	assert_int_equal(d.source_after, S_CANCEL_REQ);
	assert_int_equal(d.retry_after_ms, 1200);
	assert_false(d.final);

	/* the worker acknowledged: cancelled, and it stays so */
	c.src = S_CANCELLED;
	decide(&c, &d);
	assert_int_equal(d.action, A_RETRY);
	assert_int_equal(d.source_after, S_CANCELLED);
	assert_int_equal(d.request_after, R_OPEN);
	assert_null(d.client_error);
	assert_true(d.final);

	/* or its lease ran out unacknowledged: superseded */
	c.src = S_CANCEL_REQ;
	c.lease = 0;
	decide(&c, &d);
	assert_int_equal(d.action, A_RETRY);
	assert_int_equal(d.source_after, S_SUPERSEDED);
	assert_int_equal(d.request_after, R_OPEN);
	assert_true(d.final);

	/*
	 * A held call of a dead replica: wait for the call (not for the dead
	 * replica's lease) revoked as cancel_requested, then retry: dead.
	 */
	c.signal = SIG_EXITED;
	c.src = S_LIVE;
	c.lease = 5000;
	c.held = 9000;
	decide(&c, &d);
	assert_int_equal(d.action, A_WAIT);
	assert_int_equal(d.source_after, S_CANCEL_REQ);
	assert_int_equal(d.retry_after_ms, 9000);
	assert_false(d.final);
	c.src = d.source_after;
	c.held = 0;
	decide(&c, &d);
	assert_int_equal(d.action, A_RETRY);
	assert_int_equal(d.source_after, S_DEAD);
	assert_true(d.final);
}

/* The API's names: each signal parses back to itself; unknown names do not. */
static void test_failover_names(void **state)
{
	enum ledger_signal s;

	(void)state;
	for (int i = 0; i <= (int)SIG_CLIENT_GONE; i++) {
		const char *name = ledger_failover_signal_name((enum ledger_signal)i);

		assert_non_null(name);
		assert_string_equal(name, signal_names[i]);
		s = SIG_OVERLOADED;
		assert_int_equal(ledger_failover_signal_parse(name, &s), 0);
		assert_int_equal(s, i);
	}
	assert_int_equal(ledger_failover_signal_parse("", &s), -1);
	assert_int_equal(ledger_failover_signal_parse("replica_exited ", &s), -1);
	assert_int_equal(ledger_failover_signal_parse("REPLICA_EXITED", &s), -1);
	assert_int_equal(ledger_failover_signal_parse("timeout", &s), -1);
	for (int i = 0; i <= (int)A_RETRY; i++)
		assert_string_equal(ledger_failover_action_name((enum ledger_failover_action)i),
				    action_names[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_failover_cross_table_is_complete),
		cmocka_unit_test(test_failover_cross_table),
		cmocka_unit_test(test_failover_not_newest_is_fenced),
		cmocka_unit_test(test_failover_closed_request),
		cmocka_unit_test(test_failover_unknown_outcome),
		cmocka_unit_test(test_failover_held_call),
		cmocka_unit_test(test_failover_uncertain_needs_lease),
		cmocka_unit_test(test_failover_budget_boundaries),
		cmocka_unit_test(test_failover_names_the_budget),
		cmocka_unit_test(test_failover_closes_only_what_ends_the_request),
		cmocka_unit_test(test_failover_wait_then_retry),
		cmocka_unit_test(test_failover_names),
	};

	return cmocka_run_group_tests_name("failover", tests, load_cross_rows, NULL);
}
