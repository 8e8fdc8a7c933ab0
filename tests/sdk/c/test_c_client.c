/*
 * tests/sdk/c/test_c_client.c: the C SDK against a live ledgerd, through its
 * public header only. tests/sdk/c/test_c_sdk.py starts ledgerd, passes its
 * address and tokens in the environment and runs one group:
 *
 *   live        every outcome kind, the in_progress wait, renewal, the router helper
 *               (tests/sdk/c/test_c_client_router.c), the review calls
 *               (tests/sdk/c/test_c_client_review.c;
 *               $LEDGER_LONG_REQUEST_ID: a history of two pages), results too large
 *               to keep (tests/sdk/c/test_c_client_results.c)
 *   small       a ledgerd with --max-body 4KiB --max-result-bytes 1KiB: a completion
 *               refused as 413, an answer without its result
 *   jcs         the vectors of tests/data/jcs (RFC 8785 files, numbers, exact numbers)
 *   restart     a completion retried while ledgerd restarts ($LEDGER_MARK handshake)
 *   unrecorded  ledgerd stays down past complete_retry_ms
 *   lost        LEDGER_URL is a proxy that loses the first answers (answer_thief.py)
 *   tls         https against a stand-in server (tests/sdk/c/test_c_client_tls.c)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <pthread.h>

#include "ledger_client.h"
#include "tests/sdk/c/test_c_client.h"

const char *url, *agent_token, *router_token, *admin_token;

void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* A fresh id, unique across runs. */
void new_id(char *out, size_t size, const char *prefix)
{
	static unsigned n;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(out, size, "%s-%ld-%ld-%u", prefix, (long)ts.tv_sec, ts.tv_nsec, ++n);
}

struct ledger_client *open_client(const char *token, uint32_t retry_ms, uint32_t complete_retry_ms)
{
	struct ledger_client_options o = {.url = url,
					  .token = token,
					  .timeout_ms = 5000,
					  .retry_ms = retry_ms,
					  .complete_retry_ms = complete_retry_ms};
	struct ledger_client *c = NULL;

	assert_int_equal(ledger_client_open(&o, &c), LEDGER_CLIENT_OK);
	return c;
}

/* --- raw HTTP, for what the SDK must not do: set up states, read rows --- */

struct text {
	char *s;
	size_t n;
};

static size_t on_data(char *d, size_t size, size_t n, void *arg)
{
	struct text *t = arg;

	t->s = realloc(t->s, t->n + size * n + 1);
	memcpy(t->s + t->n, d, size * n);
	t->n += size * n;
	t->s[t->n] = '\0';
	return size * n;
}

/* Sends @p body (GET when NULL) to @p path; returns the status, the body in *resp. */
static long raw(const char *token, const char *path, const char *body, char **resp)
{
	CURL *h = curl_easy_init();
	struct curl_slist *hdrs = NULL;
	struct text t = {calloc(1, 1), 0};
	char line[512], full[1024];
	long status = 0;

	snprintf(line, sizeof(line), "Authorization: Bearer %s", token);
	hdrs = curl_slist_append(hdrs, line);
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	snprintf(full, sizeof(full), "%s%s", url, path);
	curl_easy_setopt(h, CURLOPT_URL, full);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
	if (body != NULL)
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	assert_int_equal(curl_easy_perform(h), CURLE_OK);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	if (resp != NULL)
		*resp = t.s;
	else
		free(t.s);
	return status;
}

