/*
 * sdk/c/abi.c: the library's side of the structs that grow (ledger_client.h,
 * "Structs that grow"). Each _abi entry point copies the caller's structs,
 * as long as the caller's header made them, into the library's own layout
 * (zero past their end: every field's default), runs the call on those, and
 * hands an out struct back only as long as the caller's. So a program built
 * against an older header keeps working on a newer library, and one built
 * against a newer header is refused only when it set a field this library
 * does not know.
 */
#include <stddef.h>
#include <string.h>

#include "sdk/c/client_int.h"

#define END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/*
 * The end of the last field of each struct's first layout, as soname 1
 * first shipped it: no caller's struct is shorter. A field added later
 * leaves these as they are.
 */
#define FIRST_OPTIONS END_OF(struct ledger_client_options, max_result_bytes)
#define FIRST_CALL END_OF(struct ledger_call, wait_ms)
#define FIRST_OUTCOME END_OF(struct ledger_outcome, result_bytes)
#define FIRST_SPEC END_OF(struct ledger_attempt_spec, input_sha256)
#define FIRST_KEPT END_OF(struct ledger_kept_answer, sha256)
#define FIRST_FINISH END_OF(struct ledger_finish_opts, answer)
#define FIRST_FAILOVER END_OF(struct ledger_failover_opts, delivered_answer)
#define FIRST_DECISION END_OF(struct ledger_decision, body)
#define FIRST_RESOLUTION END_OF(struct ledger_resolution, note)

/* The two structs that never change within a soname (their size on LP64). */
#if defined(__LP64__)
_Static_assert(sizeof(struct ledger_client_error) == 344,
	       "struct ledger_client_error is fixed for soname 1");
_Static_assert(sizeof(struct ledger_client_answer) == 24,
	       "struct ledger_client_answer is fixed for soname 1");
#endif

/* Whether @p abi names a size for every struct of the first layout. */
static bool abi_usable(const struct ledger_client_abi *abi)
{
	return abi != NULL && abi->count >= LEDGER_CLIENT_ABI_COUNT;
}

/*
 * Copies the caller's struct @p theirs of @p size bytes into @p own
 * (@p own_size bytes, zeroed first). NULL copies nothing.
 * @return false if @p size is shorter than the first layout (@p first), or
 *         longer than ours with a byte set past ours: a field we do not know
 */
static bool take(void *own, size_t own_size, size_t first, const void *theirs, size_t size)
{
	const unsigned char *bytes = theirs;

	memset(own, 0, own_size);
	if (theirs == NULL)
		return true;
	if (size < first)
		return false;
	for (size_t i = own_size; i < size; i++) {
		if (bytes[i] != 0)
			return false;
	}
	memcpy(own, theirs, size < own_size ? size : own_size);
	return true;
}

/* Copies @p own back into the caller's @p theirs of @p size bytes, zero past ours. */
static void give(void *theirs, size_t size, const void *own, size_t own_size)
{
	memcpy(theirs, own, size < own_size ? size : own_size);
	if (size > own_size)
		memset((unsigned char *)theirs + own_size, 0, size - own_size);
}

/* Whether @p field of @p type lies past a caller's struct of @p size bytes. */
#define BEYOND(type, field, size) (END_OF(type, field) > (size))

/* Frees what @p o owns past @p size bytes: the caller's struct has no room for it. */
static void outcome_trim(struct ledger_outcome *o, size_t size)
{
	struct ledger_outcome past = {0};

	if (BEYOND(struct ledger_outcome, result, size))
		past.result = o->result;
	if (BEYOND(struct ledger_outcome, idempotency_key, size))
		past.idempotency_key = o->idempotency_key;
	if (BEYOND(struct ledger_outcome, completed_at, size))
		past.completed_at = o->completed_at;
	if (BEYOND(struct ledger_outcome, error, size))
		past.error.body = o->error.body;
	client_outcome_clear(&past);
}

static void decision_trim(struct ledger_decision *d, size_t size)
{
	struct ledger_decision past = {0};

	if (BEYOND(struct ledger_decision, client_error, size))
		past.client_error = d->client_error;
	if (BEYOND(struct ledger_decision, sse_event, size))
		past.sse_event = d->sse_event;
	if (BEYOND(struct ledger_decision, next, size))
		past.next = d->next;
	if (BEYOND(struct ledger_decision, settled_tool_calls, size))
		past.settled_tool_calls = d->settled_tool_calls;
	if (BEYOND(struct ledger_decision, body, size))
		past.body = d->body;
	client_decision_clear(&past);
}

enum ledger_client_err ledger_client_open_abi(const struct ledger_client_options *opts,
					      struct ledger_client **out,
					      const struct ledger_client_abi *abi)
{
	struct ledger_client_options own;

	if (out != NULL)
		*out = NULL;
	if (!abi_usable(abi) || !take(&own, sizeof(own), FIRST_OPTIONS, opts, abi->options))
		return LEDGER_CLIENT_ERR_INVALID;
	return client_open(opts != NULL ? &own : NULL, out);
}

