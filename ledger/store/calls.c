/*
 * ledger/store/calls.c: the tool-call operations on PostgreSQL: claim,
 * complete, renew, release and resolve. Each first tries its fast path
 * (ledger/store/fast.c) where it has one; otherwise it locks the request,
 * reads the call after the lock, asks ledger/core/decide.c, and writes
 * what was decided with its event in the same transaction.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/buf.h"
#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"
#include "ledger/core/render.h"
#include "ledger/store/fast.h"
#include "ledger/store/rows.h"
#include "ledger/store/statements.h"
#include "ledger/store/store.h"

/* The statements are laid out as SQL, not as C. */
/* clang-format off */
/* The general path's writes; the lock is held, so the clock is read now. */
static const struct store_stmt call_insert = {
	"call_insert",
	"INSERT INTO tool_calls (tenant, request_id, tool_call_id, tool, args_sha256, args,"
	"  tool_dedupes, state, fencing_token, claim_id, attempt_id, owner, lease_until, created_at)"
	" VALUES ($1, $2, $3, $4, $5, $6, $7, 'in_progress', 1, $8, $9, $10, "
	STORE_LEASE_FROM("clock_timestamp()", "$11") ", clock_timestamp())",
	11,
};

static const struct store_stmt call_reclaim = {
	"call_reclaim",
	"UPDATE tool_calls SET state = 'in_progress', fencing_token = fencing_token + 1,"
	"  claim_id = $5, attempt_id = $6, owner = $7, args = coalesce(args, $8),"
	"  lease_until = " STORE_LEASE_FROM("clock_timestamp()", "$9") ", renewed_at = NULL"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4",
	9,
};

static const struct store_stmt call_renew = {
	"call_renew",
	"UPDATE tool_calls SET lease_until = " STORE_LEASE_FROM("clock_timestamp()", "$5")
	", renewed_at = clock_timestamp()"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4",
	5,
};

/*
 * $4 token read, $5 outcome, $6 result, $7 completed_token, $8 by, $9 new
 * token; a result not kept: $6 NULL, $10 its length, $11 its SHA-256.
 */
static const struct store_stmt call_settle = {
	"call_settle",
	"UPDATE tool_calls SET state = $5, outcome = $5, result = $6, completed_token = $7,"
	"  completed_by = $8, completed_at = clock_timestamp(), fencing_token = $9,"
	"  result_bytes = $10::bigint, result_sha256 = $11"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4"
	" RETURNING " STORE_TS("completed_at"),
	11,
};

/* $4 token read, $5 new token */
static const struct store_stmt call_release = {
	"call_release",
	"UPDATE tool_calls SET state = 'released', fencing_token = $5"
	" WHERE tenant = $1 AND request_id = $2 AND tool_call_id = $3 AND fencing_token = $4",
	5,
};

/*
 * The first not_executed resolution that revoked token $4 or an older one
 * (the token it gave the key is above $4), whether anyone claimed the key
 * after it, and whether token $4's report already proved it wrong: read
 * when a holder reports that it did execute.
 */
static const struct store_stmt call_resolved_not_executed = {
	"call_resolved_not_executed",
	"SELECT (r.detail->>'fencing_token')::bigint,"
	"  EXISTS (SELECT 1 FROM events c WHERE c.tenant = r.tenant"
	"    AND c.request_id = r.request_id AND c.tool_call_id = r.tool_call_id"
	"    AND c.seq > r.seq AND c.type = 'claimed'),"
	"  EXISTS (SELECT 1 FROM events d WHERE d.tenant = r.tenant"
	"    AND d.request_id = r.request_id AND d.tool_call_id = r.tool_call_id"
	"    AND d.seq > r.seq AND d.type IN ('duplicate_execution', 'resolve_contradicted')"
	"    AND (d.detail->>'fencing_token')::bigint = $4)"
	" FROM events r"
	" WHERE r.tenant = $1 AND r.request_id = $2 AND r.tool_call_id = $3"
	"  AND r.type = 'resolved' AND r.detail->>'resolution' = 'not_executed'"
	"  AND (r.detail->>'fencing_token')::bigint > $4"
	" ORDER BY r.seq LIMIT 1",
	4,
};