long rawf(const char *token, char **resp, const char *body, const char *fmt, ...)
{
	char path[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	return raw(token, path, body, resp);
}

/* The state of a tool call as GET shows it ("succeeded", ...), in @p out. */
void call_state(const char *rid, const char *cid, char *out, size_t size)
{
	char *body = NULL, *p;

	assert_int_equal(rawf(agent_token, &body, NULL, "/v1/requests/%s/tool-calls/%s", rid, cid),
			 200);
	p = strstr(body, "\"state\":\"");
	assert_non_null(p);
	p += 9;
	snprintf(out, size, "%.*s", (int)strcspn(p, "\""), p);
	free(body);
}

/* --- tools --- */

enum ledger_tool_status run_tool(void *ctx, const char *key, uint64_t token, char **result)
{
	struct tool *t = ctx;

	t->calls++;
	snprintf(t->key, sizeof(t->key), "%s", key);
	t->token = token;
	if (t->sleep_ms != 0)
		sleep_ms(t->sleep_ms);
	*result = t->result != NULL ? strdup(t->result) : NULL;
	return t->status;
}

enum ledger_tool_status must_not_run(void *ctx, const char *key, uint64_t token, char **result)
{
	(void)ctx, (void)key, (void)token, (void)result;
	fail_msg("the tool ran although it must not");
	return LEDGER_TOOL_NOT_EXECUTED;
}

/* --- tool calls --- */

static void test_client_executes_once_then_replays(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct tool t = {.status = LEDGER_TOOL_SUCCEEDED, .result = "{\"id\": 7,  \"ok\":true}"};
	struct ledger_outcome o = {0};
	char rid[64], key[200], st[32];
	struct ledger_call call = {.tool_call_id = "call_00",
				   .tool = "pay",
				   .args_json = "{\"amount\": 5, \"to\": \"acme\"}"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_EXECUTED);
	assert_true(o.executed);
	assert_int_equal(o.call, LEDGER_CALL_SUCCEEDED);
	assert_int_equal(t.calls, 1);
	snprintf(key, sizeof(key), "%s:call_00", rid);
	assert_string_equal(t.key, key);
	assert_string_equal(o.idempotency_key, key);
	assert_int_equal(o.fencing_token, 1);
	assert_int_equal(t.token, 1);
	assert_string_equal(o.result, "{\"id\": 7,  \"ok\":true}"); /* byte for byte */
	assert_non_null(o.completed_at);
	ledger_client_outcome_clear(&o);
	call_state(rid, "call_00", st, sizeof(st));
	assert_string_equal(st, "succeeded");

	/* The same call again, as a rerun would make it: the stored result, no run. */
	call.args_json = "{\"to\":\"acme\",\"amount\":5.0}"; /* the same arguments, canonically */
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_REPLAYED);
	assert_false(o.executed);
	assert_int_equal(o.call, LEDGER_CALL_SUCCEEDED);
	assert_string_equal(o.result, "{\"id\": 7,  \"ok\":true}");
	assert_int_equal(o.fencing_token, 0);
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

static void test_client_failure_is_recorded_and_replayed(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct tool t = {.status = LEDGER_TOOL_FAILED, .result = "{\"error\":\"card declined\"}"};
	struct ledger_outcome o = {0};
	char rid[64];
	struct ledger_call call = {.tool_call_id = "call_01", .tool = "pay"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_EXECUTED);
	assert_int_equal(o.call, LEDGER_CALL_FAILED);
	ledger_client_outcome_clear(&o);
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_REPLAYED);
	assert_int_equal(o.call, LEDGER_CALL_FAILED);
	assert_string_equal(o.result, "{\"error\":\"card declined\"}");
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

static void test_client_retryable_and_not_executed_release(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct tool t = {.status = LEDGER_TOOL_RETRYABLE, .result = "{\"error\":\"timeout\"}"};
	struct ledger_outcome o = {0};
	char rid[64], st[32];
	struct ledger_call call = {.tool_call_id = "call_02"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_RELEASED);
	assert_true(o.executed);
	ledger_client_outcome_clear(&o);
	call_state(rid, "call_02", st, sizeof(st));
	assert_string_equal(st, "released");

	t.status = LEDGER_TOOL_NOT_EXECUTED;
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_RELEASED);
	assert_int_equal(o.fencing_token, 2); /* a new holder each time */
	ledger_client_outcome_clear(&o);

	/* Claimable again: the third try runs and is recorded. */
	t.status = LEDGER_TOOL_SUCCEEDED;
	t.result = NULL; /* recorded as null */
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_EXECUTED);
	assert_int_equal(o.fencing_token, 3);
	assert_string_equal(o.result, "null");
	assert_int_equal(t.calls, 3);
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

