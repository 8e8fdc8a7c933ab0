/*
 * tests/unit/test_trace.c: ledger/common/trace.c, span.c, otlp.c and
 * trace_config.c: traceparent and tracestate read as W3C Trace Context
 * level 1 says, row by row, and written back; one fixed span's OTLP
 * protobuf byte for byte (the bytes the official decoder reads back as the
 * same span, see tests/otel/) and its OTLP/JSON; the samplers; every OTEL_*
 * variable, good and bad; a full queue dropping and counting; strings cut
 * at a UTF-8 boundary and repaired.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ledger/common/otlp.h"
#include "ledger/common/trace.h"
#include "ledger/common/trace_config.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define SID "00f067aa0ba902b7"

/* ---------------------------------------------------------------------- */
/* traceparent                                                            */
/* ---------------------------------------------------------------------- */

struct tp_row {
	const char *traceparent;
	bool valid;
	uint8_t flags;
	const char *why;
};

static const struct tp_row tp_rows[] = {
	{"00-" TID "-" SID "-01", true, 1, "the specification's example"},
	{"00-" TID "-" SID "-00", true, 0, "not sampled"},
	{"00-" TID "-" SID "-ff", true, 0xff, "flags unknown today are kept"},
	{"01-" TID "-" SID "-01", true, 1, "a later version, 55 characters"},
	{"cc-" TID "-" SID "-01-what-the-future-will-be-like", true, 1,
	 "a later version with more fields"},
	{"fe-" TID "-" SID "-09-", true, 9, "a later version, an empty field after"},
	{"ff-" TID "-" SID "-01", false, 0, "version ff is invalid"},
	{"00-" TID "-" SID "-01-", false, 0, "version 00 is exactly 55 characters"},
	{"00-" TID "-" SID "-01-extra", false, 0, "version 00 with more fields"},
	{"00-" TID "-" SID "-1", false, 0, "short flags"},
	{"cc-" TID "-" SID "-01x", false, 0, "a later version: the 56th character must be -"},
	{"00-4BF92F3577B34DA6A3CE929D0E0E4736-" SID "-01", false, 0, "upper-case trace id"},
	{"00-" TID "-00F067AA0BA902B7-01", false, 0, "upper-case span id"},
	{"00-" TID "-" SID "-0A", false, 0, "upper-case flags"},
	{"0A-" TID "-" SID "-01", false, 0, "upper-case version"},
	{"00-00000000000000000000000000000000-" SID "-01", false, 0, "all-zero trace id"},
	{"00-" TID "-0000000000000000-01", false, 0, "all-zero span id"},
	{"00_" TID "-" SID "-01", false, 0, "a separator other than -"},
	{"00-" TID "_" SID "-01", false, 0, "a separator other than -"},
	{"00-" TID "-" SID "_01", false, 0, "a separator other than -"},
	{"00-4bf92f3577b34da6a3ce929d0e0e473g-" SID "-01", false, 0, "not hex"},
	{"00-" TID "-" SID "-0g", false, 0, "flags not hex"},
	{" 00-" TID "-" SID "-0", false, 0, "leading space"},
	{"00-" TID "-" SID "-01 ", false, 0, "trailing space (version 00: too long)"},
	{"0-" TID "-" SID "-01", false, 0, "short version"},
	{"00-" TID "f-" SID "-01", false, 0, "trace id too long"},
	{"", false, 0, "empty"},
};

static void test_trace_parse_table(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < COUNT(tp_rows); i++) {
		const struct tp_row *r = &tp_rows[i];
		struct ledger_trace_ctx ctx;

		ledger_trace_ctx_parse(&ctx, r->traceparent, strlen(r->traceparent), "a=b", 3);
		if (ctx.valid != r->valid)
			fail_msg("row %zu (%s): %s: valid %d, want %d", i, r->why, r->traceparent,
				 ctx.valid, r->valid);
		if (!r->valid) {
			/* Nothing of an invalid header survives, tracestate included. */
			assert_int_equal(ctx.flags, 0);
			assert_string_equal(ctx.tracestate, "");
			continue;
		}
		assert_int_equal(ctx.flags, r->flags);
		assert_string_equal(ctx.tracestate, "a=b");
		assert_int_equal(ctx.trace_id[0], 0x4b);
		assert_int_equal(ctx.trace_id[15], 0x36);
		assert_int_equal(ctx.span_id[0], 0x00);
		assert_int_equal(ctx.span_id[7], 0xb7);
	}
}

static void test_trace_parse_null_and_lengths(void **state)
{
	struct ledger_trace_ctx ctx;
	const char *tp = "00-" TID "-" SID "-01";

	(void)state;
	ledger_trace_ctx_parse(&ctx, NULL, 0, NULL, 0);
	assert_false(ctx.valid);
	/* The length given is what counts, not a NUL: one byte short is invalid. */
	ledger_trace_ctx_parse(&ctx, tp, 54, NULL, 0);
	assert_false(ctx.valid);
	ledger_trace_ctx_parse(&ctx, tp, 55, NULL, 0);
	assert_true(ctx.valid);
	assert_string_equal(ctx.tracestate, "");
}

struct ts_row {
	const char *tracestate;
	bool kept;
};

static void test_trace_tracestate(void **state)
{
	static const struct ts_row rows[] = {
		{"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", true},
		{"rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE", true},
		{"vendor@tenant=x", true},
		{"a=b,,c=d", true},
		{"a=b\n,c=d", false},
		{"a=b\x01", false},
		{"a=b\x7f", false},
		{"novalue", false},
		{"=value", false},
		{"key=", false},
		{"caf\xc3\xa9=1", false},
	};
	const char *tp = "00-" TID "-" SID "-01";
	struct ledger_trace_ctx ctx;
	char big[LEDGER_TRACESTATE_MAX + 2];
	size_t i;

	(void)state;
	for (i = 0; i < COUNT(rows); i++) {
		ledger_trace_ctx_parse(&ctx, tp, strlen(tp), rows[i].tracestate,
				       strlen(rows[i].tracestate));
		assert_true(ctx.valid); /* a bad tracestate never costs the traceparent */
		if (strcmp(ctx.tracestate, rows[i].kept ? rows[i].tracestate : "") != 0)
			fail_msg("row %zu: %s: kept %s", i, rows[i].tracestate, ctx.tracestate);
	}
	/* 512 bytes are kept as they are; 513 are dropped whole. */
	memset(big, 'x', sizeof(big));
	memcpy(big, "k=", 2);
	big[LEDGER_TRACESTATE_MAX] = '\0';
	ledger_trace_ctx_parse(&ctx, tp, strlen(tp), big, LEDGER_TRACESTATE_MAX);
	assert_int_equal(strlen(ctx.tracestate), LEDGER_TRACESTATE_MAX);
	big[LEDGER_TRACESTATE_MAX] = 'x';
	big[LEDGER_TRACESTATE_MAX + 1] = '\0';
	ledger_trace_ctx_parse(&ctx, tp, strlen(tp), big, LEDGER_TRACESTATE_MAX + 1);
	assert_true(ctx.valid);
	assert_string_equal(ctx.tracestate, "");
}

