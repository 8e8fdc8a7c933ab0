/*
 * sdk/c/review.c: the operator's calls of the C client: reading a request's
 * history and the calls that need a person, and resolving one. They hand
 * back ledgerd's answer as received, for a program that prints it or reads
 * it with its own parser, and take ids as a person typed them: escaped,
 * never checked, so ledgerd's own refusal is what the person sees.
 */
#include <stdio.h>
#include <string.h>

#include "ledger/common/json.h"
#include "ledger/common/jsonw.h"
#include "sdk/c/client_int.h"

#define RESULT_MAX_DEPTH 64 /* what ledgerd accepts in a body */

/* A person's id: anything but NULL or empty, which would name another path. */
static bool usable_id(const char *id)
{
	return id != NULL && id[0] != '\0';
}

/* Appends "?name=value" or "&name=value", the value escaped. */
static void put_param(struct ledger_buf *b, bool *first, const char *name, const char *value)
{
	ledger_buf_putc(b, *first ? '?' : '&');
	ledger_buf_puts(b, name);
	ledger_buf_putc(b, '=');
	client_escape(b, value);
	*first = false;
}

/* GETs @p path, unless building it ran out of memory. */
static enum ledger_client_err get(struct ledger_client *c, const struct ledger_buf *path,
				  struct ledger_client_answer *out, struct ledger_client_error *err)
{
	if (path->oom)
		return LEDGER_CLIENT_ERR_NOMEM;
	return client_send(c, path->data, NULL, c->retry_ms, NULL, out, err);
}

enum ledger_client_err ledger_client_request_get(struct ledger_client *c, const char *request_id,
						 const char *events_cursor,
						 struct ledger_client_answer *out,
						 struct ledger_client_error *err)
{
	struct ledger_buf path = LEDGER_BUF_INIT;
	enum ledger_client_err rc;
	bool first = true;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	memset(out, 0, sizeof(*out));
	if (c == NULL || !usable_id(request_id)) {
		client_error_set(err, "", "a client and a request id are required");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	client_path(&path, request_id, (const char *)NULL);
	if (events_cursor != NULL)
		put_param(&path, &first, "events_cursor", events_cursor);
	rc = get(c, &path, out, err);
	ledger_buf_free(&path);
	return rc;
}

enum ledger_client_err ledger_client_tool_calls_list(struct ledger_client *c, const char *state,
						     uint32_t limit, const char *cursor,
						     struct ledger_client_answer *out,
						     struct ledger_client_error *err)
{
	struct ledger_buf path = LEDGER_BUF_INIT;
	enum ledger_client_err rc;
	char digits[16];
	bool first = true;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	memset(out, 0, sizeof(*out));
	if (c == NULL) {
		client_error_set(err, "", "a client is required");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	ledger_buf_puts(&path, "/v1/tool-calls");
	if (state != NULL)
		put_param(&path, &first, "state", state);
	if (limit != 0) {
		snprintf(digits, sizeof(digits), "%u", (unsigned)limit);
		put_param(&path, &first, "limit", digits);
	}
	if (cursor != NULL)
		put_param(&path, &first, "cursor", cursor);
	rc = get(c, &path, out, err);
	ledger_buf_free(&path);
	return rc;
}

static const char *resolution_name(enum ledger_resolution_kind as)
{
	switch (as) {
	case LEDGER_RESOLVED_SUCCEEDED:
		return "succeeded";
	case LEDGER_RESOLVED_FAILED:
		return "failed";
	case LEDGER_RESOLVED_NOT_EXECUTED:
		return "not_executed";
	}
	return NULL;
}

/*
 * Writes {"resolution", "result"?, "note"?} into @p body, the result's
 * text as given (without surrounding blanks), and checks the whole is JSON
 * ledgerd can read: the result must be JSON, the note UTF-8.
 * @return LEDGER_CLIENT_OK, _ERR_INVALID (err says which) or _ERR_NOMEM
 */
static enum ledger_client_err resolve_body(const struct ledger_resolution *r, const char *as,
					   struct ledger_buf *body, struct ledger_client_error *err)
{
	struct ledger_json_doc *result = NULL, *whole = NULL;
	struct ledger_json_error jerr;
	struct ledger_jsonw w;
	enum ledger_client_err rc = LEDGER_CLIENT_ERR_NOMEM;

