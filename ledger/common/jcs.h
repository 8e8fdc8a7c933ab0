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

/**
 * Appends the canonical form of @p v to @p out: object members sorted by
 * their keys' UTF-16 code units, no whitespace, minimal string escapes,
 * numbers laid out as ECMAScript's Number::toString lays out a double but
 * with their own exact digits, which are JCS's bytes wherever JCS's text
 * has exactly the number's value (api.md, "Fingerprints"). A number below
 * the smallest double keeps its digits (1e-400 is "1e-400", not "0").
 * Allocates only for objects' key order; time is linear in the text.
 * @param v borrowed for the call
 * @return LEDGER_OK, or LEDGER_ERR_INVALID if a number is beyond the
 *         double range (its nearest double is infinite); on error @p out
 *         holds a partial text the caller discards.
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