static void test_trace_format_round_trip(void **state)
{
	struct ledger_trace_ctx ctx;
	char out[LEDGER_TRACEPARENT_LEN + 1];
	size_t i;

	(void)state;
	for (i = 0; i < COUNT(tp_rows); i++) {
		const char *tp = tp_rows[i].traceparent;

		ledger_trace_ctx_parse(&ctx, tp, strlen(tp), NULL, 0);
		if (!ctx.valid)
			continue;
		ledger_trace_ctx_format(&ctx, out);
		assert_int_equal(strlen(out), LEDGER_TRACEPARENT_LEN);
		/* Written as version 00, the first four fields as they came. */
		assert_memory_equal(out, "00", 2);
		assert_memory_equal(out + 2, tp + 2, LEDGER_TRACEPARENT_LEN - 2);
	}
}

static void test_trace_hex(void **state)
{
	const uint8_t bytes[] = {0x00, 0x0f, 0xa0, 0xff};
	char out[9];

	(void)state;
	ledger_trace_hex(bytes, sizeof(bytes), out);
	assert_string_equal(out, "000fa0ff");
}

/* ---------------------------------------------------------------------- */
/* OTLP encodings                                                         */
/* ---------------------------------------------------------------------- */

/* One span of every part: a tracestate, a parent, three attribute types, an
 * event with an attribute, an error status with its message, the flags. */
static struct ledger_otlp_attr fixed_attrs[3];
static struct ledger_otlp_attr fixed_event_attrs[1];
static struct ledger_otlp_event fixed_events[1];
static struct ledger_otlp_attr fixed_res[1];
static struct ledger_span fixed;

static void fixed_span(void)
{
	size_t i;

	memset(&fixed, 0, sizeof(fixed));
	for (i = 0; i < 16; i++)
		fixed.trace_id[i] = (uint8_t)(i + 1);
	for (i = 0; i < 8; i++) {
		fixed.span_id[i] = (uint8_t)(0x11 + i);
		fixed.parent_span_id[i] = (uint8_t)(0x21 + i);
	}
	fixed.has_parent = true;
	fixed.recording = true;
	fixed.flags = 1;
	fixed.tracestate = (char *)"k=v";
	fixed.name = (char *)"op";
	fixed.kind = LEDGER_SPAN_SERVER;
	fixed.start_ns = 1000;
	fixed.end_ns = 2000;
	fixed_attrs[0] = (struct ledger_otlp_attr){.key = (char *)"s", .type = LEDGER_ATTR_STR};
	fixed_attrs[0].v.s.p = (char *)"v";
	fixed_attrs[0].v.s.len = 1;
	fixed_attrs[1] = (struct ledger_otlp_attr){.key = (char *)"n", .type = LEDGER_ATTR_INT};
	fixed_attrs[1].v.i = -1;
	fixed_attrs[2] = (struct ledger_otlp_attr){.key = (char *)"d", .type = LEDGER_ATTR_DOUBLE};
	fixed_attrs[2].v.d = 0.5;
	fixed.attrs = fixed_attrs;
	fixed.n_attrs = 3;
	fixed_event_attrs[0] =
		(struct ledger_otlp_attr){.key = (char *)"b", .type = LEDGER_ATTR_BOOL};
	fixed_event_attrs[0].v.b = true;
	fixed_events[0] = (struct ledger_otlp_event){
		.name = (char *)"e", .time_ns = 1500, .attrs = fixed_event_attrs, .n_attrs = 1};
	fixed.events = fixed_events;
	fixed.n_events = 1;
	fixed.status = LEDGER_SPAN_STATUS_ERROR;
	fixed.status_message = (char *)"bad";
	fixed_res[0] =
		(struct ledger_otlp_attr){.key = (char *)"service.name", .type = LEDGER_ATTR_STR};
	fixed_res[0].v.s.p = (char *)"svc";
	fixed_res[0].v.s.len = 3;
}

