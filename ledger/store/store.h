/*
 * ledger/store/store.h: ledgerd's only door to PostgreSQL. A pool of workers,
 * each with its own connection (in pipeline mode) and prepared statements,
 * takes jobs from one queue; the HTTP layer never waits on the database.
 *
 * Every mutation locks its request's row first and reads the database clock
 * after the lock (docs/design.md, Concurrency). The common operations (a claim
 * of a new key, a completion or renewal by the current holder) are one
 * statement; everything else reads the call under the lock, asks
 * ledger/core/decide.c, and writes what it decided, with its event, in the same
 * transaction. A function returns only after its COMMIT is durable.
 */
#ifndef LEDGER_STORE_H
#define LEDGER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/core/answer.h"
#include "ledger/core/attempt.h"
#include "ledger/core/decide.h"
#include "ledger/core/failover.h"
#include "ledger/core/policy.h"
#include "ledger/common/err.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"
#include "ledger/store/migrate.h"

struct ledger_store;      /* the pool: queue and workers */
struct ledger_store_conn; /* one connection; owned by one thread at a time */

struct ledger_store_config {
	const char *database_url; /* borrowed for the store's lifetime */
	unsigned workers;
	unsigned batch_max;   /* jobs a worker may take at once (1: no batching) */
	int64_t reconnect_ms; /* least time between connection attempts */
	size_t queue_max;     /* jobs that may wait for a worker; more are answered at once */
};

/**
 * Starts the workers; they connect in the background, so the store starts
 * even while the database is down.
 * @param out a new store; stop with ledger_store_close()
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_open(const struct ledger_store_config *cfg,
						   struct ledger_store **out);

/** Jobs waiting for a worker. Thread-safe. */
size_t ledger_store_queue_depth(struct ledger_store *store);

/**
 * Database failures since start, by kind: LEDGER_ERR_UNAVAILABLE (the
 * database could not be reached or the connection broke), _CONFLICT
 * (serialization failure or deadlock, retried), _INTERNAL (anything else).
 * Thread-safe.
 */
uint64_t ledger_store_errors(enum ledger_err kind);

/**
 * False from the moment a connection attempt of this process fails until
 * one succeeds again (a call that finds its connection broken does not
 * move it: its next attempt does); true before any attempt. Thread-safe.
 */
bool ledger_store_reachable(void);

/**
 * Batches committed (transactions of two calls or more) and the calls they
 * carried, since start. Thread-safe.
 */
void ledger_store_batch_stats(uint64_t *transactions, uint64_t *calls);

/** Upper bounds of the buckets of ledger_store_batch_sizes(), the last +Inf. */
#define LEDGER_STORE_BATCH_BUCKETS 7
extern const unsigned ledger_store_batch_bounds[LEDGER_STORE_BATCH_BUCKETS - 1];

/**
 * How many calls each batch committed carried: @p counts[i] batches of at
 * most ledger_store_batch_bounds[i] calls and more than the bound before
 * (not cumulative), the last bucket those above every bound. Thread-safe.
 */
void ledger_store_batch_sizes(uint64_t counts[LEDGER_STORE_BATCH_BUCKETS]);

/** Round trips to the database (statements sent, then their results awaited), since start. */
uint64_t ledger_store_round_trips(void);

/**
 * The text of the statement called @p name, as ledgerd prepares it; NULL if
 * there is none. Benchmarks run the very same SQL through pgbench.
 */
const char *ledger_store_sql(const char *name);

/**
 * The name and text of the @p i-th statement the store prepares, counting
 * from 0; NULL past the last. Static strings. Tests read every statement
 * through these (docs/scaling.md: each names its distribution key).
 */
const char *ledger_store_sql_name(size_t i);
const char *ledger_store_sql_text(size_t i);

/**
 * Turns the one-statement fast paths (ledger/store/fast.c), and with them
 * batching and the replay cache's answers, on or off for the whole
 * process: off, every call takes the general path that locks, reads and
 * decides in C. The contract suite runs both ways (make test). Call before
 * serving; thread-safe.
 */
void ledger_store_set_fast_paths(bool on);

/** Whether the fast paths are on. Thread-safe. */
bool ledger_store_fast_paths(void);