static void test_client_result_that_is_not_json_is_kept_as_a_string(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct tool t = {.status = LEDGER_TOOL_SUCCEEDED, .result = "sent \"ok\""};
	struct ledger_outcome o = {0};
	char rid[64];
	struct ledger_call call = {.tool_call_id = "call_03"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_EXECUTED);
	assert_string_equal(o.result, "\"sent \\\"ok\\\"\"");
	ledger_client_outcome_clear(&o);
	/* Not even UTF-8: each stray byte kept as a code point of its own. */
	t.result = "caf\xe9 \x01";
	call.tool_call_id = "call_04";
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_EXECUTED);
	assert_string_equal(o.result, "\"caf\\u00e9 \\u0001\"");
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

struct holder {
	struct ledger_client *c;
	struct ledger_call call;
	struct tool tool;
	struct ledger_outcome out;
	enum ledger_client_err rc;
};

static void *hold(void *arg)
{
	struct holder *h = arg;

	h->rc = ledger_client_tool_call(h->c, &h->call, run_tool, &h->tool, &h->out);
	return NULL;
}

static void test_client_in_progress_then_waits_for_the_holder(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct holder h = {
		.tool = {.status = LEDGER_TOOL_SUCCEEDED, .result = "[1]", .sleep_ms = 1500}};
	struct ledger_outcome o = {0};
	struct ledger_call call = {.tool_call_id = "call_04", .owner = "second"};
	char rid[64];
	pthread_t th;

	(void)state;
	new_id(rid, sizeof(rid), "r");
	h.c = c; /* one client shared by two threads */
	h.call = (struct ledger_call){
		.request_id = rid, .tool_call_id = "call_04", .owner = "first"};
	call.request_id = rid;
	assert_int_equal(pthread_create(&th, NULL, hold, &h), 0);
	sleep_ms(400);

	/* Not waiting: in_progress, with who holds it and for how long. */
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_IN_PROGRESS);
	assert_int_equal(o.error.status, 409);
	assert_string_equal(o.error.code, "in_progress");
	assert_true(o.error.retry_after_ms > 0);
	assert_non_null(strstr(o.error.body, "\"owner\":\"first\""));
	ledger_client_outcome_clear(&o);

	/* Waiting: the holder's result, the tool not run a second time. */
	call.wait_ms = 10000;
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_REPLAYED);
	assert_string_equal(o.result, "[1]");
	ledger_client_outcome_clear(&o);
	pthread_join(th, NULL);
	assert_int_equal(h.rc, LEDGER_CLIENT_OK);
	assert_int_equal(h.out.kind, LEDGER_OUTCOME_EXECUTED);
	assert_int_equal(h.tool.calls, 1);
	ledger_client_outcome_clear(&h.out);
	ledger_client_close(c);
}

static void test_client_renewal_keeps_a_long_tool_claimed(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct holder h = {
		.tool = {.status = LEDGER_TOOL_SUCCEEDED, .result = "{}", .sleep_ms = 3000}};
	char rid[64], st[32], *body = NULL;
	pthread_t th;

	(void)state;
	new_id(rid, sizeof(rid), "r");
	h.c = c;
	h.call = (struct ledger_call){
		.request_id = rid, .tool_call_id = "call_05", .lease_ms = 1000};
	assert_int_equal(pthread_create(&th, NULL, hold, &h), 0);
	/* Well past the 1 s lease, another holder still finds it held, not unknown. */
	sleep_ms(2200);
	assert_int_equal(rawf(agent_token, &body,
			      "{\"claim_id\":\"0123456789abcdef0123456789abcdef\"}",
			      "/v1/requests/%s/tool-calls/call_05/claim", rid),
			 409);
	assert_non_null(strstr(body, "\"in_progress\""));
	free(body);
	pthread_join(th, NULL);
	assert_int_equal(h.rc, LEDGER_CLIENT_OK);
	assert_int_equal(h.out.kind, LEDGER_OUTCOME_EXECUTED);
	assert_int_equal(h.out.call, LEDGER_CALL_SUCCEEDED);
	assert_null(strstr(h.out.result, "late")); /* recorded by the holder, in time */
	ledger_client_outcome_clear(&h.out);
	call_state(rid, "call_05", st, sizeof(st));
	assert_string_equal(st, "succeeded");
	ledger_client_close(c);
}

