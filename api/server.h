/*
 * api/server.h: the HTTP side of ledgerd, shared by the api/ files. A
 * request lives in one struct api_request from its first byte to its
 * completion; a handler is split in two: prepare() runs on the HTTP thread
 * (parse, validate: no database), execute() on a store worker, which then
 * resumes the suspended connection with the response it built.
 */
#ifndef API_SERVER_H
#define API_SERVER_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/buf.h"
#include "api/settings.h"
#include "ledger/common/err.h"
#include "ledger/common/json.h"
#include "ledger/core/policy.h"
#include "ledger/common/jsonw.h"
#include "ledger/store/store.h"
#include "ledger/core/types.h"

struct api_request;

struct api_handler {
	/*
	 * Parses and validates the body and query on the HTTP thread. Returns
	 * LEDGER_OK to go on to execute(), or anything else after replying.
	 */
	enum ledger_err (*prepare)(struct api_request *req);
	/* Runs on a store worker, after authentication; must reply. */
	void (*execute)(struct api_request *req, struct ledger_store_conn *conn);
	/*
	 * Optional, to share a transaction with other calls: fills @p op with
	 * the call's one-statement fast path (false: the call runs alone) ...
	 */
	bool (*offer)(struct api_request *req, struct ledger_batch_op *op);
	/* ... and replies from what the batch answered (when op->done). */
	void (*answer)(struct api_request *req, const struct ledger_call_result *res);
	/*
	 * Optional: answers from memory on the HTTP thread, once the token is
	 * known from its cache and its role may call the route. Returns true
	 * after replying; false sends the call to a worker as usual.
	 */
	bool (*answer_now)(struct api_request *req);
};

#include "api/routes.h"

/* Header names a reply may carry beyond Content-Type. */
struct api_reply {
	unsigned status;          /* 0: no reply yet */
	struct ledger_buf body;   /* JSON */
	int64_t retry_after_ms;   /* > 0: a Retry-After header (seconds, rounded up) */
	bool replayed;            /* Idempotent-Replayed: true */
	const char *allow;        /* an Allow header (static string) */
	const char *content_type; /* NULL: application/json */
};

struct api_server;

struct api_request {
	struct api_server *server;
	struct MHD_Connection *conn;
	const struct api_route *route; /* NULL: answered before routing */
	char *params[API_MAX_PARAMS];  /* decoded path parameters, in pattern order */
	char *query_keys[API_MAX_QUERY], *query_values[API_MAX_QUERY];
	unsigned nquery;
	struct ledger_buf body; /* the request body as received */
	bool body_too_large;
	bool has_token;     /* an Authorization: Bearer header was given */
	bool authenticated; /* tenant and role are known */
	unsigned char token_sha256[32];
	char tenant[LEDGER_ID_MAX + 1]; /* after authentication */
	enum ledger_role role;
	struct ledger_json_doc *doc; /* the parsed body, when prepare() parsed one */
	void *input;                 /* the handler's parsed input; freed with free() */
	struct ledger_job job;
	bool suspended;
	struct api_reply reply;
	int64_t started_ns; /* monotonic, for latency */
};

/* --- replies (api/reply.c): each sets req->reply; the last one wins --- */

/** Replies @p status with the error envelope {"error": {"code", "message"}}. */
void api_reply_error(struct api_request *req, unsigned status, const char *code, const char *fmt,
		     ...) __attribute__((format(printf, 4, 5)));

/**
 * Starts an error envelope and leaves the "error" object open so the caller
 * can add details with @p w; finish with api_reply_error_end().
 */
void api_reply_error_begin(struct api_request *req, struct ledger_jsonw *w, unsigned status,
			   const char *code, const char *message);
void api_reply_error_end(struct api_request *req, struct ledger_jsonw *w);

