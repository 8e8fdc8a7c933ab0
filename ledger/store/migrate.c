/*
 * ledger/store/migrate.c: what the migrations built into ledgerd (generated
 * from sql/ into build/gen/migrations.c) say of the schema they make, and
 * which database schemas this ledgerd serves. ledger/store/admin.c applies
 * them.
 *
 * The rule: a ledgerd serves the schema it makes, and a newer one as long
 * as no migration past its own declares that older binaries must stop
 * (its "-- oldest-binary-schema: N" line, recorded in ledger_schema). So an
 * upgrade migrates first and rolls the binaries after, and a rollback of
 * the binaries needs no rollback of the schema.
 */
#include "ledger/store/migrate.h"

int ledger_migrate_expected_version(void)
{
	int v = 0;

	for (unsigned i = 0; i < ledger_migration_count; i++) {
		if (ledger_migrations[i].version > v)
			v = ledger_migrations[i].version;
	}
	return v;
}

enum ledger_schema_fit ledger_migrate_fit(const struct ledger_schema_state *db)
{
	int mine = ledger_migrate_expected_version();

	if (db->version < mine)
		return LEDGER_SCHEMA_OLDER;
	if (db->oldest_binary_schema > mine)
		return LEDGER_SCHEMA_TOO_NEW;
	return db->version == mine ? LEDGER_SCHEMA_CURRENT : LEDGER_SCHEMA_NEWER;
}

bool ledger_migrate_servable(enum ledger_schema_fit fit)
{
	return fit == LEDGER_SCHEMA_CURRENT || fit == LEDGER_SCHEMA_NEWER;
}
