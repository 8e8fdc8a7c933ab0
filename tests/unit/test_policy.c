/*
 * tests/unit/test_policy.c: unit tests of the failover policy loader
 * (ledger/core/policy.c). The policy file may only restate what ledgerd does, so
 * most tables here are documents that must be refused, each pinned to the
 * line and key path its one-line error names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger/core/policy.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The sections of the document, as a document opens them and as errors name them. */
#define BEFORE "on_upstream_failure:\n  before_first_delta:\n"
#define AFTER "on_upstream_failure:\n  after_first_delta:\n"
#define UNCERTAIN "on_upstream_failure:\n  uncertain_source_liveness:\n"
#define P_BEFORE "on_upstream_failure.before_first_delta."
#define P_AFTER "on_upstream_failure.after_first_delta."
#define P_UNCERTAIN "on_upstream_failure.uncertain_source_liveness."

/* docs/design.md, "Failover policy", verbatim. */
static const char design_doc[] =
	"on_upstream_failure:\n"
	"  before_first_delta:\n"
	"    require: [source_attempt_fenced, retry_budget_available]\n"
	"    action: retry_prefill_on_healthy_replica\n"
	"    max_attempts: 2\n"
	"  after_first_delta:\n"
	"    action: terminate_stream\n"
	"    client_error: upstream_decode_interrupted\n"
	"    automatic_retry: false\n"
	"  uncertain_source_liveness:\n"
	"    action: fence_source_attempt\n"
	"    wait_for: cancel_ack_or_lease_expiry\n"
	"    then: retry_only_if_no_delta_was_sent\n"
	"default_lease_ms: 30000\n"
	"max_attempts_limit: 5            # upper bound a request may ask for\n"
	"max_retry_prefill_tokens: 32768  # a longer rerun is rejected: retry_cost_exceeded\n"
	"require_same_revision: true\n"
	"pool_retry_budget:               # per tenant, against retry storms\n"
	"  percent_of_attempts: 20\n"
	"  window_s: 10\n"
	"  min_retries: 3\n";

/* An error case: the document, the line its error must name, and a piece of the message. */
struct bad {
	const char *yaml;
	unsigned line;
	const char *needle;
};

static void assert_same_policy(const struct ledger_policy *a, const struct ledger_policy *b)
{
	assert_int_equal(a->max_attempts, b->max_attempts);
	assert_int_equal(a->max_attempts_limit, b->max_attempts_limit);
	assert_int_equal(a->default_lease_ms, b->default_lease_ms);
	assert_int_equal(a->max_retry_prefill_tokens, b->max_retry_prefill_tokens);
	assert_int_equal(a->require_same_revision, b->require_same_revision);
	assert_int_equal(a->budget_percent, b->budget_percent);
	assert_int_equal(a->budget_window_ms, b->budget_window_ms);
	assert_int_equal(a->budget_min_retries, b->budget_min_retries);
}

static void parse_ok(const char *yaml, struct ledger_policy *p)
{
	char err[256] = "";
	enum ledger_err rc = ledger_policy_parse(yaml, strlen(yaml), p, err, sizeof(err));

	if (rc != LEDGER_OK)
		print_error("unexpected error for:\n%s\n-> %s\n", yaml, err);
	assert_int_equal(rc, LEDGER_OK);
	assert_string_equal(err, "");
}

static void parse_bad(const struct bad *b)
{
	struct ledger_policy p;
	char err[256] = "";
	char prefix[32];
	enum ledger_err rc = ledger_policy_parse(b->yaml, strlen(b->yaml), &p, err, sizeof(err));

	snprintf(prefix, sizeof(prefix), "line %u: ", b->line);
	if (rc != LEDGER_ERR_INVALID || strncmp(err, prefix, strlen(prefix)) != 0 ||
	    strstr(err, b->needle) == NULL)
		print_error("for:\n%s\n-> rc %d, \"%s\"\nwanted \"%s...%s\"\n", b->yaml, (int)rc,
			    err, prefix, b->needle);
	assert_int_equal(rc, LEDGER_ERR_INVALID);
	assert_memory_equal(err, prefix, strlen(prefix));
	assert_non_null(strstr(err, b->needle));
	assert_null(strchr(err, '\n'));
}

