/*
 * ledger/store/migrate.h: the schema migrations built into ledgerd (generated
 * from sql/ by scripts/embed-sql.sh) and the rule that says which database
 * schemas this ledgerd may serve (docs/operations.md, "Upgrading the schema").
 */
#ifndef LEDGER_MIGRATE_H
#define LEDGER_MIGRATE_H

#include <stdbool.h>

#include "ledger/common/err.h"

struct ledger_migration {
	int version;              /* the number the file name starts with */
	const char *name;         /* the file name, recorded with the version */
	const char *sql;          /* the file's text */
	int oldest_binary_schema; /* its "-- oldest-binary-schema: N" line: a ledgerd whose own
				     schema is older than N must not serve a database with this
				     migration applied; 0: additive, every older ledgerd may */
};

extern const struct ledger_migration ledger_migrations[];
extern const unsigned ledger_migration_count;

/** The schema version this binary expects: its newest migration. */
int ledger_migrate_expected_version(void);

/* How a database's schema stands to this ledgerd's. */
enum ledger_schema_fit {
	LEDGER_SCHEMA_CURRENT, /* the one this ledgerd makes: it serves it */
	LEDGER_SCHEMA_NEWER,   /* newer, and every migration since is additive: it serves it */
	LEDGER_SCHEMA_OLDER,   /* older, or never migrated: `ledgerd migrate` is due */
	LEDGER_SCHEMA_TOO_NEW, /* newer, with a migration that needs a newer ledgerd */
};

/* What the database's migration record says of its schema. */
struct ledger_schema_state {
	int version;              /* its newest migration; 0: never migrated */
	int oldest_binary_schema; /* the largest oldest-binary-schema of its migrations; 0: none */
};

/**
 * Where @p db stands to the schema this ledgerd expects. Pure.
 * @return LEDGER_SCHEMA_CURRENT or _NEWER: this ledgerd may serve it
 */
enum ledger_schema_fit ledger_migrate_fit(const struct ledger_schema_state *db);

/** True for a fit this ledgerd may serve (CURRENT or NEWER). */
bool ledger_migrate_servable(enum ledger_schema_fit fit);

#endif
