/*
 * tests/chaos/c_agent.c: the chaos campaign's agent on the C SDK. It runs one
 * job, the tool calls of one logical request (under an attempt or not),
 * each through ledger_client_tool_call(), and prints one JSON line per call
 * with what the SDK returned; agent.py --kind c logs those lines. Like a
 * careless replica it calls the tool as soon as it holds the claim: only the
 * tool's fencing stops it once it wakes from a freeze as a zombie.
 *
 *   c_agent --url URL --token T --tools URL --rid RID [--attempt AID]
 *           [--owner O] [--lease-ms N] [--wait-ms N] [--seed N] [--crash-after K]
 *           --call CID:TOOL:DEDUPE:ARGS_JSON ...
 */
#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger_client.h"

#define MAX_CALLS 16
#define RELEASED_TRIES 3 /* a call the tool failed transiently is claimed again this often */

struct call_spec {
	char *cid;
	char *tool;
	bool dedupe;
	char *args; /* JSON text */
};

struct tool_ctx {
	const char *tools_url;
	const char *tool;
	unsigned *seed;
};

struct body {
	char *data;
	size_t len;
};

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
	struct body *b = ud;
	size_t add = size * n;
	char *grown = realloc(b->data, b->len + add + 1);

	if (grown == NULL)
		return 0;
	memcpy(grown + b->len, p, add);
	b->data = grown;
	b->len += add;
	b->data[b->len] = '\0';
	return add;
}

/* The side effect: one POST to the tool service with the key and the token. */
static enum ledger_tool_status run_tool(void *ctx_, const char *key, uint64_t token,
					char **result_json)
{
	struct tool_ctx *ctx = ctx_;
	struct curl_slist *headers = NULL;
	struct body b = {NULL, 0};
	char url[512], line[300];
	enum ledger_tool_status st;
	long status = 0;
	CURL *curl;
	CURLcode rc;

	usleep(20000 + (useconds_t)(rand_r(ctx->seed) % 230000)); /* the work before it */
	curl = curl_easy_init();
	if (curl == NULL)
		return LEDGER_TOOL_NOT_EXECUTED;
	snprintf(url, sizeof(url), "%s/call/%s", ctx->tools_url, ctx->tool);
	snprintf(line, sizeof(line), "Idempotency-Key: %s", key);
	headers = curl_slist_append(headers, line);
	snprintf(line, sizeof(line), "Fencing-Token: %llu", (unsigned long long)token);
	headers = curl_slist_append(headers, line);
	headers = curl_slist_append(headers, "Content-Type: application/json");
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "{}");
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
	rc = curl_easy_perform(curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);

	if (rc != CURLE_OK) {
		/* It may have run: a final failure keeps it from running again. */
		free(b.data);
		*result_json = strdup("{\"error\":\"tool_unreachable\"}");
		return LEDGER_TOOL_FAILED;
	}
	if (status == 200) {
		*result_json = b.data;
		st = LEDGER_TOOL_SUCCEEDED;
	} else if (status == 409) {
		free(b.data); /* fenced by the tool: nothing happened */
		st = LEDGER_TOOL_NOT_EXECUTED;
	} else if (status == 503) {
		free(b.data);
		*result_json = strdup("{\"error\":\"transient\"}");
		st = LEDGER_TOOL_RETRYABLE;
	} else {
		*result_json = b.data; /* it ran and refused: recorded, replayed */
		st = LEDGER_TOOL_FAILED;
	}
	usleep((useconds_t)(rand_r(ctx->seed) % 100000)); /* the work after it */
	return st;
}

