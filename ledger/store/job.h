/*
 * ledger/store/job.h: what the HTTP layer hands the store. A job names one
 * operation and its input (data, no callbacks into the caller); a worker
 * runs it alone, or with others in one batch when it has a fast path, and
 * fills the job's result; then it calls done(), which is the only call the
 * store makes back. The store keeps the replay cache coherent with every
 * operation it commits (ledger/store/ops.c), so no caller has to.
 */
#ifndef LEDGER_STORE_JOB_H
#define LEDGER_STORE_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/err.h"
#include "ledger/common/log.h"
#include "ledger/core/attempt.h"
#include "ledger/core/decide.h"
#include "ledger/core/failover.h"
#include "ledger/core/policy.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"
#include "ledger/store/store.h"

enum ledger_store_op_kind {
	LEDGER_STORE_NONE,           /* nothing to run (answered without the database) */
	LEDGER_STORE_TOKEN_LOOKUP,   /* in.token_sha256 -> res.token */
	LEDGER_STORE_SCHEMA_VERSION, /* -> res.schema */
	LEDGER_STORE_CLAIM,          /* in.claim -> res.call */
	LEDGER_STORE_COMPLETE,       /* in.completion -> res.call */
	LEDGER_STORE_RENEW,          /* in.renew -> res.call */
	LEDGER_STORE_RELEASE,        /* in.release -> res.call */
	LEDGER_STORE_RESOLVE,        /* in.resolve -> res.call */
	LEDGER_STORE_GET_CALL,       /* -> res.call.call */
	LEDGER_STORE_LIST_CALLS,     /* in.list_calls -> res.calls */
	LEDGER_STORE_ATTEMPT_CREATE, /* in.attempt, policy -> res.attempt */
	LEDGER_STORE_ATTEMPT_CALL,   /* in.attempt_call -> res.attempt */
	LEDGER_STORE_FAILOVER,       /* in.failover, policy -> res.failover */
	LEDGER_STORE_REQUEST_VIEW,   /* in.view -> res.view */
	LEDGER_STORE_LIST_REQUESTS,  /* in.requests -> res.requests */
	LEDGER_STORE_ANSWER_GET,     /* -> res.answer */
	LEDGER_STORE_CLIENT_EVENT,   /* in.client_event -> res.client_event */
};

/* One operation and its input. Every pointer is borrowed until done(). */
struct ledger_store_op {
	enum ledger_store_op_kind kind;
	struct ledger_call_key key;         /* tenant, request_id, tool_call_id (NULL: none) */
	const char *attempt_id;             /* the path's attempt, for attempt calls */
	const struct ledger_policy *policy; /* ATTEMPT_CREATE, FAILOVER */
	union {
		const unsigned char *token_sha256; /* 32 bytes */
		const struct ledger_claim_request *claim;
		const struct ledger_completion *completion;
		struct {
			int64_t fencing_token, lease_ms;
		} renew;
		struct {
			int64_t fencing_token;
			const char *reason; /* NULL: none */
		} release;
		struct {
			enum ledger_resolution resolution;
			const char *result; /* exact JSON text, NUL-terminated; NULL: null */
			size_t result_len;
			const char *note; /* NULL: none */
		} resolve;
		struct {
			enum ledger_call_state state; /* ABSENT: every state */
			const char *after_request_id; /* NULL: the first page */
			const char *after_tool_call_id;
			unsigned limit;
		} list_calls;
		const struct ledger_attempt_request *attempt;
		const struct ledger_attempt_call *attempt_call;
		const struct ledger_failover_request *failover;
		struct {
			int64_t after_seq;
			unsigned max_events;
		} view;
		const struct ledger_request_filter *requests;
		const struct ledger_client_event *client_event;
	} in;
};

/* What the operation answered; which member depends on the op's kind. */
struct ledger_store_result {
	/* LEDGER_OK: the member below holds the outcome; otherwise the error to answer */
	enum ledger_err rc;
	/*
	 * Monotonic ms at which the operation began. Every time left it
	 * reports (a lease) was measured by the database after this moment,
	 * so subtracting the time since gives at most what is left.
	 */
	int64_t began_ms;
	union {
		struct {
			bool found;
			char tenant[LEDGER_ID_MAX + 1];
			enum ledger_role role;
		} token;
		struct ledger_schema_state schema;
		struct ledger_call_result
			call; /* GET_CALL: call.call; ABSENT or TOMBSTONE if gone */
		struct {
			struct ledger_listed_call *items;
			size_t count;
		} calls;
		struct ledger_attempt_result attempt;
		struct ledger_failover_result failover;
		struct ledger_answer_result answer;
		struct ledger_client_event_result client_event;
		struct ledger_request_view view;
		struct {
			struct ledger_listed_request *items;
			size_t count;
		} requests;
	} u;
};

/*
 * A unit of work. The caller embeds it in its own state and fills op,
 * ids (the log lines written while it runs carry them) and done; the
 * store fills res and then calls done() on a worker thread. The job is
 * the caller's again from that call on.
 */
struct ledger_job {
	struct ledger_store_op op;
	struct ledger_log_ids ids;
	void (*done)(struct ledger_job *job);
	struct ledger_store_result res;
	/*
	 * The transaction that answered it, for a caller that traces (set
	 * timed): the store fills the rest, and the caller makes its span of
	 * them after done(). A job answered without a transaction (shed, past
	 * its deadline) keeps tx_began_ns 0.
	 */
	bool timed;             /* the caller's: fill the three below */
	uint64_t tx_began_ns;   /* wall clock (ledger_trace_now_ns()); 0: no transaction ran */
	uint64_t tx_ended_ns;
	unsigned tx_batch;      /* the jobs that shared the transaction, this one included */
	uint32_t cache_stamp;    /* private: the request's replay-cache stamp before the read */
	int64_t deadline_ms;     /* private: monotonic; answered 503 if not done by then; 0: none */
	struct ledger_job *next; /* private to the queue */
};

/**
 * Queues @p job (borrowed until its done() is called). Thread-safe. A job
 * the store cannot take (its queue is full, or every worker waits on a
 * database that stopped answering) is answered LEDGER_ERR_UNAVAILABLE at
 * once: done() is then called before this returns, on the caller's thread.
 * A schema-version job (/readyz) has workers of its own and never waits
 * behind the others.
 */
void ledger_store_submit(struct ledger_store *store, struct ledger_job *job);

/**
 * Runs @p job's operation alone on @p conn (which may be down: the result
 * is then LEDGER_ERR_UNAVAILABLE), filling job->res. done() is not called.
 */
void ledger_store_execute(struct ledger_store_conn *conn, struct ledger_job *job);

/**
 * Runs @p n jobs that wait together on @p conn: those with a fast path in
 * one transaction (ledger_store_batch()), then those the fast path did not
 * answer and the others alone; then calls each one's done().
 * @param ops, joined room for @p n batch operations and jobs (scratch)
 * @param jobs reordered
 */
void ledger_store_execute_many(struct ledger_store_conn *conn, struct ledger_job **jobs, size_t n,
			       struct ledger_batch_op *ops, struct ledger_job **joined);

/**
 * Answers a claim from the replay cache, without the database, when the
 * stored call is a replay for it (settled, same arguments, outside
 * attempts), or, its result not kept, a result_not_kept. Thread-safe; for
 * the HTTP threads.
 * @return true with @p job->res filled as the store would; false: queue it
 */
bool ledger_store_replay(struct ledger_job *job);

/** Frees what @p job->res holds and zeroes it. */
void ledger_store_result_clear(struct ledger_job *job);

#endif
