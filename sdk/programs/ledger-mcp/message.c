/*
 * sdk/programs/ledger-mcp/message.c: reading JSON-RPC messages and writing ledger-mcp's own
 * answers. Every value that crosses the proxy keeps its exact bytes: ids are
 * echoed as the client wrote them, stored results are spliced in unchanged
 * and only ever gain the replayed marker, and a forwarded tools/call
 * changes in nothing but its _meta's trace context.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/jsonw.h"
#include "sdk/c/ledger_client.h"
#include "sdk/programs/ledger-mcp/message.h"

/* Deep enough for any real tool's arguments and results. */
#define MAX_DEPTH 128

enum ledger_err mcp_message_parse(const char *text, size_t len, struct mcp_message *out)
{
	const struct ledger_json_value *root, *method, *id;
	enum ledger_err e;

	memset(out, 0, sizeof(*out));
	e = ledger_json_parse(text, len, MAX_DEPTH, &out->doc, NULL);
	if (e != LEDGER_OK) {
		out->doc = NULL;
		return e;
	}
	root = ledger_json_root(out->doc);
	out->root = root;
	out->kind = MCP_MSG_OTHER;
	if (root->type == LEDGER_JSON_ARRAY) {
		out->kind = MCP_MSG_BATCH;
		return LEDGER_OK;
	}
	if (root->type != LEDGER_JSON_OBJECT)
		return LEDGER_OK;
	method = ledger_json_get(root, "method");
	id = ledger_json_get(root, "id");
	if (id != NULL && id->type != LEDGER_JSON_STRING && id->type != LEDGER_JSON_NUMBER &&
	    id->type != LEDGER_JSON_NULL)
		return LEDGER_OK; /* not an id JSON-RPC knows: not ours to act on */
	if (method != NULL && method->type == LEDGER_JSON_STRING) {
		out->method = method->u.str.s;
		out->id = id;
		out->kind = id != NULL ? MCP_MSG_REQUEST : MCP_MSG_NOTIFICATION;
	} else if (method == NULL && id != NULL &&
		   (ledger_json_get(root, "result") != NULL ||
		    ledger_json_get(root, "error") != NULL)) {
		out->id = id;
		out->kind = MCP_MSG_RESPONSE;
	}
	return LEDGER_OK;
}

void mcp_message_free(struct mcp_message *m)
{
	if (m == NULL)
		return;
	ledger_json_free(m->doc);
	memset(m, 0, sizeof(*m));
}

char *mcp_message_id_key(const struct ledger_json_value *id)
{
	char *key = NULL;

	if (id == NULL)
		return NULL;
	if (id->type == LEDGER_JSON_STRING) {
		/* In hex: a string may hold NUL, and two that differ after one are two ids. */
		static const char hex[] = "0123456789abcdef";

		key = malloc(2 * id->u.str.len + 2);
		if (key != NULL) {
			key[0] = 's';
			for (size_t i = 0; i < id->u.str.len; i++) {
				unsigned char c = (unsigned char)id->u.str.s[i];

				key[1 + 2 * i] = hex[c >> 4];
				key[2 + 2 * i] = hex[c & 15];
			}
			key[2 * id->u.str.len + 1] = '\0';
		}
	} else if (id->type == LEDGER_JSON_NUMBER) {
		key = malloc(id->raw_len + 2);
		if (key != NULL) {
			key[0] = 'n';
			memcpy(key + 1, id->raw, id->raw_len);
			key[id->raw_len + 1] = '\0';
		}
	}
	return key;
}

/* A ledgerd id: 1..128 bytes of [A-Za-z0-9._~-] (docs/api.md). */
static bool valid_id(const struct ledger_json_value *v)
{
	if (v->type != LEDGER_JSON_STRING || v->u.str.len == 0 ||
	    v->u.str.len > LEDGER_CLIENT_ID_MAX)
		return false;
	for (size_t i = 0; i < v->u.str.len; i++) {
		unsigned char c = (unsigned char)v->u.str.s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '~' || c == '-'))
			return false;
	}
	return true;
}

/* Reads one key of _meta into @p out; false (with out->why) when it is not an id. */
static bool read_key(const struct ledger_json_value *meta, const char *name, const char **dst,
		     struct mcp_tool_call *out)
{
	const struct ledger_json_value *v = ledger_json_get(meta, name);

	*dst = NULL;
	if (v == NULL)
		return true;
	if (!valid_id(v)) {
		snprintf(out->why, sizeof(out->why),
			 "_meta \"%s\" must be a string of 1..128 bytes of [A-Za-z0-9._~-]", name);
		return false;
	}
	*dst = v->u.str.s;
	return true;
}

