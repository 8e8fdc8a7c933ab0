/*
 * tests/unit/test_decide.c: the tool-call state machine, table-driven:
 * every state of a call x every operation x holder, token and lease cases,
 * each row with the outcome docs/api.md prescribes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ledger/core/decide.h"

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HOLDER "holder-0123456789abcdef"
#define OTHER "other-0123456789abcdef"

enum {
	ABSENT,
	IN_PROGRESS,
	UNKNOWN,
	SUCCEEDED,
	FAILED,
	RELEASED,
	TOMBSTONE
};

static const enum ledger_call_state states[] = {
	LEDGER_CALL_ABSENT, LEDGER_CALL_IN_PROGRESS, LEDGER_CALL_UNKNOWN,   LEDGER_CALL_SUCCEEDED,
	LEDGER_CALL_FAILED, LEDGER_CALL_RELEASED,    LEDGER_CALL_TOMBSTONE,
};

/*
 * A call as the store reads it: token 3 is the current holder's, first
 * claimed by tool "mail" with SHA_A; a final call was completed by token 3
 * with the result "R".
 */
static struct ledger_call make_call(int state, bool dedupes, bool anonymous_holder)
{
	struct ledger_call c;

	memset(&c, 0, sizeof(c));
	c.state = states[state];
	if (c.state == LEDGER_CALL_ABSENT)
		return c;
	strcpy(c.args_sha256, SHA_A);
	if (c.state == LEDGER_CALL_TOMBSTONE) {
		c.settled_as = LEDGER_CALL_SUCCEEDED;
		return c;
	}
	c.fencing_token = 3;
	strcpy(c.tool, "mail");
	c.tool_dedupes = dedupes;
	if (!anonymous_holder)
		strcpy(c.claim_id, HOLDER);
	c.lease_ms_left = c.state == LEDGER_CALL_IN_PROGRESS ? 5000 : 0;
	if (c.state == LEDGER_CALL_SUCCEEDED || c.state == LEDGER_CALL_FAILED) {
		c.result = (char *)"\"R\"";
		c.result_len = 3;
		c.completed_token = 3;
		c.completed_by = LEDGER_COMPLETED_HOLDER;
	}
	return c;
}

/* --- claim --- */

struct claim_row {
	const char *what;
	int state;
	bool dedupes;         /* the stored call's tool_dedupes */
	const char *claim_id; /* the claimant's */
	const char *tool;
	const char *sha;
	bool claim_dedupes;
	bool has_attempts;
	enum ledger_standing attempt;
	enum ledger_claim_outcome want;
	const char *want_field; /* ARGS_MISMATCH */
};

#define NG LEDGER_STANDING_NOT_GIVEN
#define NF LEDGER_STANDING_NOT_FOUND
#define LIVE LEDGER_STANDING_HAS_RIGHTS
#define FENCED LEDGER_STANDING_FENCED

