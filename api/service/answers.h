/*
 * api/service/answers.h: kept answers (API 1.1): reading the answer object
 * that finish and failover take, and GET /v1/requests/{rid}/answer.
 */
#ifndef API_ANSWERS_H
#define API_ANSWERS_H

#include <stdbool.h>

#include "api/service/request.h"
#include "ledger/common/json.h"
#include "ledger/core/answer.h"

extern const struct api_handler api_answers_get;

/**
 * Reads the optional answer object @p key of @p obj: {"status",
 * "content_type", "body_b64"} (the bytes, decoded strictly to count and
 * hash them), or a client's own reduced form {"status", "content_type",
 * "kept": false, "bytes", "sha256"}; then bounds it by
 * --max-kept-answer-bytes (ledger_answer_bound()). Replies 400
 * invalid_field naming @p key for any other shape.
 * @param out filled when *@p given; its strings borrow from req->doc
 * @param given false when the field is absent or null
 */
LEDGER_MUSTCHECK enum ledger_err api_answers_parse_or_reply(struct api_request *req,
							    const struct ledger_json_value *obj,
							    const char *key,
							    struct ledger_answer *out, bool *given);

#endif
