/*
 * ledger/store/migrate.c: what the migrations built into ledgerd (generated
 * from sql/ into build/gen/migrations.c) say of the schema they make.
 * ledger/store/admin.c applies them.
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
