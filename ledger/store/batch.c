/*
 * ledger/store/batch.c: the batch planner. When several tool calls wait
 * for one worker, their fast paths run in one transaction and one round
 * trip: a kind numerous enough goes as one statement over arrays, the
 * rest as their own fast statements, every request locked in one order.
 * Each call's outcome is its own; a call the fast path does not answer
 * comes back not done and runs alone afterwards.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/buf.h"
#include "ledger/common/log.h"
#include "ledger/store/fast.h"
#include "ledger/store/rows.h"
#include "ledger/store/statements.h"
#include "ledger/store/store.h"

/* The statements are laid out as SQL, not as C. */
/* clang-format off */
/*
 * The statements of a batch: each takes arrays, one element per call, and
 * does for every call what its one-call statement above does, in one
 * execution (a statement's fixed cost, paid once for the whole batch).
 * Rows come back one per element, in the arrays' order.
 *
 * A batch's statements lock and create requests in phases (the requests
 * its claims create, then those they find; then those of its completions),
 * so two batches sharing requests could wait for each other in a cycle.
 * batch_lock prevents it: every batch first takes a transaction lock per
 * request ($1 tenants, $2 request ids), existing or not, all in one order;
 * a batch of one-call statements too, which lock rows in key order, not
 * in a batch's phases, and so could close a cycle with one that does.
 * Anything else touches one request at a time and cannot close a cycle.
 */
static const struct store_stmt batch_lock = {
	"batch_lock",
	"SELECT count(pg_advisory_xact_lock(h))::int FROM ("
	"  SELECT DISTINCT hashtextextended('ledgerd.request.' || t || '/' || r, 0) AS h"
	"  FROM unnest($1::text[], $2::text[]) AS k(t, r) ORDER BY h"
	") l",
	2,
};

/*
 * The settings of a batch's transaction. A custom plan for arrays is
 * planned again at every execution; the generic one serves any length (and
 * any statement here). A generic plan made while the tables are small (a
 * new deployment, before autovacuum has analysed them) would join the
 * arrays to the tables by hashing whole sequential scans, and keep doing so
 * until the statistics change: 16.6 ms for a claim_many of 9 calls over
 * 4,500 stored, against 1.3 ms. Without hash joins, merge joins and
 * sequential scans the plan probes the keys' indexes, as it does anyway
 * once the tables are large.
 */
static const struct store_stmt batch_settings = {
	"batch_settings",
	"SELECT set_config('plan_cache_mode', 'force_generic_plan', true),"
	"  set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),"
	"  set_config('enable_seqscan', 'off', true)",
	0,
};

/*
 * claim_fast for many keys: $1 tenants, $2 request ids, $3 tool call ids,
 * $4 tools, $5 args_sha256, $6 args, $7 tool_dedupes, $8 claim ids,
 * $9 owners, $10 lease_ms, $11 event details. New requests are created
 * in key order. Answers claim_fast's columns for each key.
 */