static const struct claim_row claim_rows[] = {
	/* check 1, attempt_not_found, comes before everything */
	{"unknown attempt, absent", ABSENT, false, HOLDER, "mail", SHA_A, false, false, NF,
	 LEDGER_CLAIM_ATTEMPT_NOT_FOUND, NULL},
	{"unknown attempt, completed", SUCCEEDED, false, HOLDER, "mail", SHA_A, false, true, NF,
	 LEDGER_CLAIM_ATTEMPT_NOT_FOUND, NULL},
	{"unknown attempt, mismatch", SUCCEEDED, false, HOLDER, "mail", SHA_B, false, true, NF,
	 LEDGER_CLAIM_ATTEMPT_NOT_FOUND, NULL},
	/* check 2: a request with attempts needs one named */
	{"no attempt on an attempted request", ABSENT, false, HOLDER, "mail", SHA_A, false, true,
	 NG, LEDGER_CLAIM_ATTEMPT_REQUIRED, NULL},
	{"no attempt, completed, attempted request", SUCCEEDED, false, HOLDER, "mail", SHA_A, false,
	 true, NG, LEDGER_CLAIM_ATTEMPT_REQUIRED, NULL},
	/* check 3: the same key must mean the same call, in every state */
	{"other args, in progress", IN_PROGRESS, false, HOLDER, "mail", SHA_B, false, false, NG,
	 LEDGER_CLAIM_ARGS_MISMATCH, "args"},
	{"other args, completed", SUCCEEDED, false, OTHER, "mail", SHA_B, false, false, NG,
	 LEDGER_CLAIM_ARGS_MISMATCH, "args"},
	{"no args, completed with args", SUCCEEDED, false, OTHER, "mail", NULL, false, false, NG,
	 LEDGER_CLAIM_ARGS_MISMATCH, "args"},
	{"other tool, failed", FAILED, false, OTHER, "sms", SHA_A, false, false, NG,
	 LEDGER_CLAIM_ARGS_MISMATCH, "tool"},
	{"no tool, released", RELEASED, false, OTHER, NULL, SHA_A, false, false, NG,
	 LEDGER_CLAIM_ARGS_MISMATCH, "tool"},
	{"other dedupes, unknown", UNKNOWN, true, OTHER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_ARGS_MISMATCH, "tool_dedupes"},
	{"other args, tombstone", TOMBSTONE, false, OTHER, "mail", SHA_B, false, false, NG,
	 LEDGER_CLAIM_ARGS_MISMATCH, "args"},
	{"mismatch of a fenced attempt", IN_PROGRESS, false, OTHER, "mail", SHA_B, false, true,
	 FENCED, LEDGER_CLAIM_ARGS_MISMATCH, "args"},
	/* check 4: replay, even to a fenced attempt, before every lease check */
	{"succeeded", SUCCEEDED, false, OTHER, "mail", SHA_A, false, false, NG, LEDGER_CLAIM_REPLAY,
	 NULL},
	{"failed", FAILED, false, NULL, "mail", SHA_A, false, false, NG, LEDGER_CLAIM_REPLAY, NULL},
	{"succeeded, same claim_id", SUCCEEDED, false, HOLDER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_REPLAY, NULL},
	{"succeeded, fenced attempt", SUCCEEDED, false, OTHER, "mail", SHA_A, false, true, FENCED,
	 LEDGER_CLAIM_REPLAY, NULL},
	{"succeeded, live attempt", SUCCEEDED, false, OTHER, "mail", SHA_A, false, true, LIVE,
	 LEDGER_CLAIM_REPLAY, NULL},
	/* check 5: a tombstone never runs again */
	{"tombstone", TOMBSTONE, false, OTHER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_RESULT_EXPIRED, NULL},
	{"tombstone, other tool", TOMBSTONE, false, OTHER, "sms", SHA_A, true, false, NG,
	 LEDGER_CLAIM_RESULT_EXPIRED, NULL},
	{"tombstone, fenced attempt", TOMBSTONE, false, OTHER, "mail", SHA_A, false, true, FENCED,
	 LEDGER_CLAIM_RESULT_EXPIRED, NULL},
	/* check 6: a fenced attempt starts nothing */
	{"fenced, absent", ABSENT, false, HOLDER, "mail", SHA_A, false, true, FENCED,
	 LEDGER_CLAIM_ATTEMPT_FENCED, NULL},
	{"fenced, own claim", IN_PROGRESS, false, HOLDER, "mail", SHA_A, false, true, FENCED,
	 LEDGER_CLAIM_ATTEMPT_FENCED, NULL},
	{"fenced, released", RELEASED, false, HOLDER, "mail", SHA_A, false, true, FENCED,
	 LEDGER_CLAIM_ATTEMPT_FENCED, NULL},
	{"fenced, unknown", UNKNOWN, false, HOLDER, "mail", SHA_A, false, true, FENCED,
	 LEDGER_CLAIM_ATTEMPT_FENCED, NULL},
	/* check 7: the same holder gets its token back */
	{"same holder", IN_PROGRESS, false, HOLDER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_HELD, NULL},
	{"same holder, live attempt", IN_PROGRESS, false, HOLDER, "mail", SHA_A, false, true, LIVE,
	 LEDGER_CLAIM_HELD, NULL},
	/* check 8: anyone else waits */
	{"other holder", IN_PROGRESS, false, OTHER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_IN_PROGRESS, NULL},
	{"anonymous", IN_PROGRESS, false, NULL, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_IN_PROGRESS, NULL},
	{"dedupes does not shorten a running lease", IN_PROGRESS, true, OTHER, "mail", SHA_A, true,
	 false, NG, LEDGER_CLAIM_IN_PROGRESS, NULL},
	/* check 9: a lease that ran out is never handed out silently */
	{"unknown", UNKNOWN, false, OTHER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_OUTCOME_UNKNOWN, NULL},
	{"unknown, the old holder itself", UNKNOWN, false, HOLDER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_OUTCOME_UNKNOWN, NULL},
	{"unknown, anonymous", UNKNOWN, false, NULL, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_OUTCOME_UNKNOWN, NULL},
	/* check 10: claimable */
	{"absent", ABSENT, false, HOLDER, "mail", SHA_A, false, false, NG, LEDGER_CLAIM_NEW, NULL},
	{"absent, anonymous, nothing given", ABSENT, false, NULL, NULL, NULL, false, false, NG,
	 LEDGER_CLAIM_NEW, NULL},
	{"absent, live attempt", ABSENT, false, HOLDER, "mail", SHA_A, false, true, LIVE,
	 LEDGER_CLAIM_NEW, NULL},
	{"released", RELEASED, false, OTHER, "mail", SHA_A, false, false, NG, LEDGER_CLAIM_RECLAIM,
	 NULL},
	{"released, the releasing holder", RELEASED, false, HOLDER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_RECLAIM, NULL},
	{"unknown, tool dedupes", UNKNOWN, true, OTHER, "mail", SHA_A, true, false, NG,
	 LEDGER_CLAIM_RECLAIM, NULL},
};

