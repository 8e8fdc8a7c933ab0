/*
 * sdk/programs/ledgerctl/text.h: terminal text for ledgerctl: values made printable
 * on one line, measured in characters rather than bytes, cut with an
 * ellipsis, and laid out in tables that never exceed the line width an
 * operator's terminal and a pasted incident report can hold.
 */
#ifndef LEDGERCTL_TEXT_H
#define LEDGERCTL_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "ledger/common/buf.h"
#include "ledger/common/err.h"

#define LEDGERCTL_TEXT_WIDTH 100 /* the widest line ledgerctl prints, in characters */

enum ledgerctl_text_align {
	LEDGERCTL_TEXT_AS_IS, /* no padding */
	LEDGERCTL_TEXT_LEFT,  /* padded with spaces on the right up to the width */
	LEDGERCTL_TEXT_RIGHT, /* padded on the left */
};

/**
 * Counts the characters @p s (@p len bytes) shows once made printable:
 * one per UTF-8 code point, one per byte that is not valid UTF-8.
 */
size_t ledgerctl_text_width(const char *s, size_t len);

/**
 * Appends @p len bytes at @p s to @p out as one printable line fragment:
 * tabs and line breaks become spaces; other control characters, bidi
 * overrides and invalid UTF-8 become '?' (so a note cannot move the cursor
 * or fake a row); cut to @p width characters ending in "…" when longer; then
 * padded to @p width as @p align says.
 * @param out borrowed; on allocation failure its oom flag is set
 */
void ledgerctl_text_put(struct ledger_buf *out, const char *s, size_t len, size_t width,
			enum ledgerctl_text_align align);

/** As ledgerctl_text_put() for a NUL-terminated @p s; NULL prints as "-". */
void ledgerctl_text_puts(struct ledger_buf *out, const char *s, size_t width,
			 enum ledgerctl_text_align align);

/**
 * A table whose columns are as wide as their widest cell, narrowed when
 * the whole would exceed the line width. The last column is never padded;
 * a '\n' in one of its cells starts a continuation line indented to it.
 * Allocation failures are remembered and reported once, by
 * ledgerctl_table_print(), so building a table needs no checks.
 */
struct ledgerctl_table;

/**
 * @param headers @p ncols NUL-terminated titles, copied
 * @return a new table, or NULL when out of memory; free with
 *         ledgerctl_table_free()
 */
struct ledgerctl_table *ledgerctl_table_new(size_t ncols, const char *const *headers);

/** Frees @p t and its cells. NULL-safe. */
void ledgerctl_table_free(struct ledgerctl_table *t);

/** Right-aligns column @p col (numbers). */
void ledgerctl_table_align_right(struct ledgerctl_table *t, size_t col);

/** Appends an empty row. @return its index, for ledgerctl_table_set() */
size_t ledgerctl_table_add_row(struct ledgerctl_table *t);

/** Appends a line that ignores the columns (a day marker, say); @p text is copied. */
void ledgerctl_table_add_line(struct ledgerctl_table *t, const char *text);

/** Sets cell (@p row, @p col) to a copy of @p text; NULL shows "-". */
void ledgerctl_table_set(struct ledgerctl_table *t, size_t row, size_t col, const char *text);

/**
 * Fixes the column widths so that the columns before the last, their gaps
 * and @p min_last characters of the last column fit in @p width, taking
 * characters from the widest columns first.
 * @return the characters left for the last column
 */
size_t ledgerctl_table_fit(struct ledgerctl_table *t, size_t width, size_t min_last);

/**
 * Appends the header and every row to @p out, each line at most @p width
 * characters (when ledgerctl_table_fit() was not called, the table is
 * fitted leaving the last column its widest cell or a quarter of the
 * width, whichever is less).
 * @return LEDGER_OK, or LEDGER_ERR_NOMEM if any step ran out of memory
 */
LEDGER_MUSTCHECK enum ledger_err ledgerctl_table_print(struct ledgerctl_table *t,
						       struct ledger_buf *out, size_t width);

#endif
