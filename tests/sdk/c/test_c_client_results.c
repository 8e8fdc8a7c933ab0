/*
 * tests/sdk/c/test_c_client_results.c: results too large to keep. A result
 * over the client's max_result_bytes, or one whose completion ledgerd
 * refuses as 413 body_too_large, is recorded as its length and SHA-256; the
 * tool's caller still gets it, and a later claim of the key is
 * RESULT_NOT_KEPT without running the tool. Part of the live group of
 * tests/sdk/c/test_c_client.c, and the small group: a ledgerd whose
 * --max-body is 4 KiB and --max-result-bytes 1 KiB.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/sha.h>

#include "ledger_client.h"
#include "tests/sdk/c/test_c_client.h"

/* A JSON object of exactly @p len bytes, {"text":"..."} with the string made of 'x'
 * as long as it must be; free with free(). */
static char *result_of(size_t len)
{
	static const char head[] = "{\"text\":\"", tail[] = "\"}";
	char *s = malloc(len + 1);

	assert_non_null(s);
	assert_true(len >= sizeof(head) + sizeof(tail));
	memcpy(s, head, sizeof(head) - 1);
	memset(s + sizeof(head) - 1, 'x', len - (sizeof(head) - 1) - (sizeof(tail) - 1));
	memcpy(s + len - (sizeof(tail) - 1), tail, sizeof(tail) - 1);
	s[len] = '\0';
	return s;
}