static void test_trace_otlp_protobuf_bytes(void **state)
{
	/* ExportTraceServiceRequest, field by field (tag, length, value). */
	/* clang-format off */
	static const uint8_t want[] = {
		0x0a, 0xc4, 0x01,             /* resource_spans (1), 196 bytes */
		0x0a, 0x17,                   /*  resource (1) */
		0x0a, 0x15,                   /*   attributes (1): KeyValue */
		0x0a, 0x0c, 's', 'e', 'r', 'v', 'i', 'c', 'e', '.', 'n', 'a', 'm', 'e',
		0x12, 0x05, 0x0a, 0x03, 's', 'v', 'c', /* value: string_value (1) */
		0x12, 0xa8, 0x01,             /*  scope_spans (2) */
		0x0a, 0x0e,                   /*   scope (1): name (1), version (2) */
		0x0a, 0x07, 'l', 'e', 'd', 'g', 'e', 'r', 'd', 0x12, 0x03, '1', '.', '0',
		0x12, 0x95, 0x01,             /*   spans (2) */
		0x0a, 0x10, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* trace_id (1) */
		0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
		0x12, 0x08, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, /* span_id (2) */
		0x1a, 0x03, 'k', '=', 'v',    /* trace_state (3) */
		0x22, 0x08, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, /* parent_span_id (4) */
		0x2a, 0x02, 'o', 'p',         /* name (5) */
		0x30, 0x02,                   /* kind (6): SERVER */
		0x39, 0xe8, 0x03, 0, 0, 0, 0, 0, 0, /* start_time_unix_nano (7), fixed64 */
		0x41, 0xd0, 0x07, 0, 0, 0, 0, 0, 0, /* end_time_unix_nano (8), fixed64 */
		0x4a, 0x08, 0x0a, 0x01, 's', 0x12, 0x03, 0x0a, 0x01, 'v', /* attributes (9) */
		0x4a, 0x10, 0x0a, 0x01, 'n', 0x12, 0x0b, 0x18, /* int_value (3): -1, 10 bytes */
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
		0x4a, 0x0e, 0x0a, 0x01, 'd', 0x12, 0x09, 0x21, /* double_value (4): 0.5 */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe0, 0x3f,
		0x5a, 0x15,                   /* events (11) */
		0x09, 0xdc, 0x05, 0, 0, 0, 0, 0, 0, /*  time_unix_nano (1) */
		0x12, 0x01, 'e',              /*  name (2) */
		0x1a, 0x07, 0x0a, 0x01, 'b', 0x12, 0x02, 0x10, 0x01, /* attributes (3): bool */
		0x7a, 0x07, 0x12, 0x03, 'b', 'a', 'd', 0x18, 0x02, /* status (15): message, code */
		0x85, 0x01, 0x01, 0x00, 0x00, 0x00, /* flags (16), fixed32 */
	};
	/* clang-format on */
	struct ledger_otlp_resource res = {fixed_res, 1, "ledgerd", "1.0"};
	struct ledger_span *spans[1] = {&fixed};
	struct ledger_buf out = LEDGER_BUF_INIT;

	(void)state;
	fixed_span();
	ledger_otlp_encode_proto(&res, spans, 1, &out);
	assert_false(out.oom);
	assert_int_equal(out.len, sizeof(want));
	assert_memory_equal(out.data, want, sizeof(want));
	ledger_buf_free(&out);
}

static void test_trace_otlp_json(void **state)
{
	static const char want[] =
		"{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\","
		"\"value\":{\"stringValue\":\"svc\"}}]},\"scopeSpans\":[{\"scope\":{\"name\":"
		"\"ledgerd\",\"version\":\"1.0\"},\"spans\":[{\"traceId\":"
		"\"0102030405060708090a0b0c0d0e0f10\",\"spanId\":\"1112131415161718\","
		"\"traceState\":\"k=v\",\"parentSpanId\":\"2122232425262728\",\"flags\":1,"
		"\"name\":\"op\",\"kind\":2,\"startTimeUnixNano\":\"1000\",\"endTimeUnixNano\":"
		"\"2000\",\"attributes\":[{\"key\":\"s\",\"value\":{\"stringValue\":\"v\"}},"
		"{\"key\":\"n\",\"value\":{\"intValue\":\"-1\"}},{\"key\":\"d\",\"value\":"
		"{\"doubleValue\":0.5}}],\"events\":[{\"timeUnixNano\":\"1500\",\"name\":\"e\","
		"\"attributes\":[{\"key\":\"b\",\"value\":{\"boolValue\":true}}]}],\"status\":"
		"{\"message\":\"bad\",\"code\":2}}]}]}]}";
	struct ledger_otlp_resource res = {fixed_res, 1, "ledgerd", "1.0"};
	struct ledger_span *spans[1] = {&fixed};
	struct ledger_buf out = LEDGER_BUF_INIT;
	char *text;

	(void)state;
	fixed_span();
	ledger_otlp_encode_json(&res, spans, 1, &out);
	text = ledger_buf_steal(&out, NULL);
	assert_non_null(text);
	assert_string_equal(text, want);
	free(text);

	/* The doubles JSON has no number for, and a root span with no parent. */
	fixed_span();
	fixed.has_parent = false;
	fixed.tracestate = NULL;
	fixed.n_events = 0;
	fixed.status = LEDGER_SPAN_STATUS_UNSET;
	fixed_attrs[2].v.d = 1.0 / 0.0;
	fixed.n_attrs = 3;
	ledger_otlp_encode_json(&res, spans, 1, &out);
	text = ledger_buf_steal(&out, NULL);
	assert_non_null(strstr(text, "{\"doubleValue\":\"Infinity\"}"));
	assert_null(strstr(text, "parentSpanId"));
	assert_null(strstr(text, "traceState"));
	assert_non_null(strstr(text, "\"status\":{\"code\":0}"));
	free(text);
}

static void test_trace_utf8_dup(void **state)
{
	size_t len;
	char *s;
	char big[5000];

	(void)state;
	/* A character is never cut: é is two bytes, the limit falls inside it. */
	s = ledger_otlp_utf8_dup("ab\xc3\xa9", 4, 3, &len);
	assert_string_equal(s, "ab");
	assert_int_equal(len, 2);
	free(s);
	/* Invalid sequences become U+FFFD: a lone continuation, an overlong,
	 * a surrogate, a truncated lead. */
	s = ledger_otlp_utf8_dup("a\x80"
				 "b\xc0\xaf"
				 "c\xed\xa0\x80"
				 "d\xe2\x82",
				 12, 4096, &len);
	assert_string_equal(s, "a\xef\xbf\xbd"
			       "b\xef\xbf\xbd\xef\xbf\xbd"
			       "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
			       "d\xef\xbf\xbd\xef\xbf\xbd");
	free(s);
	/* 4096 bytes at most, at a boundary of a 3-byte character. */
	for (len = 0; len + 3 <= sizeof(big); len += 3)
		memcpy(big + len, "\xe2\x9c\x93", 3);
	s = ledger_otlp_utf8_dup(big, len, LEDGER_OTLP_MAX_STR, &len);
	assert_int_equal(len, 4095);
	free(s);
}

/* ---------------------------------------------------------------------- */
/* Samplers                                                               */
/* ---------------------------------------------------------------------- */

