/*
 * sdk/c/ledger_client.h: the C client of ledgerd. An agent runtime wraps a
 * tool's side effect in ledger_client_tool_call() so a retried or
 * failed-over tool call gets the stored result instead of running twice; a
 * router drives an inference attempt's life (begin, heartbeat, deliver,
 * finish) and asks ledgerd what to do when a replica fails.
 *
 * Link with `pkg-config --cflags --libs ledger_client`.
 *
 * Threads: a client may be shared by any number of threads. It keeps a
 * small pool of HTTP connections, one per call in flight, reused across
 * calls. An attempt handle may be used from several threads as well; its
 * heartbeat runs on a thread of its own.
 *
 * Errors: every fallible function returns enum ledger_client_err and fills
 * a struct ledger_client_error when ledgerd refused or could not be reached.
 * Out-parameters own their memory and have a clear or free function, all
 * NULL-safe. No function aborts on bad input or on a bad answer.
 *
 * Tracing: the first open client starts the process's OpenTelemetry tracer
 * from the OTEL_* variables (none set: off; docs/tracing-sdk-c.md). A tool
 * call is then an execute_tool span, and every call to ledgerd carries the
 * W3C traceparent (and tracestate) it runs in; with tracing off a caller's
 * context is passed on to ledgerd as it was given.
 */
#ifndef LEDGER_CLIENT_H
#define LEDGER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LEDGER_CLIENT_API __attribute__((visibility("default")))
#define LEDGER_CLIENT_MUSTCHECK __attribute__((warn_unused_result))

/** The longest id the API accepts (request, tool call, attempt), in bytes. */
#define LEDGER_CLIENT_ID_MAX 128

/** The largest integer the API accepts (token counts, leases): 2^53 - 1. */
#define LEDGER_CLIENT_MAX_INT 9007199254740991ULL

/** The largest answer body read, in bytes: past it a call fails (TOO_LARGE). */
#define LEDGER_CLIENT_MAX_ANSWER (16u << 20)

/** The default of max_result_bytes: ledgerd's own default --max-result-bytes, 1 MiB. */
#define LEDGER_CLIENT_MAX_RESULT_DEFAULT (1u << 20)

enum ledger_client_err {
	LEDGER_CLIENT_OK = 0,
	LEDGER_CLIENT_ERR_INVALID,     /* a bad argument: nothing was sent */
	LEDGER_CLIENT_ERR_NOMEM,       /* an allocation failed */
	LEDGER_CLIENT_ERR_UNAVAILABLE, /* no answer, or 503, for as long as the call was retried;
	                                  or TLS failed (see the error's failure) */
	LEDGER_CLIENT_ERR_REFUSED,  /* ledgerd answered with an API error: see the error's code */
	LEDGER_CLIENT_ERR_PROTOCOL, /* an answer that is not what the API says */
	LEDGER_CLIENT_ERR_INTERNAL, /* libcurl or a thread could not be started */
};

/** A short English name of @p err ("refused", ...); never NULL, static. */
LEDGER_CLIENT_API const char *ledger_client_strerror(enum ledger_client_err err);

/** The version of the library that is running ("0.1.0", the release it was built
 *  from), which may be newer than the header a program was compiled with; never
 *  NULL, static. Thread-safe. */
LEDGER_CLIENT_API const char *ledger_client_version(void);

/*
 * Structs that grow. The structs a program fills for a call (options,
 * ledger_call, ledger_attempt_spec, ...) and those the library fills
 * (ledger_outcome, ledger_decision) gain fields within one soname, only at
 * their end. Every function that takes one is an inline function here that
 * passes the library the size of each struct as the program was compiled
 * (struct ledger_client_abi): the library reads and writes only those
 * bytes, so a program built against an older header runs unchanged on a
 * newer library, with the fields it does not know at their zero defaults.
 * A program built against a newer header than the library refuses a call
 * (_ERR_INVALID) only if it set a field the library does not know.
 * struct ledger_client_error and struct ledger_client_answer never change
 * within a soname: what a newer ledgerd says is in their body.
 * Enums gain values too: a switch over one needs a default.
 */
struct ledger_client_abi {
	uint32_t count; /* how many sizes follow: LEDGER_CLIENT_ABI_COUNT as compiled */
	uint32_t options, call, outcome, attempt_spec, kept_answer, finish_opts, failover_opts,
		decision, resolution;
};

#define LEDGER_CLIENT_ABI_COUNT 9

/* Why no answer came, when none did. */
enum ledger_client_failure {
	LEDGER_CLIENT_FAILURE_NONE = 0,    /* an answer came, or nothing was sent */
	LEDGER_CLIENT_FAILURE_UNREACHABLE, /* refused, unresolvable, timed out, cut off */
	LEDGER_CLIENT_FAILURE_BAD_URL,     /* libcurl cannot use the URL */
	LEDGER_CLIENT_FAILURE_TOO_LARGE,   /* the answer exceeded LEDGER_CLIENT_MAX_ANSWER */
	LEDGER_CLIENT_FAILURE_TRANSPORT,   /* any other libcurl failure */
	LEDGER_CLIENT_FAILURE_TLS,         /* ledgerd's certificate failed verification (another
	                                      CA, another host name, expired), the CA file could
	                                      not be used, or the TLS handshake failed */
};