static const struct store_stmt claim_many = {
	"claim_many",
	"WITH k AS MATERIALIZED ("
	"  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],"
	"    $6::text[], $7::boolean[], $8::text[], $9::text[], $10::bigint[], $11::text[])"
	"    WITH ORDINALITY AS k(tenant, rid, cid, tool, sha, args, dedupes, claim_id, owner,"
	"      lease, detail, ord)"
	"), settled AS MATERIALIZED ("
	"  SELECT k.ord FROM k CROSS JOIN LATERAL ("
	"    SELECT 1 FROM tool_calls c WHERE c.tenant = k.tenant"
	"      AND c.request_id = k.rid AND c.tool_call_id = k.cid"
	"      AND c.state IN ('succeeded', 'failed')"
	"    UNION ALL SELECT 1 FROM tool_call_tombstones t WHERE t.tenant = k.tenant"
	"      AND t.request_id = k.rid AND t.tool_call_id = k.cid"
	"    LIMIT 1) s" /* a lookup per key, never a hashed scan of the table */
	"), created AS ("
	"  INSERT INTO requests (tenant, request_id)"
	"  SELECT DISTINCT k.tenant, k.rid FROM k WHERE k.ord NOT IN (SELECT ord FROM settled)"
	"  ORDER BY 1, 2"
	"  ON CONFLICT (tenant, request_id) DO NOTHING"
	"  RETURNING tenant, request_id, attempt_count"
	"), existing AS MATERIALIZED ("
	"  SELECT r.tenant, r.request_id, r.attempt_count FROM requests r"
	"  WHERE (r.tenant, r.request_id) IN (SELECT tenant, rid FROM k)"
	"  ORDER BY r.tenant, r.request_id FOR UPDATE"
	"), req AS MATERIALIZED ("
	"  SELECT tenant, request_id, attempt_count, clock_timestamp() AS now"
	"  FROM (SELECT * FROM created UNION ALL SELECT * FROM existing) r"
	"), ins AS ("
	"  INSERT INTO tool_calls (tenant, request_id, tool_call_id, tool, args_sha256, args,"
	"    tool_dedupes, state, fencing_token, claim_id, owner, lease_until, created_at,"
	"    claimed_seq, claimed_detail)"
	"  SELECT k.tenant, k.rid, k.cid, k.tool, k.sha, k.args, k.dedupes, 'in_progress', 1,"
	"    k.claim_id, k.owner, " STORE_LEASE_FROM("req.now", "k.lease") ", req.now,"
	"    " STORE_NEXT_SEQ ", k.detail::jsonb"
	"  FROM k JOIN req ON req.tenant = k.tenant AND req.request_id = k.rid"
	"  WHERE k.ord NOT IN (SELECT ord FROM settled) AND req.attempt_count = 0"
	"  ORDER BY k.ord"
	"  ON CONFLICT (tenant, request_id, tool_call_id) DO NOTHING"
	"  RETURNING tenant, request_id, tool_call_id"
	") SELECT (SELECT count(*) FROM ins WHERE ins.tenant = k.tenant"
	"    AND ins.request_id = k.rid AND ins.tool_call_id = k.cid)::int,"
	"  (SELECT attempt_count FROM requests r WHERE r.tenant = k.tenant"
	"    AND r.request_id = k.rid), "
	STORE_CALL_COLUMNS
	" FROM k CROSS JOIN (SELECT clock_timestamp() AS t) now_"
	" LEFT JOIN tool_calls c"
	"   ON c.tenant = k.tenant AND c.request_id = k.rid AND c.tool_call_id = k.cid"
	" LEFT JOIN tool_call_tombstones t"
	"   ON c.tenant IS NULL AND t.tenant = k.tenant AND t.request_id = k.rid"
	"  AND t.tool_call_id = k.cid AND t.expires_at > now_.t"
	" ORDER BY k.ord",
	11,
};

/*
 * complete_fast for many keys: $1 tenants, $2 request ids, $3 tool call
 * ids, $4 tokens, $5 outcomes, $6 retryable, $7 results, $8 event details,
 * $9 and $10 the lengths and SHA-256 of results not kept (else NULL).
 * Answers complete_fast's columns for each key (NULLs where the holder's
 * fast path did not apply) and whether it applied.
 */
