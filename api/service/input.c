/*
 * api/service/input.c: reading what a call sent: its body as one JSON object of
 * known fields, typed fields with the API's limits, query values and the
 * opaque cursors of lists.
 */
#include "api/service/input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/service/reply.h"
#include "ledger/common/base64url.h"
#include "ledger/common/json_number.h"
#include "ledger/common/jsonw.h"

/* Nesting deeper than this is refused: no tool call needs more. */
#define MAX_DEPTH 64

static bool key_allowed(const char *key, const char *const *allowed)
{
	for (size_t i = 0; allowed[i] != NULL; i++) {
		if (strcmp(key, allowed[i]) == 0)
			return true;
	}
	return false;
}

const struct ledger_json_value *api_input_body_or_reply(struct api_request *req,
							const char *const *allowed)
{
	static const char empty[] = "{}";
	const char *text = req->body.len > 0 ? req->body.data : empty;
	size_t len = req->body.len > 0 ? req->body.len : sizeof(empty) - 1;
	const struct ledger_json_value *root = NULL;
	struct ledger_json_error err;
	enum ledger_err rc;

	rc = ledger_json_parse(text, len, MAX_DEPTH, &req->doc, &err);
	if (rc == LEDGER_ERR_NOMEM) {
		api_reply_error(req, 500, "internal_error", "out of memory");
		return NULL;
	}
	if (rc != LEDGER_OK) {
		struct ledger_jsonw w;
		api_reply_error_begin(req, &w, 400, "invalid_json", err.message);
		ledger_jsonw_key(&w, "offset");
		ledger_jsonw_int(&w, (int64_t)err.offset);
		api_reply_error_end(req, &w);
		return NULL;
	}
	root = ledger_json_root(req->doc);
	if (root->type != LEDGER_JSON_OBJECT) {
		api_reply_error(req, 400, "invalid_json", "the body must be a JSON object");
		return NULL;
	}
	for (size_t i = 0; i < root->u.obj.count; i++) {
		const struct ledger_json_member *m = &root->u.obj.members[i];
		if (strlen(m->key) != m->key_len || !key_allowed(m->key, allowed)) {
			/* Echo a short, clean key only: the reply is ours, not the client's. */
			bool echo = m->key_len <= 64 && strlen(m->key) == m->key_len;
			api_reply_invalid_field(req, echo ? m->key : "", "unknown field");
			return NULL;
		}
	}
	return root;
}

/* A present, non-null member of @p obj, or NULL. */
static const struct ledger_json_value *member(const struct ledger_json_value *obj, const char *key)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	return v != NULL && v->type != LEDGER_JSON_NULL ? v : NULL;
}

enum ledger_err api_input_text_or_reply(struct api_request *req,
					const struct ledger_json_value *obj, const char *key,
					size_t max, const char **out)
{
	const struct ledger_json_value *v = member(obj, key);

	*out = NULL;
	if (v == NULL)
		return LEDGER_OK;
	if (v->type != LEDGER_JSON_STRING) {
		api_reply_invalid_field(req, key, "must be a string");
		return LEDGER_ERR_INVALID;
	}
	if (v->u.str.len == 0 || v->u.str.len > max || strlen(v->u.str.s) != v->u.str.len) {
		api_reply_invalid_field(req, key, "must be 1 to %zu bytes, without NUL", max);
		return LEDGER_ERR_INVALID;
	}
	*out = v->u.str.s;
	return LEDGER_OK;
}

enum ledger_err api_input_id_or_reply(struct api_request *req, const struct ledger_json_value *obj,
				      const char *key, size_t min_len, const char **out)
{
	const struct ledger_json_value *v = member(obj, key);

	*out = NULL;
	if (v == NULL)
		return LEDGER_OK;
	if (v->type != LEDGER_JSON_STRING || v->u.str.len < min_len ||
	    !ledger_id_valid(v->u.str.s, v->u.str.len)) {
		api_reply_invalid_field(req, key, "must be %zu to %d characters of [A-Za-z0-9._~-]",
					min_len, LEDGER_ID_MAX);
		return LEDGER_ERR_INVALID;
	}
	*out = v->u.str.s;
	return LEDGER_OK;
}