/* clang-format on */

/*
 * Clears a result between tries, keeping nothing of the last one; on the
 * zeroed result of a first try it leaves it zeroed.
 */
static void reset_result(struct ledger_call_result *r)
{
	ledger_call_clear(&r->call);
	memset(r, 0, sizeof(*r));
}

/* --- claim --- */

/*
 * A rerun emitted another call under an existing ordinal: the sequence has
 * shifted, and the next ordinal could slip a repeated action in. The
 * attempt is revoked and the request fails with tool_call_divergence.
 */
static void diverge(struct store_step *st, const struct ledger_call_key *key,
		    struct store_locked *lk, struct store_event *revoked,
		    struct store_event *failed)
{
	struct ledger_request after = lk->request;
	struct ledger_buf client_error = LEDGER_BUF_INIT;

	after.status = LEDGER_REQUEST_FAILED;
	ledger_render_client_error(&client_error, "tool_call_divergence", key->request_id, &after,
				   LEDGER_BUDGET_NONE);
	store_rows_attempt_set(st, key->tenant, key->request_id, lk->named.attempt_id,
			       LEDGER_ATTEMPT_CANCEL_REQUESTED, 0, 0, NULL);
	store_event_start(revoked, "attempt_revoked", lk->named.attempt_id);
	store_event_str(revoked, "state",
			ledger_attempt_state_name(LEDGER_ATTEMPT_CANCEL_REQUESTED));
	store_event_str(revoked, "cause", "tool_call_divergence");
	store_event_add(st, key, revoked);
	/* The step owns the text until it runs: keep it in the event's buffer. */
	store_event_start(failed, "request_status", lk->named.attempt_id);
	store_event_str(failed, "status", ledger_attempt_request_status_name(after.status));
	store_event_str(failed, "client_error", "tool_call_divergence");
	store_event_add(st, key, failed);
	free(lk->client_error);
	lk->client_error = ledger_buf_steal(&client_error, NULL);
	store_rows_request_set(st, key->tenant, key->request_id, &after, lk->client_error);
}

/*
 * A claim granted: a new row under token 1, or the row taken again under
 * the next token, with the claimed event in the same commit.
 */
static enum ledger_err grant(struct store_step *st, const struct ledger_call_key *key,
			     const struct ledger_claim_request *req, enum ledger_claim_outcome o,
			     struct store_event *ev, struct ledger_call_result *out)
{
	const struct ledger_claim *c = &req->claim;
	int64_t next = o == LEDGER_CLAIM_NEW ? 1 : out->call.fencing_token + 1;
	char lease[24], token[24];
	enum ledger_err rc;

	store_step_fmt_int(lease, c->lease_ms);
	store_event_start(ev, "claimed", c->attempt_id);
	if (o == LEDGER_CLAIM_NEW) {
		const char *params[11] = {key->tenant,
					  key->request_id,
					  key->tool_call_id,
					  c->tool,
					  c->args_sha256,
					  req->args,
					  c->tool_dedupes ? "true" : "false",
					  c->claim_id,
					  c->attempt_id,
					  c->owner,
					  lease};
		store_event_claimed(ev, c, next, NULL);
		store_step_add(st, &call_insert, params);
	} else {
		const char *params[9] = {key->tenant, key->request_id, key->tool_call_id,
					 token,       c->claim_id,     c->attempt_id,
					 c->owner,    req->args,       lease};
		store_step_fmt_int(token, out->call.fencing_token);
		store_event_claimed(ev, c, next, ledger_call_state_name(out->call.state));
		store_step_add(st, &call_reclaim, params);
	}
	store_event_add(st, key, ev);
	rc = store_step_commit(st);
	if (rc == LEDGER_OK)
		store_rows_set_claimed(&out->call, c, next);
	return rc;
}