static void parse_bad_table(const struct bad *table, size_t n)
{
	for (size_t i = 0; i < n; i++)
		parse_bad(&table[i]);
}

static void test_policy_default_values(void **state)
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

static void test_policy_design_document_is_default(void **state)
{
	struct ledger_policy want, got;

	(void)state;
	ledger_policy_default(&want);
	memset(&got, 0xa5, sizeof(got));
	parse_ok(design_doc, &got);
	assert_same_policy(&got, &want);
}

static void test_policy_empty_documents(void **state)
{
	static const char *const docs[] = {
		"",          "# only a comment\n",
		"\n\n   \n", "# one\n\n# two\n",
		"---\n",     "--- # an explicit empty document\n...\n",
	};
	struct ledger_policy want, got;
	char err[64];

	(void)state;
	ledger_policy_default(&want);
	for (size_t i = 0; i < COUNT(docs); i++) {
		memset(&got, 0xa5, sizeof(got));
		parse_ok(docs[i], &got);
		assert_same_policy(&got, &want);
	}
	memset(&got, 0xa5, sizeof(got));
	assert_int_equal(ledger_policy_parse(NULL, 0, &got, err, sizeof(err)), LEDGER_OK);
	assert_same_policy(&got, &want);
}

enum slot {
	S_ATTEMPTS,
	S_LIMIT,
	S_LEASE,
	S_PREFILL,
	S_REVISION,
	S_PERCENT,
	S_WINDOW,
	S_MIN
};

static void set_slot(struct ledger_policy *p, enum slot s, int64_t v)
{
	switch (s) {
	case S_ATTEMPTS:
		p->max_attempts = (unsigned)v;
		break;
	case S_LIMIT:
		p->max_attempts_limit = (unsigned)v;
		break;
	case S_LEASE:
		p->default_lease_ms = v;
		break;
	case S_PREFILL:
		p->max_retry_prefill_tokens = v;
		break;
	case S_REVISION:
		p->require_same_revision = v != 0;
		break;
	case S_PERCENT:
		p->budget_percent = (unsigned)v;
		break;
	case S_WINDOW:
		p->budget_window_ms = v;
		break;
	case S_MIN:
		p->budget_min_retries = (unsigned)v;
		break;
	}
}

static void test_policy_each_key_overridden(void **state)
{
	static const struct {
		const char *yaml;
		enum slot slot;
		int64_t value;
	} cases[] = {
		{BEFORE "    max_attempts: 4\n", S_ATTEMPTS, 4},
		{"max_attempts_limit: 9\n", S_LIMIT, 9},
		{"default_lease_ms: 1500\n", S_LEASE, 1500},
		{"max_retry_prefill_tokens: 100000\n", S_PREFILL, 100000},
		{"require_same_revision: false\n", S_REVISION, 0},
		{"pool_retry_budget:\n  percent_of_attempts: 35\n", S_PERCENT, 35},
		{"pool_retry_budget:\n  window_s: 60\n", S_WINDOW, 60000},
		{"pool_retry_budget:\n  min_retries: 12\n", S_MIN, 12},
		{"pool_retry_budget: {min_retries: 7}\n", S_MIN, 7},
		{"\"default_lease_ms\": 2500\n", S_LEASE, 2500},
	};
	struct ledger_policy want, got;

	(void)state;
	for (size_t i = 0; i < COUNT(cases); i++) {
		ledger_policy_default(&want);
		set_slot(&want, cases[i].slot, cases[i].value);
		parse_ok(cases[i].yaml, &got);
		assert_same_policy(&got, &want);
	}
}

