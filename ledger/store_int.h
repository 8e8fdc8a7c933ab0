/*
 * ledger/store_int.h: what the store's source files share and nobody else
 * sees: the connection, the statement table and the pipeline helpers.
 * A step of a transaction sends its statements in one pipeline and reads
 * their results after one sync: one round trip, whatever it holds.
 */
#ifndef LEDGER_STORE_INT_H
#define LEDGER_STORE_INT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "ledger/attempt.h"
#include "ledger/buf.h"
#include "ledger/err.h"
#include "ledger/jsonw.h"
#include "ledger/store.h"
#include "ledger/types.h"

/* A prepared statement: prepared on a connection the first time it is used. */
struct store_stmt {
	const char *name;
	const char *sql;
	int nparams;
};

#define STORE_MAX_STMTS 32 /* statements of all store files together */
#define STORE_MAX_STEP 8   /* statements in one pipeline step */

struct ledger_store_conn {
	PGconn *pg;               /* NULL while down */
	const char *database_url; /* borrowed */
	int64_t last_attempt_ms;  /* monotonic, of the last connect */
	int64_t reconnect_ms;
	const struct store_stmt *prepared[STORE_MAX_STMTS]; /* what this connection knows */
	unsigned nprepared;
	bool down_logged;  /* "database unreachable" said once */
	bool unreplicated; /* a commit of this step was not confirmed by the synchronous standby */
};

/*
 * One step: statements queued, then sent and read together. A step holds up
 * to STORE_MAX_STEP statements in place; a batch step (store_step_begin_many)
 * holds more, in memory it allocates and store_step_free() returns.
 */
struct store_step {
	struct ledger_store_conn *conn;
	unsigned n;                     /* statements queued by the caller */
	unsigned cap;                   /* statements it can hold */
	PGresult **res;                 /* their results, after a run */
	unsigned nsent;                 /* messages sent: statements and prepares */
	const struct store_stmt **sent; /* per message: a prepare's statement, or NULL */
	char (*ints)[24];               /* integer parameters, alive until the step is cleared */
	unsigned nints;
	PGresult *res_inline[STORE_MAX_STEP];
	const struct store_stmt *sent_inline[2 * STORE_MAX_STEP];
	char ints_inline[4 * STORE_MAX_STEP][24];
};

/* Each store file's statements, NULL-terminated (for ledger_store_sql()). */
extern const struct store_stmt *const store_admin_statements[];
extern const struct store_stmt *const store_calls_statements[];
extern const struct store_stmt *const store_failover_statements[];
extern const struct store_stmt *const store_gc_statements[];
extern const struct store_stmt *const store_reads_statements[];
extern const struct store_stmt *const store_rows_statements[];

/** Starts a step on @p conn; the connection must be up. */
void store_step_begin(struct store_step *st, struct ledger_store_conn *conn);

/**
 * Starts a step for @p cap statements, a batch's.
 * @return LEDGER_OK or LEDGER_ERR_NOMEM; end with store_step_free()
 */
LEDGER_MUSTCHECK enum ledger_err
store_step_begin_many(struct store_step *st, struct ledger_store_conn *conn, unsigned cap);

/** Clears the step and returns what store_step_begin_many() allocated. */
void store_step_free(struct store_step *st);

/**
 * Queues @p stmt with text parameters (NULL is SQL NULL); sent by
 * store_step_run(). Aborts on more than STORE_MAX_STEP statements (a bug).
 */
void store_step_add(struct store_step *st, const struct store_stmt *stmt,
		    const char *const *params);

/** Queues a statement without parameters, unprepared (BEGIN, COMMIT, ROLLBACK). */
void store_step_add_simple(struct store_step *st, const char *sql);

/**
 * Sends the queued statements, syncs, and collects a result for each.
 * @return LEDGER_OK when every statement succeeded; otherwise the class of
 *         the first failure (UNAVAILABLE, CONFLICT or INTERNAL), logged.
 */
LEDGER_MUSTCHECK enum ledger_err store_step_run(struct store_step *st);

/**
 * Formats @p v as a parameter that lives as long as the step.
 * @return the text, borrowed from @p st
 */
const char *store_step_int(struct store_step *st, int64_t v);

/** Frees the step's results. NULL-safe on results. */
void store_step_clear(struct store_step *st);

/**
 * Leaves no transaction open after a failed step: rolls back if the
 * connection is inside one, drops the connection if that fails.
 */
void store_abort(struct ledger_store_conn *conn);