/* Why a call did not succeed. Zeroed means "nothing to report". */
struct ledger_client_error {
	long status;             /* the HTTP status; 0 when no answer came */
	char code[48];           /* the API's error code ("in_progress", ...); "" if none */
	char message[256];       /* the API's message, or libcurl's reason */
	uint64_t retry_after_ms; /* the API's retry_after_ms, 0 if none */
	char *body;              /* the whole answer body, owned, NUL-terminated; NULL if none */
	size_t body_len;         /* its length in bytes, without the NUL */
	enum ledger_client_failure failure; /* status 0: why no answer came */
};

/** Frees @p e->body and zeroes @p e. NULL-safe. */
LEDGER_CLIENT_API void ledger_client_error_clear(struct ledger_client_error *e);

struct ledger_client; /* opaque: a ledgerd's address, a token and a pool of connections */

struct ledger_client_options {
	const char *url;            /* "http://127.0.0.1:8080"; required */
	const char *token;          /* the bearer token; copied, wiped on close. NULL sends
	                               none: ledgerd answers 401 unauthorized to every call */
	uint32_t timeout_ms;        /* one HTTP exchange; 0: 10000 */
	uint32_t retry_ms;          /* how long a call is re-sent on no answer or 503; 0: 30000 */
	uint32_t complete_retry_ms; /* the same for recording what a tool did; 0: 300000 */
	bool no_retry;              /* send every call once, whatever the two above say: for an
	                               operator's tool, whose user retries. Not for agents: a
	                               completion that gets no answer is then UNRECORDED */
	const char *user_agent;     /* the User-Agent header; NULL: "ledger_client/<version>" */
	/* Fields are only ever added here, at the end; zero is the default of each. */
	const char *ca_file; /* https: the PEM file of the CAs that may sign ledgerd's certificate,
	                        and only those; NULL: the system's trust store. Either way the
	                        certificate and the host name are verified; copied */
	size_t max_result_bytes; /* the longest result (its JSON text) a completion sends whole;
	                            a longer one is recorded as its length and SHA-256 only
	                            (result_not_kept). 0: LEDGER_CLIENT_MAX_RESULT_DEFAULT */
};

/**
 * Makes a client. Sends nothing yet.
 *
 * TLS: an https:// URL is always verified: the certificate's chain against
 * ca_file (else the system's trust store), and its names against the URL's
 * host. A call refused for TLS fails with _ERR_UNAVAILABLE and the error's
 * failure LEDGER_CLIENT_FAILURE_TLS, whose message says why ("... failed
 * verification: ..."); one that failed verification is not re-sent, since
 * sending it again cannot help. ca_file is read once here (see
 * ledger_client_ca_file_check()) and again by libcurl for each new
 * connection, so a file replaced in place is taken up by new connections.
 *
 * @param opts borrowed for the call
 * @param out on LEDGER_CLIENT_OK a new client; free with ledger_client_close()
 * @return LEDGER_CLIENT_OK, _ERR_INVALID (no url, not http(s), an empty token
 *         or one with a line break, a ca_file that cannot be read or holds no
 *         PEM certificate), _ERR_NOMEM or _ERR_INTERNAL
 */
static inline LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_open(const struct ledger_client_options *opts, struct ledger_client **out);

/**
 * Checks that @p path can serve as ca_file: a regular file that can be
 * read and holds PEM certificates, at least one. ledger_client_open()
 * refuses the file on the same grounds; this says why, for a program to
 * tell its user.
 * @param path borrowed for the call
 * @param err on failure the reason in err->message ("cannot read the CA file
 *        ...: No such file or directory"), failure LEDGER_CLIENT_FAILURE_TLS;
 *        clear with ledger_client_error_clear(); may be NULL
 * @return LEDGER_CLIENT_OK, _ERR_INVALID or _ERR_NOMEM
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_ca_file_check(const char *path, struct ledger_client_error *err);

/** Closes the connections and wipes the token. Every attempt's heartbeat
 *  must be stopped first. NULL-safe. */
LEDGER_CLIENT_API void ledger_client_close(struct ledger_client *c);

/* ---------------------------------------------------------------------- */
/* Tool calls (agent runtimes)                                            */
/* ---------------------------------------------------------------------- */

struct ledger_attempt;

/* One tool call: what is claimed. Strings are borrowed for the call. */
struct ledger_call {
	const char *request_id;   /* the logical request; required */
	const char *tool_call_id; /* stable across reruns: see ledger_client_stable_call_id() */
	const char *tool;         /* the tool's name, or NULL */
	const char *args_json;    /* the arguments as JSON text, or NULL; fingerprinted here */
	bool store_args;          /* also send the arguments, for incident review */
	const char *attempt_id;   /* the router attempt the call runs under, or NULL */
	struct ledger_attempt *attempt; /* or its handle: revoked on args_mismatch */
	const char *owner;              /* who executes, for review ("billing@pod-7"), or NULL */
	uint32_t lease_ms;              /* how long a claim is held between renewals; 0: 30000 */
	bool tool_dedupes;              /* the tool itself honours the idempotency key */
	uint32_t wait_ms;               /* how long to wait while another holder runs it; 0: not */
	/* Fields are only ever added here, at the end. */
	const char *traceparent; /* the W3C trace context the call runs in, or NULL (a new trace
				    when tracing is on): the call's execute_tool span is its
				    child, and ledgerd's spans that span's (docs/tracing.md) */
	const char *tracestate;  /* that context's tracestate, or NULL */
};