static const struct store_stmt complete_many = {
	"complete_many",
	"WITH k AS MATERIALIZED ("
	"  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[],"
	"    $6::boolean[], $7::text[], $8::text[], $9::bigint[], $10::text[])"
	"    WITH ORDINALITY AS k(tenant, rid, cid, token, outcome, retryable, result, detail,"
	"      result_bytes, result_sha256, ord)"
	"), req AS MATERIALIZED ("
	"  SELECT r.tenant, r.request_id, r.attempt_count FROM requests r"
	"  WHERE (r.tenant, r.request_id) IN (SELECT tenant, rid FROM k)"
	"  ORDER BY r.tenant, r.request_id FOR UPDATE"
	"), clk AS MATERIALIZED (SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM req) l"
	"), upd AS ("
	"  UPDATE tool_calls c SET"
	"    state = CASE WHEN k.retryable THEN 'released' ELSE k.outcome END,"
	"    outcome = CASE WHEN k.retryable THEN NULL ELSE k.outcome END,"
	"    result = CASE WHEN k.retryable THEN NULL ELSE k.result END,"
	"    result_bytes = CASE WHEN k.retryable THEN NULL ELSE k.result_bytes END,"
	"    result_sha256 = CASE WHEN k.retryable THEN NULL ELSE k.result_sha256 END,"
	"    completed_token = CASE WHEN k.retryable THEN NULL ELSE k.token END,"
	"    completed_by = CASE WHEN k.retryable THEN NULL ELSE 'holder' END,"
	"    completed_at = CASE WHEN k.retryable THEN NULL ELSE clk.now END,"
	"    completed_seq = CASE WHEN k.retryable THEN NULL ELSE " STORE_NEXT_SEQ " END"
	"  FROM k, clk"
	"  WHERE c.tenant = k.tenant AND c.request_id = k.rid AND c.tool_call_id = k.cid"
	"    AND c.state = 'in_progress' AND c.fencing_token = k.token AND c.lease_until > clk.now"
	"  RETURNING c.tenant, c.request_id, c.tool_call_id, c.attempt_id,"
	"    " STORE_TS("c.completed_at") " AS completed_at, c.tool, c.args_sha256, c.tool_dedupes"
	"), ev AS ("
	"  INSERT INTO event_log (tenant, request_id, at, type, attempt_id, tool_call_id, detail)"
	"  SELECT upd.tenant, upd.request_id, clk.now, 'released', upd.attempt_id,"
	"    upd.tool_call_id, k.detail::jsonb"
	"  FROM upd JOIN k ON k.tenant = upd.tenant AND k.rid = upd.request_id"
	"    AND k.cid = upd.tool_call_id CROSS JOIN clk"
	"  WHERE k.retryable"
	") SELECT upd.attempt_id, upd.completed_at, upd.tool, upd.args_sha256, upd.tool_dedupes,"
	"  req.attempt_count, upd.tool_call_id IS NOT NULL"
	" FROM k LEFT JOIN upd"
	"   ON upd.tenant = k.tenant AND upd.request_id = k.rid AND upd.tool_call_id = k.cid"
	" LEFT JOIN req ON req.tenant = k.tenant AND req.request_id = k.rid"
	" ORDER BY k.ord",
	10,
};
/* clang-format on */

/* --- batches --- */

static atomic_ullong batches, batched_calls; /* committed together */

const unsigned ledger_store_batch_bounds[LEDGER_STORE_BATCH_BUCKETS - 1] = {2, 4, 8, 16, 32, 64};
static atomic_ullong batch_sizes[LEDGER_STORE_BATCH_BUCKETS];

void ledger_store_batch_stats(uint64_t *transactions, uint64_t *calls)
{
	*transactions = atomic_load(&batches);
	*calls = atomic_load(&batched_calls);
}

void ledger_store_batch_sizes(uint64_t counts[LEDGER_STORE_BATCH_BUCKETS])
{
	for (unsigned i = 0; i < LEDGER_STORE_BATCH_BUCKETS; i++)
		counts[i] = atomic_load(&batch_sizes[i]);
}

static void count_batch(size_t n)
{
	unsigned b = 0;

	while (b < LEDGER_STORE_BATCH_BUCKETS - 1 && n > ledger_store_batch_bounds[b])
		b++;
	atomic_fetch_add(&batch_sizes[b], 1);
	atomic_fetch_add(&batches, 1);
	atomic_fetch_add(&batched_calls, n);
}

