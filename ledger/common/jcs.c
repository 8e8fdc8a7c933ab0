/*
 * ledger/common/jcs.c: RFC 8785 canonical JSON and the SHA-256 fingerprint over it.
 * Fingerprints must match what every SDK computes, so numbers take
 * ECMAScript's Number::toString layout (with their own exact digits: two
 * different numbers never share a text) and keys sort by UTF-16 code
 * units as JavaScript compares strings, not by UTF-8 bytes.
 */
#include "ledger/common/jcs.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/json_number.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/sha256.h"

/* What a run of zeros or nines is copied from: a few appends, never a loop per byte. */
static const char zeros[] = "00000000000000000000000000000000";
static const char nines[] = "99999999999999999999999999999999";

static void put_run(struct ledger_buf *out, const char *run, size_t count)
{
	while (count > 0) {
		size_t n = count < sizeof(zeros) - 1 ? count : sizeof(zeros) - 1;

		ledger_buf_append(out, run, n);
		count -= n;
	}
}

/* Digits [from, to) of @p d, read around the text's '.'. */
static void put_digits(struct ledger_buf *out, const struct ledger_json_decimal *d, size_t from,
		       size_t to)
{
	if (to <= d->before_dot) {
		ledger_buf_append(out, d->digits + from, to - from);
	} else if (from >= d->before_dot) {
		ledger_buf_append(out, d->digits + from + 1, to - from);
	} else {
		ledger_buf_append(out, d->digits + from, d->before_dot - from);
		ledger_buf_append(out, d->digits + d->before_dot + 1, to - d->before_dot);
	}
}