/* A refusal's event: its code, and the evidence a reviewer needs for a mismatch or a holder. */
static void refusal_event(struct store_event *ev, const struct ledger_claim *c,
			  enum ledger_claim_outcome o, const struct ledger_call_result *out)
{
	store_event_refused(ev, "claim", ledger_decide_claim_code(o), c->attempt_id);
	if (o == LEDGER_CLAIM_ARGS_MISMATCH) {
		store_event_str(ev, "field", out->mismatch);
		store_event_str(ev, "expected_args_sha256", out->call.args_sha256);
		store_event_str(ev, "got_args_sha256", c->args_sha256);
	}
	if (o == LEDGER_CLAIM_IN_PROGRESS) {
		store_event_int(ev, "fencing_token", out->call.fencing_token);
		store_event_str(ev, "holder_attempt_id", out->call.attempt_id);
		store_event_str(ev, "holder_owner", out->call.owner);
	}
	store_event_str(ev, "owner", c->owner);
}

static enum ledger_err claim_locked(struct ledger_store_conn *conn,
				    const struct ledger_call_key *key,
				    const struct ledger_claim_request *req,
				    struct ledger_call_result *out)
{
	const struct ledger_claim *c = &req->claim;
	const struct store_lookup look = {.attempt_id = c->attempt_id,
					  .tool_call_id = key->tool_call_id};
	enum ledger_standing attempt = LEDGER_STANDING_NOT_GIVEN;
	enum ledger_claim_outcome o;
	struct store_locked lk;
	struct store_step st;
	struct store_event ev, revoked, failed;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	memset(&revoked, 0, sizeof(revoked));
	memset(&failed, 0, sizeof(failed));
	store_step_begin(&st, conn);
	rc = store_rows_lock_and_read(conn, key->tenant, key->request_id, true, &look, &lk,
				      &out->call);
	if (rc != LEDGER_OK)
		goto out;
	if (c->attempt_id != NULL)
		attempt = ledger_attempt_standing(&lk.request, &lk.named);
	o = ledger_decide_claim(c, &out->call, lk.request.attempt_count > 0, attempt,
				&out->mismatch);
	out->outcome.claim = o;
	out->no_attempts = lk.request.attempt_count == 0;

	switch (o) {
	case LEDGER_CLAIM_NEW:
	case LEDGER_CLAIM_RECLAIM:
		rc = grant(&st, key, req, o, &ev, out);
		break;
	case LEDGER_CLAIM_HELD:
	case LEDGER_CLAIM_REPLAY:
	case LEDGER_CLAIM_RESULT_NOT_KEPT: /* a replay's answer: nothing to record */
	case LEDGER_CLAIM_RESULT_EXPIRED:
		rc = store_step_rollback(conn);
		break;
	case LEDGER_CLAIM_ATTEMPT_NOT_FOUND:
	case LEDGER_CLAIM_ATTEMPT_REQUIRED:
	case LEDGER_CLAIM_ARGS_MISMATCH:
	case LEDGER_CLAIM_ATTEMPT_FENCED:
	case LEDGER_CLAIM_IN_PROGRESS:
	case LEDGER_CLAIM_OUTCOME_UNKNOWN:
		/* A request this refusal would create has no history to add to. */
		if (lk.created) {
			rc = store_step_rollback(conn);
			break;
		}
		refusal_event(&ev, c, o, out);
		store_event_add(&st, key, &ev);
		if (o == LEDGER_CLAIM_ARGS_MISMATCH && attempt == LEDGER_STANDING_HAS_RIGHTS)
			diverge(&st, key, &lk, &revoked, &failed);
		rc = store_step_commit(&st);
		break;
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_event_free(&revoked);
	store_event_free(&failed);
	store_rows_locked_clear(&lk);
	return rc;
}

static enum ledger_err claim_op(struct ledger_store_conn *conn, const struct ledger_call_key *key,
				const struct ledger_claim_request *req,
				struct ledger_call_result *out)
{
	bool done = false;
	enum ledger_err rc;

