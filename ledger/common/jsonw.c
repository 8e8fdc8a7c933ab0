/*
 * ledger/common/jsonw.c: the streaming JSON writer. Separators are placed here, not
 * by callers, so responses cannot come out with a stray or missing comma;
 * string escaping is RFC 8785's minimal form so the same code serves both
 * responses and canonical fingerprints.
 */
#include "ledger/common/jsonw.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void ledger_jsonw_init(struct ledger_jsonw *w, struct ledger_buf *out)
{
	memset(w, 0, sizeof(*w));
	w->out = out;
}

/* Writes the comma a new value needs, if any, and notes the level is used. */
static void before_value(struct ledger_jsonw *w)
{
	if (w->after_key) {
		w->after_key = false;
		return;
	}
	if (w->depth == 0)
		return;
	if (w->has_items[w->depth - 1])
		ledger_buf_putc(w->out, ',');
	w->has_items[w->depth - 1] = true;
}

static void begin(struct ledger_jsonw *w, char open)
{
	/* The nesting ledgerd writes is fixed by its code, never by input. */
	if (w->depth >= LEDGER_JSONW_MAX_DEPTH)
		abort();
	before_value(w);
	ledger_buf_putc(w->out, open);
	w->has_items[w->depth++] = false;
}

static void end(struct ledger_jsonw *w, char close)
{
	if (w->depth == 0 || w->after_key)
		abort();
	w->depth--;
	ledger_buf_putc(w->out, close);
}

void ledger_jsonw_object_begin(struct ledger_jsonw *w)
{
	begin(w, '{');
}

void ledger_jsonw_object_end(struct ledger_jsonw *w)
{
	end(w, '}');
}

void ledger_jsonw_array_begin(struct ledger_jsonw *w)
{
	begin(w, '[');
}

void ledger_jsonw_array_end(struct ledger_jsonw *w)
{
	end(w, ']');
}

void ledger_jsonw_key(struct ledger_jsonw *w, const char *key)
{
	/* A key outside any container or right after another one is a bug. */
	if (w->depth == 0 || w->after_key)
		abort();
	before_value(w);
	ledger_jsonw_escape(w->out, key, strlen(key));
	ledger_buf_putc(w->out, ':');
	w->after_key = true;
}

void ledger_jsonw_string_n(struct ledger_jsonw *w, const char *s, size_t len)
{
	before_value(w);
	ledger_jsonw_escape(w->out, s, len);
}

void ledger_jsonw_string(struct ledger_jsonw *w, const char *s)
{
	if (!s) {
		ledger_jsonw_null(w);
		return;
	}
	ledger_jsonw_string_n(w, s, strlen(s));
}

void ledger_jsonw_int(struct ledger_jsonw *w, int64_t v)
{
	before_value(w);
	ledger_buf_printf(w->out, "%" PRId64, v);
}

void ledger_jsonw_bool(struct ledger_jsonw *w, bool v)
{
	before_value(w);
	ledger_buf_puts(w->out, v ? "true" : "false");
}

void ledger_jsonw_null(struct ledger_jsonw *w)
{
	before_value(w);
	ledger_buf_puts(w->out, "null");
}

void ledger_jsonw_raw(struct ledger_jsonw *w, const char *json, size_t len)
{
	before_value(w);
	ledger_buf_append(w->out, json, len);
}

void ledger_jsonw_escape(struct ledger_buf *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, run = 0;

	ledger_buf_putc(out, '"');
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[6] = {'\\', 0, 0, 0, 0, 0};
		size_t n = 2;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		/* Flush the verbatim bytes before this one in a single append. */
		if (i > run)
			ledger_buf_append(out, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"':
		case '\\':
			esc[1] = (char)c;
			break;
		case '\b':
			esc[1] = 'b';
			break;
		case '\f':
			esc[1] = 'f';
			break;
		case '\n':
			esc[1] = 'n';
			break;
		case '\r':
			esc[1] = 'r';
			break;
		case '\t':
			esc[1] = 't';
			break;
		default:
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 0xf];
			n = 6;
			break;
		}
		ledger_buf_append(out, esc, n);
	}
	if (len > run)
		ledger_buf_append(out, s + run, len - run);
	ledger_buf_putc(out, '"');
}
