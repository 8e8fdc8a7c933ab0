/*
 * ledger/common/json.h: a strict RFC 8259 JSON reader that keeps the byte span of
 * every value. ledgerd needs what general-purpose parsers drop: the exact
 * text of a value (results are stored and replayed byte for byte), numbers
 * of any size as text (fingerprints keep their exact digits),
 * refusal of duplicate object keys, and a hard bound on nesting depth.
 *
 * A parsed document owns all of its values; values borrow from it and from
 * the source text, which must outlive the document.
 */
#ifndef LEDGER_JSON_H
#define LEDGER_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/err.h"

enum ledger_json_type {
	LEDGER_JSON_NULL,
	LEDGER_JSON_FALSE,
	LEDGER_JSON_TRUE,
	LEDGER_JSON_NUMBER,
	LEDGER_JSON_STRING,
	LEDGER_JSON_ARRAY,
	LEDGER_JSON_OBJECT,
};

struct ledger_json_member;

struct ledger_json_value {
	enum ledger_json_type type;
	const char *raw; /* the value's exact text in the source (borrowed) */
	size_t raw_len;  /* its length in bytes */
	union {
		struct {
			char *s;    /* decoded UTF-8, NUL-terminated; may hold NUL */
			size_t len; /* decoded length in bytes */
		} str;
		struct {
			struct ledger_json_value *items; /* in document order */
			size_t count;
		} arr;
		struct {
			struct ledger_json_member *members; /* in document order */
			size_t count;
		} obj;
	} u; /* numbers have no decoded form: read them from raw */
};

struct ledger_json_member {
	char *key;      /* decoded UTF-8, NUL-terminated; may hold NUL */
	size_t key_len; /* decoded length in bytes */
	struct ledger_json_value value;
};

enum ledger_json_error_kind {
	LEDGER_JSON_ERR_SYNTAX,        /* not JSON (includes trailing bytes) */
	LEDGER_JSON_ERR_DUPLICATE_KEY, /* an object repeats a key */
	LEDGER_JSON_ERR_DEPTH,         /* nesting deeper than max_depth */
	LEDGER_JSON_ERR_UTF8,          /* invalid UTF-8 or a lone surrogate */
	LEDGER_JSON_ERR_NOMEM,
};

struct ledger_json_error {
	enum ledger_json_error_kind kind;
	size_t offset;    /* byte offset in the source where it was found */
	char message[96]; /* human text, e.g. "duplicate key \"a\"" (key cut) */
};

struct ledger_json_doc; /* opaque: owns the values of one parse */

/**
 * Parses exactly one JSON text (surrounding whitespace allowed) of @p len
 * bytes at @p text. Strings must be valid UTF-8 without raw control
 * characters; \u escapes must pair surrogates; objects must not repeat a
 * key (compared after decoding); arrays and objects nest at most
 * @p max_depth levels (the root container is level 1).
 *
 * @param text borrowed; must outlive the document (values point into it)
 * @param doc_out on LEDGER_OK, a new document; free with ledger_json_free()
 * @param err_out on failure, filled in (may be NULL)
 * @return LEDGER_OK, LEDGER_ERR_INVALID (see @p err_out) or
 *         LEDGER_ERR_NOMEM
 */
LEDGER_MUSTCHECK enum ledger_err ledger_json_parse(const char *text, size_t len, unsigned max_depth,
						   struct ledger_json_doc **doc_out,
						   struct ledger_json_error *err_out);

/** The root value; borrowed from @p doc. */
const struct ledger_json_value *ledger_json_root(const struct ledger_json_doc *doc);

/** Frees a document and every value in it. NULL-safe. */
void ledger_json_free(struct ledger_json_doc *doc);

/**
 * Looks up @p key (NUL-terminated, compared bytewise with the decoded key)
 * in the object @p obj.
 * @return the member's value, borrowed, or NULL if absent or @p obj is not
 *         an object.
 */
const struct ledger_json_value *ledger_json_get(const struct ledger_json_value *obj,
						const char *key);

#endif
