/*
 * ledger/store/answers.c: the answers requests' clients were sent (API
 * 1.1), one per request, written in the transaction that ends the request
 * (a finish, or a failover decision that closes it: docs/design.md
 * invariant 9) and read by GET /v1/requests/{rid}/answer. Retention
 * removes an answer with its request, through the foreign key of
 * sql/006_gateway.sql.
 */
#include <stdlib.h>
#include <string.h>

#include "ledger/store/answers.h"
#include "ledger/store/statements.h"

/* clang-format off */
/* Once: a request ends once, and a retried call that ended it writes nothing. */
static const struct store_stmt answer_insert = {
	"answer_insert",
	"INSERT INTO answers (tenant, request_id, status, content_type, kept, body_b64, bytes,"
	"  sha256) VALUES ($1, $2, $3::integer, $4, $5::boolean, $6, $7::bigint, $8)"
	" ON CONFLICT (tenant, request_id) DO NOTHING",
	8,
};

static const struct store_stmt answer_read = {
	"answer_read",
	"SELECT status, content_type, kept, body_b64, bytes, sha256 FROM answers"
	" WHERE tenant = $1 AND request_id = $2",
	2,
};
/* clang-format on */

void store_answers_add(struct store_step *st, const struct ledger_call_key *key,
		       const struct ledger_answer *a)
{
	const char *params[8] = {
		key->tenant,
		key->request_id,
		store_step_int(st, a->status),
		a->content_type,
		a->kept ? "true" : "false",
		a->kept ? a->body_b64 : NULL,
		store_step_int(st, a->bytes),
		a->sha256,
	};

	store_step_add(st, &answer_insert, params);
}

void ledger_store_answer_result_clear(struct ledger_answer_result *r)
{
	if (r == NULL)
		return;
	free(r->content_type);
	free(r->body_b64);
	memset(r, 0, sizeof(*r));
}

enum ledger_err ledger_store_answer_get(struct ledger_store_conn *conn, const char *tenant,
					const char *request_id, struct ledger_answer_result *out)
{
	const char *key[2] = {tenant, request_id};
	struct store_step st;
	enum ledger_err rc;

	memset(out, 0, sizeof(*out));
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	store_step_begin(&st, conn);
	store_step_add(&st, &answer_read, key);
	rc = store_step_run(&st);
	if (rc != LEDGER_OK || PQntuples(st.res[0]) == 0)
		goto out;
	out->found = true;
	out->answer.status = store_step_get_int(st.res[0], 0, 0);
	out->content_type = store_step_get_dup(st.res[0], 0, 1, NULL);
	out->answer.kept = store_step_get_bool(st.res[0], 0, 2);
	if (out->answer.kept)
		out->body_b64 = store_step_get_dup(st.res[0], 0, 3, NULL);
	out->answer.bytes = store_step_get_int(st.res[0], 0, 4);
	store_step_get_text(st.res[0], 0, 5, out->answer.sha256, sizeof(out->answer.sha256));
	if (out->content_type == NULL || (out->answer.kept && out->body_b64 == NULL)) {
		ledger_store_answer_result_clear(out);
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	out->answer.content_type = out->content_type;
	out->answer.body_b64 = out->body_b64;
out:
	store_step_clear(&st);
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_answers_statements[] = {
	&answer_insert,
	&answer_read,
	NULL,
};
