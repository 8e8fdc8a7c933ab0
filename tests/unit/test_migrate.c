/*
 * tests/unit/test_migrate.c: which database schemas a ledgerd serves
 * (ledger/store/migrate.c, docs/operations.md "Upgrading the schema"):
 * its own, a newer one whose migrations are all additive, never an older
 * one, and never a newer one with a migration that names a newer oldest
 * binary. Rows are relative to the schema this build makes, so they hold
 * as migrations are added. Then the built-in migrations themselves: in
 * order, and the token trigger's additive.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ledger/store/migrate.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

struct fit_row {
	int version_delta; /* the database's version, from this build's */
	int oldest_delta;  /* its oldest-binary-schema, from this build's; INT32_MIN: none */
	enum ledger_schema_fit want;
	bool servable;
};

static void test_migrate_fit_table(void **state)
{
	static const struct fit_row rows[] = {
		{0, INT32_MIN, LEDGER_SCHEMA_CURRENT, true},
		{0, 0, LEDGER_SCHEMA_CURRENT, true}, /* its own newest migration was breaking */
		{0, -1, LEDGER_SCHEMA_CURRENT, true},
		{1, INT32_MIN, LEDGER_SCHEMA_NEWER, true}, /* additive: the old binary serves */
		{5, INT32_MIN, LEDGER_SCHEMA_NEWER, true},
		{2, 0, LEDGER_SCHEMA_NEWER, true}, /* breaks binaries before this one only */
		{2, -2, LEDGER_SCHEMA_NEWER, true},
		{1, 1, LEDGER_SCHEMA_TOO_NEW, false}, /* the next migration breaks this binary */
		{3, 2, LEDGER_SCHEMA_TOO_NEW, false},
		{-1, INT32_MIN, LEDGER_SCHEMA_OLDER, false}, /* ledgerd migrate is due */
	};
	int mine = ledger_migrate_expected_version();

	(void)state;
	assert_true(mine >= 1);
	for (size_t i = 0; i < COUNT(rows); i++) {
		struct ledger_schema_state db = {
			mine + rows[i].version_delta,
			rows[i].oldest_delta == INT32_MIN ? 0 : mine + rows[i].oldest_delta,
		};
		enum ledger_schema_fit fit = ledger_migrate_fit(&db);

		if (fit != rows[i].want)
			fail_msg("row %zu: database at %d (oldest binary %d): fit %d, want %d", i,
				 db.version, db.oldest_binary_schema, fit, rows[i].want);
		assert_int_equal(ledger_migrate_servable(fit), rows[i].servable);
	}
}

static void test_migrate_never_migrated_is_older(void **state)
{
	struct ledger_schema_state db = {0, 0};

	(void)state;
	assert_int_equal(ledger_migrate_fit(&db), LEDGER_SCHEMA_OLDER);
}

/* The built-in migrations: numbered upwards, none naming a binary past itself. */
static void test_migrate_table_is_ordered(void **state)
{
	(void)state;
	assert_true(ledger_migration_count >= 1);
	for (unsigned i = 0; i < ledger_migration_count; i++) {
		const struct ledger_migration *m = &ledger_migrations[i];

		assert_true(m->oldest_binary_schema >= 0 && m->oldest_binary_schema <= m->version);
		if (i > 0)
			assert_true(m->version > ledger_migrations[i - 1].version);
	}
	assert_int_equal(ledger_migrate_expected_version(),
			 ledger_migrations[ledger_migration_count - 1].version);
}

/*
 * The trigger that announces changes to api_tokens (sql/007) only adds: a
 * ledgerd of schema 6 never listens and serves the database as before.
 */
static void test_migrate_token_changes_are_additive(void **state)
{
	const struct ledger_migration *m = NULL;

	(void)state;
	for (unsigned i = 0; i < ledger_migration_count; i++) {
		if (strcmp(ledger_migrations[i].name, "007_token_changes.sql") == 0)
			m = &ledger_migrations[i];
	}
	assert_non_null(m);
	assert_int_equal(m->version, 7);
	assert_int_equal(m->oldest_binary_schema, 0);
	assert_non_null(strstr(m->sql, "pg_notify('ledger_tokens'"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_migrate_fit_table),
		cmocka_unit_test(test_migrate_never_migrated_is_older),
		cmocka_unit_test(test_migrate_table_is_ordered),
		cmocka_unit_test(test_migrate_token_changes_are_additive),
	};

	return cmocka_run_group_tests_name("migrate", tests, NULL, NULL);
}
