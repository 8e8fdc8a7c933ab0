/*
 * sdk/programs/ledger-mcp/intercept.h: what a tools/call becomes. A call that names its
 * ledger key is claimed in ledgerd before it reaches the server, and the
 * server's answer is recorded before it reaches the client; a call claimed
 * before gets the stored answer and never reaches the server. The
 * transports (stdio.c, http.c) only say how a message is sent to the
 * server and how its answer comes back.
 */
#ifndef MCP_INTERCEPT_H
#define MCP_INTERCEPT_H

#include <stdbool.h>
#include <stddef.h>

#include "ledger/common/buf.h"
#include "sdk/programs/ledger-mcp/message.h"
#include "sdk/programs/ledger-mcp/proxy.h"

/*
 * ledger-mcp's own JSON-RPC errors (docs/api.md, sdk/programs/ledger-mcp/README.md). Each
 * carries "data": {"code": <the name below or ledgerd's code>,
 * "idempotency_key", "request_id", "tool_call_id", "server_called": bool,
 * "action": <what to do>, "ledgerd": <ledgerd's error object, when it
 * answered one>}; result_not_kept adds the stored "outcome",
 * "result_bytes", "result_sha256" and "completed_at".
 */
enum mcp_error_code {
	MCP_ERR_IN_PROGRESS = -32010,     /* another holder still runs it past --wait */
	MCP_ERR_OUTCOME_UNKNOWN = -32011, /* a holder vanished mid-call: resolve it */
	MCP_ERR_ARGS_MISMATCH = -32012,   /* the key was claimed with other arguments */
	MCP_ERR_ATTEMPT_FENCED = -32013,  /* the inference attempt has no rights */
	MCP_ERR_RESULT_EXPIRED = -32014,  /* settled long ago, result removed by retention */
	MCP_ERR_REFUSED = -32015,         /* any other refusal of ledgerd: data.code says which */
	MCP_ERR_LEDGER_UNAVAILABLE = -32016, /* ledgerd could not be asked: nothing ran */
	MCP_ERR_KEY_REQUIRED = -32017,       /* --require-key, and the call names no key */
	MCP_ERR_INVALID_KEY = -32018,        /* the _meta keys are there but not ledgerd ids */
	MCP_ERR_LEFT_UNKNOWN = -32019,       /* the server was lost mid-call: outcome unknown */
	MCP_ERR_SERVER_UNREACHABLE = -32020, /* the server could not be reached: nothing ran */
	MCP_ERR_BATCH = -32021,              /* a batch that holds a tools/call */
	MCP_ERR_RESULT_NOT_KEPT = -32022,    /* it completed, its result too large to keep */
};

/* What to do with a message from the client. */
enum mcp_plan {
	MCP_PLAN_PASS,   /* forward it unchanged */
	MCP_PLAN_CLAIM,  /* a keyed tools/call: run it through mcp_intercept_run() */
	MCP_PLAN_REFUSE, /* answer it at once with the error put in the answer */
};

/**
 * Decides what @p m becomes: a tools/call naming both keys (and not a
 * read-only tool of a trusted server) is claimed; one naming them badly,
 * or none under --require-key, and a batch holding a tools/call, are
 * refused with their error appended to @p answer; everything else passes.
 * Thread-safe.
 */
enum mcp_plan mcp_intercept_plan(struct mcp_proxy *p, const struct mcp_message *m,
				 struct ledger_buf *answer);

/* What a transport's forward of one tools/call came to. */
enum mcp_sent {
	MCP_SENT_ANSWERED, /* the server answered: response holds its JSON-RPC response */
	MCP_SENT_REFUSED,  /* it was certainly not run: not delivered (connection refused)
	                      or refused before being read (an HTTP 4xx) */
	MCP_SENT_LOST,     /* sent, and no answer: the process died, the stream broke, the
	                      call outlived --call-timeout; it may have run */
};

struct mcp_forward {
	enum mcp_sent sent;
	char *response; /* ANSWERED: the server's message, exact bytes; malloc'd, taken */
	size_t len;
	char reason[200]; /* REFUSED, LOST: what happened, for the client and the log */
};

/* What is sent to the server for a claimed tools/call. */
struct mcp_send {
	const char *text; /* the message: the client's bytes, or those with the trace context
	                     of _meta rewritten; borrowed for the call */
	size_t len;
	const char *traceparent; /* when not NULL, the context changed to this one (the
	                            execute_tool span's): a transport that forwards the
	                            client's W3C headers sends these instead */
	const char *tracestate;  /* with it: its tracestate, or NULL for none */
};

/**
 * Sends @p send's message to the server and waits for its answer. Runs on
 * the calling thread, while ledgerd's claim is renewed on another.
 * @param out zeroed; fill it
 */
typedef void (*mcp_forward_fn)(void *ctx, const struct mcp_send *send, struct mcp_forward *out);

/* What a transport knows of a message besides its JSON. */
struct mcp_origin {
	const char *text; /* the message's exact bytes, which it borrows */
	size_t len;
	const char *traceparent; /* the request's W3C traceparent header (http), or NULL */
	const char *tracestate;  /* its tracestate header, or NULL */
};

/* Where the answer for the client came from. */
enum mcp_source {
	MCP_FROM_SERVER,  /* the server ran it: text is its response, as it sent it */
	MCP_FROM_PROXY,   /* a replay or an error ledger-mcp wrote */
	MCP_FROM_REFUSAL, /* the forward said REFUSED: text is an error, which a transport
	                     that holds the server's own refusal may show instead */
};

struct mcp_answer {
	enum mcp_source source;
	struct ledger_buf text; /* a JSON-RPC response; free with ledger_buf_free() */
};

/**
 * Claims the key of the tools/call @p m (mcp_intercept_plan() said
 * MCP_PLAN_CLAIM), calls @p fwd only when ledgerd grants the claim, and
 * records what the server answered: a result as succeeded (isError true:
 * failed), a JSON-RPC error that says the request was not run (-32700,
 * -32600, -32601, -32602) by releasing the key, anything else it cannot
 * judge by leaving the claim to run out into outcome_unknown. A result
 * over --max-result-bytes is recorded as its length and SHA-256, and the
 * client still gets it whole. Thread-safe: one call per thread, any
 * number at once.
 *
 * Traced (docs/tracing-sdk-c.md): the call's execute_tool span is a child
 * of params._meta.traceparent (or of @p origin's traceparent header when
 * _meta has none; malformed: a new trace), and the server gets _meta's
 * traceparent and tracestate rewritten to that span's context. With
 * tracing off the client's bytes go as they came. A replay is answered as
 * ever.
 * @param m borrowed for the call
 * @param origin its bytes and headers, borrowed for the call
 * @param out filled (zero it first); the caller frees out->text
 * @return LEDGER_OK, or LEDGER_ERR_NOMEM with nothing to answer
 */
LEDGER_MUSTCHECK enum ledger_err mcp_intercept_run(struct mcp_proxy *p, const struct mcp_message *m,
						   const struct mcp_origin *origin,
						   mcp_forward_fn fwd, void *ctx,
						   struct mcp_answer *out);

/**
 * With --trust-annotations, learns the hints of the tools a tools/list
 * answer @p m lists (any other message is ignored). Thread-safe.
 */
void mcp_intercept_note_tools(struct mcp_proxy *p, const struct mcp_message *m);

/** Frees the hints of @p p. */
void mcp_intercept_free_hints(struct mcp_proxy *p);

#endif
