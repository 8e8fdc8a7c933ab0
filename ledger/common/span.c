/*
 * ledger/common/span.c: the spans of trace.h. A span belongs to the thread
 * that started it until ledger_span_end() hands it to the tracer (trace.c),
 * so nothing here locks. A span that is not recording keeps its ids, for
 * the context it passes on, and nothing else. A recording span's strings
 * and arrays are carved from its text (otlp.h), so setting an attribute
 * costs a copy and, for the usual span, no allocation.
 */
#include <stdlib.h>
#include <string.h>

#include "ledger/common/otlp.h"
#include "ledger/common/trace.h"
#include "ledger/common/trace_config.h"

/* The text a span is allocated with: room for a server span's usual
 * attributes (about twenty) and their strings. */
#define SPAN_TEXT 2048
/* Where the span's own block of text starts in its allocation. */
#define TEXT_AT                                                                                    \
	((sizeof(struct ledger_span) + _Alignof(struct ledger_otlp_text) - 1) &                    \
	 ~(_Alignof(struct ledger_otlp_text) - 1))
/* The least a further block of text holds. */
#define MORE_TEXT 2048
/* The attributes of a span or event before its array first grows. */
#define FIRST_ATTRS 24

/* @p n bytes of @p s's text, aligned for any type; NULL when memory ran out. */
static void *text_alloc(struct ledger_span *s, size_t n)
{
	struct ledger_otlp_text *t = s->text;
	size_t at;

	n = (n + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1);
	if (t->cap - t->used < n) {
		size_t cap = n > MORE_TEXT ? n : MORE_TEXT;

		t = malloc(sizeof(*t) + cap);
		if (!t)
			return NULL;
		t->next = s->text;
		t->used = 0;
		t->cap = cap;
		s->text = t;
	}
	at = t->used;
	t->used += n;
	return t->data + at;
}

/* A copy of @p len bytes of @p str in @p s's text as valid UTF-8, bounded. */
static char *text_copy(struct ledger_span *s, const char *str, size_t len, size_t *out_len)
{
	char *out = text_alloc(s, ledger_otlp_utf8_cap(len, LEDGER_OTLP_MAX_STR));
	size_t n;

	if (!out)
		return NULL;
	n = ledger_otlp_utf8_copy(out, str, len, LEDGER_OTLP_MAX_STR);
	if (out_len)
		*out_len = n;
	return out;
}

struct ledger_span *ledger_span_start(const char *name, enum ledger_span_kind kind,
				      const struct ledger_trace_ctx *parent, uint64_t start_ns)
{
	struct ledger_span *s;
	bool has_parent = parent && parent->valid;

	if (!ledger_trace_enabled())
		return NULL;
	s = malloc(TEXT_AT + sizeof(*s->text) + SPAN_TEXT);
	if (!s)
		return NULL;
	memset(s, 0, sizeof(*s));
	s->text = (struct ledger_otlp_text *)((char *)s + TEXT_AT);
	s->text->next = NULL;
	s->text->used = 0;
	s->text->cap = SPAN_TEXT;
	if (has_parent) {
		memcpy(s->trace_id, parent->trace_id, sizeof(s->trace_id));
		memcpy(s->parent_span_id, parent->span_id, sizeof(s->parent_span_id));
		s->has_parent = true;
	} else {
		ledger_trace_random_id(s->trace_id, sizeof(s->trace_id));
	}
	ledger_trace_random_id(s->span_id, sizeof(s->span_id));
	s->recording = ledger_trace_sample(parent, s->trace_id);
	s->flags = s->recording ? 1 : 0;
	s->kind = kind;
	s->start_ns = start_ns ? start_ns : ledger_trace_now_ns();
	if (!s->recording)
		return s;
	if (has_parent && parent->tracestate[0])
		s->tracestate = text_copy(s, parent->tracestate, strlen(parent->tracestate), NULL);
	s->name = text_copy(s, name ? name : "", name ? strlen(name) : 0, NULL);
	if (!s->name || (has_parent && parent->tracestate[0] && !s->tracestate)) {
		ledger_otlp_span_free(s);
		return NULL;
	}
	return s;
}

bool ledger_span_recording(const struct ledger_span *s)
{
	return s && s->recording;
}

void ledger_span_context(const struct ledger_span *s, const struct ledger_trace_ctx *parent,
			 struct ledger_trace_ctx *out)
{
	if (!s) {
		if (parent && parent->valid)
			*out = *parent;
		else
			memset(out, 0, sizeof(*out));
		return;
	}
	memset(out, 0, sizeof(*out));
	out->valid = true;
	memcpy(out->trace_id, s->trace_id, sizeof(out->trace_id));
	memcpy(out->span_id, s->span_id, sizeof(out->span_id));
	out->flags = s->flags;
	if (parent && parent->valid)
		memcpy(out->tracestate, parent->tracestate, sizeof(out->tracestate));
}

/* The attribute of @p key: the one already set, a new one, or NULL when the
 * span holds its limit (then the attribute is counted dropped). */
static struct ledger_otlp_attr *attr_slot(struct ledger_span *s, struct ledger_otlp_attr **attrs,
					  size_t *n, size_t *cap, uint32_t *dropped,
					  const char *key)
{
	size_t i;
	char *k;

	for (i = 0; i < *n; i++) {
		if (strcmp((*attrs)[i].key, key) == 0)
			return &(*attrs)[i]; /* its old value stays in the text, unused */
	}
	if (*n == LEDGER_OTLP_MAX_ATTRS) {
		(*dropped)++;
		return NULL;
	}
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : FIRST_ATTRS;
		struct ledger_otlp_attr *grown = text_alloc(s, ncap * sizeof(**attrs));

		if (!grown)
			return NULL;
		if (*n)
			memcpy(grown, *attrs, *n * sizeof(**attrs));
		*attrs = grown;
		*cap = ncap;
	}
	k = text_copy(s, key, strlen(key), NULL);
	if (!k)
		return NULL;
	memset(&(*attrs)[*n], 0, sizeof(**attrs));
	(*attrs)[*n].key = k;
	return &(*attrs)[(*n)++];
}

