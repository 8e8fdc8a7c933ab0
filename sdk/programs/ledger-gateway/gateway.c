/*
 * sdk/programs/ledger-gateway/gateway.c: ledger-gateway, a router on the C SDK and the
 * project's own HTTP layer (api/wire/). It serves
 * OpenAI's streaming POST /v1/chat/completions in front of replicas and
 * asks ledgerd before every step that could duplicate or lose output:
 *
 *   begin attempt ──> stream from replica ──> deliver ──> 200 + first event ──> ... ──> [DONE], finish
 *        ^                  │ failure or silence                 │ failure after a delta
 *        │                  v                                    v
 *        └── retry_prefill ─ failover ─> wait_for_fence (ask again)   terminate_stream: error event
 *                                    └─> reject: HTTP 503, x-should-retry: false
 *
 * No byte reaches the client before deliver succeeded, text of two
 * attempts is never spliced (a rerun only happens before the first delta),
 * and a client that goes away cancels the upstream and starts nothing.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <ledger_client.h>

#include "api/wire/conn.h"
#include "api/wire/listen.h"
#include "api/wire/net.h"
#include "api/wire/stream.h"
#include "api/wire/tls.h"
#include "sdk/programs/ledger-gateway/config.h"
#include "sdk/programs/ledger-gateway/upstream.h"

#define MAX_BODY (1u << 20)
#define DOWN_MS 5000u /* a failed replica is skipped this long */
#define MAX_FENCE_WAIT_MS 60000u
#define INFO_TIMEOUT_MS 1000L
#define DRAIN_MS 30000u /* how long a stop waits for the streams in flight */

/* What makes two replicas' output interchangeable: it names the model revision. */
static const char *const REVISION_KEYS[] = {"weights_revision", "quantization",   "tokenizer",
					    "chat_template",    "kv_cache_dtype", "parallel_layout",
					    "adapters"};

static struct gateway gw = {.lease_ms = 10000, .soft_ms = 2000, .stall_ms = 10000};

/* One client request and the attempts that serve it. */
struct stream {
	char rid[40];
	char *body; /* the client's request, sent unchanged to every attempt */
	size_t body_len;
	bool too_large;
	unsigned attempts;              /* attempts begun: they are named a1, a2, ... */
	struct ledger_attempt *attempt; /* the current one */
	size_t replica;                 /* its replica */
	struct upstream *up;
	uint64_t delivered; /* content tokens handed to the client */
	char *out;          /* the next bytes for the client */
	size_t out_len, out_off;
	bool started;  /* the 200 and the first event are queued */
	bool finished; /* the last event is queued: nothing more will come */
};

/* --- logging: one JSON object per line on stderr --- */

