/*
 * tests/sdk/c/test_c_client_tls.c: the C SDK's TLS, the tls group of
 * tests/sdk/c/test_c_client.c. tests/sdk/test_tls_clients.py serves https
 * from a stand-in (certificates of tests/tlsutil.py) and passes:
 *
 *   LEDGER_URL             https, a certificate for 127.0.0.1 signed by the CA
 *   LEDGER_WRONG_NAME_URL  https, a certificate of the CA for another name
 *   LEDGER_SYSTEM_URL      https, as LEDGER_URL, for the client without a CA file
 *   LEDGER_CA_FILE         the CA; LEDGER_OTHER_CA_FILE another one
 *
 * A verified exchange works and keeps its connection; every way of failing
 * verification is LEDGER_CLIENT_FAILURE_TLS, said in words, and never
 * re-sent (the driver counts the handshakes each server saw); a CA file
 * that cannot be used is refused before anything is, and one replaced in
 * place is read by the next connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger_client.h"
#include "tests/sdk/c/test_c_client.h"

static const char *env_or_fail(const char *name)
{
	const char *v = getenv(name);

	if (v == NULL || v[0] == '\0')
		fail_msg("%s is not set", name);
	return v;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Writes @p text to a new temporary file; its path into @p path. */
static void temp_file(char *path, size_t size, const char *text)
{
	int fd;

	snprintf(path, size, "/tmp/ledger-ca-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* Opens a client of @p base_url with @p ca_file; @p retry_ms as given. */
static struct ledger_client *tls_client(const char *base_url, const char *ca_file,
					uint32_t retry_ms)
{
	struct ledger_client_options o = {.url = base_url,
					  .token = "stand-in-token",
					  .timeout_ms = 5000,
					  .retry_ms = retry_ms,
					  .ca_file = ca_file};
	struct ledger_client *c = NULL;

	assert_int_equal(ledger_client_open(&o, &c), LEDGER_CLIENT_OK);
	return c;
}

/* Asks @p c for a list; asserts it failed for TLS, with @p words said. */
static void assert_tls_refused(struct ledger_client *c, const char *words)
{
	struct ledger_client_answer a = {0};
	struct ledger_client_error err = {0};
	uint64_t t0 = now_ms();

	assert_int_equal(ledger_client_tool_calls_list(c, "unknown", 0, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_UNAVAILABLE);
	/* retry_ms is 60 s; the driver checks there was one handshake, not more */
	assert_true(now_ms() - t0 < 30000);
	assert_int_equal(err.status, 0);
	assert_int_equal(err.failure, LEDGER_CLIENT_FAILURE_TLS);
	if (strstr(err.message, words) == NULL)
		fail_msg("\"%s\" is not in \"%s\"", words, err.message);
	assert_null(a.body);
	ledger_client_error_clear(&err);
}

static void test_client_ca_file_that_cannot_be_used_is_refused(void **state)
{
	static const char *const not_pem = "not a certificate\n";
	static const char *const bad_pem = "-----BEGIN CERTIFICATE-----\n"
					   "bm90IGEgY2VydGlmaWNhdGU=\n"
					   "-----END CERTIFICATE-----\n";
	struct {
		const char *path;
		const char *says;
	} rows[] = {
		{"/nonexistent/ca.pem",
		 "cannot read the CA file /nonexistent/ca.pem: No such file"},
		{"/", "the CA file / is not a regular file"},
		{NULL, "holds no PEM certificate"},        /* not_pem */
		{NULL, "holds a certificate that cannot"}, /* bad_pem */
		{"", "the CA file has no name"},
	};
	char not_pem_path[64], bad_pem_path[64];
	struct ledger_client_error err = {0};
	struct ledger_client_options o = {.url = "https://127.0.0.1:9", .token = "t"};
	struct ledger_client *c = NULL;

	(void)state;
	temp_file(not_pem_path, sizeof(not_pem_path), not_pem);
	temp_file(bad_pem_path, sizeof(bad_pem_path), bad_pem);
	rows[2].path = not_pem_path;
	rows[3].path = bad_pem_path;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		assert_int_equal(ledger_client_ca_file_check(rows[i].path, &err),
				 LEDGER_CLIENT_ERR_INVALID);
		assert_int_equal(err.failure, LEDGER_CLIENT_FAILURE_TLS);
		if (strstr(err.message, rows[i].says) == NULL)
			fail_msg("row %zu: \"%s\" is not in \"%s\"", i, rows[i].says, err.message);
		ledger_client_error_clear(&err);
		/* the same file is refused by open, over http as well: nothing is sent */
		o.ca_file = rows[i].path;
		o.url = i % 2 == 0 ? "https://127.0.0.1:9" : "http://127.0.0.1:9";
		assert_int_equal(ledger_client_open(&o, &c), LEDGER_CLIENT_ERR_INVALID);
		assert_null(c);
	}
	assert_int_equal(ledger_client_ca_file_check(NULL, NULL), LEDGER_CLIENT_ERR_INVALID);
	assert_int_equal(ledger_client_ca_file_check(env_or_fail("LEDGER_CA_FILE"), &err),
			 LEDGER_CLIENT_OK);
	assert_int_equal(err.failure, LEDGER_CLIENT_FAILURE_NONE);
	unlink(not_pem_path);
	unlink(bad_pem_path);
}

static void test_client_https_is_verified_against_the_ca_file(void **state)
{
	struct ledger_client *c =
		tls_client(env_or_fail("LEDGER_URL"), env_or_fail("LEDGER_CA_FILE"), 60000);
	struct ledger_client_answer a = {0};
	struct ledger_client_error err = {0};

	(void)state;
	/* twice: the second call goes over the connection the first one opened */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ledger_client_tool_calls_list(c, "unknown", 0, NULL, &a, &err),
				 LEDGER_CLIENT_OK);
		assert_int_equal(a.status, 200);
		assert_non_null(strstr(a.body, "\"items\""));
		ledger_client_answer_clear(&a);
	}
	ledger_client_close(c);
}