	if (req->claim.attempt_id == NULL && ledger_store_fast_paths()) {
		struct ledger_batch_op fast = {
			.kind = LEDGER_BATCH_CLAIM, .key = *key, .claim = req};

		rc = store_fast_run(conn, &fast, out, &done);
		if (rc != LEDGER_OK || done)
			return rc;
	}
	return claim_locked(conn, key, req, out);
}

enum ledger_err ledger_store_claim(struct ledger_store_conn *conn,
				   const struct ledger_call_key *key,
				   const struct ledger_claim_request *req,
				   struct ledger_call_result *out)
{
	struct store_retry r = {0};
	enum ledger_err rc = LEDGER_OK;

	memset(out, 0, sizeof(*out));
	while (store_step_retry(conn, &r, &rc)) {
		if (store_step_retrying(&r)) /* what the failed try left */
			reset_result(out);
		rc = claim_op(conn, key, req, out);
	}
	return rc;
}

/* --- complete --- */

/*
 * A holder reports a final outcome (the effect happened) under a token a
 * not_executed resolution revoked: the resolution was wrong. If the key was
 * claimed since, the effect may have happened twice. Queues the event that
 * says so on @p st and marks @p out; nothing when no such resolution exists.
 */
static enum ledger_err check_resolution(struct store_step *st, const struct ledger_call_key *key,
					const char *given, const struct ledger_completion *c,
					struct ledger_call_result *out, struct store_event *ev)
{
	const char *params[4] = {key->tenant, key->request_id, key->tool_call_id, given};
	enum ledger_err rc;
	int64_t resolved_token;
	bool newer;

	store_step_add(st, &call_resolved_not_executed, params);
	rc = store_step_run(st);
	/* None, or already said for this holder (a retried report is not counted twice). */
	if (rc != LEDGER_OK || PQntuples(st->res[0]) == 0 ||
	    store_step_get_bool(st->res[0], 0, 2)) {
		store_step_clear(st);
		return rc;
	}
	resolved_token = store_step_get_int(st->res[0], 0, 0);
	newer = store_step_get_bool(st->res[0], 0, 1);
	store_step_clear(st);
	out->contradiction = newer ? LEDGER_CONTRADICTION_DUPLICATE : LEDGER_CONTRADICTION_RESOLVE;
	store_event_start(ev, newer ? "duplicate_execution" : "resolve_contradicted",
			  out->call.attempt_id);
	store_event_int(ev, "fencing_token", c->fencing_token);
	store_event_str(ev, "outcome", c->succeeded ? "succeeded" : "failed");
	store_event_int(ev, "resolved_token", resolved_token);
	store_event_int(ev, "current_token", out->call.fencing_token);
	store_event_bool(ev, "newer_holder", newer);
	return LEDGER_OK;
}

/*
 * A final outcome stored, from the current holder or late from an older
 * one (the effect happened all the same), with its event and any
 * contradiction it proved; @p out gets the row as it now stands.
 */
static enum ledger_err settle(struct store_step *st, const struct ledger_call_key *key,
			      const struct ledger_completion *c, enum ledger_complete_outcome o,
			      struct store_event *ev, struct store_event *contradiction,
			      struct ledger_call_result *out)
{
	enum ledger_completed_by by =
		o == LEDGER_COMPLETE_STORED ? LEDGER_COMPLETED_HOLDER : LEDGER_COMPLETED_LATE;
	char read_token[24], given[24], nbytes[24];
	const char *params[11] = {key->tenant,
				  key->request_id,
				  key->tool_call_id,
				  read_token,
				  c->succeeded ? "succeeded" : "failed",
				  c->result_not_kept ? NULL : c->result,
				  given,
				  store_rows_completed_by_name(by),
				  read_token,
				  c->result_not_kept ? nbytes : NULL,
				  c->result_not_kept ? c->result_digest.sha256 : NULL};
	enum ledger_err rc;

