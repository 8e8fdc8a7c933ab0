/*
 * ledger/core/types.c: names and small checks of the domain's types, shared by
 * the HTTP layer, the store and the tests so that each spelling exists once.
 */
#include "ledger/core/types.h"

#include <stdlib.h>
#include <string.h>

void ledger_call_clear(struct ledger_call *call)
{
	if (call == NULL)
		return;
	free(call->result);
	free(call->args);
	memset(call, 0, sizeof(*call));
	call->state = LEDGER_CALL_ABSENT;
}

const char *ledger_call_state_name(enum ledger_call_state s)
{
	switch (s) {
	case LEDGER_CALL_ABSENT:
		return "absent";
	case LEDGER_CALL_IN_PROGRESS:
		return "in_progress";
	case LEDGER_CALL_UNKNOWN:
		return "unknown";
	case LEDGER_CALL_SUCCEEDED:
		return "succeeded";
	case LEDGER_CALL_FAILED:
		return "failed";
	case LEDGER_CALL_RELEASED:
		return "released";
	case LEDGER_CALL_TOMBSTONE:
		return "expired";
	}
	abort();
}

static const char *const role_names[] = {"agent", "router", "reviewer", "admin"};

const char *ledger_role_name(enum ledger_role r)
{
	if ((unsigned)r >= sizeof(role_names) / sizeof(role_names[0]))
		abort();
	return role_names[r];
}

int ledger_role_parse(const char *s, enum ledger_role *out)
{
	for (unsigned i = 0; i < sizeof(role_names) / sizeof(role_names[0]); i++) {
		if (strcmp(s, role_names[i]) == 0) {
			*out = (enum ledger_role)i;
			return 0;
		}
	}
	return -1;
}

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
