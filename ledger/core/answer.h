/*
 * ledger/core/answer.h: the answer a request's client was sent, kept when
 * the request ends (API 1.1) so that a retry of the same logical request,
 * through any gateway of a pool, is answered with the same bytes. Past a
 * bound only the answer's length and SHA-256 are kept: enough to say that
 * an answer existed, and which.
 */
#ifndef LEDGER_ANSWER_H
#define LEDGER_ANSWER_H

#include <stdbool.h>
#include <stdint.h>

#include "ledger/common/jsonw.h"
#include "ledger/core/id.h"

#define LEDGER_ANSWER_STATUS_MIN 100
#define LEDGER_ANSWER_STATUS_MAX 599

/* An answer as a finish or a failover gives it, or as it was kept. */
struct ledger_answer {
	int64_t status;           /* its HTTP status */
	const char *content_type; /* its Content-Type; borrowed */
	bool kept;                /* its bytes are kept, in body_b64 */
	const char *body_b64;     /* kept: the bytes in standard base64; borrowed; else NULL */
	int64_t bytes;            /* how many bytes it has */
	char sha256[LEDGER_SHA256_HEX + 1]; /* of its bytes, lowercase hex */
};

/**
 * Keeps @p a whole only within @p max_bytes: past it, only its status,
 * content type, length and SHA-256 (kept false, body_b64 NULL). Pure.
 */
void ledger_answer_bound(struct ledger_answer *a, int64_t max_bytes);

/**
 * Writes @p a as GET /v1/requests/{rid}/answer gives it: {"kept": true,
 * "status", "content_type", "body_b64"}, or {"kept": false, "status",
 * "content_type", "bytes", "sha256"}.
 */
void ledger_answer_render(struct ledger_jsonw *w, const struct ledger_answer *a);

#endif