static void test_decide_claim_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(claim_rows) / sizeof(claim_rows[0]); i++) {
		const struct claim_row *r = &claim_rows[i];
		struct ledger_call call = make_call(r->state, r->dedupes, false);
		struct ledger_claim claim = {
			.claim_id = r->claim_id,
			.tool = r->tool,
			.args_sha256 = r->sha,
			.tool_dedupes = r->claim_dedupes,
			.attempt_id = r->attempt == NG ? NULL : "att-1",
			.lease_ms = 30000,
		};
		const char *field = NULL;
		enum ledger_claim_outcome got =
			ledger_decide_claim(&claim, &call, r->has_attempts, r->attempt, &field);

		if (got != r->want)
			fail_msg("claim row %zu (%s): got %d, want %d", i, r->what, got, r->want);
		if (r->want_field != NULL && (field == NULL || strcmp(field, r->want_field) != 0))
			fail_msg("claim row %zu (%s): mismatch field %s, want %s", i, r->what,
				 field ? field : "(none)", r->want_field);
	}
}

/* An anonymous holder is never "the same holder", whoever asks. */
static void test_decide_claim_anonymous_holder_is_nobody(void **state)
{
	struct ledger_call call = make_call(IN_PROGRESS, false, true);
	struct ledger_claim anon = {.tool = "mail", .args_sha256 = SHA_A};
	struct ledger_claim named = {.claim_id = HOLDER, .tool = "mail", .args_sha256 = SHA_A};
	const char *field = NULL;

	(void)state;
	assert_int_equal(ledger_decide_claim(&anon, &call, false, NG, &field),
			 LEDGER_CLAIM_IN_PROGRESS);
	assert_int_equal(ledger_decide_claim(&named, &call, false, NG, &field),
			 LEDGER_CLAIM_IN_PROGRESS);
}

/* Every refusal has its API code; every success has none. */
static void test_decide_claim_codes(void **state)
{
	(void)state;
	assert_string_equal(ledger_decide_claim_code(LEDGER_CLAIM_IN_PROGRESS), "in_progress");
	assert_string_equal(ledger_decide_claim_code(LEDGER_CLAIM_OUTCOME_UNKNOWN), "outcome_unknown");
	assert_string_equal(ledger_decide_claim_code(LEDGER_CLAIM_ARGS_MISMATCH), "args_mismatch");
	assert_string_equal(ledger_decide_claim_code(LEDGER_CLAIM_RESULT_EXPIRED), "result_expired");
	assert_string_equal(ledger_decide_claim_code(LEDGER_CLAIM_ATTEMPT_FENCED), "attempt_fenced");
	assert_string_equal(ledger_decide_claim_code(LEDGER_CLAIM_ATTEMPT_REQUIRED), "attempt_required");
	assert_string_equal(ledger_decide_claim_code(LEDGER_CLAIM_ATTEMPT_NOT_FOUND), "attempt_not_found");
	assert_null(ledger_decide_claim_code(LEDGER_CLAIM_NEW));
	assert_null(ledger_decide_claim_code(LEDGER_CLAIM_RECLAIM));
	assert_null(ledger_decide_claim_code(LEDGER_CLAIM_HELD));
	assert_null(ledger_decide_claim_code(LEDGER_CLAIM_REPLAY));
	assert_string_equal(ledger_decide_claim_code(LEDGER_CLAIM_RESULT_NOT_KEPT),
			    "result_not_kept");
	assert_string_equal(ledger_decide_complete_code(LEDGER_COMPLETE_STALE_TOKEN), "stale_token");
	assert_string_equal(ledger_decide_complete_code(LEDGER_COMPLETE_ALREADY_COMPLETED),
			    "already_completed");
	assert_string_equal(ledger_decide_renew_code(LEDGER_RENEW_OUTCOME_UNKNOWN), "outcome_unknown");
	assert_string_equal(ledger_decide_release_code(LEDGER_RELEASE_STALE_TOKEN), "stale_token");
	assert_string_equal(ledger_decide_resolve_code(LEDGER_RESOLVE_ALREADY_COMPLETED),
			    "already_completed");
}