/**
 * Bounds every wait for the database, in every thread of the process: a
 * call whose statements or COMMIT are not answered within @p ms (counted
 * from the moment it was queued) is answered LEDGER_ERR_UNAVAILABLE, and
 * so is one still queued then. 0 (the default, for the command-line
 * tools): no bound. Call before serving; thread-safe.
 */
void ledger_store_set_timeout(int64_t ms);

/** The bound set by ledger_store_set_timeout(). Thread-safe. */
int64_t ledger_store_timeout(void);

/** Waits that ran past the bound since start, for /metrics. Thread-safe. */
uint64_t ledger_store_timeouts(void);

/* Calls answered without reaching the database, by why, for /metrics. */
enum ledger_store_shed {
	LEDGER_STORE_SHED_QUEUE_FULL, /* the queue held queue_max jobs */
	LEDGER_STORE_SHED_STALLED,    /* every worker waits on a database that stopped answering */
	LEDGER_STORE_SHED_EXPIRED,    /* it waited in the queue past the bound */
};
#define LEDGER_STORE_SHED_KINDS 3

/** Calls shed for @p why since start. Thread-safe. */
uint64_t ledger_store_shed_count(enum ledger_store_shed why);

/** Workers waiting on a database that stopped answering, now. Thread-safe. */
unsigned ledger_store_stalled(struct ledger_store *store);

/**
 * After a wait ran past its bound (the call was answered 503), reads what
 * the database still owes the connection and ends its transaction, within
 * a longer bound; past it the connection is closed. Nothing is ever
 * cancelled. A connection needing it reports not ready until then. For
 * the thread that owns @p conn, between calls.
 */
void ledger_store_settle(struct ledger_store_conn *conn);

/** True when a wait on @p conn ran past its bound and ledger_store_settle() is due. */
bool ledger_store_stuck(const struct ledger_store_conn *conn);

/** Runs the jobs still queued, then stops the workers and frees @p store. */
void ledger_store_close(struct ledger_store *store);

/**
 * A standalone connection, for the command-line tools.
 * @param out a new connection; free with ledger_store_disconnect()
 * @param err receives one line on failure
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_connect(const char *database_url,
						      struct ledger_store_conn **out, char *err,
						      size_t errlen);
void ledger_store_disconnect(struct ledger_store_conn *conn);

/* --- operations: each takes the connection of the calling worker --- */

/**
 * What the database's migration record says: its schema version (0: never
 * migrated) and the oldest ledgerd schema that may serve it.
 * @return LEDGER_OK or LEDGER_ERR_UNAVAILABLE
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_schema_version(struct ledger_store_conn *conn,
							     struct ledger_schema_state *out);

/**
 * Applies the migrations built into ledgerd under an advisory lock, so
 * concurrent processes apply each exactly once. A database at a newer
 * schema this ledgerd may serve (ledger_migrate_fit()) is left as it is;
 * one it may not serve is refused with LEDGER_ERR_INVALID and @p err.
 * @param applied_out how many this call applied
 * @param state_out the schema the database is at when the call returns
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_migrate(struct ledger_store_conn *conn,
						      unsigned *applied_out,
						      struct ledger_schema_state *state_out,
						      char *err, size_t errlen);

/* --- API tokens (ledger/store/tokens.c): only their SHA-256 is stored --- */

/**
 * Finds the tenant and role of a token that works now: never revoked, or
 * revoked from a time still to come (a rotation's grace period).
 * @param tenant receives the tenant (LEDGER_ID_MAX + 1 bytes) when found
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_token_lookup(struct ledger_store_conn *conn,
							   const unsigned char sha256[32],
							   bool *found, char *tenant,
							   enum ledger_role *role);

/**
 * The hashes of every token that works now (as ledger_store_token_lookup()
 * would find it), in no order: what ledgerd serve keeps in memory.
 * @param hashes receives a new array of @p count hashes; caller frees with free()
 * @return LEDGER_OK, LEDGER_ERR_NOMEM or a database failure (*hashes is then NULL)
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_token_hashes(struct ledger_store_conn *conn,
							   unsigned char (**hashes)[32],
							   size_t *count);

/** Records a token's SHA-256 for @p tenant with @p role. */
LEDGER_MUSTCHECK enum ledger_err ledger_store_token_insert(struct ledger_store_conn *conn,
							   const unsigned char sha256[32],
							   const char *tenant,
							   enum ledger_role role);

