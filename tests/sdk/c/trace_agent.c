/*
 * tests/sdk/c/trace_agent.c: a program on the C SDK for test_c_trace.py, to
 * see what a traced program sends: one tool call in a given trace context,
 * or an attempt's whole life (begin, heartbeat, renew, failover, deliver,
 * client event, finish, and an adopted handle given a context of its own).
 * Tracing is whatever the OTEL_* variables say; "-" stands for NULL.
 *
 *   trace_agent call RID TCID TOOL ARGS TRACEPARENT TRACESTATE ok|fail|slow
 *   trace_agent attempt RID TRACEPARENT TRACESTATE TRACEPARENT2 TRACESTATE2
 *
 * A call prints one JSON line: what it came to and the context the tool
 * was given by ledger_client_tool_traceparent().
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger_client.h"

static const char *arg(const char *s)
{
	return strcmp(s, "-") == 0 ? NULL : s;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static struct ledger_client *open_client(const char *token_env)
{
	struct ledger_client_options opts = {0};
	struct ledger_client *c = NULL;

	opts.url = getenv("LEDGER_URL");
	opts.token = getenv(token_env);
	if (ledger_client_open(&opts, &c) != LEDGER_CLIENT_OK) {
		fprintf(stderr, "cannot open a client\n");
		exit(2);
	}
	return c;
}

/* What the tool saw, for the JSON line. */
struct seen {
	const char *mode;
	char traceparent[128];
	char tracestate[600];
	int calls;
};

static enum ledger_tool_status tool(void *ctx, const char *key, uint64_t token, char **result)
{
	struct seen *s = ctx;
	const char *ts = NULL;
	const char *tp = ledger_client_tool_traceparent(&ts);

	(void)key, (void)token;
	s->calls++;
	snprintf(s->traceparent, sizeof(s->traceparent), "%s", tp != NULL ? tp : "");
	snprintf(s->tracestate, sizeof(s->tracestate), "%s", ts != NULL ? ts : "");
	if (strcmp(s->mode, "slow") == 0)
		sleep_ms(400); /* a few renewals */
	*result = strdup(strcmp(s->mode, "fail") == 0 ? "{\"error\":\"declined\"}"
						      : "{\"sent\":true}");
	return strcmp(s->mode, "fail") == 0 ? LEDGER_TOOL_FAILED : LEDGER_TOOL_SUCCEEDED;
}

static int run_call(char **argv)
{
	struct ledger_client *c = open_client("LEDGER_AGENT_TOKEN");
	struct ledger_call call = {0};
	struct ledger_outcome out = {0};
	struct seen s = {.mode = argv[6]};
	enum ledger_client_err rc;
	/* Outside a tool there is no context to pass on. */
	const char *outside = ledger_client_tool_traceparent(NULL);

	call.request_id = argv[0];
	call.tool_call_id = argv[1];
	call.tool = arg(argv[2]);
	call.args_json = arg(argv[3]);
	call.traceparent = arg(argv[4]);
	call.tracestate = arg(argv[5]);
	call.lease_ms = strcmp(s.mode, "slow") == 0 ? 150 : 0;
	rc = ledger_client_tool_call(c, &call, tool, &s, &out);
	printf("{\"rc\":\"%s\",\"outcome\":\"%s\",\"tool_calls\":%d,\"fencing_token\":%llu,"
	       "\"tool_traceparent\":\"%s\",\"tool_tracestate\":\"%s\",\"outside\":%s}\n",
	       ledger_client_strerror(rc), ledger_client_outcome_name(out.kind), s.calls,
	       (unsigned long long)out.fencing_token, s.traceparent, s.tracestate,
	       outside == NULL ? "null" : "\"set\"");
	ledger_client_outcome_clear(&out);
	ledger_client_close(c);
	return 0;
}

static void must(enum ledger_client_err rc, const char *what, struct ledger_client_error *err)
{
	if (rc != LEDGER_CLIENT_OK) {
		fprintf(stderr, "%s: %s %s %s\n", what, ledger_client_strerror(rc), err->code,
			err->message);
		exit(3);
	}
	ledger_client_error_clear(err);
}

static int run_attempt(char **argv)
{
	struct ledger_client *c = open_client("LEDGER_ROUTER_TOKEN");
	struct ledger_client_error err = {0};
	struct ledger_attempt_spec spec = {0}, next = {0};
	struct ledger_failover_opts opts = {0};
	struct ledger_decision d = {0};
	struct ledger_attempt *a1 = NULL, *a2 = NULL, *adopted = NULL;
	enum ledger_client_err rc;

	spec.request_id = argv[0];
	spec.attempt_id = "a1";
	spec.lease_ms = 3000;
	spec.traceparent = arg(argv[1]);
	spec.tracestate = arg(argv[2]);
	must(ledger_client_attempt_begin(c, &spec, &a1, &err), "begin", &err);
	must(ledger_client_heartbeat_start(a1, 50), "heartbeat", &err);
	sleep_ms(250);
	ledger_client_heartbeat_stop(a1);
	must(ledger_client_attempt_renew(a1, 0, &err), "renew", &err);
	next.attempt_id = "a2";
	opts.next = &next;
	must(ledger_client_failover(a1, LEDGER_SIGNAL_REPLICA_EXITED, &opts, &d, &err), "failover",
	     &err);
	a2 = ledger_client_decision_take_next(&d);
	ledger_client_decision_clear(&d);
	if (a2 == NULL) {
		fprintf(stderr, "no next attempt\n");
		return 3;
	}
	must(ledger_client_attempt_deliver(a2, 1, &err), "deliver", &err);
	/* Whatever ledgerd answers these: the calls and their headers are what is checked. */
	rc = ledger_client_attempt_client_event(a2, LEDGER_CLIENT_EVENT_DISCONNECTED, -1, 1000,
						&err);
	ledger_client_error_clear(&err);
	must(ledger_client_attempt_finish(a2, true, 1, "stop", &err), "finish", &err);

	/* A handle on the first attempt, adopted, in a context set afterwards. */
	if (ledger_client_attempt_adopt(c, argv[0], "a1", &adopted) != LEDGER_CLIENT_OK)
		return 3;
	ledger_client_attempt_set_trace(adopted, arg(argv[3]), arg(argv[4]));
	rc = ledger_client_attempt_cancel(adopted, "test", &err);
	ledger_client_error_clear(&err);
	rc = ledger_client_attempt_cancel_ack(adopted, &err);
	ledger_client_error_clear(&err);
	ledger_client_attempt_free(adopted);
	ledger_client_attempt_free(a1);
	ledger_client_attempt_free(a2);
	ledger_client_close(c);
	printf("{\"last\":\"%s\"}\n", ledger_client_strerror(rc));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 9 && strcmp(argv[1], "call") == 0)
		return run_call(argv + 2);
	if (argc == 7 && strcmp(argv[1], "attempt") == 0)
		return run_attempt(argv + 2);
	fprintf(stderr, "usage: see tests/sdk/c/trace_agent.c\n");
	return 2;
}
