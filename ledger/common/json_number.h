/*
 * ledger/common/json_number.h: the values of JSON numbers, which the
 * reader keeps as their exact text.
 */
#ifndef LEDGER_JSON_NUMBER_H
#define LEDGER_JSON_NUMBER_H

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

/**
 * Reads a number value written as a plain non-negative integer (digits
 * only: no sign, fraction or exponent) no larger than @p max.
 * @return LEDGER_OK, LEDGER_ERR_INVALID if it is not such a text, or
 *         LEDGER_ERR_LIMIT if it is larger than @p max.
 */
LEDGER_MUSTCHECK enum ledger_err ledger_json_number_uint(const struct ledger_json_value *v,
							 uint64_t max, uint64_t *out);

#endif
