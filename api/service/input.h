/*
 * api/service/input.h: reading what a call sent, for the handlers' parse(): the
 * body as one JSON object of known fields, typed fields, query values and
 * list cursors. Each function that ends in _or_reply has replied 400 (or
 * 500) when it fails.
 */
#ifndef API_INPUT_H
#define API_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/service/request.h"
#include "ledger/common/err.h"
#include "ledger/common/json.h"

/**
 * Parses the body as a JSON object (an empty body counts as {}) and checks
 * that every key is in @p allowed (NULL-terminated).
 * @return the object, borrowed from req->doc, or NULL after replying
 */
const struct ledger_json_value *api_input_body_or_reply(struct api_request *req,
							const char *const *allowed);

/** An optional string of 1..@p max bytes; NULL when absent or null. */
LEDGER_MUSTCHECK enum ledger_err api_input_text_or_reply(struct api_request *req,
							 const struct ledger_json_value *obj,
							 const char *key, size_t max,
							 const char **out);

/** An optional id (1..128 of [A-Za-z0-9._~-], at least @p min_len). */
LEDGER_MUSTCHECK enum ledger_err api_input_id_or_reply(struct api_request *req,
						       const struct ledger_json_value *obj,
						       const char *key, size_t min_len,
						       const char **out);

/** An integer in [@p min, @p max]; @p def when absent (or required, if @p def < 0). */
LEDGER_MUSTCHECK enum ledger_err api_input_int_or_reply(struct api_request *req,
							const struct ledger_json_value *obj,
							const char *key, int64_t min, int64_t max,
							int64_t def, int64_t *out);

/** An optional fingerprint: 64 lowercase hex digits; NULL when absent or null. */
LEDGER_MUSTCHECK enum ledger_err api_input_sha256_or_reply(struct api_request *req,
							   const struct ledger_json_value *obj,
							   const char *key, const char **out);

/**
 * An optional JSON object of at most @p max bytes of text, without a NUL
 * in any string (jsonb cannot hold one); NULL when absent or null. The
 * value is borrowed from req->doc: its exact text is raw, raw_len.
 */
LEDGER_MUSTCHECK enum ledger_err api_input_object_or_reply(struct api_request *req,
							   const struct ledger_json_value *obj,
							   const char *key, size_t max,
							   const struct ledger_json_value **out);

/** An optional boolean, @p def when absent. */
LEDGER_MUSTCHECK enum ledger_err api_input_bool_or_reply(struct api_request *req,
							 const struct ledger_json_value *obj,
							 const char *key, bool def, bool *out);

/**
 * Allocates a handler's parsed input, zeroed, into req->input (freed with
 * the request). @return it, or NULL after replying 500.
 */
void *api_input_alloc_or_reply(struct api_request *req, size_t size);

/** The value of query key @p key, decoded; NULL if absent. Borrowed from @p req. */
const char *api_input_query(const struct api_request *req, const char *key);

/**
 * Cursors are opaque to clients: their text in base64url. Encodes @p n
 * bytes of @p raw into @p out (@p cap bytes, NUL-terminated).
 */
void api_input_cursor_encode(const char *raw, size_t n, char *out, size_t cap);

/** Decodes a cursor into @p out. @return its length, or -1 if malformed. */
int api_input_cursor_decode(const char *s, char *out, size_t cap);

#endif
