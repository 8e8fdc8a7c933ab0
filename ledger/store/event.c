/*
 * ledger/store/event.c: the history. Every change and every refusal is an
 * event, built as its detail is known and inserted in the transaction
 * that makes the change (docs/design.md invariant 11: events are only
 * appended).
 */
#include "ledger/store/event.h"

#include <string.h>

#include "ledger/common/jsonw.h"
#include "ledger/store/statements.h"

/* clang-format off */
static const struct store_stmt event_insert = {
	"event_insert",
	"INSERT INTO event_log (tenant, request_id, type, attempt_id, tool_call_id, detail)"
	" VALUES ($1, $2, $3, $4, $5, $6::jsonb)",
	6,
};

/* clang-format on */

void store_event_start(struct store_event *ev, const char *type, const char *attempt_id)
{
	memset(ev, 0, sizeof(*ev));
	ev->type = type;
	ev->attempt_id = attempt_id != NULL && attempt_id[0] != '\0' ? attempt_id : NULL;
	ledger_jsonw_init(&ev->w, &ev->detail);
	ledger_jsonw_object_begin(&ev->w);
}

void store_event_refused(struct store_event *ev, const char *operation, const char *code,
			 const char *attempt_id)
{
	store_event_start(ev, "refused", attempt_id);
	ledger_jsonw_key(&ev->w, "operation");
	ledger_jsonw_string(&ev->w, operation);
	ledger_jsonw_key(&ev->w, "code");
	ledger_jsonw_string(&ev->w, code);
}

void store_event_int(struct store_event *ev, const char *key, int64_t v)
{
	ledger_jsonw_key(&ev->w, key);
	ledger_jsonw_int(&ev->w, v);
}

void store_event_bool(struct store_event *ev, const char *key, bool v)
{
	ledger_jsonw_key(&ev->w, key);
	ledger_jsonw_bool(&ev->w, v);
}

void store_event_str(struct store_event *ev, const char *key, const char *s)
{
	if (s == NULL || s[0] == '\0')
		return;
	ledger_jsonw_key(&ev->w, key);
	ledger_jsonw_string(&ev->w, s);
}

void store_event_free(struct store_event *ev)
{
	ledger_buf_free(&ev->detail);
}

void store_event_add(struct store_step *st, const struct ledger_call_key *key,
		     struct store_event *ev)
{
	const char *params[6];

	ledger_jsonw_object_end(&ev->w);
	params[0] = key->tenant;
	params[1] = key->request_id;
	params[2] = ev->type;
	params[3] = ev->attempt_id;
	params[4] = key->tool_call_id;
	params[5] = ev->detail.oom ? "{}" : ev->detail.data;
	store_step_add(st, &event_insert, params);
}

/* --- what a claim and a completion say --- */

void store_event_claimed(struct store_event *ev, const struct ledger_claim *c, int64_t token,
			 const char *from)
{
	store_event_int(ev, "fencing_token", token);
	store_event_int(ev, "lease_ms", c->lease_ms);
	store_event_str(ev, "tool", c->tool);
	store_event_str(ev, "args_sha256", c->args_sha256);
	store_event_str(ev, "owner", c->owner);
	if (c->tool_dedupes) {
		ledger_jsonw_key(&ev->w, "tool_dedupes");
		ledger_jsonw_bool(&ev->w, true);
	}
	store_event_str(ev, "previous_state", from);
}

void store_event_completion(struct store_event *ev, const struct ledger_completion *c)
{
	ledger_jsonw_key(&ev->w, "outcome");
	ledger_jsonw_string(&ev->w, c->succeeded ? "succeeded" : "failed");
	if (c->retryable) {
		ledger_jsonw_key(&ev->w, "retryable");
		ledger_jsonw_bool(&ev->w, true);
	}
	store_event_int(ev, "fencing_token", c->fencing_token);
	/* As the events view says it of a holder's completion kept in its row (sql/008). */
	if (c->result_not_kept) {
		store_event_bool(ev, "result_kept", false);
		store_event_int(ev, "result_bytes", c->result_digest.bytes);
		store_event_str(ev, "result_sha256", c->result_digest.sha256);
	}
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_event_statements[] = {
	&event_insert,
	NULL,
};
