/*
 * tests/fuzz/fuzz_sdk_answer.c: libFuzzer target for the C SDK's reading of
 * ledgerd's answers (sdk/c/, the readers of client_int.h). An input is a
 * first line "CALL STATUS" and the body that follows it; CALL is which
 * call's reader takes the answer: raw (the review calls), claim, record
 * (a complete or release), begin (POST attempts) or failover. No status
 * and no body may crash or leak, and what the SDK hands back must be what
 * the answer says, in the shape ledger_client.h promises.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/json.h"
#include "ledger/common/json_number.h"
#include "sdk/c/client_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant: say which, and abort so libFuzzer keeps the input. */
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_sdk_answer: %s:%d: %s\n", __FILE__, __LINE__,        \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#define DEPTH 64 /* the SDK's ANSWER_MAX_DEPTH */

enum call {
	CALL_RAW,
	CALL_CLAIM,
	CALL_RECORD,
	CALL_BEGIN,
	CALL_FAILOVER
};

static const char *const call_names[] = {"raw", "claim", "record", "begin", "failover"};

/* Reads "CALL STATUS\n"; @return the body's offset, or 0 when the line is not one. */
static size_t header(const uint8_t *data, size_t size, enum call *call, long *status)
{
	const uint8_t *nl = memchr(data, '\n', size);
	const uint8_t *sp = memchr(data, ' ', nl != NULL ? (size_t)(nl - data) : 0);
	size_t i;

	if (nl == NULL || sp == NULL)
		return 0;
	for (i = 0; i < sizeof(call_names) / sizeof(call_names[0]); i++)
		if ((size_t)(sp - data) == strlen(call_names[i]) &&
		    memcmp(data, call_names[i], (size_t)(sp - data)) == 0)
			break;
	if (i == sizeof(call_names) / sizeof(call_names[0]) || nl - sp < 2 || nl - sp > 5)
		return 0;
	*call = (enum call)i;
	*status = 0;
	for (const uint8_t *p = sp + 1; p < nl; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		*status = *status * 10 + (*p - '0');
	}
	return (size_t)(nl - data) + 1;
}

static bool is_str(const char *s, size_t size)
{
	return memchr(s, '\0', size) != NULL;
}

/* An error the SDK decided or ledgerd sent: its strings end inside their arrays. */
static void check_error(const struct ledger_client_error *e)
{
	CHECK(is_str(e->code, sizeof(e->code)));
	CHECK(is_str(e->message, sizeof(e->message)));
	CHECK(e->body == NULL || e->body[e->body_len] == '\0');
}

/* A member's text as the SDK hands it over: the exact JSON text, which parses alone. */
static void check_json_text(const char *text)
{
	struct ledger_json_doc *doc = NULL;

	CHECK(text != NULL);
	CHECK(ledger_json_parse(text, strlen(text), DEPTH, &doc, NULL) == LEDGER_OK);
	ledger_json_free(doc);
}

static void check_attempt(const struct ledger_attempt *a, const struct ledger_json_value *obj,
			  const char *request_id)
{
	const struct ledger_json_value *id = ledger_json_get(obj, "attempt_id");
	uint64_t epoch = 0, lease = 0;

	CHECK(a != NULL && id != NULL && id->type == LEDGER_JSON_STRING);
	CHECK(strcmp(ledger_client_attempt_id(a), id->u.str.s) == 0);
	CHECK(strcmp(ledger_client_attempt_request_id(a), request_id) == 0);
	CHECK(ledger_json_number_uint(ledger_json_get(obj, "epoch"), UINT64_MAX, &epoch) ==
	      LEDGER_OK);
	CHECK(ledger_client_attempt_epoch(a) == epoch);
	CHECK(ledger_json_number_uint(ledger_json_get(obj, "lease_ms"), UINT32_MAX, &lease) ==
	      LEDGER_OK);
	CHECK(ledger_client_attempt_lease_ms(a) == lease);
	CHECK(!ledger_client_attempt_revoked(a));
}

/* The attempt a call is made under, as POST attempts would have answered. */
static struct ledger_attempt *source_attempt(void)
{
	static const char obj[] = "{\"attempt_id\":\"att-1\",\"epoch\":1,\"lease_ms\":30000}";
	struct ledger_json_doc *doc = NULL;
	struct ledger_attempt *a = NULL;