/* Key order: requests in the one order every batch locks them in. */
static int by_key(const void *a, const void *b)
{
	const struct ledger_call_key *x = &(*(struct ledger_batch_op *const *)a)->key;
	const struct ledger_call_key *y = &(*(struct ledger_batch_op *const *)b)->key;
	int c = strcmp(x->tenant, y->tenant);

	if (c == 0)
		c = strcmp(x->request_id, y->request_id);
	return c != 0 ? c : strcmp(x->tool_call_id, y->tool_call_id);
}

static bool same_key(const struct ledger_call_key *x, const struct ledger_call_key *y)
{
	return strcmp(x->tool_call_id, y->tool_call_id) == 0 &&
	       strcmp(x->request_id, y->request_id) == 0 && strcmp(x->tenant, y->tenant) == 0;
}

#define BATCH_ARRAYS 11 /* the most array parameters a batch statement takes */

/* A batch statement's parameters: one array literal each. */
struct batch_params {
	struct ledger_buf a[BATCH_ARRAYS];
};

static void params_free(struct batch_params *p)
{
	for (unsigned i = 0; i < BATCH_ARRAYS; i++)
		ledger_buf_free(&p->a[i]);
}

/* Closes the first @p n literals. @return false if memory ran out */
static bool params_end(struct batch_params *p, unsigned n)
{
	bool ok = true;

	for (unsigned i = 0; i < n; i++) {
		store_step_array_end(&p->a[i]);
		ok = ok && !p->a[i].oom;
	}
	return ok;
}

static void params_key(struct batch_params *p, const struct ledger_call_key *key)
{
	store_step_array_add(&p->a[0], key->tenant);
	store_step_array_add(&p->a[1], key->request_id);
	store_step_array_add(&p->a[2], key->tool_call_id);
}

static void params_int(struct ledger_buf *b, int64_t v)
{
	char text[24];

	store_step_fmt_int(text, v);
	store_step_array_add(b, text);
}

/*
 * From this many calls of one kind on, a batch sends them as one statement
 * over arrays; below it, one statement per call costs less (measured: a
 * claim_many of one call costs 1.4 claim_fast, of four 0.85 each, of
 * sixteen 0.5 each).
 */
#define BATCH_MANY_MIN 4

/* How a batch's calls are sent. */
struct batch_plan {
	struct ledger_batch_op **claims, **completes; /* in claim_many, complete_many */
	struct ledger_batch_op **singles;             /* each in its own statement */
	size_t nclaims, ncompletes, nsingles;
	struct batch_params lock, claim, complete;
	struct ledger_batch_op *base; /* ev[i] belongs to base[i] */
	struct store_event *ev;
};

static void plan_claims(struct batch_plan *p)
{
	for (size_t i = 0; i < p->nclaims; i++) {
		struct ledger_batch_op *op = p->claims[i];
		const struct ledger_claim_request *r = op->claim;

		params_key(&p->claim, &op->key);
		store_step_array_add(&p->claim.a[3], r->claim.tool);
		store_step_array_add(&p->claim.a[4], r->claim.args_sha256);
		store_step_array_add(&p->claim.a[5], r->args);
		store_step_array_add(&p->claim.a[6], r->claim.tool_dedupes ? "true" : "false");
		store_step_array_add(&p->claim.a[7], r->claim.claim_id);
		store_step_array_add(&p->claim.a[8], r->claim.owner);
		params_int(&p->claim.a[9], r->claim.lease_ms);
		store_step_array_add(&p->claim.a[10],
				     store_fast_claim_detail(&p->ev[op - p->base], &r->claim));
	}
}