static void test_trace_sampler_table(void **state)
{
	static const struct {
		enum ledger_trace_sampler sampler;
		bool root, parent_sampled, parent_unsampled;
	} rows[] = {
		{LEDGER_TRACE_SAMPLER_ALWAYS_ON, true, true, true},
		{LEDGER_TRACE_SAMPLER_ALWAYS_OFF, false, false, false},
		{LEDGER_TRACE_SAMPLER_PARENT_ON, true, true, false},
		{LEDGER_TRACE_SAMPLER_PARENT_OFF, false, true, false},
	};
	struct ledger_trace_ctx sampled, unsampled;
	uint8_t id[16] = {1};
	size_t i;

	(void)state;
	ledger_trace_ctx_parse(&sampled, "00-" TID "-" SID "-01", 55, NULL, 0);
	ledger_trace_ctx_parse(&unsampled, "00-" TID "-" SID "-00", 55, NULL, 0);
	for (i = 0; i < COUNT(rows); i++) {
		assert_int_equal(ledger_trace_config_sample(rows[i].sampler, 1.0, NULL, id),
				 rows[i].root);
		assert_int_equal(ledger_trace_config_sample(rows[i].sampler, 1.0, &sampled, id),
				 rows[i].parent_sampled);
		assert_int_equal(ledger_trace_config_sample(rows[i].sampler, 1.0, &unsampled, id),
				 rows[i].parent_unsampled);
	}
}

static void test_trace_sampler_ratio(void **state)
{
	struct ledger_trace_ctx unsampled;
	uint8_t low[16] = {0xff, 0xff}, high[16], mid[16] = {0};
	int i, n = 0;

	(void)state;
	memset(high, 0xff, sizeof(high));
	mid[9] = 0x7f; /* just under half of 2^56 */
	/* The last 7 bytes decide; the first 9 do not. */
	assert_true(ledger_trace_config_sample(LEDGER_TRACE_SAMPLER_RATIO, 0.5, NULL, low));
	assert_false(ledger_trace_config_sample(LEDGER_TRACE_SAMPLER_RATIO, 0.5, NULL, high));
	assert_true(ledger_trace_config_sample(LEDGER_TRACE_SAMPLER_RATIO, 0.5, NULL, mid));
	mid[9] = 0x80;
	assert_false(ledger_trace_config_sample(LEDGER_TRACE_SAMPLER_RATIO, 0.5, NULL, mid));
	assert_false(ledger_trace_config_sample(LEDGER_TRACE_SAMPLER_RATIO, 0.0, NULL, low));
	assert_true(ledger_trace_config_sample(LEDGER_TRACE_SAMPLER_RATIO, 1.0, NULL, high));
	/* parentbased_traceidratio: the parent decides; a root by its id. */
	ledger_trace_ctx_parse(&unsampled, "00-" TID "-" SID "-00", 55, NULL, 0);
	assert_false(ledger_trace_config_sample(LEDGER_TRACE_SAMPLER_PARENT_RATIO, 1.0, &unsampled,
						low));
	assert_true(ledger_trace_config_sample(LEDGER_TRACE_SAMPLER_PARENT_RATIO, 0.5, NULL, low));
	/* Over random ids, about the ratio asked. */
	for (i = 0; i < 10000; i++) {
		uint8_t id[16];

		ledger_trace_random_id(id, sizeof(id));
		n += ledger_trace_config_sample(LEDGER_TRACE_SAMPLER_RATIO, 0.25, NULL, id);
	}
	assert_in_range(n, 2200, 2800);
}

/* ---------------------------------------------------------------------- */
/* The OTEL_* variables                                                   */
/* ---------------------------------------------------------------------- */

static const char *const otel_vars[] = {
	"OTEL_SDK_DISABLED",
	"OTEL_TRACES_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS",
	"OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_EXPORTER_OTLP_TIMEOUT",
	"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
	"OTEL_SERVICE_NAME",
	"OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER",
	"OTEL_TRACES_SAMPLER_ARG",
	"OTEL_BSP_MAX_QUEUE_SIZE",
	"OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
	"OTEL_BSP_SCHEDULE_DELAY",
	"OTEL_EXPORTER_OTLP_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_CLIENT_KEY",
	"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
	"OTEL_EXPORTER_OTLP_COMPRESSION",
	"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
};

static int clear_env(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < COUNT(otel_vars); i++)
		unsetenv(otel_vars[i]);
	return 0;
}

static struct ledger_trace_config cfg;

static void read_cfg(void)
{
	ledger_trace_config_free(&cfg);
	ledger_trace_config_read(&cfg, "ledgerd", "9.9.9");
}

static const char *resource(const char *key)
{
	size_t i;

	for (i = 0; i < cfg.n_resource; i++)
		if (strcmp(cfg.resource[i].key, key) == 0)
			return cfg.resource[i].v.s.p;
	return NULL;
}

static void test_trace_env_defaults(void **state)
{
	(void)state;
	read_cfg();
	assert_false(cfg.enabled); /* no endpoint: off */
	assert_null(cfg.endpoint);
	assert_int_equal(cfg.protocol, LEDGER_TRACE_PROTO_PROTOBUF);
	assert_int_equal(cfg.timeout_ms, 10000);
	assert_int_equal(cfg.queue_size, 2048);
	assert_int_equal(cfg.batch_size, 512);
	assert_int_equal(cfg.delay_ms, 5000);
	assert_int_equal(cfg.sampler, LEDGER_TRACE_SAMPLER_PARENT_ON);
	assert_int_equal(cfg.n_headers, 0);
	assert_string_equal(resource("service.name"), "ledgerd");
	assert_string_equal(resource("service.version"), "9.9.9");
	assert_string_equal(resource("telemetry.sdk.name"), "ledgerd");
	assert_string_equal(resource("telemetry.sdk.language"), "c");
	assert_string_equal(resource("telemetry.sdk.version"), LEDGER_VERSION);
	ledger_trace_config_free(&cfg);
}

static void test_trace_env_endpoint(void **state)
{
	(void)state;
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318", 1);
	read_cfg();
	assert_true(cfg.enabled);
	assert_string_equal(cfg.endpoint, "http://collector:4318/v1/traces");
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/base/", 1);
	read_cfg();
	assert_string_equal(cfg.endpoint, "https://collector:4318/base/v1/traces");
	/* The signal's own endpoint is used as it is, and wins. */
	setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://other:9/custom", 1);
	read_cfg();
	assert_string_equal(cfg.endpoint, "http://other:9/custom");
	/* Not a URL of http or https: off. */
	setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4317", 1);
	read_cfg();
	assert_false(cfg.enabled);
	/* Empty is unset. */
	setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", 1);
	read_cfg();
	assert_true(cfg.enabled);
	assert_string_equal(cfg.endpoint, "https://collector:4318/base/v1/traces");
	/* Disabled, or no exporter: off whatever the endpoint. */
	setenv("OTEL_SDK_DISABLED", "TRUE", 1);
	read_cfg();
	assert_false(cfg.enabled);
	setenv("OTEL_SDK_DISABLED", "yes", 1); /* neither true nor false: false */
	read_cfg();
	assert_true(cfg.enabled);
	setenv("OTEL_TRACES_EXPORTER", "none", 1);
	read_cfg();
	assert_false(cfg.enabled);
	setenv("OTEL_TRACES_EXPORTER", "zipkin", 1); /* not ours: otlp */
	read_cfg();
	assert_true(cfg.enabled);
	ledger_trace_config_free(&cfg);
}