/* What the tool reports. */
enum ledger_tool_status {
	LEDGER_TOOL_SUCCEEDED,    /* the effect happened: its result is recorded and replayed */
	LEDGER_TOOL_FAILED,       /* it failed for good: the failure is recorded and replayed */
	LEDGER_TOOL_RETRYABLE,    /* it failed and may be tried again: the key is released */
	LEDGER_TOOL_NOT_EXECUTED, /* it did not run at all: the key is released */
	LEDGER_TOOL_UNKNOWN,      /* it cannot tell whether the effect happened (its server died
	                             or its connection broke mid-call): nothing is recorded, the
	                             claim is no longer renewed and runs out into outcome_unknown,
	                             which a person settles with resolve */
};

/**
 * Runs the side effect. @p idempotency_key ("request_id:tool_call_id") is
 * the one to pass on to a tool that accepts one; @p fencing_token grows
 * with every holder, for tools that reject writes of older holders.
 * Sets @p *result_json to a malloc'd JSON text (or leaves it NULL for
 * null); the wrapper frees it. A text that is not JSON is recorded as a
 * JSON string holding it. While the tool runs, its claim is renewed.
 * It runs on the thread that called ledger_client_tool_call(), where
 * ledger_client_tool_traceparent() gives the context it runs in.
 */
typedef enum ledger_tool_status (*ledger_tool_fn)(void *ctx, const char *idempotency_key,
						  uint64_t fencing_token, char **result_json);

enum ledger_outcome_kind {
	LEDGER_OUTCOME_EXECUTED,    /* claimed; the tool ran; its outcome is recorded */
	LEDGER_OUTCOME_REPLAYED,    /* completed before: the stored result; the tool did not run */
	LEDGER_OUTCOME_RELEASED,    /* the tool said RETRYABLE or NOT_EXECUTED: claimable again */
	LEDGER_OUTCOME_UNRECORDED,  /* the tool ran, ledgerd stayed unreachable: not recorded */
	LEDGER_OUTCOME_IN_PROGRESS, /* another holder still runs it after wait_ms */
	LEDGER_OUTCOME_UNKNOWN,     /* a holder's lease ran out: it may have run; resolve it */
	LEDGER_OUTCOME_ATTEMPT_FENCED,  /* the attempt has no rights: do not act */
	LEDGER_OUTCOME_ARGS_MISMATCH,   /* the key was claimed with other arguments: diverged */
	LEDGER_OUTCOME_RESULT_EXPIRED,  /* settled long ago, result removed: never run again */
	LEDGER_OUTCOME_REFUSED,         /* any other API error (attempt_required, ...): see error */
	LEDGER_OUTCOME_ABANDONED,       /* the tool said UNKNOWN: nothing recorded; the key turns
	                                   outcome_unknown once the lease (lease_ms) runs out */
	LEDGER_OUTCOME_RESULT_NOT_KEPT, /* completed before, its result recorded only as its length
	                                   and SHA-256: it cannot be replayed; never run again */
};

/* The stored outcome of a completed call. */
enum ledger_call_outcome {
	LEDGER_CALL_NONE,      /* not completed */
	LEDGER_CALL_SUCCEEDED, /* "succeeded" */
	LEDGER_CALL_FAILED,    /* "failed" */
};

struct ledger_outcome {
	enum ledger_outcome_kind kind;
	bool executed;                 /* the tool was called by this invocation */
	enum ledger_call_outcome call; /* EXECUTED, REPLAYED, RESULT_NOT_KEPT: what is recorded */
	char *result;           /* JSON text: the stored result, or the tool's; NULL if none */
	char *idempotency_key;  /* "request_id:tool_call_id" */
	uint64_t fencing_token; /* this invocation's claim; 0 if it held none */
	char *completed_at;     /* RFC 3339, when completed; NULL otherwise */
	struct ledger_client_error error; /* the refusal, or the last failure when UNRECORDED */
	/* Fields are only ever added here, at the end. */
	char result_sha256[65]; /* "" when the result is on record whole; else it is on record
	                           only as its length and this SHA-256 of its exact JSON text (64
	                           lowercase hex): EXECUTED with a result over max_result_bytes
	                           (or over ledgerd's bounds), and RESULT_NOT_KEPT */
	uint64_t result_bytes;  /* with result_sha256: the length of that text in bytes; else 0 */
	char traceparent[56];   /* the W3C context the call ran in: its execute_tool span's with
	                           tracing on, else the caller's; "" when none. For the caller's
	                           log lines about the call */
};

/** Frees what @p o owns and zeroes it. NULL-safe. */
static inline void ledger_client_outcome_clear(struct ledger_outcome *o);

/** The name of @p kind ("executed", "args_mismatch", ...); static. */
LEDGER_CLIENT_API const char *ledger_client_outcome_name(enum ledger_outcome_kind kind);

