/*
 * ledger/common/jsonw.h: a small streaming JSON writer over a ledger_buf. It
 * places commas and colons itself and can splice a value's exact text
 * (a stored result) without re-serialising it.
 */
#ifndef LEDGER_JSONW_H
#define LEDGER_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/buf.h"

#define LEDGER_JSONW_MAX_DEPTH 32

struct ledger_jsonw {
	struct ledger_buf *out;                 /* borrowed */
	unsigned depth;                         /* open containers */
	bool after_key;                         /* a key was written, its value is next */
	bool has_items[LEDGER_JSONW_MAX_DEPTH]; /* per level: a comma is needed */
};

/** Starts writing into @p out (borrowed for the writer's lifetime). */
void ledger_jsonw_init(struct ledger_jsonw *w, struct ledger_buf *out);

void ledger_jsonw_object_begin(struct ledger_jsonw *w);
void ledger_jsonw_object_end(struct ledger_jsonw *w);
void ledger_jsonw_array_begin(struct ledger_jsonw *w);
void ledger_jsonw_array_end(struct ledger_jsonw *w);

/** Writes an object key (NUL-terminated); the next call writes its value. */
void ledger_jsonw_key(struct ledger_jsonw *w, const char *key);

/** Writes a string of @p len bytes of UTF-8 (may contain NUL). */
void ledger_jsonw_string_n(struct ledger_jsonw *w, const char *s, size_t len);
/** Writes a NUL-terminated string, or null when @p s is NULL. */
void ledger_jsonw_string(struct ledger_jsonw *w, const char *s);
void ledger_jsonw_int(struct ledger_jsonw *w, int64_t v);
void ledger_jsonw_bool(struct ledger_jsonw *w, bool v);
void ledger_jsonw_null(struct ledger_jsonw *w);
/** Splices @p len bytes that are already one valid JSON value. */
void ledger_jsonw_raw(struct ledger_jsonw *w, const char *json, size_t len);

/**
 * Appends @p s (@p len bytes of valid UTF-8) as a JSON string literal with
 * the minimal escaping RFC 8785 prescribes: \" \\ \b \f \n \r \t, other
 * control characters as \u00xx (lowercase hex), everything else verbatim.
 */
void ledger_jsonw_escape(struct ledger_buf *out, const char *s, size_t len);

#endif
