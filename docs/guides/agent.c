/*
 * docs/guides/agent.c: one tool of an agent, run at most once per logical
 * request (docs/guide-agent.md).
 *
 *   LEDGER_URL=... LEDGER_TOKEN=... build/guide-agent REQUEST_ID [ATTEMPT_ID]
 *
 * The tool is send_email. Its side effect appends a line to var/outbox.txt
 * (OUTBOX names another file). Run it again with the same REQUEST_ID: every
 * call gets the first run's result back and nothing is sent twice.
 */
#define _GNU_SOURCE /* asprintf */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <ledger_client.h>

struct email {
	const char *to, *subject;
};

/* What the model asks for, turn by turn: two calls at once, then one more. */
static const struct email turn_1[] = {{"ana@example.com", "Your refund"},
				      {"bob@example.com", "Your refund"}};
static const struct email turn_2[] = {{"ana@example.com", "Refund sent"}};
static const struct {
	const struct email *calls;
	unsigned n;
} model_turns[] = {{turn_1, 2}, {turn_2, 1}};

/* The side effect. A real mail API would take idempotency_key as its own key. */
static enum ledger_tool_status send_email(void *ctx, const char *idempotency_key,
					  uint64_t fencing_token, char **result_json)
{
	const struct email *e = ctx;
	const char *outbox = getenv("OUTBOX") != NULL ? getenv("OUTBOX") : "var/outbox.txt";
	FILE *f = fopen(outbox, "a");

	(void)fencing_token;
	if (f == NULL)
		return LEDGER_TOOL_NOT_EXECUTED; /* nothing was sent: the key is released */
	fprintf(f, "%s %s %s\n", idempotency_key, e->to, e->subject);
	fclose(f);
	if (asprintf(result_json, "{\"message_id\":\"m-%s\"}", idempotency_key) < 0)
		*result_json = NULL; /* sent all the same: recorded with a null result */
	return LEDGER_TOOL_SUCCEEDED;
}

/* Runs one call of send_email at most once. @return false: stop the run. */
static bool call_tool(struct ledger_client *client, const char *request_id, const char *attempt_id,
		      unsigned k, const struct email *e)
{
	char tool_call_id[16], args[256];
	struct ledger_outcome out = {0};
	enum ledger_client_err rc;
	bool go_on = false;

	if (ledger_client_stable_call_id(k, tool_call_id, sizeof(tool_call_id)) != LEDGER_CLIENT_OK)
		return false;
	snprintf(args, sizeof(args), "{\"to\":\"%s\",\"subject\":\"%s\"}", e->to, e->subject);
	struct ledger_call call = {.request_id = request_id,
				   .tool_call_id = tool_call_id,
				   .attempt_id = attempt_id,
				   .tool = "send_email",
				   .args_json = args,
				   .wait_ms = 10000};

	rc = ledger_client_tool_call(client, &call, send_email, (void *)e, &out);
	switch (rc == LEDGER_CLIENT_OK ? out.kind : LEDGER_OUTCOME_REFUSED) {
	case LEDGER_OUTCOME_EXECUTED: /* it ran now */
	case LEDGER_OUTCOME_REPLAYED: /* an earlier run ran it: this is its recorded result */
		printf("%s %s %s %s\n", tool_call_id, ledger_client_outcome_name(out.kind),
		       out.call == LEDGER_CALL_FAILED ? "failed" : "succeeded",
		       out.result != NULL ? out.result : "null");
		go_on = true;
		break;
	case LEDGER_OUTCOME_ATTEMPT_FENCED:
		printf("%s attempt_fenced: this attempt was replaced; stop, publish nothing\n",
		       tool_call_id);
		break;
	case LEDGER_OUTCOME_UNKNOWN:
		printf("%s outcome_unknown: it may have run; a person resolves it first\n",
		       tool_call_id);
		break;
	default: /* args_mismatch (the rerun diverged), in_progress, unrecorded, refused... */
		printf("%s %s: %s %s\n", tool_call_id,
		       rc == LEDGER_CLIENT_OK ? ledger_client_outcome_name(out.kind)
					      : ledger_client_strerror(rc),
		       out.error.code, out.error.message);
	}
	ledger_client_outcome_clear(&out);
	return go_on;
}

int main(int argc, char **argv)
{
	struct ledger_client_options opts = {.url = getenv("LEDGER_URL"),
					     .token = getenv("LEDGER_TOKEN")};
	struct ledger_client *client = NULL;
	/* A model server gets these from the router, in the X-Ledger-Request-Id and
	 * X-Ledger-Attempt-Id headers of the request it serves. */
	const char *request_id = argc > 1 ? argv[1] : NULL;
	const char *attempt_id = argc > 2 ? argv[2] : NULL;
	unsigned made = 0; /* tool calls in the conversation before this turn */
	int status = 0;

	if (request_id == NULL || ledger_client_open(&opts, &client) != LEDGER_CLIENT_OK) {
		fprintf(stderr,
			"usage: LEDGER_URL=... LEDGER_TOKEN=... %s REQUEST_ID [ATTEMPT_ID]\n",
			argv[0]);
		return 2;
	}
	for (size_t t = 0; t < sizeof(model_turns) / sizeof(model_turns[0]) && status == 0; t++) {
		/* The k-th tool call of the conversation is call_<k>: the calls made before
		 * this turn, plus the call's place in the model's answer. The ids are fixed
		 * before any call starts, so running them on threads (one client may be
		 * shared) would change nothing. */
		for (unsigned i = 0; i < model_turns[t].n; i++)
			if (!call_tool(client, request_id, attempt_id, made + i,
				       &model_turns[t].calls[i]))
				status = 3;
		made += model_turns[t].n;
	}
	ledger_client_close(client);
	return status;
}