static void test_policy_supported_values_accepted(void **state)
{
	static const char *const docs[] = {
		BEFORE "    require: [retry_budget_available, source_attempt_fenced]\n",
		BEFORE "    require:\n"
		       "      - source_attempt_fenced\n      - retry_budget_available\n",
		BEFORE "    require: ['source_attempt_fenced', \"retry_budget_available\"]\n",
		AFTER "    action: \"terminate_stream\"\n",
		UNCERTAIN "    then: 'retry_only_if_no_delta_was_sent'\n",
		"on_upstream_failure: {}\npool_retry_budget: {}\n",
		"require_same_revision: true\n",
	};
	struct ledger_policy want, got;

	(void)state;
	ledger_policy_default(&want);
	for (size_t i = 0; i < COUNT(docs); i++) {
		parse_ok(docs[i], &got);
		assert_same_policy(&got, &want);
	}
}

static void test_policy_unsupported_values_refused(void **state)
{
	static const struct bad cases[] = {
		{BEFORE "    action: retry_on_any_replica\n", 3,
		 P_BEFORE "action: must be "
			  "retry_prefill_on_healthy_replica, the only behaviour ledgerd implements "
			  "(got \"retry_on_any_replica\")"},
		{BEFORE "    require: [source_attempt_fenced]\n", 3,
		 P_BEFORE "require: must be "
			  "[source_attempt_fenced, retry_budget_available] (both, in any order)"},
		{BEFORE "    require: []\n", 3,
		 "before_first_delta.require: must be [source_attempt_fenced, "
		 "retry_budget_available]"},
		{BEFORE "    require: [source_attempt_fenced, "
			"retry_budget_available, replica_healthy]\n",
		 3, "(got \"replica_healthy\")"},
		{BEFORE "    require: [source_attempt_fenced, "
			"source_attempt_fenced]\n",
		 3, "(got twice \"source_attempt_fenced\")"},
		{BEFORE "    require:\n"
			"      - source_attempt_fenced\n      - budget_available\n",
		 5, "before_first_delta.require: must be [source_attempt_fenced"},
		{BEFORE "    require: source_attempt_fenced\n", 3,
		 "before_first_delta.require: must be [source_attempt_fenced"},
		{BEFORE "    require: [[source_attempt_fenced]]\n", 3, "(got a sequence)"},
		{AFTER "    action: retry_prefill\n", 3,
		 P_AFTER "action: must be terminate_stream, the only "
			 "behaviour ledgerd implements"},
		{AFTER "    client_error: upstream_error\n", 3,
		 P_AFTER "client_error: must be "
			 "upstream_decode_interrupted"},
		{AFTER "    automatic_retry: true\n", 3,
		 P_AFTER "automatic_retry: must be false: a delta "
			 "already reached the client, so ledgerd never retries automatically"},
		{UNCERTAIN "    action: retry_at_once\n", 3,
		 P_UNCERTAIN "action: must be fence_source_attempt"},
		{UNCERTAIN "    wait_for: lease_expiry\n", 3,
		 P_UNCERTAIN "wait_for: must be "
			     "cancel_ack_or_lease_expiry"},
		{UNCERTAIN "    then: retry\n", 3,
		 P_UNCERTAIN "then: must be "
			     "retry_only_if_no_delta_was_sent"},
		{UNCERTAIN "    then: \"retry\\nnow\"\n", 3,
		 "(got the quoted string \"retry?now\")"},
	};

	(void)state;
	parse_bad_table(cases, COUNT(cases));
}

