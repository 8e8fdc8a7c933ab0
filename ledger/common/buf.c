/*
 * ledger/common/buf.c: the growable byte buffer behind every writer in ledgerd.
 * An allocation failure is remembered in the buffer rather than returned, so
 * code that builds a response in many small steps checks for it only once.
 */
#include "ledger/common/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Makes room for @p extra more bytes plus the NUL. Returns false (and marks
 * the buffer) when that is impossible, so callers simply skip their copy.
 */
static bool reserve(struct ledger_buf *b, size_t extra)
{
	size_t need;
	size_t cap;
	char *p = NULL;

	if (b->oom)
		return false;
	if (extra > SIZE_MAX - 1 - b->len)
		goto fail;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return true;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	p = realloc(b->data, cap);
	if (!p)
		goto fail;
	b->data = p;
	b->cap = cap;
	return true;
fail:
	b->oom = true;
	return false;
}

void ledger_buf_append(struct ledger_buf *b, const void *s, size_t n)
{
	if (!reserve(b, n))
		return;
	if (n)
		memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void ledger_buf_puts(struct ledger_buf *b, const char *s)
{
	ledger_buf_append(b, s, strlen(s));
}

void ledger_buf_putc(struct ledger_buf *b, char c)
{
	ledger_buf_append(b, &c, 1);
}

void ledger_buf_printf(struct ledger_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!reserve(b, 0))
		return;
	/* First try the room already there; most texts are short and fit. */
	va_start(ap, fmt);
	n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0) {
		/* Only an encoding error gets here; the output would be wrong. */
		b->data[b->len] = '\0';
		b->oom = true;
		return;
	}
	if ((size_t)n >= b->cap - b->len) {
		b->data[b->len] = '\0';
		if (!reserve(b, (size_t)n))
			return;
		va_start(ap, fmt);
		vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += (size_t)n;
}

char *ledger_buf_steal(struct ledger_buf *b, size_t *len_out)
{
	char *s = NULL;
	size_t len = 0;

	if (!b->oom && !b->data) {
		/* The contract promises a string even for an empty buffer. */
		s = calloc(1, 1);
	} else if (!b->oom) {
		s = b->data;
		len = b->len;
		b->data = NULL;
	}
	ledger_buf_free(b);
	if (len_out)
		*len_out = len;
	return s;
}

void ledger_buf_free(struct ledger_buf *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->oom = false;
}