static void test_trace_env_protocol_and_timeout(void **state)
{
	static const struct {
		const char *general, *traces;
		enum ledger_trace_protocol want;
	} protos[] = {
		{"http/json", NULL, LEDGER_TRACE_PROTO_JSON},
		{"http/protobuf", NULL, LEDGER_TRACE_PROTO_PROTOBUF},
		{"grpc", NULL, LEDGER_TRACE_PROTO_PROTOBUF},
		{"HTTP/JSON", NULL, LEDGER_TRACE_PROTO_PROTOBUF},
		{"http/json", "http/protobuf", LEDGER_TRACE_PROTO_PROTOBUF},
		{"grpc", "http/json", LEDGER_TRACE_PROTO_JSON},
	};
	static const struct {
		const char *general, *traces;
		long want;
	} timeouts[] = {
		{"2500", NULL, 2500}, {"abc", NULL, 10000},  {"-5", NULL, 10000},
		{"0", NULL, 10000},   {"12ms", NULL, 10000}, {"99999999999", NULL, 10000},
		{"100", "300", 300},  {"100", "x", 10000},
	};
	size_t i;

	(void)state;
	for (i = 0; i < COUNT(protos); i++) {
		setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protos[i].general, 1);
		if (protos[i].traces)
			setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protos[i].traces, 1);
		else
			unsetenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
		read_cfg();
		if (cfg.protocol != protos[i].want)
			fail_msg("protocol row %zu: %d", i, cfg.protocol);
	}
	for (i = 0; i < COUNT(timeouts); i++) {
		setenv("OTEL_EXPORTER_OTLP_TIMEOUT", timeouts[i].general, 1);
		if (timeouts[i].traces)
			setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", timeouts[i].traces, 1);
		else
			unsetenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT");
		read_cfg();
		if (cfg.timeout_ms != timeouts[i].want)
			fail_msg("timeout row %zu: %ld", i, cfg.timeout_ms);
	}
	ledger_trace_config_free(&cfg);
}

static void test_trace_env_headers(void **state)
{
	(void)state;
	setenv("OTEL_EXPORTER_OTLP_HEADERS",
	       "api-key=s%3Dcret%2C1, X-Tenant = general ,broken,=nokey,bad%zz=1,ok=%E2%9C%93", 1);
	setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-tenant=traces,line=a%0Db", 1);
	read_cfg();
	assert_int_equal(cfg.n_headers, 3);
	assert_string_equal(cfg.headers[0], "api-key: s=cret,1");
	assert_string_equal(cfg.headers[1], "x-tenant: traces"); /* the traces variable wins */
	assert_string_equal(cfg.headers[2], "ok: \xe2\x9c\x93");
	ledger_trace_config_free(&cfg);
}

static void test_trace_env_resource(void **state)
{
	(void)state;
	setenv("OTEL_RESOURCE_ATTRIBUTES",
	       "service.name=from-attrs,deployment.environment.name=a%20b,"
	       "service.version=2",
	       1);
	read_cfg();
	assert_string_equal(resource("service.name"), "from-attrs");
	assert_string_equal(resource("deployment.environment.name"), "a b");
	assert_string_equal(resource("service.version"), "2");
	setenv("OTEL_SERVICE_NAME", "from-name", 1);
	read_cfg();
	assert_string_equal(resource("service.name"), "from-name");
	/* One malformed member and the whole variable is dropped. */
	unsetenv("OTEL_SERVICE_NAME");
	setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=x,novalue", 1);
	read_cfg();
	assert_string_equal(resource("service.name"), "ledgerd");
	assert_null(resource("novalue"));
	setenv("OTEL_RESOURCE_ATTRIBUTES", "a=%zz", 1);
	read_cfg();
	assert_null(resource("a"));
	ledger_trace_config_free(&cfg);
}

static void test_trace_env_sampler(void **state)
{
	static const struct {
		const char *name, *arg;
		enum ledger_trace_sampler want;
		double ratio;
	} rows[] = {
		{"always_on", NULL, LEDGER_TRACE_SAMPLER_ALWAYS_ON, 1.0},
		{"always_off", NULL, LEDGER_TRACE_SAMPLER_ALWAYS_OFF, 1.0},
		{"traceidratio", "0.25", LEDGER_TRACE_SAMPLER_RATIO, 0.25},
		{"traceidratio", "2", LEDGER_TRACE_SAMPLER_RATIO, 1.0},
		{"traceidratio", "-0.1", LEDGER_TRACE_SAMPLER_RATIO, 1.0},
		{"traceidratio", "half", LEDGER_TRACE_SAMPLER_RATIO, 1.0},
		{"traceidratio", "nan", LEDGER_TRACE_SAMPLER_RATIO, 1.0},
		{"traceidratio", NULL, LEDGER_TRACE_SAMPLER_RATIO, 1.0},
		{"parentbased_always_on", NULL, LEDGER_TRACE_SAMPLER_PARENT_ON, 1.0},
		{"parentbased_always_off", NULL, LEDGER_TRACE_SAMPLER_PARENT_OFF, 1.0},
		{"parentbased_traceidratio", "0", LEDGER_TRACE_SAMPLER_PARENT_RATIO, 0.0},
		{"jaeger_remote", NULL, LEDGER_TRACE_SAMPLER_PARENT_ON, 1.0},
		{"ALWAYS_ON", NULL, LEDGER_TRACE_SAMPLER_PARENT_ON, 1.0},
	};
	size_t i;

	(void)state;
	for (i = 0; i < COUNT(rows); i++) {
		setenv("OTEL_TRACES_SAMPLER", rows[i].name, 1);
		if (rows[i].arg)
			setenv("OTEL_TRACES_SAMPLER_ARG", rows[i].arg, 1);
		else
			unsetenv("OTEL_TRACES_SAMPLER_ARG");
		read_cfg();
		if (cfg.sampler != rows[i].want || cfg.ratio != rows[i].ratio)
			fail_msg("row %zu (%s %s): sampler %d ratio %g", i, rows[i].name,
				 rows[i].arg ? rows[i].arg : "-", cfg.sampler, cfg.ratio);
	}
	ledger_trace_config_free(&cfg);
}