/* The decoded string member @p name of @p obj; NULL when absent or no string. */
static const char *string_of(const struct ledger_json_value *obj, const char *name)
{
	const struct ledger_json_value *v = ledger_json_get(obj, name);

	return v != NULL && v->type == LEDGER_JSON_STRING ? v->u.str.s : NULL;
}

bool mcp_message_tool_call(const struct mcp_message *m, struct mcp_tool_call *out)
{
	const struct ledger_json_value *params, *name, *args, *meta;

	memset(out, 0, sizeof(*out));
	if (m->kind != MCP_MSG_REQUEST || strcmp(m->method, "tools/call") != 0)
		return false;
	params = ledger_json_get(m->root, "params");
	name = ledger_json_get(params, "name");
	args = ledger_json_get(params, "arguments");
	meta = ledger_json_get(params, "_meta");
	if (name != NULL && name->type == LEDGER_JSON_STRING)
		out->name = name->u.str.s;
	if (args != NULL) {
		out->args = args->raw;
		out->args_len = args->raw_len;
	}
	out->keys = MCP_KEYS_NONE;
	if (meta == NULL || meta->type != LEDGER_JSON_OBJECT)
		return true;
	out->traceparent = string_of(meta, MCP_META_TRACEPARENT);
	out->tracestate = string_of(meta, MCP_META_TRACESTATE);
	if (!read_key(meta, MCP_META_REQUEST_ID, &out->request_id, out) ||
	    !read_key(meta, MCP_META_TOOL_CALL_ID, &out->tool_call_id, out) ||
	    !read_key(meta, MCP_META_ATTEMPT_ID, &out->attempt_id, out)) {
		out->keys = MCP_KEYS_INVALID;
		return true;
	}
	if (out->request_id != NULL && out->tool_call_id != NULL) {
		out->keys = MCP_KEYS_OK;
	} else if (out->request_id != NULL || out->tool_call_id != NULL ||
		   out->attempt_id != NULL) {
		snprintf(out->why, sizeof(out->why), "_meta names \"%s\" without \"%s\"",
			 out->request_id != NULL     ? MCP_META_REQUEST_ID
			 : out->tool_call_id != NULL ? MCP_META_TOOL_CALL_ID
						     : MCP_META_ATTEMPT_ID,
			 out->request_id == NULL ? MCP_META_REQUEST_ID : MCP_META_TOOL_CALL_ID);
		out->keys = MCP_KEYS_INVALID;
	}
	return true;
}

/* The position just past the '{' that opens @p obj's raw text. */
static size_t after_brace(const struct ledger_json_value *obj)
{
	size_t i = 0;

	while (i < obj->raw_len && obj->raw[i] != '{')
		i++;
	return i + 1;
}

/* One change of a message's bytes: [start, end) becomes text. */
struct edit {
	size_t start, end;
	struct ledger_buf text;
};

/* The offset of @p v's first byte in @p text. */
static size_t offset_of(const char *text, const struct ledger_json_value *v)
{
	return (size_t)(v->raw - text);
}

/* The index of member @p key of @p obj, or -1. */
static long member_index(const struct ledger_json_value *obj, const char *key)
{
	for (size_t i = 0; i < obj->u.obj.count; i++)
		if (strcmp(obj->u.obj.members[i].key, key) == 0)
			return (long)i;
	return -1;
}

/*
 * The bytes of member @p i of @p obj with what separates it from its
 * neighbours, so that cutting them leaves a valid object: from the end of
 * the member before, or from just past the '{' through the comma after.
 */
static void member_span(const char *text, const struct ledger_json_value *obj, size_t i,
			size_t *start, size_t *end)
{
	const struct ledger_json_value *v = &obj->u.obj.members[i].value;
	size_t v_end = offset_of(text, v) + v->raw_len;

	if (i > 0) {
		const struct ledger_json_value *prev = &obj->u.obj.members[i - 1].value;

		*start = offset_of(text, prev) + prev->raw_len;
		*end = v_end;
		return;
	}
	*start = offset_of(text, obj) + after_brace(obj);
	*end = v_end;
	if (obj->u.obj.count > 1) {
		while (text[*end] != ',')
			(*end)++;
		(*end)++;
	}
}

