/*
 * ledger/core/role.h: the roles a token may have, and their names.
 */
#ifndef LEDGER_ROLE_H
#define LEDGER_ROLE_H

enum ledger_role {
	LEDGER_ROLE_AGENT,
	LEDGER_ROLE_ROUTER,
	LEDGER_ROLE_REVIEWER,
	LEDGER_ROLE_ADMIN,
};

/* Bit per role, for the routing table's "who may call" column. */
#define LEDGER_ROLE_BIT(r) (1u << (r))

/** The API's name of a role ("agent", ...); a static string. */
const char *ledger_role_name(enum ledger_role r);

/** The role named @p s. @return 0, or -1 if there is none. */
int ledger_role_parse(const char *s, enum ledger_role *out);

#endif