	store_step_fmt_int(nbytes, c->result_digest.bytes);
	store_step_fmt_int(read_token, out->call.fencing_token);
	store_step_fmt_int(given, c->fencing_token);
	store_event_start(ev, o == LEDGER_COMPLETE_STORED ? "completed" : "late_completion",
			  out->call.attempt_id);
	store_event_completion(ev, c);
	if (o == LEDGER_COMPLETE_LATE) {
		store_event_int(ev, "current_token", out->call.fencing_token);
		store_event_str(ev, "previous_state", ledger_call_state_name(out->call.state));
	}
	store_step_add(st, &call_settle, params);
	store_event_add(st, key, ev);
	if (contradiction->type != NULL)
		store_event_add(st, key, contradiction);
	rc = store_step_commit(st);
	if (rc == LEDGER_OK)
		rc = store_rows_set_completed(&out->call, c, st->res[0], 0, 0, by);
	return rc;
}

/*
 * The completion @p c as decided against @p call, in @p given: with the
 * digest of its result filled in when the stored one is kept as its digest
 * only, or the stored result's digest filled in when @p c is (the same
 * completion may arrive whole at one ledgerd and as a digest at another).
 */
static enum ledger_err fill_digests(const struct ledger_completion *c, struct ledger_call *call,
				    struct ledger_completion *given)
{
	*given = *c;
	if (!ledger_decide_complete_wants_digest(c, call))
		return LEDGER_OK;
	if (c->result_not_kept)
		return ledger_call_digest_result(call->result, call->result_len,
						 &call->result_digest)
			       ? LEDGER_OK
			       : LEDGER_ERR_NOMEM;
	return ledger_call_digest_result(c->result, c->result_len, &given->result_digest)
		       ? LEDGER_OK
		       : LEDGER_ERR_NOMEM;
}

static enum ledger_err complete_locked(struct ledger_store_conn *conn,
				       const struct ledger_call_key *key,
				       const struct ledger_completion *asked,
				       struct ledger_call_result *out)
{
	struct ledger_completion completion;
	const struct ledger_completion *c = &completion;
	enum ledger_complete_outcome o;
	struct store_locked lk;
	const struct store_lookup look = {.tool_call_id = key->tool_call_id};
	struct store_step st;
	struct store_event ev, contradiction;
	char read_token[24], given[24];
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	memset(&contradiction, 0, sizeof(contradiction));
	store_step_begin(&st, conn);
	rc = store_rows_lock_and_read(conn, key->tenant, key->request_id, false, &look, &lk,
				      &out->call);
	if (rc != LEDGER_OK)
		goto out;
	rc = fill_digests(asked, &out->call, &completion);
	if (rc != LEDGER_OK) {
		store_step_abort(conn);
		goto out;
	}
	o = ledger_decide_complete(c, &out->call);
	out->outcome.complete = o;
	store_step_fmt_int(read_token, out->call.fencing_token);
	store_step_fmt_int(given, c->fencing_token);
	/* A final outcome from a revoked holder may prove a not_executed resolution wrong. */
	if ((o == LEDGER_COMPLETE_LATE || o == LEDGER_COMPLETE_ALREADY_COMPLETED) &&
	    !c->retryable) {
		rc = check_resolution(&st, key, given, c, out, &contradiction);
		if (rc != LEDGER_OK)
			goto out;
	}

	switch (o) {
	case LEDGER_COMPLETE_NOT_FOUND:
	case LEDGER_COMPLETE_RESULT_EXPIRED:
	case LEDGER_COMPLETE_REPEATED:
		rc = store_step_rollback(conn);
		break;
	case LEDGER_COMPLETE_STALE_TOKEN:
	case LEDGER_COMPLETE_ALREADY_COMPLETED:
		store_event_refused(&ev, "complete", ledger_decide_complete_code(o),
				    out->call.attempt_id);
		store_event_completion(&ev, c);
		store_event_int(&ev, "current_token", out->call.fencing_token);
		store_event_add(&st, key, &ev);
		if (contradiction.type != NULL)
			store_event_add(&st, key, &contradiction);
		rc = store_step_commit(&st);
		break;
	case LEDGER_COMPLETE_STORED:
	case LEDGER_COMPLETE_LATE:
		rc = settle(&st, key, c, o, &ev, &contradiction, out);
		break;
	case LEDGER_COMPLETE_RELEASED: {
		const char *params[5] = {key->tenant, key->request_id, key->tool_call_id,
					 read_token, read_token};
		store_event_start(&ev, "released", out->call.attempt_id);
		store_event_completion(&ev, c);
		store_step_add(&st, &call_release, params);
		store_event_add(&st, key, &ev);
		rc = store_step_commit(&st);
		if (rc == LEDGER_OK)
			out->call.state = LEDGER_CALL_RELEASED;
		break;
	}
	}
out:
	store_step_clear(&st);
	store_event_free(&contradiction);
	store_event_free(&ev);
	store_rows_locked_clear(&lk);
	return rc;
}

static enum ledger_err complete_op(struct ledger_store_conn *conn,
				   const struct ledger_call_key *key,
				   const struct ledger_completion *c,
				   struct ledger_call_result *out)
{
	bool done = false;
	enum ledger_err rc;

