/*
 * api/reply.h: building replies. Each function sets req->reply, and the
 * last one wins. Every error, whatever its status, has one envelope:
 * {"error": {"code", "message", ...details}}.
 */
#ifndef API_REPLY_H
#define API_REPLY_H

#include <stdint.h>

#include "api/request.h"
#include "ledger/common/err.h"
#include "ledger/common/jsonw.h"

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

#endif