/* A stored token as the command line shows it: its hash, never the token. */
struct ledger_token_info {
	unsigned char sha256[32];
	char tenant[LEDGER_ID_MAX + 1];
	enum ledger_role role;
	char created_at[32]; /* UTC, "2024-05-01T10:00:00.000Z" */
	char revoked_at[32]; /* the same form; "" if never revoked */
	bool revoked;        /* revoked_at has passed, by the database's clock */
};

/* What a revoke or a rotation did. */
enum ledger_token_change {
	LEDGER_TOKEN_CHANGED,         /* revoked (and, by a rotation, replaced) now */
	LEDGER_TOKEN_ABSENT,          /* no token has that hash */
	LEDGER_TOKEN_ALREADY_REVOKED, /* revoke: revoked_at had passed; rotate: it was set */
};

/** Reads the token @p sha256, revoked or not, into @p out when @p found. */
LEDGER_MUSTCHECK enum ledger_err ledger_store_token_get(struct ledger_store_conn *conn,
							const unsigned char sha256[32], bool *found,
							struct ledger_token_info *out);

/**
 * Every token, by created_at and then hash.
 * @param rows receives a new array of @p count rows; caller frees with free()
 * @return LEDGER_OK, LEDGER_ERR_NOMEM or a database failure (*rows is then NULL)
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_token_list(struct ledger_store_conn *conn,
							 struct ledger_token_info **rows,
							 size_t *count);

/**
 * Counts the tokens whose hash, in lower-case hex, starts with @p prefix
 * (1 to 64 of [0-9a-f]), and reads the first of them into @p first.
 * @return LEDGER_ERR_INVALID for a prefix that is not that
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_token_find(struct ledger_store_conn *conn,
							 const char *prefix, size_t *matches,
							 struct ledger_token_info *first);

/**
 * Revokes the token @p sha256 from now. A token in its grace period is
 * revoked now; one whose revoked_at has passed is left as it is
 * (LEDGER_TOKEN_ALREADY_REVOKED). @p out receives the row as it then is,
 * unless LEDGER_TOKEN_ABSENT.
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_token_revoke(struct ledger_store_conn *conn,
							   const unsigned char sha256[32],
							   enum ledger_token_change *change,
							   struct ledger_token_info *out);

/**
 * In one transaction, stores @p new_sha256 with the tenant and role of
 * @p old_sha256 and revokes the old token from now plus @p grace_ms (0:
 * now). Only a token never revoked is rotated: one with revoked_at set,
 * past or future, is LEDGER_TOKEN_ALREADY_REVOKED and nothing changes.
 * @p out receives the old token's row as it then is, unless LEDGER_TOKEN_ABSENT.
 */
LEDGER_MUSTCHECK enum ledger_err
ledger_store_token_rotate(struct ledger_store_conn *conn, const unsigned char old_sha256[32],
			  const unsigned char new_sha256[32], int64_t grace_ms,
			  enum ledger_token_change *change, struct ledger_token_info *out);

/* The key of a tool call, within a tenant. All borrowed. */
struct ledger_call_key {
	const char *tenant;
	const char *request_id;
	const char *tool_call_id;
};

/* What a holder's late final outcome proved about an earlier not_executed resolution. */
enum ledger_contradiction {
	LEDGER_CONTRADICTION_NONE,
	LEDGER_CONTRADICTION_RESOLVE,   /* it did execute; nobody claimed the key since */
	LEDGER_CONTRADICTION_DUPLICATE, /* it did execute, and the key was claimed since */
};

/* What an operation decided, and the call as it stands afterwards. */
struct ledger_call_result {
	union {
		enum ledger_claim_outcome claim;
		enum ledger_complete_outcome complete;
		enum ledger_renew_outcome renew;
		enum ledger_release_outcome release;
		enum ledger_resolve_outcome resolve;
	} outcome;
	const char *mismatch; /* claim ARGS_MISMATCH: the field that differs */
	bool no_attempts;     /* known: the request had no attempts (replay cache) */
	enum ledger_contradiction contradiction; /* complete: recorded with its event */
	struct ledger_call call;                 /* owned: ledger_call_clear() when done */
};

