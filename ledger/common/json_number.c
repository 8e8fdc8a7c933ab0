/*
 * ledger/common/json_number.c: reading a JSON number's text as a number.
 * The reader keeps numbers as text (ledger/common/json.c); these convert
 * it only where a value is needed: the nearest double, exactly as
 * ECMAScript and RFC 8785 round, the exact decimal value (digits and
 * exponent, for the canonical form), or a bounded unsigned integer.
 */
#include "ledger/common/json_number.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/*
 * Significant digits kept when rewriting a number for strtod. A halfway
 * point between two doubles has at most 767 significant digits, so keeping
 * 800 and standing in a single 1 for any nonzero rest rounds exactly as the
 * full text would, without allocating for texts of any length.
 */
#define KEEP_DIGITS 800
/* Far past where every double overflows or underflows; clamping is safe. */
#define EXP_CLAMP 100000L
/*
 * An exponent this large already dwarfs any digit count a text in memory
 * can have, so reading stops growing it there (and cannot overflow).
 */
#define EXP_SATURATE 1000000000000000LL

static long clamp_exp(long long e)
{
	if (e > EXP_CLAMP)
		return EXP_CLAMP;
	if (e < -EXP_CLAMP)
		return -EXP_CLAMP;
	return (long)e;
}

enum ledger_err ledger_json_number_double(const struct ledger_json_value *v, double *out)
{
	/* sign, digits, sticky digit, 'e', exponent, NUL */
	char text[1 + KEEP_DIGITS + 1 + 1 + 24];
	const unsigned char *r = NULL;
	size_t i = 0, n, kept = 0;
	long long nfrac = 0, ndrop = 0, e = 0;
	bool sticky = false, in_frac = false, neg_exp = false;
	size_t pos = 0;
	double d;

	if (!v || v->type != LEDGER_JSON_NUMBER || !v->raw || v->raw_len == 0)
		return LEDGER_ERR_INVALID;
	r = (const unsigned char *)v->raw;
	n = v->raw_len;
	if (r[0] == '-') {
		text[pos++] = '-';
		i++;
	}
	if (i >= n || !is_digit(r[i]))
		return LEDGER_ERR_INVALID;
	/*
	 * value = (all digits as one integer) * 10^(exponent - fraction digits);
	 * leading zeros are dropped, the tail past KEEP_DIGITS is summarised.
	 * Writing the result without a decimal point keeps strtod's reading
	 * independent of the locale.
	 */
	for (; i < n; i++) {
		unsigned char c = r[i];

		if (c == '.' && !in_frac) {
			in_frac = true;
			continue;
		}
		if (!is_digit(c))
			break;
		if (in_frac)
			nfrac++;
		if (kept == 0 && c == '0')
			continue;
		if (kept < KEEP_DIGITS) {
			text[pos++] = (char)c;
			kept++;
		} else {
			ndrop++;
			sticky = sticky || c != '0';
		}
	}
	if (i < n) {
		if (r[i] != 'e' && r[i] != 'E')
			return LEDGER_ERR_INVALID;
		i++;
		if (i < n && (r[i] == '+' || r[i] == '-'))
			neg_exp = r[i++] == '-';
		if (i >= n)
			return LEDGER_ERR_INVALID;
		for (; i < n; i++) {
			if (!is_digit(r[i]))
				return LEDGER_ERR_INVALID;
			if (e < EXP_SATURATE)
				e = e * 10 + (r[i] - '0');
		}
		if (neg_exp)
			e = -e;
	}
	if (kept == 0) {
		text[pos++] = '0';
		e = 0;
		nfrac = 0;
	}
	if (sticky) {
		text[pos++] = '1';
		ndrop--;
	}
	snprintf(text + pos, sizeof(text) - pos, "e%ld", clamp_exp(e - nfrac + ndrop));
	d = strtod(text, NULL);
	if (isinf(d))
		return LEDGER_ERR_INVALID;
	*out = d;
	return LEDGER_OK;
}

/*
 * Exponents of up to this many digits are read as an int64_t; a longer one
 * (leading zeros aside) is at least 10^18, beyond the double range above
 * and far below its smallest value underneath.
 */
#define EXP_DIGITS 18
/*
 * A number text longer than this cannot be in memory; refusing it keeps
 * point = exponent + shift (|shift| <= text length) inside an int64_t.
 */
#define DECIMAL_TEXT_MAX 1000000000000000ULL
/* Every double is below 10^309: point 310 and up is beyond the range. */
#define POINT_MAX 309

