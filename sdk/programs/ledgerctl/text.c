/*
 * sdk/programs/ledgerctl/text.c: printable, width-bounded text and tables for
 * ledgerctl. Everything shown comes from the ledger, where free text
 * (notes, reasons, owners) is whatever a client sent, so every byte passes
 * through one filter before it reaches the operator's terminal.
 */
#include "sdk/programs/ledgerctl/text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GAP 2   /* spaces between columns */
#define FLOOR 5 /* a column is never narrowed below this many characters */

static const char ellipsis[] = "\xe2\x80\xa6"; /* U+2026 */

/*
 * Length in bytes of the well-formed UTF-8 sequence at @p s (of @p n
 * bytes), with its code point in @p cp; 0 when it is not one (overlong
 * forms, surrogates and values past U+10FFFF included).
 */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len, i;
	uint32_t v, min;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if ((s[0] & 0xe0) == 0xc0) {
		len = 2;
		v = s[0] & 0x1f;
		min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3;
		v = s[0] & 0x0f;
		min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4;
		v = s[0] & 0x07;
		min = 0x10000;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

/*
 * The next character of @p s from byte @p i as it will be shown: @p shown
 * points at its bytes (the source's, or a replacement). Returns how many
 * source bytes it used.
 */
static size_t next_char(const char *s, size_t len, size_t i, const char **shown, size_t *shown_len)
{
	uint32_t cp = 0;
	size_t n = utf8_seq((const unsigned char *)s + i, len - i, &cp);

	if (n == 0) {
		*shown = "?";
		*shown_len = 1;
		return 1;
	}
	if (cp == '\t' || cp == '\n' || cp == '\r') {
		*shown = " ";
		*shown_len = 1;
	} else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
		   (cp >= 0x2066 && cp <= 0x2069)) {
		*shown = "?";
		*shown_len = 1;
	} else {
		*shown = s + i;
		*shown_len = n;
	}
	return n;
}

size_t ledgerctl_text_width(const char *s, size_t len)
{
	const char *shown = NULL;
	size_t shown_len = 0, i = 0, w = 0;

	while (i < len) {
		i += next_char(s, len, i, &shown, &shown_len);
		w++;
	}
	return w;
}

static void spaces(struct ledger_buf *out, size_t n)
{
	while (n-- > 0)
		ledger_buf_putc(out, ' ');
}

void ledgerctl_text_put(struct ledger_buf *out, const char *s, size_t len, size_t width,
			enum ledgerctl_text_align align)
{
	const char *shown = NULL;
	size_t shown_len = 0, i = 0, w = ledgerctl_text_width(s, len);
	size_t keep = w, pad = 0;

	if (w > width)
		keep = width > 0 ? width - 1 : 0;
	else
		pad = width - w;
	if (align == LEDGERCTL_TEXT_RIGHT)
		spaces(out, pad);
	for (size_t c = 0; c < keep; c++) {
		i += next_char(s, len, i, &shown, &shown_len);
		ledger_buf_append(out, shown, shown_len);
	}
	if (w > width && width > 0)
		ledger_buf_puts(out, ellipsis);
	if (align == LEDGERCTL_TEXT_LEFT)
		spaces(out, pad);
}

void ledgerctl_text_puts(struct ledger_buf *out, const char *s, size_t width,
			 enum ledgerctl_text_align align)
{
	if (s == NULL)
		s = "-";
	ledgerctl_text_put(out, s, strlen(s), width, align);
}

/* --- tables --- */

struct row {
	char *line;   /* a full-width line, or NULL for a row of cells */
	char **cells; /* ncols copies, NULL meaning "-"; NULL for a line */
};

struct ledgerctl_table {
	size_t ncols;
	char **headers; /* ncols copies */
	bool *right;    /* per column: right-aligned */
	size_t *widths; /* per column, once fitted; the last one is the room left */
	bool fitted;    /* ledgerctl_table_fit() ran */
	struct row *rows;
	size_t nrows, cap;
	bool oom; /* an allocation failed: the table is incomplete */
};

