/*
 * tests/sdk/c/test_c_client.h: what the files of the C SDK's live test share:
 * the ledgerd they talk to, helpers that set states up through raw HTTP,
 * and the tests of tests/sdk/c/test_c_client_review.c,
 * tests/sdk/c/test_c_client_router.c and tests/sdk/c/test_c_client_results.c
 * that main() runs.
 */
#ifndef TEST_C_CLIENT_H
#define TEST_C_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "ledger_client.h"

/* From the environment: the ledgerd under test and a token of each role. */
extern const char *url, *agent_token, *router_token, *admin_token;

void sleep_ms(unsigned ms);

/** A fresh id "PREFIX-n-pid" into @p out. */
void new_id(char *out, size_t size, const char *prefix);

/** A client of the ledgerd under test with @p token and the given bounds. */
struct ledger_client *open_client(const char *token, uint32_t retry_ms, uint32_t complete_retry_ms);

/** A raw HTTP call (GET when @p body is NULL) to the path @p fmt formats. @return the status */
long rawf(const char *token, char **resp, const char *body, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/** The state of a tool call, as GET answers it, into @p out. */
void call_state(const char *rid, const char *cid, char *out, size_t size);

/* A tool that counts its runs and reports what it is told to. */
struct tool {
	int calls;                      /* how often it ran */
	enum ledger_tool_status status; /* what it reports */
	const char *result;             /* what it returns (copied), NULL for none */
	unsigned sleep_ms;              /* how long it takes */
	char key[300];                  /* the idempotency key it was given */
	uint64_t token;                 /* and the fencing token */
};

/** Runs the struct tool @p ctx: a ledger_tool_fn. */
enum ledger_tool_status run_tool(void *ctx, const char *key, uint64_t token, char **result);

/** A ledger_tool_fn that fails the test if it is ever called. */
enum ledger_tool_status must_not_run(void *ctx, const char *key, uint64_t token, char **result);

/* tests/sdk/c/test_c_client_router.c */
void test_client_router_full_failover(void **state);
void test_client_router_other_decisions(void **state);
void test_client_heartbeat_keeps_the_attempt_live(void **state);
void test_client_tool_calls_under_an_attempt(void **state);

/* tests/sdk/c/test_c_client_review.c */
void test_client_request_get_reads_every_page(void **state);
void test_client_request_get_refusals_and_escaped_ids(void **state);
void test_client_tool_calls_list_pages_with_a_cursor(void **state);
void test_client_tool_calls_list_refusals_and_escaped_cursor(void **state);
void test_client_resolve_settles_an_unknown_call(void **state);
void test_client_resolve_refusals_and_escaped_ids(void **state);
void test_client_no_retry_sends_once(void **state);

/* tests/sdk/c/test_c_client_results.c: results too large to keep */
void test_client_result_over_the_bound_is_kept_as_its_digest(void **state);
void test_client_a_mebibyte_result_is_never_lost(void **state);
/* the small group, against a ledgerd with --max-body 4KiB --max-result-bytes 1KiB */
int test_c_client_small_run(void);

/* tests/sdk/c/test_c_client_tls.c: the tls group, against a stand-in https server */
int test_c_client_tls_run(void);

#endif
