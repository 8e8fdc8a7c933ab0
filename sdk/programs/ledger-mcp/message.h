/*
 * sdk/programs/ledger-mcp/message.h: what ledger-mcp reads of a JSON-RPC message, and the
 * answers it writes itself. Messages are read with ledgerd's own JSON
 * reader, which keeps every value's exact bytes: the proxy forwards the
 * client's bytes and records and replays the server's, never a
 * re-serialised copy.
 */
#ifndef MCP_MESSAGE_H
#define MCP_MESSAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "ledger/common/buf.h"
#include "ledger/common/err.h"
#include "ledger/common/json.h"

/* The _meta keys of a tools/call that name its ledger key (docs/api.md). */
#define MCP_META_REQUEST_ID "io.ledgerd/request_id"
#define MCP_META_TOOL_CALL_ID "io.ledgerd/tool_call_id"
#define MCP_META_ATTEMPT_ID "io.ledgerd/attempt_id"
#define MCP_META_REPLAYED "io.ledgerd/replayed"
/* The _meta keys of W3C Trace Context, as MCP's tracing convention names them. */
#define MCP_META_TRACEPARENT "traceparent"
#define MCP_META_TRACESTATE "tracestate"

enum mcp_kind {
	MCP_MSG_REQUEST,      /* "method" and "id" */
	MCP_MSG_NOTIFICATION, /* "method", no "id" */
	MCP_MSG_RESPONSE,     /* "id" and "result" or "error", no "method" */
	MCP_MSG_BATCH,        /* a JSON array (protocol 2025-03-26) */
	MCP_MSG_OTHER,        /* JSON, but none of the above: forwarded, never acted on */
};

struct mcp_message {
	enum mcp_kind kind;
	struct ledger_json_doc *doc;          /* owned */
	const struct ledger_json_value *root; /* borrowed from doc */
	const struct ledger_json_value *id;   /* requests and responses; borrowed; else NULL */
	const char *method;                   /* requests, notifications; borrowed; else NULL */
};

/**
 * Reads one message of @p len bytes at @p text (borrowed: it must outlive
 * @p out, whose values point into it).
 * @return LEDGER_OK with @p out filled (free with mcp_message_free()),
 *         LEDGER_ERR_INVALID when it is not JSON (out zeroed: forward it
 *         as it is, the server answers it) or LEDGER_ERR_NOMEM
 */
LEDGER_MUSTCHECK enum ledger_err mcp_message_parse(const char *text, size_t len,
						   struct mcp_message *out);

/** Frees what @p m owns and zeroes it. NULL-safe. */
void mcp_message_free(struct mcp_message *m);

/**
 * A key that is equal for two ids exactly when JSON-RPC says they are the
 * same id: "s" and the decoded string's bytes in hex, or "n" and the
 * number's text.
 * @return a new string (free with free()), or NULL for no id or no memory
 */
char *mcp_message_id_key(const struct ledger_json_value *id);

/* Whether a tools/call names its ledger key. */
enum mcp_keys {
	MCP_KEYS_NONE,    /* neither key */
	MCP_KEYS_OK,      /* both, valid ledgerd ids (and attempt_id, if given) */
	MCP_KEYS_INVALID, /* one without the other, not a string, or not an id: see why */
};

/* A tools/call request's parts; every pointer borrowed from the message. */
struct mcp_tool_call {
	const char *name; /* params.name, decoded; NULL if absent or not a string */
	const char *args; /* params.arguments, its exact text; NULL if absent */
	size_t args_len;
	const char *request_id;   /* params._meta["io.ledgerd/request_id"], decoded */
	const char *tool_call_id; /* params._meta["io.ledgerd/tool_call_id"], decoded */
	const char *attempt_id;   /* params._meta["io.ledgerd/attempt_id"], decoded, or NULL */
	const char *traceparent;  /* params._meta.traceparent, decoded, or NULL (absent or no
	                             string); read, not checked: a malformed one is ignored */
	const char *tracestate;   /* params._meta.tracestate, the same */
	enum mcp_keys keys;
	char why[160]; /* MCP_KEYS_INVALID: what is wrong, for the client */
};

/**
 * Reads a tools/call request's name, arguments and keys.
 * @return true when @p m is a "tools/call" request, with @p out filled
 */
bool mcp_message_tool_call(const struct mcp_message *m, struct mcp_tool_call *out);

/**
 * Writes the request @p m, whose exact text is the @p len bytes at @p text,
 * to @p out with params._meta's "traceparent" set to @p traceparent and
 * "tracestate" to @p tracestate (NULL: removed): a value already there is
 * replaced in place, a member not there is put first in _meta. Every other
 * byte is the client's. Check out->oom.
 * @return false (nothing written) when @p m has no params._meta object
 */
bool mcp_message_with_trace(const struct mcp_message *m, const char *text, size_t len,
			    const char *traceparent, const char *tracestate,
			    struct ledger_buf *out);

/** Whether the batch @p m holds a "tools/call" request. */
bool mcp_message_batch_has_tool_call(const struct mcp_message *m);

/* What a server's response to a tools/call says. */
struct mcp_response {
	const char *result; /* "result", its exact text; NULL for a JSON-RPC error */
	size_t result_len;
	bool is_error;     /* result.isError is true: the tool failed */
	const char *error; /* "error", its exact text; NULL for a result */
	size_t error_len;
	long error_code; /* error.code, 0 if none or not an integer */
};

/** Reads the response @p m. @return false when it is neither a result nor an error. */
bool mcp_message_response(const struct mcp_message *m, struct mcp_response *out);

/**
 * Appends {"jsonrpc":"2.0","id":ID,"error":{"code":CODE,"message":MESSAGE,
 * "data":DATA}} to @p out: @p id's exact text (null when NULL), @p data_json
 * JSON text or NULL for no "data". Check out->oom.
 */
void mcp_message_error(struct ledger_buf *out, const struct ledger_json_value *id, int code,
		       const char *message, const char *data_json);

/**
 * Appends the replay of a stored result to @p out: {"jsonrpc":"2.0","id":ID,
 * "result":R} where R is @p result byte for byte with
 * "io.ledgerd/replayed": true added to its "_meta" (a "_meta" made when it
 * has none). A result that is not an object (one a person resolved with
 * `ledgerctl resolve --result`) is replayed as a text content holding its
 * JSON, isError when @p failed. Check out->oom.
 */
void mcp_message_replay(struct ledger_buf *out, const struct ledger_json_value *id,
			const char *result, size_t len, bool failed);

/* One tool of a tools/list result, for mcp_message_tools_each(). */
typedef void (*mcp_tool_fn)(void *ctx, const char *name, bool read_only, bool idempotent);

/**
 * Calls @p fn for every tool of @p m when it is a response whose result
 * holds a "tools" array (a tools/list answer): its name and its
 * readOnlyHint and idempotentHint (true only when they are JSON true).
 * @return whether @p m was such a response
 */
bool mcp_message_tools_each(const struct mcp_message *m, mcp_tool_fn fn, void *ctx);

#endif
