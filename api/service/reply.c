/*
 * api/service/reply.c: building replies. Every error, whatever its status, has the
 * one envelope {"error": {"code", "message", ...details}}; messages never
 * carry SQL or another tenant's data.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"
#include "api/service/reply.h"

static void reset(struct api_request *req, unsigned status)
{
	ledger_buf_free(&req->reply.body);
	req->reply.status = status;
	req->reply.retry_after_ms = 0;
	req->reply.replayed = false;
	req->reply.allow = NULL;
	req->reply.content_type = NULL;
	req->reply.headers = NULL;
	req->reply.error_code[0] = '\0';
	req->reply.outcome = NULL;
	req->reply.fencing_token = 0;
}

void api_reply_bytes(struct api_request *req, unsigned status, const char *content_type,
		     const void *bytes, size_t len)
{
	reset(req, status);
	ledger_buf_append(&req->reply.body, bytes, len);
	req->reply.content_type = content_type;
}

void api_reply_begin(struct api_request *req, struct ledger_jsonw *w, unsigned status)
{
	reset(req, status);
	ledger_jsonw_init(w, &req->reply.body);
}

void api_reply_status_member(struct api_request *req, struct ledger_jsonw *w, const char *status)
{
	ledger_jsonw_key(w, "status");
	ledger_jsonw_string(w, status);
	req->reply.outcome = status;
}

void api_reply_fencing_token_member(struct api_request *req, struct ledger_jsonw *w,
				    int64_t token)
{
	ledger_jsonw_key(w, "fencing_token");
	ledger_jsonw_int(w, token);
	req->reply.fencing_token = token;
}

void api_reply_error_begin(struct api_request *req, struct ledger_jsonw *w, unsigned status,
			   const char *code, const char *message)
{
	api_reply_begin(req, w, status);
	snprintf(req->reply.error_code, sizeof(req->reply.error_code), "%s", code);
	ledger_jsonw_object_begin(w);
	ledger_jsonw_key(w, "error");
	ledger_jsonw_object_begin(w);
	ledger_jsonw_key(w, "code");
	ledger_jsonw_string(w, code);
	ledger_jsonw_key(w, "message");
	ledger_jsonw_string(w, message);
}

void api_reply_error_end(struct api_request *req, struct ledger_jsonw *w)
{
	(void)req;
	ledger_jsonw_object_end(w);
	ledger_jsonw_object_end(w);
}

void api_reply_error(struct api_request *req, unsigned status, const char *code, const char *fmt,
		     ...)
{
	struct ledger_jsonw w;
	char message[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	api_reply_error_begin(req, &w, status, code, message);
	api_reply_error_end(req, &w);
}

void api_reply_invalid_field(struct api_request *req, const char *field, const char *fmt, ...)
{
	struct ledger_jsonw w;
	char message[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	api_reply_error_begin(req, &w, 400, "invalid_field", message);
	ledger_jsonw_key(&w, "field");
	ledger_jsonw_string(&w, field);
	api_reply_error_end(req, &w);
}

void api_reply_unavailable(struct api_request *req)
{
	struct ledger_jsonw w;
	int64_t ms = req->config->unavailable_retry_ms;

	api_reply_error_begin(req, &w, 503, "store_unavailable",
			      "the database is unreachable; retry later");
	ledger_jsonw_key(&w, "retry_after_ms");
	ledger_jsonw_int(&w, ms);
	api_reply_error_end(req, &w);
	req->reply.retry_after_ms = ms;
}

void api_reply_too_late(struct api_request *req)
{
	struct ledger_jsonw w;
	int64_t ms = req->config->unavailable_retry_ms;

	api_reply_error_begin(req, &w, 503, "store_unavailable",
			      "the database answered after the lease had run out; retry the "
			      "same call to learn how it stands");
	ledger_jsonw_key(&w, "retry_after_ms");
	ledger_jsonw_int(&w, ms);
	api_reply_error_end(req, &w);
	req->reply.retry_after_ms = ms;
}

int64_t api_reply_elapsed_ms(const struct ledger_store_result *res)
{
	struct timespec ts;
	int64_t now;

	if (res->began_ms == 0)
		return 0;
	/* The store's clock, monotonic ms; rounded up, so nothing is counted short. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (int64_t)ts.tv_sec * 1000 + (ts.tv_nsec + 999999) / 1000000;
	return now > res->began_ms ? now - res->began_ms : 0;
}

int64_t api_reply_time_left(const struct ledger_store_result *res, int64_t ms)
{
	int64_t left = ms - api_reply_elapsed_ms(res);

	return left > 0 ? left : 0;
}

void api_reply_store_error(struct api_request *req, enum ledger_err rc)
{
	switch (rc) {
	case LEDGER_ERR_UNAVAILABLE:
	case LEDGER_ERR_CONFLICT: /* contention that outlasted the retries */
		api_reply_unavailable(req);
		return;
	case LEDGER_ERR_NOMEM:
	case LEDGER_ERR_INTERNAL:
	case LEDGER_ERR_INVALID:
	case LEDGER_ERR_LIMIT:
	case LEDGER_OK:
		break;
	}
	api_reply_error(req, 500, "internal_error", "an internal error occurred; it was logged");
}