/* --- complete --- */

struct complete_row {
	const char *what;
	int state;
	int64_t token;
	bool succeeded;
	bool retryable;
	const char *result;
	enum ledger_complete_outcome want;
};

static const struct complete_row complete_rows[] = {
	{"never claimed", ABSENT, 1, true, false, "1", LEDGER_COMPLETE_NOT_FOUND},
	{"tombstone", TOMBSTONE, 3, true, false, "1", LEDGER_COMPLETE_RESULT_EXPIRED},
	{"token 0 never issued", IN_PROGRESS, 0, true, false, "1", LEDGER_COMPLETE_STALE_TOKEN},
	{"token above the newest", IN_PROGRESS, 4, true, false, "1", LEDGER_COMPLETE_STALE_TOKEN},
	{"future token on a completed call", SUCCEEDED, 9, true, false, "\"R\"",
	 LEDGER_COMPLETE_STALE_TOKEN},
	/* the current holder */
	{"holder succeeds", IN_PROGRESS, 3, true, false, "1", LEDGER_COMPLETE_STORED},
	{"holder fails", IN_PROGRESS, 3, false, false, "1", LEDGER_COMPLETE_STORED},
	{"holder fails, retryable", IN_PROGRESS, 3, false, true, "1", LEDGER_COMPLETE_RELEASED},
	/* an older holder, or the holder after its lease: the effect happened */
	{"older holder succeeds", IN_PROGRESS, 2, true, false, "1", LEDGER_COMPLETE_LATE},
	{"older holder fails", IN_PROGRESS, 1, false, false, "1", LEDGER_COMPLETE_LATE},
	{"holder after its lease", UNKNOWN, 3, true, false, "1", LEDGER_COMPLETE_LATE},
	{"older holder of an unknown call", UNKNOWN, 2, true, false, "1", LEDGER_COMPLETE_LATE},
	{"holder after it released", RELEASED, 3, true, false, "1", LEDGER_COMPLETE_LATE},
	{"older holder of a released call", RELEASED, 2, false, false, "1", LEDGER_COMPLETE_LATE},
	/* a stale holder can never release (docs/design.md invariant 8) */
	{"older holder, retryable", IN_PROGRESS, 2, false, true, "1", LEDGER_COMPLETE_STALE_TOKEN},
	{"holder after its lease, retryable", UNKNOWN, 3, false, true, "1",
	 LEDGER_COMPLETE_STALE_TOKEN},
	{"older holder of a released call, retryable", RELEASED, 2, false, true, "1",
	 LEDGER_COMPLETE_STALE_TOKEN},
	{"retryable again after releasing", RELEASED, 3, false, true, "1",
	 LEDGER_COMPLETE_REPEATED},
	/* a completed call: the same completion again, or a conflict */
	{"same completion", SUCCEEDED, 3, true, false, "\"R\"", LEDGER_COMPLETE_REPEATED},
	{"same, other result bytes", SUCCEEDED, 3, true, false, "\"R\" ",
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"same, other outcome", SUCCEEDED, 3, false, false, "\"R\"",
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"same, older token", SUCCEEDED, 2, true, false, "\"R\"",
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"retryable on a completed call", SUCCEEDED, 3, false, true, "\"R\"",
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"failed call, same", FAILED, 3, false, false, "\"R\"", LEDGER_COMPLETE_REPEATED},
	{"failed call, succeeded", FAILED, 3, true, false, "\"R\"",
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
};

static void test_decide_complete_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(complete_rows) / sizeof(complete_rows[0]); i++) {
		const struct complete_row *r = &complete_rows[i];
		struct ledger_call call = make_call(r->state, false, false);
		struct ledger_completion c = {
			.fencing_token = r->token,
			.succeeded = r->succeeded,
			.retryable = r->retryable,
			.result = r->result,
			.result_len = strlen(r->result),
		};
		enum ledger_complete_outcome got = ledger_decide_complete(&c, &call);

		if (got != r->want)
			fail_msg("complete row %zu (%s): got %d, want %d", i, r->what, got,
				 r->want);
	}
}

/* --- renew --- */

