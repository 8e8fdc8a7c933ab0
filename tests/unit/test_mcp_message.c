/*
 * tests/unit/test_mcp_message.c: what ledger-mcp reads of a JSON-RPC message
 * and what it writes, table-driven: message kinds, ids as JSON-RPC compares
 * them, a tools/call's keys, server responses, the replay, whose every
 * byte but the marker must be the stored one, and the trace context
 * rewritten in a forwarded call's _meta, every other byte the client's.
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

#include "sdk/programs/ledger-mcp/message.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_mcp_message_kinds(void **state)
{
	static const struct {
		const char *text;
		enum ledger_err parsed;
		enum mcp_kind kind;
		const char *method;
	} rows[] = {
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}", LEDGER_OK,
		 MCP_MSG_REQUEST, "tools/list"},
		{"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", LEDGER_OK,
		 MCP_MSG_NOTIFICATION, "notifications/initialized"},
		{"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}", LEDGER_OK, MCP_MSG_RESPONSE,
		 NULL},
		{"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700}}", LEDGER_OK,
		 MCP_MSG_RESPONSE, NULL},
		{"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", LEDGER_OK, MCP_MSG_BATCH,
		 NULL},
		{"{\"jsonrpc\":\"2.0\",\"id\":{\"x\":1},\"method\":\"ping\"}", LEDGER_OK,
		 MCP_MSG_OTHER, NULL},                          /* an id JSON-RPC does not allow */
		{"{\"id\":1}", LEDGER_OK, MCP_MSG_OTHER, NULL}, /* neither a call nor an answer */
		{"\"text\"", LEDGER_OK, MCP_MSG_OTHER, NULL},
		{"{\"id\":1,", LEDGER_ERR_INVALID, MCP_MSG_OTHER, NULL},
		{"{\"id\":1,\"id\":2,\"method\":\"ping\"}", LEDGER_ERR_INVALID, MCP_MSG_OTHER,
		 NULL},
	};

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		struct mcp_message m;

		assert_int_equal(mcp_message_parse(rows[i].text, strlen(rows[i].text), &m),
				 rows[i].parsed);
		if (rows[i].parsed == LEDGER_OK) {
			assert_int_equal(m.kind, rows[i].kind);
			if (rows[i].method != NULL)
				assert_string_equal(m.method, rows[i].method);
			else
				assert_null(m.method);
		}
		mcp_message_free(&m);
	}
}

static void test_mcp_message_id_keys(void **state)
{
	static const struct {
		const char *a, *b;
		bool same;
	} rows[] = {
		{"1", "1", true},
		{"\"1\"", "1", false},            /* a string is never the number */
		{"\"a\\u0062\"", "\"ab\"", true}, /* compared decoded */
		{"7", "7.0", false},
		{"\"a\\u0000b\"", "\"a\\u0000c\"", false}, /* not cut at a NUL */
	};

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		char ta[64], tb[64];
		struct mcp_message ma, mb;
		char *ka, *kb;

		snprintf(ta, sizeof(ta), "{\"id\":%s,\"result\":1}", rows[i].a);
		snprintf(tb, sizeof(tb), "{\"id\":%s,\"result\":1}", rows[i].b);
		assert_int_equal(mcp_message_parse(ta, strlen(ta), &ma), LEDGER_OK);
		assert_int_equal(mcp_message_parse(tb, strlen(tb), &mb), LEDGER_OK);
		ka = mcp_message_id_key(ma.id);
		kb = mcp_message_id_key(mb.id);
		assert_non_null(ka);
		assert_non_null(kb);
		assert_int_equal(strcmp(ka, kb) == 0, rows[i].same);
		free(ka);
		free(kb);
		mcp_message_free(&ma);
		mcp_message_free(&mb);
	}
}