static void test_trace_env_batch(void **state)
{
	static const struct {
		const char *queue, *batch, *delay;
		size_t want_queue, want_batch;
		long want_delay;
	} rows[] = {
		{"100", "10", "250", 100, 10, 250},
		{"100", "1000", NULL, 100, 100, 5000}, /* a batch is never over the queue */
		{"0", NULL, "0", 2048, 512, 0},
		{"-1", "x", "-1", 2048, 512, 5000},
		{"1e3", "0", "soon", 2048, 512, 5000},
		{" 64 ", "64", "10", 64, 64, 10},
	};
	size_t i;

	(void)state;
	for (i = 0; i < COUNT(rows); i++) {
		setenv("OTEL_BSP_MAX_QUEUE_SIZE", rows[i].queue, 1);
		if (rows[i].batch)
			setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", rows[i].batch, 1);
		else
			unsetenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE");
		if (rows[i].delay)
			setenv("OTEL_BSP_SCHEDULE_DELAY", rows[i].delay, 1);
		else
			unsetenv("OTEL_BSP_SCHEDULE_DELAY");
		read_cfg();
		if (cfg.queue_size != rows[i].want_queue || cfg.batch_size != rows[i].want_batch ||
		    cfg.delay_ms != rows[i].want_delay)
			fail_msg("row %zu: queue %zu batch %zu delay %ld", i, cfg.queue_size,
				 cfg.batch_size, cfg.delay_ms);
	}
	ledger_trace_config_free(&cfg);
}

static void test_trace_env_tls_files(void **state)
{
	(void)state;
	read_cfg();
	assert_null(cfg.ca_file);
	setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", "/dev/null", 1);
	setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/nonexistent/cert.pem", 1);
	setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "/dev/null", 1);
	setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", 1); /* warned: sent uncompressed */
	read_cfg();
	assert_string_equal(cfg.ca_file, "/dev/null");
	assert_null(cfg.client_cert); /* cannot be read: not used */
	assert_string_equal(cfg.client_key, "/dev/null");
	setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/nonexistent/ca.pem", 1);
	read_cfg();
	assert_null(cfg.ca_file); /* the traces variable is the one read, and it is bad */
	ledger_trace_config_free(&cfg);
}

static void test_trace_percent_decode(void **state)
{
	char s[32];

	(void)state;
	strcpy(s, "a%20b%2c%2C");
	assert_int_equal(ledger_trace_config_percent_decode(s, strlen(s)), 5);
	assert_string_equal(s, "a b,,");
	strcpy(s, "%2");
	assert_int_equal(ledger_trace_config_percent_decode(s, strlen(s)), -1);
	strcpy(s, "%g0");
	assert_int_equal(ledger_trace_config_percent_decode(s, strlen(s)), -1);
}

/* ---------------------------------------------------------------------- */
/* The tracer                                                             */
/* ---------------------------------------------------------------------- */

static void test_trace_off_is_null_safe(void **state)
{
	struct ledger_trace_ctx parent, out;
	struct ledger_span *s;

	(void)state;
	ledger_trace_init("ledgerd", "1"); /* no endpoint */
	assert_false(ledger_trace_enabled());
	s = ledger_span_start("x", LEDGER_SPAN_SERVER, NULL, 0);
	assert_null(s);
	ledger_span_set_str(s, "k", "v");
	ledger_span_set_int(s, "k", 1);
	ledger_span_add_event(s, "e", 0, NULL, 0);
	ledger_span_set_status(s, LEDGER_SPAN_STATUS_ERROR, "m");
	assert_false(ledger_span_recording(s));
	/* A process that does not trace still passes the trace on. */
	ledger_trace_ctx_parse(&parent, "00-" TID "-" SID "-01", 55, "a=b", 3);
	ledger_span_context(s, &parent, &out);
	assert_memory_equal(&out, &parent, sizeof(out));
	ledger_span_end(s, 0);
	ledger_trace_shutdown();
}