static void test_client_expired_claim_is_outcome_unknown(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct ledger_outcome o = {0};
	char rid[64];
	struct ledger_call call = {.tool_call_id = "call_06"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	/* A holder that claimed with a short lease and vanished. */
	assert_int_equal(
		rawf(agent_token, NULL,
		     "{\"claim_id\":\"0123456789abcdef0123456789abcdef\",\"lease_ms\":100}",
		     "/v1/requests/%s/tool-calls/call_06/claim", rid),
		201);
	sleep_ms(300);
	call.wait_ms = 2000; /* waiting does not turn unknown into a rerun */
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_UNKNOWN);
	assert_string_equal(o.error.code, "outcome_unknown");
	assert_string_equal(ledger_client_outcome_name(o.kind), "outcome_unknown");
	ledger_client_outcome_clear(&o);

	/* A tool that dedupes may run again: the SDK runs it. */
	struct tool t = {.status = LEDGER_TOOL_SUCCEEDED};
	char rid2[64];

	new_id(rid2, sizeof(rid2), "r");
	call.request_id = rid2;
	call.tool_dedupes = true;
	assert_int_equal(rawf(agent_token, NULL,
			      "{\"claim_id\":\"0123456789abcdef0123456789abcdef\",\"lease_ms\":100,"
			      "\"tool_dedupes\":true}",
			      "/v1/requests/%s/tool-calls/call_06/claim", rid2),
			 201);
	sleep_ms(300);
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_EXECUTED);
	assert_int_equal(o.fencing_token, 2);
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

/* A tool that cannot tell whether it acted leaves the key to its lease, never released. */
static void test_client_unknown_tool_report_abandons_the_claim(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct tool t = {.status = LEDGER_TOOL_UNKNOWN, .result = "{\"lost\":true}"};
	struct ledger_outcome o = {0};
	char rid[64], st[32];
	struct ledger_call call = {.tool_call_id = "call_06", .tool = "pay", .lease_ms = 200};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_ABANDONED);
	assert_string_equal(ledger_client_outcome_name(o.kind), "abandoned");
	assert_true(o.executed);
	assert_int_equal(o.fencing_token, 1);
	ledger_client_outcome_clear(&o);
	call_state(rid, "call_06", st, sizeof(st));
	assert_string_equal(st, "in_progress"); /* neither completed nor released */
	sleep_ms(400);
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_UNKNOWN);
	ledger_client_outcome_clear(&o);
	assert_int_equal(t.calls, 1);
	ledger_client_close(c);
}

static void test_client_other_arguments_are_args_mismatch(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct tool t = {.status = LEDGER_TOOL_SUCCEEDED};
	struct ledger_outcome o = {0};
	char rid[64];
	struct ledger_call call = {
		.tool_call_id = "call_07", .tool = "pay", .args_json = "{\"amount\":5}"};

	(void)state;
	new_id(rid, sizeof(rid), "r");
	call.request_id = rid;
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	ledger_client_outcome_clear(&o);
	call.args_json = "{\"amount\":500}";
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_ARGS_MISMATCH);
	assert_non_null(strstr(o.error.body, "expected_args_sha256"));
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

static void test_client_expired_result_is_never_run_again(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	const char *key = getenv("LEDGER_EXPIRED_KEY");
	struct ledger_outcome o = {0};
	char rid[200];
	const char *colon;

	(void)state;
	assert_non_null(key);
	colon = strchr(key, ':');
	assert_non_null(colon);
	snprintf(rid, sizeof(rid), "%.*s", (int)(colon - key), key);
	struct ledger_call call = {.request_id = rid,
				   .tool_call_id = colon + 1,
				   .tool = "pay",
				   .args_json = "{\"amount\":5}"};

	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_RESULT_EXPIRED);
	assert_int_equal(o.error.status, 410);
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

