/*
 * sdk/programs/ledgerctl/field.h: reading the fields of ledgerd's answers. An
 * answer from another version of ledgerd may lack a field or carry it with
 * another type; these accessors turn both into "absent", so the printers
 * show "-" rather than trusting the shape of what came over the wire.
 */
#ifndef LEDGERCTL_FIELD_H
#define LEDGERCTL_FIELD_H

#include <stdbool.h>
#include <stdint.h>

#include "ledger/common/buf.h"
#include "ledger/common/json.h"

/** The string at @p key of @p obj, borrowed from its document; NULL if absent or not a string. */
const char *ledgerctl_field_str(const struct ledger_json_value *obj, const char *key);

/** The object at @p key of @p obj, borrowed; NULL if absent or not an object. */
const struct ledger_json_value *ledgerctl_field_obj(const struct ledger_json_value *obj,
						    const char *key);

/** The array at @p key of @p obj, borrowed; NULL if absent or not an array. */
const struct ledger_json_value *ledgerctl_field_arr(const struct ledger_json_value *obj,
						    const char *key);

/** True when @p key of @p obj is a non-negative integer; it is then stored in @p out. */
bool ledgerctl_field_uint(const struct ledger_json_value *obj, const char *key, uint64_t *out);

/** True when @p key of @p obj is the JSON literal true. */
bool ledgerctl_field_true(const struct ledger_json_value *obj, const char *key);

/**
 * Appends @p v to @p out as compact JSON: no insignificant whitespace,
 * strings re-escaped, numbers as written.
 */
void ledgerctl_field_compact(struct ledger_buf *out, const struct ledger_json_value *v);

#endif