static void test_policy_unknown_keys_refused(void **state)
{
	static const struct bad cases[] = {
		{"default_lease_ms: 100\nmax_attempt_limit: 5\n", 2,
		 "max_attempt_limit: unknown key (expected on_upstream_failure, default_lease_ms, "
		 "max_attempts_limit, max_retry_prefill_tokens, require_same_revision, "
		 "pool_retry_budget)"},
		{"on_upstream_failure:\n  before_first_dleta: {}\n", 2,
		 "on_upstream_failure.before_first_dleta: unknown key "
		 "(expected before_first_delta, after_first_delta, uncertain_source_liveness)"},
		{BEFORE "    max_attempt: 2\n", 3, P_BEFORE "max_attempt: unknown key"},
		{AFTER "    retry: false\n", 3, P_AFTER "retry: unknown key"},
		{UNCERTAIN "    timeout_ms: 10\n", 3, P_UNCERTAIN "timeout_ms: unknown key"},
		{"pool_retry_budget:\n  window_ms: 10000\n", 2,
		 "pool_retry_budget.window_ms: unknown key "
		 "(expected percent_of_attempts, window_s, min_retries)"},
		{"Default_Lease_MS: 100\n", 1, "Default_Lease_MS: unknown key"},
		{"? [a, b]\n: 1\n", 1, "keys must be strings"},
	};

	(void)state;
	parse_bad_table(cases, COUNT(cases));
}

static void test_policy_wrong_types_refused(void **state)
{
	static const struct bad cases[] = {
		{"default_lease_ms: \"30000\"\n", 1,
		 "default_lease_ms: must be an integer from 100 to 3600000 "
		 "(got the quoted string \"30000\")"},
		{"default_lease_ms: '30000'\n", 1, "(got the quoted string \"30000\")"},
		{"default_lease_ms: 30000.0\n", 1, "must be an integer from 100 to 3600000"},
		{"default_lease_ms: 3e4\n", 1, "must be an integer"},
		{"default_lease_ms: 0x7530\n", 1, "must be an integer"},
		{"default_lease_ms: +30000\n", 1, "must be an integer"},
		{"default_lease_ms: 30_000\n", 1, "must be an integer"},
		{"default_lease_ms: 030000\n", 1, "must be an integer"},
		{"default_lease_ms:\n", 1, "must be an integer from 100 to 3600000 (got nothing)"},
		{"default_lease_ms: true\n", 1, "(got \"true\")"},
		{"default_lease_ms: [30000]\n", 1, "(got a sequence)"},
		{"default_lease_ms: {ms: 30000}\n", 1, "(got a mapping)"},
		{"max_retry_prefill_tokens: 99999999999999999999999\n", 1,
		 "max_retry_prefill_tokens: must be an integer from 0 to 9007199254740991"},
		{"require_same_revision: \"true\"\n", 1,
		 "require_same_revision: must be true or false (got the quoted string \"true\")"},
		{"require_same_revision: yes\n", 1, "must be true or false (got \"yes\")"},
		{"require_same_revision: True\n", 1, "must be true or false"},
		{"require_same_revision: 1\n", 1, "must be true or false"},
		{"on_upstream_failure: 5\n", 1,
		 "on_upstream_failure: must be a mapping of before_first_delta, after_first_delta, "
		 "uncertain_source_liveness (got \"5\")"},
		{"on_upstream_failure:\n", 1, "on_upstream_failure: must be a mapping"},
		{"pool_retry_budget: [20, 10, 3]\n", 1, "pool_retry_budget: must be a mapping"},
		{"on_upstream_failure:\n  after_first_delta: terminate_stream\n", 2,
		 "on_upstream_failure.after_first_delta: must be a mapping"},
		{BEFORE "    max_attempts: \"2\"\n", 3,
		 P_BEFORE "max_attempts: must be an integer from 1 to "
			  "max_attempts_limit (got the quoted string \"2\")"},
		{BEFORE "    max_attempts: -1\n", 3,
		 "max_attempts: must be an integer from 1 to max_attempts_limit"},
		{AFTER "    automatic_retry: \"false\"\n", 3,
		 "automatic_retry: must be false, the only behaviour ledgerd implements"},
		{AFTER "    automatic_retry: no\n", 3, "automatic_retry: must be false"},
		{AFTER "    action: [terminate_stream]\n", 3,
		 "action: must be terminate_stream, the only behaviour ledgerd implements "
		 "(got a sequence)"},
		{"pool_retry_budget:\n  window_s: 1.5\n", 2,
		 "pool_retry_budget.window_s: must be an integer"},
	};

	(void)state;
	parse_bad_table(cases, COUNT(cases));
}

