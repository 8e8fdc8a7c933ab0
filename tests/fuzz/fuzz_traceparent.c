/*
 * tests/fuzz/fuzz_traceparent.c: libFuzzer target for W3C Trace Context
 * (ledger/common/trace.c). An input is a traceparent, then optionally a
 * newline and a tracestate; each is handed over in a buffer of exactly its
 * size, so a read past its length is AddressSanitizer's to see. The
 * reader must agree with a reference written from the specification's
 * grammar; a valid one written back must be the input itself for version
 * 00 (the first four fields of a later version, as version 00), and read
 * again as the same context; a tracestate is kept whole or not at all.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_traceparent: %s:%d: %s\n", __FILE__, __LINE__,       \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static bool lowhex(const uint8_t *s, size_t n, bool *nonzero)
{
	size_t i;

	*nonzero = false;
	for (i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
		if (s[i] != '0')
			*nonzero = true;
	}
	return true;
}

/* version "-" trace-id "-" parent-id "-" trace-flags, as level 1 reads it. */
static bool reference_valid(const uint8_t *s, size_t n)
{
	bool nz, trace_nz, span_nz;

	if (n < 55 || !lowhex(s, 2, &nz) || (s[0] == 'f' && s[1] == 'f'))
		return false;
	if (s[0] == '0' && s[1] == '0' && n != 55)
		return false;
	if (n > 55 && s[55] != '-')
		return false;
	return s[2] == '-' && s[35] == '-' && s[52] == '-' && lowhex(s + 3, 32, &trace_nz) &&
	       trace_nz && lowhex(s + 36, 16, &span_nz) && span_nz && lowhex(s + 53, 2, &nz);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t tp_len = nl ? (size_t)(nl - data) : size;
	size_t ts_len = nl ? size - tp_len - 1 : 0;
	char *tp = malloc(tp_len ? tp_len : 1), *ts = malloc(ts_len ? ts_len : 1);
	struct ledger_trace_ctx ctx, again;
	char out[LEDGER_TRACEPARENT_LEN + 1];
	size_t i;

	CHECK(tp && ts);
	memcpy(tp, data, tp_len);
	if (ts_len)
		memcpy(ts, nl + 1, ts_len);
	ledger_trace_ctx_parse(&ctx, tp, tp_len, nl ? ts : NULL, ts_len);
	CHECK(ctx.valid == reference_valid(data, tp_len));
	if (!ctx.valid) {
		CHECK(ctx.tracestate[0] == '\0');
		goto out;
	}
	ledger_trace_ctx_format(&ctx, out);
	CHECK(strlen(out) == LEDGER_TRACEPARENT_LEN);
	CHECK(memcmp(out, "00", 2) == 0);
	CHECK(memcmp(out + 2, tp + 2, LEDGER_TRACEPARENT_LEN - 2) == 0);
	if (memcmp(tp, "00", 2) == 0)
		CHECK(memcmp(out, tp, tp_len) == 0);
	ledger_trace_ctx_parse(&again, out, strlen(out), NULL, 0);
	CHECK(again.valid);
	CHECK(memcmp(again.trace_id, ctx.trace_id, 16) == 0);
	CHECK(memcmp(again.span_id, ctx.span_id, 8) == 0);
	CHECK(again.flags == ctx.flags);
	/* A tracestate is the input's, whole, or nothing; what is kept is printable. */
	if (ctx.tracestate[0]) {
		CHECK(strlen(ctx.tracestate) == ts_len && ts_len <= LEDGER_TRACESTATE_MAX);
		CHECK(memcmp(ctx.tracestate, ts, ts_len) == 0);
		for (i = 0; i < ts_len; i++)
			CHECK(ts[i] >= 0x20 && ts[i] <= 0x7e);
	}
out:
	free(tp);
	free(ts);
	return 0;
}