struct token_row {
	const char *what;
	int state;
	int64_t token;
	enum ledger_standing attempt;
	int want;
};

static const struct token_row renew_rows[] = {
	{"never claimed", ABSENT, 1, NG, LEDGER_RENEW_NOT_FOUND},
	{"tombstone", TOMBSTONE, 3, NG, LEDGER_RENEW_RESULT_EXPIRED},
	{"holder", IN_PROGRESS, 3, NG, LEDGER_RENEW_RENEWED},
	{"holder under its live attempt", IN_PROGRESS, 3, LIVE, LEDGER_RENEW_RENEWED},
	{"holder under a fenced attempt", IN_PROGRESS, 3, FENCED, LEDGER_RENEW_ATTEMPT_FENCED},
	{"holder under a vanished attempt", IN_PROGRESS, 3, NF, LEDGER_RENEW_ATTEMPT_FENCED},
	{"older holder", IN_PROGRESS, 2, NG, LEDGER_RENEW_STALE_TOKEN},
	{"token never issued", IN_PROGRESS, 4, NG, LEDGER_RENEW_STALE_TOKEN},
	{"token 0", IN_PROGRESS, 0, NG, LEDGER_RENEW_STALE_TOKEN},
	{"holder after its lease", UNKNOWN, 3, NG, LEDGER_RENEW_OUTCOME_UNKNOWN},
	{"fenced holder after its lease", UNKNOWN, 3, FENCED, LEDGER_RENEW_ATTEMPT_FENCED},
	{"older holder after the lease", UNKNOWN, 2, NG, LEDGER_RENEW_STALE_TOKEN},
	{"released", RELEASED, 3, NG, LEDGER_RENEW_STALE_TOKEN},
	{"succeeded", SUCCEEDED, 3, NG, LEDGER_RENEW_STALE_TOKEN},
	{"failed", FAILED, 3, NG, LEDGER_RENEW_STALE_TOKEN},
};

static void test_decide_renew_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(renew_rows) / sizeof(renew_rows[0]); i++) {
		const struct token_row *r = &renew_rows[i];
		struct ledger_call call = make_call(r->state, false, false);
		int got = (int)ledger_decide_renew(r->token, &call, r->attempt);

		if (got != r->want)
			fail_msg("renew row %zu (%s): got %d, want %d", i, r->what, got, r->want);
	}
}

/* --- release --- */

static const struct token_row release_rows[] = {
	{"never claimed", ABSENT, 1, NG, LEDGER_RELEASE_NOT_FOUND},
	{"tombstone", TOMBSTONE, 3, NG, LEDGER_RELEASE_RESULT_EXPIRED},
	{"holder", IN_PROGRESS, 3, NG, LEDGER_RELEASE_RELEASED},
	{"older holder", IN_PROGRESS, 2, NG, LEDGER_RELEASE_STALE_TOKEN},
	{"token never issued", IN_PROGRESS, 4, NG, LEDGER_RELEASE_STALE_TOKEN},
	{"holder after its lease", UNKNOWN, 3, NG, LEDGER_RELEASE_STALE_TOKEN},
	{"older holder after the lease", UNKNOWN, 1, NG, LEDGER_RELEASE_STALE_TOKEN},
	{"released by this holder", RELEASED, 3, NG, LEDGER_RELEASE_REPEATED},
	{"released, older holder", RELEASED, 2, NG, LEDGER_RELEASE_STALE_TOKEN},
	{"succeeded", SUCCEEDED, 3, NG, LEDGER_RELEASE_STALE_TOKEN},
	{"failed", FAILED, 3, NG, LEDGER_RELEASE_STALE_TOKEN},
};

static void test_decide_release_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(release_rows) / sizeof(release_rows[0]); i++) {
		const struct token_row *r = &release_rows[i];
		struct ledger_call call = make_call(r->state, false, false);
		int got = (int)ledger_decide_release(r->token, &call);

		if (got != r->want)
			fail_msg("release row %zu (%s): got %d, want %d", i, r->what, got, r->want);
	}
}

/* --- resolve --- */

struct resolve_row {
	const char *what;
	int state;
	enum ledger_completed_by by;
	enum ledger_resolution resolution;
	const char *result; /* NULL: none given */
	enum ledger_resolve_outcome want;
};

