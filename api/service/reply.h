/*
 * api/service/reply.h: building replies. Each function sets req->reply, and the
 * last one wins. Every error, whatever its status, has one envelope:
 * {"error": {"code", "message", ...details}}.
 */
#ifndef API_REPLY_H
#define API_REPLY_H

#include <stdint.h>

#include "api/service/request.h"
#include "ledger/common/err.h"
#include "ledger/common/jsonw.h"
#include "ledger/store/job.h"

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

/**
 * 503 store_unavailable for a write that committed but whose answer came
 * too late to be of use: the lease it granted ran out before it could be
 * sent. A retry of the same call is told how things stand.
 */
void api_reply_too_late(struct api_request *req);

/** Milliseconds since @p res's operation began (0 for a result never run). */
int64_t api_reply_elapsed_ms(const struct ledger_store_result *res);

/**
 * What is left, now, of @p ms (a lease as the database measured it during
 * @p res's operation), never below 0: at most what is really left.
 */
int64_t api_reply_time_left(const struct ledger_store_result *res, int64_t ms);

/** Replies for a store error: 503 for UNAVAILABLE or CONFLICT, else 500. */
void api_reply_store_error(struct api_request *req, enum ledger_err rc);

/** Replies @p status with @p len bytes of @p content_type (a static string). */
void api_reply_bytes(struct api_request *req, unsigned status, const char *content_type,
		     const void *bytes, size_t len);

/** Starts a success body: the caller writes one JSON object with @p w. */
void api_reply_begin(struct api_request *req, struct ledger_jsonw *w, unsigned status);

/**
 * Writes a success body's "status" member, which the call's span records
 * as its ledger.outcome. @p status: a static string ("claimed").
 */
void api_reply_status_member(struct api_request *req, struct ledger_jsonw *w, const char *status);

/** Writes a success body's "fencing_token" member, the span's ledger.fencing_token. */
void api_reply_fencing_token_member(struct api_request *req, struct ledger_jsonw *w,
				    int64_t token);

#endif
