/*
 * tests/sdk/c/test_c_client_router.c: the C SDK's router side against a live
 * ledgerd: a failover from begin to the rerun, every other decision, the
 * heartbeat keeping an attempt live, and tool calls under an attempt that
 * is then fenced. Part of the live group of tests/sdk/c/test_c_client.c.
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

#include "ledger_client.h"
#include "tests/sdk/c/test_c_client.h"

/* --- router --- */

static struct ledger_attempt *begin(struct ledger_client *c, const char *rid, const char *aid,
				    uint32_t lease_ms)
{
	struct ledger_attempt_spec spec = {
		.request_id = rid, .attempt_id = aid, .replica = "gpu-1", .lease_ms = lease_ms};
	struct ledger_attempt *a = NULL;
	struct ledger_client_error err = {0};

	assert_int_equal(ledger_client_attempt_begin(c, &spec, &a, &err), LEDGER_CLIENT_OK);
	ledger_client_error_clear(&err);
	return a;
}

void test_client_router_full_failover(void **state)
{
	struct ledger_client *c = open_client(router_token, 0, 0);
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};
	struct ledger_attempt *a1 = NULL, *a2 = NULL;
	struct ledger_failover_opts opts = {.has_retry_prefill_tokens = true,
					    .retry_prefill_tokens = 120};
	char rid[64];

	(void)state;
	new_id(rid, sizeof(rid), "r");
	a1 = begin(c, rid, "a1", 5000);
	assert_int_equal(ledger_client_attempt_epoch(a1), 1);
	assert_string_equal(ledger_client_attempt_id(a1), "a1");
	assert_string_equal(ledger_client_attempt_request_id(a1), rid);
	assert_int_equal(ledger_client_attempt_renew(a1, 0, &err), LEDGER_CLIENT_OK);

	/* The replica died in prefill: rerun elsewhere, in the same decision. */
	opts.next = &(struct ledger_attempt_spec){.attempt_id = "a2", .replica = "gpu-2"};
	assert_int_equal(ledger_client_failover(a1, LEDGER_SIGNAL_REPLICA_EXITED, &opts, &d, &err),
			 LEDGER_CLIENT_OK);
	assert_int_equal(d.action, LEDGER_FAILOVER_RETRY_PREFILL);
	assert_non_null(d.next);
	assert_string_equal(d.settled_tool_calls, "[]");
	assert_null(d.sse_event);
	a2 = ledger_client_decision_take_next(&d);
	assert_null(d.next);
	ledger_client_decision_clear(&d);
	assert_int_equal(ledger_client_attempt_epoch(a2), 2);
	assert_string_equal(ledger_client_attempt_id(a2), "a2");

	/* The source is revoked: the SDK refuses to publish for it. */
	assert_true(ledger_client_attempt_revoked(a1));
	assert_int_equal(ledger_client_attempt_deliver(a1, 1, &err), LEDGER_CLIENT_ERR_REFUSED);
	assert_string_equal(err.code, "attempt_fenced");
	ledger_client_error_clear(&err);

	/* The rerun streams; after a delta, failure ends the stream. */
	assert_int_equal(ledger_client_attempt_deliver(a2, 1, &err), LEDGER_CLIENT_OK);
	assert_int_equal(ledger_client_attempt_deliver(a2, 9, &err), LEDGER_CLIENT_OK);
	assert_int_equal(ledger_client_failover(a2, LEDGER_SIGNAL_UPSTREAM_CLOSED, NULL, &d, &err),
			 LEDGER_CLIENT_OK);
	assert_int_equal(d.action, LEDGER_FAILOVER_TERMINATE_STREAM);
	assert_non_null(d.client_error);
	assert_non_null(d.sse_event);
	assert_int_equal(strncmp(d.sse_event, "data: {\"error\":", 15), 0);
	assert_non_null(strstr(d.sse_event, "\"delivered_output_tokens\":9"));
	assert_non_null(strstr(d.sse_event, "\"partial_output\":true"));
	assert_string_equal(d.sse_event + strlen(d.sse_event) - 2, "\n\n");
	assert_null(strstr(d.sse_event, "[DONE]"));
	ledger_client_decision_clear(&d);
	assert_true(ledger_client_attempt_revoked(a2));

	/* A retried failover call gets the recorded decision, even revoked. */
	assert_int_equal(ledger_client_failover(a2, LEDGER_SIGNAL_UPSTREAM_CLOSED, NULL, &d, &err),
			 LEDGER_CLIENT_OK);
	assert_int_equal(d.action, LEDGER_FAILOVER_TERMINATE_STREAM);
	ledger_client_decision_clear(&d);

	/* No attempt after a delta reached the client. */
	struct ledger_attempt_spec spec = {.request_id = rid, .attempt_id = "a3"};
	struct ledger_attempt *a3 = NULL;

	assert_int_equal(ledger_client_attempt_begin(c, &spec, &a3, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_null(a3);
	assert_true(strcmp(err.code, "first_delta_sent") == 0 ||
		    strcmp(err.code, "request_closed") == 0);
	ledger_client_error_clear(&err);
	ledger_client_attempt_free(a1);
	ledger_client_attempt_free(a2);
	ledger_client_close(c);
}

void test_client_router_other_decisions(void **state)
{
	struct ledger_client *c = open_client(router_token, 0, 0);
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};
	struct ledger_attempt *a = NULL, *b = NULL;
	char rid[64];

	(void)state;
	/* Slow is not failed. */
	new_id(rid, sizeof(rid), "r");
	a = begin(c, rid, "a1", 5000);
	assert_int_equal(ledger_client_failover(a, LEDGER_SIGNAL_OVERLOADED, NULL, &d, &err),
			 LEDGER_CLIENT_OK);
	assert_int_equal(d.action, LEDGER_FAILOVER_KEEP_WAITING);
	assert_false(ledger_client_attempt_revoked(a));
	ledger_client_decision_clear(&d);

	/* Liveness uncertain: fence first; after cancel-ack a new attempt may start. */
	assert_int_equal(ledger_client_failover(a, LEDGER_SIGNAL_NETWORK_ERROR, NULL, &d, &err),
			 LEDGER_CLIENT_OK);
	assert_int_equal(d.action, LEDGER_FAILOVER_WAIT_FOR_FENCE);
	assert_true(d.retry_after_ms > 0);
	ledger_client_decision_clear(&d);
	assert_int_equal(ledger_client_attempt_cancel_ack(a, &err), LEDGER_CLIENT_OK);
	b = begin(c, rid, "a2", 5000);
	ledger_client_attempt_free(a);

	/* The client went away: cancel the upstream, start nothing. */
	assert_int_equal(
		ledger_client_failover(b, LEDGER_SIGNAL_CLIENT_DISCONNECTED, NULL, &d, &err),
		LEDGER_CLIENT_OK);
	assert_int_equal(d.action, LEDGER_FAILOVER_CANCEL_UPSTREAM);
	ledger_client_decision_clear(&d);
	ledger_client_attempt_free(b);

	/* Out of budget: rejected with the client error, closed for good. */
	new_id(rid, sizeof(rid), "r");
	struct ledger_attempt_spec one = {.request_id = rid, .attempt_id = "a1", .max_attempts = 1};

	assert_int_equal(ledger_client_attempt_begin(c, &one, &a, &err), LEDGER_CLIENT_OK);
	assert_int_equal(ledger_client_failover(a, LEDGER_SIGNAL_POD_LOST, NULL, &d, &err),
			 LEDGER_CLIENT_OK);
	assert_int_equal(d.action, LEDGER_FAILOVER_REJECT);
	assert_non_null(strstr(d.client_error, "retry_budget_exhausted"));
	assert_non_null(strstr(d.sse_event, "\"partial_output\":false"));
	ledger_client_decision_clear(&d);
	assert_int_equal(ledger_client_failover(a, LEDGER_SIGNAL_NETWORK_ERROR, NULL, &d, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_string_equal(err.code, "request_closed");
	assert_non_null(strstr(err.body, "retry_budget_exhausted"));
	ledger_client_error_clear(&err);
	ledger_client_attempt_free(a);

	/* Cancel, then finish: no rights left. */
	new_id(rid, sizeof(rid), "r");
	a = begin(c, rid, "a1", 5000);
	assert_int_equal(ledger_client_attempt_cancel(a, "operator", &err), LEDGER_CLIENT_OK);
	assert_true(ledger_client_attempt_revoked(a));
	assert_int_equal(ledger_client_attempt_finish(a, true, 0, NULL, &err),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_string_equal(err.code, "attempt_fenced");
	ledger_client_error_clear(&err);
	ledger_client_attempt_free(a);

	/* A finished attempt closes its request. */
	new_id(rid, sizeof(rid), "r");
	a = begin(c, rid, "a1", 5000);
	assert_int_equal(ledger_client_attempt_deliver(a, 3, &err), LEDGER_CLIENT_OK);
	assert_int_equal(ledger_client_attempt_finish(a, true, 3, "stop", &err), LEDGER_CLIENT_OK);
	assert_int_equal(ledger_client_attempt_finish(a, true, 3, "stop", &err), LEDGER_CLIENT_OK);
	ledger_client_attempt_free(a);
	ledger_client_close(c);
}

void test_client_heartbeat_keeps_the_attempt_live(void **state)
{
	struct ledger_client *c = open_client(router_token, 0, 0);
	struct ledger_client_error err = {0};
	struct ledger_attempt *a = NULL;
	char rid[64], *body = NULL;

	(void)state;
	new_id(rid, sizeof(rid), "r");
	a = begin(c, rid, "a1", 1000);
	assert_int_equal(ledger_client_heartbeat_start(a, 0), LEDGER_CLIENT_OK);
	assert_int_equal(ledger_client_heartbeat_start(a, 0), LEDGER_CLIENT_ERR_INVALID);
	sleep_ms(2500); /* two and a half leases */
	ledger_client_heartbeat_stop(a);
	ledger_client_heartbeat_stop(a);
	assert_int_equal(ledger_client_attempt_deliver(a, 1, &err), LEDGER_CLIENT_OK);

	/* Cancelled from elsewhere: the heartbeat learns it and revokes the handle. */
	assert_int_equal(ledger_client_heartbeat_start(a, 100), LEDGER_CLIENT_OK);
	assert_int_equal(rawf(router_token, &body, "{}", "/v1/requests/%s/attempts/a1/cancel", rid),
			 200);
	free(body);
	for (int i = 0; i < 50 && !ledger_client_attempt_revoked(a); i++)
		sleep_ms(50);
	assert_true(ledger_client_attempt_revoked(a));
	ledger_client_attempt_free(a); /* stops the heartbeat */
	ledger_client_close(c);
}

void test_client_tool_calls_under_an_attempt(void **state)
{
	struct ledger_client *router = open_client(router_token, 0, 0);
	struct ledger_client *agent = open_client(agent_token, 0, 0);
	struct ledger_client_error err = {0};
	struct ledger_outcome o = {0};
	struct tool t = {.status = LEDGER_TOOL_SUCCEEDED, .result = "{\"sent\":1}"};
	struct ledger_attempt *a = NULL, *a2 = NULL;
	struct ledger_decision d = {0};
	char rid[64];

	(void)state;
	new_id(rid, sizeof(rid), "r");
	a = begin(router, rid, "a1", 5000);

	/* The request has attempts: a claim must name one. */
	struct ledger_call call = {.request_id = rid,
				   .tool_call_id = "call_00",
				   .tool = "mail",
				   .args_json = "{\"to\":\"x\"}"};
	assert_int_equal(ledger_client_tool_call(agent, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_int_equal(o.kind, LEDGER_OUTCOME_REFUSED);
	assert_string_equal(o.error.code, "attempt_required");
	ledger_client_outcome_clear(&o);

	call.attempt = a;
	assert_int_equal(ledger_client_tool_call(agent, &call, run_tool, &t, &o), LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_EXECUTED);
	ledger_client_outcome_clear(&o);

	/* Rerun on another replica after the first died: the settled call replays. */
	struct ledger_failover_opts opts = {.next = &(struct ledger_attempt_spec){.attempt_id = "a2"}};
	assert_int_equal(ledger_client_failover(a, LEDGER_SIGNAL_POD_LOST, &opts, &d, &err),
			 LEDGER_CLIENT_OK);
	assert_int_equal(d.action, LEDGER_FAILOVER_RETRY_PREFILL);
	assert_non_null(strstr(d.settled_tool_calls, "\"call_00\""));
	a2 = ledger_client_decision_take_next(&d);
	ledger_client_decision_clear(&d);

	/* The zombie first attempt may not start a new side effect... */
	call.tool_call_id = "call_01";
	assert_int_equal(ledger_client_tool_call(agent, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_ATTEMPT_FENCED);
	ledger_client_outcome_clear(&o);
	/* ...but a replay starts nothing and is served even to it. */
	call.tool_call_id = "call_00";
	assert_int_equal(ledger_client_tool_call(agent, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_REPLAYED);
	ledger_client_outcome_clear(&o);

	/* The rerun replays the settled call... */
	call.attempt = a2;
	assert_int_equal(ledger_client_tool_call(agent, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_REPLAYED);
	assert_string_equal(o.result, "{\"sent\":1}");
	ledger_client_outcome_clear(&o);
	/* ...and a rerun that asks with other arguments diverged: revoked. */
	call.args_json = "{\"to\":\"y\"}";
	assert_int_equal(ledger_client_tool_call(agent, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_OK);
	assert_int_equal(o.kind, LEDGER_OUTCOME_ARGS_MISMATCH);
	assert_true(ledger_client_attempt_revoked(a2));
	ledger_client_outcome_clear(&o);
	assert_int_equal(ledger_client_attempt_deliver(a2, 1, &err), LEDGER_CLIENT_ERR_REFUSED);
	ledger_client_error_clear(&err);

	/* An attempt that does not exist. */
	call.attempt = NULL;
	call.attempt_id = "nope";
	call.tool_call_id = "call_02";
	assert_int_equal(ledger_client_tool_call(agent, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_ERR_REFUSED);
	assert_string_equal(o.error.code, "attempt_not_found");
	ledger_client_outcome_clear(&o);
	ledger_client_attempt_free(a);
	ledger_client_attempt_free(a2);
	ledger_client_close(agent);
	ledger_client_close(router);
}