static void test_policy_ranges_at_both_boundaries(void **state)
{
	static const struct {
		const char *pre, *post; /* the document around the value */
		unsigned line;          /* of the value */
		const char *path;
		const char *low_bad, *low, *high, *high_bad;
		enum slot slot;
		int64_t low_stored, high_stored;
	} cases[] = {
		{"max_attempts_limit: ", "\n" BEFORE "    max_attempts: 1\n", 1,
		 "max_attempts_limit", "0", "1", "100", "101", S_LIMIT, 1, 100},
		{"default_lease_ms: ", "\n", 1, "default_lease_ms", "99", "100", "3600000",
		 "3600001", S_LEASE, 100, 3600000},
		{"max_retry_prefill_tokens: ", "\n", 1, "max_retry_prefill_tokens", "-1", "0",
		 "9007199254740991", "9007199254740992", S_PREFILL, 0, INT64_C(9007199254740991)},
		{"# the budget\npool_retry_budget:\n  percent_of_attempts: ", "\n", 3,
		 "pool_retry_budget.percent_of_attempts", "-1", "0", "100", "101", S_PERCENT, 0,
		 100},
		{"pool_retry_budget:\n  window_s: ", "\n", 2, "pool_retry_budget.window_s", "0",
		 "1", "3600", "3601", S_WINDOW, 1000, 3600000},
		{"pool_retry_budget:\n  min_retries: ", "\n", 2, "pool_retry_budget.min_retries",
		 "-1", "0", "1000000", "1000001", S_MIN, 0, 1000000},
		{"max_attempts_limit: 100\n" BEFORE "    max_attempts: ", "\n", 4,
		 P_BEFORE "max_attempts", "0", "1", "100", "101", S_ATTEMPTS, 1, 100},
	};
	struct ledger_policy want, got;
	char yaml[256], needle[160];

	(void)state;
	for (size_t i = 0; i < COUNT(cases); i++) {
		const char *bad[2] = {cases[i].low_bad, cases[i].high_bad};
		const char *good[2] = {cases[i].low, cases[i].high};
		int64_t stored[2] = {cases[i].low_stored, cases[i].high_stored};

		for (size_t j = 0; j < 2; j++) {
			struct bad b = {yaml, cases[i].line, needle};

			snprintf(yaml, sizeof(yaml), "%s%s%s", cases[i].pre, bad[j], cases[i].post);
			snprintf(needle, sizeof(needle), "%s: must be an integer from ",
				 cases[i].path);
			parse_bad(&b);

			snprintf(yaml, sizeof(yaml), "%s%s%s", cases[i].pre, good[j],
				 cases[i].post);
			ledger_policy_default(&want);
			/* The documents for the pair set the other one of it too. */
			if (cases[i].slot == S_LIMIT) {
				set_slot(&want, S_ATTEMPTS, 1);
				set_slot(&want, S_LIMIT, stored[j]);
			} else if (cases[i].slot == S_ATTEMPTS) {
				set_slot(&want, S_ATTEMPTS, stored[j]);
				set_slot(&want, S_LIMIT, 100);
			} else {
				set_slot(&want, cases[i].slot, stored[j]);
			}
			parse_ok(yaml, &got);
			assert_same_policy(&got, &want);
		}
	}
}