/* The SHA-256 of @p text as 64 lowercase hex digits. */
static void sha256_hex(const char *text, char out[65])
{
	unsigned char md[SHA256_DIGEST_LENGTH];

	SHA256((const unsigned char *)text, strlen(text), md);
	for (size_t i = 0; i < sizeof(md); i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static struct ledger_client *open_bounded(size_t max_result_bytes)
{
	struct ledger_client_options o = {.url = url,
					  .token = agent_token,
					  .timeout_ms = 5000,
					  .max_result_bytes = max_result_bytes};
	struct ledger_client *c = NULL;

	assert_int_equal(ledger_client_open(&o, &c), LEDGER_CLIENT_OK);
	return c;
}

/* GET of the call shows its result as not kept, with @p text's length and digest. */
static void assert_kept_as_digest(const char *rid, const char *cid, const char *state,
				  const char *text)
{
	char *body = NULL, want[160], sha[65];

	assert_int_equal(rawf(agent_token, &body, NULL, "/v1/requests/%s/tool-calls/%s", rid, cid),
			 200);
	snprintf(want, sizeof(want), "\"state\":\"%s\"", state);
	assert_non_null(strstr(body, want));
	assert_non_null(strstr(body, "\"result_kept\":false"));
	snprintf(want, sizeof(want), "\"result_bytes\":%zu", strlen(text));
	assert_non_null(strstr(body, want));
	sha256_hex(text, sha);
	snprintf(want, sizeof(want), "\"result_sha256\":\"%s\"", sha);
	assert_non_null(strstr(body, want));
	assert_null(strstr(body, "\"result\":"));
	free(body);
}

/*
 * Runs @p call's tool, which returns @p text with @p status, and checks that
 * the tool's caller got @p text and that it is on record only as its digest.
 */
static void run_once_not_kept(struct ledger_client *c, const struct ledger_call *call,
			      enum ledger_tool_status status, const char *text)
{
	struct tool t = {.status = status, .result = text};
	struct ledger_outcome o = {0};
	char sha[65];

	sha256_hex(text, sha);
	assert_int_equal(ledger_client_tool_call(c, call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	if (o.kind != LEDGER_OUTCOME_EXECUTED)
		fail_msg("outcome %s (%s %s)", ledger_client_outcome_name(o.kind), o.error.code,
			 o.error.message);
	assert_true(o.executed);
	assert_int_equal(t.calls, 1);
	assert_int_equal(o.call, status == LEDGER_TOOL_SUCCEEDED ? LEDGER_CALL_SUCCEEDED
								 : LEDGER_CALL_FAILED);
	assert_string_equal(o.result, text); /* the caller's result, whole */
	assert_string_equal(o.result_sha256, sha);
	assert_int_equal(o.result_bytes, strlen(text));
	assert_non_null(o.completed_at);
	ledger_client_outcome_clear(&o);
	assert_kept_as_digest(call->request_id, call->tool_call_id,
			      status == LEDGER_TOOL_SUCCEEDED ? "succeeded" : "failed", text);
}

/* A second run of the key: RESULT_NOT_KEPT with the stored digest; the tool never runs. */
static void assert_rerun_not_kept(struct ledger_client *c, const struct ledger_call *call,
				  enum ledger_call_outcome stored, const char *text)
{
	struct ledger_outcome o = {0};
	char sha[65];

	sha256_hex(text, sha);
	assert_int_equal(ledger_client_tool_call(c, call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_RESULT_NOT_KEPT);
	assert_string_equal(ledger_client_outcome_name(o.kind), "result_not_kept");
	assert_false(o.executed);
	assert_int_equal(o.fencing_token, 0);
	assert_null(o.result);
	assert_int_equal(o.error.status, 409);
	assert_string_equal(o.error.code, "result_not_kept");
	assert_int_equal(o.call, stored);
	assert_string_equal(o.result_sha256, sha);
	assert_int_equal(o.result_bytes, strlen(text));
	assert_non_null(o.completed_at);
	assert_non_null(strstr(o.error.body, o.completed_at));
	ledger_client_outcome_clear(&o);
}

/* Over the client's own bound: sent as its digest, and a rerun is RESULT_NOT_KEPT. */
void test_client_result_over_the_bound_is_kept_as_its_digest(void **state)
{
	struct ledger_client *c = open_bounded(1000);
	char *big = result_of(5000), *fits = result_of(1000);
	struct tool t = {.status = LEDGER_TOOL_RETRYABLE, .result = big};
	struct ledger_outcome o = {0};
	char rid[64];
	struct ledger_call call = {
		.tool_call_id = "call_00", .tool = "report", .args_json = "{\"id\":42}"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	run_once_not_kept(c, &call, LEDGER_TOOL_SUCCEEDED, big);
	assert_rerun_not_kept(c, &call, LEDGER_CALL_SUCCEEDED, big);

	/* A failure for good is kept the same way, and replayed as its outcome. */
	call.tool_call_id = "call_01";
	run_once_not_kept(c, &call, LEDGER_TOOL_FAILED, big);
	assert_rerun_not_kept(c, &call, LEDGER_CALL_FAILED, big);

	/* A retryable failure stores no result: released, whatever its size. */
	call.tool_call_id = "call_02";
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_RELEASED);
	assert_string_equal(o.result, big);
	assert_string_equal(o.result_sha256, "");
	ledger_client_outcome_clear(&o);

	/* At the bound, the result is sent and kept whole. */
	t = (struct tool){.status = LEDGER_TOOL_SUCCEEDED, .result = fits};
	call.tool_call_id = "call_03";
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_EXECUTED);
	assert_string_equal(o.result_sha256, "");
	assert_int_equal(o.result_bytes, 0);
	ledger_client_outcome_clear(&o);
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_REPLAYED);
	assert_string_equal(o.result, fits);
	ledger_client_outcome_clear(&o);
	free(big);
	free(fits);
	ledger_client_close(c);
}

/*
 * The default bound is ledgerd's default --max-result-bytes, 1 MiB, and
 * its default --max-body is 1 MiB too: a result of 1 MiB and one byte is
 * sent as its digest; a result of exactly 1 MiB is sent whole, refused as
 * 413 body_too_large, and sent again as its digest.
 */
void test_client_a_mebibyte_result_is_never_lost(void **state)
{
	struct ledger_client *c = open_bounded(0);
	char *over = result_of(LEDGER_CLIENT_MAX_RESULT_DEFAULT + 1);
	char *at = result_of(LEDGER_CLIENT_MAX_RESULT_DEFAULT);
	char rid[64];
	struct ledger_call call = {.tool_call_id = "call_00", .tool = "fetch_report"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	run_once_not_kept(c, &call, LEDGER_TOOL_SUCCEEDED, over);
	assert_rerun_not_kept(c, &call, LEDGER_CALL_SUCCEEDED, over);
	call.tool_call_id = "call_01";
	run_once_not_kept(c, &call, LEDGER_TOOL_SUCCEEDED, at);
	assert_rerun_not_kept(c, &call, LEDGER_CALL_SUCCEEDED, at);
	free(over);
	free(at);
	ledger_client_close(c);
}

/* --- the small group: --max-body 4KiB --max-result-bytes 1KiB --- */

/* A completion refused as 413 body_too_large is sent again at once as its digest. */
static void test_client_413_is_sent_again_as_its_digest(void **state)
{
	struct ledger_client *c = open_bounded(0); /* 1 MiB: far over this ledgerd's body */
	char *big = result_of(10000);
	struct tool t = {.status = LEDGER_TOOL_RETRYABLE, .result = big};
	struct ledger_outcome o = {0};
	char rid[64], st[32];
	struct ledger_call call = {.tool_call_id = "call_00", .tool = "export"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	run_once_not_kept(c, &call, LEDGER_TOOL_SUCCEEDED, big);
	assert_rerun_not_kept(c, &call, LEDGER_CALL_SUCCEEDED, big);

	/* A retryable failure's result is not stored: the release goes without it. */
	call.tool_call_id = "call_01";
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_RELEASED);
	ledger_client_outcome_clear(&o);
	call_state(rid, "call_01", st, sizeof(st));
	assert_string_equal(st, "released");
	free(big);
	ledger_client_close(c);
}

/* A result sent whole that ledgerd keeps as its digest: the answer is a success. */
static void test_client_answer_without_its_result_is_success(void **state)
{
	struct ledger_client *c = open_bounded(0);
	char *text = result_of(2000); /* under --max-body, over --max-result-bytes */
	char rid[64];
	struct ledger_call call = {.tool_call_id = "call_00", .tool = "summary"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	run_once_not_kept(c, &call, LEDGER_TOOL_SUCCEEDED, text);
	assert_rerun_not_kept(c, &call, LEDGER_CALL_SUCCEEDED, text);
	free(text);
	ledger_client_close(c);
}

int test_c_client_small_run(void)
{
	const struct CMUnitTest small[] = {
		cmocka_unit_test(test_client_413_is_sent_again_as_its_digest),
		cmocka_unit_test(test_client_answer_without_its_result_is_success),
	};

	return cmocka_run_group_tests_name("c_client_small", small, NULL, NULL);
}
