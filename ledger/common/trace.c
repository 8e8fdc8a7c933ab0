/*
 * ledger/common/trace.c: W3C Trace Context (level 1) read and written, and
 * the process's one tracer: a bounded queue of ended spans and a thread of
 * its own that batches them and POSTs each batch with libcurl, retrying
 * within the export timeout. A thread that ends a span takes the queue's
 * lock for a push and nothing else, so an endpoint that is down costs the
 * serving threads nothing but the spans that no longer fit.
 *
 *   ledger_span_end() --> ledger_trace_submit() --> queue (<= queue_size;
 *                                   | full: dropped)      |
 *                                                         v
 *   sender_main(): a batch once batch_size wait or schedule_delay passed
 *       --> export_batch(): encode, POST, retry 429/502/503/504 and
 *           unreachable with backoff, until the export timeout
 *       --> spans_exported or spans_failed
 */
#include "ledger/common/trace.h"

#include <curl/curl.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "ledger/common/buf.h"
#include "ledger/common/log.h"
#include "ledger/common/otlp.h"
#include "ledger/common/trace_config.h"

/* ---------------------------------------------------------------------- */
/* W3C Trace Context                                                      */
/* ---------------------------------------------------------------------- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1; /* upper case included: the specification allows lowercase only */
}

/* Reads 2n lowercase hex digits into n bytes. */
static bool read_hex(const char *s, size_t n, uint8_t *out)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

static bool all_zero(const uint8_t *b, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* A tracestate kept as received: at most LEDGER_TRACESTATE_MAX bytes of
 * printable ASCII whose non-empty members are key=value. Anything else is
 * not ours to repair, so it is dropped whole. */
static bool tracestate_plausible(const char *s, size_t len)
{
	size_t i, start = 0;

	if (len > LEDGER_TRACESTATE_MAX)
		return false;
	for (i = 0; i <= len; i++) {
		if (i < len && ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e))
			return false;
		if (i == len || s[i] == ',') {
			const char *m = s + start;
			size_t mlen = i - start;
			const char *eq;

			while (mlen && (*m == ' ' || *m == '\t')) {
				m++;
				mlen--;
			}
			while (mlen && (m[mlen - 1] == ' ' || m[mlen - 1] == '\t'))
				mlen--;
			eq = mlen ? memchr(m, '=', mlen) : NULL;
			if (mlen && (!eq || eq == m || eq == m + mlen - 1))
				return false;
			start = i + 1;
		}
	}
	return true;
}

void ledger_trace_ctx_parse(struct ledger_trace_ctx *out, const char *traceparent, size_t tp_len,
			    const char *tracestate, size_t ts_len)
{
	uint8_t version;
	const char *s = traceparent;

	memset(out, 0, sizeof(*out));
	if (!s || tp_len < LEDGER_TRACEPARENT_LEN)
		return;
	if (!read_hex(s, 1, &version) || version == 0xff)
		return;
	/* Version 00 is exactly 55 characters; a later one may carry more
	 * fields after its first four, behind a '-'. */
	if (version == 0 && tp_len != LEDGER_TRACEPARENT_LEN)
		return;
	if (tp_len > LEDGER_TRACEPARENT_LEN && s[LEDGER_TRACEPARENT_LEN] != '-')
		return;
	if (s[2] != '-' || s[35] != '-' || s[52] != '-')
		return;
	if (!read_hex(s + 3, 16, out->trace_id) || !read_hex(s + 36, 8, out->span_id) ||
	    !read_hex(s + 53, 1, &out->flags))
		goto invalid;
	if (all_zero(out->trace_id, 16) || all_zero(out->span_id, 8))
		goto invalid;
	out->valid = true;
	if (tracestate && ts_len && tracestate_plausible(tracestate, ts_len)) {
		memcpy(out->tracestate, tracestate, ts_len);
		out->tracestate[ts_len] = '\0';
	}
	return;
invalid:
	memset(out, 0, sizeof(*out));
}

void ledger_trace_hex(const uint8_t *bytes, size_t n, char *out)
{
	ledger_otlp_hex(bytes, n, out);
}

