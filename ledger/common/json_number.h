/*
 * ledger/common/json_number.h: the values of JSON numbers, which the
 * reader keeps as their exact text.
 */
#ifndef LEDGER_JSON_NUMBER_H
#define LEDGER_JSON_NUMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/err.h"
#include "ledger/common/json.h"

/**
 * Converts a number value to the IEEE-754 double nearest to its decimal
 * text (round half to even), as ECMAScript and RFC 8785 do.
 * @return LEDGER_OK, or LEDGER_ERR_INVALID if @p v is not a number or its
 *         magnitude overflows to infinity.
 */
LEDGER_MUSTCHECK enum ledger_err ledger_json_number_double(const struct ledger_json_value *v,
							   double *out);

/*
 * A number's exact value as its text spells it, nothing rounded:
 * (-1)^negative x 0.D x 10^point, where D are its significant digits (no
 * leading or trailing zero). D is borrowed from the text: @c count digits
 * from @c digits on, where the text's '.' sits after the first
 * @c before_dot of them and is not one of them.
 */
struct ledger_json_decimal {
	bool negative;      /* below zero (never for a zero) */
	const char *digits; /* the first significant digit in the text; NULL for zero */
	size_t count;       /* significant digits; 0 for zero */
	size_t before_dot;  /* digits before the text's '.' (>= count: none among them) */
	int64_t point;      /* ECMAScript's n, unless tiny_exp is set */
	/*
	 * An exponent of more than 18 digits, negative (a positive one is out
	 * of range): point = -(tiny_exp as a decimal) + point, unrounded.
	 */
	const char *tiny_exp; /* its digits, leading zeros cut (borrowed); else NULL */
	size_t tiny_exp_len;
};

/**
 * Reads the exact value of a number value (see struct ledger_json_decimal),
 * in one pass over its text, for texts of any length and any exponent.
 * @param out borrows from @p v's text
 * @return LEDGER_OK, or LEDGER_ERR_INVALID if @p v is not a number or
 *         its nearest double is infinite (beyond the double range; a value
 *         below the smallest double is in range).
 */
LEDGER_MUSTCHECK enum ledger_err ledger_json_number_decimal(const struct ledger_json_value *v,
							    struct ledger_json_decimal *out);

/**
 * Reads a number value written as a plain non-negative integer (digits
 * only: no sign, fraction or exponent) no larger than @p max.
 * @return LEDGER_OK, LEDGER_ERR_INVALID if it is not such a text, or
 *         LEDGER_ERR_LIMIT if it is larger than @p max.
 */
LEDGER_MUSTCHECK enum ledger_err ledger_json_number_uint(const struct ledger_json_value *v,
							 uint64_t max, uint64_t *out);

#endif
