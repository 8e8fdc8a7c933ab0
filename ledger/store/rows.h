/*
 * ledger/store/rows.h: the rows every transaction of the store is made of:
 * the columns of a call, a request and an attempt and their readers,
 * locking a request and reading what lies under it after the lock, the
 * writes of requests and attempts, and the events that record each change.
 */
#ifndef LEDGER_STORE_ROWS_H
#define LEDGER_STORE_ROWS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "ledger/common/buf.h"
#include "ledger/common/err.h"
#include "ledger/common/jsonw.h"
#include "ledger/core/attempt.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"
#include "ledger/store/event.h"
#include "ledger/store/step.h"
#include "ledger/store/store.h"

/* clang-format off */
/*
 * RFC 3339 with milliseconds, in UTC. The colons are quoted literals of the
 * pattern so that no ':' is followed by a letter: pgbench, which runs this
 * same SQL in make bench, would read ":MI" as one of its variables.
 */
#define STORE_TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24\":\"MI\":\"SS.MS\"Z\"')"
#define STORE_LEASE_FROM(now, ms) "(" now " + (" ms ")::bigint * interval '1 millisecond')"
/*
 * The next seq of the history (sql/004_history_in_rows.sql): for the events
 * a tool call's row carries, the claim and the holder's completion, drawn
 * from the sequence event_log's own rows take theirs from.
 */
#define STORE_NEXT_SEQ "nextval('event_seq')"

/*
 * A call's columns as struct ledger_call needs them, over "c" (the call),
 * "t" (its tombstone) and "now_" (the clock). Keep in step with enum store_call_col.
 */
#define STORE_CALL_COLUMNS                                                                              \
	"c.state, c.fencing_token, c.claim_id, c.attempt_id, c.owner, c.tool, c.args_sha256, "   \
	"c.tool_dedupes, "                                                                        \
	"CASE WHEN c.state = 'in_progress' AND c.lease_until > now_.t "                           \
	"     THEN ceil(extract(epoch FROM c.lease_until - now_.t) * 1000)::bigint ELSE 0 END, "  \
	"c.completed_token, c.completed_by, c.result, c.result_bytes, c.result_sha256, c.args, "  \
	STORE_TS("c.created_at") ", "                                                             \
	STORE_TS("c.completed_at") ", t.args_sha256, t.outcome, " STORE_TS("t.completed_at")

enum store_call_col {
	STORE_COL_STATE,
	STORE_COL_TOKEN,
	STORE_COL_CLAIM_ID,
	STORE_COL_ATTEMPT_ID,
	STORE_COL_OWNER,
	STORE_COL_TOOL,
	STORE_COL_ARGS_SHA256,
	STORE_COL_DEDUPES,
	STORE_COL_LEASE_LEFT,
	STORE_COL_COMPLETED_TOKEN,
	STORE_COL_COMPLETED_BY,
	STORE_COL_RESULT,
	STORE_COL_RESULT_BYTES,  /* with STORE_COL_RESULT_SHA256: a result not kept */
	STORE_COL_RESULT_SHA256,
	STORE_COL_ARGS,
	STORE_COL_CREATED_AT,
	STORE_COL_COMPLETED_AT,
	STORE_COL_TOMB_ARGS,
	STORE_COL_TOMB_OUTCOME,
	STORE_COL_TOMB_COMPLETED_AT,
	STORE_NCOLS
};

/* The call ($1 tenant, $2 request, $3 call) and its tombstone, if any. */
#define STORE_CALL_FROM                                                                                 \
	" FROM (SELECT clock_timestamp() AS t) now_"                                              \
	" LEFT JOIN tool_calls c"                                                                 \
	"   ON c.tenant = $1 AND c.request_id = $2 AND c.tool_call_id = $3"                       \
	" LEFT JOIN tool_call_tombstones t"                                                       \
	"   ON c.tenant IS NULL AND t.tenant = $1 AND t.request_id = $2"                          \
	"  AND t.tool_call_id = $3 AND t.expires_at > now_.t"

