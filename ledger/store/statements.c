/*
 * ledger/store/statements.c: every statement the store prepares, file by
 * file, by name: `ledgerd sql NAME` prints one, so that make bench runs the
 * very same SQL through pgbench and tests can read them all.
 */
#include <string.h>

#include "ledger/store/statements.h"
#include "ledger/store/store.h"

/* Every statement the store prepares, file by file. */
static const struct store_stmt *const *const statement_files[] = {
	store_admin_statements, store_answers_statements,       store_attempt_fast_statements,
	store_batch_statements,
	store_calls_statements, store_client_events_statements, store_event_statements,
	store_fast_statements,  store_failover_statements,      store_gc_statements,
	store_reads_statements, store_rows_statements,          store_tokens_statements,
};

const char *ledger_store_sql(const char *name)
{
	for (size_t i = 0; ledger_store_sql_name(i) != NULL; i++)
		if (strcmp(ledger_store_sql_name(i), name) == 0)
			return ledger_store_sql_text(i);
	return NULL;
}

/* The @p i-th statement of all the files, or NULL past the last. */
static const struct store_stmt *statement_at(size_t i)
{
	for (size_t f = 0; f < sizeof(statement_files) / sizeof(statement_files[0]); f++) {
		for (const struct store_stmt *const *s = statement_files[f]; *s != NULL; s++) {
			if (i == 0)
				return *s;
			i--;
		}
	}
	return NULL;
}

const char *ledger_store_sql_name(size_t i)
{
	const struct store_stmt *s = statement_at(i);

	return s != NULL ? s->name : NULL;
}

const char *ledger_store_sql_text(size_t i)
{
	const struct store_stmt *s = statement_at(i);

	return s != NULL ? s->sql : NULL;
}