static void test_mcp_message_tool_call_keys(void **state)
{
	static const struct {
		const char *meta; /* the _meta member, or "" */
		enum mcp_keys keys;
		const char *rid, *cid, *aid;
	} rows[] = {
		{"", MCP_KEYS_NONE, NULL, NULL, NULL},
		{",\"_meta\":{\"progressToken\":3}", MCP_KEYS_NONE, NULL, NULL, NULL},
		{",\"_meta\":{\"io.ledgerd/request_id\":\"r-1\",\"io.ledgerd/tool_call_id\":\"call_03\"}",
		 MCP_KEYS_OK, "r-1", "call_03", NULL},
		{",\"_meta\":{\"io.ledgerd/request_id\":\"r\",\"io.ledgerd/tool_call_id\":\"c\","
		 "\"io.ledgerd/attempt_id\":\"a~2\"}",
		 MCP_KEYS_OK, "r", "c", "a~2"},
		{",\"_meta\":{\"io.ledgerd/request_id\":\"r\"}", MCP_KEYS_INVALID, NULL, NULL,
		 NULL},
		{",\"_meta\":{\"io.ledgerd/tool_call_id\":\"c\"}", MCP_KEYS_INVALID, NULL, NULL,
		 NULL},
		{",\"_meta\":{\"io.ledgerd/request_id\":7,\"io.ledgerd/tool_call_id\":\"c\"}",
		 MCP_KEYS_INVALID, NULL, NULL, NULL},
		{",\"_meta\":{\"io.ledgerd/request_id\":\"r:x\",\"io.ledgerd/tool_call_id\":\"c\"}",
		 MCP_KEYS_INVALID, NULL, NULL, NULL}, /* ':' would change the key */
		{",\"_meta\":{\"io.ledgerd/request_id\":\"\",\"io.ledgerd/tool_call_id\":\"c\"}",
		 MCP_KEYS_INVALID, NULL, NULL, NULL},
		{",\"_meta\":{\"io.ledgerd/request_id\":\"r\",\"io.ledgerd/tool_call_id\":\"c\","
		 "\"io.ledgerd/attempt_id\":\"a/1\"}",
		 MCP_KEYS_INVALID, NULL, NULL, NULL},
	};

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		char text[512];
		struct mcp_message m;
		struct mcp_tool_call call;

		snprintf(text, sizeof(text),
			 "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{"
			 "\"name\":\"charge\",\"arguments\":{ \"cents\" : 5 }%s}}",
			 rows[i].meta);
		assert_int_equal(mcp_message_parse(text, strlen(text), &m), LEDGER_OK);
		assert_true(mcp_message_tool_call(&m, &call));
		assert_int_equal(call.keys, rows[i].keys);
		assert_string_equal(call.name, "charge");
		assert_int_equal(call.args_len, strlen("{ \"cents\" : 5 }"));
		assert_memory_equal(call.args, "{ \"cents\" : 5 }", call.args_len); /* exact */
		if (rows[i].keys == MCP_KEYS_OK) {
			assert_string_equal(call.request_id, rows[i].rid);
			assert_string_equal(call.tool_call_id, rows[i].cid);
			if (rows[i].aid != NULL)
				assert_string_equal(call.attempt_id, rows[i].aid);
			else
				assert_null(call.attempt_id);
		}
		if (rows[i].keys == MCP_KEYS_INVALID)
			assert_true(call.why[0] != '\0');
		mcp_message_free(&m);
	}
}

static void test_mcp_message_other_requests_are_no_tool_calls(void **state)
{
	const char *text = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}";
	const char *batch = "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
			    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\"}]";
	struct mcp_message m;
	struct mcp_tool_call call;

	(void)state;
	assert_int_equal(mcp_message_parse(text, strlen(text), &m), LEDGER_OK);
	assert_false(mcp_message_tool_call(&m, &call));
	assert_false(mcp_message_batch_has_tool_call(&m));
	mcp_message_free(&m);
	assert_int_equal(mcp_message_parse(batch, strlen(batch), &m), LEDGER_OK);
	assert_true(mcp_message_batch_has_tool_call(&m));
	mcp_message_free(&m);
}

static void test_mcp_message_responses(void **state)
{
	static const struct {
		const char *text;
		bool response, has_result, is_error;
		long error_code;
	} rows[] = {
		{"{\"id\":1,\"result\":{\"content\":[]}}", true, true, false, 0},
		{"{\"id\":1,\"result\":{\"content\":[],\"isError\":true}}", true, true, true, 0},
		{"{\"id\":1,\"result\":{\"isError\":\"yes\"}}", true, true, false, 0},
		{"{\"id\":1,\"error\":{\"code\":-32602,\"message\":\"bad\"}}", true, false, false,
		 -32602},
		{"{\"id\":1,\"method\":\"ping\"}", false, false, false, 0},
	};

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		struct mcp_message m;
		struct mcp_response r;

		assert_int_equal(mcp_message_parse(rows[i].text, strlen(rows[i].text), &m),
				 LEDGER_OK);
		assert_int_equal(mcp_message_response(&m, &r), rows[i].response);
		if (rows[i].response) {
			assert_int_equal(r.result != NULL, rows[i].has_result);
			assert_int_equal(r.is_error, rows[i].is_error);
			assert_int_equal(r.error_code, rows[i].error_code);
		}
		mcp_message_free(&m);
	}
}

