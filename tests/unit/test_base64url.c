/*
 * tests/unit/test_base64url.c: ledger/common/base64url.c, table-driven:
 * RFC 4648's test vectors in the URL alphabet without padding, the
 * characters decode refuses, what it accepts that encode never writes, and
 * the capacity each direction needs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/base64url.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Bytes and their encoding; the bytes are a string literal, @n of them. */
struct vector {
	const char *raw;
	size_t n;
	const char *text;
};

static const struct vector vectors[] = {
	/* RFC 4648, section 10 (the padding dropped) */
	{"", 0, ""},
	{"f", 1, "Zg"},
	{"fo", 2, "Zm8"},
	{"foo", 3, "Zm9v"},
	{"foob", 4, "Zm9vYg"},
	{"fooba", 5, "Zm9vYmE"},
	{"foobar", 6, "Zm9vYmFy"},
	/* the two characters where base64url differs from base64 ("+" and "/") */
	{"\xfb\xff", 2, "-_8"},
	{"\xfb\xef\xbe", 3, "----"},
	{"\xff\xff\xff", 3, "____"},
	{"\x00", 1, "AA"},
	{"\x00\x00\x00", 3, "AAAA"},
	{"\x00\x10\x83\x10\x51\x87", 6, "ABCDEFGH"},
};

static void test_base64url_len_is_unpadded(void **state)
{
	/* n bytes -> 4 characters per 3 bytes, then 2 or 3 for a tail of 1 or 2 */
	static const size_t want[] = {0, 2, 3, 4, 6, 7, 8, 10, 11, 12};

	(void)state;
	for (size_t n = 0; n < COUNT(want); n++) {
		if (ledger_base64url_len(n) != want[n])
			fail_msg("len(%zu) = %zu, want %zu", n, ledger_base64url_len(n), want[n]);
	}
}

static void test_base64url_encode_vectors(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(vectors); i++) {
		const struct vector *v = &vectors[i];
		char out[32];
		size_t n = ledger_base64url_encode(v->raw, v->n, out, sizeof(out));

		if (n != strlen(v->text) || strcmp(out, v->text) != 0)
			fail_msg("row %zu: encoded \"%s\" (%zu), want \"%s\"", i, out, n, v->text);
		assert_int_equal(n, ledger_base64url_len(v->n));
	}
}

static void test_base64url_decode_vectors(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(vectors); i++) {
		const struct vector *v = &vectors[i];
		unsigned char out[32];
		int n;

		memset(out, 0xaa, sizeof(out));
		n = ledger_base64url_decode(v->text, out, sizeof(out));
		if (n != (int)v->n)
			fail_msg("row %zu: \"%s\" decoded to %d bytes, want %zu", i, v->text, n,
				 v->n);
		assert_memory_equal(out, v->raw, v->n);
		assert_int_equal(out[v->n], 0); /* followed by a NUL */
	}
}

/* Text decode refuses, and text it accepts although encode never writes it. */
struct decode_row {
	const char *text;
	int want; /* bytes decoded; -1: refused */
	const char *bytes;
};

static const struct decode_row refused_rows[] = {
	{"Zm9v=", -1, NULL},     /* padding is not part of the alphabet */
	{"Zg==", -1, NULL},      /* nor is a padded RFC 4648 vector */
	{"Zm+v", -1, NULL},      /* base64's "+" */
	{"Zm/v", -1, NULL},      /* base64's "/" */
	{"Zm9v YmFy", -1, NULL}, /* no white space */
	{"Zm9v\n", -1, NULL},    /* nor a line break */
	{"Zm9v.", -1, NULL},     /* "." is an id character, not a base64url one */
	{"Zm9v%3D", -1, NULL},   /* no percent-decoding either */
	{"\xc3\xa9", -1, NULL},  /* a non-ASCII character */
	{"-_8\x7f", -1, NULL},   /* a control character after valid text */
};

static const struct decode_row lenient_rows[] = {
	{"Z", 0, ""},           /* one character carries 6 bits: no byte, no error */
	{"Zm9vY", 3, "foo"},    /* a dangling sixth of a group is dropped */
	{"Zh", 1, "f"},         /* "Zg" is canonical: the tail bits are not checked */
	{"Zm9", 2, "fo"},       /* "Zm8" is canonical */
	{"-_9", 2, "\xfb\xff"}, /* "-_8" is canonical */
};

static void run_decode_rows(const char *table, const struct decode_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct decode_row *r = &rows[i];
		unsigned char out[32];
		int got = ledger_base64url_decode(r->text, out, sizeof(out));

		if (got != r->want)
			fail_msg("%s row %zu: \"%s\" decoded to %d, want %d", table, i, r->text,
				 got, r->want);
		if (r->want >= 0)
			assert_memory_equal(out, r->bytes, (size_t)r->want + 1);
	}
}