/* A claim as sent, with what the store keeps beyond the decision. */
struct ledger_claim_request {
	struct ledger_claim claim; /* what decides */
	const char *args;          /* exact text to keep when store_args; else NULL */
	size_t args_len;
};

LEDGER_MUSTCHECK enum ledger_err ledger_store_claim(struct ledger_store_conn *conn,
						    const struct ledger_call_key *key,
						    const struct ledger_claim_request *req,
						    struct ledger_call_result *out);

LEDGER_MUSTCHECK enum ledger_err ledger_store_complete(struct ledger_store_conn *conn,
						       const struct ledger_call_key *key,
						       const struct ledger_completion *c,
						       struct ledger_call_result *out);

LEDGER_MUSTCHECK enum ledger_err ledger_store_renew(struct ledger_store_conn *conn,
						    const struct ledger_call_key *key,
						    int64_t fencing_token, int64_t lease_ms,
						    struct ledger_call_result *out);

/** @param reason free text for the history, or NULL */
LEDGER_MUSTCHECK enum ledger_err ledger_store_release(struct ledger_store_conn *conn,
						      const struct ledger_call_key *key,
						      int64_t fencing_token, const char *reason,
						      struct ledger_call_result *out);

/**
 * @param result exact JSON text, or NULL for null
 * @param note free text for the history, or NULL
 */
LEDGER_MUSTCHECK enum ledger_err
ledger_store_resolve(struct ledger_store_conn *conn, const struct ledger_call_key *key,
		     enum ledger_resolution resolution, const char *result, size_t result_len,
		     const char *note, struct ledger_call_result *out);

/** Reads one call (no lock). out->call.state is ABSENT or TOMBSTONE if gone. */
LEDGER_MUSTCHECK enum ledger_err ledger_store_get_call(struct ledger_store_conn *conn,
						       const struct ledger_call_key *key,
						       struct ledger_call *out);

/* One listed call: the row and its key. */
struct ledger_listed_call {
	char request_id[LEDGER_ID_MAX + 1];
	char tool_call_id[LEDGER_ID_MAX + 1];
	struct ledger_call call; /* owned */
};

/**
 * Lists a tenant's calls in key order after the cursor key.
 * @param state ABSENT for every state, or one of IN_PROGRESS, UNKNOWN,
 *        SUCCEEDED, FAILED, RELEASED
 * @param after_request_id, after_tool_call_id the last key of the previous
 *        page, or NULL for the first page
 * @param items_out a new array of @p *count_out items (up to @p limit);
 *        free with ledger_store_free_list()
 */
LEDGER_MUSTCHECK enum ledger_err
ledger_store_list_calls(struct ledger_store_conn *conn, const char *tenant,
			enum ledger_call_state state, const char *after_request_id,
			const char *after_tool_call_id, unsigned limit,
			struct ledger_listed_call **items_out, size_t *count_out);

void ledger_store_free_list(struct ledger_listed_call *items, size_t count);

/* --- batches (ledger/store/calls.c) --- */

enum ledger_batch_kind {
	LEDGER_BATCH_CLAIM,    /* a claim of a key nobody claimed, or a replay */
	LEDGER_BATCH_COMPLETE, /* the current holder's completion */
	LEDGER_BATCH_RENEW,    /* the current holder's renewal */
	LEDGER_BATCH_ATTEMPT,  /* the live attempt's deliver, or its finish */
};

struct ledger_attempt_call;
struct ledger_attempt_request;
struct ledger_attempt_result;
struct ledger_policy;

/* One call of a batch: its one-statement fast path, and what it answered. */
struct ledger_batch_op {
	enum ledger_batch_kind kind;
	struct ledger_call_key key;
	const struct ledger_claim_request *claim;   /* CLAIM; borrowed */
	const struct ledger_completion *completion; /* COMPLETE; borrowed */
	int64_t fencing_token, lease_ms;            /* RENEW */
	const char *attempt_id;                     /* ATTEMPT: a deliver, a finish; borrowed */
	const struct ledger_attempt_call *attempt_call; /* ATTEMPT: a deliver, a finish; borrowed */
	const struct ledger_attempt_request *attempt_create; /* ATTEMPT: POST attempts; borrowed */
	const struct ledger_policy *policy;                  /* ATTEMPT: POST attempts; borrowed */
	struct ledger_attempt_result *attempt_out; /* ATTEMPT: its answer, when done; borrowed,
						      what it is filled with is the caller's */
	bool done;                     /* the fast path answered; else run the operation alone */
	struct ledger_call_result out; /* when done; owned: ledger_call_clear(&out.call) */
};