static void test_policy_max_attempts_over_limit(void **state)
{
	static const struct bad cases[] = {
		/* max_attempts first */
		{BEFORE "    max_attempts: 4\n"
			"max_attempts_limit: 3\n",
		 3,
		 P_BEFORE "max_attempts: must be an integer from 1 "
			  "to max_attempts_limit (3)"},
		/* the limit first */
		{"max_attempts_limit: 3\non_upstream_failure:\n  before_first_delta:\n"
		 "    max_attempts: 4\n",
		 4,
		 P_BEFORE "max_attempts: must be an integer from 1 "
			  "to max_attempts_limit (3)"},
		/* over the built-in limit */
		{BEFORE "    max_attempts: 6\n", 3,
		 "max_attempts: must be an integer from 1 to max_attempts_limit (5)"},
		/* a limit below the built-in max_attempts */
		{"# lower bound\nmax_attempts_limit: 1\n", 2,
		 "max_attempts_limit: must be at least " P_BEFORE "max_attempts (2, built in)"},
	};
	static const char *const fine[] = {
		BEFORE "    max_attempts: 7\n"
		       "max_attempts_limit: 7\n",
		"max_attempts_limit: 1\non_upstream_failure:\n  before_first_delta:\n"
		"    max_attempts: 1\n",
	};
	struct ledger_policy p;

	(void)state;
	parse_bad_table(cases, COUNT(cases));
	parse_ok(fine[0], &p);
	assert_int_equal(p.max_attempts, 7);
	assert_int_equal(p.max_attempts_limit, 7);
	parse_ok(fine[1], &p);
	assert_int_equal(p.max_attempts, 1);
	assert_int_equal(p.max_attempts_limit, 1);
}

static void test_policy_duplicate_key_refused(void **state)
{
	static const struct bad cases[] = {
		{"default_lease_ms: 100\nmax_attempts_limit: 5\ndefault_lease_ms: 100\n", 3,
		 "default_lease_ms: duplicate key (first on line 1)"},
		{"pool_retry_budget:\n  window_s: 5\n  window_s: 6\n", 3,
		 "pool_retry_budget.window_s: duplicate key (first on line 2)"},
		{"on_upstream_failure:\n  after_first_delta: {}\n  after_first_delta: {}\n", 3,
		 "on_upstream_failure.after_first_delta: duplicate key (first on line 2)"},
		{"pool_retry_budget: {}\n\"pool_retry_budget\": {}\n", 2,
		 "pool_retry_budget: duplicate key (first on line 1)"},
	};

	(void)state;
	parse_bad_table(cases, COUNT(cases));
}

static void test_policy_syntax_error_names_line(void **state)
{
	static const struct bad cases[] = {
		{"default_lease_ms: 100\nmax_attempts_limit: 5\npool_retry_budget:\n"
		 "  window_s: 5\n   min_retries: 3\n",
		 5, "YAML syntax error: mapping values are not allowed in this context"},
		{"default_lease_ms: 100\npool_retry_budget: {window_s: 5\n", 3,
		 "YAML syntax error: did not find expected ',' or '}' "
		 "(while parsing a flow mapping on line 2)"},
		{"default_lease_ms: 100\n\tmax_attempts_limit: 5\n", 2, "YAML syntax error: "},
		{"default_lease_ms: \"100\n", 2,
		 "YAML syntax error: found unexpected end of stream"},
		{"default_lease_ms: 100\n# bad byte: \xff\n", 2,
		 "YAML syntax error: invalid leading UTF-8 octet"},
		/* No final break: libyaml's mark moves past the last line, the report does not. */
		{"default_lease_ms: [1", 1,
		 "YAML syntax error: did not find expected ',' or ']' "
		 "(while parsing a flow sequence on line 1)"},
		/* Lines ended by \r alone, as libyaml reads them, in marks and in byte offsets. */
		{"default_lease_ms: 100\r\rpool_retry_budget: [", 3,
		 "YAML syntax error: did not find expected node content"},
		{"default_lease_ms: 100\r\r# bad byte: \xff\r", 3,
		 "YAML syntax error: invalid leading UTF-8 octet"},
	};

	(void)state;
	parse_bad_table(cases, COUNT(cases));
}