	if (ledger_store_fast_paths()) {
		struct ledger_batch_op fast = {
			.kind = LEDGER_BATCH_COMPLETE, .key = *key, .completion = c};

		rc = store_fast_run(conn, &fast, out, &done);
		if (rc != LEDGER_OK || done)
			return rc;
	}
	return complete_locked(conn, key, c, out);
}

enum ledger_err ledger_store_complete(struct ledger_store_conn *conn,
				      const struct ledger_call_key *key,
				      const struct ledger_completion *c,
				      struct ledger_call_result *out)
{
	struct store_retry r = {0};
	enum ledger_err rc = LEDGER_OK;

	memset(out, 0, sizeof(*out));
	while (store_step_retry(conn, &r, &rc)) {
		if (store_step_retrying(&r)) /* what the failed try left */
			reset_result(out);
		rc = complete_op(conn, key, c, out);
	}
	return rc;
}

/* --- renew --- */

static enum ledger_err renew_op(struct ledger_store_conn *conn, const struct ledger_call_key *key,
				int64_t fencing_token, int64_t lease_ms,
				struct ledger_call_result *out)
{
	char token[24], lease[24];
	const char *params[5] = {key->tenant, key->request_id, key->tool_call_id, token, lease};
	enum ledger_standing attempt = LEDGER_STANDING_NOT_GIVEN;
	enum ledger_renew_outcome o;
	struct store_locked lk;
	const struct store_lookup look = {.tool_call_id = key->tool_call_id};
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	store_step_fmt_int(token, fencing_token);
	store_step_fmt_int(lease, lease_ms);
	store_step_begin(&st, conn);

	if (ledger_store_fast_paths()) {
		struct ledger_batch_op fast = {.kind = LEDGER_BATCH_RENEW,
					       .key = *key,
					       .fencing_token = fencing_token,
					       .lease_ms = lease_ms};
		bool done = false;

		rc = store_fast_run(conn, &fast, out, &done);
		if (rc != LEDGER_OK || done)
			goto out;
	}

