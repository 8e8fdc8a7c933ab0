/*
 * tests/unit/test_wire_addr.c: the key a connection's peer is counted by
 * (--max-connections-per-address): an IPv4 address whole, an IPv4-mapped
 * IPv6 address as that IPv4 address, an IPv6 address by its /64.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "api/wire/net_int.h"

static void key_of(const char *text, unsigned char key[17])
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	if (strchr(text, ':') != NULL) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&ss;

		in6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)(void *)&ss;

		in->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, text, &in->sin_addr), 1);
	}
	wire_addrs_key(&ss, key);
}

static bool same_key(const char *a, const char *b)
{
	unsigned char ka[17], kb[17];

	key_of(a, ka);
	key_of(b, kb);
	return memcmp(ka, kb, sizeof(ka)) == 0;
}

static void test_ipv6_counts_by_its_64(void **state)
{
	(void)state;
	/* One host's /64: every address of it is one peer. */
	assert_true(same_key("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"));
	assert_true(same_key("2001:db8:1:2::1", "2001:db8:1:2:8a3f:1:2:3"));
	/* The next /64 is another. */
	assert_false(same_key("2001:db8:1:2::1", "2001:db8:1:3::1"));
	assert_false(same_key("::1", "2001:db8::1"));
}

static void test_ipv4_counts_whole_and_mapped_as_itself(void **state)
{
	(void)state;
	assert_false(same_key("10.0.0.1", "10.0.0.2"));
	assert_true(same_key("10.0.0.1", "::ffff:10.0.0.1"));
	assert_false(same_key("::ffff:10.0.0.1", "::ffff:10.0.0.2"));
	/* An IPv4 address is never an IPv6 /64 with the same leading bytes. */
	assert_false(same_key("10.0.0.1", "a00:1::"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ipv6_counts_by_its_64),
		cmocka_unit_test(test_ipv4_counts_whole_and_mapped_as_itself),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