/** True when the connection is up (connecting first if it is time to). */
bool store_conn_ready(struct ledger_store_conn *conn);

/** Copies a text column into @p dst (size @p cap), "" for NULL. */
void store_copy(const PGresult *res, int row, int col, char *dst, size_t cap);

/** Reads an int8 column; 0 for NULL. */
int64_t store_int(const PGresult *res, int row, int col);

/**
 * Appends @p s to the text of a PostgreSQL array literal in @p b (empty
 * before the first element), quoted and escaped; NULL appends an SQL NULL.
 * Finish with store_array_end().
 */
void store_array_add(struct ledger_buf *b, const char *s);

/** Closes the literal: "{}" when nothing was added. */
void store_array_end(struct ledger_buf *b);

/** Reads a boolean column ("t"). */
bool store_bool(const PGresult *res, int row, int col);

/** A new copy of a text column, or NULL for NULL (@p len_out may be NULL). */
char *store_dup(const PGresult *res, int row, int col, size_t *len_out);

/* --- tool-call rows (ledger/store_rows.c) --- */

/* clang-format off */
/*
 * RFC 3339 with milliseconds, in UTC. The colons are quoted literals of the
 * pattern so that no ':' is followed by a letter: pgbench, which runs this
 * same SQL in make bench, would read ":MI" as one of its variables.
 */
#define STORE_TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24\":\"MI\":\"SS.MS\"Z\"')"
#define STORE_LEASE_FROM(now, ms) "(" now " + (" ms ")::bigint * interval '1 millisecond')"

/*
 * A call's columns as struct ledger_call needs them, over "c" (the call),
 * "t" (its tombstone) and "now_" (the clock). Keep in step with enum store_call_col.
 */
#define STORE_CALL_COLUMNS                                                                              \
	"c.state, c.fencing_token, c.claim_id, c.attempt_id, c.owner, c.tool, c.args_sha256, "   \
	"c.tool_dedupes, "                                                                        \
	"CASE WHEN c.state = 'in_progress' AND c.lease_until > now_.t "                           \
	"     THEN ceil(extract(epoch FROM c.lease_until - now_.t) * 1000)::bigint ELSE 0 END, "  \
	"c.completed_token, c.completed_by, c.result, c.args, " STORE_TS("c.created_at") ", "           \
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

/* A request's columns as store_parse_request() reads them. */
#define STORE_REQUEST_COLUMNS                                                                     \
	"status, first_delta_sent, delivered_output_tokens, attempt_count,"                       \
	" coalesce(max_attempts, 0), model_revision, client_error, " STORE_TS("created_at")

/* An attempt's columns over "a" and the clock "now_", as store_parse_attempt() reads them. */
#define STORE_ATTEMPT_COLUMNS                                                                     \
	"a.attempt_id, a.epoch, a.replica, a.model_revision, a.revision_given, a.state,"          \
	" CASE WHEN a.state IN ('live', 'cancel_requested') AND a.lease_until > now_.t"           \
	"      THEN ceil(extract(epoch FROM a.lease_until - now_.t) * 1000)::bigint ELSE 0 END,"   \
	" a.is_retry, a.delivered_output_tokens, " STORE_TS("a.created_at")
/* clang-format on */

/** Reads the request at @p row (none there: exists false). @return OK or NOMEM */
LEDGER_MUSTCHECK enum ledger_err store_parse_request(const PGresult *res, int row,
						     struct ledger_request *r, char **client_error);

/** Reads the attempt at @p row, deriving EXPIRED from its lease. */
void store_parse_attempt(const PGresult *res, int row, struct ledger_attempt *a);

/* The statements every tool-call transaction starts with (store_rows.c). */
extern const struct store_stmt store_lock_request;  /* $1 tenant, $2 request: lock, create */
extern const struct store_stmt store_lock_existing; /* the same, without creating */
extern const struct store_stmt store_read_call;     /* $1..$3: the call, after the lock */
extern const struct store_stmt store_read_request;  /* $1, $2: the request's row */
extern const struct store_stmt store_read_attempts; /* see store_rows.c */

/**
 * Fills @p call from STORE_CALL_COLUMNS starting at column @p base of
 * @p row, deriving UNKNOWN from a lease that ran out.
 * @return LEDGER_OK or LEDGER_ERR_NOMEM
 */
LEDGER_MUSTCHECK enum ledger_err store_parse_call(const PGresult *res, int row, int base,
						  struct ledger_call *call);