/**
 * Claims @p call's key and runs @p tool_fn at most once across every
 * retry, replica and rerun. With a fresh random claim_id (128 bits, re-sent
 * only when the same HTTP call is retried after no answer or a 503), it
 * claims; on a replay it returns the stored result without calling the
 * tool; when claimed it calls @p tool_fn, renews the claim every third of
 * the lease while the tool runs, and records what the tool reported. A
 * recording that fails is retried for complete_retry_ms: the effect
 * happened and must not be lost; past that the outcome is UNRECORDED,
 * with the tool's result. in_progress is waited out for wait_ms with
 * capped, jittered back-off; outcome_unknown, attempt_fenced,
 * args_mismatch, result_expired and result_not_kept come back as their own
 * kinds and never run the tool.
 *
 * A result whose JSON text is longer than max_result_bytes is recorded as
 * its length and SHA-256 (result_not_kept), and so is one whose completion
 * was answered 413 (ledgerd's body_too_large under a smaller --max-body, or
 * a reverse proxy's limit), sent again at once: a completion is never lost
 * to its size. The tool's caller
 * still gets the result in out->result, and out->result_sha256 says it is
 * not on record; a later claim of the key is RESULT_NOT_KEPT, with the
 * stored outcome (out->call), completed_at, result_bytes and result_sha256
 * filled from ledgerd's refusal (out->error has all of it).
 *
 * With tracing on, the call is an `execute_tool {tool}` span (kind
 * INTERNAL; "execute_tool" when call->tool is NULL), a child of
 * call->traceparent (a new trace when it is NULL or malformed, never a
 * refusal), with OpenTelemetry's GenAI attributes (gen_ai.operation.name,
 * gen_ai.tool.name, gen_ai.tool.call.id, error.type) and the ledger's
 * (ledger.request_id, ledger.tool_call_id, ledger.attempt_id,
 * ledger.outcome, ledger.replayed, ledger.fencing_token): see
 * docs/tracing-sdk-c.md. Its claim, renewals and record carry the span's
 * traceparent; with tracing off they carry call->traceparent when valid.
 *
 * @param call borrowed for the call
 * @param ctx passed to @p tool_fn untouched
 * @param out filled whatever the return value; clear with
 *        ledger_client_outcome_clear()
 * @return LEDGER_CLIENT_OK when @p out says what happened (any kind but
 *         REFUSED), _ERR_REFUSED with kind REFUSED for any other API error
 *         (attempt_required, attempt_not_found, invalid_field, ...: see
 *         out->error), _ERR_UNAVAILABLE when ledgerd could not be asked
 *         (the tool did not run), _ERR_INVALID, _ERR_PROTOCOL, _ERR_NOMEM
 *         or _ERR_INTERNAL
 */
static inline LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_tool_call(struct ledger_client *c, const struct ledger_call *call,
			ledger_tool_fn tool_fn, void *ctx, struct ledger_outcome *out);

/**
 * The trace context the running tool is in, for it to pass on to what it
 * calls (an MCP server's params._meta, an HTTP request's headers). Called
 * from a ledger_tool_fn, on its thread: the traceparent of the call's
 * execute_tool span, or with tracing off call->traceparent when it is valid;
 * NULL when there is none, and outside a tool. Thread-safe.
 * @param tracestate if not NULL, set to the context's tracestate or NULL
 * @return borrowed, like *@p tracestate, until the tool function returns
 */
LEDGER_CLIENT_API const char *ledger_client_tool_traceparent(const char **tracestate);

/**
 * Names the @p k-th tool call of a logical request ("call_07"). A rerun on
 * another replica makes the engine invent new random tool-call ids; this
 * name stays the same, so the rerun hits the same key.
 * @return LEDGER_CLIENT_OK, or _ERR_INVALID if @p size is too small
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_stable_call_id(unsigned k, char *out, size_t size);

/**
 * The canonical form of the JSON text @p json, as ledgerd computes it:
 * RFC 8785 (JCS), every number with its own exact digits where JCS's
 * double would be another number (9007199254740993 stays itself, 1e-400
 * is not 0). @param out a new NUL-terminated text; free with free()
 * @return LEDGER_CLIENT_OK, _ERR_INVALID (not JSON, a duplicate key, a
 *         number beyond the double range) or _ERR_NOMEM
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_canonicalize(const char *json, size_t len, char **out, size_t *out_len);

/**
 * The argument fingerprint ledgerd keeps: SHA-256 of the canonical form,
 * 64 lowercase hex digits and a NUL. Errors as ledger_client_canonicalize().
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_args_sha256(const char *json, size_t len, char hex_out[65]);

/* ---------------------------------------------------------------------- */
/* Attempts and failover (routers)                                        */
/* ---------------------------------------------------------------------- */

/* One try of a logical request on one replica. Strings borrowed for the call. */
struct ledger_attempt_spec {
	const char *request_id;     /* required */
	const char *attempt_id;     /* required, unique within the request */
	const char *replica;        /* or NULL */
	const char *model_revision; /* or NULL: the request's */
	uint32_t lease_ms;          /* 0: ledgerd's default */
	uint32_t max_attempts;      /* 0: the policy's default (fixed by the first attempt) */
	const char *gateway;        /* the process that runs the attempt (an id), or NULL */
	const char *identity;       /* the replica's identity, a JSON object's text, or NULL */
	const char *input_sha256;   /* 64 hex of the request's input, fixed by its first
	                               attempt (another later: request_mismatch), or NULL */
	/* Fields are only ever added here, at the end. */
	const char *traceparent; /* the W3C trace context of the attempt, or NULL: every call
				    to ledgerd on the attempt's handle carries it */
	const char *tracestate;  /* that context's tracestate, or NULL */
};