	CHECK(ledger_json_parse(obj, sizeof(obj) - 1, DEPTH, &doc, NULL) == LEDGER_OK);
	CHECK(client_attempt_from(NULL, "req-1", ledger_json_root(doc), &a, NULL) ==
	      LEDGER_CLIENT_OK);
	ledger_json_free(doc);
	return a;
}

static bool string_member_is(const struct ledger_json_value *obj, const char *key, const char *want)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	return v != NULL && v->type == LEDGER_JSON_STRING && strcmp(v->u.str.s, want) == 0;
}

/* What a record's tool returned before the answer was read, as execute() leaves it. */
#define TOOL_RESULT "{\"tool\":true}"

/*
 * A result on record only as its digest: out->result_sha256 is "" or 64
 * lowercase hex; when set, it and result_bytes are the members of @p obj
 * (a completed answer, or the error object of a result_not_kept refusal).
 */
static void check_digest(const struct ledger_outcome *out, const struct ledger_json_value *obj)
{
	uint64_t bytes = 0;

	CHECK(is_str(out->result_sha256, sizeof(out->result_sha256)));
	if (out->result_sha256[0] == '\0') {
		CHECK(out->result_bytes == 0);
		return;
	}
	CHECK(strlen(out->result_sha256) == 64);
	CHECK(strspn(out->result_sha256, "0123456789abcdef") == 64);
	CHECK(string_member_is(obj, "result_sha256", out->result_sha256));
	CHECK(ledger_json_number_uint(ledger_json_get(obj, "result_bytes"), UINT64_MAX, &bytes) ==
	      LEDGER_OK);
	CHECK(out->result_bytes == bytes);
}

/* The error object of a refusal's body, which @p doc then owns; NULL if none. */
static const struct ledger_json_value *error_object(const struct ledger_client_error *e,
						    struct ledger_json_doc **doc)
{
	*doc = NULL;
	if (e->body == NULL ||
	    ledger_json_parse(e->body, e->body_len, DEPTH, doc, NULL) != LEDGER_OK)
		return NULL;
	return ledger_json_get(ledger_json_root(*doc), "error");
}