void ledger_trace_ctx_format(const struct ledger_trace_ctx *ctx,
			     char out[LEDGER_TRACEPARENT_LEN + 1])
{
	memcpy(out, "00-", 3);
	ledger_trace_hex(ctx->trace_id, 16, out + 3);
	out[35] = '-';
	ledger_trace_hex(ctx->span_id, 8, out + 36);
	out[52] = '-';
	ledger_trace_hex(&ctx->flags, 1, out + 53);
}

uint64_t ledger_trace_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Fills @p out from the kernel's generator, else OpenSSL's; aborts with neither. */
static void random_bytes(uint8_t *out, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = getrandom(out + got, n - got, 0);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	/* No getrandom(2) (an old kernel, a seccomp filter): OpenSSL's. */
	if (got < n && RAND_bytes(out, (int)n) != 1) {
		LOG_ERROR("trace: no source of random bytes");
		abort();
	}
}

/*
 * Ids come from xoshiro256** in each thread, seeded from the kernel once:
 * a system call for every id would cost more than the rest of a span.
 * W3C Trace Context asks ids to be random enough to be unique, not secret.
 */
static _Thread_local uint64_t rng[4];
static _Thread_local bool rng_seeded;

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(void)
{
	uint64_t out = rotl(rng[1] * 5, 7) * 9, t = rng[1] << 17;

	rng[2] ^= rng[0];
	rng[3] ^= rng[1];
	rng[1] ^= rng[2];
	rng[0] ^= rng[3];
	rng[2] ^= t;
	rng[3] = rotl(rng[3], 45);
	return out;
}

/* A child of fork() starts in a copy of the thread that forked: it must not
 * draw the parent's ids. */
static void rng_forget(void)
{
	rng_seeded = false;
}

static void rng_at_fork(void)
{
	pthread_atfork(NULL, NULL, rng_forget);
}

void ledger_trace_random_id(uint8_t *out, size_t n)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	if (!rng_seeded) {
		pthread_once(&once, rng_at_fork);
		do
			random_bytes((uint8_t *)rng, sizeof(rng));
		while (rng[0] == 0 && rng[1] == 0 && rng[2] == 0 && rng[3] == 0);
		rng_seeded = true;
	}
	do {
		for (size_t i = 0; i < n; i += 8) {
			uint64_t r = rng_next();

			memcpy(out + i, &r, n - i < 8 ? n - i : 8);
		}
	} while (all_zero(out, n));
}

/* ---------------------------------------------------------------------- */
/* The tracer                                                             */
/* ---------------------------------------------------------------------- */

/* Retries of one export beyond the first attempt, and the first backoff. */
#define MAX_RETRIES 5
#define FIRST_BACKOFF_MS 100

/* Held through the whole of an init or a shutdown (a shutdown's join
 * included), so an init never rereads the settings a sender still uses. */
static pthread_mutex_t life = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake; /* the sender: spans queued, or stop; on CLOCK_MONOTONIC */
static bool wake_ready;     /* wake initialised (once) */
static int refs;            /* ledger_trace_init()s not yet shut down */
static atomic_bool on;      /* spans are recorded */
/* The sampler, read by span starts without the lock; set before on. */
static _Atomic enum ledger_trace_sampler sampler;
static _Atomic double ratio;
static struct ledger_trace_config cfg; /* while refs > 0; the sender reads it */
static struct ledger_span *q_head, *q_tail;
static size_t q_len;
static bool stopping;             /* shutdown: drain, then end */
static uint64_t stop_deadline_ms; /* monotonic: past it, what is left fails */
static pthread_t sender;
static bool sender_running;
static atomic_uint_fast64_t n_exported, n_dropped, n_failed, n_exports_failed;

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits on wake until @p deadline_ms (monotonic) at most; mu held. */
static void wait_until(uint64_t deadline_ms)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(deadline_ms / 1000);
	ts.tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
	pthread_cond_timedwait(&wake, &mu, &ts);
}

static size_t discard(void *ptr, size_t size, size_t nmemb, void *arg)
{
	(void)ptr;
	(void)arg;
	return size * nmemb;
}