/**
 * Begins an attempt (POST /v1/requests/{rid}/attempts). The same spec
 * again is answered as the first time.
 * @param out on LEDGER_CLIENT_OK a new handle; free with
 *        ledger_client_attempt_free()
 * @param err on _ERR_REFUSED the API's refusal (first_delta_sent,
 *        request_closed, retry_budget_exhausted, source_not_fenced, ...);
 *        clear with ledger_client_error_clear(); may be NULL
 */
static inline LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_begin(struct ledger_client *c, const struct ledger_attempt_spec *spec,
			    struct ledger_attempt **out, struct ledger_client_error *err);

/**
 * A handle on an attempt begun elsewhere (by a process that died, say), to
 * report a failover of it: its epoch and lease are unknown (0).
 * @param out on LEDGER_CLIENT_OK a new handle; free with ledger_client_attempt_free()
 * @return LEDGER_CLIENT_OK, _ERR_INVALID (ids) or _ERR_NOMEM
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_adopt(struct ledger_client *c, const char *request_id, const char *attempt_id,
			    struct ledger_attempt **out);

/**
 * The request's settled tool calls as the begin answer listed them (a JSON
 * array of tool_call_id, tool, args_sha256 and outcome), or NULL when it
 * had none; borrowed from @p a.
 */
LEDGER_CLIENT_API const char *ledger_client_attempt_settled(const struct ledger_attempt *a);

/** Stops the heartbeat if running and frees @p a. NULL-safe. */
LEDGER_CLIENT_API void ledger_client_attempt_free(struct ledger_attempt *a);

/**
 * Sets the trace context every later call on @p a carries (renew and the
 * heartbeat, deliver, cancel, cancel-ack, finish, client events, failover):
 * for an adopted handle, or when the context changes. A handle begun with
 * a spec has the spec's; a failover decision's next attempt its source's
 * (or its next spec's, when that names one). A malformed or NULL
 * @p traceparent leaves the calls without one. Both are copied.
 * Thread-safe, the heartbeat running or not. NULL-safe.
 */
LEDGER_CLIENT_API void ledger_client_attempt_set_trace(struct ledger_attempt *a,
						       const char *traceparent,
						       const char *tracestate);

/** The attempt's id and request id; borrowed from @p a. */
LEDGER_CLIENT_API const char *ledger_client_attempt_id(const struct ledger_attempt *a);
LEDGER_CLIENT_API const char *ledger_client_attempt_request_id(const struct ledger_attempt *a);
/** The attempt's epoch (its fencing token) and lease as granted. */
LEDGER_CLIENT_API uint64_t ledger_client_attempt_epoch(const struct ledger_attempt *a);
LEDGER_CLIENT_API uint32_t ledger_client_attempt_lease_ms(const struct ledger_attempt *a);

/**
 * Whether the attempt lost its rights: ledgerd answered attempt_fenced to
 * it, a tool call under it diverged (args_mismatch), or a failover decision
 * revoked it. Once true, stays true; deliver, renew and finish then refuse
 * without asking. A router stops publishing the attempt's output.
 */
LEDGER_CLIENT_API bool ledger_client_attempt_revoked(const struct ledger_attempt *a);

/**
 * Renews the lease: the new deadline is ledgerd's now plus @p lease_ms (0:
 * the lease the attempt began with). _ERR_REFUSED attempt_fenced revokes.
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_renew(struct ledger_attempt *a, uint32_t lease_ms,
			    struct ledger_client_error *err);

/**
 * Starts renewing the lease every @p interval_ms (0: a third of the lease)
 * on a thread of its own, until stopped, revoked or freed. Renewals that
 * get no answer are tried again at the next tick.
 * @return LEDGER_CLIENT_OK, _ERR_INVALID if one runs already, _ERR_INTERNAL
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_heartbeat_start(struct ledger_attempt *a, uint32_t interval_ms);

/** Stops the heartbeat and waits for its thread. NULL-safe, idempotent. */
LEDGER_CLIENT_API void ledger_client_heartbeat_stop(struct ledger_attempt *a);

/**
 * Reports delivered output (POST .../deliver). Call it before writing the
 * first byte of the response to the client: only after LEDGER_CLIENT_OK may
 * that byte go out. The first call makes the request non-retryable.
 * _ERR_REFUSED attempt_fenced means: do not publish.
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_deliver(struct ledger_attempt *a, uint64_t delivered_output_tokens,
			      struct ledger_client_error *err);

/** Revokes the attempt's rights (POST .../cancel); @p reason may be NULL. */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_cancel(struct ledger_attempt *a, const char *reason,
			     struct ledger_client_error *err);

/** The worker confirms it stopped (POST .../cancel-ack). */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_cancel_ack(struct ledger_attempt *a, struct ledger_client_error *err);

/**
 * Ends the attempt (POST .../finish): @p completed true closes the request
 * as completed; false ends the attempt as failed and leaves the request
 * open for a failover decision. @p reason may be NULL.
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_finish(struct ledger_attempt *a, bool completed,
			     uint64_t delivered_output_tokens, const char *reason,
			     struct ledger_client_error *err);

/*
 * What a client was answered, kept by ledgerd with the request that ends
 * (API.md 1.1, "Kept answers"): a repeat of the request is answered with
 * it. Strings and bytes borrowed for the call.
 */