/* A request's columns as store_rows_parse_request() reads them: STORE_REQUEST_NCOLS of them. */
#define STORE_REQUEST_COLUMNS                                                                     \
	"status, first_delta_sent, delivered_output_tokens, attempt_count,"                       \
	" coalesce(max_attempts, 0), model_revision, client_error, " STORE_TS("created_at")       \
	", input_sha256"
#define STORE_REQUEST_NCOLS 9

/* An attempt's columns over "a" and the clock "now_", as store_rows_parse_attempt() reads them. */
#define STORE_ATTEMPT_COLUMNS                                                                     \
	"a.attempt_id, a.epoch, a.replica, a.model_revision, a.revision_given, a.state,"          \
	" CASE WHEN a.state IN ('live', 'cancel_requested') AND a.lease_until > now_.t"           \
	"      THEN ceil(extract(epoch FROM a.lease_until - now_.t) * 1000)::bigint ELSE 0 END,"   \
	" a.is_retry, a.delivered_output_tokens, " STORE_TS("a.created_at") ", a.gateway"
#define STORE_ATTEMPT_NCOLS 11
/* clang-format on */

/** Reads the request at @p row (none there: exists false). @return OK or NOMEM */
LEDGER_MUSTCHECK enum ledger_err store_rows_parse_request(const PGresult *res, int row,
							  struct ledger_request *r,
							  char **client_error);

/** The same, its columns from column @p base of @p row on. */
LEDGER_MUSTCHECK enum ledger_err store_rows_parse_request_at(const PGresult *res, int row,
							     int base, struct ledger_request *r,
							     char **client_error);

/** Reads the attempt at @p row, deriving EXPIRED from its lease. */
void store_rows_parse_attempt(const PGresult *res, int row, struct ledger_attempt *a);

/* The statements every tool-call transaction starts with (ledger/store/rows.c). */
extern const struct store_stmt store_rows_lock_request;  /* $1 tenant, $2 request: lock, create */
extern const struct store_stmt store_rows_lock_existing; /* the same, without creating */
extern const struct store_stmt store_rows_read_call;     /* $1..$3: the call, after the lock */
extern const struct store_stmt store_rows_read_request;  /* $1, $2: the request's row */
extern const struct store_stmt store_rows_read_attempts; /* see ledger/store/rows.c */

/**
 * Fills @p call from STORE_CALL_COLUMNS starting at column @p base of
 * @p row, deriving UNKNOWN from a lease that ran out.
 * @return LEDGER_OK or LEDGER_ERR_NOMEM
 */
LEDGER_MUSTCHECK enum ledger_err store_rows_parse_call(const PGresult *res, int row, int base,
						       struct ledger_call *call);

/** The stored name of who completed a call ("holder", "late", "resolve"). */
const char *store_rows_completed_by_name(enum ledger_completed_by by);

/** Makes @p call the new holder's view of a call it just claimed with @p token. */
void store_rows_set_claimed(struct ledger_call *call, const struct ledger_claim *c, int64_t token);

/**
 * Makes @p call the view of a call whose completion @p c was just stored
 * by @p by, its completed_at read from column @p col of @p row of @p res.
 * @return LEDGER_OK or LEDGER_ERR_NOMEM
 */
LEDGER_MUSTCHECK enum ledger_err store_rows_set_completed(struct ledger_call *call,
							  const struct ledger_completion *c,
							  const PGresult *res, int row, int col,
							  enum ledger_completed_by by);

/**
 * Reads the settled calls of store_rows_settled_calls' result.
 * @param out a new array of *@p n calls; caller frees with free()
 * @return LEDGER_OK or LEDGER_ERR_NOMEM
 */
LEDGER_MUSTCHECK enum ledger_err
store_rows_parse_settled(const PGresult *res, struct ledger_settled_call **out, size_t *n);

/* $1 tenant, $2 request: its settled calls, by id (ledger/store/rows.c). */
extern const struct store_stmt store_rows_settled_calls;