static void test_policy_top_level_not_mapping(void **state)
{
	static const struct bad cases[] = {
		{"# a list\n- default_lease_ms: 100\n", 2,
		 "the policy must be a mapping of keys at the top level"},
		{"default_lease_ms\n", 1, "the policy must be a mapping of keys at the top level"},
		{"~\n", 1, "must be a mapping"},
		{"\"\"\n", 1, "must be a mapping"},
	};

	(void)state;
	parse_bad_table(cases, COUNT(cases));
}

static void test_policy_multiple_documents_refused(void **state)
{
	static const struct bad cases[] = {
		{"default_lease_ms: 100\n---\ndefault_lease_ms: 200\n", 2,
		 "a second YAML document: the policy is one document"},
		{"--- {}\n--- {}\n", 2, "a second YAML document"},
	};

	(void)state;
	parse_bad_table(cases, COUNT(cases));
}

static void test_policy_anchors_aliases_tags_refused(void **state)
{
	static const struct bad cases[] = {
		{"default_lease_ms: &lease 100\n", 1,
		 "default_lease_ms: YAML anchors are not supported"},
		{"pool_retry_budget:\n  window_s: &w 5\n  min_retries: *w\n", 2,
		 "pool_retry_budget.window_s: YAML anchors are not supported"},
		{"pool_retry_budget:\n  min_retries: *w\n", 2,
		 "pool_retry_budget.min_retries: YAML aliases are not supported"},
		{"&top\ndefault_lease_ms: 100\n", 1, "YAML anchors are not supported"},
		{"default_lease_ms: !!int 100\n", 1,
		 "default_lease_ms: YAML tags are not supported"},
		{"on_upstream_failure: !!map {}\n", 1, "YAML tags are not supported"},
	};

	(void)state;
	parse_bad_table(cases, COUNT(cases));
}

static void test_policy_error_buffer_bounds(void **state)
{
	static const char bad[] = "pool_retry_budget:\n  window_s: 0\n";
	struct ledger_policy p;
	char small[12];

	(void)state;
	memset(small, 'x', sizeof(small));
	assert_int_equal(ledger_policy_parse(bad, strlen(bad), &p, small, sizeof(small)),
			 LEDGER_ERR_INVALID);
	assert_string_equal(small, "line 2: poo");
	assert_int_equal(ledger_policy_parse(bad, strlen(bad), &p, NULL, 0), LEDGER_ERR_INVALID);
	/* The length is honoured: the bytes past it are never read. */
	assert_int_equal(
		ledger_policy_parse("default_lease_ms: 1000xyz", 22, &p, small, sizeof(small)),
		LEDGER_OK);
	assert_int_equal(p.default_lease_ms, 1000);
}