static const struct resolve_row resolve_rows[] = {
	{"never claimed", ABSENT, 0, LEDGER_RESOLVE_SUCCEEDED, NULL, LEDGER_RESOLVE_NOT_FOUND},
	{"tombstone", TOMBSTONE, 0, LEDGER_RESOLVE_FAILED, NULL, LEDGER_RESOLVE_RESULT_EXPIRED},
	{"unknown -> succeeded", UNKNOWN, 0, LEDGER_RESOLVE_SUCCEEDED, "1", LEDGER_RESOLVE_SETTLED},
	{"unknown -> failed", UNKNOWN, 0, LEDGER_RESOLVE_FAILED, NULL, LEDGER_RESOLVE_SETTLED},
	{"unknown -> not executed", UNKNOWN, 0, LEDGER_RESOLVE_NOT_EXECUTED, NULL,
	 LEDGER_RESOLVE_SETTLED},
	{"stuck in progress -> succeeded", IN_PROGRESS, 0, LEDGER_RESOLVE_SUCCEEDED, "1",
	 LEDGER_RESOLVE_SETTLED},
	{"stuck in progress -> not executed", IN_PROGRESS, 0, LEDGER_RESOLVE_NOT_EXECUTED, NULL,
	 LEDGER_RESOLVE_SETTLED},
	{"released -> succeeded", RELEASED, 0, LEDGER_RESOLVE_SUCCEEDED, "1",
	 LEDGER_RESOLVE_SETTLED},
	{"released -> not executed", RELEASED, 0, LEDGER_RESOLVE_NOT_EXECUTED, NULL,
	 LEDGER_RESOLVE_REPEATED},
	{"completed by its holder", SUCCEEDED, LEDGER_COMPLETED_HOLDER, LEDGER_RESOLVE_SUCCEEDED,
	 "\"R\"", LEDGER_RESOLVE_ALREADY_COMPLETED},
	{"completed late", FAILED, LEDGER_COMPLETED_LATE, LEDGER_RESOLVE_FAILED, "\"R\"",
	 LEDGER_RESOLVE_ALREADY_COMPLETED},
	{"resolved, the same again", SUCCEEDED, LEDGER_COMPLETED_RESOLVE, LEDGER_RESOLVE_SUCCEEDED,
	 "\"R\"", LEDGER_RESOLVE_REPEATED},
	{"resolved, other result", SUCCEEDED, LEDGER_COMPLETED_RESOLVE, LEDGER_RESOLVE_SUCCEEDED,
	 "\"S\"", LEDGER_RESOLVE_ALREADY_COMPLETED},
	{"resolved, other outcome", SUCCEEDED, LEDGER_COMPLETED_RESOLVE, LEDGER_RESOLVE_FAILED,
	 "\"R\"", LEDGER_RESOLVE_ALREADY_COMPLETED},
	{"resolved, then not executed", SUCCEEDED, LEDGER_COMPLETED_RESOLVE,
	 LEDGER_RESOLVE_NOT_EXECUTED, NULL, LEDGER_RESOLVE_ALREADY_COMPLETED},
};

static void test_decide_resolve_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(resolve_rows) / sizeof(resolve_rows[0]); i++) {
		const struct resolve_row *r = &resolve_rows[i];
		struct ledger_call call = make_call(r->state, false, false);
		enum ledger_resolve_outcome got;

		call.completed_by = r->by;
		got = ledger_decide_resolve(r->resolution, r->result,
					    r->result != NULL ? strlen(r->result) : 0, &call);
		if (got != r->want)
			fail_msg("resolve row %zu (%s): got %d, want %d", i, r->what, got, r->want);
	}
}

/* A resolution without a result is the JSON null, and compares as one. */
static void test_decide_resolve_null_result(void **state)
{
	struct ledger_call call = make_call(SUCCEEDED, false, false);

	(void)state;
	call.completed_by = LEDGER_COMPLETED_RESOLVE;
	call.result = (char *)"null";
	call.result_len = 4;
	assert_int_equal(ledger_decide_resolve(LEDGER_RESOLVE_SUCCEEDED, NULL, 0, &call),
			 LEDGER_RESOLVE_REPEATED);
}

/*
 * The store's one-statement paths act without asking decide.c; their SQL
 * conditions must be exactly where decide.c chooses the same write.
 */