enum ledger_err api_input_int_or_reply(struct api_request *req, const struct ledger_json_value *obj,
				       const char *key, int64_t min, int64_t max, int64_t def,
				       int64_t *out)
{
	const struct ledger_json_value *v = member(obj, key);
	uint64_t u = 0;

	if (v == NULL) {
		if (def < 0) {
			api_reply_invalid_field(req, key, "is required");
			return LEDGER_ERR_INVALID;
		}
		*out = def;
		return LEDGER_OK;
	}
	if (v->type != LEDGER_JSON_NUMBER ||
	    ledger_json_number_uint(v, (uint64_t)max, &u) != LEDGER_OK || (int64_t)u < min) {
		api_reply_invalid_field(req, key, "must be an integer from %lld to %lld",
					(long long)min, (long long)max);
		return LEDGER_ERR_INVALID;
	}
	*out = (int64_t)u;
	return LEDGER_OK;
}

static bool is_lower_hex(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

enum ledger_err api_input_sha256_or_reply(struct api_request *req,
					  const struct ledger_json_value *obj, const char *key,
					  const char **out)
{
	const struct ledger_json_value *v = member(obj, key);

	*out = NULL;
	if (v == NULL)
		return LEDGER_OK;
	if (v->type != LEDGER_JSON_STRING || v->u.str.len != LEDGER_SHA256_HEX ||
	    !is_lower_hex(v->u.str.s, v->u.str.len)) {
		api_reply_invalid_field(req, key, "must be 64 lowercase hex digits");
		return LEDGER_ERR_INVALID;
	}
	*out = v->u.str.s;
	return LEDGER_OK;
}

/*
 * True when a string or key in @p v holds a NUL (the escape \u0000), which
 * PostgreSQL's jsonb refuses: such a value could never be stored. The depth
 * is the reader's bound.
 */
static bool holds_nul(const struct ledger_json_value *v)
{
	switch (v->type) {
	case LEDGER_JSON_STRING:
		return strlen(v->u.str.s) != v->u.str.len;
	case LEDGER_JSON_ARRAY:
		for (size_t i = 0; i < v->u.arr.count; i++) {
			if (holds_nul(&v->u.arr.items[i]))
				return true;
		}
		return false;
	case LEDGER_JSON_OBJECT:
		for (size_t i = 0; i < v->u.obj.count; i++) {
			const struct ledger_json_member *m = &v->u.obj.members[i];

			if (strlen(m->key) != m->key_len || holds_nul(&m->value))
				return true;
		}
		return false;
	case LEDGER_JSON_NULL:
	case LEDGER_JSON_FALSE:
	case LEDGER_JSON_TRUE:
	case LEDGER_JSON_NUMBER:
		break;
	}
	return false;
}

enum ledger_err api_input_object_or_reply(struct api_request *req,
					  const struct ledger_json_value *obj, const char *key,
					  size_t max, const struct ledger_json_value **out)
{
	const struct ledger_json_value *v = member(obj, key);

	*out = NULL;
	if (v == NULL)
		return LEDGER_OK;
	if (v->type != LEDGER_JSON_OBJECT || v->raw_len > max || holds_nul(v)) {
		api_reply_invalid_field(req, key,
					"must be a JSON object of at most %zu bytes, no string of "
					"which holds \\u0000",
					max);
		return LEDGER_ERR_INVALID;
	}
	*out = v;
	return LEDGER_OK;
}

enum ledger_err api_input_bool_or_reply(struct api_request *req,
					const struct ledger_json_value *obj, const char *key,
					bool def, bool *out)
{
	const struct ledger_json_value *v = member(obj, key);

	*out = def;
	if (v == NULL)
		return LEDGER_OK;
	if (v->type != LEDGER_JSON_TRUE && v->type != LEDGER_JSON_FALSE) {
		api_reply_invalid_field(req, key, "must be true or false");
		return LEDGER_ERR_INVALID;
	}
	*out = v->type == LEDGER_JSON_TRUE;
	return LEDGER_OK;
}

/* --- cursors --- */

void api_input_cursor_encode(const char *raw, size_t n, char *out, size_t cap)
{
	(void)ledger_base64url_encode(raw, n, out, cap);
}

int api_input_cursor_decode(const char *s, char *out, size_t cap)
{
	return ledger_base64url_decode(s, out, cap);
}

void *api_input_alloc_or_reply(struct api_request *req, size_t size)
{
	req->input = calloc(1, size);
	if (req->input == NULL)
		api_reply_error(req, 500, "internal_error", "out of memory");
	return req->input;
}

const char *api_input_query(const struct api_request *req, const char *key)
{
	for (unsigned i = 0; i < req->nquery; i++) {
		if (strcmp(req->query_keys[i], key) == 0)
			return req->query_values[i];
	}
	return NULL;
}
