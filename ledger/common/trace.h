/*
 * ledger/common/trace.h: W3C Trace Context and spans, exported over
 * OTLP/HTTP (protobuf or JSON) by one tracer per process. Tracing is off
 * unless the OTEL_* variables configure an endpoint; then a span costs its
 * caller an allocation and a push on a bounded queue, never I/O: a thread
 * of the tracer's own batches the ended spans and sends them with libcurl.
 * A span the full queue cannot take is dropped and counted.
 *
 * Every span function is NULL-safe: with tracing off ledger_span_start()
 * returns NULL and the code that traces needs no branch of its own.
 */
#ifndef LEDGER_TRACE_H
#define LEDGER_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** The length of a traceparent value ("00-<32 hex>-<16 hex>-<2 hex>"). */
#define LEDGER_TRACEPARENT_LEN 55
/** The longest tracestate kept; a longer one is dropped (W3C: at least 512). */
#define LEDGER_TRACESTATE_MAX 512

/* A span's context, as received in traceparent and tracestate or as made here. */
struct ledger_trace_ctx {
	bool valid;          /* false: none (absent, or malformed: a new trace starts) */
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t flags;       /* W3C trace-flags; bit 0: sampled */
	char tracestate[LEDGER_TRACESTATE_MAX + 1]; /* as received, or "" */
};

/**
 * Reads a traceparent (and its tracestate) as W3C Trace Context level 1
 * says: version 00 exactly, a later version by its first four fields; an
 * all-zero trace or span id, upper-case hex, or any other flaw leaves
 * @p out not valid. Never fails otherwise.
 * @param traceparent, tracestate borrowed; either may be NULL
 */
void ledger_trace_ctx_parse(struct ledger_trace_ctx *out, const char *traceparent, size_t tp_len,
			    const char *tracestate, size_t ts_len);

/** Writes @p ctx's traceparent and a NUL into @p out. @p ctx must be valid. */
void ledger_trace_ctx_format(const struct ledger_trace_ctx *ctx,
			     char out[LEDGER_TRACEPARENT_LEN + 1]);

/** Lowercase hex of @p n bytes and a NUL into @p out (2n + 1 bytes). */
void ledger_trace_hex(const uint8_t *bytes, size_t n, char *out);

/** The wall clock in nanoseconds since the epoch, as spans record time. */
uint64_t ledger_trace_now_ns(void);

/* ---------------------------------------------------------------------- */
/* The tracer                                                             */
/* ---------------------------------------------------------------------- */

/**
 * Starts the process's tracer from the OTEL_* variables (see
 * docs/tracing.md): OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER,
 * OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _PROTOCOL, _HEADERS, _TIMEOUT,
 * OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER[_ARG],
 * OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
 * OTEL_BSP_SCHEDULE_DELAY. With no endpoint tracing stays off. A value
 * that cannot be used is logged (warn) and its default taken, as the
 * OpenTelemetry specification asks. Counted: each call takes a reference
 * that ledger_trace_shutdown() gives back; the first one's names are used.
 * Thread-safe.
 * @param service_name the default service.name ("ledgerd"); borrowed
 * @param service_version service.version; borrowed
 */
void ledger_trace_init(const char *service_name, const char *service_version);

/** Gives back a reference; the last one sends what is queued (for at most
 *  the export timeout) and stops the thread. */
void ledger_trace_shutdown(void);

/** Whether spans are recorded and exported. */
bool ledger_trace_enabled(void);

/* What the tracer counted since it started, for /metrics. */
struct ledger_trace_stats {
	uint64_t spans_exported; /* accepted by the collector */
	uint64_t spans_dropped;  /* the queue was full when they ended */
	uint64_t spans_failed;   /* their export failed (unreachable, refused) */
	uint64_t exports_failed; /* export requests that failed */
};

void ledger_trace_stats(struct ledger_trace_stats *out);

/* ---------------------------------------------------------------------- */
/* Spans                                                                  */
/* ---------------------------------------------------------------------- */

enum ledger_span_kind {
	LEDGER_SPAN_INTERNAL = 1, /* OTLP's SpanKind values */
	LEDGER_SPAN_SERVER = 2,
	LEDGER_SPAN_CLIENT = 3,
};

enum ledger_span_status {
	LEDGER_SPAN_STATUS_UNSET = 0, /* OTLP's StatusCode values */
	LEDGER_SPAN_STATUS_OK = 1,
	LEDGER_SPAN_STATUS_ERROR = 2,
};

enum ledger_attr_type {
	LEDGER_ATTR_STR,
	LEDGER_ATTR_INT,
	LEDGER_ATTR_BOOL,
	LEDGER_ATTR_DOUBLE,
};

/* One attribute of an event; the key and a string value are borrowed. */
struct ledger_trace_attr {
	const char *key;
	enum ledger_attr_type type;
	union {
		const char *s;
		int64_t i;
		bool b;
		double d;
	} v;
};

struct ledger_span; /* opaque: owned by its starter until ledger_span_end() */

/**
 * Starts a span, a child of @p parent (NULL or not valid: a new trace).
 * Sampled by OTEL_TRACES_SAMPLER (parentbased_always_on by default); a span
 * not sampled still has ids, so its context is passed on, and is never
 * exported.
 * @param name copied
 * @param start_ns its start time; 0: now
 * @return a new span, ended (and freed) by ledger_span_end(); NULL when
 *         tracing is off or memory ran out
 */
struct ledger_span *ledger_span_start(const char *name, enum ledger_span_kind kind,
				      const struct ledger_trace_ctx *parent, uint64_t start_ns);

/** Whether @p s is exported when it ends (false for NULL). */
bool ledger_span_recording(const struct ledger_span *s);

/**
 * The context to send downstream of @p s: its own, with @p parent's
 * tracestate; when @p s is NULL (tracing off), @p parent itself, so a
 * process that does not trace still passes a trace on.
 * @param parent may be NULL
 */
void ledger_span_context(const struct ledger_span *s, const struct ledger_trace_ctx *parent,
			 struct ledger_trace_ctx *out);

/* Attributes; the key and a string value are copied. A key set again is replaced. */
void ledger_span_set_str(struct ledger_span *s, const char *key, const char *value);
void ledger_span_set_strn(struct ledger_span *s, const char *key, const char *value, size_t len);
void ledger_span_set_int(struct ledger_span *s, const char *key, int64_t value);
void ledger_span_set_bool(struct ledger_span *s, const char *key, bool value);
void ledger_span_set_double(struct ledger_span *s, const char *key, double value);

/** Renames the span (an HTTP server span, once its route is known); copied. */
void ledger_span_set_name(struct ledger_span *s, const char *name);

/** Adds an event at @p time_ns (0: now) with @p n attributes, all copied. */
void ledger_span_add_event(struct ledger_span *s, const char *name, uint64_t time_ns,
			   const struct ledger_trace_attr *attrs, size_t n);

/** Sets the status; @p message (copied, may be NULL) goes with ERROR only. */
void ledger_span_set_status(struct ledger_span *s, enum ledger_span_status status,
			    const char *message);

/** Frees @p s without exporting it (a span begun for something that never
 *  happened). NULL-safe. */
void ledger_span_discard(struct ledger_span *s);

/**
 * Ends @p s at @p end_ns (0: now) and hands it to the tracer's queue, or
 * drops it (counted) when the queue is full; never blocks on I/O. @p s is
 * freed: the caller no longer owns it. NULL-safe.
 */
void ledger_span_end(struct ledger_span *s, uint64_t end_ns);

#endif