/* A claim's or a record's outcome against the answer it was read from. */
static void check_outcome(enum call call, enum ledger_client_err in, enum ledger_client_err rc,
			  const struct client_answer *ans, const struct ledger_outcome *out,
			  uint64_t token, bool revoked)
{
	check_error(&out->error);
	if (in == LEDGER_CLIENT_ERR_REFUSED) {
		struct ledger_json_doc *doc = NULL;
		const struct ledger_json_value *e = error_object(&out->error, &doc);

		/* A refusal is its code's kind; only the unknown ones stay refusals. */
		CHECK(rc == (out->kind == LEDGER_OUTCOME_REFUSED ? LEDGER_CLIENT_ERR_REFUSED
								 : LEDGER_CLIENT_OK));
		CHECK(revoked == (out->kind == LEDGER_OUTCOME_ARGS_MISMATCH ||
				  out->kind == LEDGER_OUTCOME_ATTEMPT_FENCED));
		CHECK(token == 0);
		/* Only result_not_kept says what was recorded, and nothing replaces the result. */
		CHECK((out->kind == LEDGER_OUTCOME_RESULT_NOT_KEPT) ==
		      (strcmp(out->error.code, "result_not_kept") == 0));
		if (out->kind == LEDGER_OUTCOME_RESULT_NOT_KEPT) {
			check_digest(out, e);
			if (out->completed_at != NULL)
				CHECK(string_member_is(e, "completed_at", out->completed_at));
		} else {
			CHECK(out->result_sha256[0] == '\0' && out->completed_at == NULL);
			CHECK(out->call == LEDGER_CALL_NONE);
		}
		CHECK(call == CALL_CLAIM ? out->result == NULL
					 : strcmp(out->result, TOOL_RESULT) == 0);
		ledger_json_free(doc);
		return;
	}
	CHECK(!revoked);
	if (in == LEDGER_CLIENT_ERR_UNAVAILABLE) {
		CHECK(call == CALL_CLAIM
			      ? rc == in
			      : rc == LEDGER_CLIENT_OK && out->kind == LEDGER_OUTCOME_UNRECORDED);
		return;
	}
	if (in != LEDGER_CLIENT_OK) {
		CHECK(rc == in && token == 0);
		return;
	}
	if (rc == LEDGER_CLIENT_OK &&
	    (out->kind == LEDGER_OUTCOME_REPLAYED || out->kind == LEDGER_OUTCOME_EXECUTED)) {
		CHECK(string_member_is(ans->root, "status", "completed"));
		CHECK(out->kind ==
		      (call == CALL_CLAIM ? LEDGER_OUTCOME_REPLAYED : LEDGER_OUTCOME_EXECUTED));
		CHECK(out->call == LEDGER_CALL_SUCCEEDED || out->call == LEDGER_CALL_FAILED);
		check_json_text(out->result);
		CHECK(out->completed_at != NULL);
		CHECK(token == 0);
		/* A completion's answer may say its result was not kept: the tool's stays. */
		check_digest(out, ans->root);
		if (out->result_sha256[0] != '\0') {
			CHECK(call == CALL_RECORD);
			CHECK(ledger_json_get(ans->root, "result_kept") != NULL &&
			      ledger_json_get(ans->root, "result_kept")->type == LEDGER_JSON_FALSE);
			CHECK(strcmp(out->result, TOOL_RESULT) == 0);
		} else {
			CHECK(strlen(out->result) ==
				      ledger_json_get(ans->root, "result")->raw_len &&
			      memcmp(out->result, ledger_json_get(ans->root, "result")->raw,
				     strlen(out->result)) == 0);
		}
	} else if (rc == LEDGER_CLIENT_OK && call == CALL_CLAIM) {
		uint64_t want = 0;

		CHECK(string_member_is(ans->root, "status", "claimed"));
		CHECK(ledger_json_number_uint(ledger_json_get(ans->root, "fencing_token"),
					      INT64_MAX, &want) == LEDGER_OK);
		CHECK(token == want && token > 0 && out->fencing_token == token);
	} else if (rc == LEDGER_CLIENT_OK) {
		CHECK(out->kind == LEDGER_OUTCOME_RELEASED);
		CHECK(string_member_is(ans->root, "status", "released"));
	} else {
		CHECK(rc == LEDGER_CLIENT_ERR_PROTOCOL && token == 0);
		CHECK(out->error.message[0] != '\0');
	}
}

static void read_outcome(enum call call, enum ledger_client_err in, const struct client_answer *ans,
			 struct ledger_outcome *out)
{
	struct ledger_attempt *attempt = source_attempt();
	struct ledger_call c = {
		.request_id = "req-1", .tool_call_id = "call_01", .attempt = attempt};
	enum ledger_client_err rc;
	uint64_t token = 0;

	if (call == CALL_CLAIM)
		rc = client_claim_read(&c, in, ans, out, &token);
	else
		rc = client_record_read(&c, in, ans, out);
	check_outcome(call, in, rc, ans, out, token, ledger_client_attempt_revoked(attempt));
	ledger_client_attempt_free(attempt);
}

