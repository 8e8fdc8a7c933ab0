/*
 * tests/unit/test_answer.c: ledger/core/answer.c, the kept answers of API
 * 1.1: what the bound keeps, table-driven, and the JSON GET .../answer
 * gives in both forms.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ledger/common/buf.h"
#include "ledger/common/jsonw.h"
#include "ledger/core/answer.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void test_answer_bound_keeps_whole_only_within_it(void **state)
{
	static const struct {
		bool kept;
		int64_t bytes, max;
		bool want_kept;
	} rows[] = {
		{true, 0, 0, true},        /* an empty answer fits any bound */
		{true, 1, 0, false},       /* a bound of 0 keeps no bytes */
		{true, 1024, 1024, true},  /* at the bound: kept */
		{true, 1025, 1024, false}, /* one past: reduced */
		{true, 64 << 20, 1 << 20, false},
		{false, 10, 1024, false}, /* a client's own reduced form stays reduced */
		{false, 10 << 20, 1024, false},
	};

	(void)state;
	for (size_t i = 0; i < COUNT(rows); i++) {
		struct ledger_answer a = {.status = 200,
					  .content_type = "text/plain",
					  .kept = rows[i].kept,
					  .bytes = rows[i].bytes};

		a.body_b64 = a.kept ? "eA==" : NULL;
		strcpy(a.sha256,
		       "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
		ledger_answer_bound(&a, rows[i].max);
		if (a.kept != rows[i].want_kept)
			fail_msg("row %zu: kept %d, want %d", i, a.kept, rows[i].want_kept);
		assert_true(a.kept == (a.body_b64 != NULL));
		/* what is kept either way: the status, the type, the length and the hash */
		assert_int_equal(a.status, 200);
		assert_string_equal(a.content_type, "text/plain");
		assert_int_equal(a.bytes, rows[i].bytes);
		assert_int_equal(strlen(a.sha256), 64);
	}
}

static void render(const struct ledger_answer *a, char *out, size_t cap)
{
	struct ledger_buf buf = LEDGER_BUF_INIT;
	struct ledger_jsonw w;

	ledger_jsonw_init(&w, &buf);
	ledger_answer_render(&w, a);
	assert_false(buf.oom);
	snprintf(out, cap, "%.*s", (int)buf.len, buf.data);
	ledger_buf_free(&buf);
}

static void test_answer_render_both_forms(void **state)
{
	struct ledger_answer a = {.status = 200,
				  .content_type = "text/event-stream",
				  .kept = true,
				  .body_b64 = "ZGF0YTogaGkKCg==",
				  .bytes = 10};
	char out[512];

	(void)state;
	strcpy(a.sha256, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	render(&a, out, sizeof(out));
	assert_string_equal(out,
			    "{\"kept\":true,\"status\":200,\"content_type\":\"text/event-stream\","
			    "\"body_b64\":\"ZGF0YTogaGkKCg==\"}");
	ledger_answer_bound(&a, 9);
	render(&a, out, sizeof(out));
	assert_string_equal(out,
			    "{\"kept\":false,\"status\":200,\"content_type\":\"text/event-stream\","
			    "\"bytes\":10,\"sha256\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
			    "aaaaaaaaaaaaaaaaaaaa\"}");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answer_bound_keeps_whole_only_within_it),
		cmocka_unit_test(test_answer_render_both_forms),
	};

	return cmocka_run_group_tests_name("answer", tests, NULL, NULL);
}
