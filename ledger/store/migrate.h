/*
 * ledger/store/migrate.h: the schema migrations built into ledgerd (generated
 * from sql/ by scripts/embed-sql.sh) and the code that applies them.
 */
#ifndef LEDGER_MIGRATE_H
#define LEDGER_MIGRATE_H

#include "ledger/common/err.h"

struct ledger_migration {
	int version;      /* the number the file name starts with */
	const char *name; /* the file name, recorded with the version */
	const char *sql;  /* the file's text */
};

extern const struct ledger_migration ledger_migrations[];
extern const unsigned ledger_migration_count;

/** The schema version this binary expects: its newest migration. */
int ledger_migrate_expected_version(void);

#endif