struct ledger_kept_answer {
	long status;              /* the HTTP status the client got */
	const char *content_type; /* its Content-Type */
	const void *body;         /* the bytes the client got; NULL: only their count and hash */
	size_t len;               /* the body's length, or with body NULL the count of bytes */
	const char *sha256;       /* body NULL: the 64 lowercase hex of their SHA-256 */
};

/* How an attempt ends; zeroed means none. Strings borrowed. */
struct ledger_finish_opts {
	const char *reason;       /* for the history, or NULL */
	const char *client_error; /* failed only: the client's own error, an {"error": {...}}
	                             envelope's text (with "http_status" beside it, or not),
	                             which ends the request failed, with no failover */
	const struct ledger_kept_answer *answer; /* what the client was answered, or NULL */
};

/**
 * Ends the attempt (POST .../finish) as ledger_client_attempt_finish(),
 * with the client's own error and the answer to keep.
 * @param opts may be NULL
 */
static inline LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_end(struct ledger_attempt *a, bool completed,
			  uint64_t delivered_output_tokens, const struct ledger_finish_opts *opts,
			  struct ledger_client_error *err);

/* What happened to the client of an attempt, for the request's history. */
enum ledger_client_event {
	LEDGER_CLIENT_EVENT_DISCONNECTED, /* its connection dropped; a hold began */
	LEDGER_CLIENT_EVENT_RESUMED,      /* a repeat of the request attached to the attempt */
	LEDGER_CLIENT_EVENT_HOLD_ENDED,   /* the hold ran out with no client attached */
};

/**
 * Records @p event in the request's history (POST .../client), with the
 * last event id a resuming client had (-1: none) or the hold granted (-1:
 * none). A retried call records it once. No rights are needed: it is history.
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_client_event(struct ledger_attempt *a, enum ledger_client_event event,
				   int64_t last_event_id, int64_t hold_ms,
				   struct ledger_client_error *err);

/* What the router saw go wrong. */
enum ledger_signal {
	LEDGER_SIGNAL_REPLICA_EXITED,      /* certainly dead */
	LEDGER_SIGNAL_POD_LOST,            /* certainly dead */
	LEDGER_SIGNAL_UPSTREAM_CLOSED,     /* certainly dead */
	LEDGER_SIGNAL_NETWORK_ERROR,       /* liveness uncertain */
	LEDGER_SIGNAL_HEARTBEAT_TIMEOUT,   /* liveness uncertain */
	LEDGER_SIGNAL_OVERLOADED,          /* slow, not failed */
	LEDGER_SIGNAL_CLIENT_DISCONNECTED, /* the client went away */
};

enum ledger_failover_action {
	LEDGER_FAILOVER_RETRY_PREFILL,    /* run the request again: decision.next */
	LEDGER_FAILOVER_WAIT_FOR_FENCE,   /* ask again after cancel-ack or retry_after_ms */
	LEDGER_FAILOVER_KEEP_WAITING,     /* a slow replica: keep streaming from it */
	LEDGER_FAILOVER_CANCEL_UPSTREAM,  /* stop the upstream; start nothing */
	LEDGER_FAILOVER_TERMINATE_STREAM, /* end the stream with decision.sse_event */
	LEDGER_FAILOVER_REJECT,           /* fail the request with decision.client_error */
};

/** The API's names: "replica_exited", ..., "retry_prefill", ...; static, or
 *  "unknown" for a value outside the enum. For logs and metrics. */
LEDGER_CLIENT_API const char *ledger_client_signal_name(enum ledger_signal signal);
LEDGER_CLIENT_API const char *ledger_client_action_name(enum ledger_failover_action action);

/* Options of a failover question; zeroed means none. Strings borrowed. */
struct ledger_failover_opts {
	bool has_retry_prefill_tokens;
	uint64_t retry_prefill_tokens;   /* what a rerun would prefill again */
	const struct ledger_attempt_spec *next; /* the rerun, if one is allowed; or NULL */
	const struct ledger_kept_answer *delivered_answer; /* what the client got, kept when
	                                                      the decision ends the request */
};

struct ledger_decision {
	enum ledger_failover_action action;
	uint64_t retry_after_ms; /* WAIT_FOR_FENCE: when to ask again */
	char *client_error;      /* {"error": {...}} for the client, or NULL */
	char *sse_event;         /* "data: <client_error>\n\n", the stream's final event, or NULL */
	struct ledger_attempt *next; /* RETRY_PREFILL: the new attempt, owned by the decision */
	char *settled_tool_calls;    /* RETRY_PREFILL: JSON array of the calls already settled */
	char *body;                  /* the whole answer */
};

/** Frees what @p d owns (the next attempt too) and zeroes it. NULL-safe. */
static inline void ledger_client_decision_clear(struct ledger_decision *d);

/**
 * Takes the next attempt out of @p d, so it outlives the decision.
 * @return the handle (free with ledger_client_attempt_free()), or NULL
 */
LEDGER_CLIENT_API struct ledger_attempt *
ledger_client_decision_take_next(struct ledger_decision *d);