enum post_result {
	POST_OK,
	POST_RETRY,
	POST_FAIL
};

/* One POST of @p body; @p detail receives what went wrong. */
static enum post_result post(CURL *curl, struct curl_slist *headers, const char *body, size_t len,
			     long timeout_ms, char *detail, size_t detail_len)
{
	CURLcode rc;
	long status = 0;

	curl_easy_setopt(curl, CURLOPT_URL, cfg.endpoint);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_POST, 1L);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "ledgerd-otlp/" LEDGER_VERSION);
	if (cfg.ca_file)
		curl_easy_setopt(curl, CURLOPT_CAINFO, cfg.ca_file);
	if (cfg.client_cert)
		curl_easy_setopt(curl, CURLOPT_SSLCERT, cfg.client_cert);
	if (cfg.client_key)
		curl_easy_setopt(curl, CURLOPT_SSLKEY, cfg.client_key);
	rc = curl_easy_perform(curl);
	if (rc != CURLE_OK) {
		snprintf(detail, detail_len, "%s", curl_easy_strerror(rc));
		/* Unreachable now may be reachable in a moment; a timeout has
		 * spent the time a retry would need. */
		return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
				       rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR ||
				       rc == CURLE_GOT_NOTHING
			       ? POST_RETRY
			       : POST_FAIL;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 200 && status < 300)
		return POST_OK;
	snprintf(detail, detail_len, "HTTP status %ld", status);
	/* The OTLP/HTTP specification's retryable statuses. */
	return status == 429 || status == 502 || status == 503 || status == 504 ? POST_RETRY
										: POST_FAIL;
}

/* Sends @p n spans, retrying within the export timeout (and shutdown's
 * deadline). Runs on the sender without mu. */
static bool export_batch(CURL *curl, struct curl_slist *headers, struct ledger_span **spans,
			 size_t n)
{
	struct ledger_otlp_resource res = {cfg.resource, cfg.n_resource, "ledgerd", LEDGER_VERSION};
	struct ledger_buf body = LEDGER_BUF_INIT;
	uint64_t deadline = mono_ms() + (uint64_t)cfg.timeout_ms;
	bool ok = false;
	int attempt;
	static bool failing; /* the sender's alone: warned once, until it recovers */
	char detail[256] = "";

	if (cfg.protocol == LEDGER_TRACE_PROTO_JSON)
		ledger_otlp_encode_json(&res, spans, n, &body);
	else
		ledger_otlp_encode_proto(&res, spans, n, &body);
	if (body.oom)
		snprintf(detail, sizeof(detail), "out of memory");
	for (attempt = 0; !body.oom; attempt++) {
		uint64_t now = mono_ms(), backoff;
		enum post_result r;

		pthread_mutex_lock(&mu);
		if (stopping && stop_deadline_ms < deadline)
			deadline = stop_deadline_ms;
		pthread_mutex_unlock(&mu);
		if (now >= deadline) {
			snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail),
				 " (export timeout)");
			break;
		}
		r = post(curl, headers, body.data ? body.data : "", body.len,
			 (long)(deadline - now), detail, sizeof(detail));
		if (r == POST_OK) {
			ok = true;
			break;
		}
		if (r == POST_FAIL || attempt == MAX_RETRIES)
			break;
		/* Exponential backoff with jitter, ending before the deadline
		 * (shutdown's may be closer: it is read again before each try). */
		backoff = (uint64_t)FIRST_BACKOFF_MS << attempt;
		backoff = backoff / 2 +
			  (uint64_t)rand_r(&(unsigned){(unsigned)now}) % (backoff / 2 + 1);
		if (mono_ms() + backoff >= deadline)
			break;
		pthread_mutex_lock(&mu);
		backoff += mono_ms();
		while (mono_ms() < backoff)
			wait_until(backoff);
		pthread_mutex_unlock(&mu);
	}
	ledger_buf_free(&body);
	if (ok) {
		atomic_fetch_add(&n_exported, n);
		if (failing)
			LOG_INFO("trace export recovered: spans reach %s again", cfg.endpoint);
		failing = false;
	} else {
		atomic_fetch_add(&n_failed, n);
		atomic_fetch_add(&n_exports_failed, 1);
		if (!failing)
			LOG_WARN("trace export to %s failing: %s; spans are lost until it recovers",
				 cfg.endpoint, detail);
		failing = true;
	}
	return ok;
}