static void test_decide_fast_paths_agree(void **state)
{
	struct ledger_call absent = make_call(ABSENT, false, false);
	struct ledger_call held = make_call(IN_PROGRESS, false, false);
	struct ledger_claim claim = {.claim_id = OTHER, .tool = "mail", .args_sha256 = SHA_A};
	struct ledger_completion done = {
		.fencing_token = 3, .succeeded = true, .result = "1", .result_len = 1};
	struct ledger_completion retry = {
		.fencing_token = 3, .retryable = true, .result = "1", .result_len = 1};
	const char *field = NULL;

	(void)state;
	/* claim_fast inserts: no row, no tombstone, no attempts, none named */
	assert_int_equal(ledger_decide_claim(&claim, &absent, false, NG, &field), LEDGER_CLAIM_NEW);
	/* complete_fast: in progress, the newest token, within the lease */
	assert_int_equal(ledger_decide_complete(&done, &held), LEDGER_COMPLETE_STORED);
	assert_int_equal(ledger_decide_complete(&retry, &held), LEDGER_COMPLETE_RELEASED);
	/* renew_fast: the same, and not under an attempt */
	assert_int_equal(ledger_decide_renew(3, &held, NG), LEDGER_RENEW_RENEWED);
}

/* --- results not kept (docs/api.md, "Results not kept") --- */

#define SHA_ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

/* A final call of make_call() whose result "R" was stored as its digest only. */
static struct ledger_call make_not_kept(int state)
{
	struct ledger_call c = make_call(state, false, false);

	c.result = NULL;
	c.result_len = 0;
	c.result_not_kept = true;
	c.result_digest.bytes = 3;
	strcpy(c.result_digest.sha256, SHA_ABC);
	return c;
}

static void test_decide_result_digest_of_is_the_texts_sha256(void **state)
{
	struct ledger_result_digest d;

	(void)state;
	assert_true(ledger_call_digest_result("abc", 3, &d));
	assert_int_equal(d.bytes, 3);
	assert_string_equal(d.sha256, SHA_ABC);
}

/* Row 4 of the claim table, where the replay would be; the rows before it still come first. */
static const struct claim_row not_kept_rows[] = {
	{"unknown attempt", SUCCEEDED, false, OTHER, "mail", SHA_A, false, true, NF,
	 LEDGER_CLAIM_ATTEMPT_NOT_FOUND, NULL},
	{"no attempt on an attempted request", SUCCEEDED, false, OTHER, "mail", SHA_A, false, true,
	 NG, LEDGER_CLAIM_ATTEMPT_REQUIRED, NULL},
	{"other args", SUCCEEDED, false, OTHER, "mail", SHA_B, false, false, NG,
	 LEDGER_CLAIM_ARGS_MISMATCH, "args"},
	{"other tool", FAILED, false, OTHER, "sms", SHA_A, false, false, NG,
	 LEDGER_CLAIM_ARGS_MISMATCH, "tool"},
	{"succeeded", SUCCEEDED, false, OTHER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_RESULT_NOT_KEPT, NULL},
	{"failed, anonymous", FAILED, false, NULL, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_RESULT_NOT_KEPT, NULL},
	{"the holder's own claim_id", SUCCEEDED, false, HOLDER, "mail", SHA_A, false, false, NG,
	 LEDGER_CLAIM_RESULT_NOT_KEPT, NULL},
	{"live attempt", SUCCEEDED, false, OTHER, "mail", SHA_A, false, true, LIVE,
	 LEDGER_CLAIM_RESULT_NOT_KEPT, NULL},
	{"fenced attempt: told, not fenced", SUCCEEDED, false, OTHER, "mail", SHA_A, false, true,
	 FENCED, LEDGER_CLAIM_RESULT_NOT_KEPT, NULL},
};

static void test_decide_claim_of_a_result_not_kept(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(not_kept_rows) / sizeof(not_kept_rows[0]); i++) {
		const struct claim_row *r = &not_kept_rows[i];
		struct ledger_call call = make_not_kept(r->state);
		struct ledger_claim claim = {
			.claim_id = r->claim_id,
			.tool = r->tool,
			.args_sha256 = r->sha,
			.attempt_id = r->attempt == NG ? NULL : "att-1",
			.lease_ms = 30000,
		};
		const char *field = NULL;
		enum ledger_claim_outcome got =
			ledger_decide_claim(&claim, &call, r->has_attempts, r->attempt, &field);

		if (got != r->want)
			fail_msg("not-kept claim row %zu (%s): got %d, want %d", i, r->what, got,
				 r->want);
	}
}

struct digest_row {
	const char *what;
	bool stored_kept; /* the stored result "R" is kept whole; else its digest only */
	bool given_kept;  /* the completion sends its text; else result_not_kept */
	const char *text; /* the text sent, or whose digest is sent */
	int64_t bytes;    /* the length sent with result_not_kept (-1: the text's) */
	bool fill;        /* the caller filled the digest of the side kept whole */
	bool succeeded;
	bool retryable;
	bool wants_digest; /* ledger_decide_complete_wants_digest() */
	enum ledger_complete_outcome want;
};