/** The stored name of who completed a call ("holder", "late", "resolve"). */
const char *store_completed_by_name(enum ledger_completed_by by);

/* An event being built, to be inserted in the transaction it records. */
struct store_event {
	const char *type;       /* "claimed", "completed", "refused", ... */
	const char *attempt_id; /* NULL: none */
	struct ledger_buf detail;
	struct ledger_jsonw w; /* writes into detail; the object is left open */
};

void store_event_start(struct store_event *ev, const char *type, const char *attempt_id);
/** Starts a "refused" event of @p operation with the API's error @p code. */
void store_event_refused(struct store_event *ev, const char *operation, const char *code,
			 const char *attempt_id);
void store_event_int(struct store_event *ev, const char *key, int64_t v);
/** Adds @p s, or nothing when it is NULL or empty. */
void store_event_str(struct store_event *ev, const char *key, const char *s);
/** Closes the detail and queues the event's INSERT; @p ev must outlive the step. */
void store_event_add(struct store_step *st, const struct ledger_call_key *key,
		     struct store_event *ev);
void store_event_free(struct store_event *ev);

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
};

/* The ids a transaction looks up besides its request; any may be NULL. */
struct store_lookup {
	const char *attempt_id;        /* -> named */
	const char *second_attempt_id; /* -> second */
	const char *tool_call_id;      /* -> the call, and of_call */
	bool calls_summary;            /* -> calls: what the calls mean for a rerun */
};

/**
 * Opens a transaction, locks the request (creating it when @p create) and
 * reads, after the lock, the request, the attempts @p look names with the
 * newest, and the call. On LEDGER_OK the transaction stays open: end it with
 * store_commit() or store_rollback(), then store_locked_clear().
 * @param call may be NULL when @p look names no call
 */
LEDGER_MUSTCHECK enum ledger_err store_lock_and_read(struct ledger_store_conn *conn,
						     const char *tenant, const char *request_id,
						     bool create, const struct store_lookup *look,
						     struct store_locked *lk,
						     struct ledger_call *call);

/** Frees what @p lk owns. */
void store_locked_clear(struct store_locked *lk);

/**
 * Counts the tenant's attempts in the policy's window, under a per-tenant
 * lock held until the transaction ends, so that concurrent retries of one
 * tenant cannot all pass a budget that has room for one.
 */
LEDGER_MUSTCHECK enum ledger_err store_read_budget(struct ledger_store_conn *conn,
						   const char *tenant,
						   const struct ledger_policy *p,
						   struct ledger_budget *out);

/**
 * Queues the creation of attempt @p a (its id, epoch, replica, revision,
 * lease in lease_ms_left, is_retry) and its attempt_created event.
 */
void store_attempt_insert(struct store_step *st, const char *tenant, const char *request_id,
			  const struct ledger_attempt *a, struct store_event *ev, bool reopened);

/**
 * Queues the writes that make the request's row read @p r (its status,
 * delta, counts, revision) and its client error @p client_error (NULL:
 * none).
 */
void store_request_set(struct store_step *st, const char *tenant, const char *request_id,
		       const struct ledger_request *r, const char *client_error);

/**
 * Queues the write of an attempt's state, and optionally a new lease
 * (@p lease_ms > 0), progress (@p delivered >= 0) or outcome (non-NULL).
 */
void store_attempt_set(struct store_step *st, const char *tenant, const char *request_id,
		       const char *attempt_id, enum ledger_attempt_state state, int64_t lease_ms,
		       int64_t delivered, const char *outcome);

/** Runs the statements queued in @p st (writes, events), then COMMIT. */
LEDGER_MUSTCHECK enum ledger_err store_commit(struct store_step *st);

/** Ends a transaction that wrote nothing. */
LEDGER_MUSTCHECK enum ledger_err store_rollback(struct ledger_store_conn *conn);

/**
 * Runs @p op (whose arguments are @p arg) on @p out (zeroed first, @p size
 * bytes), and again on a serialization failure or a deadlock, after
 * @p reset frees what the failed try left in it: every operation is
 * idempotent. Answers LEDGER_ERR_UNAVAILABLE at once while the connection
 * is down.
 */
LEDGER_MUSTCHECK enum ledger_err store_with_retries(
	struct ledger_store_conn *conn,
	enum ledger_err (*op)(struct ledger_store_conn *conn, const void *arg, void *out),
	const void *arg, void *out, size_t size, void (*reset)(void *out));

/** Writes @p v in decimal, as a statement parameter. */
void store_fmt_int(char buf[24], int64_t v);

#endif
