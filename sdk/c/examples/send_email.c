/*
 * sdk/c/examples/send_email.c: an agent-side tool made safe with ledgerd. Run
 * it twice with the same request id: the first run sends the email, the
 * second gets the stored result and sends nothing, as a rerun of the same
 * request on another replica would.
 *
 *   LEDGER_URL=http://127.0.0.1:8080 LEDGER_TOKEN=... send_email REQUEST_ID [TO]
 */
#define _GNU_SOURCE /* asprintf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ledger_client.h>

/* The side effect: here a print; in real life an email API that takes the key. */
static enum ledger_tool_status send_email(void *ctx, const char *idempotency_key,
					  uint64_t fencing_token, char **result_json)
{
	const char *to = ctx;
	char *result = NULL;

	(void)fencing_token;
	printf("sending the email to %s (idempotency key %s)\n", to, idempotency_key);
	if (asprintf(&result, "{\"message_id\":\"msg-%s\"}", idempotency_key) < 0)
		return LEDGER_TOOL_NOT_EXECUTED;
	*result_json = result;
	return LEDGER_TOOL_SUCCEEDED;
}

int main(int argc, char **argv)
{
	const char *ca_file = getenv("LEDGER_CA_FILE"); /* an https ledgerd behind a private CA */
	struct ledger_client_options opts = {
		.url = getenv("LEDGER_URL"),
		.token = getenv("LEDGER_TOKEN"),
		.ca_file = ca_file != NULL && ca_file[0] != '\0' ? ca_file : NULL};
	struct ledger_client *client = NULL;
	struct ledger_outcome out = {0};
	const char *to = argc > 2 ? argv[2] : "ada@example.com";
	char args[512], call_id[16];
	enum ledger_client_err rc;
	int status = 1;

	if (argc < 2 || opts.url == NULL || opts.token == NULL) {
		fprintf(stderr, "usage: LEDGER_URL=... LEDGER_TOKEN=... %s REQUEST_ID [TO]\n",
			argv[0]);
		return 2;
	}
	if (ledger_client_open(&opts, &client) != LEDGER_CLIENT_OK) {
		fprintf(stderr, "send_email: bad LEDGER_URL, LEDGER_TOKEN or LEDGER_CA_FILE\n");
		return 2;
	}
	/* The first tool call of the request: the same name on every replica. */
	rc = ledger_client_stable_call_id(0, call_id, sizeof(call_id));
	if (rc == LEDGER_CLIENT_OK) {
		snprintf(args, sizeof(args), "{\"to\":\"%s\",\"subject\":\"Your refund\"}", to);
		struct ledger_call call = {.request_id = argv[1],
					   .tool_call_id = call_id,
					   .tool = "send_email",
					   .args_json = args};

		rc = ledger_client_tool_call(client, &call, send_email, (void *)to, &out);
	}
	if (rc != LEDGER_CLIENT_OK) {
		fprintf(stderr, "send_email: %s: %s %s\n", ledger_client_strerror(rc),
			out.error.code, out.error.message);
	} else if (out.kind == LEDGER_OUTCOME_EXECUTED) {
		printf("sent: %s\n", out.result);
		status = 0;
	} else if (out.kind == LEDGER_OUTCOME_REPLAYED) {
		printf("already sent, not sending again: %s\n", out.result);
		status = 0;
	} else {
		/* in_progress, outcome_unknown, attempt_fenced, ...: never send blindly */
		printf("not sent: %s (%s)\n", ledger_client_outcome_name(out.kind), out.error.code);
	}
	ledger_client_outcome_clear(&out);
	ledger_client_close(client);
	return status;
}