bool mcp_message_with_trace(const struct mcp_message *m, const char *text, size_t len,
			    const char *traceparent, const char *tracestate, struct ledger_buf *out)
{
	const struct ledger_json_value *meta;
	const char *keys[2] = {MCP_META_TRACEPARENT, MCP_META_TRACESTATE};
	const char *values[2] = {traceparent, tracestate};
	struct edit edits[3];
	struct ledger_buf insert = LEDGER_BUF_INIT;
	size_t n = 0, kept, at = 0;

	if (m->kind != MCP_MSG_REQUEST)
		return false;
	meta = ledger_json_get(ledger_json_get(m->root, "params"), "_meta");
	if (meta == NULL || meta->type != LEDGER_JSON_OBJECT)
		return false;
	kept = meta->u.obj.count;
	for (size_t k = 0; k < 2; k++) {
		long i = member_index(meta, keys[k]);
		const struct ledger_json_value *v;

		if (i < 0 && values[k] != NULL) {
			/* Not there: put first, with the other new one. */
			if (insert.len > 0)
				ledger_buf_putc(&insert, ',');
			ledger_jsonw_escape(&insert, keys[k], strlen(keys[k]));
			ledger_buf_putc(&insert, ':');
			ledger_jsonw_escape(&insert, values[k], strlen(values[k]));
			continue;
		}
		if (i < 0)
			continue;
		v = &meta->u.obj.members[i].value;
		edits[n].text = (struct ledger_buf)LEDGER_BUF_INIT;
		if (values[k] != NULL) {
			edits[n].start = offset_of(text, v);
			edits[n].end = edits[n].start + v->raw_len;
			ledger_jsonw_escape(&edits[n].text, values[k], strlen(values[k]));
		} else {
			member_span(text, meta, (size_t)i, &edits[n].start, &edits[n].end);
			kept--;
		}
		n++;
	}
	if (insert.len > 0) {
		if (kept > 0)
			ledger_buf_putc(&insert, ',');
		edits[n].start = edits[n].end = offset_of(text, meta) + after_brace(meta);
		edits[n].text = insert;
		insert = (struct ledger_buf)LEDGER_BUF_INIT;
		n++;
	}
	/* In the order of the text; an insertion before a cut that starts where it is. */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && (edits[j].start < edits[j - 1].start ||
					     (edits[j].start == edits[j - 1].start &&
					      edits[j].end == edits[j].start));
		     j--) {
			struct edit t = edits[j];

			edits[j] = edits[j - 1];
			edits[j - 1] = t;
		}
	for (size_t i = 0; i < n; i++) {
		ledger_buf_append(out, text + at, edits[i].start - at);
		ledger_buf_append(out, edits[i].text.data != NULL ? edits[i].text.data : "",
				  edits[i].text.len);
		out->oom |= edits[i].text.oom;
		at = edits[i].end;
		ledger_buf_free(&edits[i].text);
	}
	ledger_buf_append(out, text + at, len - at);
	return true;
}

bool mcp_message_batch_has_tool_call(const struct mcp_message *m)
{
	if (m->kind != MCP_MSG_BATCH)
		return false;
	for (size_t i = 0; i < m->root->u.arr.count; i++) {
		const struct ledger_json_value *method =
			ledger_json_get(&m->root->u.arr.items[i], "method");

		if (method != NULL && method->type == LEDGER_JSON_STRING &&
		    strcmp(method->u.str.s, "tools/call") == 0)
			return true;
	}
	return false;
}

bool mcp_message_response(const struct mcp_message *m, struct mcp_response *out)
{
	const struct ledger_json_value *result, *error, *is_error, *code;

	memset(out, 0, sizeof(*out));
	if (m->kind != MCP_MSG_RESPONSE)
		return false;
	result = ledger_json_get(m->root, "result");
	error = ledger_json_get(m->root, "error");
	if (result != NULL) {
		out->result = result->raw;
		out->result_len = result->raw_len;
		is_error = ledger_json_get(result, "isError");
		out->is_error = is_error != NULL && is_error->type == LEDGER_JSON_TRUE;
		return true;
	}
	if (error == NULL)
		return false;
	out->error = error->raw;
	out->error_len = error->raw_len;
	code = ledger_json_get(error, "code");
	if (code != NULL && code->type == LEDGER_JSON_NUMBER)
		out->error_code = strtol(code->raw, NULL, 10);
	return true;
}

static void put_id(struct ledger_jsonw *w, const struct ledger_json_value *id)
{
	ledger_jsonw_key(w, "id");
	if (id != NULL)
		ledger_jsonw_raw(w, id->raw, id->raw_len);
	else
		ledger_jsonw_null(w);
}

void mcp_message_error(struct ledger_buf *out, const struct ledger_json_value *id, int code,
		       const char *message, const char *data_json)
{
	struct ledger_jsonw w;

	ledger_jsonw_init(&w, out);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "jsonrpc");
	ledger_jsonw_string(&w, "2.0");
	put_id(&w, id);
	ledger_jsonw_key(&w, "error");
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "code");
	ledger_jsonw_int(&w, code);
	ledger_jsonw_key(&w, "message");
	ledger_jsonw_string(&w, message);
	if (data_json != NULL) {
		ledger_jsonw_key(&w, "data");
		ledger_jsonw_raw(&w, data_json, strlen(data_json));
	}
	ledger_jsonw_object_end(&w);
	ledger_jsonw_object_end(&w);
}