static void plan_completes(struct batch_plan *p)
{
	for (size_t i = 0; i < p->ncompletes; i++) {
		struct ledger_batch_op *op = p->completes[i];
		const struct ledger_completion *c = op->completion;
		bool digest = !c->retryable && c->result_not_kept; /* a result not kept */

		params_key(&p->complete, &op->key);
		params_int(&p->complete.a[3], c->fencing_token);
		store_step_array_add(&p->complete.a[4], c->succeeded ? "succeeded" : "failed");
		store_step_array_add(&p->complete.a[5], c->retryable ? "true" : "false");
		store_step_array_add(&p->complete.a[6],
				     c->retryable || c->result_not_kept ? NULL : c->result);
		store_step_array_add(&p->complete.a[7],
				     store_fast_complete_detail(&p->ev[op - p->base], c));
		if (digest)
			params_int(&p->complete.a[8], c->result_digest.bytes);
		else
			store_step_array_add(&p->complete.a[8], NULL);
		store_step_array_add(&p->complete.a[9], digest ? c->result_digest.sha256 : NULL);
	}
}

/*
 * Sorts the ops (in key order) into the plan and builds the array
 * parameters. A second op of one kind on one key stays out (not done: it
 * runs alone, after), as it would find the first one's work anyway.
 */
static enum ledger_err plan_batch(struct batch_plan *p, struct ledger_batch_op **order, size_t n)
{
	struct ledger_batch_op *last[4] = {NULL, NULL, NULL, NULL}; /* per kind */
	size_t nclaims = 0, ncompletes = 0;

	for (size_t i = 0; i < n; i++) {
		struct ledger_batch_op *op = order[i];

		if (last[op->kind] != NULL && same_key(&last[op->kind]->key, &op->key))
			continue;
		last[op->kind] = op;
		nclaims += op->kind == LEDGER_BATCH_CLAIM;
		ncompletes += op->kind == LEDGER_BATCH_COMPLETE;
		p->singles[p->nsingles++] = op;
		store_step_array_add(&p->lock.a[0], op->key.tenant);
		store_step_array_add(&p->lock.a[1], op->key.request_id);
	}
	/* The kinds numerous enough leave the singles for their statement. */
	if (nclaims >= BATCH_MANY_MIN || ncompletes >= BATCH_MANY_MIN) {
		size_t kept = 0;

		for (size_t i = 0; i < p->nsingles; i++) {
			struct ledger_batch_op *op = p->singles[i];

			if (op->kind == LEDGER_BATCH_CLAIM && nclaims >= BATCH_MANY_MIN)
				p->claims[p->nclaims++] = op;
			else if (op->kind == LEDGER_BATCH_COMPLETE && ncompletes >= BATCH_MANY_MIN)
				p->completes[p->ncompletes++] = op;
			else
				p->singles[kept++] = op;
		}
		p->nsingles = kept;
	}
	plan_claims(p);
	plan_completes(p);
	return params_end(&p->lock, 2) && params_end(&p->claim, 11) && params_end(&p->complete, 10)
		       ? LEDGER_OK
		       : LEDGER_ERR_NOMEM;
}

static void plan_free(struct batch_plan *p, size_t n)
{
	for (size_t i = 0; p->ev != NULL && i < n; i++)
		store_event_free(&p->ev[i]);
	params_free(&p->lock);
	params_free(&p->claim);
	params_free(&p->complete);
	free(p->claims);
	free(p->ev);
}

static const char *const *params_of(const struct batch_params *p, const char **out, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		out[i] = p->a[i].data;
	return out;
}

/* Reads what the batch's statements answered into each op. */
static enum ledger_err batch_read(struct batch_plan *p, struct store_step *st, unsigned first)
{
	unsigned at = first;
	enum ledger_err rc = LEDGER_OK;

