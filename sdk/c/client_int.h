/*
 * sdk/c/client_int.h: what the C client's files share and users never see:
 * the client's insides, one HTTP exchange with its retry rule, reading an
 * answer, and a ticker thread for heartbeats and claim renewals.
 */
#ifndef LEDGER_CLIENT_INT_H
#define LEDGER_CLIENT_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ledger/common/buf.h"
#include "ledger/common/json.h"
#include "ledger/common/json_number.h"
#include "ledger/common/trace.h"
#include "sdk/c/ledger_client.h"

struct client_conn; /* one pooled libcurl handle */

struct ledger_client {
	char *base;                      /* the URL without its trailing '/' */
	struct curl_slist *get_headers;  /* Authorization (wiped on close), Accept */
	struct curl_slist *post_headers; /* the same, Content-Type and Expect */
	char *user_agent;                /* the User-Agent header */
	char *ca_file;                   /* the CAs of an https URL; NULL: the system's */
	uint32_t timeout_ms;             /* one exchange */
	uint32_t retry_ms;               /* re-sending a call that got no answer or a 503 */
	uint32_t complete_retry_ms;      /* the same for recording what a tool did */
	size_t max_result_bytes;         /* a longer result is completed as its digest */
	bool traced;                     /* holds a reference of the process's tracer */
	pthread_mutex_t lock;            /* guards idle */
	struct client_conn *idle;        /* handles not in use, each keeping its connection */
};

/* A 2xx answer, parsed. */
struct client_answer {
	long status;
	char *body; /* owned, NUL-terminated */
	size_t len;
	struct ledger_json_doc *doc;          /* owned; borrows body */
	const struct ledger_json_value *root; /* an object, borrowed from doc */
};

void client_answer_clear(struct client_answer *a);

/*
 * The calls of ledger_client.h as the library runs them, on structs laid
 * out as this build of the library defines them: the _abi entry points
 * (sdk/c/abi.c) bring a caller's structs to this layout and call these.
 * Contracts as the header's functions of the same name.
 */
enum ledger_client_err client_open(const struct ledger_client_options *opts,
				   struct ledger_client **out);
enum ledger_client_err client_tool_call(struct ledger_client *c, const struct ledger_call *call,
					ledger_tool_fn tool_fn, void *ctx,
					struct ledger_outcome *out);
void client_outcome_clear(struct ledger_outcome *o);
enum ledger_client_err client_attempt_begin(struct ledger_client *c,
					    const struct ledger_attempt_spec *spec,
					    struct ledger_attempt **out,
					    struct ledger_client_error *err);
enum ledger_client_err client_attempt_end(struct ledger_attempt *a, bool completed,
					  uint64_t delivered_output_tokens,
					  const struct ledger_finish_opts *opts,
					  struct ledger_client_error *err);
enum ledger_client_err client_failover(struct ledger_attempt *source, enum ledger_signal signal,
				       const struct ledger_failover_opts *opts,
				       struct ledger_decision *out, struct ledger_client_error *err);
void client_decision_clear(struct ledger_decision *d);
enum ledger_client_err client_tool_call_resolve(struct ledger_client *c,
						const struct ledger_resolution *r,
						struct ledger_client_answer *out,
						struct ledger_client_error *err);

/**
 * POSTs @p body (GET when NULL) to @p path, with @p trace's traceparent and
 * tracestate headers when it is valid (NULL: none), and re-sends the very same
 * request while no answer comes or the answer is 502/503/504, with capped,
 * jittered back-off, for up to @p retry_ms (0: sent once). Every POST of
 * the API is idempotent under such a retry.
 * @param ans on LEDGER_CLIENT_OK the 2xx answer as received, unchecked;
 *        the caller clears it with ledger_client_answer_clear()
 * @param err on failure why (may be NULL); the caller clears it
 * @return LEDGER_CLIENT_OK, _ERR_REFUSED (an API error), _ERR_UNAVAILABLE,
 *         _ERR_PROTOCOL, _ERR_NOMEM or _ERR_INTERNAL
 */
enum ledger_client_err client_send(struct ledger_client *c, const char *path,
				   const struct ledger_buf *body, uint32_t retry_ms,
				   const struct ledger_trace_ctx *trace,
				   struct ledger_client_answer *ans,
				   struct ledger_client_error *err);

/** As client_send(), and the 2xx answer must be a JSON object: @p ans has it parsed. */
enum ledger_client_err client_call(struct ledger_client *c, const char *path,
				   const struct ledger_buf *body, uint32_t retry_ms,
				   const struct ledger_trace_ctx *trace, struct client_answer *ans,
				   struct ledger_client_error *err);

/*
 * Reading an answer, apart from the exchange that got it: each takes what
 * a call's exchange settled on and nothing else, so tests/fuzz/fuzz_sdk_answer.c
 * can hand them any status and body.
 */

/**
 * What client_send() makes of its final answer: a 2xx into @p ans as
 * received, any other status into @p err (the error envelope's code,
 * message and retry_after_ms when the body has one).
 * @param body taken in every case: @p len bytes from malloc(), NUL-terminated
 * @return LEDGER_CLIENT_OK, _ERR_REFUSED (an envelope) or _ERR_PROTOCOL (none)
 */
enum ledger_client_err client_answer_read(long status, char *body, size_t len,
					  struct ledger_client_answer *ans,
					  struct ledger_client_error *err);

