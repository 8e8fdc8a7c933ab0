/*
 * ledger/core/decide.c: the tool-call state machine of docs/design.md as pure
 * functions. The state a function sees is the effective one: the store
 * derives UNKNOWN from an IN_PROGRESS row whose lease ran out by the
 * database clock, after taking the request's lock.
 *
 *             claim: NEW                        complete by holder: STORED
 *   ABSENT ----------------> IN_PROGRESS -----------------------------> SUCCEEDED
 *                             |   ^    |                                  or FAILED
 *       release: RELEASED,    |   |    | lease runs out                 (final: every
 *       retryable failure:    |   |    | (derived from the clock)        claim gets a
 *       RELEASED              v   |    v                                 REPLAY; a
 *                       RELEASED  |  UNKNOWN                             TOMBSTONE
 *                             |   |    |                                 after retention)
 *                             `---+----' claim: RECLAIM (from UNKNOWN only
 *                                        when the tool dedupes)
 *
 *   Also: a final completion from an older holder, or from a holder whose
 *   lease ran out, is accepted (LATE: the effect happened); resolve settles
 *   IN_PROGRESS, UNKNOWN or RELEASED to a final state or to RELEASED
 *   (SETTLED). A stale holder can never release (STALE_TOKEN). A final call
 *   whose result was stored as its length and SHA-256 only answers a claim
 *   RESULT_NOT_KEPT where it would REPLAY: it has nothing to replay.
 *
 * Every new holder (NEW, RECLAIM) and every resolve takes the next fencing
 * token, so a token identifies one holder for the life of the key.
 */
#include "ledger/core/decide.h"

#include <stdlib.h>
#include <string.h>

static bool is_final(enum ledger_call_state s)
{
	return s == LEDGER_CALL_SUCCEEDED || s == LEDGER_CALL_FAILED;
}

static bool text_equal(const char *given, const char *stored)
{
	return strcmp(given != NULL ? given : "", stored) == 0;
}