enum ledger_client_err ledger_client_tool_call_abi(struct ledger_client *c,
						   const struct ledger_call *call,
						   ledger_tool_fn tool_fn, void *ctx,
						   struct ledger_outcome *out,
						   const struct ledger_client_abi *abi)
{
	struct ledger_call own;
	struct ledger_outcome result = {0};
	enum ledger_client_err rc;

	if (out == NULL || !abi_usable(abi) || abi->outcome < FIRST_OUTCOME)
		return LEDGER_CLIENT_ERR_INVALID;
	if (!take(&own, sizeof(own), FIRST_CALL, call, abi->call)) {
		result.kind = LEDGER_OUTCOME_REFUSED;
		client_error_set(&result.error, "",
				 "the call is not one this library can read: a field it does "
				 "not know is set, or the struct is too short");
		rc = LEDGER_CLIENT_ERR_INVALID;
	} else {
		rc = client_tool_call(c, call != NULL ? &own : NULL, tool_fn, ctx, &result);
	}
	outcome_trim(&result, abi->outcome);
	give(out, abi->outcome, &result, sizeof(result));
	return rc;
}

void ledger_client_outcome_clear_abi(struct ledger_outcome *o, const struct ledger_client_abi *abi)
{
	struct ledger_outcome own;

	if (o == NULL || !abi_usable(abi) || abi->outcome < FIRST_OUTCOME)
		return;
	memset(&own, 0, sizeof(own));
	memcpy(&own, o, abi->outcome < sizeof(own) ? abi->outcome : sizeof(own));
	client_outcome_clear(&own);
	memset(o, 0, abi->outcome);
}

enum ledger_client_err ledger_client_attempt_begin_abi(struct ledger_client *c,
						       const struct ledger_attempt_spec *spec,
						       struct ledger_attempt **out,
						       struct ledger_client_error *err,
						       const struct ledger_client_abi *abi)
{
	struct ledger_attempt_spec own;

	if (out != NULL)
		*out = NULL;
	if (!abi_usable(abi) || !take(&own, sizeof(own), FIRST_SPEC, spec, abi->attempt_spec)) {
		client_error_set(err, "", "the attempt's spec is not one this library can read");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	return client_attempt_begin(c, spec != NULL ? &own : NULL, out, err);
}

enum ledger_client_err ledger_client_attempt_end_abi(struct ledger_attempt *a, bool completed,
						     uint64_t delivered_output_tokens,
						     const struct ledger_finish_opts *opts,
						     struct ledger_client_error *err,
						     const struct ledger_client_abi *abi)
{
	struct ledger_finish_opts own;
	struct ledger_kept_answer answer;

	if (!abi_usable(abi) || !take(&own, sizeof(own), FIRST_FINISH, opts, abi->finish_opts) ||
	    !take(&answer, sizeof(answer), FIRST_KEPT, own.answer, abi->kept_answer)) {
		client_error_set(err, "", "the finish options are not ones this library can read");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	if (own.answer != NULL)
		own.answer = &answer;
	return client_attempt_end(a, completed, delivered_output_tokens, &own, err);
}

void ledger_client_decision_clear_abi(struct ledger_decision *d,
				      const struct ledger_client_abi *abi)
{
	struct ledger_decision own;

	if (d == NULL || !abi_usable(abi) || abi->decision < FIRST_DECISION)
		return;
	memset(&own, 0, sizeof(own));
	memcpy(&own, d, abi->decision < sizeof(own) ? abi->decision : sizeof(own));
	client_decision_clear(&own);
	memset(d, 0, abi->decision);
}

enum ledger_client_err
ledger_client_failover_abi(struct ledger_attempt *source, enum ledger_signal signal,
			   const struct ledger_failover_opts *opts, struct ledger_decision *out,
			   struct ledger_client_error *err, const struct ledger_client_abi *abi)
{
	struct ledger_failover_opts own;
	struct ledger_attempt_spec next;
	struct ledger_kept_answer delivered;
	struct ledger_decision decision = {0};
	enum ledger_client_err rc;

	if (out == NULL || !abi_usable(abi) || abi->decision < FIRST_DECISION)
		return LEDGER_CLIENT_ERR_INVALID;
	if (!take(&own, sizeof(own), FIRST_FAILOVER, opts, abi->failover_opts) ||
	    !take(&next, sizeof(next), FIRST_SPEC, own.next, abi->attempt_spec) ||
	    !take(&delivered, sizeof(delivered), FIRST_KEPT, own.delivered_answer,
		  abi->kept_answer)) {
		memset(out, 0, abi->decision);
		client_error_set(err, "",
				 "the failover options are not ones this library can read");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	if (own.next != NULL)
		own.next = &next;
	if (own.delivered_answer != NULL)
		own.delivered_answer = &delivered;
	rc = client_failover(source, signal, opts != NULL ? &own : NULL, &decision, err);
	decision_trim(&decision, abi->decision);
	give(out, abi->decision, &decision, sizeof(decision));
	return rc;
}

enum ledger_client_err ledger_client_tool_call_resolve_abi(struct ledger_client *c,
							   const struct ledger_resolution *r,
							   struct ledger_client_answer *out,
							   struct ledger_client_error *err,
							   const struct ledger_client_abi *abi)
{
	struct ledger_resolution own;

	if (out != NULL)
		memset(out, 0, sizeof(*out));
	if (!abi_usable(abi) || !take(&own, sizeof(own), FIRST_RESOLUTION, r, abi->resolution)) {
		client_error_set(err, "", "the resolution is not one this library can read");
		return LEDGER_CLIENT_ERR_INVALID;
	}
	return client_tool_call_resolve(c, r != NULL ? &own : NULL, out, err);
}