/**
 * Reports a failure of @p source and gets the decision (POST .../failover).
 * Any decision but KEEP_WAITING revokes @p source. A retried call gets the
 * decision recorded the first time.
 * @param opts may be NULL
 * @param out filled on LEDGER_CLIENT_OK; clear with ledger_client_decision_clear()
 * @param err on _ERR_REFUSED attempt_fenced (not the newest attempt) or
 *        request_closed (its body has the recorded client_error); may be NULL
 */
static inline LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_failover(struct ledger_attempt *source, enum ledger_signal signal,
		       const struct ledger_failover_opts *opts, struct ledger_decision *out,
		       struct ledger_client_error *err);

/* ---------------------------------------------------------------------- */
/* Incident review and resolution (operators)                             */
/* ---------------------------------------------------------------------- */

/*
 * These calls hand back ledgerd's answer as it was received, for a program
 * that prints it or reads it with its own JSON parser. Ids are sent
 * percent-escaped whatever they hold ("." and ".." included), so an id
 * never changes the path: one that is not an id is ledgerd's to refuse
 * (400 invalid_id). A 2xx answer is LEDGER_CLIENT_OK with its body, which
 * is not checked further; any other status is _ERR_REFUSED (the API's
 * envelope: err->code) or _ERR_PROTOCOL (none), the body in err->body.
 * They are re-sent on no answer or a 503 like every call (see no_retry).
 */

/* An answer, byte for byte. */
struct ledger_client_answer {
	long status; /* the HTTP status: 2xx */
	char *body;  /* the body as received, owned, NUL-terminated (possibly empty) */
	size_t len;  /* its length in bytes, without the NUL */
};

/** Frees @p a->body and zeroes @p a. NULL-safe. */
LEDGER_CLIENT_API void ledger_client_answer_clear(struct ledger_client_answer *a);

/**
 * A request with its attempts, tool calls and history (GET
 * /v1/requests/{rid}): the first 1,000 events, and the answer's
 * next_events_cursor, when present, for the next page.
 * @param request_id borrowed; non-empty
 * @param events_cursor borrowed; NULL for the first page, else a
 *        next_events_cursor from the previous page
 * @param out filled on LEDGER_CLIENT_OK; clear with ledger_client_answer_clear()
 * @param err on failure why (404 not_found: no such request in this
 *        tenant); clear with ledger_client_error_clear(); may be NULL
 * @return LEDGER_CLIENT_OK, _ERR_INVALID, _ERR_REFUSED, _ERR_PROTOCOL,
 *         _ERR_UNAVAILABLE, _ERR_NOMEM or _ERR_INTERNAL
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_request_get(struct ledger_client *c, const char *request_id,
			  const char *events_cursor, struct ledger_client_answer *out,
			  struct ledger_client_error *err);

/**
 * The answer kept with a request that ended (GET /v1/requests/{rid}/answer):
 * {"kept": true, "status", "content_type", "body_b64"}, or {"kept": false,
 * "status", "content_type", "bytes", "sha256"} when it was over the bound.
 * @param out, err as ledger_client_request_get() (404 answer_not_found: none kept)
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_answer_get(struct ledger_client *c, const char *request_id,
			 struct ledger_client_answer *out, struct ledger_client_error *err);

/**
 * The tool calls of the tenant in a state (GET
 * /v1/tool-calls?state=&limit=&cursor=): {"items": [...], "next_cursor"},
 * the cursor null on the last page.
 * @param state borrowed: "unknown" and "in_progress" are those that need a
 *        person; NULL lists every state
 * @param limit items a page, 1..1000; 0 leaves it to ledgerd (50)
 * @param cursor borrowed; NULL for the first page, else a next_cursor
 * @param out, err as ledger_client_request_get() (400 invalid_field: a bad
 *        state, limit or cursor)
 */
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_tool_calls_list(struct ledger_client *c, const char *state, uint32_t limit,
			      const char *cursor, struct ledger_client_answer *out,
			      struct ledger_client_error *err);

/* What a person found in the tool's own records. */
enum ledger_resolution_kind {
	LEDGER_RESOLVED_SUCCEEDED,    /* "succeeded": it happened; the result is replayed */
	LEDGER_RESOLVED_FAILED,       /* "failed": it failed for good; replayed as well */
	LEDGER_RESOLVED_NOT_EXECUTED, /* "not_executed": it did not happen; claimable again */
};

/* One resolution. Strings borrowed for the call. */
struct ledger_resolution {
	const char *request_id;   /* required */
	const char *tool_call_id; /* required */
	enum ledger_resolution_kind as;
	const char *result_json; /* the result as JSON text, sent byte for byte, or NULL */
	const char *note;        /* why, for the history (UTF-8), or NULL */
};

/**
 * Settles an unknown or stuck tool call (POST
 * /v1/requests/{rid}/tool-calls/{cid}/resolve; an admin token). The same
 * resolution again is answered as the first time.
 * @param r borrowed for the call
 * @param out filled on LEDGER_CLIENT_OK: {"status": "completed", ...} or
 *        {"status": "released", "fencing_token", ...}; clear with
 *        ledger_client_answer_clear()
 * @param err on failure why (409 already_completed: the call was settled
 *        otherwise; 403 forbidden: not an admin); may be NULL
 * @return as ledger_client_request_get(); _ERR_INVALID, with nothing sent,
 *         also for a result_json that is not JSON or a note not UTF-8
 */