static char *copy(struct ledgerctl_table *t, const char *s)
{
	char *c = NULL;

	if (s == NULL)
		return NULL;
	c = strdup(s);
	if (c == NULL)
		t->oom = true;
	return c;
}

struct ledgerctl_table *ledgerctl_table_new(size_t ncols, const char *const *headers)
{
	struct ledgerctl_table *t = calloc(1, sizeof(*t)), *made = NULL;

	if (t == NULL || ncols == 0)
		goto out;
	t->ncols = ncols;
	t->headers = calloc(ncols, sizeof(*t->headers));
	t->right = calloc(ncols, sizeof(*t->right));
	t->widths = calloc(ncols, sizeof(*t->widths));
	if (t->headers == NULL || t->right == NULL || t->widths == NULL)
		goto out;
	for (size_t c = 0; c < ncols; c++)
		t->headers[c] = copy(t, headers[c]);
	if (t->oom)
		goto out;
	made = t;
	t = NULL;
out:
	ledgerctl_table_free(t);
	return made;
}

static void row_clear(struct row *r, size_t ncols)
{
	free(r->line);
	if (r->cells != NULL) {
		for (size_t c = 0; c < ncols; c++)
			free(r->cells[c]);
	}
	free(r->cells);
}

void ledgerctl_table_free(struct ledgerctl_table *t)
{
	if (t == NULL)
		return;
	for (size_t i = 0; i < t->nrows; i++)
		row_clear(&t->rows[i], t->ncols);
	free(t->rows);
	if (t->headers != NULL) {
		for (size_t c = 0; c < t->ncols; c++)
			free(t->headers[c]);
	}
	free(t->headers);
	free(t->right);
	free(t->widths);
	free(t);
}

void ledgerctl_table_align_right(struct ledgerctl_table *t, size_t col)
{
	if (col < t->ncols)
		t->right[col] = true;
}

/* A new zeroed row at the end, or NULL (and the table marked) when out of memory. */
static struct row *push(struct ledgerctl_table *t)
{
	if (t->oom)
		return NULL;
	if (t->nrows == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 32;
		struct row *rows = reallocarray(t->rows, cap, sizeof(*rows));

		if (rows == NULL) {
			t->oom = true;
			return NULL;
		}
		t->rows = rows;
		t->cap = cap;
	}
	memset(&t->rows[t->nrows], 0, sizeof(t->rows[0]));
	return &t->rows[t->nrows++];
}

size_t ledgerctl_table_add_row(struct ledgerctl_table *t)
{
	struct row *r = push(t);

	if (r == NULL)
		return SIZE_MAX;
	r->cells = calloc(t->ncols, sizeof(*r->cells));
	if (r->cells == NULL)
		t->oom = true;
	return t->nrows - 1;
}

void ledgerctl_table_add_line(struct ledgerctl_table *t, const char *text)
{
	struct row *r = push(t);

	if (r != NULL)
		r->line = copy(t, text != NULL ? text : "");
}

void ledgerctl_table_set(struct ledgerctl_table *t, size_t row, size_t col, const char *text)
{
	struct row *r = NULL;

	if (row >= t->nrows || col >= t->ncols)
		return; /* the row was never added: the table is already marked oom */
	r = &t->rows[row];
	if (r->cells == NULL)
		return;
	free(r->cells[col]);
	r->cells[col] = copy(t, text);
}

/* The widest line of @p s (lines split at '\n'). */
static size_t cell_width(const char *s)
{
	size_t best = 0;

	if (s == NULL)
		return 1; /* "-" */
	for (;;) {
		const char *nl = strchr(s, '\n');
		size_t len = nl != NULL ? (size_t)(nl - s) : strlen(s);
		size_t w = ledgerctl_text_width(s, len);

		if (w > best)
			best = w;
		if (nl == NULL)
			return best;
		s = nl + 1;
	}
}