/**
 * What client_call() makes of client_send()'s 2xx answer: takes @p raw's
 * body (leaving @p raw empty) and parses it into @p ans.
 * @return LEDGER_CLIENT_OK, or _ERR_PROTOCOL (not a JSON object; @p ans
 *         empty, @p err says so)
 */
enum ledger_client_err client_answer_parse(struct ledger_client_answer *raw,
					   struct client_answer *ans,
					   struct ledger_client_error *err);

/**
 * Reads a claim's answer into @p out, as ledger_client_tool_call() does:
 * @p rc is client_call()'s, @p ans its answer (read on LEDGER_CLIENT_OK
 * only), out->error its refusal. A replay fills @p out; a refusal becomes
 * its outcome kind (and may revoke call->attempt).
 * @param fencing_token the claim's token when the tool is to run, else 0
 * @return as ledger_client_tool_call() returns it
 */
enum ledger_client_err client_claim_read(const struct ledger_call *call, enum ledger_client_err rc,
					 const struct client_answer *ans,
					 struct ledger_outcome *out, uint64_t *fencing_token);

/** The same for the answer to a complete or release, as the tool's record. */
enum ledger_client_err client_record_read(const struct ledger_call *call, enum ledger_client_err rc,
					  const struct client_answer *ans,
					  struct ledger_outcome *out);

/**
 * A new attempt handle from an attempt object as POST attempts and failover
 * render it (attempt_id, epoch, lease_ms). @p obj is borrowed for the call.
 * @param out the handle (free with ledger_client_attempt_free()), or NULL
 * @return LEDGER_CLIENT_OK, _ERR_NOMEM or _ERR_PROTOCOL
 */
enum ledger_client_err client_attempt_from(struct ledger_client *c, const char *request_id,
					   const struct ledger_json_value *obj,
					   struct ledger_attempt **out,
					   struct ledger_client_error *err);

/**
 * Reads the decision of a 200 answer of POST failover into @p out (which
 * the caller clears, on failure too); a decision but keep_waiting revokes
 * @p source.
 * @return LEDGER_CLIENT_OK, _ERR_NOMEM or _ERR_PROTOCOL
 */
enum ledger_client_err client_decision_read(struct ledger_attempt *source,
					    const struct client_answer *ans,
					    struct ledger_decision *out,
					    struct ledger_client_error *err);

/** True if @p id is 1..128 bytes of [A-Za-z0-9._~-], as the API requires. */
bool client_valid_id(const char *id);

/** Appends "/v1/requests/{rid}" and further segments given as
 *  NULL-terminated varargs, each escaped with client_escape(). */
void client_path(struct ledger_buf *b, const char *rid, ...);

/** Appends @p s percent-encoded: every byte outside RFC 3986's unreserved
 *  set (A-Z a-z 0-9 - . _ ~), and the dots of "." and "..", so no id can
 *  change the path or the query it is put in. */
void client_escape(struct ledger_buf *b, const char *s);

/** A new copy of the string member @p key of @p obj, or NULL if absent. */
char *client_dup_string(const struct ledger_json_value *obj, const char *key);
/** A new copy of the exact JSON text of member @p key, or NULL if absent. */
char *client_dup_raw(const struct ledger_json_value *obj, const char *key);
/** Reads the non-negative integer member @p key; false if absent or not one. */
bool client_get_u64(const struct ledger_json_value *obj, const char *key, uint64_t *out);

/** Records an error the client itself decided (nothing was answered). */
void client_error_set(struct ledger_client_error *e, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/** Milliseconds on the monotonic clock. */
uint64_t client_now_ms(void);
/** Sleeps for a jittered back-off: between half and all of *delay_ms (raised to
 *  @p hint_ms when larger, capped at 1 s and at @p left_ms), then doubles it. */
void client_backoff(uint32_t *delay_ms, uint64_t hint_ms, uint64_t left_ms);
/** Fills @p hex with 2 * @p bytes random hex digits and a NUL. */
bool client_random_hex(char *hex, size_t bytes);

/* A thread that calls @c tick every @c interval_ms until stopped or tick
 * returns false: attempt heartbeats and claim renewals. The thread is one
 * of ledger/common/workers.c's, kept for the next ticker when this one ends. */
struct client_ticker {
	pthread_mutex_t lock;
	pthread_cond_t wake; /* a stop asked for, and the ticker's end */
	bool running;        /* started and not yet stopped */
	bool stop;           /* asked to stop; guarded by lock */
	bool ended;          /* its thread is done with it; guarded by lock */
	uint32_t interval_ms;
	bool (*tick)(void *arg);
	void *arg;
};

/** Starts @p t; false if no thread could be had. */
bool client_ticker_start(struct client_ticker *t, uint32_t interval_ms, bool (*tick)(void *),
			 void *arg);
/** Stops @p t and waits until its thread is done with it; safe on a ticker never started. */
void client_ticker_stop(struct client_ticker *t);

/** Marks @p a revoked (tool-call wrapper, failover). */
void client_attempt_revoke(struct ledger_attempt *a);

/** Reads a caller's traceparent and tracestate (either may be NULL) into @p out. */
void client_trace_parse(struct ledger_trace_ctx *out, const char *traceparent,
			const char *tracestate);

#endif
