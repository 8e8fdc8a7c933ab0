/*
 * api/service/answers.c: kept answers (API 1.1). finish and failover carry
 * the answer a request's client was sent; it is read here, counted and
 * hashed, and kept whole or, past --max-kept-answer-bytes, as its length
 * and SHA-256. GET /v1/requests/{rid}/answer gives it back to a router (a
 * gateway replaying a key); reviewers never see it.
 */
#include "api/service/answers.h"

#include <stdlib.h>
#include <string.h>

#include "api/service/reply.h"
#include "ledger/common/base64.h"
#include "ledger/common/json_number.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/sha256.h"

#define CONTENT_TYPE_MAX 256 /* bytes of an answer's content_type */
#define SHAPES                                                                                     \
	"{\"status\", \"content_type\", \"body_b64\"} or {\"status\", \"content_type\", "          \
	"\"kept\": false, \"bytes\", \"sha256\"}"

/* True when @p obj has exactly the keys of @p keys (NULL-terminated). */
static bool has_exactly(const struct ledger_json_value *obj, const char *const *keys)
{
	size_t n = 0;

	for (; keys[n] != NULL; n++) {
		if (ledger_json_get(obj, keys[n]) == NULL)
			return false;
	}
	return obj->u.obj.count == n;
}

static bool is_lower_hex(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

/* The bytes of body_b64, decoded strictly: their count and SHA-256 in @p out. */
static enum ledger_err hash_body_or_reply(struct api_request *req, const char *key,
					  const struct ledger_json_value *b64,
					  struct ledger_answer *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t want = ledger_base64_decoded_len(b64->u.str.s, b64->u.str.len), n;
	unsigned char digest[32];
	unsigned char *bytes = NULL;
	enum ledger_err rc = LEDGER_OK;

	if (want == (size_t)-1) {
		api_reply_invalid_field(req, key,
					"body_b64 must be base64 with padding (RFC 4648)");
		return LEDGER_ERR_INVALID;
	}
	bytes = malloc(want + 1);
	if (bytes == NULL) {
		api_reply_error(req, 500, "internal_error", "out of memory");
		return LEDGER_ERR_NOMEM;
	}
	n = ledger_base64_decode(b64->u.str.s, b64->u.str.len, bytes);
	if (n == (size_t)-1) {
		api_reply_invalid_field(req, key,
					"body_b64 must be base64 with padding (RFC 4648)");
		rc = LEDGER_ERR_INVALID;
		goto out;
	}
	if (!ledger_sha256(bytes, n, digest)) {
		api_reply_error(req, 500, "internal_error", "out of memory");
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	for (size_t i = 0; i < sizeof(digest); i++) {
		out->sha256[2 * i] = hex[digest[i] >> 4];
		out->sha256[2 * i + 1] = hex[digest[i] & 15];
	}
	out->sha256[LEDGER_SHA256_HEX] = '\0';
	out->bytes = (int64_t)n;
	out->kept = true;
	out->body_b64 = b64->u.str.s;
out:
	free(bytes);
	return rc;
}

/* The reduced form a client with a smaller bound of its own sends. */
static enum ledger_err reduced_or_reply(struct api_request *req, const char *key,
					const struct ledger_json_value *a,
					struct ledger_answer *out)
{
	const struct ledger_json_value *kept = ledger_json_get(a, "kept");
	const struct ledger_json_value *bytes = ledger_json_get(a, "bytes");
	const struct ledger_json_value *sha = ledger_json_get(a, "sha256");
	uint64_t n = 0;

	if (kept->type != LEDGER_JSON_FALSE) {
		api_reply_invalid_field(req, key, "kept must be false, with bytes and sha256");
		return LEDGER_ERR_INVALID;
	}
	if (bytes->type != LEDGER_JSON_NUMBER ||
	    ledger_json_number_uint(bytes, LEDGER_MAX_SAFE_INT, &n) != LEDGER_OK) {
		api_reply_invalid_field(req, key, "bytes must be an integer from 0 to 2^53-1");
		return LEDGER_ERR_INVALID;
	}
	if (sha->type != LEDGER_JSON_STRING || sha->u.str.len != LEDGER_SHA256_HEX ||
	    !is_lower_hex(sha->u.str.s, sha->u.str.len)) {
		api_reply_invalid_field(req, key, "sha256 must be 64 lowercase hex digits");
		return LEDGER_ERR_INVALID;
	}
	out->kept = false;
	out->bytes = (int64_t)n;
	memcpy(out->sha256, sha->u.str.s, LEDGER_SHA256_HEX + 1);
	return LEDGER_OK;
}

enum ledger_err api_answers_parse_or_reply(struct api_request *req,
					   const struct ledger_json_value *obj, const char *key,
					   struct ledger_answer *out, bool *given)
{
	static const char *const whole[] = {"status", "content_type", "body_b64", NULL};
	static const char *const reduced[] = {"status", "content_type", "kept",
					      "bytes",  "sha256",       NULL};
	const struct ledger_json_value *a = ledger_json_get(obj, key), *status, *type;
	uint64_t code = 0;
	enum ledger_err rc;

	*given = false;
	memset(out, 0, sizeof(*out));
	if (a == NULL || a->type == LEDGER_JSON_NULL)
		return LEDGER_OK;
	if (a->type != LEDGER_JSON_OBJECT || (!has_exactly(a, whole) && !has_exactly(a, reduced))) {
		api_reply_invalid_field(req, key, "must be " SHAPES);
		return LEDGER_ERR_INVALID;
	}
	status = ledger_json_get(a, "status");
	type = ledger_json_get(a, "content_type");
	if (status->type != LEDGER_JSON_NUMBER ||
	    ledger_json_number_uint(status, LEDGER_ANSWER_STATUS_MAX, &code) != LEDGER_OK ||
	    code < LEDGER_ANSWER_STATUS_MIN) {
		api_reply_invalid_field(req, key, "status must be an integer from 100 to 599");
		return LEDGER_ERR_INVALID;
	}
	if (type->type != LEDGER_JSON_STRING || type->u.str.len > CONTENT_TYPE_MAX ||
	    strlen(type->u.str.s) != type->u.str.len) {
		api_reply_invalid_field(
			req, key, "content_type must be text of at most 256 bytes, without NUL");
		return LEDGER_ERR_INVALID;
	}
	out->status = (int64_t)code;
	out->content_type = type->u.str.s;
	if (ledger_json_get(a, "kept") != NULL) {
		rc = reduced_or_reply(req, key, a, out);
	} else {
		const struct ledger_json_value *b64 = ledger_json_get(a, "body_b64");

		if (b64->type != LEDGER_JSON_STRING) {
			api_reply_invalid_field(req, key,
						"body_b64 must be base64 with padding (RFC 4648)");
			return LEDGER_ERR_INVALID;
		}
		rc = hash_body_or_reply(req, key, b64, out);
	}
	if (rc != LEDGER_OK)
		return rc;
	ledger_answer_bound(out, req->config->max_kept_answer_bytes);
	*given = true;
	return LEDGER_OK;
}

/* --- GET /v1/requests/{rid}/answer --- */

static enum ledger_err get_parse(struct api_request *req)
{
	req->job.op.kind = LEDGER_STORE_ANSWER_GET;
	return LEDGER_OK;
}

static void get_answer(struct api_request *req, const struct ledger_store_result *res)
{
	struct ledger_jsonw w;

	if (!res->u.answer.found) {
		api_reply_error(req, 404, "answer_not_found", "no answer is kept for this request");
		return;
	}
	api_reply_begin(req, &w, 200);
	ledger_answer_render(&w, &res->u.answer.answer);
}

const struct api_handler api_answers_get = {.parse = get_parse, .answer = get_answer};