static void test_trace_span_limits_and_context(void **state)
{
	struct ledger_trace_ctx parent, ctx;
	struct ledger_trace_attr ea[LEDGER_OTLP_MAX_ATTRS + 2];
	struct ledger_span *s;
	char key[32], big[LEDGER_OTLP_MAX_STR + 10];
	int i;

	(void)state;
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
	setenv("OTEL_BSP_SCHEDULE_DELAY", "600000", 1);
	setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200", 1);
	ledger_trace_init("ledgerd", "1");
	assert_true(ledger_trace_enabled());
	ledger_trace_ctx_parse(&parent, "00-" TID "-" SID "-01", 55, "a=b", 3);
	s = ledger_span_start("op", LEDGER_SPAN_SERVER, &parent, 0);
	assert_true(ledger_span_recording(s));
	assert_memory_equal(s->trace_id, parent.trace_id, 16);
	assert_memory_equal(s->parent_span_id, parent.span_id, 8);
	assert_string_equal(s->tracestate, "a=b");
	ledger_span_context(s, &parent, &ctx);
	assert_true(ctx.valid);
	assert_memory_equal(ctx.trace_id, parent.trace_id, 16);
	assert_memory_equal(ctx.span_id, s->span_id, 8);
	assert_int_equal(ctx.flags, 1);
	assert_string_equal(ctx.tracestate, "a=b");
	/* A key set again replaces its value and type. */
	ledger_span_set_str(s, "k", "v");
	ledger_span_set_int(s, "k", 7);
	assert_int_equal(s->n_attrs, 1);
	assert_int_equal(s->attrs[0].type, LEDGER_ATTR_INT);
	/* Past 128 attributes, each new key is dropped and counted. */
	for (i = 0; i < LEDGER_OTLP_MAX_ATTRS + 5; i++) {
		snprintf(key, sizeof(key), "a%d", i);
		ledger_span_set_bool(s, key, true);
	}
	assert_int_equal(s->n_attrs, LEDGER_OTLP_MAX_ATTRS);
	assert_int_equal(s->dropped_attrs, 6);
	ledger_span_set_bool(s, "k", false); /* an existing key is still replaced */
	assert_int_equal(s->attrs[0].type, LEDGER_ATTR_BOOL);
	/* A long value is cut to the bound. */
	memset(big, 'x', sizeof(big));
	ledger_span_set_strn(s, "a0", big, sizeof(big));
	assert_int_equal(s->attrs[1].v.s.len, LEDGER_OTLP_MAX_STR);
	/* Every attribute survives the span's text growing past its first block. */
	assert_string_equal(s->attrs[0].key, "k");
	assert_string_equal(s->attrs[1].key, "a0");
	assert_memory_equal(s->attrs[1].v.s.p, big, LEDGER_OTLP_MAX_STR);
	assert_int_equal(s->attrs[1].v.s.p[LEDGER_OTLP_MAX_STR], '\0');
	assert_string_equal(s->attrs[LEDGER_OTLP_MAX_ATTRS - 1].key, "a126");
	assert_true(s->attrs[LEDGER_OTLP_MAX_ATTRS - 1].v.b);
	assert_string_equal(s->tracestate, "a=b");
	assert_string_equal(s->name, "op");
	/* Events: 128 at most, each with 128 attributes at most. */
	for (i = 0; i < LEDGER_OTLP_MAX_ATTRS + 2; i++) {
		char *k = malloc(16);

		snprintf(k, 16, "e%d", i);
		ea[i].key = k;
		ea[i].type = LEDGER_ATTR_DOUBLE;
		ea[i].v.d = i;
	}
	for (i = 0; i < LEDGER_OTLP_MAX_EVENTS + 3; i++)
		ledger_span_add_event(s, "ev", 0, ea, COUNT(ea));
	for (i = 0; i < LEDGER_OTLP_MAX_ATTRS + 2; i++)
		free((char *)ea[i].key);
	assert_int_equal(s->n_events, LEDGER_OTLP_MAX_EVENTS);
	assert_int_equal(s->dropped_events, 3);
	assert_int_equal(s->events[0].n_attrs, LEDGER_OTLP_MAX_ATTRS);
	assert_int_equal(s->events[0].dropped_attrs, 2);
	/* The status message goes with ERROR alone. */
	ledger_span_set_status(s, LEDGER_SPAN_STATUS_OK, "ignored");
	assert_null(s->status_message);
	ledger_span_set_name(s, "POST /v1/x");
	assert_string_equal(s->name, "POST /v1/x");
	ledger_span_end(s, 0);

	/* A root span has a new trace; its id and the span's are never zero. */
	s = ledger_span_start("root", LEDGER_SPAN_INTERNAL, NULL, 5);
	assert_false(s->has_parent);
	assert_int_equal(s->start_ns, 5);
	assert_memory_not_equal(s->trace_id, parent.trace_id, 16);
	ledger_span_end(s, 1); /* an end before the start is taken as the start */
	ledger_trace_shutdown();
	clear_env(NULL);
}

static void test_trace_full_queue_drops_and_counts(void **state)
{
	struct ledger_trace_stats st;
	int i;

	(void)state;
	/* Nothing listens on port 9 of loopback: every export fails, slowly
	 * enough (retries) that the queue fills while the first batch is out. */
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
	setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4", 1);
	setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4", 1);
	setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300", 1);
	ledger_trace_init("ledgerd", "1");
	ledger_trace_init("ledgerd", "1"); /* counted: the second shutdown stops it */
	for (i = 0; i < 100; i++)
		ledger_span_end(ledger_span_start("s", LEDGER_SPAN_INTERNAL, NULL, 0), 0);
	assert_true(ledger_trace_queued() <= 4);
	ledger_trace_stats(&st);
	/* The queue took the first 4; then the sender holds a batch of 4 while
	 * it retries (100 ms backoff), the queue 4 more: nearly every other
	 * span is dropped (a loaded machine may let the sender take a second
	 * batch or two while the loop runs). */
	assert_in_range(st.spans_dropped, 80, 96);
	ledger_trace_shutdown();
	assert_true(ledger_trace_enabled());
	ledger_trace_shutdown();
	assert_false(ledger_trace_enabled());
	ledger_trace_stats(&st);
	/* Every span ended is accounted for exactly once. */
	assert_int_equal(st.spans_dropped + st.spans_failed + st.spans_exported, 100);
	assert_int_equal(st.spans_exported, 0);
	assert_true(st.exports_failed >= 1);
	/* Ended after shutdown: not recorded, not counted. */
	assert_null(ledger_span_start("late", LEDGER_SPAN_INTERNAL, NULL, 0));
	clear_env(NULL);
}

static void test_trace_unsampled_spans_are_never_queued(void **state)
{
	struct ledger_trace_stats st;
	struct ledger_trace_ctx parent, ctx;
	struct ledger_span *s;

	(void)state;
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
	setenv("OTEL_BSP_SCHEDULE_DELAY", "600000", 1);
	setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200", 1);
	ledger_trace_init("ledgerd", "1");
	ledger_trace_ctx_parse(&parent, "00-" TID "-" SID "-00", 55, NULL, 0);
	s = ledger_span_start("child", LEDGER_SPAN_SERVER, &parent, 0);
	assert_non_null(s);
	assert_false(ledger_span_recording(s));
	ledger_span_set_str(s, "k", "v"); /* kept nowhere */
	assert_int_equal(s->n_attrs, 0);
	ledger_span_context(s, &parent, &ctx);
	assert_true(ctx.valid);
	assert_int_equal(ctx.flags, 0);
	assert_memory_equal(ctx.trace_id, parent.trace_id, 16);
	ledger_span_end(s, 0);
	assert_int_equal(ledger_trace_queued(), 0);
	ledger_trace_shutdown();
	ledger_trace_stats(&st);
	assert_int_equal(st.spans_failed + st.spans_dropped + st.spans_exported, 0);
	clear_env(NULL);
}

/* Threads ending spans at once while the sender drains: every span is
 * counted once, whatever interleaving (run under -fsanitize=thread too). */
#define RACE_THREADS 4
#define RACE_SPANS 500