	memset(&jerr, 0, sizeof(jerr));
	if (r->result_json != NULL &&
	    ledger_json_parse(r->result_json, strlen(r->result_json), RESULT_MAX_DEPTH, &result,
			      &jerr) != LEDGER_OK) {
		if (jerr.kind != LEDGER_JSON_ERR_NOMEM) {
			client_error_set(err, "", "the result is not JSON (byte %zu: %s)",
					 jerr.offset, jerr.message);
			rc = LEDGER_CLIENT_ERR_INVALID;
		}
		goto out;
	}
	ledger_jsonw_init(&w, body);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "resolution");
	ledger_jsonw_string(&w, as);
	if (result != NULL) {
		const struct ledger_json_value *v = ledger_json_root(result);

		ledger_jsonw_key(&w, "result");
		ledger_jsonw_raw(&w, v->raw, v->raw_len);
	}
	if (r->note != NULL) {
		ledger_jsonw_key(&w, "note");
		ledger_jsonw_string(&w, r->note);
	}
	ledger_jsonw_object_end(&w);
	if (body->oom)
		goto out;
	/* The note is the one part not checked yet: the writer takes it as UTF-8. */
	if (ledger_json_parse(body->data, body->len, RESULT_MAX_DEPTH + 1, &whole, &jerr) !=
	    LEDGER_OK) {
		if (jerr.kind != LEDGER_JSON_ERR_NOMEM) {
			client_error_set(err, "", "the note is not UTF-8");
			rc = LEDGER_CLIENT_ERR_INVALID;
		}
		goto out;
	}
	rc = LEDGER_CLIENT_OK;
out:
	ledger_json_free(result);
	ledger_json_free(whole);
	return rc;
}

enum ledger_client_err client_tool_call_resolve(struct ledger_client *c,
						       const struct ledger_resolution *r,
						       struct ledger_client_answer *out,
						       struct ledger_client_error *err)
{
	struct ledger_buf path = LEDGER_BUF_INIT, body = LEDGER_BUF_INIT;
	const char *as = NULL;
	enum ledger_client_err rc;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	memset(out, 0, sizeof(*out));
	if (r != NULL)
		as = resolution_name(r->as);
	if (c == NULL || r == NULL || as == NULL || !usable_id(r->request_id) ||
	    !usable_id(r->tool_call_id)) {
		client_error_set(err, "", "a client, a resolution and its two ids are required");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	rc = resolve_body(r, as, &body, err);
	if (rc != LEDGER_CLIENT_OK)
		goto out;
	client_path(&path, r->request_id, "tool-calls", r->tool_call_id, "resolve",
		    (const char *)NULL);
	if (path.oom) {
		rc = LEDGER_CLIENT_ERR_NOMEM;
		goto out;
	}
	/* A resolve is idempotent under retry like every POST: the same one again
	 * is answered as the first time. */
	rc = client_send(c, path.data, &body, c->retry_ms, NULL, out, err);
out:
	ledger_buf_free(&path);
	ledger_buf_free(&body);
	return rc;
}

enum ledger_client_err ledger_client_answer_get(struct ledger_client *c, const char *request_id,
						struct ledger_client_answer *out,
						struct ledger_client_error *err)
{
	struct ledger_buf path = LEDGER_BUF_INIT;
	enum ledger_client_err rc;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	memset(out, 0, sizeof(*out));
	if (c == NULL || !usable_id(request_id)) {
		client_error_set(err, "", "a client and a request id are required");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	client_path(&path, request_id, "answer", (const char *)NULL);
	rc = get(c, &path, out, err);
	ledger_buf_free(&path);
	return rc;
}
