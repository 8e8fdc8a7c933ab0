/*
 * ledger/core/role.c: the names of the roles, spelled once.
 */
#include "ledger/core/role.h"

#include <stdlib.h>
#include <string.h>

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