	if (p->nclaims > 0) {
		const PGresult *res = st->res[at++];

		/* An answer per call sent, in the order sent: counts in equal counts out. */
		LEDGER_ASSERT((size_t)PQntuples(res) == p->nclaims);
		for (size_t i = 0; i < p->nclaims && rc == LEDGER_OK; i++) {
			struct ledger_batch_op *op = p->claims[i];

			rc = store_fast_claim_read(res, (int)i, &op->claim->claim, &op->out,
						   &op->done);
		}
	}
	if (p->ncompletes > 0) {
		const PGresult *res = st->res[at++];

		LEDGER_ASSERT((size_t)PQntuples(res) == p->ncompletes);
		for (size_t i = 0; i < p->ncompletes && rc == LEDGER_OK; i++) {
			struct ledger_batch_op *op = p->completes[i];

			op->done = store_step_get_bool(res, (int)i, 6);
			if (op->done)
				rc = store_fast_complete_read(res, (int)i, op->completion,
							      &op->out);
		}
	}
	for (size_t i = 0; i < p->nsingles && rc == LEDGER_OK; i++)
		rc = store_fast_read(p->singles[i], st->res[at++]);
	return rc;
}

enum ledger_err ledger_store_batch(struct ledger_store_conn *conn, struct ledger_batch_op *ops,
				   size_t n)
{
	struct ledger_batch_op **order = NULL;
	struct batch_plan plan;
	struct store_step st;
	const char *params[BATCH_ARRAYS];
	unsigned first = 1; /* the first result after BEGIN (and the batch's lock) */
	enum ledger_err rc;

	memset(&plan, 0, sizeof(plan));
	for (size_t i = 0; i < n; i++) {
		memset(&ops[i].out, 0, sizeof(ops[i].out));
		if (ops[i].kind == LEDGER_BATCH_ATTEMPT)
			memset(ops[i].attempt_out, 0, sizeof(*ops[i].attempt_out));
		ops[i].done = false;
	}
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	store_step_begin(&st, conn);
	order = calloc(n, sizeof(*order));
	plan.claims = calloc(3 * n, sizeof(*plan.claims));
	plan.ev = calloc(n, sizeof(*plan.ev));
	if (order == NULL || plan.claims == NULL || plan.ev == NULL) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	plan.completes = plan.claims + n;
	plan.singles = plan.claims + 2 * n;
	plan.base = ops;
	for (size_t i = 0; i < n; i++)
		order[i] = &ops[i];
	qsort(order, n, sizeof(*order), by_key);
	rc = plan_batch(&plan, order, n);
	if (rc != LEDGER_OK ||
	    (rc = store_step_begin_many(&st, conn, (unsigned)plan.nsingles + 6)) != LEDGER_OK)
		goto out;

	store_step_add_simple(&st, "BEGIN");
	/*
	 * Statements over many calls lock in phases, one-call statements in
	 * key order: every batch takes batch_lock first, so two never wait
	 * for each other in a cycle.
	 */
	if (plan.nclaims > 0 || plan.ncompletes > 0) {
		store_step_add(&st, &batch_settings, NULL);
		first++;
	}
	store_step_add(&st, &batch_lock, params_of(&plan.lock, params, 2));
	first++;
	if (plan.nclaims > 0)
		store_step_add(&st, &claim_many, params_of(&plan.claim, params, 11));
	if (plan.ncompletes > 0)
		store_step_add(&st, &complete_many, params_of(&plan.complete, params, 10));
	for (size_t i = 0; i < plan.nsingles; i++)
		store_fast_add(&st, plan.singles[i], &plan.ev[plan.singles[i] - plan.base]);
	/* One commit, one flush, for every call of the batch; none answers before it. */
	rc = store_step_commit(&st);
	if (rc == LEDGER_OK) {
		count_batch(n);
		rc = batch_read(&plan, &st, first);
	}
	if (rc != LEDGER_OK) {
		/* Nothing of a failed batch is kept, or may be believed. */
		for (size_t i = 0; i < n; i++) {
			ledger_call_clear(&ops[i].out.call);
			if (ops[i].kind == LEDGER_BATCH_ATTEMPT)
				ledger_store_attempt_result_clear(ops[i].attempt_out);
			ops[i].done = false;
		}
	}
out:
	plan_free(&plan, n);
	store_step_free(&st);
	free(order);
	return rc;
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_batch_statements[] = {
	&batch_settings,
	&batch_lock,
	&claim_many,
	&complete_many,
	NULL,
};