	rc = store_rows_lock_and_read(conn, key->tenant, key->request_id, false, &look, &lk,
				      &out->call);
	if (rc != LEDGER_OK)
		goto out;
	/* A claim made under an attempt is fenced with it. */
	if (out->call.attempt_id[0] != '\0')
		attempt = ledger_attempt_standing(&lk.request, &lk.of_call);
	o = ledger_decide_renew(fencing_token, &out->call, attempt);
	out->outcome.renew = o;
	switch (o) {
	case LEDGER_RENEW_NOT_FOUND:
	case LEDGER_RENEW_RESULT_EXPIRED:
		rc = store_step_rollback(conn);
		break;
	case LEDGER_RENEW_STALE_TOKEN:
	case LEDGER_RENEW_ATTEMPT_FENCED:
	case LEDGER_RENEW_OUTCOME_UNKNOWN:
		store_event_refused(&ev, "renew", ledger_decide_renew_code(o),
				    out->call.attempt_id);
		store_event_int(&ev, "fencing_token", fencing_token);
		store_event_int(&ev, "current_token", out->call.fencing_token);
		store_event_add(&st, key, &ev);
		rc = store_step_commit(&st);
		break;
	case LEDGER_RENEW_RENEWED:
		store_step_add(&st, &call_renew, params);
		rc = store_step_commit(&st);
		out->call.lease_ms_left = lease_ms;
		break;
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_rows_locked_clear(&lk);
	return rc;
}

enum ledger_err ledger_store_renew(struct ledger_store_conn *conn,
				   const struct ledger_call_key *key, int64_t fencing_token,
				   int64_t lease_ms, struct ledger_call_result *out)
{
	struct store_retry r = {0};
	enum ledger_err rc = LEDGER_OK;

	memset(out, 0, sizeof(*out));
	while (store_step_retry(conn, &r, &rc)) {
		if (store_step_retrying(&r)) /* what the failed try left */
			reset_result(out);
		rc = renew_op(conn, key, fencing_token, lease_ms, out);
	}
	return rc;
}

/* --- release --- */

static enum ledger_err release_op(struct ledger_store_conn *conn, const struct ledger_call_key *key,
				  int64_t fencing_token, const char *reason,
				  struct ledger_call_result *out)
{
	char token[24];
	const char *params[5] = {key->tenant, key->request_id, key->tool_call_id, token, token};
	enum ledger_release_outcome o;
	struct store_locked lk;
	const struct store_lookup look = {.tool_call_id = key->tool_call_id};
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	store_step_fmt_int(token, fencing_token);
	store_step_begin(&st, conn);
	rc = store_rows_lock_and_read(conn, key->tenant, key->request_id, false, &look, &lk,
				      &out->call);
	if (rc != LEDGER_OK)
		goto out;
	o = ledger_decide_release(fencing_token, &out->call);
	out->outcome.release = o;
	switch (o) {
	case LEDGER_RELEASE_NOT_FOUND:
	case LEDGER_RELEASE_RESULT_EXPIRED:
	case LEDGER_RELEASE_REPEATED:
		rc = store_step_rollback(conn);
		break;
	case LEDGER_RELEASE_STALE_TOKEN:
		store_event_refused(&ev, "release", ledger_decide_release_code(o),
				    out->call.attempt_id);
		store_event_int(&ev, "fencing_token", fencing_token);
		store_event_int(&ev, "current_token", out->call.fencing_token);
		store_event_add(&st, key, &ev);
		rc = store_step_commit(&st);
		break;
	case LEDGER_RELEASE_RELEASED:
		store_event_start(&ev, "released", out->call.attempt_id);
		store_event_int(&ev, "fencing_token", fencing_token);
		store_event_str(&ev, "reason", reason);
		store_step_add(&st, &call_release, params);
		store_event_add(&st, key, &ev);
		rc = store_step_commit(&st);
		if (rc == LEDGER_OK)
			out->call.state = LEDGER_CALL_RELEASED;
		break;
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_rows_locked_clear(&lk);
	return rc;
}

enum ledger_err ledger_store_release(struct ledger_store_conn *conn,
				     const struct ledger_call_key *key, int64_t fencing_token,
				     const char *reason, struct ledger_call_result *out)
{
	struct store_retry r = {0};
	enum ledger_err rc = LEDGER_OK;

	memset(out, 0, sizeof(*out));
	while (store_step_retry(conn, &r, &rc)) {
		if (store_step_retrying(&r)) /* what the failed try left */
			reset_result(out);
		rc = release_op(conn, key, fencing_token, reason, out);
	}
	return rc;
}

/* --- resolve --- */

static const char *resolution_name(enum ledger_resolution r)
{
	switch (r) {
	case LEDGER_RESOLVE_SUCCEEDED:
		return "succeeded";
	case LEDGER_RESOLVE_FAILED:
		return "failed";
	case LEDGER_RESOLVE_NOT_EXECUTED:
		return "not_executed";
	}
	abort();
}

static enum ledger_err resolve_op(struct ledger_store_conn *conn, const struct ledger_call_key *key,
				  enum ledger_resolution resolution, const char *result,
				  size_t result_len, const char *note,
				  struct ledger_call_result *out)
{
	char read_token[24], next_token[24];
	enum ledger_resolve_outcome o;
	enum ledger_call_state previous;
	struct store_locked lk;
	const struct store_lookup look = {.tool_call_id = key->tool_call_id};
	struct store_step st;
	struct store_event ev;
	enum ledger_err rc;