static void test_mcp_message_replay_adds_only_the_marker(void **state)
{
	static const struct {
		const char *stored;
		bool failed;
		const char *result; /* what the replay's "result" must be, byte for byte */
	} rows[] = {
		{"{\"content\": [ {\"type\":\"text\",\"text\":\"m-829\"} ]}", false,
		 "{\"_meta\":{\"io.ledgerd/replayed\":true},\"content\": [ "
		 "{\"type\":\"text\",\"text\":\"m-829\"} ]}"},
		{"{ \"_meta\" : { \"k\": 1 }, \"content\":[]}", false,
		 "{ \"_meta\" : {\"io.ledgerd/replayed\":true, \"k\": 1 }, \"content\":[]}"},
		{"{\"content\":[],\"_meta\":{}}", false,
		 "{\"content\":[],\"_meta\":{\"io.ledgerd/replayed\":true}}"},
		{"{}", false, "{\"_meta\":{\"io.ledgerd/replayed\":true}}"},
		{"{\"content\":[],\"isError\":true}", true,
		 "{\"_meta\":{\"io.ledgerd/replayed\":true},\"content\":[],\"isError\":true}"},
		{"{\"_meta\":3}", false, "{\"_meta\":3}"}, /* no second _meta beside a broken one */
		/* A person resolved it with what is no CallToolResult: shown as text. */
		{"\"sent\"", false,
		 "{\"_meta\":{\"io.ledgerd/replayed\":true},\"content\":[{\"type\":\"text\","
		 "\"text\":\"\\\"sent\\\"\"}]}"},
		{"null", true,
		 "{\"_meta\":{\"io.ledgerd/replayed\":true},\"content\":[{\"type\":\"text\","
		 "\"text\":\"null\"}],\"isError\":true}"},
	};
	const char *request = "{\"jsonrpc\":\"2.0\",\"id\":\"q-7\",\"method\":\"tools/call\"}";
	struct mcp_message req;

	(void)state;
	assert_int_equal(mcp_message_parse(request, strlen(request), &req), LEDGER_OK);
	for (size_t i = 0; i < N(rows); i++) {
		struct ledger_buf out = LEDGER_BUF_INIT, want = LEDGER_BUF_INIT;
		struct mcp_message check;

		mcp_message_replay(&out, req.id, rows[i].stored, strlen(rows[i].stored),
				   rows[i].failed);
		ledger_buf_printf(&want, "{\"jsonrpc\":\"2.0\",\"id\":\"q-7\",\"result\":%s}",
				  rows[i].result);
		assert_false(out.oom);
		assert_string_equal(out.data, want.data);
		/* And it is one valid message, whatever the stored bytes were. */
		assert_int_equal(mcp_message_parse(out.data, out.len, &check), LEDGER_OK);
		assert_int_equal(check.kind, MCP_MSG_RESPONSE);
		mcp_message_free(&check);
		ledger_buf_free(&out);
		ledger_buf_free(&want);
	}
	mcp_message_free(&req);
}

static void test_mcp_message_error_echoes_the_id(void **state)
{
	const char *request = "{\"jsonrpc\":\"2.0\",\"id\":12.50,\"method\":\"tools/call\"}";
	struct mcp_message req;
	struct ledger_buf out = LEDGER_BUF_INIT;

	(void)state;
	assert_int_equal(mcp_message_parse(request, strlen(request), &req), LEDGER_OK);
	mcp_message_error(&out, req.id, -32012, "ledger-mcp: \"other\" args", "{\"code\":\"x\"}");
	assert_string_equal(out.data,
			    "{\"jsonrpc\":\"2.0\",\"id\":12.50,\"error\":{\"code\":-32012,"
			    "\"message\":\"ledger-mcp: \\\"other\\\" args\","
			    "\"data\":{\"code\":\"x\"}}}");
	ledger_buf_free(&out);
	mcp_message_error(&out, NULL, -32021, "batch", NULL);
	assert_string_equal(out.data, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32021,"
				      "\"message\":\"batch\"}}");
	ledger_buf_free(&out);
	mcp_message_free(&req);
}

static void count_tool(void *ctx, const char *name, bool read_only, bool idempotent)
{
	char *seen = ctx;

	strcat(seen, name);
	strcat(seen, read_only ? "+r" : "-r");
	strcat(seen, idempotent ? "+i;" : "-i;");
}

