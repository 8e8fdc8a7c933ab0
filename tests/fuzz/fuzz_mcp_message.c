/*
 * tests/fuzz/fuzz_mcp_message.c: libFuzzer target for what ledger-mcp reads
 * of the messages a client or a server sends it (sdk/programs/ledger-mcp/message.c), both
 * of which may be hostile. An input is one message: it is classified, read
 * as a tools/call, a response and a tools/list answer, and a response's
 * result is replayed. Nothing may crash or leak; a tools/call's spans stay
 * inside the input, and with its trace context rewritten it is still one
 * tools/call, in that context; a replay is always one valid JSON-RPC response.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdk/programs/ledger-mcp/message.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TRACEPARENT "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_mcp_message: %s:%d: %s\n", __FILE__, __LINE__,       \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static void ignore_tool(void *ctx, const char *name, bool read_only, bool idempotent)
{
	(void)read_only, (void)idempotent;
	CHECK(name != NULL);
	(*(size_t *)ctx)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	struct mcp_message m, check;
	struct mcp_tool_call call;
	struct mcp_response r;
	struct ledger_buf out = LEDGER_BUF_INIT;
	size_t tools = 0;
	char *key;

	if (mcp_message_parse(text, size, &m) != LEDGER_OK)
		return 0;
	key = mcp_message_id_key(m.id);
	CHECK(m.id == NULL || m.id->type == LEDGER_JSON_NULL || key != NULL);
	free(key);
	if (mcp_message_tool_call(&m, &call)) {
		CHECK(m.kind == MCP_MSG_REQUEST);
		CHECK(call.args == NULL ||
		      (call.args >= text && call.args + call.args_len <= text + size));
		CHECK(call.keys != MCP_KEYS_OK ||
		      (call.request_id != NULL && call.tool_call_id != NULL));
		CHECK(call.keys != MCP_KEYS_INVALID || call.why[0] != '\0');
		/* The forward's rewritten context: still one tools/call, in that context. */
		for (int k = 0; k < 2; k++) {
			struct mcp_tool_call again;

			if (!mcp_message_with_trace(&m, text, size, TRACEPARENT, k ? "a=1" : NULL,
						    &out))
				break;
			CHECK(!out.oom);
			CHECK(mcp_message_parse(out.data, out.len, &check) == LEDGER_OK);
			CHECK(mcp_message_tool_call(&check, &again));
			CHECK(again.traceparent != NULL &&
			      strcmp(again.traceparent, TRACEPARENT) == 0);
			CHECK(k ? again.tracestate != NULL && strcmp(again.tracestate, "a=1") == 0
				: again.tracestate == NULL);
			mcp_message_free(&check);
			ledger_buf_free(&out);
		}
	}
	(void)mcp_message_batch_has_tool_call(&m);
	(void)mcp_message_tools_each(&m, ignore_tool, &tools);
	if (mcp_message_response(&m, &r) && r.result != NULL) {
		mcp_message_replay(&out, m.id, r.result, r.result_len, r.is_error);
		CHECK(!out.oom);
		CHECK(mcp_message_parse(out.data, out.len, &check) == LEDGER_OK);
		CHECK(check.kind == MCP_MSG_RESPONSE);
		mcp_message_free(&check);
		ledger_buf_free(&out);
	}
	mcp_message_error(&out, m.id, -32015, "fuzz", "{\"code\":\"x\"}");
	CHECK(!out.oom && mcp_message_parse(out.data, out.len, &check) == LEDGER_OK);
	mcp_message_free(&check);
	ledger_buf_free(&out);
	mcp_message_free(&m);
	return 0;
}
