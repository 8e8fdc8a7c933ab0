/*
 * tests/sdk/c/test_c_client_review.c: the C SDK's review calls against a live
 * ledgerd: a request's history page by page, the calls that need a person,
 * a resolution, their refusals, escaped ids, and sending once on request.
 * Part of the live group of tests/sdk/c/test_c_client.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ledger_client.h"
#include "tests/sdk/c/test_c_client.h"

/* --- incident review and resolution --- */

/* How often @p needle occurs in @p hay. */
static size_t occurrences(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* The string member "key":"..." of a compact answer, in @p out; false if absent or null. */
static bool string_member(const char *body, const char *key, char *out, size_t size)
{
	char pattern[64];
	const char *p;

	snprintf(pattern, sizeof(pattern), "\"%s\":\"", key);
	p = strstr(body, pattern);
	if (p == NULL)
		return false;
	p += strlen(pattern);
	snprintf(out, size, "%.*s", (int)strcspn(p, "\""), p);
	return true;
}

/* The first (or last) event sequence number of a page. */
static long event_seq(const char *body, bool last)
{
	const char *p = strstr(body, "\"seq\":"), *next;

	assert_non_null(p);
	while (last && (next = strstr(p + 1, "\"seq\":")) != NULL)
		p = next;
	return strtol(p + 6, NULL, 10);
}

/* Claims @p cid of @p rid for @p lease_ms as a holder that never completes. */
static void claim_for(const char *rid, const char *cid, unsigned lease_ms)
{
	char body[128];

	snprintf(body, sizeof(body),
		 "{\"claim_id\":\"0123456789abcdef0123456789abcdef\","
		 "\"lease_ms\":%u}",
		 lease_ms);
	assert_int_equal(
		rawf(agent_token, NULL, body, "/v1/requests/%s/tool-calls/%s/claim", rid, cid),
		201);
}

static struct ledger_client *open_anonymous(void)
{
	struct ledger_client_options o = {.url = url, .token = NULL, .timeout_ms = 5000};
	struct ledger_client *c = NULL;

	assert_int_equal(ledger_client_open(&o, &c), LEDGER_CLIENT_OK);
	return c;
}

void test_client_request_get_reads_every_page(void **state)
{
	struct ledger_client *c = open_client(router_token, 0, 0);
	struct ledger_client_answer first = {0}, second = {0};
	struct ledger_client_error err = {0};
	const char *rid = getenv("LEDGER_LONG_REQUEST_ID");
	char cursor[256], want[200];

	(void)state;
	assert_non_null(rid);
	assert_int_equal(ledger_client_request_get(c, rid, NULL, &first, &err), LEDGER_CLIENT_OK);
	assert_int_equal(first.status, 200);
	assert_int_equal(first.len, strlen(first.body));
	snprintf(want, sizeof(want), "\"request_id\":\"%s\"", rid);
	assert_non_null(strstr(first.body, want));
	assert_int_equal(occurrences(first.body, "\"seq\":"), 1000);
	assert_true(string_member(first.body, "next_events_cursor", cursor, sizeof(cursor)));

	/* The cursor goes on where the first page ended, to the last event. */
	assert_int_equal(ledger_client_request_get(c, rid, cursor, &second, &err),
			 LEDGER_CLIENT_OK);
	assert_int_equal(second.status, 200);
	assert_int_equal(occurrences(second.body, "\"seq\":"), 101);
	assert_true(event_seq(second.body, false) > event_seq(first.body, true));
	assert_false(string_member(second.body, "next_events_cursor", cursor, sizeof(cursor)));
	assert_int_equal(err.status, 0);
	ledger_client_answer_clear(&first);
	ledger_client_answer_clear(&second);
	ledger_client_answer_clear(NULL);
	ledger_client_close(c);
}

void test_client_request_get_refusals_and_escaped_ids(void **state)
{
	struct ledger_client *c = open_client(router_token, 0, 0);
	struct ledger_client *bad = open_client("ldg_not_a_token", 0, 0);
	struct ledger_client *anonymous = open_anonymous();
	struct ledger_client *agent = open_client(agent_token, 0, 0);
	struct ledger_client_answer a = {0};
	struct ledger_client_error err = {0};
	struct tool t = {.status = LEDGER_TOOL_SUCCEEDED};
	struct ledger_outcome o = {0};
	char rid[64], cid[64];

	(void)state;
	new_id(rid, sizeof(rid), "nope");
	assert_int_equal(ledger_client_request_get(c, rid, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 404);
	assert_string_equal(err.code, "not_found");
	assert_non_null(err.body);
	assert_int_equal(err.body_len, strlen(err.body));
	assert_null(a.body);
	ledger_client_error_clear(&err);

	assert_int_equal(ledger_client_request_get(bad, rid, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 401);
	assert_string_equal(err.code, "unauthorized");
	ledger_client_error_clear(&err);
	/* No token: none is sent, and ledgerd says so. */
	assert_int_equal(ledger_client_request_get(anonymous, rid, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 401);
	ledger_client_error_clear(&err);

	/* ".." is a valid id, and a dot segment that must not be resolved away. */
	new_id(cid, sizeof(cid), "dots");
	struct ledger_call call = {.request_id = "..", .tool_call_id = cid};
	assert_int_equal(ledger_client_tool_call(agent, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	ledger_client_outcome_clear(&o);
	assert_int_equal(ledger_client_request_get(c, "..", NULL, &a, &err), LEDGER_CLIENT_OK);
	assert_non_null(strstr(a.body, "\"request_id\":\"..\""));
	assert_non_null(strstr(a.body, cid));
	ledger_client_answer_clear(&a);

	/* An id that is not one stays one segment: ledgerd refuses it, no other path answers. */
	assert_int_equal(ledger_client_request_get(c, "a/b", NULL, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 400);
	assert_string_equal(err.code, "invalid_id");
	ledger_client_error_clear(&err);
	assert_int_equal(ledger_client_request_get(c, "x?events_cursor=y", NULL, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_string_equal(err.code, "invalid_id");
	ledger_client_error_clear(&err);

	assert_int_equal(ledger_client_request_get(c, "", NULL, &a, &err),
			 LEDGER_CLIENT_ERR_INVALID);
	assert_int_equal(err.status, 0);
	ledger_client_error_clear(&err);
	assert_int_equal(ledger_client_request_get(c, NULL, NULL, &a, NULL),
			 LEDGER_CLIENT_ERR_INVALID);
	assert_int_equal(ledger_client_request_get(NULL, rid, NULL, &a, NULL),
			 LEDGER_CLIENT_ERR_INVALID);
	assert_int_equal(ledger_client_request_get(c, rid, NULL, NULL, NULL),
			 LEDGER_CLIENT_ERR_INVALID);
	ledger_client_close(agent);
	ledger_client_close(anonymous);
	ledger_client_close(bad);
	ledger_client_close(c);
}

void test_client_tool_calls_list_pages_with_a_cursor(void **state)
{
	struct ledger_client *c = open_client(router_token, 0, 0);
	struct ledger_client_answer a = {0};
	struct ledger_client_error err = {0};
	char rid[64], cursor[512], key_a[128], key_b[128];
	int pages = 0, page_a = 0, page_b = 0;
	bool more = true;

	(void)state;
	new_id(rid, sizeof(rid), "r");
	claim_for(rid, "call_a", 60000);
	claim_for(rid, "call_b", 60000);
	snprintf(key_a, sizeof(key_a), "\"%s:call_a\"", rid);
	snprintf(key_b, sizeof(key_b), "\"%s:call_b\"", rid);
	/* One call a page: every in_progress call of the tenant, each once. */
	while (more) {
		assert_true(pages < 1000);
		assert_int_equal(ledger_client_tool_calls_list(
					 c, "in_progress", 1, pages == 0 ? NULL : cursor, &a, &err),
				 LEDGER_CLIENT_OK);
		pages++;
		assert_int_equal(a.status, 200);
		assert_int_equal(occurrences(a.body, "\"idempotency_key\":"), 1);
		assert_null(strstr(a.body, "\"state\":\"succeeded\""));
		if (strstr(a.body, key_a) != NULL)
			page_a = pages;
		if (strstr(a.body, key_b) != NULL)
			page_b = pages;
		more = string_member(a.body, "next_cursor", cursor, sizeof(cursor));
		assert_true(more || strstr(a.body, "\"next_cursor\":null") != NULL);
		ledger_client_answer_clear(&a);
	}
	assert_true(page_a > 0 && page_b > 0 && page_a != page_b);

	/* No state and no limit: ledgerd's defaults, every state. */
	assert_int_equal(ledger_client_tool_calls_list(c, NULL, 0, NULL, &a, &err),
			 LEDGER_CLIENT_OK);
	assert_non_null(strstr(a.body, "\"items\":["));
	ledger_client_answer_clear(&a);
	ledger_client_close(c);
}

void test_client_tool_calls_list_refusals_and_escaped_cursor(void **state)
{
	struct ledger_client *c = open_client(router_token, 0, 0);
	struct ledger_client *bad = open_client("ldg_not_a_token", 0, 0);
	struct ledger_client *agent = open_client(agent_token, 0, 0);
	struct ledger_client_answer a = {0};
	struct ledger_client_error err = {0};

	(void)state;
	assert_int_equal(ledger_client_tool_calls_list(c, "bogus", 0, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 400);
	assert_string_equal(err.code, "invalid_field");
	assert_non_null(strstr(err.body, "\"field\":\"state\""));
	ledger_client_error_clear(&err);

	/* The cursor is one value: its '&' and '=' do not start another parameter. */
	assert_int_equal(
		ledger_client_tool_calls_list(c, "unknown", 5, "a b&state=bogus", &a, &err),
		LEDGER_CLIENT_ERR_REFUSED);
	assert_string_equal(err.code, "invalid_field");
	assert_non_null(strstr(err.body, "\"field\":\"cursor\""));
	ledger_client_error_clear(&err);

	assert_int_equal(ledger_client_tool_calls_list(c, "unknown", 1001, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_non_null(strstr(err.body, "\"field\":\"limit\""));
	ledger_client_error_clear(&err);

	assert_int_equal(ledger_client_tool_calls_list(bad, "unknown", 0, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 401);
	assert_string_equal(err.code, "unauthorized");
	ledger_client_error_clear(&err);
	/* An agent may read one call, not list them. */
	assert_int_equal(ledger_client_tool_calls_list(agent, "unknown", 0, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 403);
	assert_string_equal(err.code, "forbidden");
	ledger_client_error_clear(&err);

	assert_int_equal(ledger_client_tool_calls_list(NULL, NULL, 0, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_INVALID);
	ledger_client_error_clear(&err);
	assert_null(a.body);
	ledger_client_close(agent);
	ledger_client_close(bad);
	ledger_client_close(c);
}

void test_client_resolve_settles_an_unknown_call(void **state)
{
	static const char result[] = "{\"refund_id\": \"rf-9\",  \"amount\": 12.50}";
	struct ledger_client *c = open_client(admin_token, 0, 0);
	struct ledger_client_answer a = {0};
	struct ledger_client_error err = {0};
	char rid[64], st[32], want[128], *body = NULL;

	(void)state;
	new_id(rid, sizeof(rid), "r");
	claim_for(rid, "call_r1", 100);
	claim_for(rid, "call_r2", 100);
	sleep_ms(300); /* both holders vanished: the outcomes are unknown */
	call_state(rid, "call_r1", st, sizeof(st));
	assert_string_equal(st, "unknown");

	struct ledger_resolution nothing = {.request_id = rid,
					    .tool_call_id = "call_r1",
					    .as = LEDGER_RESOLVED_NOT_EXECUTED,
					    .note = "no refund in the payment log"};
	assert_int_equal(ledger_client_tool_call_resolve(c, &nothing, &a, &err), LEDGER_CLIENT_OK);
	assert_int_equal(a.status, 200);
	assert_int_equal(a.len, strlen(a.body));
	assert_non_null(strstr(a.body, "\"status\":\"released\""));
	ledger_client_answer_clear(&a);
	call_state(rid, "call_r1", st, sizeof(st));
	assert_string_equal(st, "released");

	/* The result goes out and is stored byte for byte. */
	struct ledger_resolution done = {.request_id = rid,
					 .tool_call_id = "call_r2",
					 .as = LEDGER_RESOLVED_SUCCEEDED,
					 .result_json = result};
	assert_int_equal(ledger_client_tool_call_resolve(c, &done, &a, &err), LEDGER_CLIENT_OK);
	assert_non_null(strstr(a.body, "\"status\":\"completed\""));
	ledger_client_answer_clear(&a);
	assert_int_equal(rawf(agent_token, &body, NULL, "/v1/requests/%s/tool-calls/call_r2", rid),
			 200);
	snprintf(want, sizeof(want), "\"result\":%s", result);
	assert_non_null(strstr(body, want));
	free(body);

	/* The same resolution again is answered as the first time. */
	assert_int_equal(ledger_client_tool_call_resolve(c, &done, &a, &err), LEDGER_CLIENT_OK);
	assert_non_null(strstr(a.body, "\"outcome\":\"succeeded\""));
	ledger_client_answer_clear(&a);

	/* Another one is a conflict: the stored outcome stands. */
	done.as = LEDGER_RESOLVED_FAILED;
	done.result_json = "{\"e\":1}";
	assert_int_equal(ledger_client_tool_call_resolve(c, &done, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 409);
	assert_string_equal(err.code, "already_completed");
	assert_null(a.body);
	ledger_client_error_clear(&err);
	call_state(rid, "call_r2", st, sizeof(st));
	assert_string_equal(st, "succeeded");
	ledger_client_close(c);
}

void test_client_resolve_refusals_and_escaped_ids(void **state)
{
	struct ledger_client *c = open_client(admin_token, 0, 0);
	struct ledger_client *router = open_client(router_token, 0, 0);
	struct ledger_client *bad = open_client("ldg_not_a_token", 0, 0);
	struct ledger_client_answer a = {0};
	struct ledger_client_error err = {0};
	char rid[64], st[32];

	(void)state;
	new_id(rid, sizeof(rid), "r");
	claim_for(rid, "call_s1", 100);
	sleep_ms(300);
	struct ledger_resolution r = {
		.request_id = rid, .tool_call_id = "call_s1", .as = LEDGER_RESOLVED_NOT_EXECUTED};

	assert_int_equal(ledger_client_tool_call_resolve(router, &r, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 403);
	assert_string_equal(err.code, "forbidden");
	ledger_client_error_clear(&err);
	assert_int_equal(ledger_client_tool_call_resolve(bad, &r, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 401);
	assert_string_equal(err.code, "unauthorized");
	ledger_client_error_clear(&err);
	r.tool_call_id = "call_zz";
	assert_int_equal(ledger_client_tool_call_resolve(c, &r, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 404);
	assert_string_equal(err.code, "not_found");
	ledger_client_error_clear(&err);

	/* Each id stays its own segment whatever it holds. */
	r.request_id = "a b/..";
	r.tool_call_id = "c?d#";
	assert_int_equal(ledger_client_tool_call_resolve(c, &r, &a, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(err.status, 400);
	assert_string_equal(err.code, "invalid_id");
	ledger_client_error_clear(&err);

	/* What ledgerd could not read is refused before anything is sent. */
	r.request_id = rid;
	r.tool_call_id = "call_s1";
	r.as = LEDGER_RESOLVED_SUCCEEDED;
	r.result_json = "{bad";
	assert_int_equal(ledger_client_tool_call_resolve(c, &r, &a, &err),
			 LEDGER_CLIENT_ERR_INVALID);
	assert_int_equal(err.status, 0);
	assert_non_null(strstr(err.message, "not JSON"));
	ledger_client_error_clear(&err);
	r.result_json = "{\"a\":1,\"a\":2}";
	assert_int_equal(ledger_client_tool_call_resolve(c, &r, &a, NULL),
			 LEDGER_CLIENT_ERR_INVALID);
	r.result_json = NULL;
	r.note = "caf\xe9";
	assert_int_equal(ledger_client_tool_call_resolve(c, &r, &a, &err),
			 LEDGER_CLIENT_ERR_INVALID);
	assert_non_null(strstr(err.message, "UTF-8"));
	ledger_client_error_clear(&err);
	r.note = NULL;
	r.as = (enum ledger_resolution_kind)99;
	assert_int_equal(ledger_client_tool_call_resolve(c, &r, &a, NULL),
			 LEDGER_CLIENT_ERR_INVALID);
	r.as = LEDGER_RESOLVED_SUCCEEDED;
	r.tool_call_id = "";
	assert_int_equal(ledger_client_tool_call_resolve(c, &r, &a, NULL),
			 LEDGER_CLIENT_ERR_INVALID);
	assert_int_equal(ledger_client_tool_call_resolve(c, NULL, &a, NULL),
			 LEDGER_CLIENT_ERR_INVALID);
	assert_int_equal(ledger_client_tool_call_resolve(c, &r, NULL, NULL),
			 LEDGER_CLIENT_ERR_INVALID);
	/* None of those reached ledgerd. */
	call_state(rid, "call_s1", st, sizeof(st));
	assert_string_equal(st, "unknown");
	ledger_client_close(bad);
	ledger_client_close(router);
	ledger_client_close(c);
}

/* An operator's tool asks once and lets its user retry; the default retries. */
void test_client_no_retry_sends_once(void **state)
{
	struct ledger_client_options opts = {
		.url = "http://127.0.0.1:9", .token = "x", .retry_ms = 600, .no_retry = true};
	struct ledger_client *c = NULL;
	struct ledger_client_answer a = {0};
	struct ledger_client_error err = {0};
	uint64_t took;

	(void)state;
	for (int retried = 0; retried <= 1; retried++) {
		struct timespec t0, t1;

		opts.no_retry = !retried;
		assert_int_equal(ledger_client_open(&opts, &c), LEDGER_CLIENT_OK);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		assert_int_equal(ledger_client_request_get(c, "r-1", NULL, &a, &err),
				 LEDGER_CLIENT_ERR_UNAVAILABLE);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		took = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000u +
		       (uint64_t)((t1.tv_nsec - t0.tv_nsec) / 1000000L);
		assert_int_equal(err.status, 0);
		assert_int_equal(err.failure, LEDGER_CLIENT_FAILURE_UNREACHABLE);
		assert_true(err.message[0] != '\0');
		if (retried)
			assert_true(took >= 600);
		else
			assert_true(took < 400);
		ledger_client_error_clear(&err);
		ledger_client_close(c);
	}

	/* A URL libcurl cannot use is told apart from a server that is down. */
	opts.url = "http://exa mple/";
	assert_int_equal(ledger_client_open(&opts, &c), LEDGER_CLIENT_OK);
	assert_int_equal(ledger_client_request_get(c, "r-1", NULL, &a, &err),
			 LEDGER_CLIENT_ERR_UNAVAILABLE);
	assert_int_equal(err.failure, LEDGER_CLIENT_FAILURE_BAD_URL);
	ledger_client_error_clear(&err);
	ledger_client_close(c);
}