/**
 * Runs the fast paths of @p n calls in one transaction and one round trip,
 * their requests locked in one order. Each call's outcome is its own: a
 * call whose fast path does not apply comes back not done, for its
 * operation to run alone, and does not disturb the others.
 * @return LEDGER_OK; LEDGER_ERR_UNAVAILABLE when the outcome of the commit
 *         cannot be known (answer 503: every call is idempotent); any
 *         other error when the transaction rolled back (every op not done:
 *         run each alone)
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_batch(struct ledger_store_conn *conn,
						    struct ledger_batch_op *ops, size_t n);

/* --- attempts (ledger/store/attempts.c, ledger/store/failover.c) --- */

/* What an attempt operation decided, and how things stand afterwards. */
struct ledger_attempt_result {
	bool found; /* false: no such attempt (404 attempt_not_found) */
	union {
		enum ledger_create_outcome create;
		enum ledger_attempt_op_outcome op;
	} outcome;
	struct ledger_request request;  /* the request afterwards */
	char *client_error;             /* owned: its recorded client error, or NULL */
	struct ledger_attempt attempt;  /* the attempt concerned, afterwards */
	int64_t retry_after_ms;         /* create: SOURCE_NOT_FENCED, TOOL_CALL_IN_PROGRESS, and
				   BUDGET_EXHAUSTED by the pool: when it next allows a retry */
	enum ledger_budget_kind budget; /* create BUDGET_EXHAUSTED: which budget */
	bool input_mismatch; /* create REQUEST_MISMATCH: of input_sha256 (the request's in request) */
	struct ledger_settled_call *settled; /* owned: create CREATED or REPEATED, the request's */
	size_t nsettled;
};

/** Frees what @p r owns. */
void ledger_store_attempt_result_clear(struct ledger_attempt_result *r);

/** POST attempts: creates (or finds again) an attempt of @p request_id. */
LEDGER_MUSTCHECK enum ledger_err
ledger_store_attempt_create(struct ledger_store_conn *conn, const char *tenant,
			    const char *request_id, const struct ledger_attempt_request *in,
			    const struct ledger_policy *p, struct ledger_attempt_result *out);

enum ledger_attempt_op {
	LEDGER_OP_RENEW,
	LEDGER_OP_DELIVER,
	LEDGER_OP_CANCEL,
	LEDGER_OP_CANCEL_ACK,
	LEDGER_OP_FINISH,
};

/* One of an attempt's own calls. */
struct ledger_attempt_call {
	enum ledger_attempt_op op;
	int64_t lease_ms;                /* RENEW */
	int64_t delivered_output_tokens; /* DELIVER, FINISH; -1: not given */
	bool completed;                  /* FINISH: "completed"; false: "failed" */
	const char *reason;              /* CANCEL, FINISH; NULL: none */
	const char *client_error;        /* FINISH failed: the client's own error, which ends the
				     request; exact JSON text, not NUL-terminated; NULL: none */
	size_t client_error_len;
	const char *client_error_code;      /* its error.code, for the history; NULL: none */
	const struct ledger_answer *answer; /* FINISH that ends the request: kept with it */
};

LEDGER_MUSTCHECK enum ledger_err ledger_store_attempt_call(struct ledger_store_conn *conn,
							   const char *tenant,
							   const char *request_id,
							   const char *attempt_id,
							   const struct ledger_attempt_call *call,
							   struct ledger_attempt_result *out);

struct ledger_failover_request {
	const char *source_attempt_id;
	enum ledger_signal signal;
	int64_t retry_prefill_tokens;
	const struct ledger_attempt_request *next;    /* the rerun to create; NULL: none */
	const struct ledger_answer *delivered_answer; /* kept if the decision ends the request */
};