static void test_client_https_refuses_a_certificate_of_another_ca(void **state)
{
	struct ledger_client *c =
		tls_client(env_or_fail("LEDGER_URL"), env_or_fail("LEDGER_OTHER_CA_FILE"), 60000);
	struct ledger_call call = {.request_id = "r-tls", .tool_call_id = "call_00"};
	struct ledger_outcome o = {0};
	uint64_t t0;

	(void)state;
	assert_tls_refused(c, "ledgerd's certificate failed verification");
	/* an agent's tool call: not run, and told apart from an unreachable ledgerd */
	t0 = now_ms();
	assert_int_equal(ledger_client_tool_call(c, &call, must_not_run, NULL, &o),
			 LEDGER_CLIENT_ERR_UNAVAILABLE);
	assert_true(now_ms() - t0 < 30000);
	assert_int_equal(o.error.failure, LEDGER_CLIENT_FAILURE_TLS);
	assert_non_null(strstr(o.error.message, "failed verification"));
	ledger_client_outcome_clear(&o);
	ledger_client_close(c);
}

static void test_client_https_refuses_a_certificate_for_another_name(void **state)
{
	struct ledger_client *c = tls_client(env_or_fail("LEDGER_WRONG_NAME_URL"),
					     env_or_fail("LEDGER_CA_FILE"), 60000);

	(void)state;
	assert_tls_refused(c, "ledgerd's certificate failed verification");
	ledger_client_close(c);
}

static void test_client_https_without_a_ca_file_trusts_the_system_store(void **state)
{
	/* The test CA is in no system store: the system's trust is what refuses. (A
	 * server of its own: reading the whole store under valgrind can outlast the
	 * connect timeout, and a timed-out handshake is rightly tried again.) */
	struct ledger_client *c = tls_client(env_or_fail("LEDGER_SYSTEM_URL"), NULL, 60000);

	(void)state;
	assert_tls_refused(c, "failed verification");
	ledger_client_close(c);
}

/* Copies the file @p from over @p to (a temporary file of the test's). */
static void copy_file(const char *from, const char *to)
{
	char buf[16384];
	FILE *in = fopen(from, "rb"), *out = NULL;
	size_t n;

	assert_non_null(in);
	out = fopen(to, "wb");
	assert_non_null(out);
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		assert_int_equal(fwrite(buf, 1, n, out), n);
	fclose(in);
	assert_int_equal(fclose(out), 0);
}

static void test_client_ca_file_replaced_in_place_applies_to_new_connections(void **state)
{
	struct ledger_client_answer a = {0};
	struct ledger_client_error err = {0};
	struct ledger_client *c = NULL;
	char path[64];

	(void)state;
	/* First the other CA: refused, and the refused connection is not kept. */
	temp_file(path, sizeof(path), "");
	copy_file(env_or_fail("LEDGER_OTHER_CA_FILE"), path);
	c = tls_client(env_or_fail("LEDGER_URL"), path, 60000);
	assert_int_equal(ledger_client_tool_calls_list(c, "unknown", 0, NULL, &a, &err),
			 LEDGER_CLIENT_ERR_UNAVAILABLE);
	assert_int_equal(err.failure, LEDGER_CLIENT_FAILURE_TLS);
	ledger_client_error_clear(&err);
	/* The deployment puts the right CA in the same place: the next connection reads it. */
	copy_file(env_or_fail("LEDGER_CA_FILE"), path);
	assert_int_equal(ledger_client_tool_calls_list(c, "unknown", 0, NULL, &a, &err),
			 LEDGER_CLIENT_OK);
	ledger_client_answer_clear(&a);
	ledger_client_close(c);
	unlink(path);
}

int test_c_client_tls_run(void)
{
	const struct CMUnitTest tls[] = {
		cmocka_unit_test(test_client_ca_file_that_cannot_be_used_is_refused),
		cmocka_unit_test(test_client_https_is_verified_against_the_ca_file),
		cmocka_unit_test(test_client_https_refuses_a_certificate_of_another_ca),
		cmocka_unit_test(test_client_https_refuses_a_certificate_for_another_name),
		cmocka_unit_test(test_client_https_without_a_ca_file_trusts_the_system_store),
		cmocka_unit_test(test_client_ca_file_replaced_in_place_applies_to_new_connections),
	};

	return cmocka_run_group_tests_name("c_client_tls", tls, NULL, NULL);
}
