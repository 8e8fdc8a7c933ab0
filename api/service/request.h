/*
 * api/service/request.h: one HTTP call as the api/ files see it. A call lives in
 * one struct api_request from its first byte to its completion; the
 * driver in api/service/server.c walks it through its stages, and a handler
 * supplies two callbacks: parse() turns the body into the store operation
 * it asks for (req->job.op), answer() turns the store's result into the
 * reply.
 */
#ifndef API_REQUEST_H
#define API_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/service/config.h"
#include "api/wire/http.h"
#include "api/wire/offload.h"
#include "ledger/common/buf.h"
#include "ledger/common/err.h"
#include "ledger/common/json.h"
#include "ledger/common/log.h"
#include "ledger/core/policy.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"
#include "ledger/store/job.h"

struct api_request;
struct api_route;
struct api_server;
struct ledger_store;
struct wire_net;

#define API_MAX_PARAMS 3 /* path parameters of a route */
#define API_MAX_QUERY 5  /* query parameters a call may give */

struct api_handler {
	/*
	 * For an authenticated caller with the right role, on the HTTP thread
	 * or, for a large body, an offload thread: parses the body and the
	 * query, and names the store operation in
	 * req->job.op (kind and input; the key is filled from the path before).
	 * An op of kind LEDGER_STORE_NONE means parse() replied itself.
	 * @return LEDGER_OK to go on, anything else after replying
	 */
	enum ledger_err (*parse)(struct api_request *req);
	/*
	 * On the HTTP thread: replies from what the store answered, @p res->rc
	 * LEDGER_OK (the driver answers store errors: 503 or 500), unless
	 * answers_errors.
	 */
	void (*answer)(struct api_request *req, const struct ledger_store_result *res);
	bool answers_errors; /* answer() replies for store errors too */
	bool takes_answer;   /* its body may carry a kept answer: larger than --max-body */
};

/* What a reply carries beyond its JSON body. */
struct api_reply {
	unsigned status;          /* 0: no reply yet */
	struct ledger_buf body;   /* JSON */
	int64_t retry_after_ms;   /* > 0: a Retry-After header (seconds, rounded up) */
	bool replayed;            /* Idempotent-Replayed: true */
	const char *allow;        /* an Allow header (static string) */
	const char *content_type; /* NULL: application/json */
	const char *headers;      /* more header lines, each ending "\r\n" (a static string) */
	char error_code[32];      /* the error envelope's code; "": none (for the call's span) */
	const char *outcome;      /* the success body's "status" (a static string), or NULL */
	int64_t fencing_token;    /* > 0: the success body's "fencing_token" */
};

struct ledger_span;

/* A call's trace (api/service/tracing.c); all zero while tracing is off. */
struct api_call_trace {
	struct ledger_span *span; /* the call's SERVER span; NULL: not traced */
	char trace_id[33];        /* its ids in hex, which the call's log lines carry */
	char span_id[17];
	const char *method; /* the HTTP conventions' name of its method (static); NULL: unknown */
	char *tracestate;   /* the caller's, for the spans under the call's; NULL: none; owned */
};

/* Where a call is in its life (api/service/server.c, drive()). */
enum api_stage {
	API_STAGE_HEAD,           /* routed from its head; nothing of its body read */
	API_STAGE_AUTHENTICATING, /* its token is being looked up by a worker */
	API_STAGE_BODY,           /* authenticated; its body is arriving */
	API_STAGE_PARSING,        /* its large body is being parsed on an offload thread */
	API_STAGE_STORING,        /* its operation is queued or running on a worker */
	API_STAGE_ANSWERED,       /* its reply is ready */
};

struct wire_conn;

/* The listeners a call can arrive on. */
enum {
	API_LISTENER_API, /* --listen */
	API_LISTENER_OPS, /* --ops-listen: /healthz, /readyz and /metrics only */
};

struct api_request {
	struct api_server *server;          /* the driver's (api/service/server.c) */
	const struct api_config *config;    /* borrowed: the service's */
	struct ledger_store *store;         /* borrowed: where operations go */
	struct wire_net *net;               /* borrowed: the connections it serves */
	const struct ledger_policy *policy;  /* borrowed: the failover policy in force */
	struct wire_conn *conn;
	const struct wire_http_head *head; /* valid for the call's life */
	unsigned listener;                /* API_LISTENER_API or API_LISTENER_OPS */
	enum api_stage stage;
	const struct api_route *route; /* NULL: answered before routing */
	char *params[API_MAX_PARAMS];  /* decoded path parameters, in pattern order */
	char *query_keys[API_MAX_QUERY], *query_values[API_MAX_QUERY];
	unsigned nquery;
	struct ledger_buf body; /* the request body as received */
	bool has_token;         /* an Authorization: Bearer header was given */
	bool authenticated;     /* tenant and role are known */
	unsigned char token_sha256[32];
	char tenant[LEDGER_ID_MAX + 1]; /* after authentication */
	enum ledger_role role;
	struct ledger_json_doc *doc;      /* the parsed body, when parse() parsed one */
	void *input;                      /* the handler's parsed input; freed with free() */
	struct ledger_job job;            /* the store operation, its ids and its result */
	struct wire_offload_job parse_job; /* parse(), when the body is large */
	struct api_reply reply;
	int64_t started_ns; /* monotonic, for latency */
	struct api_call_trace trace;
};

#endif