static void *sender_main(void *arg)
{
	CURL *curl = curl_easy_init();
	struct curl_slist *headers = NULL;
	struct ledger_span **batch = calloc(cfg.batch_size, sizeof(*batch));
	uint64_t next;
	size_t i, n;

	(void)arg;
	headers = curl_slist_append(headers, cfg.protocol == LEDGER_TRACE_PROTO_JSON
						     ? "Content-Type: application/json"
						     : "Content-Type: application/x-protobuf");
	for (i = 0; i < cfg.n_headers; i++)
		headers = curl_slist_append(headers, cfg.headers[i]);
	pthread_mutex_lock(&mu);
	next = mono_ms() + (uint64_t)cfg.delay_ms;
	for (;;) {
		if (q_len == 0) {
			if (stopping)
				break;
			/* Idle: asleep until a span is queued; the delay runs from there. */
			pthread_cond_wait(&wake, &mu);
			next = mono_ms() + (uint64_t)cfg.delay_ms;
			continue;
		}
		while (!stopping && q_len < cfg.batch_size && mono_ms() < next)
			wait_until(next);
		n = 0;
		while (q_head && n < cfg.batch_size) {
			batch[n] = q_head;
			q_head = q_head->next;
			batch[n++]->next = NULL;
		}
		if (!q_head)
			q_tail = NULL;
		q_len -= n;
		pthread_mutex_unlock(&mu);
		if (curl && batch && headers) {
			export_batch(curl, headers, batch, n);
		} else {
			atomic_fetch_add(&n_failed, n);
			atomic_fetch_add(&n_exports_failed, 1);
		}
		for (i = 0; i < n; i++)
			ledger_otlp_span_free(batch[i]);
		pthread_mutex_lock(&mu);
		if (q_len < cfg.batch_size)
			next = mono_ms() + (uint64_t)cfg.delay_ms;
	}
	pthread_mutex_unlock(&mu);
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);
	free(batch);
	return NULL;
}

static const char *sampler_name(enum ledger_trace_sampler s)
{
	switch (s) {
	case LEDGER_TRACE_SAMPLER_ALWAYS_ON:
		return "always_on";
	case LEDGER_TRACE_SAMPLER_ALWAYS_OFF:
		return "always_off";
	case LEDGER_TRACE_SAMPLER_RATIO:
		return "traceidratio";
	case LEDGER_TRACE_SAMPLER_PARENT_ON:
		return "parentbased_always_on";
	case LEDGER_TRACE_SAMPLER_PARENT_OFF:
		return "parentbased_always_off";
	case LEDGER_TRACE_SAMPLER_PARENT_RATIO:
		return "parentbased_traceidratio";
	}
	return "?";
}