/*
 * Writes @p result with the replayed marker: inserted first in its _meta
 * object, or a _meta object inserted first in the result. Every other byte
 * is the stored one. A _meta that is no object (no MCP server writes one)
 * is left as it is, without the marker: a second _meta would be a
 * duplicate key.
 */
static void put_marked(struct ledger_buf *out, const struct ledger_json_value *result)
{
	const struct ledger_json_value *meta = ledger_json_get(result, "_meta");
	const char *marker = "\"" MCP_META_REPLAYED "\":true";
	size_t at;

	if (meta != NULL && meta->type != LEDGER_JSON_OBJECT) {
		ledger_buf_append(out, result->raw, result->raw_len);
		return;
	}
	if (meta != NULL) {
		at = (size_t)(meta->raw - result->raw) + after_brace(meta);
		ledger_buf_append(out, result->raw, at);
		ledger_buf_puts(out, marker);
		if (meta->u.obj.count > 0)
			ledger_buf_putc(out, ',');
	} else {
		at = after_brace(result);
		ledger_buf_append(out, result->raw, at);
		ledger_buf_puts(out, "\"_meta\":{");
		ledger_buf_puts(out, marker);
		ledger_buf_putc(out, '}');
		if (result->u.obj.count > 0)
			ledger_buf_putc(out, ',');
	}
	ledger_buf_append(out, result->raw + at, result->raw_len - at);
}

/* A result a person resolved with a value that is no CallToolResult, shown as text. */
static void put_as_text(struct ledger_buf *out, const char *result, size_t len, bool failed)
{
	struct ledger_jsonw w;

	ledger_jsonw_init(&w, out);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "_meta");
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, MCP_META_REPLAYED);
	ledger_jsonw_bool(&w, true);
	ledger_jsonw_object_end(&w);
	ledger_jsonw_key(&w, "content");
	ledger_jsonw_array_begin(&w);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "type");
	ledger_jsonw_string(&w, "text");
	ledger_jsonw_key(&w, "text");
	ledger_jsonw_string_n(&w, result, len);
	ledger_jsonw_object_end(&w);
	ledger_jsonw_array_end(&w);
	if (failed) {
		ledger_jsonw_key(&w, "isError");
		ledger_jsonw_bool(&w, true);
	}
	ledger_jsonw_object_end(&w);
}

void mcp_message_replay(struct ledger_buf *out, const struct ledger_json_value *id,
			const char *result, size_t len, bool failed)
{
	struct ledger_json_doc *doc = NULL;
	const struct ledger_json_value *root = NULL;

	if (ledger_json_parse(result, len, MAX_DEPTH, &doc, NULL) == LEDGER_OK)
		root = ledger_json_root(doc);
	ledger_buf_puts(out, "{\"jsonrpc\":\"2.0\",\"id\":");
	if (id != NULL)
		ledger_buf_append(out, id->raw, id->raw_len);
	else
		ledger_buf_puts(out, "null");
	ledger_buf_puts(out, ",\"result\":");
	if (root != NULL && root->type == LEDGER_JSON_OBJECT)
		put_marked(out, root);
	else
		put_as_text(out, result, len, failed);
	ledger_buf_putc(out, '}');
	ledger_json_free(doc);
}

bool mcp_message_tools_each(const struct mcp_message *m, mcp_tool_fn fn, void *ctx)
{
	const struct ledger_json_value *tools;

	if (m->kind != MCP_MSG_RESPONSE)
		return false;
	tools = ledger_json_get(ledger_json_get(m->root, "result"), "tools");
	if (tools == NULL || tools->type != LEDGER_JSON_ARRAY)
		return false;
	for (size_t i = 0; i < tools->u.arr.count; i++) {
		const struct ledger_json_value *tool = &tools->u.arr.items[i];
		const struct ledger_json_value *name = ledger_json_get(tool, "name");
		const struct ledger_json_value *ann = ledger_json_get(tool, "annotations");
		const struct ledger_json_value *ro = ledger_json_get(ann, "readOnlyHint");
		const struct ledger_json_value *idem = ledger_json_get(ann, "idempotentHint");

		if (name == NULL || name->type != LEDGER_JSON_STRING)
			continue;
		fn(ctx, name->u.str.s, ro != NULL && ro->type == LEDGER_JSON_TRUE,
		   idem != NULL && idem->type == LEDGER_JSON_TRUE);
	}
	return true;
}
