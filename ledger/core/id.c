/*
 * ledger/core/id.c: the check of an id, the one place that spells the
 * alphabet docs/api.md allows in paths and claim_ids.
 */
#include "ledger/core/id.h"

bool ledger_id_valid(const char *s, size_t len)
{
	if (len == 0 || len > LEDGER_ID_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '~' || c == '-';
		if (!ok)
			return false;
	}
	return true;
}