static struct ledger_otlp_attr *span_attr(struct ledger_span *s, const char *key)
{
	if (!s || !s->recording || !key)
		return NULL;
	return attr_slot(s, &s->attrs, &s->n_attrs, &s->cap_attrs, &s->dropped_attrs, key);
}

/* Sets @p a to a copy of the string; out of memory, an empty one. */
static void set_string(struct ledger_span *s, struct ledger_otlp_attr *a, const char *value,
		       size_t len)
{
	a->type = LEDGER_ATTR_STR;
	a->v.s.p = text_copy(s, value ? value : "", value ? len : 0, &a->v.s.len);
	if (!a->v.s.p) {
		a->type = LEDGER_ATTR_BOOL;
		a->v.b = false;
	}
}

void ledger_span_set_strn(struct ledger_span *s, const char *key, const char *value, size_t len)
{
	struct ledger_otlp_attr *a = span_attr(s, key);

	if (a)
		set_string(s, a, value, len);
}

void ledger_span_set_str(struct ledger_span *s, const char *key, const char *value)
{
	ledger_span_set_strn(s, key, value, value ? strlen(value) : 0);
}

void ledger_span_set_int(struct ledger_span *s, const char *key, int64_t value)
{
	struct ledger_otlp_attr *a = span_attr(s, key);

	if (a) {
		a->type = LEDGER_ATTR_INT;
		a->v.i = value;
	}
}

void ledger_span_set_bool(struct ledger_span *s, const char *key, bool value)
{
	struct ledger_otlp_attr *a = span_attr(s, key);

	if (a) {
		a->type = LEDGER_ATTR_BOOL;
		a->v.b = value;
	}
}

void ledger_span_set_double(struct ledger_span *s, const char *key, double value)
{
	struct ledger_otlp_attr *a = span_attr(s, key);

	if (a) {
		a->type = LEDGER_ATTR_DOUBLE;
		a->v.d = value;
	}
}

void ledger_span_set_name(struct ledger_span *s, const char *name)
{
	char *copy;

	if (!s || !s->recording || !name)
		return;
	copy = text_copy(s, name, strlen(name), NULL);
	if (copy)
		s->name = copy;
}

void ledger_span_add_event(struct ledger_span *s, const char *name, uint64_t time_ns,
			   const struct ledger_trace_attr *attrs, size_t n)
{
	struct ledger_otlp_event *e;
	size_t i;

	if (!s || !s->recording)
		return;
	if (s->n_events == LEDGER_OTLP_MAX_EVENTS) {
		s->dropped_events++;
		return;
	}
	if (s->n_events == s->cap_events) {
		size_t ncap = s->cap_events ? s->cap_events * 2 : 4;
		struct ledger_otlp_event *grown = text_alloc(s, ncap * sizeof(*grown));

		if (!grown)
			return;
		if (s->n_events)
			memcpy(grown, s->events, s->n_events * sizeof(*grown));
		s->events = grown;
		s->cap_events = ncap;
	}
	e = &s->events[s->n_events];
	memset(e, 0, sizeof(*e));
	e->name = text_copy(s, name ? name : "", name ? strlen(name) : 0, NULL);
	if (!e->name)
		return;
	e->time_ns = time_ns ? time_ns : ledger_trace_now_ns();
	s->n_events++;
	for (i = 0; i < n; i++) {
		struct ledger_otlp_attr *a;

		if (!attrs[i].key)
			continue;
		a = attr_slot(s, &e->attrs, &e->n_attrs, &e->cap_attrs, &e->dropped_attrs,
			      attrs[i].key);
		if (!a)
			continue;
		switch (attrs[i].type) {
		case LEDGER_ATTR_STR:
			set_string(s, a, attrs[i].v.s, attrs[i].v.s ? strlen(attrs[i].v.s) : 0);
			break;
		case LEDGER_ATTR_INT:
			a->type = LEDGER_ATTR_INT;
			a->v.i = attrs[i].v.i;
			break;
		case LEDGER_ATTR_BOOL:
			a->type = LEDGER_ATTR_BOOL;
			a->v.b = attrs[i].v.b;
			break;
		case LEDGER_ATTR_DOUBLE:
			a->type = LEDGER_ATTR_DOUBLE;
			a->v.d = attrs[i].v.d;
			break;
		}
	}
}

void ledger_span_set_status(struct ledger_span *s, enum ledger_span_status status,
			    const char *message)
{
	if (!s || !s->recording)
		return;
	s->status = status;
	s->status_message = NULL;
	if (status == LEDGER_SPAN_STATUS_ERROR && message)
		s->status_message = text_copy(s, message, strlen(message), NULL);
}

void ledger_span_end(struct ledger_span *s, uint64_t end_ns)
{
	if (!s)
		return;
	s->end_ns = end_ns ? end_ns : ledger_trace_now_ns();
	if (s->end_ns < s->start_ns)
		s->end_ns = s->start_ns;
	ledger_trace_submit(s);
}

void ledger_span_discard(struct ledger_span *s)
{
	ledger_otlp_span_free(s);
}
