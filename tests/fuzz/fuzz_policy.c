/*
 * tests/fuzz/fuzz_policy.c: libFuzzer target for the failover policy file
 * (ledger/core/policy.c, YAML through libyaml). Any text in: a policy that
 * loads keeps every bound policy.c and docs/design.md set, and loads
 * again from the YAML it is written back as; a refusal is one line that
 * names a line of the input; an error buffer of any size is filled with
 * the start of the same message and never overrun.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/core/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant: say which, and abort so libFuzzer keeps the input. */
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_policy: %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#define MAX_SAFE_INT ((INT64_C(1) << 53) - 1)

static bool same_policy(const struct ledger_policy *a, const struct ledger_policy *b)
{
	return a->max_attempts == b->max_attempts &&
	       a->max_attempts_limit == b->max_attempts_limit &&
	       a->default_lease_ms == b->default_lease_ms &&
	       a->max_retry_prefill_tokens == b->max_retry_prefill_tokens &&
	       a->require_same_revision == b->require_same_revision &&
	       a->budget_percent == b->budget_percent &&
	       a->budget_window_ms == b->budget_window_ms &&
	       a->budget_min_retries == b->budget_min_retries;
}

/* The ranges of policy.c's key table, and max_attempts within max_attempts_limit. */
static void check_bounds(const struct ledger_policy *p)
{
	CHECK(p->max_attempts_limit >= 1 && p->max_attempts_limit <= 100);
	CHECK(p->max_attempts >= 1 && p->max_attempts <= p->max_attempts_limit);
	CHECK(p->default_lease_ms >= 100 && p->default_lease_ms <= 3600000);
	CHECK(p->max_retry_prefill_tokens >= 0 && p->max_retry_prefill_tokens <= MAX_SAFE_INT);
	CHECK(p->budget_percent <= 100);
	CHECK(p->budget_window_ms >= 1000 && p->budget_window_ms <= 3600000);
	CHECK(p->budget_window_ms % 1000 == 0);
	CHECK(p->budget_min_retries <= 1000000);
}

/* The policy as a file of every key, the layout of docs/design.md. */
static int write_back(const struct ledger_policy *p, char *out, size_t size)
{
	return snprintf(out, size,
			"on_upstream_failure:\n"
			"  before_first_delta:\n"
			"    require: [source_attempt_fenced, retry_budget_available]\n"
			"    action: retry_prefill_on_healthy_replica\n"
			"    max_attempts: %u\n"
			"  after_first_delta:\n"
			"    action: terminate_stream\n"
			"    client_error: upstream_decode_interrupted\n"
			"    automatic_retry: false\n"
			"  uncertain_source_liveness:\n"
			"    action: fence_source_attempt\n"
			"    wait_for: cancel_ack_or_lease_expiry\n"
			"    then: retry_only_if_no_delta_was_sent\n"
			"default_lease_ms: %lld\n"
			"max_attempts_limit: %u\n"
			"max_retry_prefill_tokens: %lld\n"
			"require_same_revision: %s\n"
			"pool_retry_budget:\n"
			"  percent_of_attempts: %u\n"
			"  window_s: %lld\n"
			"  min_retries: %u\n",
			p->max_attempts, (long long)p->default_lease_ms, p->max_attempts_limit,
			(long long)p->max_retry_prefill_tokens,
			p->require_same_revision ? "true" : "false", p->budget_percent,
			(long long)(p->budget_window_ms / 1000), p->budget_min_retries);
}

/* Every byte YAML may read as a line break (\n, \r, and the last bytes of NEL, LS, PS). */
static size_t breaks_in(const uint8_t *s, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += s[i] == '\n' || s[i] == '\r' || s[i] == 0x85 || s[i] == 0xa8 || s[i] == 0xa9;
	return k;
}

/* libyaml reads UTF-16 when a byte order mark says so; its breaks are other bytes. */
static bool utf16(const uint8_t *s, size_t n)
{
	return n >= 2 && ((s[0] == 0xff && s[1] == 0xfe) || (s[0] == 0xfe && s[1] == 0xff));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t small[] = {1, 2, 9, 24, 80};
	const char *yaml = (const char *)data;
	struct ledger_policy p, q;
	char err[512], again_err[512], text[2048];
	enum ledger_err rc, again;
	unsigned long line;
	char *end = NULL;
	int n;

	memset(&p, 0, sizeof(p));
	memset(err, 'x', sizeof(err));
	rc = ledger_policy_parse(yaml, size, &p, err, sizeof(err));
	CHECK(rc == LEDGER_OK || rc == LEDGER_ERR_INVALID);
	CHECK(memchr(err, '\0', sizeof(err)) != NULL);

	/* The same text, the same answer. */
	memset(&q, 0, sizeof(q));
	again = ledger_policy_parse(yaml, size, &q, again_err, sizeof(again_err));
	CHECK(again == rc && strcmp(again_err, err) == 0);

	/* A short buffer holds the message's start; nothing is written past it. */
	for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
		char *b = malloc(small[i]);
		size_t want = strlen(err) < small[i] - 1 ? strlen(err) : small[i] - 1;

		CHECK(b != NULL);
		CHECK(ledger_policy_parse(yaml, size, &q, b, small[i]) == rc);
		CHECK(strnlen(b, small[i]) == want && memcmp(b, err, want) == 0);
		free(b);
	}
	CHECK(ledger_policy_parse(yaml, size, &q, NULL, 0) == rc);

	if (rc != LEDGER_OK) {
		/* "line N: ...", one line, N a line of the input. */
		CHECK(strncmp(err, "line ", 5) == 0);
		line = strtoul(err + 5, &end, 10);
		CHECK(end != err + 5 && strncmp(end, ": ", 2) == 0);
		CHECK(line >= 1);
		if (!utf16(data, size))
			CHECK(line <= breaks_in(data, size) + 1);
		CHECK(strchr(err, '\n') == NULL);
		return 0;
	}
	CHECK(err[0] == '\0');
	CHECK(same_policy(&p, &q));
	check_bounds(&p);

	/* Written back in full, it loads as itself. */
	n = write_back(&p, text, sizeof(text));
	CHECK(n > 0 && (size_t)n < sizeof(text));
	memset(&q, 0, sizeof(q));
	rc = ledger_policy_parse(text, (size_t)n, &q, err, sizeof(err));
	if (rc != LEDGER_OK)
		fprintf(stderr, "fuzz_policy: written back, refused: %s\n%s", err, text);
	CHECK(rc == LEDGER_OK && same_policy(&p, &q));
	return 0;
}