enum ledger_failover_status {
	LEDGER_FAILOVER_ANSWERED,      /* 200 with body (decided now, or recorded) */
	LEDGER_FAILOVER_REFUSED,       /* 409: decision.action says which */
	LEDGER_FAILOVER_NO_ATTEMPT,    /* 404 attempt_not_found */
	LEDGER_FAILOVER_NEXT_MISMATCH, /* 422 request_mismatch: next_attempt's id is taken */
	LEDGER_FAILOVER_NEXT_REVISION, /* 409 revision_mismatch: next_attempt's revision */
	LEDGER_FAILOVER_NEXT_INPUT,    /* 422 request_mismatch: next_attempt's input_sha256 */
};

struct ledger_failover_result {
	enum ledger_failover_status status;
	struct ledger_failover_decision decision;
	char current_attempt_id[LEDGER_ID_MAX + 1]; /* ATTEMPT_FENCED: the newest */
	char input_sha256[LEDGER_SHA256_HEX + 1];   /* NEXT_INPUT: the request's */
	char *client_error; /* owned: REQUEST_CLOSED, the request's recorded one */
	char *body;         /* owned: ANSWERED, the decision as recorded */
	bool replayed;      /* ANSWERED with a decision taken before */
	/*
	 * ANSWERED with a new attempt: its id, and its lease left when read
	 * (the body holds the lease as granted; the answer says what is left).
	 * lease_attempt_id empty: no attempt in the body to age.
	 */
	char lease_attempt_id[LEDGER_ID_MAX + 1];
	int64_t lease_ms_left;
};

/** Frees what @p r owns. */
void ledger_store_failover_result_clear(struct ledger_failover_result *r);

/**
 * POST failover: decides by ledger_failover_decide() under the request's
 * lock and performs the decision (revocations, the rerun, the request's
 * end) with its event in one transaction; final decisions are recorded
 * and answered again, as they were, to a retried call.
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_failover(struct ledger_store_conn *conn,
						       const char *tenant, const char *request_id,
						       const struct ledger_failover_request *in,
						       const struct ledger_policy *p,
						       struct ledger_failover_result *out);

/* --- client events (ledger/store/client_events.c) --- */

/* What a router saw of its client during an attempt, for the request's history. */
struct ledger_client_event {
	const char *type; /* client_disconnected, client_resumed or client_hold_ended */
	int64_t n;        /* the caller's counter for the attempt: a retried call has its own */
	int64_t last_event_id; /* resumed: the last event the client had; -1: not given */
	int64_t hold_ms;       /* disconnected: how long the attempt is held for it; -1: none */
};

struct ledger_client_event_result {
	bool found;        /* false: the request has no such attempt (404 attempt_not_found) */
	bool appended;     /* false: (attempt, n) was recorded before; nothing appended */
	char recorded[32]; /* the type recorded for (attempt, n) */
};

/**
 * Appends @p in to the history of @p request_id as an event of attempt
 * @p attempt_id, under the request's lock, unless (attempt, n) is there.
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_client_event(struct ledger_store_conn *conn,
							   const char *tenant,
							   const char *request_id,
							   const char *attempt_id,
							   const struct ledger_client_event *in,
							   struct ledger_client_event_result *out);

/* --- kept answers (ledger/store/answers.c) --- */

/* A request's kept answer, as GET /v1/requests/{rid}/answer reads it. */
struct ledger_answer_result {
	bool found;                  /* false: no request, or none kept */
	struct ledger_answer answer; /* its strings are the two below */
	char *content_type;          /* owned */
	char *body_b64;              /* owned; NULL unless kept */
};

/** Frees what @p r owns. */
void ledger_store_answer_result_clear(struct ledger_answer_result *r);

/** Reads the answer kept for @p request_id (no lock: it never changes). */
LEDGER_MUSTCHECK enum ledger_err ledger_store_answer_get(struct ledger_store_conn *conn,
							 const char *tenant, const char *request_id,
							 struct ledger_answer_result *out);

/* --- incident review (ledger/store/reads.c) --- */

/* One event of a request's history. */
struct ledger_event {
	int64_t seq; /* orders a request's events */
	char at[LEDGER_TIMESTAMP_MAX];
	char type[64];
	char attempt_id[LEDGER_ID_MAX + 1];   /* "" none */
	char tool_call_id[LEDGER_ID_MAX + 1]; /* "" none */
	char *detail;                         /* owned: JSON object text */
};