/* Writes @p len bytes of @p data to a fresh file under /tmp; the caller unlinks it. */
static void write_temp(char *path, size_t size, const char *data, size_t len)
{
	FILE *f = NULL;
	int fd;

	snprintf(path, size, "/tmp/test_policy_XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static void test_policy_load_file(void **state)
{
	static const char doc[] = "pool_retry_budget:\n  window_s: 30\n";
	static const char bad[] = "# policy\npool_retry_budget:\n  window_s: 0\n";
	struct ledger_policy want, got;
	char path[64], err[256], expect[256];

	(void)state;
	write_temp(path, sizeof(path), doc, strlen(doc));
	ledger_policy_default(&want);
	want.budget_window_ms = 30000;
	assert_int_equal(ledger_policy_load(path, &got, err, sizeof(err)), LEDGER_OK);
	assert_same_policy(&got, &want);
	assert_int_equal(unlink(path), 0);

	write_temp(path, sizeof(path), bad, strlen(bad));
	assert_int_equal(ledger_policy_load(path, &got, err, sizeof(err)), LEDGER_ERR_INVALID);
	snprintf(expect, sizeof(expect),
		 "policy file %s: line 3: pool_retry_budget.window_s: must be an integer from 1 "
		 "to 3600 (got \"0\")",
		 path);
	assert_string_equal(err, expect);
	assert_int_equal(unlink(path), 0);

	write_temp(path, sizeof(path), design_doc, strlen(design_doc));
	ledger_policy_default(&want);
	assert_int_equal(ledger_policy_load(path, &got, err, sizeof(err)), LEDGER_OK);
	assert_same_policy(&got, &want);
	assert_int_equal(unlink(path), 0);
}

static void test_policy_load_missing_file(void **state)
{
	struct ledger_policy p;
	char path[64], err[256], expect[256];

	(void)state;
	snprintf(path, sizeof(path), "/tmp/test_policy_missing_%ld.yaml", (long)getpid());
	(void)unlink(path);
	assert_int_equal(ledger_policy_load(path, &p, err, sizeof(err)), LEDGER_ERR_INVALID);
	snprintf(expect, sizeof(expect), "policy file %s: cannot open: No such file or directory",
		 path);
	assert_string_equal(err, expect);

	assert_int_equal(ledger_policy_load("/tmp", &p, err, sizeof(err)), LEDGER_ERR_INVALID);
	assert_string_equal(err, "policy file /tmp: cannot read: Is a directory");
}

static void test_policy_load_size_limit(void **state)
{
	const size_t mib = 1024 * 1024;
	struct ledger_policy want, got;
	char path[64], err[256], expect[256];
	char *data = NULL;

	(void)state;
	/* Comment lines only: at the limit the file is all built in, one byte more is refused. */
	data = malloc(mib + 1);
	assert_non_null(data);
	for (size_t i = 0; i < mib + 1; i++)
		data[i] = i % 64 == 0 ? '#' : i % 64 == 63 ? '\n' : 'x';

	write_temp(path, sizeof(path), data, mib);
	ledger_policy_default(&want);
	assert_int_equal(ledger_policy_load(path, &got, err, sizeof(err)), LEDGER_OK);
	assert_same_policy(&got, &want);
	assert_int_equal(unlink(path), 0);

	write_temp(path, sizeof(path), data, mib + 1);
	assert_int_equal(ledger_policy_load(path, &got, err, sizeof(err)), LEDGER_ERR_LIMIT);
	snprintf(expect, sizeof(expect), "policy file %s: larger than 1 MiB", path);
	assert_string_equal(err, expect);
	assert_int_equal(unlink(path), 0);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy_default_values),
		cmocka_unit_test(test_policy_design_document_is_default),
		cmocka_unit_test(test_policy_empty_documents),
		cmocka_unit_test(test_policy_each_key_overridden),
		cmocka_unit_test(test_policy_supported_values_accepted),
		cmocka_unit_test(test_policy_unsupported_values_refused),
		cmocka_unit_test(test_policy_unknown_keys_refused),
		cmocka_unit_test(test_policy_wrong_types_refused),
		cmocka_unit_test(test_policy_ranges_at_both_boundaries),
		cmocka_unit_test(test_policy_max_attempts_over_limit),
		cmocka_unit_test(test_policy_duplicate_key_refused),
		cmocka_unit_test(test_policy_syntax_error_names_line),
		cmocka_unit_test(test_policy_top_level_not_mapping),
		cmocka_unit_test(test_policy_multiple_documents_refused),
		cmocka_unit_test(test_policy_anchors_aliases_tags_refused),
		cmocka_unit_test(test_policy_error_buffer_bounds),
		cmocka_unit_test(test_policy_load_file),
		cmocka_unit_test(test_policy_load_missing_file),
		cmocka_unit_test(test_policy_load_size_limit),
	};

	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