static void *race_worker(void *arg)
{
	struct ledger_trace_ctx parent, ctx;
	int i;

	(void)arg;
	ledger_trace_ctx_parse(&parent, "00-" TID "-" SID "-01", 55, NULL, 0);
	for (i = 0; i < RACE_SPANS; i++) {
		struct ledger_span *s =
			ledger_span_start("race", LEDGER_SPAN_SERVER, i % 2 ? &parent : NULL, 0);

		ledger_span_set_int(s, "i", i);
		ledger_span_context(s, &parent, &ctx);
		ledger_span_end(s, 0);
	}
	return NULL;
}

static void test_trace_concurrent_ends_are_each_counted_once(void **state)
{
	pthread_t t[RACE_THREADS];
	struct ledger_trace_stats st;
	int i;

	(void)state;
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
	setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64", 1);
	setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16", 1);
	setenv("OTEL_BSP_SCHEDULE_DELAY", "0", 1);
	setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200", 1);
	ledger_trace_init("ledgerd", "1");
	for (i = 0; i < RACE_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, race_worker, NULL), 0);
	for (i = 0; i < RACE_THREADS; i++)
		pthread_join(t[i], NULL);
	ledger_trace_shutdown();
	ledger_trace_stats(&st);
	assert_int_equal(st.spans_dropped + st.spans_failed + st.spans_exported,
			 RACE_THREADS * RACE_SPANS);
	assert_true(st.spans_failed > 0);
	/* Started again, the tracer counts afresh and stops again. */
	ledger_trace_init("ledgerd", "1");
	assert_true(ledger_trace_enabled());
	ledger_trace_stats(&st);
	assert_int_equal(st.spans_dropped + st.spans_failed, 0);
	ledger_trace_shutdown();
	clear_env(NULL);
}

/* The threads of this process that block SIGTERM (signal 15: bit 14 of SigBlk). */
static int threads_blocking_sigterm(void)
{
	char path[64], status[384], line[256];
	struct dirent *e;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)getpid());
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d))) {
		unsigned long long mask;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(status, sizeof(status), "%s/%s/status", path, e->d_name);
		f = fopen(status, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "SigBlk: %llx", &mask) == 1 && (mask & (1ull << 14)))
				n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

static void test_trace_sender_blocks_signals(void **state)
{
	(void)state;
	assert_int_equal(threads_blocking_sigterm(), 0);
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
	ledger_trace_init("ledgerd", "1");
	/* A program that takes SIGTERM with sigwait() needs every other thread to block it. */
	assert_int_equal(threads_blocking_sigterm(), 1);
	ledger_trace_shutdown();
	clear_env(NULL);
}

/* Ids drawn by several threads at once, and by a parent and its forked
 * child, are all different: each thread seeds its own generator, and a child
 * of fork() seeds again. */
#define IDS_PER_THREAD 4096
#define ID_THREADS 4

static void *draw_ids(void *arg)
{
	uint8_t(*ids)[8] = arg;

	for (int i = 0; i < IDS_PER_THREAD; i++)
		ledger_trace_random_id(ids[i], 8);
	return NULL;
}

static int compare_ids(const void *a, const void *b)
{
	return memcmp(a, b, 8);
}

static void test_trace_ids_are_distinct_across_threads_and_fork(void **state)
{
	static uint8_t ids[ID_THREADS * IDS_PER_THREAD + 2][8];
	pthread_t threads[ID_THREADS];
	int fds[2];
	pid_t child;
	size_t n = ID_THREADS * IDS_PER_THREAD;

	(void)state;
	for (int t = 0; t < ID_THREADS; t++) {
		void *first = ids[t * IDS_PER_THREAD];

		assert_int_equal(pthread_create(&threads[t], NULL, draw_ids, first), 0);
	}
	for (int t = 0; t < ID_THREADS; t++)
		pthread_join(threads[t], NULL);
	/* This thread draws first, so its generator is seeded before the fork. */
	ledger_trace_random_id(ids[n], 8);
	assert_int_equal(pipe(fds), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		uint8_t id[8];

		ledger_trace_random_id(id, 8);
		_exit(write(fds[1], id, sizeof(id)) == (ssize_t)sizeof(id) ? 0 : 1);
	}
	ledger_trace_random_id(ids[n], 8); /* the parent's next draw */
	assert_int_equal(read(fds[0], ids[n + 1], 8), 8);
	close(fds[0]);
	close(fds[1]);
	assert_true(waitpid(child, NULL, 0) == child);
	n += 2;
	qsort(ids, n, 8, compare_ids);
	for (size_t i = 1; i < n; i++)
		assert_memory_not_equal(ids[i - 1], ids[i], 8);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trace_parse_table),
		cmocka_unit_test(test_trace_parse_null_and_lengths),
		cmocka_unit_test(test_trace_tracestate),
		cmocka_unit_test(test_trace_format_round_trip),
		cmocka_unit_test(test_trace_hex),
		cmocka_unit_test(test_trace_otlp_protobuf_bytes),
		cmocka_unit_test(test_trace_otlp_json),
		cmocka_unit_test(test_trace_utf8_dup),
		cmocka_unit_test(test_trace_sampler_table),
		cmocka_unit_test(test_trace_sampler_ratio),
		cmocka_unit_test(test_trace_ids_are_distinct_across_threads_and_fork),
		cmocka_unit_test_setup(test_trace_env_defaults, clear_env),
		cmocka_unit_test_setup(test_trace_env_endpoint, clear_env),
		cmocka_unit_test_setup(test_trace_env_protocol_and_timeout, clear_env),
		cmocka_unit_test_setup(test_trace_env_headers, clear_env),
		cmocka_unit_test_setup(test_trace_env_resource, clear_env),
		cmocka_unit_test_setup(test_trace_env_sampler, clear_env),
		cmocka_unit_test_setup(test_trace_env_batch, clear_env),
		cmocka_unit_test_setup(test_trace_env_tls_files, clear_env),
		cmocka_unit_test(test_trace_percent_decode),
		cmocka_unit_test_setup(test_trace_off_is_null_safe, clear_env),
		cmocka_unit_test_setup(test_trace_span_limits_and_context, clear_env),
		cmocka_unit_test_setup(test_trace_full_queue_drops_and_counts, clear_env),
		cmocka_unit_test_setup(test_trace_unsampled_spans_are_never_queued, clear_env),
		cmocka_unit_test_setup(test_trace_concurrent_ends_are_each_counted_once, clear_env),
		cmocka_unit_test_setup(test_trace_sender_blocks_signals, clear_env),
	};

	return cmocka_run_group_tests_name("trace", tests, NULL, NULL);
}