static bool result_equal(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static bool digest_equal(const struct ledger_result_digest *a, const struct ledger_result_digest *b)
{
	return a->sha256[0] != '\0' && a->bytes == b->bytes && strcmp(a->sha256, b->sha256) == 0;
}

/*
 * The same result text: compared byte for byte while both sides keep it,
 * else by length and SHA-256 (the side kept whole has its digest filled by
 * the caller, or none, which matches nothing).
 */
static bool same_result(const struct ledger_completion *c, const struct ledger_call *call)
{
	if (!c->result_not_kept && !call->result_not_kept)
		return result_equal(c->result, c->result_len, call->result, call->result_len);
	return digest_equal(&c->result_digest, &call->result_digest);
}

/* Check 3 of the claim table: the same key must mean the same call. */
static const char *claim_mismatch(const struct ledger_claim *claim, const struct ledger_call *call)
{
	if (!text_equal(claim->args_sha256, call->args_sha256))
		return "args";
	/* A tombstone keeps only the fingerprint: the rest cannot be compared. */
	if (call->state == LEDGER_CALL_TOMBSTONE)
		return NULL;
	if (!text_equal(claim->tool, call->tool))
		return "tool";
	if (claim->tool_dedupes != call->tool_dedupes)
		return "tool_dedupes";
	return NULL;
}

enum ledger_claim_outcome ledger_decide_claim(const struct ledger_claim *claim,
					      const struct ledger_call *call,
					      bool request_has_attempts,
					      enum ledger_standing attempt,
					      const char **mismatch_out)
{
	const char *mismatch = NULL;

	*mismatch_out = NULL;
	if (attempt == LEDGER_STANDING_NOT_FOUND)
		return LEDGER_CLAIM_ATTEMPT_NOT_FOUND;
	if (attempt == LEDGER_STANDING_NOT_GIVEN && request_has_attempts)
		return LEDGER_CLAIM_ATTEMPT_REQUIRED;
	if (call->state != LEDGER_CALL_ABSENT) {
		mismatch = claim_mismatch(claim, call);
		if (mismatch != NULL) {
			*mismatch_out = mismatch;
			return LEDGER_CLAIM_ARGS_MISMATCH;
		}
	}
	/* Row 4: the call finished; its result is replayed, or said to be not kept. */
	if (is_final(call->state))
		return call->result_not_kept ? LEDGER_CLAIM_RESULT_NOT_KEPT : LEDGER_CLAIM_REPLAY;
	if (call->state == LEDGER_CALL_TOMBSTONE)
		return LEDGER_CLAIM_RESULT_EXPIRED;
	if (attempt == LEDGER_STANDING_FENCED)
		return LEDGER_CLAIM_ATTEMPT_FENCED;

	switch (call->state) {
	case LEDGER_CALL_ABSENT:
		return LEDGER_CLAIM_NEW;
	case LEDGER_CALL_IN_PROGRESS:
		if (claim->claim_id != NULL && call->claim_id[0] != '\0' &&
		    strcmp(claim->claim_id, call->claim_id) == 0)
			return LEDGER_CLAIM_HELD;
		return LEDGER_CLAIM_IN_PROGRESS;
	case LEDGER_CALL_UNKNOWN:
		return call->tool_dedupes ? LEDGER_CLAIM_RECLAIM : LEDGER_CLAIM_OUTCOME_UNKNOWN;
	case LEDGER_CALL_RELEASED:
		return LEDGER_CLAIM_RECLAIM;
	case LEDGER_CALL_SUCCEEDED:
	case LEDGER_CALL_FAILED:
	case LEDGER_CALL_TOMBSTONE:
		break;
	}
	abort(); /* handled above */
}

/* A token this key never issued: below 1 or above the newest. */
static bool token_never_issued(int64_t token, const struct ledger_call *call)
{
	return token < 1 || token > call->fencing_token;
}

enum ledger_complete_outcome ledger_decide_complete(const struct ledger_completion *c,
						    const struct ledger_call *call)
{
	bool current;

	if (call->state == LEDGER_CALL_ABSENT)
		return LEDGER_COMPLETE_NOT_FOUND;
	if (call->state == LEDGER_CALL_TOMBSTONE)
		return LEDGER_COMPLETE_RESULT_EXPIRED;
	if (token_never_issued(c->fencing_token, call))
		return LEDGER_COMPLETE_STALE_TOKEN;

	if (is_final(call->state)) {
		bool same = !c->retryable && c->fencing_token == call->completed_token &&
			    c->succeeded == (call->state == LEDGER_CALL_SUCCEEDED) &&
			    same_result(c, call);
		return same ? LEDGER_COMPLETE_REPEATED : LEDGER_COMPLETE_ALREADY_COMPLETED;
	}

	/* The current holder: the newest token, still in progress within its lease. */
	current = c->fencing_token == call->fencing_token && call->state == LEDGER_CALL_IN_PROGRESS;
	if (c->retryable) {
		if (current)
			return LEDGER_COMPLETE_RELEASED;
		/* The same holder's retryable failure again, after it released. */
		if (c->fencing_token == call->fencing_token && call->state == LEDGER_CALL_RELEASED)
			return LEDGER_COMPLETE_REPEATED;
		/* A stale holder must never release a newer one (docs/design.md invariant 8). */
		return LEDGER_COMPLETE_STALE_TOKEN;
	}
	/* A final outcome: the effect happened, whoever reports it. */
	return current ? LEDGER_COMPLETE_STORED : LEDGER_COMPLETE_LATE;
}

bool ledger_decide_complete_wants_digest(const struct ledger_completion *c,
					 const struct ledger_call *call)
{
	if (!is_final(call->state) || c->retryable || c->result_not_kept == call->result_not_kept)
		return false;
	if (c->result_not_kept)
		return call->result_digest.sha256[0] == '\0' &&
		       (int64_t)call->result_len == c->result_digest.bytes;
	return c->result_digest.sha256[0] == '\0' &&
	       (int64_t)c->result_len == call->result_digest.bytes;
}

enum ledger_renew_outcome ledger_decide_renew(int64_t fencing_token, const struct ledger_call *call,
					      enum ledger_standing attempt)
{
	if (call->state == LEDGER_CALL_ABSENT)
		return LEDGER_RENEW_NOT_FOUND;
	if (call->state == LEDGER_CALL_TOMBSTONE)
		return LEDGER_RENEW_RESULT_EXPIRED;
	if (fencing_token != call->fencing_token ||
	    (call->state != LEDGER_CALL_IN_PROGRESS && call->state != LEDGER_CALL_UNKNOWN))
		return LEDGER_RENEW_STALE_TOKEN;
	if (attempt == LEDGER_STANDING_FENCED || attempt == LEDGER_STANDING_NOT_FOUND)
		return LEDGER_RENEW_ATTEMPT_FENCED;
	if (call->state == LEDGER_CALL_UNKNOWN)
		return LEDGER_RENEW_OUTCOME_UNKNOWN;
	return LEDGER_RENEW_RENEWED;
}

enum ledger_release_outcome ledger_decide_release(int64_t fencing_token,
						  const struct ledger_call *call)
{
	if (call->state == LEDGER_CALL_ABSENT)
		return LEDGER_RELEASE_NOT_FOUND;
	if (call->state == LEDGER_CALL_TOMBSTONE)
		return LEDGER_RELEASE_RESULT_EXPIRED;
	if (fencing_token != call->fencing_token)
		return LEDGER_RELEASE_STALE_TOKEN;
	if (call->state == LEDGER_CALL_RELEASED)
		return LEDGER_RELEASE_REPEATED;
	if (call->state == LEDGER_CALL_IN_PROGRESS)
		return LEDGER_RELEASE_RELEASED;
	/* Unknown (its lease ran out) or final: no longer the holder. */
	return LEDGER_RELEASE_STALE_TOKEN;
}

enum ledger_resolve_outcome ledger_decide_resolve(enum ledger_resolution resolution,
						  const char *result, size_t result_len,
						  const struct ledger_call *call)
{
	if (result == NULL) {
		result = "null";
		result_len = 4;
	}
	if (call->state == LEDGER_CALL_ABSENT)
		return LEDGER_RESOLVE_NOT_FOUND;
	if (call->state == LEDGER_CALL_TOMBSTONE)
		return LEDGER_RESOLVE_RESULT_EXPIRED;
	if (is_final(call->state)) {
		/* A resolution stores its result whole, whatever its size. */
		bool same = call->completed_by == LEDGER_COMPLETED_RESOLVE &&
			    !call->result_not_kept && resolution != LEDGER_RESOLVE_NOT_EXECUTED &&
			    (resolution == LEDGER_RESOLVE_SUCCEEDED) ==
				    (call->state == LEDGER_CALL_SUCCEEDED) &&
			    result_equal(result, result_len, call->result, call->result_len);
		return same ? LEDGER_RESOLVE_REPEATED : LEDGER_RESOLVE_ALREADY_COMPLETED;
	}
	if (call->state == LEDGER_CALL_RELEASED && resolution == LEDGER_RESOLVE_NOT_EXECUTED)
		return LEDGER_RESOLVE_REPEATED;
	return LEDGER_RESOLVE_SETTLED;
}

const char *ledger_decide_claim_code(enum ledger_claim_outcome o)
{
	switch (o) {
	case LEDGER_CLAIM_ATTEMPT_NOT_FOUND:
		return "attempt_not_found";
	case LEDGER_CLAIM_ATTEMPT_REQUIRED:
		return "attempt_required";
	case LEDGER_CLAIM_ARGS_MISMATCH:
		return "args_mismatch";
	case LEDGER_CLAIM_RESULT_NOT_KEPT:
		return "result_not_kept";
	case LEDGER_CLAIM_RESULT_EXPIRED:
		return "result_expired";
	case LEDGER_CLAIM_ATTEMPT_FENCED:
		return "attempt_fenced";
	case LEDGER_CLAIM_IN_PROGRESS:
		return "in_progress";
	case LEDGER_CLAIM_OUTCOME_UNKNOWN:
		return "outcome_unknown";
	case LEDGER_CLAIM_REPLAY:
	case LEDGER_CLAIM_HELD:
	case LEDGER_CLAIM_NEW:
	case LEDGER_CLAIM_RECLAIM:
		break;
	}
	return NULL;
}

const char *ledger_decide_complete_code(enum ledger_complete_outcome o)
{
	switch (o) {
	case LEDGER_COMPLETE_NOT_FOUND:
		return "not_found";
	case LEDGER_COMPLETE_RESULT_EXPIRED:
		return "result_expired";
	case LEDGER_COMPLETE_STALE_TOKEN:
		return "stale_token";
	case LEDGER_COMPLETE_ALREADY_COMPLETED:
		return "already_completed";
	case LEDGER_COMPLETE_REPEATED:
	case LEDGER_COMPLETE_STORED:
	case LEDGER_COMPLETE_LATE:
	case LEDGER_COMPLETE_RELEASED:
		break;
	}
	return NULL;
}

const char *ledger_decide_renew_code(enum ledger_renew_outcome o)
{
	switch (o) {
	case LEDGER_RENEW_NOT_FOUND:
		return "not_found";
	case LEDGER_RENEW_RESULT_EXPIRED:
		return "result_expired";
	case LEDGER_RENEW_STALE_TOKEN:
		return "stale_token";
	case LEDGER_RENEW_ATTEMPT_FENCED:
		return "attempt_fenced";
	case LEDGER_RENEW_OUTCOME_UNKNOWN:
		return "outcome_unknown";
	case LEDGER_RENEW_RENEWED:
		break;
	}
	return NULL;
}

const char *ledger_decide_release_code(enum ledger_release_outcome o)
{
	switch (o) {
	case LEDGER_RELEASE_NOT_FOUND:
		return "not_found";
	case LEDGER_RELEASE_RESULT_EXPIRED:
		return "result_expired";
	case LEDGER_RELEASE_STALE_TOKEN:
		return "stale_token";
	case LEDGER_RELEASE_REPEATED:
	case LEDGER_RELEASE_RELEASED:
		break;
	}
	return NULL;
}

const char *ledger_decide_resolve_code(enum ledger_resolve_outcome o)
{
	switch (o) {
	case LEDGER_RESOLVE_NOT_FOUND:
		return "not_found";
	case LEDGER_RESOLVE_RESULT_EXPIRED:
		return "result_expired";
	case LEDGER_RESOLVE_ALREADY_COMPLETED:
		return "already_completed";
	case LEDGER_RESOLVE_REPEATED:
	case LEDGER_RESOLVE_SETTLED:
		break;
	}
	return NULL;
}