	memset(&lk, 0, sizeof(lk));
	memset(&ev, 0, sizeof(ev));
	store_step_begin(&st, conn);
	rc = store_rows_lock_and_read(conn, key->tenant, key->request_id, false, &look, &lk,
				      &out->call);
	if (rc != LEDGER_OK)
		goto out;
	o = ledger_decide_resolve(resolution, result, result_len, &out->call);
	out->outcome.resolve = o;
	previous = out->call.state;
	store_step_fmt_int(read_token, out->call.fencing_token);
	/* Whoever held the call is revoked: the next holder gets a higher token. */
	store_step_fmt_int(next_token, out->call.fencing_token + 1);

	switch (o) {
	case LEDGER_RESOLVE_NOT_FOUND:
	case LEDGER_RESOLVE_RESULT_EXPIRED:
	case LEDGER_RESOLVE_REPEATED:
		rc = store_step_rollback(conn);
		break;
	case LEDGER_RESOLVE_ALREADY_COMPLETED:
		store_event_refused(&ev, "resolve", ledger_decide_resolve_code(o), NULL);
		store_event_str(&ev, "resolution", resolution_name(resolution));
		store_event_add(&st, key, &ev);
		rc = store_step_commit(&st);
		break;
	case LEDGER_RESOLVE_SETTLED:
		store_event_start(&ev, "resolved", NULL);
		store_event_str(&ev, "resolution", resolution_name(resolution));
		store_event_str(&ev, "previous_state", ledger_call_state_name(previous));
		store_event_int(&ev, "fencing_token", out->call.fencing_token + 1);
		store_event_str(&ev, "note", note);
		if (resolution == LEDGER_RESOLVE_NOT_EXECUTED) {
			const char *params[5] = {key->tenant, key->request_id, key->tool_call_id,
						 read_token, next_token};
			store_step_add(&st, &call_release, params);
		} else {
			/* A resolution keeps its result whole, whatever its size. */
			const char *params[11] = {key->tenant,
						  key->request_id,
						  key->tool_call_id,
						  read_token,
						  resolution_name(resolution),
						  result != NULL ? result : "null",
						  next_token,
						  "resolve",
						  next_token,
						  NULL,
						  NULL};
			store_step_add(&st, &call_settle, params);
		}
		store_event_add(&st, key, &ev);
		rc = store_step_commit(&st);
		if (rc != LEDGER_OK)
			break;
		out->call.fencing_token++;
		out->call.lease_ms_left = 0;
		if (resolution == LEDGER_RESOLVE_NOT_EXECUTED) {
			out->call.state = LEDGER_CALL_RELEASED;
		} else {
			struct ledger_completion as = {
				.fencing_token = out->call.fencing_token,
				.succeeded = resolution == LEDGER_RESOLVE_SUCCEEDED,
				.result = result != NULL ? result : "null",
				.result_len = result != NULL ? result_len : 4,
			};
			rc = store_rows_set_completed(&out->call, &as, st.res[0], 0, 0,
						      LEDGER_COMPLETED_RESOLVE);
		}
		break;
	}
out:
	store_step_clear(&st);
	store_event_free(&ev);
	store_rows_locked_clear(&lk);
	return rc;
}

enum ledger_err ledger_store_resolve(struct ledger_store_conn *conn,
				     const struct ledger_call_key *key,
				     enum ledger_resolution resolution, const char *result,
				     size_t result_len, const char *note,
				     struct ledger_call_result *out)
{
	struct store_retry r = {0};
	enum ledger_err rc = LEDGER_OK;

	memset(out, 0, sizeof(*out));
	while (store_step_retry(conn, &r, &rc)) {
		if (store_step_retrying(&r)) /* what the failed try left */
			reset_result(out);
		rc = resolve_op(conn, key, resolution, result, result_len, note, out);
	}
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_calls_statements[] = {
	&call_insert, &call_reclaim, &call_renew,
	&call_settle, &call_release, &call_resolved_not_executed,
	NULL,
};