/* Prints @s as a JSON string. */
static void put_string(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

/* The names agent.py logs, the same for both SDKs. */
static const char *kind_name(enum ledger_client_err rc, const struct ledger_outcome *o)
{
	if (rc == LEDGER_CLIENT_ERR_UNAVAILABLE)
		return "unavailable";
	if (rc != LEDGER_CLIENT_OK && rc != LEDGER_CLIENT_ERR_REFUSED)
		return "error";
	switch (o->kind) {
	case LEDGER_OUTCOME_EXECUTED:
		return "executed";
	case LEDGER_OUTCOME_REPLAYED:
		return "replayed";
	case LEDGER_OUTCOME_RELEASED:
		return "released";
	case LEDGER_OUTCOME_UNRECORDED:
		return "unrecorded";
	case LEDGER_OUTCOME_IN_PROGRESS:
		return "in_progress";
	case LEDGER_OUTCOME_UNKNOWN:
		return "unknown";
	case LEDGER_OUTCOME_ATTEMPT_FENCED:
		return "fenced";
	case LEDGER_OUTCOME_ARGS_MISMATCH:
		return "mismatch";
	case LEDGER_OUTCOME_RESULT_EXPIRED:
		return "expired";
	case LEDGER_OUTCOME_RESULT_NOT_KEPT: /* this agent's results are small */
		return "result_not_kept";
	case LEDGER_OUTCOME_REFUSED:
		return "refused";
	case LEDGER_OUTCOME_ABANDONED: /* this agent's tool never reports UNKNOWN */
		return "abandoned";
	}
	return "error";
}

static void print_outcome(const char *cid, enum ledger_client_err rc,
			  const struct ledger_outcome *o)
{
	const char *call = o->call == LEDGER_CALL_SUCCEEDED ? "succeeded"
			   : o->call == LEDGER_CALL_FAILED  ? "failed"
							    : "none";

	printf("{\"cid\":");
	put_string(cid);
	printf(",\"kind\":\"%s\",\"executed\":%s,\"call\":\"%s\",\"rc\":\"%s\"", kind_name(rc, o),
	       o->executed ? "true" : "false", call, ledger_client_strerror(rc));
	printf(",\"result_json\":");
	if (o->result != NULL)
		put_string(o->result);
	else
		printf("null");
	if (o->fencing_token != 0)
		printf(",\"token\":%llu", (unsigned long long)o->fencing_token);
	if (o->error.status != 0)
		printf(",\"status\":%ld", o->error.status);
	if (o->error.code[0] != '\0') {
		printf(",\"code\":");
		put_string(o->error.code);
	}
	printf("}\n");
	fflush(stdout);
}

static int parse_call(char *s, struct call_spec *c)
{
	char *p = s, *q;

	c->cid = p;
	if ((q = strchr(p, ':')) == NULL)
		return -1;
	*q = '\0';
	c->tool = p = q + 1;
	if ((q = strchr(p, ':')) == NULL)
		return -1;
	*q = '\0';
	c->dedupe = q[1] == '1';
	if (q[2] != ':')
		return -1;
	c->args = q + 3;
	return 0;
}

int main(int argc, char **argv)
{
	struct ledger_client_options opts = {
		.timeout_ms = 3000, .retry_ms = 15000, .complete_retry_ms = 30000};
	struct call_spec calls[MAX_CALLS];
	const char *tools = NULL, *rid = NULL, *attempt = NULL, *owner = NULL;
	unsigned lease_ms = 3000, wait_ms = 0, seed = 1;
	int ncalls = 0, crash_after = -1, status = 0;
	struct ledger_client *client = NULL;

	for (int i = 1; i + 1 < argc; i += 2) {
		const char *flag = argv[i], *v = argv[i + 1];

		if (strcmp(flag, "--url") == 0)
			opts.url = v;
		else if (strcmp(flag, "--token") == 0)
			opts.token = v;
		else if (strcmp(flag, "--tools") == 0)
			tools = v;
		else if (strcmp(flag, "--rid") == 0)
			rid = v;
		else if (strcmp(flag, "--attempt") == 0)
			attempt = v;
		else if (strcmp(flag, "--owner") == 0)
			owner = v;
		else if (strcmp(flag, "--lease-ms") == 0)
			lease_ms = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(flag, "--wait-ms") == 0)
			wait_ms = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(flag, "--seed") == 0)
			seed = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(flag, "--crash-after") == 0)
			crash_after = atoi(v);
		else if (strcmp(flag, "--call") == 0 && ncalls < MAX_CALLS &&
			 parse_call(argv[i + 1], &calls[ncalls]) == 0)
			ncalls++;
		else {
			fprintf(stderr, "c_agent: bad argument %s\n", flag);
			return 2;
		}
	}
	if (opts.url == NULL || opts.token == NULL || tools == NULL || rid == NULL) {
		fprintf(stderr, "c_agent: --url, --token, --tools and --rid are required\n");
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (ledger_client_open(&opts, &client) != LEDGER_CLIENT_OK) {
		fprintf(stderr, "c_agent: cannot open a client on %s\n", opts.url);
		return 2;
	}
	for (int k = 0; k < ncalls && status == 0; k++) {
		struct tool_ctx ctx = {tools, calls[k].tool, &seed};
		struct ledger_call call = {.request_id = rid,
					   .tool_call_id = calls[k].cid,
					   .tool = calls[k].tool,
					   .args_json = calls[k].args,
					   .attempt_id = attempt,
					   .owner = owner,
					   .lease_ms = lease_ms,
					   .tool_dedupes = calls[k].dedupe,
					   .wait_ms = wait_ms};
		const char *kind = NULL;

		if (k == crash_after) {
			printf("{\"stopped\":\"exited\"}\n");
			break;
		}
		for (int t = 0; t < RELEASED_TRIES; t++) {
			struct ledger_outcome out = {0};
			enum ledger_client_err rc =
				ledger_client_tool_call(client, &call, run_tool, &ctx, &out);

			print_outcome(calls[k].cid, rc, &out);
			kind = kind_name(rc, &out);
			ledger_client_outcome_clear(&out);
			if (strcmp(kind, "released") != 0)
				break;
		}
		if (strcmp(kind, "executed") != 0 && strcmp(kind, "replayed") != 0) {
			printf("{\"stopped\":\"%s\"}\n", kind);
			status = 3;
		}
	}
	ledger_client_close(client);
	curl_global_cleanup();
	return status;
}