static const struct digest_row digest_rows[] = {
	{"the same digest again", false, false, "abc", -1, false, true, false, false,
	 LEDGER_COMPLETE_REPEATED},
	{"another SHA-256", false, false, "abd", -1, false, true, false, false,
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"another length", false, false, "abc", 4, false, true, false, false,
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"another outcome", false, false, "abc", -1, false, false, false, false,
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"retryable", false, true, "abc", -1, false, false, true, false,
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"the text of the stored digest", false, true, "abc", -1, true, true, false, true,
	 LEDGER_COMPLETE_REPEATED},
	{"the text, its digest not filled", false, true, "abc", -1, false, true, false, true,
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"another text of the same length", false, true, "abd", -1, true, true, false, true,
	 LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"a text of another length: no digest needed", false, true, "abcd", -1, false, true, false,
	 false, LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"the digest of the stored text", true, false, "\"R\"", -1, true, true, false, true,
	 LEDGER_COMPLETE_REPEATED},
	{"another digest of the stored text's length", true, false, "abc", -1, true, true, false,
	 true, LEDGER_COMPLETE_ALREADY_COMPLETED},
	{"both kept: no digest", true, true, "\"R\"", -1, false, true, false, false,
	 LEDGER_COMPLETE_REPEATED},
};

static void test_decide_complete_compares_digests(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(digest_rows) / sizeof(digest_rows[0]); i++) {
		const struct digest_row *r = &digest_rows[i];
		struct ledger_call call = r->stored_kept ? make_call(SUCCEEDED, false, false)
							 : make_not_kept(SUCCEEDED);
		struct ledger_completion c = {
			.fencing_token = 3,
			.succeeded = r->succeeded,
			.retryable = r->retryable,
		};
		enum ledger_complete_outcome got;

		if (r->given_kept) {
			c.result = r->text;
			c.result_len = strlen(r->text);
		} else {
			c.result_not_kept = true;
			assert_true(ledger_call_digest_result(r->text, strlen(r->text),
							      &c.result_digest));
			if (r->bytes >= 0)
				c.result_digest.bytes = r->bytes;
		}
		if (ledger_decide_complete_wants_digest(&c, &call) != r->wants_digest)
			fail_msg("digest row %zu (%s): wants_digest %d", i, r->what,
				 !r->wants_digest);
		if (r->fill && r->given_kept)
			assert_true(ledger_call_digest_result(c.result, c.result_len,
							      &c.result_digest));
		if (r->fill && !r->given_kept)
			assert_true(ledger_call_digest_result(call.result, call.result_len,
							      &call.result_digest));
		got = ledger_decide_complete(&c, &call);
		if (got != r->want)
			fail_msg("digest row %zu (%s): got %d, want %d", i, r->what, got, r->want);
	}
}

/* A completion of a call not yet final stores its digest as any result: no comparison. */
static void test_decide_complete_not_kept_before_final(void **state)
{
	struct ledger_call held = make_call(IN_PROGRESS, false, false);
	struct ledger_completion c = {
		.fencing_token = 3, .succeeded = true, .result_not_kept = true};

	(void)state;
	c.result_digest.bytes = 3;
	strcpy(c.result_digest.sha256, SHA_ABC);
	assert_false(ledger_decide_complete_wants_digest(&c, &held));
	assert_int_equal(ledger_decide_complete(&c, &held), LEDGER_COMPLETE_STORED);
	c.fencing_token = 2;
	assert_int_equal(ledger_decide_complete(&c, &held), LEDGER_COMPLETE_LATE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decide_claim_table),
		cmocka_unit_test(test_decide_claim_anonymous_holder_is_nobody),
		cmocka_unit_test(test_decide_claim_codes),
		cmocka_unit_test(test_decide_complete_table),
		cmocka_unit_test(test_decide_renew_table),
		cmocka_unit_test(test_decide_release_table),
		cmocka_unit_test(test_decide_resolve_table),
		cmocka_unit_test(test_decide_resolve_null_result),
		cmocka_unit_test(test_decide_fast_paths_agree),
		cmocka_unit_test(test_decide_result_digest_of_is_the_texts_sha256),
		cmocka_unit_test(test_decide_claim_of_a_result_not_kept),
		cmocka_unit_test(test_decide_complete_compares_digests),
		cmocka_unit_test(test_decide_complete_not_kept_before_final),
	};

	return cmocka_run_group_tests_name("decide", tests, NULL, NULL);
}
