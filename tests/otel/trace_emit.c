/*
 * tests/otel/trace_emit.c: a program that makes the spans of a script with
 * ledger/common/trace.h and shuts the tracer down, so tests/otel can read
 * what ledgerd's exporter sends. The tracer is configured by the OTEL_*
 * variables, as in ledgerd. The script, on stdin, one command a line,
 * fields separated by tabs:
 *
 *   span   ID NAME KIND PARENT [TRACESTATE]
 *                                PARENT: "-", an ID, or a traceparent
 *   attr   ID KEY TYPE VALUE     TYPE: s, i, b (true/false), d
 *   event  ID NAME [KEY TYPE VALUE]...
 *   status ID CODE [MESSAGE]
 *   end    ID
 *   spam   N NAME               N root spans started and ended at once
 *
 * At the end it prints one JSON line: the tracer's counts, the longest any
 * span call took, how long shutdown took, and each span's traceparent.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/common/trace.h"

#define MAX_SPANS 256
#define MAX_FIELDS 64

struct named {
	char id[64];
	struct ledger_span *span;
	char traceparent[LEDGER_TRACEPARENT_LEN + 1];
};

static struct named spans[MAX_SPANS];
static size_t n_spans;
static uint64_t max_call_ns;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void timed(uint64_t start)
{
	uint64_t took = mono_ns() - start;

	if (took > max_call_ns)
		max_call_ns = took;
}

static struct named *find(const char *id)
{
	size_t i;

	for (i = 0; i < n_spans; i++)
		if (strcmp(spans[i].id, id) == 0)
			return &spans[i];
	return NULL;
}

static struct ledger_trace_attr attr_of(const char *key, const char *type, const char *value)
{
	struct ledger_trace_attr a;

	memset(&a, 0, sizeof(a));
	a.key = key;
	switch (type[0]) {
	case 'i':
		a.type = LEDGER_ATTR_INT;
		a.v.i = strtoll(value, NULL, 10);
		break;
	case 'b':
		a.type = LEDGER_ATTR_BOOL;
		a.v.b = strcmp(value, "true") == 0;
		break;
	case 'd':
		a.type = LEDGER_ATTR_DOUBLE;
		a.v.d = strtod(value, NULL);
		break;
	default:
		a.type = LEDGER_ATTR_STR;
		a.v.s = value;
		break;
	}
	return a;
}

static void start(char **f, size_t n)
{
	struct ledger_trace_ctx parent_ctx, ctx;
	const struct ledger_trace_ctx *parent = NULL;
	struct named *s, *p;
	uint64_t t;

	if (n < 5 || n_spans == MAX_SPANS) {
		fprintf(stderr, "trace_emit: bad span line\n");
		exit(2);
	}
	p = find(f[4]);
	if (p) {
		ledger_span_context(p->span, NULL, &parent_ctx);
		parent = &parent_ctx;
	} else if (strcmp(f[4], "-") != 0) {
		ledger_trace_ctx_parse(&parent_ctx, f[4], strlen(f[4]), n > 5 ? f[5] : NULL,
				       n > 5 ? strlen(f[5]) : 0);
		parent = &parent_ctx;
	}
	s = &spans[n_spans++];
	snprintf(s->id, sizeof(s->id), "%s", f[1]);
	t = mono_ns();
	s->span = ledger_span_start(f[2], (enum ledger_span_kind)atoi(f[3]), parent, 0);
	timed(t);
	ledger_span_context(s->span, parent, &ctx);
	if (ctx.valid)
		ledger_trace_ctx_format(&ctx, s->traceparent);
}

static void command(char **f, size_t n)
{
	struct named *s = n > 1 ? find(f[1]) : NULL;
	uint64_t t = mono_ns();

	if (strcmp(f[0], "span") == 0) {
		start(f, n);
		return;
	}
	if (strcmp(f[0], "spam") == 0 && n >= 3) {
		long i, count = atol(f[1]);

		for (i = 0; i < count; i++) {
			t = mono_ns();
			ledger_span_end(ledger_span_start(f[2], LEDGER_SPAN_INTERNAL, NULL, 0), 0);
			timed(t);
		}
		return;
	}
	if (!s) {
		fprintf(stderr, "trace_emit: no span %s\n", n > 1 ? f[1] : "(none)");
		exit(2);
	}
	if (strcmp(f[0], "attr") == 0 && n >= 5) {
		struct ledger_trace_attr a = attr_of(f[2], f[3], f[4]);

		switch (a.type) {
		case LEDGER_ATTR_STR:
			ledger_span_set_str(s->span, a.key, a.v.s);
			break;
		case LEDGER_ATTR_INT:
			ledger_span_set_int(s->span, a.key, a.v.i);
			break;
		case LEDGER_ATTR_BOOL:
			ledger_span_set_bool(s->span, a.key, a.v.b);
			break;
		case LEDGER_ATTR_DOUBLE:
			ledger_span_set_double(s->span, a.key, a.v.d);
			break;
		}
	} else if (strcmp(f[0], "event") == 0 && n >= 3) {
		struct ledger_trace_attr attrs[MAX_FIELDS / 3];
		size_t i, k = 0;

		for (i = 3; i + 2 < n; i += 3)
			attrs[k++] = attr_of(f[i], f[i + 1], f[i + 2]);
		ledger_span_add_event(s->span, f[2], 0, attrs, k);
	} else if (strcmp(f[0], "status") == 0 && n >= 3) {
		ledger_span_set_status(s->span, (enum ledger_span_status)atoi(f[2]),
				       n > 3 ? f[3] : NULL);
	} else if (strcmp(f[0], "end") == 0) {
		ledger_span_end(s->span, 0);
		s->span = NULL;
	} else {
		fprintf(stderr, "trace_emit: bad line %s\n", f[0]);
		exit(2);
	}
	timed(t);
}

int main(void)
{
	char line[8192];
	struct ledger_trace_stats st;
	uint64_t t;
	size_t i;

	ledger_trace_init("trace-emit", "1.2.3");
	while (fgets(line, sizeof(line), stdin)) {
		char *f[MAX_FIELDS];
		size_t n = 0;
		char *p = line, *tab;

		line[strcspn(line, "\n")] = '\0';
		if (!*line)
			continue;
		while (n < MAX_FIELDS) {
			f[n++] = p;
			tab = strchr(p, '\t');
			if (!tab)
				break;
			*tab = '\0';
			p = tab + 1;
		}
		command(f, n);
	}
	t = mono_ns();
	ledger_trace_shutdown();
	t = mono_ns() - t;
	ledger_trace_stats(&st);
	printf("{\"exported\":%" PRIu64 ",\"dropped\":%" PRIu64 ",\"failed\":%" PRIu64
	       ",\"exports_failed\":%" PRIu64 ",\"max_call_ns\":%" PRIu64
	       ",\"shutdown_ns\":%" PRIu64 ",\"contexts\":{",
	       st.spans_exported, st.spans_dropped, st.spans_failed, st.exports_failed, max_call_ns,
	       t);
	for (i = 0; i < n_spans; i++)
		printf("%s\"%s\":\"%s\"", i ? "," : "", spans[i].id, spans[i].traceparent);
	printf("}}\n");
	return 0;
}
