/*
 * tests/unit/test_gateway_key.c: ledger-gateway's idempotency keys (key.h),
 * table-driven from heads as the wire parses them: which values are keys,
 * what a structured-field string unquotes to, how a scope is read, and the
 * request id a key derives, against vectors computed apart from this code
 * (Python's hmac and base64 modules).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sdk/programs/ledger-gateway/key.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Parses "POST / HTTP/1.1\r\n" and @p fields (CRLF-separated, no final CRLF) into @p head. */
static char *parse(const char *fields, struct wire_http_head *head)
{
	struct wire_http_error err;
	char *buf = NULL;
	int n = asprintf(&buf, "POST / HTTP/1.1\r\nHost: h\r\n%s%s\r\n", fields,
			 fields[0] != '\0' ? "\r\n" : "");

	assert_true(n > 0);
	memset(head, 0, sizeof(*head));
	assert_int_equal(wire_http_parse_head(buf, (size_t)n, head, &err), WIRE_HTTP_DONE);
	return buf;
}

static void test_gateway_key_read(void **state)
{
	static const char long_key[] =
		"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
		"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
		"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
		"kkkkkkkkkkkkkkk"; /* 255 */
	static const struct {
		const char *fields;
		enum gateway_key_read read;
		const char *key;
	} rows[] = {
		{"", GATEWAY_KEY_NONE, NULL},
		{"Other: x", GATEWAY_KEY_NONE, NULL},
		{"Idempotency-Key: abc", GATEWAY_KEY_OK, "abc"},
		{"idempotency-key: abc", GATEWAY_KEY_OK, "abc"},
		{"Idempotency-Key: \"abc\"", GATEWAY_KEY_OK, "abc"},             /* an sf-string */
		{"Idempotency-Key: \"a\\\"b\\\\c\"", GATEWAY_KEY_OK, "a\"b\\c"}, /* its escapes */
		{"Idempotency-Key: \"a\\x\"", GATEWAY_KEY_OK, "\"a\\x\""}, /* no sf-string: raw */
		{"Idempotency-Key: \"unterminated", GATEWAY_KEY_OK, "\"unterminated"},
		{"Idempotency-Key: \"\"", GATEWAY_KEY_INVALID, NULL}, /* empty once unquoted */
		{"Idempotency-Key: \"a b\"", GATEWAY_KEY_INVALID, NULL},
		{"Idempotency-Key: ", GATEWAY_KEY_INVALID, NULL},
		{"Idempotency-Key: a b", GATEWAY_KEY_INVALID, NULL},
		{"Idempotency-Key: a\tb", GATEWAY_KEY_INVALID, NULL},
		{"Idempotency-Key: caf\xc3\xa9", GATEWAY_KEY_INVALID, NULL},
		{"Idempotency-Key: a\r\nIdempotency-Key: a", GATEWAY_KEY_INVALID, NULL},
		{"Idempotency-Key: k", GATEWAY_KEY_OK, "k"},
		{"Idempotency-Key: !~", GATEWAY_KEY_OK, "!~"},
	};
	struct wire_http_head head;
	char key[GATEWAY_KEY_MAX + 1];

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		char *buf = parse(rows[i].fields, &head);
		enum gateway_key_read got = gateway_key_read(&head, "Idempotency-Key", key);

		if (got != rows[i].read)
			fail_msg("row %zu (%s): read %d, want %d", i, rows[i].fields, got,
				 rows[i].read);
		if (rows[i].key != NULL)
			assert_string_equal(key, rows[i].key);
		free(buf);
	}
	for (size_t len = 255; len <= 256; len++) {
		char fields[300];
		char *buf;

		snprintf(fields, sizeof(fields), "Idempotency-Key: %.*s%s", 255, long_key,
			 len == 256 ? "k" : "");
		buf = parse(fields, &head);
		assert_int_equal(gateway_key_read(&head, "Idempotency-Key", key),
				 len == 255 ? GATEWAY_KEY_OK : GATEWAY_KEY_INVALID);
		free(buf);
	}
}

static void test_gateway_key_scope(void **state)
{
	static const struct {
		const char *fields;
		const char *name;
		const char *scope;
	} rows[] = {
		{"Authorization: Bearer a", "Authorization", "Bearer a"},
		{"authorization: Bearer a", "Authorization", "Bearer a"},
		{"Other: x", "Authorization", ""},
		{"Authorization: Bearer a", NULL, ""}, /* no scope header: one scope */
		{"X-Tenant: t1\r\nX-Tenant: t2", "X-Tenant", "t1, t2"},
	};
	struct wire_http_head head;

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		char *owned = NULL;
		char *buf = parse(rows[i].fields, &head);

		assert_string_equal(gateway_key_scope(&head, rows[i].name, &owned), rows[i].scope);
		free(owned);
		free(buf);
	}
}

static void test_gateway_key_request_id(void **state)
{
	/* Computed with Python: "k-" + b32encode(hmac(secret, pack(">I", len(scope)) + scope
	 * + key, sha256)).lower().rstrip("=")[:32]. */
	static const struct {
		const char *secret, *scope, *key;
	} rows[] = {
		{"a secret of the pool, 32 bytes..", "", "k"},
		{"a secret of the pool, 32 bytes..", "Bearer client-a", "order-1"},
		{"a secret of the pool, 32 bytes..", "ab", "c"},
		{"a secret of the pool, 32 bytes..", "a", "bc"},
		{"another secret, 16+ bytes", "", "k"},
	};
	char rid[N(rows)][GATEWAY_RID_LEN + 1];

	(void)state;
	for (size_t i = 0; i < N(rows); i++) {
		assert_true(
			gateway_key_request_id(rows[i].secret, rows[i].scope, rows[i].key, rid[i]));
		assert_int_equal(strlen(rid[i]), GATEWAY_RID_LEN);
		assert_memory_equal(rid[i], "k-", 2);
		assert_int_equal(strspn(rid[i] + 2, "abcdefghijklmnopqrstuvwxyz234567"), 32);
	}
	assert_string_equal(rid[0], "k-4seqjko66s2ehzvk2b3xu2ux4dmhzrye");
	assert_string_equal(rid[1], "k-w7toj6agbdrevyeg2zyyxtlpilgyxmvu");
	/* The scope's length keeps "ab"+"c" apart from "a"+"bc". */
	assert_string_not_equal(rid[2], rid[3]);
	assert_string_equal(rid[2], "k-46vbipwod23lh2dfepiccrvdaavt7hed");
	assert_string_not_equal(rid[0], rid[4]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gateway_key_read),
		cmocka_unit_test(test_gateway_key_scope),
		cmocka_unit_test(test_gateway_key_request_id),
	};

	return cmocka_run_group_tests_name("gateway_key", tests, NULL, NULL);
}