static inline LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_tool_call_resolve(struct ledger_client *c, const struct ledger_resolution *r,
				struct ledger_client_answer *out, struct ledger_client_error *err);

/* ---------------------------------------------------------------------- */
/* The calls that take a struct that grows                                */
/* ---------------------------------------------------------------------- */

/*
 * Each inline function above calls its _abi twin with the sizes of the
 * structs as this header defines them. Call the inline functions; the
 * _abi ones are the library's side of that contract.
 */

/** The sizes of the growing structs as this header defines them; static. */
static inline const struct ledger_client_abi *ledger_client_abi_here(void)
{
	static const struct ledger_client_abi abi = {
		LEDGER_CLIENT_ABI_COUNT,
		(uint32_t)sizeof(struct ledger_client_options),
		(uint32_t)sizeof(struct ledger_call),
		(uint32_t)sizeof(struct ledger_outcome),
		(uint32_t)sizeof(struct ledger_attempt_spec),
		(uint32_t)sizeof(struct ledger_kept_answer),
		(uint32_t)sizeof(struct ledger_finish_opts),
		(uint32_t)sizeof(struct ledger_failover_opts),
		(uint32_t)sizeof(struct ledger_decision),
		(uint32_t)sizeof(struct ledger_resolution),
	};
	return &abi;
}

LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_open_abi(const struct ledger_client_options *opts, struct ledger_client **out,
		       const struct ledger_client_abi *abi);
LEDGER_CLIENT_API void ledger_client_outcome_clear_abi(struct ledger_outcome *o,
						       const struct ledger_client_abi *abi);
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_tool_call_abi(struct ledger_client *c, const struct ledger_call *call,
			    ledger_tool_fn tool_fn, void *ctx, struct ledger_outcome *out,
			    const struct ledger_client_abi *abi);
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_begin_abi(struct ledger_client *c, const struct ledger_attempt_spec *spec,
				struct ledger_attempt **out, struct ledger_client_error *err,
				const struct ledger_client_abi *abi);
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_attempt_end_abi(struct ledger_attempt *a, bool completed,
			      uint64_t delivered_output_tokens,
			      const struct ledger_finish_opts *opts, struct ledger_client_error *err,
			      const struct ledger_client_abi *abi);
LEDGER_CLIENT_API void ledger_client_decision_clear_abi(struct ledger_decision *d,
							const struct ledger_client_abi *abi);
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_failover_abi(struct ledger_attempt *source, enum ledger_signal signal,
			   const struct ledger_failover_opts *opts, struct ledger_decision *out,
			   struct ledger_client_error *err, const struct ledger_client_abi *abi);
LEDGER_CLIENT_API LEDGER_CLIENT_MUSTCHECK enum ledger_client_err
ledger_client_tool_call_resolve_abi(struct ledger_client *c, const struct ledger_resolution *r,
				    struct ledger_client_answer *out,
				    struct ledger_client_error *err,
				    const struct ledger_client_abi *abi);

static inline enum ledger_client_err ledger_client_open(const struct ledger_client_options *opts,
							struct ledger_client **out)
{
	return ledger_client_open_abi(opts, out, ledger_client_abi_here());
}

static inline void ledger_client_outcome_clear(struct ledger_outcome *o)
{
	ledger_client_outcome_clear_abi(o, ledger_client_abi_here());
}

static inline enum ledger_client_err ledger_client_tool_call(struct ledger_client *c,
							     const struct ledger_call *call,
							     ledger_tool_fn tool_fn, void *ctx,
							     struct ledger_outcome *out)
{
	return ledger_client_tool_call_abi(c, call, tool_fn, ctx, out, ledger_client_abi_here());
}

static inline enum ledger_client_err
ledger_client_attempt_begin(struct ledger_client *c, const struct ledger_attempt_spec *spec,
			    struct ledger_attempt **out, struct ledger_client_error *err)
{
	return ledger_client_attempt_begin_abi(c, spec, out, err, ledger_client_abi_here());
}

static inline enum ledger_client_err
ledger_client_attempt_end(struct ledger_attempt *a, bool completed,
			  uint64_t delivered_output_tokens, const struct ledger_finish_opts *opts,
			  struct ledger_client_error *err)
{
	return ledger_client_attempt_end_abi(a, completed, delivered_output_tokens, opts, err,
					     ledger_client_abi_here());
}

static inline void ledger_client_decision_clear(struct ledger_decision *d)
{
	ledger_client_decision_clear_abi(d, ledger_client_abi_here());
}

static inline enum ledger_client_err
ledger_client_failover(struct ledger_attempt *source, enum ledger_signal signal,
		       const struct ledger_failover_opts *opts, struct ledger_decision *out,
		       struct ledger_client_error *err)
{
	return ledger_client_failover_abi(source, signal, opts, out, err,
					  ledger_client_abi_here());
}

static inline enum ledger_client_err
ledger_client_tool_call_resolve(struct ledger_client *c, const struct ledger_resolution *r,
				struct ledger_client_answer *out, struct ledger_client_error *err)
{
	return ledger_client_tool_call_resolve_abi(c, r, out, err, ledger_client_abi_here());
}

#ifdef __cplusplus
}
#endif

#endif