/** 400 invalid_field naming @p field. */
void api_reply_invalid_field(struct api_request *req, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/** 503 store_unavailable with the configured back-off. */
void api_reply_unavailable(struct api_request *req);

/** Replies for a store error: 503 for UNAVAILABLE or CONFLICT, else 500. */
void api_reply_store_error(struct api_request *req, enum ledger_err rc);

/** Starts a success body: the caller writes one JSON object with @p w. */
void api_reply_begin(struct api_request *req, struct ledger_jsonw *w, unsigned status);

/* --- body helpers (api/reply.c) for prepare(): each replies 400 itself --- */

/**
 * Parses the body as a JSON object (an empty body counts as {}) and checks
 * that every key is in @p allowed (NULL-terminated).
 * @return the object, borrowed from req->doc, or NULL after replying
 */
const struct ledger_json_value *api_body_object_or_reply(struct api_request *req,
							 const char *const *allowed);

/** An optional string of 1..@p max bytes; NULL when absent or null. */
LEDGER_MUSTCHECK enum ledger_err api_field_text_or_reply(struct api_request *req,
							 const struct ledger_json_value *obj,
							 const char *key, size_t max,
							 const char **out);

/** An optional id (1..128 of [A-Za-z0-9._~-], at least @p min_len). */
LEDGER_MUSTCHECK enum ledger_err api_field_id_or_reply(struct api_request *req,
						       const struct ledger_json_value *obj,
						       const char *key, size_t min_len,
						       const char **out);

/** An integer in [@p min, @p max]; @p def when absent (or required, if @p def < 0). */
LEDGER_MUSTCHECK enum ledger_err api_field_int_or_reply(struct api_request *req,
							const struct ledger_json_value *obj,
							const char *key, int64_t min, int64_t max,
							int64_t def, int64_t *out);

/** An optional boolean, @p def when absent. */
LEDGER_MUSTCHECK enum ledger_err api_field_bool_or_reply(struct api_request *req,
							 const struct ledger_json_value *obj,
							 const char *key, bool def, bool *out);

/**
 * Allocates a handler's parsed input, zeroed, into req->input (freed with
 * the request). @return it, or NULL after replying 500.
 */
void *api_input_or_reply(struct api_request *req, size_t size);

/**
 * Cursors are opaque to clients: their text in base64url. Encodes @p n
 * bytes of @p raw into @p out (@p cap bytes, NUL-terminated).
 */
void api_cursor_encode(const char *raw, size_t n, char *out, size_t cap);

/** Decodes a cursor into @p out. @return its length, or -1 if malformed. */
int api_cursor_decode(const char *s, char *out, size_t cap);

/** Writes a tool call as GET answers it; without args and result unless @p payload. */
void api_write_call(struct ledger_jsonw *w, const char *rid, const char *cid,
		    const struct ledger_call *call, bool payload);

/** The value of query key @p key, decoded; NULL if absent. */
const char *api_query(const struct api_request *req, const char *key);

/* --- the server (api/server.c) --- */

/** The settings the handlers read (lease bounds, back-off). */
const struct api_settings *api_server_settings(const struct api_request *req);

/** The failover policy in force. */
const struct ledger_policy *api_server_policy(const struct api_request *req);

/** The store the server hands jobs to. */
struct ledger_store *api_server_store(const struct api_request *req);

/** HTTP requests being served right now. */
long api_server_in_flight(const struct api_request *req);

/**
 * Opens the listening socket @p spec names ("HOST:PORT", "[V6]:PORT" or
 * "unix:/path"), before anything else starts.
 * @param bound receives the address actually bound (the port of ":0")
 * @param err receives one line on failure
 * @return the socket; -1 if it cannot be opened; -2 if @p spec is malformed
 */
int api_server_listen(const char *spec, char *bound, size_t boundlen, char *err, size_t errlen);

/**
 * Serves on the socket @p fd (owned from now on) with @p store until
 * SIGTERM or SIGINT, then drains the calls in flight.
 * @return 0 on a clean stop, 1 if it could not start
 */
int api_server_run(const struct api_settings *cfg, const struct ledger_policy *policy,
		   struct ledger_store *store, int fd, const char *bound);

#endif