static void test_client_unreachable_ledger_runs_nothing(void **state)
{
	struct ledger_client_options opts = {
		.url = "http://127.0.0.1:9", .token = "x", .retry_ms = 300};
	struct ledger_client *c = NULL;
	struct ledger_outcome o = {0};
	struct ledger_call call = {.request_id = "r-1", .tool_call_id = "call_00"};

	(void)state;
	assert_int_equal(ledger_client_open(&opts, &c), LEDGER_CLIENT_OK);
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_ERR_UNAVAILABLE);
	assert_int_equal(o.error.status, 0);
	assert_true(o.error.message[0] != '\0');
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

static void test_client_bad_input_is_refused_without_asking(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct ledger_client *none = NULL;
	struct ledger_outcome o = {0};
	struct ledger_call call = {.request_id = "r/../x", .tool_call_id = "call_00"};
	struct ledger_client_options bad = {.url = "ftp://h", .token = "t"};
	char id[16], hex[65];

	(void)state;
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_ERR_INVALID);
	ledger_client_outcome_clear(&o);
	call.request_id = "r-ok";
	call.args_json = "{\"a\":1,\"a\":2}"; /* a duplicate key has no fingerprint */
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_ERR_INVALID);
	ledger_client_outcome_clear(&o);
	assert_int_equal(ledger_client_tool_call(c, NULL, must_not_run, NULL, &o),
			 LEDGER_CLIENT_ERR_INVALID);
	ledger_client_outcome_clear(&o);
	assert_int_equal(ledger_client_open(&bad, &none), LEDGER_CLIENT_ERR_INVALID);
	assert_null(none);
	assert_int_equal(ledger_client_open(NULL, &none), LEDGER_CLIENT_ERR_INVALID);
	assert_int_equal(ledger_client_stable_call_id(7, id, sizeof(id)), LEDGER_CLIENT_OK);
	assert_string_equal(id, "call_07");
	assert_int_equal(ledger_client_stable_call_id(123, id, sizeof(id)), LEDGER_CLIENT_OK);
	assert_string_equal(id, "call_123");
	assert_int_equal(ledger_client_stable_call_id(7, id, 4), LEDGER_CLIENT_ERR_INVALID);
	assert_int_equal(ledger_client_args_sha256("[1,", 3, hex), LEDGER_CLIENT_ERR_INVALID);
	assert_string_equal(ledger_client_signal_name(LEDGER_SIGNAL_HEARTBEAT_TIMEOUT),
			    "heartbeat_timeout");
	assert_string_equal(ledger_client_action_name(LEDGER_FAILOVER_WAIT_FOR_FENCE),
			    "wait_for_fence");
	assert_string_equal(ledger_client_signal_name((enum ledger_signal)99), "unknown");
	ledger_client_outcome_clear(NULL);
	ledger_client_close(NULL);
	ledger_client_attempt_free(NULL);
	ledger_client_close(c);
}

/* The server's fingerprint of arguments sent whole equals the client's. */
static void test_client_fingerprint_is_the_servers(void **state)
{
	static const char *const args[] = {
		"{\"b\":[1,2.50,{\"z\":null,\"a\":\"\\u00e9\"}],\"a\":1e3}",
		"{\"emoji\":\"\\ud83d\\ude00\",\"n\":-0.0,\"big\":1e21}",
		"[true,false,\"\\u0007\"]",
	};
	struct ledger_client *c = open_client(agent_token, 0, 0);

	(void)state;
	for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++) {
		struct tool t = {.status = LEDGER_TOOL_SUCCEEDED};
		struct ledger_outcome o = {0};
		char rid[64], hex[65], want[96], *body = NULL;
		struct ledger_call call = {
			.tool_call_id = "call_00", .args_json = args[i], .store_args = true};

		new_id(rid, sizeof(rid), "r");
		call.request_id = rid;
		assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o),
				 LEDGER_CLIENT_OK);
		ledger_client_outcome_clear(&o);
		assert_int_equal(ledger_client_args_sha256(args[i], strlen(args[i]), hex),
				 LEDGER_CLIENT_OK);
		assert_int_equal(
			rawf(agent_token, &body, NULL, "/v1/requests/%s/tool-calls/call_00", rid),
			200);
		snprintf(want, sizeof(want), "\"args_sha256\":\"%s\"", hex);
		assert_non_null(strstr(body, want));
		free(body);
	}
	ledger_client_close(c);
}

