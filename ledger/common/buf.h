/*
 * ledger/common/buf.h: a growable byte buffer. Appends never fail loudly: on an
 * allocation failure the buffer records it in @c oom and ignores further
 * appends, so a writer checks once at the end instead of after every call.
 */
#ifndef LEDGER_BUF_H
#define LEDGER_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct ledger_buf {
	char *data; /* owned; NUL-terminated whenever len > 0 or after reserve */
	size_t len; /* bytes used, not counting the terminating NUL */
	size_t cap; /* bytes allocated */
	bool oom;   /* an append failed; the contents are incomplete */
};

#define LEDGER_BUF_INIT                                                                            \
	{                                                                                          \
		NULL, 0, 0, false                                                                  \
	}

/** Appends @p n bytes of @p s (which may contain NUL). */
void ledger_buf_append(struct ledger_buf *b, const void *s, size_t n);

/** Appends the NUL-terminated string @p s. */
void ledger_buf_puts(struct ledger_buf *b, const char *s);

/** Appends one byte. */
void ledger_buf_putc(struct ledger_buf *b, char c);

/** Appends printf-formatted text. */
void ledger_buf_printf(struct ledger_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/**
 * Hands the contents to the caller and leaves @p b empty.
 * @return a new NUL-terminated string (never NULL unless oom was set, in
 *         which case the contents are freed and NULL is returned); caller
 *         frees with free(). @p len_out, if not NULL, receives the length.
 */
char *ledger_buf_steal(struct ledger_buf *b, size_t *len_out);

/** Empties the buffer and frees its memory. NULL-safe. */
void ledger_buf_free(struct ledger_buf *b);

#endif
