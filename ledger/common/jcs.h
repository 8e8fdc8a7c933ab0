/*
 * ledger/common/jcs.h: RFC 8785 JSON Canonicalization Scheme and the argument
 * fingerprint built on it. Every SDK computes the same bytes, so a tool
 * call's arguments compare equal however a client ordered or spaced them.
 */
#ifndef LEDGER_JCS_H
#define LEDGER_JCS_H

#include <stddef.h>

#include "ledger/common/buf.h"
#include "ledger/common/err.h"
#include "ledger/common/json.h"

/** Room for the longest number text JCS produces, with its NUL. */
#define LEDGER_JCS_NUMBER_MAX 32

/**
 * Writes the ECMAScript Number.prototype.toString form of the finite
 * double @p d (shortest round-trip digits; -0 is "0") into @p out.
 * @return the length written (without the NUL).
 */
size_t ledger_jcs_format_number(double d, char out[LEDGER_JCS_NUMBER_MAX]);

/**
 * Appends the canonical form of @p v to @p out: object members sorted by
 * their keys' UTF-16 code units, no whitespace, minimal string escapes,
 * numbers as ledger_jcs_format_number() writes them.
 * @param v borrowed for the call
 * @return LEDGER_OK, or LEDGER_ERR_INVALID if a number is out of the
 *         double range (JCS has no form for it); on error @p out holds a
 *         partial text the caller discards.
 */
LEDGER_MUSTCHECK enum ledger_err ledger_jcs_canonicalize(const struct ledger_json_value *v,
							 struct ledger_buf *out);

/**
 * The argument fingerprint: SHA-256 of the canonical form of @p v, as 64
 * lowercase hex digits and a NUL in @p hex_out.
 * @return as ledger_jcs_canonicalize(), or LEDGER_ERR_NOMEM.
 */
LEDGER_MUSTCHECK enum ledger_err ledger_jcs_fingerprint(const struct ledger_json_value *v,
							char hex_out[65]);

#endif
