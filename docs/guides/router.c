/*
 * docs/guides/router.c: a router's attempts and failover on the C SDK
 * (docs/guide-router.md).
 *
 *   LEDGER_URL=... LEDGER_TOKEN=... build/guide-router REQUEST_ID FAILURE
 *
 * Two stand-in replicas serve one streamed answer. The model first calls
 * send_email (a line in var/outbox.txt, or OUTBOX), then writes its text.
 * gpu-1 fails as FAILURE says; gpu-2 never fails:
 *
 *   none        gpu-1 answers: the client gets the text and [DONE]
 *   exit-early  gpu-1 exits before any text: the request reruns on gpu-2
 *   stall       gpu-1 goes silent before any text: fenced, then rerun on gpu-2
 *   exit-late   gpu-1 exits mid-answer: the client gets the error event
 *
 * stdout is what the client receives; the router's log goes to stderr. The
 * email is sent once whatever happens.
 */
#define _GNU_SOURCE /* asprintf, strdup */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ledger_client.h>

#define LEASE_MS 3000 /* short, so that a silent replica is fenced within seconds */

static struct ledger_client *ledger;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("router: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* --- a stand-in model server ---------------------------------------------- */

/*
 * One run of the request on a replica. A real one reads these from the
 * request the router sends it: the headers X-Ledger-Request-Id,
 * X-Ledger-Attempt-Id and X-Ledger-Settled-Tool-Calls.
 */
struct replica {
	const char *name;
	const char *failure; /* "none", "exit-early", "stall", "exit-late" */
	const char *request_id, *attempt_id;
	bool tool_called;
	unsigned next_word;
};

enum upstream_read {
	EVENT,
	DONE,
	FAILED
};

static const char *const WORDS[] = {"Your", " refund", " is", " on", " its", " way."};

static enum ledger_tool_status send_email(void *ctx, const char *idempotency_key,
					  uint64_t fencing_token, char **result_json)
{
	const char *outbox = getenv("OUTBOX") != NULL ? getenv("OUTBOX") : "var/outbox.txt";
	FILE *f = fopen(outbox, "a");

	(void)ctx;
	(void)fencing_token;
	if (f == NULL)
		return LEDGER_TOOL_NOT_EXECUTED;
	fprintf(f, "%s ana@example.com Your refund\n", idempotency_key);
	fclose(f);
	if (asprintf(result_json, "{\"message_id\":\"m-%s\"}", idempotency_key) < 0)
		*result_json = NULL; /* sent all the same: recorded with a null result */
	return LEDGER_TOOL_SUCCEEDED;
}

/* The replica's next event into @p event, or why its answer failed. */
static enum upstream_read replica_next(struct replica *r, char *event, size_t size,
				       enum ledger_signal *signal)
{
	if (!r->tool_called) {
		struct ledger_call call = {.request_id = r->request_id,
					   .tool_call_id = "call_00",
					   .attempt_id = r->attempt_id,
					   .tool = "send_email",
					   .args_json = "{\"to\":\"ana@example.com\"}"};
		struct ledger_outcome out = {0};
		enum ledger_client_err rc =
			ledger_client_tool_call(ledger, &call, send_email, NULL, &out);

		r->tool_called = true;
		say("%s: call_00 send_email %s", r->name,
		    rc == LEDGER_CLIENT_OK ? ledger_client_outcome_name(out.kind) : out.error.code);
		rc = rc == LEDGER_CLIENT_OK && (out.kind == LEDGER_OUTCOME_EXECUTED ||
						out.kind == LEDGER_OUTCOME_REPLAYED)
			     ? LEDGER_CLIENT_OK
			     : LEDGER_CLIENT_ERR_REFUSED;
		ledger_client_outcome_clear(&out);
		*signal = LEDGER_SIGNAL_UPSTREAM_CLOSED; /* refused: the replica ends its stream */
		if (rc != LEDGER_CLIENT_OK)
			return FAILED;
		*signal = LEDGER_SIGNAL_REPLICA_EXITED; /* its connection refused */
		if (strcmp(r->failure, "exit-early") == 0)
			return FAILED;
		*signal = LEDGER_SIGNAL_HEARTBEAT_TIMEOUT; /* no byte for the stall timeout */
		if (strcmp(r->failure, "stall") == 0)
			return FAILED;
	}
	if (r->next_word == 2 && strcmp(r->failure, "exit-late") == 0) {
		*signal = LEDGER_SIGNAL_UPSTREAM_CLOSED; /* the stream cut mid-answer */
		return FAILED;
	}
	if (r->next_word == sizeof(WORDS) / sizeof(WORDS[0]))
		return DONE;
	snprintf(event, size, "data: {\"choices\": [{\"delta\": {\"content\": \"%s\"}}]}\n\n",
		 WORDS[r->next_word++]);
	return EVENT;
}

/* --- the router ------------------------------------------------------------ */

/* The one action ledgerd allows, once any wait_for_fence has been waited out. */
static enum ledger_client_err ask_failover(struct ledger_attempt *a, enum ledger_signal signal,
					   const struct ledger_failover_opts *opts,
					   struct ledger_decision *d,
					   struct ledger_client_error *err)
{
	for (;;) {
		enum ledger_client_err rc = ledger_client_failover(a, signal, opts, d, err);

		if (rc != LEDGER_CLIENT_OK)
			return rc;
		say("failover %s %s: %s", ledger_client_attempt_id(a),
		    ledger_client_signal_name(signal), ledger_client_action_name(d->action));
		if (d->action != LEDGER_FAILOVER_WAIT_FOR_FENCE)
			return LEDGER_CLIENT_OK;
		/* The old replica may be alive: its lease (or its cancel-ack) must end first. */
		struct timespec ts = {(time_t)(d->retry_after_ms / 1000),
				      (long)(d->retry_after_ms % 1000) * 1000000L};
		ledger_client_decision_clear(d);
		nanosleep(&ts, NULL);
	}
}

/* The rerun a failover may begin: the next attempt, on gpu-2. */
static struct ledger_attempt_spec rerun_spec(const char *rid, char *id, size_t size, unsigned n)
{
	snprintf(id, size, "a%u", n);
	return (struct ledger_attempt_spec){
		.request_id = rid, .attempt_id = id, .replica = "gpu-2", .lease_ms = LEASE_MS};
}

int main(int argc, char **argv)
{
	struct ledger_client_options opts = {.url = getenv("LEDGER_URL"),
					     .token = getenv("LEDGER_TOKEN")};
	struct ledger_client_error err = {0};
	struct ledger_attempt *attempt = NULL;
	char *settled = strdup("[]"); /* the settled tool calls a rerun is given */
	uint64_t delivered = 0;       /* events the client got */
	unsigned attempts = 1;
	int status = 0;

	if (argc != 3 || ledger_client_open(&opts, &ledger) != LEDGER_CLIENT_OK) {
		fprintf(stderr, "usage: LEDGER_URL=... LEDGER_TOKEN=... %s REQUEST_ID FAILURE\n",
			argv[0]);
		return 2;
	}
	const char *rid = argv[1];
	struct replica r = {.name = "gpu-1", .failure = argv[2], .request_id = rid};
	struct ledger_attempt_spec first = {
		.request_id = rid, .attempt_id = "a1", .replica = r.name, .lease_ms = LEASE_MS};

	if (ledger_client_attempt_begin(ledger, &first, &attempt, &err) != LEDGER_CLIENT_OK) {
		say("no attempt: %s %s", err.code, err.message);
		status = 1;
		goto out;
	}
	for (;;) {
		struct ledger_failover_opts fo = {0};
		struct ledger_attempt_spec next;
		struct ledger_decision d = {0};
		enum ledger_signal signal;
		enum upstream_read rd;
		char event[256], next_id[16];

		r.attempt_id = ledger_client_attempt_id(attempt);
		say("%s runs %s; settled before it: %s", r.name, r.attempt_id, settled);
		if (ledger_client_heartbeat_start(attempt, 0) !=
		    LEDGER_CLIENT_OK) /* every lease/3 */
			say("no heartbeat");
		while ((rd = replica_next(&r, event, sizeof(event), &signal)) == EVENT) {
			/* The point of no retry: durable before the first byte goes out. */
			if (delivered == 0 ? ledger_client_attempt_deliver(attempt, 1, &err) !=
						     LEDGER_CLIENT_OK
					   : ledger_client_attempt_revoked(attempt)) {
				signal =
					LEDGER_SIGNAL_HEARTBEAT_TIMEOUT; /* fenced: never publish */
				rd = FAILED;
				break;
			}
			fputs(event, stdout);
			delivered++;
		}
		ledger_client_heartbeat_stop(attempt); /* a failed replica's lease must run out */
		ledger_client_error_clear(&err);
		if (rd == DONE) {
			if (ledger_client_attempt_finish(attempt, true, delivered, NULL, &err) !=
			    LEDGER_CLIENT_OK)
				say("finish refused: %s", err.code);
			fputs("data: [DONE]\n\n", stdout);
			break;
		}
		if (delivered > 0 &&
		    ledger_client_attempt_deliver(attempt, delivered, &err) != LEDGER_CLIENT_OK)
			say("progress not reported: %s",
			    err.code); /* what the client got, exactly */
		ledger_client_error_clear(&err);
		next = rerun_spec(rid, next_id, sizeof(next_id), attempts + 1);
		fo.next = delivered == 0 ? &next : NULL; /* a rerun only before the first byte */
		if (ask_failover(attempt, signal, &fo, &d, &err) != LEDGER_CLIENT_OK) {
			say("no failover: %s",
			    err.code); /* another router decided, or it is over */
			break;
		}
		if (d.action == LEDGER_FAILOVER_RETRY_PREFILL && d.next != NULL) {
			/* Nothing was sent yet: run it again on gpu-2, with the settled calls. */
			free(settled);
			settled =
				strdup(d.settled_tool_calls != NULL ? d.settled_tool_calls : "[]");
			ledger_client_attempt_free(attempt);
			attempt = ledger_client_decision_take_next(&d);
			attempts++;
			r = (struct replica){.name = "gpu-2", .failure = "none", .request_id = rid};
			ledger_client_decision_clear(&d);
			continue;
		}
		if (d.action == LEDGER_FAILOVER_TERMINATE_STREAM)
			fputs(d.sse_event, stdout); /* the final event, and no [DONE] after it */
		else /* reject, cancel_upstream: nothing was sent yet, so an error answer (keep_waiting
		      * answers only "overloaded", never sent here) */
			printf("HTTP 503 %s\n", d.client_error != NULL ? d.client_error : "null");
		ledger_client_decision_clear(&d);
		break;
	}
out:
	ledger_client_error_clear(&err);
	ledger_client_attempt_free(attempt);
	ledger_client_close(ledger);
	free(settled);
	return status;
}
