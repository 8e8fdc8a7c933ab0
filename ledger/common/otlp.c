/*
 * ledger/common/otlp.c: a batch of spans as one OTLP ExportTraceServiceRequest,
 * in protobuf (the wire format written by hand: the request is small and
 * fixed, and a generated library would be a dependency for four messages)
 * and in OTLP/JSON. Field numbers are opentelemetry-proto 1.x's
 * (collector/trace/v1, trace/v1, common/v1, resource/v1); proto3 defaults
 * are left out, except inside AnyValue's oneof, where presence is the value.
 */
#include "ledger/common/otlp.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/jsonw.h"
#include "ledger/common/log.h"

/* ---------------------------------------------------------------------- */
/* Strings                                                                */
/* ---------------------------------------------------------------------- */

/* The length of the valid UTF-8 sequence at @p s (at most @p n bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len, i;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* overlong forms, surrogates, past U+10FFFF */
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

void ledger_otlp_hex(const uint8_t *bytes, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

size_t ledger_otlp_utf8_cap(size_t len, size_t max)
{
	/* Each input byte gives at most 3 output bytes (one U+FFFD). */
	size_t cap = (len < max ? len : max) * 3 + 1;

	return cap > max + 1 ? max + 1 : cap;
}

char *ledger_otlp_utf8_dup(const char *s, size_t len, size_t max, size_t *out_len)
{
	char *out = malloc(ledger_otlp_utf8_cap(len, max));
	size_t n;

	if (!out)
		return NULL;
	n = ledger_otlp_utf8_copy(out, s, len, max);
	if (out_len)
		*out_len = n;
	return out;
}

size_t ledger_otlp_utf8_copy(char *out, const char *s, size_t len, size_t max)
{
	static const char replacement[] = "\xef\xbf\xbd";
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, o = 0;

	while (i < len) {
		size_t seq = utf8_seq(u + i, len - i);
		const char *from = seq ? s + i : replacement;
		size_t n = seq ? seq : 3;

		if (o + n > max)
			break;
		memcpy(out + o, from, n);
		o += n;
		i += seq ? seq : 1;
	}
	out[o] = '\0';
	return o;
}

void ledger_otlp_attr_clear(struct ledger_otlp_attr *a)
{
	if (!a)
		return;
	free(a->key);
	a->key = NULL;
	if (a->type == LEDGER_ATTR_STR) {
		free(a->v.s.p);
		a->v.s.p = NULL;
	}
}

void ledger_otlp_span_free(struct ledger_span *s)
{
	if (!s)
		return;
	/* The last block is the span's own, freed with it. */
	while (s->text && s->text->next) {
		struct ledger_otlp_text *t = s->text;

		s->text = t->next;
		free(t);
	}
	free(s);
}

/* ---------------------------------------------------------------------- */
/* Protobuf                                                               */
/* ---------------------------------------------------------------------- */

enum {
	WIRE_VARINT = 0,
	WIRE_I64 = 1,
	WIRE_LEN = 2,
	WIRE_I32 = 5
};

static void put_varint(struct ledger_buf *b, uint64_t v)
{
	unsigned char tmp[10];
	size_t n = 0;

	do {
		tmp[n] = (unsigned char)(v & 0x7f);
		v >>= 7;
		if (v)
			tmp[n] |= 0x80;
		n++;
	} while (v);
	ledger_buf_append(b, tmp, n);
}

static void put_tag(struct ledger_buf *b, unsigned field, unsigned wire)
{
	put_varint(b, (uint64_t)field << 3 | wire);
}

static void put_len(struct ledger_buf *b, unsigned field, const void *p, size_t n)
{
	put_tag(b, field, WIRE_LEN);
	put_varint(b, n);
	if (n)
		ledger_buf_append(b, p, n);
}

static void put_string(struct ledger_buf *b, unsigned field, const char *s)
{
	if (s && *s)
		put_len(b, field, s, strlen(s));
}

static void put_fixed64(struct ledger_buf *b, unsigned field, uint64_t v)
{
	unsigned char tmp[8];
	int i;

	for (i = 0; i < 8; i++)
		tmp[i] = (unsigned char)(v >> (8 * i));
	put_tag(b, field, WIRE_I64);
	ledger_buf_append(b, tmp, 8);
}

static void put_fixed32(struct ledger_buf *b, unsigned field, uint32_t v)
{
	unsigned char tmp[4];
	int i;

	for (i = 0; i < 4; i++)
		tmp[i] = (unsigned char)(v >> (8 * i));
	put_tag(b, field, WIRE_I32);
	ledger_buf_append(b, tmp, 4);
}

static void put_uint(struct ledger_buf *b, unsigned field, uint64_t v)
{
	if (v) {
		put_tag(b, field, WIRE_VARINT);
		put_varint(b, v);
	}
}

/*
 * A nested message is written in place: its length first, which the
 * *_size() functions compute from what the writers below will write, field
 * for field, so a batch is encoded in one pass over one buffer with no
 * message built apart and copied.
 */
static size_t varint_size(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* A length-delimited field of @p n bytes (fields here are below 16: one tag byte). */
static size_t len_size(size_t n)
{
	return 1 + varint_size(n) + n;
}

static size_t string_size(const char *s)
{
	return s && *s ? len_size(strlen(s)) : 0;
}

static size_t uint_size(uint64_t v)
{
	return v ? 1 + varint_size(v) : 0;
}

static void put_msg_head(struct ledger_buf *b, unsigned field, size_t n)
{
	put_tag(b, field, WIRE_LEN);
	put_varint(b, n);
}

/* AnyValue { string_value = 1; bool_value = 2; int_value = 3; double_value = 4 } */
static size_t any_size(const struct ledger_otlp_attr *a)
{
	switch (a->type) {
	case LEDGER_ATTR_STR:
		return len_size(a->v.s.len);
	case LEDGER_ATTR_BOOL:
		return 2;
	case LEDGER_ATTR_INT:
		return 1 + varint_size((uint64_t)a->v.i);
	case LEDGER_ATTR_DOUBLE:
		return 9;
	}
	return 0;
}

/* KeyValue { key = 1; AnyValue value = 2 } */
static size_t kv_size(const struct ledger_otlp_attr *a)
{
	return string_size(a->key) + len_size(any_size(a));
}

static void proto_attr(struct ledger_buf *b, unsigned field, const struct ledger_otlp_attr *a)
{
	uint64_t bits;

	put_msg_head(b, field, kv_size(a));
	put_string(b, 1, a->key);
	put_msg_head(b, 2, any_size(a));
	switch (a->type) {
	case LEDGER_ATTR_STR:
		put_len(b, 1, a->v.s.p, a->v.s.len);
		break;
	case LEDGER_ATTR_BOOL:
		put_tag(b, 2, WIRE_VARINT);
		put_varint(b, a->v.b ? 1 : 0);
		break;
	case LEDGER_ATTR_INT:
		put_tag(b, 3, WIRE_VARINT);
		put_varint(b, (uint64_t)a->v.i); /* int64: two's complement, 10 bytes if negative */
		break;
	case LEDGER_ATTR_DOUBLE:
		memcpy(&bits, &a->v.d, sizeof(bits));
		put_fixed64(b, 4, bits);
		break;
	}
}

static size_t attrs_size(const struct ledger_otlp_attr *attrs, size_t n)
{
	size_t i, total = 0;

	for (i = 0; i < n; i++)
		total += len_size(kv_size(&attrs[i]));
	return total;
}

/* Span.Event { time_unix_nano = 1 (fixed64); name = 2; attributes = 3;
 * dropped_attributes_count = 4 } */
static size_t event_size(const struct ledger_otlp_event *e)
{
	return 9 + string_size(e->name) + attrs_size(e->attrs, e->n_attrs) +
	       uint_size(e->dropped_attrs);
}

static void proto_event(struct ledger_buf *b, const struct ledger_otlp_event *e)
{
	size_t i;

	put_msg_head(b, 11, event_size(e));
	put_fixed64(b, 1, e->time_ns);
	put_string(b, 2, e->name);
	for (i = 0; i < e->n_attrs; i++)
		proto_attr(b, 3, &e->attrs[i]);
	put_uint(b, 4, e->dropped_attrs);
}

/* Status { message = 2; code = 3 } */
static size_t status_size(const struct ledger_span *s)
{
	return (s->status == LEDGER_SPAN_STATUS_ERROR ? string_size(s->status_message) : 0) +
	       uint_size((uint64_t)s->status);
}

/* Span { trace_id = 1; span_id = 2; trace_state = 3; parent_span_id = 4;
 * name = 5; kind = 6; start_time_unix_nano = 7; end_time_unix_nano = 8;
 * attributes = 9; dropped_attributes_count = 10; events = 11;
 * dropped_events_count = 12; status = 15; flags = 16 (fixed32) } */
static size_t span_size(const struct ledger_span *s)
{
	size_t i, n;

	n = len_size(sizeof(s->trace_id)) + len_size(sizeof(s->span_id)) +
	    string_size(s->tracestate) + (s->has_parent ? len_size(sizeof(s->parent_span_id)) : 0) +
	    string_size(s->name) + uint_size((uint64_t)s->kind) + 9 + 9 +
	    attrs_size(s->attrs, s->n_attrs) + uint_size(s->dropped_attrs);
	for (i = 0; i < s->n_events; i++)
		n += len_size(event_size(&s->events[i]));
	n += uint_size(s->dropped_events) + len_size(status_size(s));
	if (s->flags)
		n += 2 + 4; /* field 16: a two-byte tag */
	return n;
}

static void proto_span(struct ledger_buf *b, const struct ledger_span *s, size_t size)
{
	size_t i, at;

	put_msg_head(b, 2, size);
	at = b->len;
	put_len(b, 1, s->trace_id, sizeof(s->trace_id));
	put_len(b, 2, s->span_id, sizeof(s->span_id));
	put_string(b, 3, s->tracestate);
	if (s->has_parent)
		put_len(b, 4, s->parent_span_id, sizeof(s->parent_span_id));
	put_string(b, 5, s->name);
	put_uint(b, 6, (uint64_t)s->kind);
	put_fixed64(b, 7, s->start_ns);
	put_fixed64(b, 8, s->end_ns);
	for (i = 0; i < s->n_attrs; i++)
		proto_attr(b, 9, &s->attrs[i]);
	put_uint(b, 10, s->dropped_attrs);
	for (i = 0; i < s->n_events; i++)
		proto_event(b, &s->events[i]);
	put_uint(b, 12, s->dropped_events);
	put_msg_head(b, 15, status_size(s));
	if (s->status == LEDGER_SPAN_STATUS_ERROR)
		put_string(b, 2, s->status_message);
	put_uint(b, 3, (uint64_t)s->status);
	if (s->flags)
		put_fixed32(b, 16, s->flags);
	/* The length written ahead is the length written (unless memory ran out). */
	LEDGER_ASSERT(b->oom || b->len - at == size);
}

void ledger_otlp_encode_proto(const struct ledger_otlp_resource *res,
			      struct ledger_span *const *spans, size_t n, struct ledger_buf *out)
{
	size_t i, resource, scope, scope_spans, resource_spans, *sizes;

	sizes = malloc((n ? n : 1) * sizeof(*sizes));
	if (!sizes) {
		out->oom = true;
		return;
	}
	/* Resource { attributes = 1 }; InstrumentationScope { name = 1; version = 2 } */
	resource = attrs_size(res->attrs, res->n_attrs);
	scope = string_size(res->scope_name) + string_size(res->scope_version);
	/* ScopeSpans { scope = 1; spans = 2 } */
	scope_spans = len_size(scope);
	for (i = 0; i < n; i++) {
		sizes[i] = span_size(spans[i]);
		scope_spans += len_size(sizes[i]);
	}
	/* ResourceSpans { resource = 1; scope_spans = 2 } */
	resource_spans = len_size(resource) + len_size(scope_spans);
	/* ExportTraceServiceRequest { resource_spans = 1 } */
	put_msg_head(out, 1, resource_spans);
	put_msg_head(out, 1, resource);
	for (i = 0; i < res->n_attrs; i++)
		proto_attr(out, 1, &res->attrs[i]);
	put_msg_head(out, 2, scope_spans);
	put_msg_head(out, 1, scope);
	put_string(out, 1, res->scope_name);
	put_string(out, 2, res->scope_version);
	for (i = 0; i < n; i++)
		proto_span(out, spans[i], sizes[i]);
	free(sizes);
}

/* ---------------------------------------------------------------------- */
/* OTLP/JSON                                                              */
/* ---------------------------------------------------------------------- */

static void json_hex(struct ledger_jsonw *w, const char *key, const uint8_t *bytes, size_t n)
{
	char hex[33];

	ledger_otlp_hex(bytes, n, hex);
	ledger_jsonw_key(w, key);
	ledger_jsonw_string(w, hex);
}

/* A 64-bit integer as proto3's JSON mapping writes it: a decimal string. */
static void json_u64(struct ledger_jsonw *w, const char *key, uint64_t v)
{
	char tmp[24];

	snprintf(tmp, sizeof(tmp), "%" PRIu64, v);
	ledger_jsonw_key(w, key);
	ledger_jsonw_string(w, tmp);
}

static void json_attr(struct ledger_jsonw *w, const struct ledger_otlp_attr *a)
{
	char tmp[40];

	ledger_jsonw_object_begin(w);
	ledger_jsonw_key(w, "key");
	ledger_jsonw_string(w, a->key);
	ledger_jsonw_key(w, "value");
	ledger_jsonw_object_begin(w);
	switch (a->type) {
	case LEDGER_ATTR_STR:
		ledger_jsonw_key(w, "stringValue");
		ledger_jsonw_string_n(w, a->v.s.p, a->v.s.len);
		break;
	case LEDGER_ATTR_BOOL:
		ledger_jsonw_key(w, "boolValue");
		ledger_jsonw_bool(w, a->v.b);
		break;
	case LEDGER_ATTR_INT:
		snprintf(tmp, sizeof(tmp), "%" PRId64, a->v.i);
		ledger_jsonw_key(w, "intValue");
		ledger_jsonw_string(w, tmp);
		break;
	case LEDGER_ATTR_DOUBLE:
		ledger_jsonw_key(w, "doubleValue");
		/* proto3 JSON: the non-finite as strings; the rest as the shortest
		 * text that reads back as the same double. */
		if (isnan(a->v.d)) {
			ledger_jsonw_string(w, "NaN");
		} else if (isinf(a->v.d)) {
			ledger_jsonw_string(w, a->v.d > 0 ? "Infinity" : "-Infinity");
		} else {
			int prec;

			for (prec = 1; prec < 17; prec++) {
				snprintf(tmp, sizeof(tmp), "%.*g", prec, a->v.d);
				if (strtod(tmp, NULL) == a->v.d)
					break;
			}
			snprintf(tmp, sizeof(tmp), "%.*g", prec, a->v.d);
			ledger_jsonw_raw(w, tmp, strlen(tmp));
		}
		break;
	}
	ledger_jsonw_object_end(w);
	ledger_jsonw_object_end(w);
}

static void json_attrs(struct ledger_jsonw *w, const struct ledger_otlp_attr *attrs, size_t n)
{
	size_t i;

	ledger_jsonw_key(w, "attributes");
	ledger_jsonw_array_begin(w);
	for (i = 0; i < n; i++)
		json_attr(w, &attrs[i]);
	ledger_jsonw_array_end(w);
}

static void json_span(struct ledger_jsonw *w, const struct ledger_span *s)
{
	size_t i;

	ledger_jsonw_object_begin(w);
	json_hex(w, "traceId", s->trace_id, sizeof(s->trace_id));
	json_hex(w, "spanId", s->span_id, sizeof(s->span_id));
	if (s->tracestate && *s->tracestate) {
		ledger_jsonw_key(w, "traceState");
		ledger_jsonw_string(w, s->tracestate);
	}
	if (s->has_parent)
		json_hex(w, "parentSpanId", s->parent_span_id, sizeof(s->parent_span_id));
	if (s->flags) {
		ledger_jsonw_key(w, "flags");
		ledger_jsonw_int(w, s->flags);
	}
	ledger_jsonw_key(w, "name");
	ledger_jsonw_string(w, s->name ? s->name : "");
	ledger_jsonw_key(w, "kind");
	ledger_jsonw_int(w, s->kind);
	json_u64(w, "startTimeUnixNano", s->start_ns);
	json_u64(w, "endTimeUnixNano", s->end_ns);
	json_attrs(w, s->attrs, s->n_attrs);
	if (s->dropped_attrs) {
		ledger_jsonw_key(w, "droppedAttributesCount");
		ledger_jsonw_int(w, s->dropped_attrs);
	}
	ledger_jsonw_key(w, "events");
	ledger_jsonw_array_begin(w);
	for (i = 0; i < s->n_events; i++) {
		const struct ledger_otlp_event *e = &s->events[i];

		ledger_jsonw_object_begin(w);
		json_u64(w, "timeUnixNano", e->time_ns);
		ledger_jsonw_key(w, "name");
		ledger_jsonw_string(w, e->name ? e->name : "");
		json_attrs(w, e->attrs, e->n_attrs);
		if (e->dropped_attrs) {
			ledger_jsonw_key(w, "droppedAttributesCount");
			ledger_jsonw_int(w, e->dropped_attrs);
		}
		ledger_jsonw_object_end(w);
	}
	ledger_jsonw_array_end(w);
	if (s->dropped_events) {
		ledger_jsonw_key(w, "droppedEventsCount");
		ledger_jsonw_int(w, s->dropped_events);
	}
	ledger_jsonw_key(w, "status");
	ledger_jsonw_object_begin(w);
	if (s->status == LEDGER_SPAN_STATUS_ERROR && s->status_message && *s->status_message) {
		ledger_jsonw_key(w, "message");
		ledger_jsonw_string(w, s->status_message);
	}
	ledger_jsonw_key(w, "code");
	ledger_jsonw_int(w, s->status);
	ledger_jsonw_object_end(w);
	ledger_jsonw_object_end(w);
}

void ledger_otlp_encode_json(const struct ledger_otlp_resource *res,
			     struct ledger_span *const *spans, size_t n, struct ledger_buf *out)
{
	struct ledger_jsonw w;
	size_t i;

	ledger_jsonw_init(&w, out);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "resourceSpans");
	ledger_jsonw_array_begin(&w);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "resource");
	ledger_jsonw_object_begin(&w);
	json_attrs(&w, res->attrs, res->n_attrs);
	ledger_jsonw_object_end(&w);
	ledger_jsonw_key(&w, "scopeSpans");
	ledger_jsonw_array_begin(&w);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "scope");
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "name");
	ledger_jsonw_string(&w, res->scope_name ? res->scope_name : "");
	if (res->scope_version) {
		ledger_jsonw_key(&w, "version");
		ledger_jsonw_string(&w, res->scope_version);
	}
	ledger_jsonw_object_end(&w);
	ledger_jsonw_key(&w, "spans");
	ledger_jsonw_array_begin(&w);
	for (i = 0; i < n; i++)
		json_span(&w, spans[i]);
	ledger_jsonw_array_end(&w);
	ledger_jsonw_object_end(&w);
	ledger_jsonw_array_end(&w);
	ledger_jsonw_object_end(&w);
	ledger_jsonw_array_end(&w);
	ledger_jsonw_object_end(&w);
}