/* --- RFC 8785 vectors --- */

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *s = NULL;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	s = malloc((size_t)n + 1);
	assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
	s[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return s;
}

static void test_client_jcs_files(void **state)
{
	static const char *const names[] = {"arrays",  "french", "structures",
					    "unicode", "values", "weird"};
	const char *dir = getenv("LEDGER_JCS_DIR");

	(void)state;
	assert_non_null(dir);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char path[512], *in, *want, *got = NULL;
		size_t in_len, want_len, got_len = 0;

		snprintf(path, sizeof(path), "%s/input/%s.json", dir, names[i]);
		in = slurp(path, &in_len);
		/* exact_output/ holds the vectors the exact-number rule changes */
		snprintf(path, sizeof(path), "%s/exact_output/%s.json", dir, names[i]);
		if (access(path, R_OK) != 0)
			snprintf(path, sizeof(path), "%s/output/%s.json", dir, names[i]);
		want = slurp(path, &want_len);
		assert_int_equal(ledger_client_canonicalize(in, in_len, &got, &got_len),
				 LEDGER_CLIENT_OK);
		assert_int_equal(got_len, want_len);
		assert_memory_equal(got, want, want_len);
		free(in);
		free(want);
		free(got);
	}
}

/* Each line of numbers.txt, HEX,TEXT: TEXT is JCS's text of a double, its own canonical form. */
static void test_client_jcs_numbers(void **state)
{
	const char *dir = getenv("LEDGER_JCS_DIR");
	char path[512], line[128];
	FILE *f;
	int n = 0;

	(void)state;
	assert_non_null(dir);
	snprintf(path, sizeof(path), "%s/numbers.txt", dir);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		char *comma = strchr(line, ',');
		char json[64], *got = NULL;
		size_t len = 0;

		assert_non_null(comma);
		comma[1 + strcspn(comma + 1, "\r\n")] = '\0';
		snprintf(json, sizeof(json), "[%s]", comma + 1);
		assert_int_equal(ledger_client_canonicalize(json, strlen(json), &got, &len),
				 LEDGER_CLIENT_OK);
		if (len != strlen(json) || memcmp(got, json, len) != 0)
			fail_msg("%s gives %s", json, got);
		free(got);
		n++;
	}
	fclose(f);
	assert_true(n > 30000);
}

/*
 * exact_numbers.txt, INPUT<TAB>EXPECTED: the canonical form and the
 * fingerprint of INPUT, or LEDGER_CLIENT_ERR_INVALID when EXPECTED is
 * "refused" (a number beyond the double range).
 */
static void test_client_jcs_exact_numbers(void **state)
{
	const char *dir = getenv("LEDGER_JCS_DIR");
	char path[512], *data = NULL, *line = NULL, *next = NULL;
	size_t data_len;
	int n = 0;

	(void)state;
	assert_non_null(dir);
	snprintf(path, sizeof(path), "%s/exact_numbers.txt", dir);
	data = slurp(path, &data_len);
	for (line = data; *line != '\0'; line = next) {
		char *tab = NULL, *want = NULL, *got = NULL, hex[65];
		size_t got_len = 0;
		enum ledger_client_err rc;

		next = strchr(line, '\n');
		assert_non_null(next);
		*next++ = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		tab = strchr(line, '\t');
		assert_non_null(tab);
		*tab = '\0';
		want = tab + 1;
		rc = ledger_client_canonicalize(line, strlen(line), &got, &got_len);
		if (strcmp(want, "refused") == 0) {
			assert_int_equal(rc, LEDGER_CLIENT_ERR_INVALID);
			assert_int_equal(ledger_client_args_sha256(line, strlen(line), hex),
					 LEDGER_CLIENT_ERR_INVALID);
		} else {
			assert_int_equal(rc, LEDGER_CLIENT_OK);
			if (got_len != strlen(want) || memcmp(got, want, got_len) != 0)
				fail_msg("%.80s gives %.80s, want %.80s", line, got, want);
			assert_int_equal(ledger_client_args_sha256(line, strlen(line), hex),
					 LEDGER_CLIENT_OK);
			assert_int_equal(strlen(hex), 64);
		}
		free(got);
		n++;
	}
	free(data);
	assert_true(n >= 100);
}

