/*
 * sdk/programs/ledgerctl/field.c: tolerant accessors over ledger/common/json.h values for
 * ledgerctl's printers, and a compact re-serialisation for event details
 * ledgerctl has no words for (ledgerd stores details as jsonb, which
 * spaces them out).
 */
#include "sdk/programs/ledgerctl/field.h"

#include <string.h>

#include "ledger/common/json_number.h"
#include "ledger/common/jsonw.h"

const char *ledgerctl_field_str(const struct ledger_json_value *obj, const char *key)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	return v != NULL && v->type == LEDGER_JSON_STRING ? v->u.str.s : NULL;
}

const struct ledger_json_value *ledgerctl_field_obj(const struct ledger_json_value *obj,
						    const char *key)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	return v != NULL && v->type == LEDGER_JSON_OBJECT ? v : NULL;
}

const struct ledger_json_value *ledgerctl_field_arr(const struct ledger_json_value *obj,
						    const char *key)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	return v != NULL && v->type == LEDGER_JSON_ARRAY ? v : NULL;
}

bool ledgerctl_field_uint(const struct ledger_json_value *obj, const char *key, uint64_t *out)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	return v != NULL && ledger_json_number_uint(v, UINT64_MAX, out) == LEDGER_OK;
}

bool ledgerctl_field_true(const struct ledger_json_value *obj, const char *key)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	return v != NULL && v->type == LEDGER_JSON_TRUE;
}

/* True when some key of the object @p v holds a NUL, which ledger_jsonw_key() cannot write. */
static bool nul_in_keys(const struct ledger_json_value *v)
{
	for (size_t i = 0; i < v->u.obj.count; i++) {
		const struct ledger_json_member *m = &v->u.obj.members[i];

		if (strlen(m->key) != m->key_len)
			return true;
	}
	return false;
}

static void compact(struct ledger_jsonw *w, const struct ledger_json_value *v)
{
	bool container = v->type == LEDGER_JSON_ARRAY || v->type == LEDGER_JSON_OBJECT;

	/*
	 * Deeper than the writer goes, or a key it cannot write: the text as
	 * received is still valid JSON, only not compacted.
	 */
	if ((container && w->depth + 1 >= LEDGER_JSONW_MAX_DEPTH) ||
	    (v->type == LEDGER_JSON_OBJECT && nul_in_keys(v))) {
		ledger_jsonw_raw(w, v->raw, v->raw_len);
		return;
	}
	switch (v->type) {
	case LEDGER_JSON_STRING:
		ledger_jsonw_string_n(w, v->u.str.s, v->u.str.len);
		break;
	case LEDGER_JSON_ARRAY:
		ledger_jsonw_array_begin(w);
		for (size_t i = 0; i < v->u.arr.count; i++)
			compact(w, &v->u.arr.items[i]);
		ledger_jsonw_array_end(w);
		break;
	case LEDGER_JSON_OBJECT:
		ledger_jsonw_object_begin(w);
		for (size_t i = 0; i < v->u.obj.count; i++) {
			ledger_jsonw_key(w, v->u.obj.members[i].key);
			compact(w, &v->u.obj.members[i].value);
		}
		ledger_jsonw_object_end(w);
		break;
	default: /* null, true, false and numbers are already compact */
		ledger_jsonw_raw(w, v->raw, v->raw_len);
		break;
	}
}

void ledgerctl_field_compact(struct ledger_buf *out, const struct ledger_json_value *v)
{
	struct ledger_jsonw w;

	ledger_jsonw_init(&w, out);
	compact(&w, v);
}