static void log_line(const char *msg, const struct stream *s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void log_line(const char *msg, const struct stream *s, const char *fmt, ...)
{
	struct timespec ts;
	char extra[512] = "";
	va_list ap;

	if (fmt != NULL) {
		va_start(ap, fmt);
		vsnprintf(extra, sizeof(extra), fmt, ap);
		va_end(ap);
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	fprintf(stderr, "{\"ts\":%lld.%03ld,\"msg\":\"%s\"", (long long)ts.tv_sec,
		ts.tv_nsec / 1000000L, msg);
	if (s != NULL && s->rid[0] != '\0')
		fprintf(stderr, ",\"request_id\":\"%s\"", s->rid);
	if (s != NULL && s->attempt != NULL)
		fprintf(stderr, ",\"attempt_id\":\"%s\"", ledger_client_attempt_id(s->attempt));
	fprintf(stderr, "%s%s}\n", extra[0] != '\0' ? "," : "", extra);
}

/* Logs why ledgerd could not be asked (no answer, TLS, ...): the client is only told
 * "ledger_unavailable", so the reason, a misconfigured CA file say, is here. */
static void log_ledger_failure(const char *msg, const struct stream *s,
			       const struct ledger_client_error *err)
{
	json_t *text = json_string(err->message);
	char *quoted = text != NULL ? json_dumps(text, JSON_ENCODE_ANY) : NULL;

	log_line(msg, s, "\"status\":%ld,\"tls\":%s,\"error\":%s", err->status,
		 err->failure == LEDGER_CLIENT_FAILURE_TLS ? "true" : "false",
		 quoted != NULL ? quoted : "null");
	free(quoted);
	json_decref(text);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* --- replicas --- */

/*
 * The model revision of a replica: the SDK's fingerprint (SHA-256 of the
 * RFC 8785 form) of what decides its output. NULL if it does not answer.
 */
static char *model_revision(const struct replica *r)
{
	char url[1024], hex[65], *info_text = NULL, *text = NULL, *rev = NULL;
	json_t *info = NULL, *picked = json_object();

	snprintf(url, sizeof(url), "%s/v1/replica/info", r->url);
	info_text = upstream_get(url, INFO_TIMEOUT_MS);
	if (info_text != NULL)
		info = json_loads(info_text, 0, NULL);
	if (info == NULL || !json_is_object(info) || picked == NULL)
		goto out;
	for (size_t i = 0; i < sizeof(REVISION_KEYS) / sizeof(REVISION_KEYS[0]); i++) {
		json_t *v = json_object_get(info, REVISION_KEYS[i]);

		json_object_set(picked, REVISION_KEYS[i], v != NULL ? v : json_null());
	}
	text = json_dumps(picked, JSON_COMPACT);
	if (text != NULL &&
	    ledger_client_args_sha256(text, strlen(text), hex) == LEDGER_CLIENT_OK &&
	    asprintf(&rev, "sha256:%s", hex) < 0)
		rev = NULL;
out:
	free(info_text);
	free(text);
	json_decref(info);
	json_decref(picked);
	return rev;
}

/*
 * Picks a healthy replica other than @p avoid (SIZE_MAX: none), round
 * robin, and reads its revision: the read doubles as a health check.
 * @return the replica's index, or SIZE_MAX when none answers
 */
static size_t pick_replica(size_t avoid, char **revision)
{
	unsigned start = atomic_fetch_add(&gw.next, 1);

	for (size_t i = 0; i < gw.n_replicas; i++) {
		size_t k = (start + i) % gw.n_replicas;
		struct replica *r = &gw.replicas[k];

		if (k == avoid || atomic_load(&r->down_until) > now_ms())
			continue;
		*revision = model_revision(r);
		if (*revision != NULL)
			return k;
		atomic_store(&r->down_until, now_ms() + DOWN_MS);
	}
	return SIZE_MAX;
}

/* --- the client error, as OpenAI-compatible clients raise it --- */

static char *local_error(const struct stream *s, const char *code, const char *message,
			 bool retryable)
{
	json_t *e = json_pack("{s:{s:s,s:s,s:n,s:s,s:s,s:b,s:I,s:b}}", "error", "code", code,
			      "type", "server_error", "param", "message", message, "request_id",
			      s->rid, "partial_output", s->delivered > 0, "delivered_output_tokens",
			      (json_int_t)s->delivered, "retryable", retryable);
	char *text = e != NULL ? json_dumps(e, JSON_COMPACT) : NULL;

	json_decref(e);
	return text;
}

/* The client_error a refusal of ledgerd carries (request_closed, ...), or NULL. */
static char *refusal_client_error(const struct ledger_client_error *err)
{
	json_t *body = err->body != NULL ? json_loads(err->body, 0, NULL) : NULL;
	json_t *ce = json_object_get(json_object_get(body, "error"), "client_error");
	char *text = json_is_object(ce) ? json_dumps(ce, JSON_COMPACT) : NULL;

	json_decref(body);
	return text;
}

/* --- attempts --- */

static void drop_attempt(struct stream *s)
{
	upstream_close(s->up);
	s->up = NULL;
	ledger_client_attempt_free(s->attempt); /* stops its heartbeat */
	s->attempt = NULL;
}

/* Sends the client's request to the current attempt's replica. */
static bool start_upstream(struct stream *s, const char *settled)
{
	char url[1024];

	snprintf(url, sizeof(url), "%s/v1/chat/completions", gw.replicas[s->replica].url);
	s->up = upstream_open(url, s->body, s->body_len, s->rid,
			      ledger_client_attempt_id(s->attempt), settled);
	if (s->up == NULL)
		return false;
	/* The lease is renewed while the replica streams, never after it failed. */
	if (ledger_client_heartbeat_start(s->attempt, 0) != LEDGER_CLIENT_OK)
		log_line("heartbeat not started", s, NULL);
	log_line("attempt started", s, "\"replica\":\"%s\"", gw.replicas[s->replica].name);
	return true;
}

/*
 * Begins the request's first attempt.
 * @return NULL, or the client error to answer with
 */
static char *begin_first(struct stream *s)
{
	struct ledger_client_error err = {0};
	char aid[16], *rev = NULL, *error = NULL;
	size_t k = pick_replica(SIZE_MAX, &rev);

	if (k == SIZE_MAX)
		return local_error(s, "no_replica_available", "no replica answers", true);
	snprintf(aid, sizeof(aid), "a%u", ++s->attempts);
	struct ledger_attempt_spec spec = {.request_id = s->rid,
					   .attempt_id = aid,
					   .replica = gw.replicas[k].name,
					   .model_revision = rev,
					   .lease_ms = gw.lease_ms,
					   .max_attempts = gw.max_attempts};

	if (ledger_client_attempt_begin(gw.ledger, &spec, &s->attempt, &err) != LEDGER_CLIENT_OK) {
		error = refusal_client_error(&err);
		if (error == NULL) {
			log_ledger_failure("attempt not begun", s, &err);
			error = local_error(s, "ledger_unavailable",
					    "the ledger refused the attempt", true);
		}
	} else {
		s->replica = k;
		if (!start_upstream(s, "[]"))
			error = local_error(s, "internal_error", "out of memory", true);
	}
	ledger_client_error_clear(&err);
	free(rev);
	return error;
}

/*
 * The replica failed: reports what the client got, asks ledgerd, and waits
 * out wait_for_fence. The attempt's heartbeat stops first: a failed
 * replica's lease must be allowed to run out.
 * @return LEDGER_CLIENT_OK with the decision in @p d, or the refusal
 */
static enum ledger_client_err ask_failover(struct stream *s, enum ledger_signal signal,
					   struct ledger_decision *d,
					   struct ledger_client_error *err)
{
	struct ledger_failover_opts opts = {0};
	char next_aid[16], *rev = NULL;
	enum ledger_client_err rc;
	uint64_t waited = 0;
	size_t next;

	ledger_client_heartbeat_stop(s->attempt);
	if (signal != LEDGER_SIGNAL_OVERLOADED && signal != LEDGER_SIGNAL_CLIENT_DISCONNECTED)
		atomic_store(&gw.replicas[s->replica].down_until, now_ms() + DOWN_MS);
	if (s->delivered > 0 &&
	    ledger_client_attempt_deliver(s->attempt, s->delivered, err) != LEDGER_CLIENT_OK)
		log_line("progress not reported", s, "\"code\":\"%s\"", err->code);
	ledger_client_error_clear(err);

	/* Where a rerun would go, if the decision allows one. */
	next = signal == LEDGER_SIGNAL_OVERLOADED || signal == LEDGER_SIGNAL_CLIENT_DISCONNECTED ||
			       s->delivered > 0
		       ? SIZE_MAX
		       : pick_replica(s->replica, &rev);
	if (next != SIZE_MAX) {
		snprintf(next_aid, sizeof(next_aid), "a%u", s->attempts + 1);
		opts.next = (struct ledger_attempt_spec){.request_id = s->rid,
							 .attempt_id = next_aid,
							 .replica = gw.replicas[next].name,
							 .model_revision = rev,
							 .lease_ms = gw.lease_ms};
	}
	for (;;) {
		rc = ledger_client_failover(s->attempt, signal, &opts, d, err);
		if (rc != LEDGER_CLIENT_OK || d->action != LEDGER_FAILOVER_WAIT_FOR_FENCE ||
		    waited >= MAX_FENCE_WAIT_MS)
			break;
		/* The source may be alive: cut it off and let its lease run out. */
		log_line("waiting for the fence", s, "\"retry_after_ms\":%llu",
			 (unsigned long long)d->retry_after_ms);
		upstream_close(s->up);
		s->up = NULL;
		sleep_ms(d->retry_after_ms + 10);
		waited += d->retry_after_ms + 10;
		ledger_client_decision_clear(d);
	}
	if (rc == LEDGER_CLIENT_OK) {
		log_line("failover", s, "\"signal\":\"%s\",\"action\":\"%s\"",
			 ledger_client_signal_name(signal), ledger_client_action_name(d->action));
		if (d->action == LEDGER_FAILOVER_RETRY_PREFILL && d->next != NULL)
			s->replica = next;
	}
	free(rev);
	return rc;
}

/* A decision that ends the request: the client error it carries. */
static char *ending_error(struct stream *s, struct ledger_decision *d)
{
	if (d->client_error != NULL)
		return strdup(d->client_error);
	return local_error(s, "upstream_failed", "the replica failed", false);
}

/*
 * Streams from attempts until the first event is delivered: every failure
 * before it is invisible to the client and may be rerun.
 * @return NULL with the event in @p event, or the client error to answer with
 */
static char *first_event(struct stream *s, char **event)
{
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};
	enum ledger_signal signal;
	char *error = begin_first(s);

	*event = NULL;
	while (error == NULL) {
		enum upstream_read r =
			upstream_next(s->up, gw.soft_ms, gw.stall_ms, event, &signal);

		if (r == UPSTREAM_EVENT) {
			/* The point of no retry: durable before the first byte goes out. */
			if (ledger_client_attempt_deliver(s->attempt, 1, &err) == LEDGER_CLIENT_OK)
				break;
			free(*event);
			*event = NULL;
			signal = LEDGER_SIGNAL_HEARTBEAT_TIMEOUT; /* fenced: it must not publish */
		} else if (r == UPSTREAM_DONE) {
			signal = LEDGER_SIGNAL_UPSTREAM_CLOSED; /* a completion without output */
		} else if (r == UPSTREAM_SILENT) {
			signal = LEDGER_SIGNAL_OVERLOADED;
		}
		ledger_client_error_clear(&err);
		if (ask_failover(s, signal, &d, &err) != LEDGER_CLIENT_OK) {
			error = refusal_client_error(&err);
			if (error == NULL) {
				log_ledger_failure("failover not asked", s, &err);
				error = local_error(s, "ledger_unavailable", err.message, true);
			}
		} else if (d.action == LEDGER_FAILOVER_KEEP_WAITING) {
			if (ledger_client_heartbeat_start(s->attempt, 0) != LEDGER_CLIENT_OK)
				log_line("heartbeat not restarted", s, NULL);
		} else if (d.action == LEDGER_FAILOVER_RETRY_PREFILL && d.next != NULL) {
			const char *settled =
				d.settled_tool_calls != NULL ? d.settled_tool_calls : "[]";

			drop_attempt(s);
			s->attempt = ledger_client_decision_take_next(&d);
			s->attempts++;
			if (!start_upstream(s, settled))
				error = local_error(s, "internal_error", "out of memory", true);
		} else if (d.action == LEDGER_FAILOVER_RETRY_PREFILL) {
			error = local_error(s, "no_replica_available", "no replica answers", true);
		} else {
			error = ending_error(s, &d);
		}
		ledger_client_decision_clear(&d);
		ledger_client_error_clear(&err);
	}
	ledger_client_error_clear(&err);
	if (error == NULL)
		s->delivered = 1;
	return error;
}

/* True if @p event carries output text (a token), as OpenAI chunks do. */
static bool carries_token(const char *event)
{
	json_t *chunk = json_loads(event + 6, JSON_DISABLE_EOF_CHECK, NULL);
	json_t *content = json_object_get(
		json_object_get(json_array_get(json_object_get(chunk, "choices"), 0), "delta"),
		"content");
	bool token = json_is_string(content) && json_string_length(content) > 0;

	json_decref(chunk);
	return token;
}

static void queue_out(struct stream *s, char *text)
{
	free(s->out);
	s->out = text;
	s->out_len = text != NULL ? strlen(text) : 0;
	s->out_off = 0;
}

/* The event that ends a stream after its first delta. */
static void queue_final_error(struct stream *s, const char *client_error)
{
	char *event = NULL;

	if (asprintf(&event, "data: %s\n\n", client_error) < 0)
		event = NULL;
	queue_out(s, event);
	s->finished = true;
}

/* Reads the next event into s->out; after the first delta no rerun is possible. */
static void next_event(struct stream *s)
{
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};
	enum ledger_signal signal;
	char *event = NULL;

	for (;;) {
		enum upstream_read r =
			upstream_next(s->up, gw.soft_ms, gw.stall_ms, &event, &signal);

		if (r == UPSTREAM_EVENT) {
			if (carries_token(event))
				s->delivered++;
			queue_out(s, event);
			return;
		}
		if (r == UPSTREAM_DONE) {
			ledger_client_heartbeat_stop(s->attempt);
			if (ledger_client_attempt_finish(s->attempt, true, s->delivered, NULL,
							 &err) != LEDGER_CLIENT_OK)
				log_line("finish refused", s, "\"code\":\"%s\"", err.code);
			ledger_client_error_clear(&err);
			queue_out(s, strdup("data: [DONE]\n\n"));
			s->finished = true;
			return;
		}
		if (r == UPSTREAM_SILENT)
			signal = LEDGER_SIGNAL_OVERLOADED;
		if (ask_failover(s, signal, &d, &err) != LEDGER_CLIENT_OK) {
			char *ce = refusal_client_error(&err);

			if (ce == NULL)
				ce = local_error(s, "upstream_decode_interrupted", err.message,
						 false);
			queue_final_error(s, ce);
			free(ce);
		} else if (d.action == LEDGER_FAILOVER_KEEP_WAITING) {
			if (ledger_client_heartbeat_start(s->attempt, 0) != LEDGER_CLIENT_OK)
				log_line("heartbeat not restarted", s, NULL);
			ledger_client_decision_clear(&d);
			continue;
		} else if (d.sse_event != NULL) {
			queue_out(s,
				  strdup(d.sse_event)); /* terminate_stream: no [DONE] after it */
			s->finished = true;
		} else {
			char *ce = ending_error(s, &d);

			queue_final_error(s, ce);
			free(ce);
		}
		ledger_client_decision_clear(&d);
		ledger_client_error_clear(&err);
		upstream_close(s->up);
		s->up = NULL;
		return;
	}
}

/* --- HTTP, on the project's own wire (api/wire/) --- */

/*
 * A call as the wire hands it over: begun on the polling thread, served by
 * a thread of its own (api/wire/stream.h), freed by on_end() once that
 * thread returned.
 */
struct call {
	struct wire_conn *conn;
	struct stream s;
};

/* A whole reply from the serving thread: @p status, its type, @p body. */
static void send_whole(struct call *c, unsigned status, const char *headers, const char *body)
{
	size_t len = strlen(body);

	if (wire_stream_head(c->conn, status, headers, (int64_t)len) == LEDGER_OK &&
	    wire_stream_write(c->conn, body, len) == LEDGER_OK)
		wire_stream_end(c->conn, true);
	else
		wire_stream_end(c->conn, false);
}

/* A request error in OpenAI's shape, with API.md's @p code, as a JSON body. */
static char *invalid_body(const char *code, const char *message)
{
	json_t *e = json_pack("{s:{s:s,s:s,s:s,s:n}}", "error", "code", code, "message", message,
			      "type", "invalid_request_error", "param");
	char *text = e != NULL ? json_dumps(e, JSON_COMPACT) : NULL;

	json_decref(e);
	return text;
}

/* On the polling thread: answers a request error before any thread serves it. */
static void reply_invalid(struct wire_conn *conn, unsigned status, const char *code,
			  const char *message, const char *allow)
{
	char headers[128];
	char *text = invalid_body(code, message);

	snprintf(headers, sizeof(headers), "Content-Type: application/json\r\n%s%s%s",
		 allow != NULL ? "Allow: " : "", allow != NULL ? allow : "",
		 allow != NULL ? "\r\n" : "");
	if (text == NULL)
		text = strdup("{}");
	wire_conn_reply(conn, status, headers, text, text != NULL ? strlen(text) : 0);
}

/* Answers a failure before any byte: the client error as the HTTP error. */
static void reply_error(struct call *c, char *error)
{
	struct stream *s = &c->s;
	json_t *ce = json_loads(error, 0, NULL);
	json_t *retryable = json_object_get(json_object_get(ce, "error"), "retryable");
	char headers[160];

	snprintf(headers, sizeof(headers),
		 "Content-Type: application/json\r\nx-request-id: %s\r\n%s", s->rid,
		 json_is_true(retryable) ? "" : "x-should-retry: false\r\n");
	log_line("answered with an error", s, "\"client_error\":%s", error);
	json_decref(ce);
	send_whole(c, 503, headers, error);
	free(error);
	s->finished = true;
}

/* The client left mid-stream: the upstream is cancelled and nothing new starts. */
static void client_gone(struct stream *s)
{
	struct ledger_client_error err = {0};
	struct ledger_decision d = {0};

	log_line("client went away", s, NULL);
	if (ask_failover(s, LEDGER_SIGNAL_CLIENT_DISCONNECTED, &d, &err) != LEDGER_CLIENT_OK)
		log_line("failover refused", s, "\"code\":\"%s\"", err.code);
	ledger_client_decision_clear(&d);
	ledger_client_error_clear(&err);
}

/* Writes the stream's events as they come, from the first, until its last. */
static bool stream_out(struct call *c)
{
	struct stream *s = &c->s;
	char headers[128];

	snprintf(headers, sizeof(headers),
		 "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nx-request-id: %s\r\n",
		 s->rid);
	if (wire_stream_head(c->conn, 200, headers, -1) != LEDGER_OK)
		return false;
	for (;;) {
		if (s->out_len > 0 &&
		    wire_stream_write(c->conn, s->out, s->out_len) != LEDGER_OK) {
			if (!s->finished && s->attempt != NULL)
				client_gone(s);
			return false;
		}
		if (s->finished)
			return true;
		next_event(s);
		if (s->out == NULL)
			return false;
	}
}

static bool new_request_id(char rid[40])
{
	unsigned char raw[12];
	static const char hex[] = "0123456789abcdef";

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return false;
	memcpy(rid, "req-", 4);
	for (size_t i = 0; i < sizeof(raw); i++) {
		rid[4 + 2 * i] = hex[raw[i] >> 4];
		rid[5 + 2 * i] = hex[raw[i] & 0xf];
	}
	rid[4 + 2 * sizeof(raw)] = '\0';
	return true;
}

/* The serving thread: a streamed completion, from its first attempt to its last event. */
static void *serve_completion(void *arg)
{
	struct call *c = arg;
	struct stream *s = &c->s;
	char *event = NULL, *error = NULL;

	if (!new_request_id(s->rid)) {
		char *text = invalid_body("internal_error", "no randomness");

		send_whole(c, 500, "Content-Type: application/json\r\n", text != NULL ? text : "{}");
		free(text);
		goto out;
	}
	error = first_event(s, &event);
	if (error != NULL) {
		reply_error(c, error);
		goto out;
	}
	/* deliver succeeded: only now do the headers and the first event go out. */
	queue_out(s, event);
	s->started = true;
	wire_stream_end(c->conn, stream_out(c));
out:
	drop_attempt(s); /* closing the upstream is what tells the replica to stop */
	return NULL;
}

/* The path of @p target, without its query, equals @p path. */
static bool path_is(const char *target, const char *path)
{
	size_t n = strcspn(target, "?");

	return strlen(path) == n && strncmp(target, path, n) == 0;
}

/* A head passed the wire's checks: what the head alone decides, or the body asked for. */
static void *on_begin(void *ctx, struct wire_conn *conn, const struct wire_http_head *head,
		      unsigned listener)
{
	struct call *c = calloc(1, sizeof(*c));

	(void)ctx, (void)listener;
	if (c == NULL)
		return NULL;
	c->conn = conn;
	if (path_is(head->target, "/healthz") && strcmp(head->method, "GET") == 0) {
		char *ok = strdup("{\"status\":\"ok\"}");

		wire_conn_reply(conn, 200, "Content-Type: application/json\r\n", ok,
				ok != NULL ? strlen(ok) : 0);
	} else if (!path_is(head->target, "/v1/chat/completions")) {
		reply_invalid(conn, 404, "not_found", "no such path", NULL);
	} else if (strcmp(head->method, "POST") != 0) {
		reply_invalid(conn, 405, "method_not_allowed", "only POST is served", "POST");
	} else if (head->body == WIRE_HTTP_BODY_LENGTH && head->content_length > MAX_BODY) {
		reply_invalid(conn, 413, "body_too_large", "the body is over 1 MiB", NULL);
	} else {
		wire_conn_read_body(conn, MAX_BODY);
	}
	return c;
}

/* The body is in (NULL: over the limit): a streamed completion goes to a thread of its own. */
static void on_body(void *call, struct ledger_buf *body)
{
	struct call *c = call;
	json_t *doc = NULL;

	if (body == NULL) {
		reply_invalid(c->conn, 413, "body_too_large", "the body is over 1 MiB", NULL);
		return;
	}
	doc = json_loadb(body->data != NULL ? body->data : "", body->len, 0, NULL);
	if (!json_is_object(doc)) {
		reply_invalid(c->conn, 400, "invalid_json", "the body is not a JSON object", NULL);
	} else if (!json_is_true(json_object_get(doc, "stream"))) {
		reply_invalid(c->conn, 400, "invalid_field",
			      "only streamed completions are served: \"stream\": true", NULL);
	} else {
		c->s.body = body->data;
		c->s.body_len = body->len;
		memset(body, 0, sizeof(*body));
		if (wire_stream_start(c->conn, serve_completion, c) != LEDGER_OK)
			reply_invalid(c->conn, 503, "unavailable", "no thread for the request", NULL);
	}
	json_decref(doc);
}

static void on_resume(void *call)
{
	(void)call; /* nothing is held but handed-off streams, which end on their own */
}

/* The call is over: its thread, if it had one, returned. */
static void on_end(void *call, bool replied)
{
	struct call *c = call;

	(void)replied;
	drop_attempt(&c->s);
	free(c->s.body);
	free(c->s.out);
	free(c);
}

/* Waits for the calls in flight, at most @p ms. @return true once none is left */
static bool drain(struct wire_net *net, unsigned ms)
{
	for (unsigned waited = 0; wire_net_in_flight(net) > 0; waited += 10) {
		if (waited >= ms)
			return false;
		sleep_ms(10);
	}
	return true;
}

int main(int argc, char **argv)
{
	static const struct wire_net_ops ops = {
		.begin = on_begin, .body = on_body, .resume = on_resume, .end = on_end};
	struct ledger_client_options opts = {0};
	struct wire_net *net = NULL;
	struct wire_tls *tls = NULL;
	struct wire_net_listener listener;
	struct wire_net_config ncfg = WIRE_NET_DEFAULTS;
	char bound[300], err[400];
	sigset_t stop;
	int fd, sig = 0;

	config_parse(&gw, argc, argv);
	opts.url = gw.ledger_url;
	opts.token = gw.ledger_token;
	opts.ca_file = gw.ledger_ca_file;
	opts.retry_ms = 5000;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
	    ledger_client_open(&opts, &gw.ledger) != LEDGER_CLIENT_OK)
		config_usage_exit("the ledger URL must be http(s)://HOST:PORT");
	if (gw.tls_cert != NULL &&
	    wire_tls_open(gw.tls_cert, gw.tls_key, &tls, err, sizeof(err)) != LEDGER_OK)
		config_usage_exit(err);
	fd = wire_listen_open(gw.listen, bound, sizeof(bound), err, sizeof(err));
	if (fd == -2)
		config_usage_exit(err);
	if (fd < 0) {
		fprintf(stderr, "ledger-gateway: %s\n", err);
		return 1;
	}

	/* SIGTERM, SIGINT and SIGHUP are taken by main alone; every other thread blocks them. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);

	listener = (struct wire_net_listener){fd, tls, strncmp(gw.listen, "unix:", 5) != 0};
	ncfg.max_connections = wire_listen_room(ncfg.max_connections, 0);
	ncfg.discard_max = MAX_BODY + (size_t)8 * 1024 * 1024;
	if (wire_net_start(&ncfg, &ops, &listener, 1, &net) != LEDGER_OK) {
		fprintf(stderr, "ledger-gateway: cannot start serving on %s\n", bound);
		return 1;
	}
	fprintf(stderr, "{\"msg\":\"listening\",\"address\":\"%s\",\"tls\":%s,\"replicas\":%zu}\n",
		bound, tls != NULL ? "true" : "false", gw.n_replicas);
	while (sigwait(&stop, &sig) == 0 && sig == SIGHUP) {
		if (tls == NULL)
			log_line("SIGHUP: no TLS credentials to reload", NULL, NULL);
		else if (wire_tls_reload(tls, err, sizeof(err)) != LEDGER_OK)
			log_line("SIGHUP: TLS credentials not reloaded, the old ones stay", NULL,
				 NULL);
		else
			log_line("SIGHUP: TLS credentials reloaded", NULL, NULL);
	}
	/* Streams in flight end as the engine ends them, within the drain bound. */
	wire_net_drain(net);
	if (!drain(net, DRAIN_MS)) {
		log_line("drain timed out", NULL, "\"in_flight\":%ld", wire_net_in_flight(net));
		_exit(1);
	}
	wire_net_stop(net);
	wire_tls_close(tls);
	ledger_client_close(gw.ledger);
	return 0;
}