static size_t natural_width(const struct ledgerctl_table *t, size_t col)
{
	size_t w = cell_width(t->headers[col]);

	for (size_t i = 0; i < t->nrows; i++) {
		const struct row *r = &t->rows[i];
		size_t cw;

		if (r->cells == NULL)
			continue;
		cw = cell_width(r->cells[col]);
		if (cw > w)
			w = cw;
	}
	return w;
}

size_t ledgerctl_table_fit(struct ledgerctl_table *t, size_t width, size_t min_last)
{
	size_t last = t->ncols - 1, prefix = 0;

	for (size_t c = 0; c < last; c++) {
		t->widths[c] = natural_width(t, c);
		prefix += t->widths[c] + GAP;
	}
	while (prefix + min_last > width) {
		size_t widest = last;

		for (size_t c = 0; c < last; c++) {
			if (t->widths[c] > FLOOR &&
			    (widest == last || t->widths[c] > t->widths[widest]))
				widest = c;
		}
		if (widest == last)
			break; /* nothing left to take: lines are cut at print time */
		t->widths[widest]--;
		prefix--;
	}
	t->widths[last] = width > prefix ? width - prefix : 0;
	t->fitted = true;
	return t->widths[last];
}

/* Appends @p line (without its trailing spaces) cut to @p width, and a newline. */
static void emit(struct ledger_buf *out, struct ledger_buf *line, size_t width)
{
	size_t len = line->len;

	while (len > 0 && line->data[len - 1] == ' ')
		len--;
	if (len > 0)
		ledgerctl_text_put(out, line->data, len, width, LEDGERCTL_TEXT_AS_IS);
	ledger_buf_putc(out, '\n');
	if (line->oom)
		out->oom = true;
	line->len = 0;
}

static void print_cells(const struct ledgerctl_table *t, char *const *cells, struct ledger_buf *out,
			struct ledger_buf *line, size_t width)
{
	size_t last = t->ncols - 1, prefix = 0;
	const char *s = NULL;

	for (size_t c = 0; c < last; c++) {
		ledgerctl_text_puts(line, cells[c], t->widths[c],
				    t->right[c] ? LEDGERCTL_TEXT_RIGHT : LEDGERCTL_TEXT_LEFT);
		spaces(line, GAP);
		prefix += t->widths[c] + GAP;
	}
	s = cells[last] != NULL ? cells[last] : "-";
	for (;;) {
		const char *nl = strchr(s, '\n');
		size_t len = nl != NULL ? (size_t)(nl - s) : strlen(s);

		ledgerctl_text_put(line, s, len, t->widths[last], LEDGERCTL_TEXT_AS_IS);
		emit(out, line, width);
		if (nl == NULL)
			return;
		s = nl + 1;
		spaces(line, prefix);
	}
}

enum ledger_err ledgerctl_table_print(struct ledgerctl_table *t, struct ledger_buf *out,
				      size_t width)
{
	struct ledger_buf line = LEDGER_BUF_INIT;
	enum ledger_err rc = LEDGER_ERR_NOMEM;

	if (t->oom)
		goto out;
	if (!t->fitted) {
		size_t want = natural_width(t, t->ncols - 1);

		ledgerctl_table_fit(t, width, want < width / 4 ? want : width / 4);
	}
	print_cells(t, t->headers, out, &line, width);
	for (size_t i = 0; i < t->nrows; i++) {
		const struct row *r = &t->rows[i];

		if (r->line != NULL) {
			ledger_buf_puts(&line, r->line);
			emit(out, &line, width);
		} else {
			print_cells(t, r->cells, out, &line, width);
		}
	}
	rc = out->oom ? LEDGER_ERR_NOMEM : LEDGER_OK;
out:
	ledger_buf_free(&line);
	return rc;
}
