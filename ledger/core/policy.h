/*
 * ledger/core/policy.h: the failover policy (docs/design.md, "Failover policy"),
 * built in or loaded from a YAML file. The file may only choose what
 * ledgerd implements: a setting that would promise another behaviour (an
 * automatic retry after the first delta, say) is refused at start-up.
 */
#ifndef LEDGER_POLICY_H
#define LEDGER_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/err.h"

struct ledger_policy {
	unsigned max_attempts;            /* before_first_delta.max_attempts: default per request */
	unsigned max_attempts_limit;      /* the most a request may ask for */
	int64_t default_lease_ms;         /* an attempt's lease when it names none */
	int64_t max_retry_prefill_tokens; /* a longer rerun is rejected: retry_cost_exceeded */
	bool require_same_revision;       /* a rerun must use the first attempt's model_revision */
	unsigned budget_percent;          /* pool_retry_budget.percent_of_attempts */
	int64_t budget_window_ms;         /* pool_retry_budget.window_s, in ms */
	unsigned budget_min_retries;      /* pool_retry_budget.min_retries */
};

/** Fills @p p with the built-in policy, the one docs/design.md shows. */
void ledger_policy_default(struct ledger_policy *p);

/**
 * Parses a policy document of @p len bytes. Keys left out keep their
 * built-in values; unknown keys, wrong types, values out of range and
 * values ledgerd does not implement are errors.
 * @param err receives one line naming the key and its line on failure
 * @return LEDGER_OK or LEDGER_ERR_INVALID (@p p is then unspecified)
 */
LEDGER_MUSTCHECK enum ledger_err ledger_policy_parse(const char *yaml, size_t len,
						     struct ledger_policy *p, char *err,
						     size_t errlen);

/** Reads the file at @p path and parses it as ledger_policy_parse() does. */
LEDGER_MUSTCHECK enum ledger_err ledger_policy_load(const char *path, struct ledger_policy *p,
						    char *err, size_t errlen);

#endif