/* What locking a request found, read after the lock. */
struct store_locked {
	bool created;                      /* this transaction created the request's row */
	struct ledger_request request;     /* request.exists false: no such request */
	char *client_error;                /* owned: the request's recorded client error, or NULL */
	struct ledger_attempt named;       /* the attempt the caller named (exists false: none) */
	struct ledger_attempt second;      /* a second attempt the caller named */
	struct ledger_attempt of_call;     /* the attempt the call was claimed under */
	struct ledger_attempt newest;      /* the request's newest attempt */
	struct ledger_calls_summary calls; /* with store_lookup.calls_summary */
	struct ledger_settled_call *settled; /* owned: with store_lookup.settled_calls */
	size_t nsettled;
};

/* The ids a transaction looks up besides its request; any may be NULL. */
struct store_lookup {
	const char *attempt_id;        /* -> named */
	const char *second_attempt_id; /* -> second */
	const char *tool_call_id;      /* -> the call, and of_call */
	bool calls_summary;            /* -> calls: what the calls mean for a rerun */
	bool settled_calls;            /* -> settled: the request's settled calls */
};

/**
 * Opens a transaction, locks the request (creating it when @p create) and
 * reads, after the lock, the request, the attempts @p look names with the
 * newest, and the call. On LEDGER_OK the transaction stays open: end it with
 * store_step_commit() or store_step_rollback(), then store_rows_locked_clear().
 * @param call may be NULL when @p look names no call
 */
LEDGER_MUSTCHECK enum ledger_err
store_rows_lock_and_read(struct ledger_store_conn *conn, const char *tenant, const char *request_id,
			 bool create, const struct store_lookup *look, struct store_locked *lk,
			 struct ledger_call *call);

/** Frees what @p lk owns. */
void store_rows_locked_clear(struct store_locked *lk);

/**
 * Counts the tenant's attempts in the policy's window, under a per-tenant
 * lock held until the transaction ends, so that concurrent retries of one
 * tenant cannot all pass a budget that has room for one.
 */
LEDGER_MUSTCHECK enum ledger_err store_rows_read_budget(struct ledger_store_conn *conn,
							const char *tenant,
							const struct ledger_policy *p,
							struct ledger_budget *out);

/**
 * When the tenant's pool-wide budget next allows a retry, in ms from now (at
 * least 1; ledger_attempt_budget_retry_after() decides), read in the
 * transaction of store_rows_read_budget(), under its lock.
 */
LEDGER_MUSTCHECK enum ledger_err store_rows_read_retry_after(struct ledger_store_conn *conn,
							     const char *tenant,
							     const struct ledger_policy *p,
							     int64_t *out);

/**
 * Starts @p ev as the attempt_created event of attempt @p a, with what
 * @p in gave beside it (its detail's object left open, for store_event_add()).
 */
void store_rows_attempt_created(struct store_event *ev, const struct ledger_attempt *a,
				const struct ledger_attempt_request *in, bool reopened);

/**
 * Queues the creation of attempt @p a (its id, epoch, replica, gateway,
 * revision, lease in lease_ms_left, is_retry) and its attempt_created
 * event, whose detail also carries what @p in (borrowed until the step
 * runs) gave beside it: its identity, as sent, and its input_sha256.
 */
void store_rows_attempt_insert(struct store_step *st, const char *tenant, const char *request_id,
			       const struct ledger_attempt *a,
			       const struct ledger_attempt_request *in, struct store_event *ev,
			       bool reopened);

/**
 * Queues the writes that make the request's row read @p r (its status,
 * delta, counts, revision) and its client error @p client_error (NULL:
 * none).
 */
void store_rows_request_set(struct store_step *st, const char *tenant, const char *request_id,
			    const struct ledger_request *r, const char *client_error);

/**
 * Queues the write of an attempt's state, and optionally a new lease
 * (@p lease_ms > 0), progress (@p delivered >= 0) or outcome (non-NULL).
 */
void store_rows_attempt_set(struct store_step *st, const char *tenant, const char *request_id,
			    const char *attempt_id, enum ledger_attempt_state state,
			    int64_t lease_ms, int64_t delivered, const char *outcome);

#endif