/* A request with everything under it, read in one snapshot. */
struct ledger_request_view {
	struct ledger_request request;   /* request.exists false: no such request */
	char *client_error;              /* owned, or NULL */
	struct ledger_attempt *attempts; /* owned, by epoch */
	size_t nattempts;
	struct ledger_listed_call *calls; /* owned, by tool_call_id */
	size_t ncalls;
	struct ledger_event *events; /* owned, by seq */
	size_t nevents;
	bool more_events; /* the history goes on after the last one */
};

void ledger_store_request_view_clear(struct ledger_request_view *v);

/**
 * Reads request @p request_id with its attempts, its calls and up to
 * @p max_events events after seq @p after_seq, all from one snapshot.
 */
LEDGER_MUSTCHECK enum ledger_err ledger_store_request_view(struct ledger_store_conn *conn,
							   const char *tenant,
							   const char *request_id,
							   int64_t after_seq, unsigned max_events,
							   struct ledger_request_view *out);

/* One listed request. */
/* Why a listed request needs a person's attention; bits, in the order the API lists them. */
enum ledger_attention {
	LEDGER_ATTENTION_OUTCOME_UNKNOWN = 1u << 0, /* a call's outcome is unknown */
	LEDGER_ATTENTION_ZOMBIE_REFUSED = 1u << 1,  /* attempt_fenced or stale_token refused */
	LEDGER_ATTENTION_TERMINATED = 1u << 2,      /* the stream was cut after its first delta */
	LEDGER_ATTENTION_DIVERGENCE = 1u << 3,      /* failed with tool_call_divergence */
	LEDGER_ATTENTION_DUPLICATE_EXECUTION = 1u << 4, /* a side effect may have run twice */
};

struct ledger_listed_request {
	char request_id[LEDGER_ID_MAX + 1];
	int64_t created_us; /* created_at in microseconds: the page cursor */
	unsigned attention; /* enum ledger_attention bits */
	struct ledger_request request;
	char *client_error; /* owned, or NULL */
};

/* Which requests to list; NULL or 0 fields do not filter. */
struct ledger_request_filter {
	const char *status; /* a status name */
	const char *since;  /* RFC 3339: created at or after */
	bool has_cursor;    /* after the last of the previous page: */
	int64_t cursor_created_us;
	const char *cursor_request_id;
	unsigned limit;
	bool attention_only; /* only requests with an enum ledger_attention reason */
};

/**
 * Lists a tenant's requests newest first ((created_at, request_id)
 * descending), after the cursor.
 * @param items_out a new array; free with ledger_store_free_requests()
 */
LEDGER_MUSTCHECK enum ledger_err
ledger_store_list_requests(struct ledger_store_conn *conn, const char *tenant,
			   const struct ledger_request_filter *f,
			   struct ledger_listed_request **items_out, size_t *count_out);

void ledger_store_free_requests(struct ledger_listed_request *items, size_t count);

/* --- retention (ledger/store/gc.c) --- */

struct ledger_gc_stats {
	int64_t requests;   /* settled requests removed */
	int64_t tool_calls; /* their calls */
	int64_t tombstones; /* tombstones left for their settled calls */
	int64_t attempts;
	int64_t events;
	int64_t expired_tombstones; /* tombstones whose period ended, removed */
};

/**
 * Removes one batch of up to @p batch settled requests older than
 * @p retention_ms (with their attempts, calls and events; a tombstone
 * stays for each settled call for @p tombstone_ms), and one batch of
 * expired tombstones. Each batch is one short transaction that skips rows
 * others hold. Adds what it removed to @p stats.
 * @param done_out true when neither batch was full: nothing is left to do
 */
LEDGER_MUSTCHECK enum ledger_err
ledger_store_gc_batch(struct ledger_store_conn *conn, int64_t retention_ms, int64_t tombstone_ms,
		      unsigned batch, struct ledger_gc_stats *stats, bool *done_out);

/** Counts the unknown outcomes outstanding, all tenants (for /metrics). */
LEDGER_MUSTCHECK enum ledger_err ledger_store_count_unknown(struct ledger_store_conn *conn,
							    int64_t *count_out);

#endif