static void test_mcp_message_tools_list_hints(void **state)
{
	const char *text =
		"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":["
		"{\"name\":\"read\",\"annotations\":{\"readOnlyHint\":true}},"
		"{\"name\":\"sync\",\"annotations\":{\"idempotentHint\":true,\"readOnlyHint\":1}},"
		"{\"name\":\"pay\"},{\"annotations\":{\"readOnlyHint\":true}}]}}";
	const char *other = "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[]}}";
	struct mcp_message m;
	char seen[256] = "";

	(void)state;
	assert_int_equal(mcp_message_parse(text, strlen(text), &m), LEDGER_OK);
	assert_true(mcp_message_tools_each(&m, count_tool, seen));
	assert_string_equal(seen, "read+r-i;sync-r+i;pay-r-i;"); /* only JSON true counts */
	mcp_message_free(&m);
	assert_int_equal(mcp_message_parse(other, strlen(other), &m), LEDGER_OK);
	assert_false(mcp_message_tools_each(&m, count_tool, seen));
	mcp_message_free(&m);
}

/* The trace context of a forwarded tools/call: only _meta's two values change. */
static void test_mcp_message_with_trace_changes_only_the_context(void **state)
{
#define TP "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#define CALL(meta)                                                                                 \
	"{\"jsonrpc\":\"2.0\", \"id\":7,\"method\":\"tools/call\",\"params\":"                     \
	"{\"name\":\"t\",\"_meta\":" meta ",\"arguments\":{\"a\":[1, 2]}}} "
	static const struct {
		const char *in;
		const char *tracestate; /* NULL: removed */
		const char *out;        /* NULL: refused (no _meta object) */
	} rows[] = {
		/* replaced in place, spacing kept */
		{CALL("{ \"k\":1, \"traceparent\" : \"old\" }"), NULL,
		 CALL("{ \"k\":1, \"traceparent\" : \"" TP "\" }")},
		/* not there: put first, before the other members */
		{CALL("{\"k\":1}"), NULL, CALL("{\"traceparent\":\"" TP "\",\"k\":1}")},
		{CALL("{}"), "a=1", CALL("{\"traceparent\":\"" TP "\",\"tracestate\":\"a=1\"}")},
		{CALL("{ }"), NULL, CALL("{\"traceparent\":\"" TP "\" }")},
		/* a tracestate replaced, or removed wherever it stands */
		{CALL("{\"tracestate\":\"x\",\"traceparent\":\"y\"}"), "b=2",
		 CALL("{\"tracestate\":\"b=2\",\"traceparent\":\"" TP "\"}")},
		{CALL("{\"traceparent\":\"y\", \"tracestate\":\"x\"}"), NULL,
		 CALL("{\"traceparent\":\"" TP "\"}")},
		{CALL("{\"tracestate\":\"x\" , \"traceparent\":\"y\"}"), NULL,
		 CALL("{ \"traceparent\":\"" TP "\"}")},
		{CALL("{\"k\":1,\"tracestate\":\"x\",\"j\":2}"), NULL,
		 CALL("{\"traceparent\":\"" TP "\",\"k\":1,\"j\":2}")},
		/* removed as the only member while the traceparent is put in */
		{CALL("{\"tracestate\":\"x\"}"), NULL, CALL("{\"traceparent\":\"" TP "\"}")},
		/* a value that was no string is replaced too; a tracestate is escaped */
		{CALL("{\"traceparent\":[1,{\"a\":2}]}"), "q=\"\\",
		 CALL("{\"tracestate\":\"q=\\\"\\\\\",\"traceparent\":\"" TP "\"}")},
		/* nothing to rewrite */
		{CALL("[]"), NULL, NULL},
		{"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\"}", NULL, NULL},
		{"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"_meta\":{}}}", NULL, NULL},
	};
	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		struct mcp_message m;
		struct ledger_buf out = LEDGER_BUF_INIT;
		size_t len = strlen(rows[i].in);
		bool done;

		assert_int_equal(mcp_message_parse(rows[i].in, len, &m), LEDGER_OK);
		done = mcp_message_with_trace(&m, rows[i].in, len, TP, rows[i].tracestate, &out);
		if (rows[i].out == NULL) {
			assert_false(done);
			assert_int_equal(out.len, 0);
		} else {
			struct mcp_message again;

			assert_true(done);
			assert_false(out.oom);
			if (out.len != strlen(rows[i].out) ||
			    memcmp(out.data, rows[i].out, out.len))
				fail_msg("row %zu: got %.*s\nwant %s", i, (int)out.len, out.data,
					 rows[i].out);
			/* Still one valid message, read as the same call with the new context. */
			assert_int_equal(mcp_message_parse(out.data, out.len, &again), LEDGER_OK);
			assert_int_equal(again.kind, MCP_MSG_REQUEST);
			mcp_message_free(&again);
		}
		ledger_buf_free(&out);
		mcp_message_free(&m);
	}
#undef CALL
#undef TP
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mcp_message_kinds),
		cmocka_unit_test(test_mcp_message_id_keys),
		cmocka_unit_test(test_mcp_message_tool_call_keys),
		cmocka_unit_test(test_mcp_message_other_requests_are_no_tool_calls),
		cmocka_unit_test(test_mcp_message_responses),
		cmocka_unit_test(test_mcp_message_replay_adds_only_the_marker),
		cmocka_unit_test(test_mcp_message_error_echoes_the_id),
		cmocka_unit_test(test_mcp_message_tools_list_hints),
		cmocka_unit_test(test_mcp_message_with_trace_changes_only_the_context),
	};

	return cmocka_run_group_tests_name("mcp_message", tests, NULL, NULL);
}
