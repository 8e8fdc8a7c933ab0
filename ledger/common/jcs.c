/*
 * ledger/common/jcs.c: RFC 8785 canonical JSON and the SHA-256 fingerprint over it.
 * Fingerprints must match what every SDK computes, so numbers follow
 * ECMAScript's Number::toString exactly and keys sort by UTF-16 code units
 * as JavaScript compares strings, not by UTF-8 bytes.
 */
#include "ledger/common/jcs.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/json_number.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/sha256.h"

/* A double never needs more significant digits than this to round-trip. */
#define MAX_DIGITS 17

/*
 * The @p p significant digits of @p x (positive, finite) correctly rounded,
 * as glibc's printf produces them, and the decimal exponent of the first.
 * Any character that is not a digit before the 'e' is the locale's decimal
 * point, so the locale does not matter.
 */
static void nearest_digits(double x, int p, char digits[MAX_DIGITS + 1], int *exp10)
{
	char text[64];
	int i, k = 0;

	snprintf(text, sizeof(text), "%.*e", p - 1, x);
	for (i = 0; text[i] && text[i] != 'e'; i++) {
		if (text[i] >= '0' && text[i] <= '9' && k < MAX_DIGITS)
			digits[k++] = text[i];
	}
	if (k != p || text[i] != 'e')
		abort();
	digits[k] = '\0';
	*exp10 = atoi(text + i + 1);
}

/* The double nearest to digits x 10^(exp10 - k + 1), read without a '.'. */
static double digits_value(const char *digits, int k, int exp10)
{
	char text[64];

	snprintf(text, sizeof(text), "%.*se%d", k, digits, exp10 - k + 1);
	return strtod(text, NULL);
}

/*
 * Moves @p digits one unit in the last place up or down, keeping @p k
 * digits: 9.99e4 + 1 is 1.00e5 and 1.00e5 - 1 is 9.99e4.
 */
static void step(char *digits, int k, int *exp10, bool up)
{
	int i;

	for (i = k - 1; i >= 0; i--) {
		if (up && digits[i] != '9') {
			digits[i]++;
			return;
		}
		if (!up && digits[i] != '0') {
			digits[i]--;
			if (i == 0 && digits[0] == '0') {
				memset(digits, '9', (size_t)k);
				(*exp10)--;
			}
			return;
		}
		digits[i] = up ? '0' : '9';
	}
	/* Only "99...9" going up runs off the front. */
	digits[0] = '1';
	(*exp10)++;
}

/*
 * Finds the shortest digits that read back as @p x, the closest to @p x
 * among those of that length. At a power of two the gap below x is half
 * the gap above, so the nearest candidate may fall short below while its
 * neighbour above still reads back: that one is then the only choice.
 */
static int shortest_digits(double x, char digits[MAX_DIGITS + 1], int *exp10)
{
	char alt[MAX_DIGITS + 1];
	int alt_exp;
	int p;

	for (p = 1; p <= MAX_DIGITS; p++) {
		double y;

		nearest_digits(x, p, digits, exp10);
		y = digits_value(digits, p, *exp10);
		if (y == x)
			return p;
		memcpy(alt, digits, sizeof(alt));
		alt_exp = *exp10;
		step(alt, p, &alt_exp, y < x);
		if (digits_value(alt, p, alt_exp) == x) {
			memcpy(digits, alt, sizeof(alt));
			*exp10 = alt_exp;
			return p;
		}
	}
	/* Seventeen correctly rounded digits always read back. */
	abort();
}

size_t ledger_jcs_format_number(double d, char out[LEDGER_JCS_NUMBER_MAX])
{
	char digits[MAX_DIGITS + 1];
	int k, n, exp10, i;
	size_t pos = 0;

	if (!isfinite(d))
		abort();
	if (d == 0) {
		/* Both zeros: ECMAScript writes -0 as "0". */
		memcpy(out, "0", 2);
		return 1;
	}
	if (d < 0) {
		out[pos++] = '-';
		d = -d;
	}
	k = shortest_digits(d, digits, &exp10);
	while (k > 1 && digits[k - 1] == '0')
		k--;
	/* ECMAScript's n: the value is digits x 10^(n - k). */
	n = exp10 + 1;
	if (k <= n && n <= 21) {
		memcpy(out + pos, digits, (size_t)k);
		pos += (size_t)k;
		for (i = k; i < n; i++)
			out[pos++] = '0';
	} else if (0 < n && n < k) {
		/* (n < k <= 17 here: the point falls inside the digits.) */
		memcpy(out + pos, digits, (size_t)n);
		pos += (size_t)n;
		out[pos++] = '.';
		memcpy(out + pos, digits + n, (size_t)(k - n));
		pos += (size_t)(k - n);
	} else if (-6 < n && n <= 0) {
		out[pos++] = '0';
		out[pos++] = '.';
		for (i = n; i < 0; i++)
			out[pos++] = '0';
		memcpy(out + pos, digits, (size_t)k);
		pos += (size_t)k;
	} else {
		out[pos++] = digits[0];
		if (k > 1) {
			out[pos++] = '.';
			memcpy(out + pos, digits + 1, (size_t)(k - 1));
			pos += (size_t)(k - 1);
		}
		pos += (size_t)snprintf(out + pos, LEDGER_JCS_NUMBER_MAX - pos, "e%c%d",
					n - 1 < 0 ? '-' : '+', abs(n - 1));
	}
	out[pos] = '\0';
	return pos;
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
	char num[LEDGER_JCS_NUMBER_MAX];
	double d;
	size_t len;

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
		if (ledger_json_number_double(v, &d) != LEDGER_OK)
			return LEDGER_ERR_INVALID;
		len = ledger_jcs_format_number(d, num);
		ledger_buf_append(c->out, num, len);
		return LEDGER_OK;
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