/* @p v in decimal, zero-padded to @p width digits. */
static void put_uint(struct ledger_buf *out, uint64_t v, int width)
{
	char text[20];
	int i = (int)sizeof(text);

	do {
		text[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0 || (int)sizeof(text) - i < width);
	ledger_buf_append(out, text + i, sizeof(text) - (size_t)i);
}

#define TAIL_DIGITS 18
#define TAIL 1000000000000000000LL

/*
 * Writes M - c, where M is the decimal @p m of more than TAIL_DIGITS digits
 * (leading zeros cut) and |c| < 10^18: the exponent of a number far below
 * the smallest double, too long for an int64_t. Only the last 18 digits
 * take part; a borrow or carry changes the rest by one.
 */
static void put_tiny_exponent(struct ledger_buf *out, const char *m, size_t len, int64_t c)
{
	size_t head = len - TAIL_DIGITS, keep;
	bool wrote_head = true;
	int64_t tail = 0;
	size_t i;

	for (i = head; i < len; i++)
		tail = tail * 10 + (m[i] - '0');
	tail -= c;
	if (tail < 0) {
		/* head - 1: its trailing zeros turn to nines, a leading 1 alone goes */
		tail += TAIL;
		for (keep = head; m[keep - 1] == '0'; keep--)
			;
		if (keep == 1 && m[0] == '1') {
			wrote_head = head > 1;
		} else {
			ledger_buf_append(out, m, keep - 1);
			ledger_buf_putc(out, (char)(m[keep - 1] - 1));
		}
		put_run(out, nines, head - keep);
	} else if (tail >= TAIL) {
		/* head + 1: its trailing nines turn to zeros, all nines grow a 1 */
		tail -= TAIL;
		for (keep = head; keep > 0 && m[keep - 1] == '9'; keep--)
			;
		if (keep > 0) {
			ledger_buf_append(out, m, keep - 1);
			ledger_buf_putc(out, (char)(m[keep - 1] + 1));
		} else {
			ledger_buf_putc(out, '1');
		}
		put_run(out, zeros, head - keep);
	} else {
		ledger_buf_append(out, m, head);
	}
	put_uint(out, (uint64_t)tail, wrote_head ? TAIL_DIGITS : 1);
}

/*
 * The canonical text of a number: ECMAScript's Number::toString layout of
 * its own exact digits. JCS lays out the shortest digits of the nearest
 * double the same way; where that text has exactly the number's value, its
 * digits and exponent are the number's own, so the bytes are JCS's without
 * finding the double. Where it has not, JCS would have let two numbers
 * share a text, and the exact digits are what api.md asks for. Nothing is
 * allocated: the digits are copied from the source text.
 */
static enum ledger_err put_number(struct ledger_buf *out, const struct ledger_json_value *v)
{
	struct ledger_json_decimal d;
	int64_t k, n;

	if (ledger_json_number_decimal(v, &d) != LEDGER_OK)
		return LEDGER_ERR_INVALID;
	if (d.count == 0) {
		ledger_buf_putc(out, '0');
		return LEDGER_OK;
	}
	if (d.negative)
		ledger_buf_putc(out, '-');
	/* The value is 0.D x 10^n, D of k digits. */
	k = (int64_t)d.count;
	n = d.point;
	if (d.tiny_exp == NULL && k <= n && n <= 21) {
		put_digits(out, &d, 0, d.count);
		put_run(out, zeros, (size_t)(n - k));
	} else if (d.tiny_exp == NULL && 0 < n && n <= 21) {
		put_digits(out, &d, 0, (size_t)n);
		ledger_buf_putc(out, '.');
		put_digits(out, &d, (size_t)n, d.count);
	} else if (d.tiny_exp == NULL && -6 < n && n <= 0) {
		ledger_buf_append(out, "0.", 2);
		put_run(out, zeros, (size_t)-n);
		put_digits(out, &d, 0, d.count);
	} else {
		put_digits(out, &d, 0, 1);
		if (k > 1) {
			ledger_buf_putc(out, '.');
			put_digits(out, &d, 1, d.count);
		}
		if (d.tiny_exp != NULL) {
			/* the exponent n - 1 is -(tiny_exp) + (point - 1) */
			ledger_buf_append(out, "e-", 2);
			put_tiny_exponent(out, d.tiny_exp, d.tiny_exp_len, n - 1);
		} else {
			ledger_buf_append(out, n - 1 < 0 ? "e-" : "e+", 2);
			put_uint(out, (uint64_t)(n - 1 < 0 ? 1 - n : n - 1), 1);
		}
	}
	return LEDGER_OK;
}

/*
 * The next code point of @p s turned into a weight that orders like its
 * UTF-16 form: U+E000..U+FFFF move above the supplementary planes, whose
 * surrogates (D800..DBFF) come first in UTF-16. Bytes that are not valid
 * UTF-8 (never from the parser) still get some fixed order.
 */
static uint32_t next_weight(const unsigned char *s, size_t len, size_t *i)
{
	unsigned char c = s[*i];
	uint32_t cp;
	size_t n, j;

	if (c < 0x80)
		n = 1;
	else if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		n = 0;
	if (n == 0 || len - *i < n) {
		(*i)++;
		return c;
	}
	cp = n == 1 ? c : (uint32_t)c & (0x7fu >> n);
	for (j = 1; j < n; j++) {
		if ((s[*i + j] & 0xc0) != 0x80) {
			(*i)++;
			return c;
		}
		cp = cp << 6 | (s[*i + j] & 0x3fu);
	}
	*i += n;
	if (cp >= 0xe000 && cp <= 0xffff)
		return cp + 0x200000;
	return cp;
}

static int key_cmp(const void *a, const void *b)
{
	const struct ledger_json_member *x = *(const struct ledger_json_member *const *)a;
	const struct ledger_json_member *y = *(const struct ledger_json_member *const *)b;
	const unsigned char *xs = (const unsigned char *)x->key;
	const unsigned char *ys = (const unsigned char *)y->key;
	size_t i = 0, j = 0;

	while (i < x->key_len && j < y->key_len) {
		uint32_t wx = next_weight(xs, x->key_len, &i);
		uint32_t wy = next_weight(ys, y->key_len, &j);

		if (wx != wy)
			return wx < wy ? -1 : 1;
	}
	if (i < x->key_len)
		return 1;
	if (j < y->key_len)
		return -1;
	return 0;
}

/* An open container; an explicit stack so depth never threatens the C stack. */
struct cframe {
	const struct ledger_json_value *v;
	const struct ledger_json_member **order; /* objects: members by key */
	size_t next;                             /* the child to write next */
};

struct canon {
	struct ledger_buf *out;
	struct cframe *stack;
	size_t n, cap;
};

/* Our own allocation failed: say so the way every append does. */
static void out_of_memory(struct canon *c)
{
	c->out->oom = true;
}

static bool push(struct canon *c, const struct ledger_json_value *v)
{
	const struct ledger_json_member **order = NULL;
	struct cframe *stack = NULL;
	size_t i, count = 0;

	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;

		if (cap > SIZE_MAX / sizeof(*stack))
			return false;
		stack = realloc(c->stack, cap * sizeof(*stack));
		if (!stack)
			return false;
		c->stack = stack;
		c->cap = cap;
	}
	if (v->type == LEDGER_JSON_OBJECT && v->u.obj.count > 0) {
		count = v->u.obj.count;
		if (count > SIZE_MAX / sizeof(*order))
			return false;
		order = malloc(count * sizeof(*order));
		if (!order)
			return false;
		for (i = 0; i < count; i++)
			order[i] = &v->u.obj.members[i];
		qsort(order, count, sizeof(*order), key_cmp);
	}
	c->stack[c->n].v = v;
	c->stack[c->n].order = order;
	c->stack[c->n].next = 0;
	c->n++;
	return true;
}