void ledger_trace_init(const char *service_name, const char *service_version)
{
	pthread_condattr_t attr;
	sigset_t all, old;
	bool started;

	pthread_mutex_lock(&life);
	pthread_mutex_lock(&mu);
	if (refs++ > 0)
		goto out;
	if (!wake_ready) {
		pthread_condattr_init(&attr);
		pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
		pthread_cond_init(&wake, &attr);
		pthread_condattr_destroy(&attr);
		wake_ready = true;
	}
	atomic_store(&n_exported, 0);
	atomic_store(&n_dropped, 0);
	atomic_store(&n_failed, 0);
	atomic_store(&n_exports_failed, 0);
	ledger_trace_config_read(&cfg, service_name, service_version);
	if (!cfg.enabled)
		goto out;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		LOG_WARN("trace: libcurl could not start; tracing stays off");
		goto out;
	}
	stopping = false;
	/* The sender takes no signal: ledgerd and the programs take theirs
	 * with sigwait() on one thread, which holds only when every other
	 * thread blocks them, whenever it was started. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	started = pthread_create(&sender, NULL, sender_main, NULL) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!started) {
		LOG_WARN("trace: the exporting thread could not start; tracing stays off");
		curl_global_cleanup();
		goto out;
	}
	sender_running = true;
	atomic_store(&sampler, cfg.sampler);
	atomic_store(&ratio, cfg.ratio);
	atomic_store(&on, true);
	LOG_INFO("tracing: spans go to %s as %s (sampler %s, queue %zu, batch %zu, delay %ld ms)",
		 cfg.endpoint,
		 cfg.protocol == LEDGER_TRACE_PROTO_JSON ? "http/json" : "http/protobuf",
		 sampler_name(cfg.sampler), cfg.queue_size, cfg.batch_size, cfg.delay_ms);
out:
	pthread_mutex_unlock(&mu);
	pthread_mutex_unlock(&life);
}

void ledger_trace_shutdown(void)
{
	bool join;

	pthread_mutex_lock(&life);
	pthread_mutex_lock(&mu);
	if (refs == 0 || --refs > 0) {
		pthread_mutex_unlock(&mu);
		pthread_mutex_unlock(&life);
		return;
	}
	/* Spans that end from here on are not recorded; the queue drains for
	 * the export timeout at most. */
	atomic_store(&on, false);
	join = sender_running;
	stopping = true;
	stop_deadline_ms = mono_ms() + (uint64_t)cfg.timeout_ms;
	if (wake_ready)
		pthread_cond_broadcast(&wake);
	pthread_mutex_unlock(&mu);
	if (join) {
		pthread_join(sender, NULL);
		curl_global_cleanup();
	}
	pthread_mutex_lock(&mu);
	/* What the deadline left in the queue: failed, as spans lost are. */
	while (q_head) {
		struct ledger_span *s = q_head;

		q_head = s->next;
		ledger_otlp_span_free(s);
		atomic_fetch_add(&n_failed, 1);
	}
	q_tail = NULL;
	q_len = 0;
	sender_running = false;
	ledger_trace_config_free(&cfg);
	pthread_mutex_unlock(&mu);
	pthread_mutex_unlock(&life);
}

bool ledger_trace_enabled(void)
{
	return atomic_load(&on);
}

void ledger_trace_stats(struct ledger_trace_stats *out)
{
	out->spans_exported = atomic_load(&n_exported);
	out->spans_dropped = atomic_load(&n_dropped);
	out->spans_failed = atomic_load(&n_failed);
	out->exports_failed = atomic_load(&n_exports_failed);
}

bool ledger_trace_sample(const struct ledger_trace_ctx *parent, const uint8_t trace_id[16])
{
	if (!atomic_load(&on))
		return false;
	return ledger_trace_config_sample(atomic_load(&sampler), atomic_load(&ratio), parent,
					  trace_id);
}

void ledger_trace_submit(struct ledger_span *s)
{
	bool wake_sender = false;

	if (!s)
		return;
	if (!s->recording || !atomic_load(&on)) {
		ledger_otlp_span_free(s);
		return;
	}
	pthread_mutex_lock(&mu);
	if (!sender_running || stopping) {
		pthread_mutex_unlock(&mu);
		ledger_otlp_span_free(s);
		return;
	}
	if (q_len >= cfg.queue_size) {
		pthread_mutex_unlock(&mu);
		atomic_fetch_add(&n_dropped, 1);
		ledger_otlp_span_free(s);
		return;
	}
	s->next = NULL;
	if (q_tail)
		q_tail->next = s;
	else
		q_head = s;
	q_tail = s;
	/* The first span wakes an idle sender, a full batch a waiting one. */
	++q_len;
	wake_sender = q_len == 1 || q_len == cfg.batch_size;
	if (wake_sender)
		pthread_cond_signal(&wake);
	pthread_mutex_unlock(&mu);
}

size_t ledger_trace_queued(void)
{
	size_t n;

	pthread_mutex_lock(&mu);
	n = q_len;
	pthread_mutex_unlock(&mu);
	return n;
}