/* --- completion across a restart: the test script stops and starts ledgerd --- */

static void touch(const char *path)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fclose(f);
}

/* Tells the script the tool runs, then returns once ledgerd is down. */
static enum ledger_tool_status tool_during_outage(void *ctx, const char *key, uint64_t token,
						  char **result)
{
	const char *mark = ctx;
	char down[512];

	(void)key, (void)token;
	snprintf(down, sizeof(down), "%s.down", mark);
	touch(mark);
	for (int i = 0; i < 400 && access(down, F_OK) != 0; i++)
		sleep_ms(50);
	*result = strdup("{\"charged\":true}");
	return LEDGER_TOOL_SUCCEEDED;
}

static void outage_call(uint32_t complete_retry_ms, enum ledger_outcome_kind want)
{
	struct ledger_client *c = open_client(agent_token, 0, complete_retry_ms);
	const char *mark = getenv("LEDGER_MARK");
	struct ledger_outcome o = {0};
	struct ledger_call call = {.request_id = getenv("LEDGER_REQUEST_ID"),
				   .tool_call_id = "call_00",
				   .tool = "charge"};

	assert_non_null(mark);
	assert_int_equal(ledger_client_tool_call(c, &call, tool_during_outage, (void *)mark, &o),
			 LEDGER_CLIENT_OK);
	if (o.kind != want)
		fail_msg("outcome %s (%s), want %s", ledger_client_outcome_name(o.kind),
			 o.error.message, ledger_client_outcome_name(want));
	assert_true(o.executed);
	assert_string_equal(o.result, "{\"charged\":true}");
	if (want == LEDGER_OUTCOME_UNRECORDED)
		assert_int_equal(o.error.status, 0);
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

static void test_client_completion_survives_a_restart(void **state)
{
	(void)state;
	outage_call(60000, LEDGER_OUTCOME_EXECUTED);
}

static void test_client_completion_past_its_bound_is_unrecorded(void **state)
{
	(void)state;
	outage_call(1000, LEDGER_OUTCOME_UNRECORDED);
}

/* LEDGER_URL is a proxy that loses the first answers of claim and complete. */
static void test_client_lost_answers_are_sent_again_unchanged(void **state)
{
	struct ledger_client *c = open_client(agent_token, 0, 0);
	struct tool t = {.status = LEDGER_TOOL_SUCCEEDED, .result = "{\"sent\":1}"};
	struct ledger_outcome o = {0};
	struct ledger_call call = {.request_id = getenv("LEDGER_REQUEST_ID"),
				   .tool_call_id = "call_00",
				   .tool = "mail"};

	(void)state;
	assert_int_equal(ledger_client_tool_call(c, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_EXECUTED);
	/* The claim re-sent with its claim_id found its own holder: one run, token 1. */
	assert_int_equal(t.calls, 1);
	assert_int_equal(o.fencing_token, 1);
	assert_string_equal(o.result, "{\"sent\":1}");
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest live[] = {
		cmocka_unit_test(test_client_executes_once_then_replays),
		cmocka_unit_test(test_client_failure_is_recorded_and_replayed),
		cmocka_unit_test(test_client_retryable_and_not_executed_release),
		cmocka_unit_test(test_client_result_that_is_not_json_is_kept_as_a_string),
		cmocka_unit_test(test_client_in_progress_then_waits_for_the_holder),
		cmocka_unit_test(test_client_renewal_keeps_a_long_tool_claimed),
		cmocka_unit_test(test_client_expired_claim_is_outcome_unknown),
		cmocka_unit_test(test_client_unknown_tool_report_abandons_the_claim),
		cmocka_unit_test(test_client_other_arguments_are_args_mismatch),
		cmocka_unit_test(test_client_expired_result_is_never_run_again),
		cmocka_unit_test(test_client_unreachable_ledger_runs_nothing),
		cmocka_unit_test(test_client_bad_input_is_refused_without_asking),
		cmocka_unit_test(test_client_fingerprint_is_the_servers),
		cmocka_unit_test(test_client_router_full_failover),
		cmocka_unit_test(test_client_router_other_decisions),
		cmocka_unit_test(test_client_heartbeat_keeps_the_attempt_live),
		cmocka_unit_test(test_client_tool_calls_under_an_attempt),
		cmocka_unit_test(test_client_request_get_reads_every_page),
		cmocka_unit_test(test_client_request_get_refusals_and_escaped_ids),
		cmocka_unit_test(test_client_tool_calls_list_pages_with_a_cursor),
		cmocka_unit_test(test_client_tool_calls_list_refusals_and_escaped_cursor),
		cmocka_unit_test(test_client_resolve_settles_an_unknown_call),
		cmocka_unit_test(test_client_resolve_refusals_and_escaped_ids),
		cmocka_unit_test(test_client_no_retry_sends_once),
		cmocka_unit_test(test_client_result_over_the_bound_is_kept_as_its_digest),
		cmocka_unit_test(test_client_a_mebibyte_result_is_never_lost),
	};
	const struct CMUnitTest jcs[] = {
		cmocka_unit_test(test_client_jcs_files),
		cmocka_unit_test(test_client_jcs_numbers),
		cmocka_unit_test(test_client_jcs_exact_numbers),
	};
	const struct CMUnitTest restart[] = {
		cmocka_unit_test(test_client_completion_survives_a_restart),
	};
	const struct CMUnitTest lost[] = {
		cmocka_unit_test(test_client_lost_answers_are_sent_again_unchanged),
	};
	const struct CMUnitTest unrecorded[] = {
		cmocka_unit_test(test_client_completion_past_its_bound_is_unrecorded),
	};
	const char *group = argc > 1 ? argv[1] : "live";
	int rc;

	url = getenv("LEDGER_URL");
	agent_token = getenv("LEDGER_AGENT_TOKEN");
	router_token = getenv("LEDGER_ROUTER_TOKEN");
	admin_token = getenv("LEDGER_ADMIN_TOKEN");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (strcmp(group, "jcs") == 0) {
		rc = cmocka_run_group_tests_name("c_client_jcs", jcs, NULL, NULL);
	} else if (strcmp(group, "tls") == 0) {
		rc = test_c_client_tls_run(); /* a stand-in server: no tokens of ledgerd's */
	} else if (url == NULL || agent_token == NULL || router_token == NULL ||
		   admin_token == NULL) {
		fprintf(stderr,
			"LEDGER_URL, LEDGER_AGENT_TOKEN and LEDGER_ROUTER_TOKEN are needed\n");
		rc = 2;
	} else if (strcmp(group, "live") == 0) {
		rc = cmocka_run_group_tests_name("c_client_live", live, NULL, NULL);
	} else if (strcmp(group, "restart") == 0) {
		rc = cmocka_run_group_tests_name("c_client_restart", restart, NULL, NULL);
	} else if (strcmp(group, "lost") == 0) {
		rc = cmocka_run_group_tests_name("c_client_lost", lost, NULL, NULL);
	} else if (strcmp(group, "small") == 0) {
		rc = test_c_client_small_run();
	} else if (strcmp(group, "unrecorded") == 0) {
		rc = cmocka_run_group_tests_name("c_client_unrecorded", unrecorded, NULL, NULL);
	} else {
		fprintf(stderr, "unknown group %s\n", group);
		rc = 2;
	}
	curl_global_cleanup();
	return rc;
}