/* Writes a scalar, or the opening of a container (which it then enters). */
static enum ledger_err start_value(struct canon *c, const struct ledger_json_value *v)
{
	switch (v->type) {
	case LEDGER_JSON_NULL:
		ledger_buf_puts(c->out, "null");
		return LEDGER_OK;
	case LEDGER_JSON_FALSE:
		ledger_buf_puts(c->out, "false");
		return LEDGER_OK;
	case LEDGER_JSON_TRUE:
		ledger_buf_puts(c->out, "true");
		return LEDGER_OK;
	case LEDGER_JSON_NUMBER:
		return put_number(c->out, v);
	case LEDGER_JSON_STRING:
		ledger_jsonw_escape(c->out, v->u.str.s, v->u.str.len);
		return LEDGER_OK;
	case LEDGER_JSON_ARRAY:
	case LEDGER_JSON_OBJECT:
		ledger_buf_putc(c->out, v->type == LEDGER_JSON_OBJECT ? '{' : '[');
		if (!push(c, v))
			out_of_memory(c);
		return LEDGER_OK;
	}
	abort();
}

/*
 * Closes every finished container and returns the next child to write
 * (after writing its separator and, in objects, its key), or NULL at the
 * end of the document.
 */
static const struct ledger_json_value *next_value(struct canon *c)
{
	while (c->n > 0) {
		struct cframe *f = &c->stack[c->n - 1];
		bool object = f->v->type == LEDGER_JSON_OBJECT;
		size_t count = object ? f->v->u.obj.count : f->v->u.arr.count;
		const struct ledger_json_member *m = NULL;

		if (f->next == count) {
			ledger_buf_putc(c->out, object ? '}' : ']');
			free(f->order);
			c->n--;
			continue;
		}
		if (f->next > 0)
			ledger_buf_putc(c->out, ',');
		if (!object)
			return &f->v->u.arr.items[f->next++];
		m = f->order[f->next++];
		ledger_jsonw_escape(c->out, m->key, m->key_len);
		ledger_buf_putc(c->out, ':');
		return &m->value;
	}
	return NULL;
}

enum ledger_err ledger_jcs_canonicalize(const struct ledger_json_value *v, struct ledger_buf *out)
{
	struct canon c = {out, NULL, 0, 0};
	enum ledger_err rc = LEDGER_OK;
	size_t i;

	if (!v)
		return LEDGER_ERR_INVALID;
	while (v && !out->oom) {
		rc = start_value(&c, v);
		if (rc != LEDGER_OK)
			goto out;
		if (out->oom)
			break;
		v = next_value(&c);
	}
out:
	for (i = 0; i < c.n; i++)
		free(c.stack[i].order);
	free(c.stack);
	return rc;
}

enum ledger_err ledger_jcs_fingerprint(const struct ledger_json_value *v, char hex_out[65])
{
	static const char hex[] = "0123456789abcdef";
	struct ledger_buf b = LEDGER_BUF_INIT;
	unsigned char md[32];
	enum ledger_err rc;
	unsigned int i;

	hex_out[0] = '\0';
	rc = ledger_jcs_canonicalize(v, &b);
	if (rc != LEDGER_OK)
		goto out;
	if (b.oom) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	if (!ledger_sha256(b.data, b.len, md)) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	for (i = 0; i < sizeof(md); i++) {
		hex_out[2 * i] = hex[md[i] >> 4];
		hex_out[2 * i + 1] = hex[md[i] & 0xf];
	}
	hex_out[64] = '\0';
out:
	ledger_buf_free(&b);
	return rc;
}
