/*
 * ledger/common/otlp.h: a span's data as OTLP carries it, and the pure
 * encoding of a batch of spans into one ExportTraceServiceRequest, as
 * protobuf (opentelemetry-proto 1.x, written by hand: varints,
 * length-delimited fields, fixed64 times) or as OTLP/JSON. No I/O and no
 * state: trace.c queues the spans and sends what this writes.
 */
#ifndef LEDGER_OTLP_H
#define LEDGER_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/buf.h"
#include "ledger/common/trace.h"

/* The bounds a span keeps to; what is past them is dropped and counted. */
#define LEDGER_OTLP_MAX_ATTRS 128  /* attributes of a span, or of one event */
#define LEDGER_OTLP_MAX_EVENTS 128 /* events of a span */
#define LEDGER_OTLP_MAX_STR 4096   /* bytes of a string value, cut at a UTF-8 boundary */

/* One attribute, its key and string value valid UTF-8 both: owned by the
 * attribute in a resource, by its span's text in a span (see below). */
struct ledger_otlp_attr {
	char *key;
	enum ledger_attr_type type;
	union {
		struct {
			char *p;    /* NUL-terminated */
			size_t len; /* bytes, without the NUL */
		} s;
		int64_t i;
		bool b;
		double d;
	} v;
};

struct ledger_otlp_event {
	char *name;
	uint64_t time_ns;
	struct ledger_otlp_attr *attrs; /* n_attrs of them */
	size_t n_attrs, cap_attrs;
	uint32_t dropped_attrs; /* past LEDGER_OTLP_MAX_ATTRS */
};

/*
 * A span's text: its strings and arrays, carved from blocks that are freed
 * with the span, never one by one. The first block comes in the span's own
 * allocation, so a span of the usual size costs one malloc() and one free().
 */
struct ledger_otlp_text {
	struct ledger_otlp_text *next; /* the block before; NULL: the span's own */
	size_t used, cap;
	_Alignas(max_align_t) char data[];
};

/* The span itself: the opaque struct ledger_span of trace.h. Its strings
 * and arrays are in its text. */
struct ledger_span {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t parent_span_id[8]; /* all zero: a root span */
	bool has_parent;
	bool recording;   /* sampled: exported when it ends */
	uint8_t flags;    /* W3C trace-flags it passes on */
	char *tracestate; /* NULL: none */
	char *name;
	enum ledger_span_kind kind;
	uint64_t start_ns, end_ns;
	struct ledger_otlp_attr *attrs;
	size_t n_attrs, cap_attrs;
	uint32_t dropped_attrs;
	struct ledger_otlp_event *events;
	size_t n_events, cap_events;
	uint32_t dropped_events;
	enum ledger_span_status status;
	char *status_message;         /* NULL: none */
	struct ledger_span *next;     /* the tracer's queue */
	struct ledger_otlp_text *text; /* the newest block of its text */
};

/* What every span of a request shares: the resource and the scope. */
struct ledger_otlp_resource {
	const struct ledger_otlp_attr *attrs; /* borrowed */
	size_t n_attrs;
	const char *scope_name;    /* borrowed */
	const char *scope_version; /* borrowed; may be NULL */
};

/**
 * Appends the ExportTraceServiceRequest of @p n spans to @p out as protobuf.
 * @param spans borrowed; @p out records an allocation failure in its oom
 */
void ledger_otlp_encode_proto(const struct ledger_otlp_resource *res,
			      struct ledger_span *const *spans, size_t n, struct ledger_buf *out);

/** The same request as OTLP/JSON (ids in lowercase hex, times as decimal strings). */
void ledger_otlp_encode_json(const struct ledger_otlp_resource *res,
			     struct ledger_span *const *spans, size_t n, struct ledger_buf *out);

/**
 * Copies @p len bytes of @p s as valid UTF-8, at most @p max bytes cut at
 * a character's boundary; an invalid sequence becomes U+FFFD.
 * @return a new NUL-terminated string (caller frees with free()), or NULL
 *         when memory ran out; @p out_len receives its length
 */
char *ledger_otlp_utf8_dup(const char *s, size_t len, size_t max, size_t *out_len);

/** Lowercase hex of @p n bytes and a NUL into @p out (2n + 1 bytes): the ids as
 *  OTLP/JSON and W3C Trace Context write them (ledger_trace_hex() is this). */
void ledger_otlp_hex(const uint8_t *bytes, size_t n, char *out);

/** The bytes ledger_otlp_utf8_dup() needs for @p len bytes cut at @p max, with the NUL. */
size_t ledger_otlp_utf8_cap(size_t len, size_t max);

/**
 * As ledger_otlp_utf8_dup(), into @p out of ledger_otlp_utf8_cap(len, max)
 * bytes. @return the length written, without the NUL
 */
size_t ledger_otlp_utf8_copy(char *out, const char *s, size_t len, size_t max);

/** Frees an attribute's key and string value (not @p a itself). NULL-safe. */
void ledger_otlp_attr_clear(struct ledger_otlp_attr *a);

/** Frees a span and its text. NULL-safe. */
void ledger_otlp_span_free(struct ledger_span *s);

#endif