static void test_base64url_decode_refuses_characters_outside_the_alphabet(void **state)
{
	(void)state;
	run_decode_rows("refused", refused_rows, COUNT(refused_rows));
}

static void test_base64url_decode_accepts_noncanonical_text(void **state)
{
	(void)state;
	run_decode_rows("lenient", lenient_rows, COUNT(lenient_rows));
}

/* What each call does with a buffer of @cap bytes. */
struct cap_row {
	const char *raw; /* encode: bytes (strlen of it) */
	size_t cap;
	size_t want; /* characters written; 0 with "" when they do not fit */
};

static const struct cap_row encode_caps[] = {
	{"foo", 5, 4},  /* 4 characters and a NUL */
	{"foo", 4, 0},  /* no room for the NUL */
	{"foo", 1, 0},  /* room for the NUL alone: "" */
	{"foob", 7, 6}, /* 6 characters and a NUL */
	{"foob", 6, 0}, /* no room for the NUL */
	{"", 1, 0},     /* nothing to encode: the NUL */
};

static void test_base64url_encode_needs_room_for_the_nul(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(encode_caps); i++) {
		const struct cap_row *r = &encode_caps[i];
		char out[16];
		size_t got;

		memset(out, 'x', sizeof(out));
		got = ledger_base64url_encode(r->raw, strlen(r->raw), out, r->cap);
		if (got != r->want)
			fail_msg("row %zu: \"%s\" into %zu bytes wrote %zu, want %zu", i, r->raw,
				 r->cap, got, r->want);
		if (got == 0)
			assert_string_equal(out, "");
		assert_int_equal(out[r->cap], 'x'); /* nothing past @cap */
	}
}

static void test_base64url_encode_into_nothing_writes_nothing(void **state)
{
	char out[1] = {'x'};

	(void)state;
	assert_int_equal(ledger_base64url_encode("f", 1, out, 0), 0);
	assert_int_equal(out[0], 'x');
}

/* Decode: @text into @cap bytes, the NUL included. */
struct dcap_row {
	const char *text;
	size_t cap;
	int want;
};

static const struct dcap_row decode_caps[] = {
	{"Zm9v", 4, 3},      /* "foo" and a NUL */
	{"Zm9v", 3, -1},     /* no room for the NUL */
	{"Zm9v", 1, -1},     /* no room for a byte */
	{"Zm9vYmFy", 7, 6},  /* "foobar" and a NUL */
	{"Zm9vYmFy", 6, -1}, /* no room for the NUL */
	{"", 1, 0},          /* the NUL alone */
	{"", 0, -1},         /* not even that */
	{"Z", 1, 0},         /* no byte, the NUL */
};

static void test_base64url_decode_needs_room_for_the_nul(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(decode_caps); i++) {
		const struct dcap_row *r = &decode_caps[i];
		unsigned char out[16];
		int got;

		memset(out, 0xaa, sizeof(out));
		got = ledger_base64url_decode(r->text, out, r->cap);
		if (got != r->want)
			fail_msg("row %zu: \"%s\" into %zu bytes gave %d, want %d", i, r->text,
				 r->cap, got, r->want);
		assert_int_equal(out[r->cap], 0xaa); /* nothing past @cap */
	}
}

/* Every byte value at every position of a tail: decode(encode(x)) == x. */
static void test_base64url_round_trip(void **state)
{
	unsigned char raw[64], back[65];
	char text[90];

	(void)state;
	for (size_t n = 0; n <= sizeof(raw); n++) {
		for (unsigned b = 0; b < 256; b++) {
			for (size_t i = 0; i < n; i++)
				raw[i] = (unsigned char)(b + i * 37);
			assert_int_equal(ledger_base64url_encode(raw, n, text, sizeof(text)),
					 ledger_base64url_len(n));
			assert_int_equal(ledger_base64url_decode(text, back, sizeof(back)), (int)n);
			assert_memory_equal(back, raw, n);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_base64url_len_is_unpadded),
		cmocka_unit_test(test_base64url_encode_vectors),
		cmocka_unit_test(test_base64url_decode_vectors),
		cmocka_unit_test(test_base64url_decode_refuses_characters_outside_the_alphabet),
		cmocka_unit_test(test_base64url_decode_accepts_noncanonical_text),
		cmocka_unit_test(test_base64url_encode_needs_room_for_the_nul),
		cmocka_unit_test(test_base64url_encode_into_nothing_writes_nothing),
		cmocka_unit_test(test_base64url_decode_needs_room_for_the_nul),
		cmocka_unit_test(test_base64url_round_trip),
	};

	return cmocka_run_group_tests_name("base64url", tests, NULL, NULL);
}