static void read_decision(const struct client_answer *ans, struct ledger_client_error *err)
{
	struct ledger_attempt *source = source_attempt();
	struct ledger_decision d;
	const struct ledger_json_value *next = ledger_json_get(ans->root, "attempt");
	enum ledger_client_err rc;

	memset(&d, 0, sizeof(d));
	rc = client_decision_read(source, ans, &d, err);
	check_error(err);
	if (rc != LEDGER_CLIENT_OK) {
		CHECK(rc == LEDGER_CLIENT_ERR_PROTOCOL);
		ledger_client_decision_clear(&d);
		ledger_client_attempt_free(source);
		return;
	}
	CHECK(ledger_json_get(ans->root, "action") != NULL);
	CHECK(string_member_is(ans->root, "action", ledger_client_action_name(d.action)));
	/* The whole answer (a JSON text holds no NUL). */
	CHECK(d.body != NULL && strlen(d.body) == ans->len &&
	      memcmp(d.body, ans->body, ans->len) == 0);
	CHECK(ledger_client_attempt_revoked(source) == (d.action != LEDGER_FAILOVER_KEEP_WAITING));
	if (d.client_error != NULL) {
		char *sse = NULL;

		check_json_text(d.client_error);
		CHECK(strcmp(d.client_error, "null") != 0);
		CHECK(asprintf(&sse, "data: %s\n\n", d.client_error) > 0);
		CHECK(d.sse_event != NULL && strcmp(d.sse_event, sse) == 0);
		free(sse);
	} else {
		CHECK(d.sse_event == NULL);
	}
	if (d.settled_tool_calls != NULL)
		check_json_text(d.settled_tool_calls);
	if (next != NULL && next->type == LEDGER_JSON_OBJECT)
		check_attempt(d.next, next, "req-1");
	else
		CHECK(d.next == NULL);
	ledger_client_decision_clear(&d);
	ledger_client_attempt_free(source);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ledger_client_answer raw;
	struct ledger_client_error err;
	struct ledger_outcome out;
	struct client_answer ans;
	struct ledger_attempt *a = NULL;
	struct ledger_client_error *e = &err;
	enum ledger_client_err rc;
	enum call call = CALL_RAW;
	size_t at, len;
	long status = 0;
	char *body = NULL;

	at = header(data, size, &call, &status);
	if (at == 0)
		return 0;
	len = size - at;
	body = malloc(len + 1);
	CHECK(body != NULL);
	memcpy(body, data + at, len);
	body[len] = '\0';
	memset(&err, 0, sizeof(err));
	memset(&out, 0, sizeof(out));
	memset(&ans, 0, sizeof(ans));
	out.kind = LEDGER_OUTCOME_REFUSED; /* as ledger_client_tool_call() starts */
	if (call == CALL_CLAIM || call == CALL_RECORD)
		e = &out.error; /* where those calls have their errors written */
	if (call == CALL_RECORD)
		CHECK((out.result = strdup(TOOL_RESULT)) != NULL);

	/* A caller may pass no error at all; the review calls' answer is read as is. */
	rc = client_answer_read(status, body, len, &raw, call == CALL_RAW ? NULL : e);
	CHECK((rc == LEDGER_CLIENT_OK) == (status >= 200 && status <= 299));
	if (rc == LEDGER_CLIENT_OK) {
		CHECK(raw.status == status && raw.len == len);
		CHECK(memcmp(raw.body, data + at, len) == 0 && raw.body[len] == '\0');
	} else if (call != CALL_RAW) {
		CHECK(rc == LEDGER_CLIENT_ERR_REFUSED || rc == LEDGER_CLIENT_ERR_PROTOCOL);
		CHECK(e->status == status && e->body_len == len);
		CHECK(memcmp(e->body, data + at, len) == 0);
		check_error(e);
		/* client_send() re-sends these, then gives up as unavailable. */
		if (status == 502 || status == 503 || status == 504)
			rc = LEDGER_CLIENT_ERR_UNAVAILABLE;
	}
	if (call == CALL_RAW) {
		ledger_client_answer_clear(&raw);
		return 0;
	}
	if (rc == LEDGER_CLIENT_OK) {
		rc = client_answer_parse(&raw, &ans, e);
		CHECK(raw.body == NULL);
		if (rc == LEDGER_CLIENT_OK)
			CHECK(ans.root != NULL && ans.root->type == LEDGER_JSON_OBJECT);
		else
			CHECK(rc == LEDGER_CLIENT_ERR_PROTOCOL && ans.body == NULL);
	}

	switch (call) {
	case CALL_CLAIM:
	case CALL_RECORD:
		read_outcome(call, rc, &ans, &out);
		break;
	case CALL_BEGIN:
		if (rc != LEDGER_CLIENT_OK)
			break;
		rc = client_attempt_from(NULL, "req-1", ans.root, &a, e);
		if (rc == LEDGER_CLIENT_OK)
			check_attempt(a, ans.root, "req-1");
		else
			CHECK(rc == LEDGER_CLIENT_ERR_PROTOCOL && a == NULL);
		ledger_client_attempt_free(a);
		break;
	case CALL_FAILOVER:
		if (rc == LEDGER_CLIENT_OK)
			read_decision(&ans, e);
		break;
	case CALL_RAW:
		break;
	}
	client_answer_clear(&ans);
	ledger_client_outcome_clear(&out);
	ledger_client_error_clear(&err);
	return 0;
}
