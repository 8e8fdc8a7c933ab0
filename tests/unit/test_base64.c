/*
 * tests/unit/test_base64.c: ledger/common/base64.c, table-driven: RFC
 * 4648's test vectors, both ways; every text the strict decoder refuses
 * (lengths, characters, padding out of place, unused bits set); the
 * decoded length it announces; and a round trip of every byte value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/base64.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define REFUSED ((size_t)-1)

/* Bytes and their encoding; the bytes are a string literal, @n of them. */
struct vector {
	const char *raw;
	size_t n;
	const char *text;
};

static const struct vector vectors[] = {
	/* RFC 4648, section 10 */
	{"", 0, ""},
	{"f", 1, "Zg=="},
	{"fo", 2, "Zm8="},
	{"foo", 3, "Zm9v"},
	{"foob", 4, "Zm9vYg=="},
	{"fooba", 5, "Zm9vYmE="},
	{"foobar", 6, "Zm9vYmFy"},
	/* the two characters where base64 differs from base64url */
	{"\xfb\xff", 2, "+/8="},
	{"\xfb\xef\xbe", 3, "++++"},
	{"\xff\xff\xff", 3, "////"},
	{"\x00", 1, "AA=="},
	{"\x00\x00\x00", 3, "AAAA"},
};

static void test_base64_len_is_padded(void **state)
{
	static const size_t want[] = {0, 4, 4, 4, 8, 8, 8, 12};

	(void)state;
	for (size_t n = 0; n < COUNT(want); n++) {
		if (ledger_base64_len(n) != want[n])
			fail_msg("len(%zu) = %zu, want %zu", n, ledger_base64_len(n), want[n]);
	}
}

static void test_base64_vectors_both_ways(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(vectors); i++) {
		const struct vector *v = &vectors[i];
		char text[32];
		unsigned char out[32];
		size_t n = ledger_base64_encode(v->raw, v->n, text, sizeof(text));

		if (n != strlen(v->text) || strcmp(text, v->text) != 0)
			fail_msg("row %zu: encoded \"%s\" (%zu), want \"%s\"", i, text, n, v->text);
		assert_int_equal(ledger_base64_decoded_len(v->text, strlen(v->text)), v->n);
		memset(out, 0xaa, sizeof(out));
		n = ledger_base64_decode(v->text, strlen(v->text), out);
		if (n != v->n)
			fail_msg("row %zu: \"%s\" decoded to %zu bytes, want %zu", i, v->text, n,
				 v->n);
		assert_memory_equal(out, v->raw, v->n);
		assert_int_equal(out[v->n], 0xaa); /* nothing written past the bytes */
	}
}

/* Text the strict decoder refuses: RFC 4648 allows no other text for the same bytes. */
static const char *const refused[] = {
	"Zg",         /* no padding */
	"Zg=",        /* too little padding */
	"Zm9",        /* a length not a multiple of 4 */
	"Zm9vY",      /* nor this */
	"Zh==",       /* unused bits set: "Zg==" is the one text of "f" */
	"Zm9=",       /* unused bits set: "Zm8=" */
	"+/9=",       /* unused bits set: "+/8=" */
	"Z===",       /* three padding characters */
	"====",       /* padding alone */
	"Zg==Zg==",   /* padding inside the text */
	"Zm=v",       /* padding in the middle of a group */
	"Z=9v",       /* nor here */
	"Zm9-",       /* base64url's "-" */
	"Zm9_",       /* base64url's "_" */
	"Zm9v YmFy",  /* no white space */
	"Zm9v\nYmFy", /* nor a line break */
	"Zm9v\r\n",   /* nor one at the end */
	"Zm9.",       /* "." is an id character, not a base64 one */
	"\xc3\xa9Zm", /* a non-ASCII character */
	"Zm9\x7f",    /* a control character */
};

static void test_base64_refuses_every_other_text(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(refused); i++) {
		unsigned char out[32];
		size_t got = ledger_base64_decode(refused[i], strlen(refused[i]), out);

		if (got != REFUSED)
			fail_msg("row %zu: \"%s\" decoded to %zu bytes, want refused", i,
				 refused[i], got);
	}
}

static void test_base64_refuses_a_nul_inside(void **state)
{
	unsigned char out[8];

	(void)state;
	assert_int_equal(ledger_base64_decode("Zm\0v", 4, out), REFUSED);
}

static void test_base64_decoded_len_reads_only_the_length_and_padding(void **state)
{
	(void)state;
	assert_int_equal(ledger_base64_decoded_len("", 0), 0);
	assert_int_equal(ledger_base64_decoded_len("Zg==", 4), 1);
	assert_int_equal(ledger_base64_decoded_len("Zm8=", 4), 2);
	assert_int_equal(ledger_base64_decoded_len("Zm9vYmFy", 8), 6);
	assert_int_equal(ledger_base64_decoded_len("Zm9", 3), REFUSED);
	assert_int_equal(ledger_base64_decoded_len("Zm9vY", 5), REFUSED);
}

static void test_base64_round_trips_every_byte(void **state)
{
	unsigned char raw[256 + 2], back[sizeof(raw)];
	char text[4 * (sizeof(raw) / 3 + 1) + 1];

	(void)state;
	for (size_t i = 0; i < sizeof(raw); i++)
		raw[i] = (unsigned char)(i * 7 + 3);
	for (size_t n = 0; n <= sizeof(raw); n++) {
		size_t len = ledger_base64_encode(raw, n, text, sizeof(text));

		assert_int_equal(len, ledger_base64_len(n));
		assert_int_equal(ledger_base64_decoded_len(text, len), n);
		assert_int_equal(ledger_base64_decode(text, len, back), n);
		assert_memory_equal(back, raw, n);
	}
}

static void test_base64_encode_needs_room_for_the_nul(void **state)
{
	char out[16];

	(void)state;
	memset(out, 'x', sizeof(out));
	assert_int_equal(ledger_base64_encode("f", 1, out, 4), 0);
	assert_string_equal(out, "");
	assert_int_equal(ledger_base64_encode("f", 1, out, 5), 4);
	assert_string_equal(out, "Zg==");
	out[0] = 'x';
	assert_int_equal(ledger_base64_encode("f", 1, out, 0), 0);
	assert_int_equal(out[0], 'x');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_base64_len_is_padded),
		cmocka_unit_test(test_base64_vectors_both_ways),
		cmocka_unit_test(test_base64_refuses_every_other_text),
		cmocka_unit_test(test_base64_refuses_a_nul_inside),
		cmocka_unit_test(test_base64_decoded_len_reads_only_the_length_and_padding),
		cmocka_unit_test(test_base64_round_trips_every_byte),
		cmocka_unit_test(test_base64_encode_needs_room_for_the_nul),
	};

	return cmocka_run_group_tests_name("base64", tests, NULL, NULL);
}