enum ledger_err ledger_json_number_decimal(const struct ledger_json_value *v,
					   struct ledger_json_decimal *out)
{
	const char *r = NULL;
	size_t n, i = 0, int_end, frac_start, frac_end, first, last, exp_start;
	bool negative, exp_negative = false;
	int64_t shift, exp = 0;
	double d;

	if (!v || v->type != LEDGER_JSON_NUMBER || !v->raw || v->raw_len == 0 ||
	    v->raw_len > DECIMAL_TEXT_MAX)
		return LEDGER_ERR_INVALID;
	r = v->raw;
	n = v->raw_len;
	negative = r[0] == '-';
	if (negative)
		i++;
	/* -?digits(.digits)?([eE][+-]?digits)? as the reader accepted it */
	first = i;
	while (i < n && is_digit((unsigned char)r[i]))
		i++;
	if (i == first)
		return LEDGER_ERR_INVALID;
	int_end = frac_start = frac_end = i;
	if (i < n && r[i] == '.') {
		frac_start = ++i;
		while (i < n && is_digit((unsigned char)r[i]))
			i++;
		if (i == frac_start)
			return LEDGER_ERR_INVALID;
		frac_end = i;
	}
	exp_start = i;
	if (i < n) {
		if (r[i] != 'e' && r[i] != 'E')
			return LEDGER_ERR_INVALID;
		i++;
		if (i < n && (r[i] == '+' || r[i] == '-'))
			exp_negative = r[i++] == '-';
		if (i == n)
			return LEDGER_ERR_INVALID;
		exp_start = i;
		for (; i < n; i++)
			if (!is_digit((unsigned char)r[i]))
				return LEDGER_ERR_INVALID;
		while (exp_start < n && r[exp_start] == '0')
			exp_start++;
	}

	memset(out, 0, sizeof(*out));
	/* The first significant digit, and the place of the point before it. */
	while (first < int_end && r[first] == '0')
		first++;
	if (first < int_end) {
		shift = (int64_t)(int_end - first);
		out->before_dot = int_end - first;
	} else {
		for (first = frac_start; first < frac_end && r[first] == '0'; first++)
			;
		if (first == frac_end)
			return LEDGER_OK; /* zero, -0 too, whatever the exponent */
		shift = -(int64_t)(first - frac_start);
		out->before_dot = SIZE_MAX;
	}
	/* The last one: a nonzero digit stops the walk back, at `first` at the latest. */
	last = frac_end;
	while (r[last - 1] == '0' || r[last - 1] == '.')
		last--;
	out->negative = negative;
	out->digits = r + first;
	out->count = last - first - (first < int_end && last > int_end ? 1 : 0);

	if (n - exp_start > EXP_DIGITS) {
		if (!exp_negative)
			return LEDGER_ERR_INVALID;
		out->tiny_exp = r + exp_start;
		out->tiny_exp_len = n - exp_start;
		out->point = shift;
		return LEDGER_OK;
	}
	for (i = exp_start; i < n; i++)
		exp = exp * 10 + (r[i] - '0');
	out->point = shift + (exp_negative ? -exp : exp);
	/* Only at 10^308..10^309 does the nearest double have to be found. */
	if (out->point > POINT_MAX ||
	    (out->point == POINT_MAX && ledger_json_number_double(v, &d) != LEDGER_OK))
		return LEDGER_ERR_INVALID;
	return LEDGER_OK;
}

enum ledger_err ledger_json_number_uint(const struct ledger_json_value *v, uint64_t max,
					uint64_t *out)
{
	uint64_t val = 0;
	size_t i;

	if (!v || v->type != LEDGER_JSON_NUMBER || !v->raw || v->raw_len == 0)
		return LEDGER_ERR_INVALID;
	if (v->raw[0] == '0' && v->raw_len > 1)
		return LEDGER_ERR_INVALID;
	for (i = 0; i < v->raw_len; i++)
		if (!is_digit((unsigned char)v->raw[i]))
			return LEDGER_ERR_INVALID;
	for (i = 0; i < v->raw_len; i++) {
		unsigned d = (unsigned)(v->raw[i] - '0');

		/* val * 10 + d > max, asked without overflowing */
		if (d > max || val > (max - d) / 10)
			return LEDGER_ERR_LIMIT;
		val = val * 10 + d;
	}
	*out = val;
	return LEDGER_OK;
}
