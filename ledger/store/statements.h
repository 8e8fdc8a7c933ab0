/*
 * ledger/store/statements.h: each store file's statements, NULL-terminated,
 * so that ledger/store/statements.c can list them all by name.
 */
#ifndef LEDGER_STORE_STATEMENTS_H
#define LEDGER_STORE_STATEMENTS_H

#include "ledger/store/step.h"

/* Each store file's statements, NULL-terminated. */
extern const struct store_stmt *const store_admin_statements[];
extern const struct store_stmt *const store_answers_statements[];
extern const struct store_stmt *const store_batch_statements[];
extern const struct store_stmt *const store_calls_statements[];
extern const struct store_stmt *const store_client_events_statements[];
extern const struct store_stmt *const store_event_statements[];
extern const struct store_stmt *const store_fast_statements[];
extern const struct store_stmt *const store_attempt_fast_statements[];
extern const struct store_stmt *const store_failover_statements[];
extern const struct store_stmt *const store_gc_statements[];
extern const struct store_stmt *const store_reads_statements[];
extern const struct store_stmt *const store_rows_statements[];
extern const struct store_stmt *const store_tokens_statements[];

#endif
