/*
 * tests/unit/test_jcs.c: unit tests of RFC 8785 canonicalisation and the
 * argument fingerprint (ledger/common/jcs.c). Fingerprints must agree with every
 * SDK byte for byte, so the vectors in tests/data/jcs/ (the published ones
 * and exact_numbers.txt) are the judge; the tables here pin the cases
 * those vectors do not reach.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger/common/buf.h"
#include "ledger/common/jcs.h"
#include "ledger/common/json.h"
#include "ledger/common/json_number.h"

#define DEPTH 64
#define DATA "tests/data/jcs"

/* A C string literal and its length, embedded NULs included. */
#define TEXT(s) s, sizeof(s) - 1

static char *read_file(const char *path, size_t *len)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	char chunk[4096];
	FILE *f = NULL;
	size_t n;

	f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s (run the tests from the repository root)", path);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		ledger_buf_append(&b, chunk, n);
	assert_false(ferror(f));
	fclose(f);
	return ledger_buf_steal(&b, len);
}

/*
 * Canonicalises the JSON text @p text; returns the canonical text, or NULL
 * with *rc set when canonicalisation refuses the document.
 */
static char *canon(const char *text, size_t len, unsigned max_depth, enum ledger_err *rc,
		   size_t *out_len)
{
	struct ledger_json_doc *doc = NULL;
	struct ledger_json_error err;
	struct ledger_buf b = LEDGER_BUF_INIT;
	char *s = NULL;

	if (ledger_json_parse(text, len, max_depth, &doc, &err) != LEDGER_OK)
		fail_msg("refused %.*s: %s at %zu", (int)(len > 60 ? 60 : len), text, err.message,
			 err.offset);
	*rc = ledger_jcs_canonicalize(ledger_json_root(doc), &b);
	ledger_json_free(doc);
	if (*rc != LEDGER_OK) {
		ledger_buf_free(&b);
		return NULL;
	}
	s = ledger_buf_steal(&b, out_len);
	assert_non_null(s);
	return s;
}

static void expect_canon(const char *text, size_t len, const char *want, size_t want_len)
{
	enum ledger_err rc;
	size_t got_len = 0;
	char *got = canon(text, len, DEPTH, &rc, &got_len);

	assert_int_equal(rc, LEDGER_OK);
	if (got_len != want_len || memcmp(got, want, want_len) != 0)
		fail_msg("%s gave %s, expected %s", text, got, want);
	free(got);
}

static void test_jcs_rfc8785_vectors(void **state)
{
	DIR *dir = NULL;
	struct dirent *e = NULL;
	int count = 0;

	(void)state;
	dir = opendir(DATA "/input");
	assert_non_null(dir);
	while ((e = readdir(dir)) != NULL) {
		char in_path[512], out_path[512];
		size_t n = strlen(e->d_name), in_len, want_len;
		char *in = NULL, *want = NULL;

		if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0)
			continue;
		snprintf(in_path, sizeof(in_path), DATA "/input/%s", e->d_name);
		/* exact_output/ holds the vectors the exact-number rule changes */
		snprintf(out_path, sizeof(out_path), DATA "/exact_output/%s", e->d_name);
		if (access(out_path, R_OK) != 0)
			snprintf(out_path, sizeof(out_path), DATA "/output/%s", e->d_name);
		in = read_file(in_path, &in_len);
		want = read_file(out_path, &want_len);
		expect_canon(in, in_len, want, want_len);
		free(in);
		free(want);
		count++;
	}
	closedir(dir);
	assert_true(count >= 6);
}

/*
 * Every line of numbers.txt (HEX,TEXT): TEXT reads back as that double, and
 * TEXT as a JSON document canonicalises to itself: JCS's text of a double
 * has exactly its value, so the exact-digits rule writes it unchanged.
 */
static void test_jcs_number_vectors(void **state)
{
	char *data = NULL, *line = NULL, *next = NULL;
	size_t len, count = 0, bad = 0;

	(void)state;
	data = read_file(DATA "/numbers.txt", &len);
	for (line = data; line < data + len; line = next) {
		char *comma = NULL, *text = NULL, *c = NULL;
		struct ledger_json_doc *doc = NULL;
		uint64_t bits, back_bits;
		size_t text_len, c_len = 0;
		enum ledger_err rc;
		double d, back;

		next = strchr(line, '\n');
		next = next ? next + 1 : data + len;
		comma = memchr(line, ',', (size_t)(next - line));
		assert_non_null(comma);
		text = comma + 1;
		text_len = (size_t)(next - text);
		while (text_len && (text[text_len - 1] == '\n' || text[text_len - 1] == '\r'))
			text_len--;
		bits = strtoull(line, NULL, 16);
		memcpy(&d, &bits, sizeof(d));
		count++;

		assert_int_equal(ledger_json_parse(text, text_len, DEPTH, &doc, NULL), LEDGER_OK);
		assert_int_equal(ledger_json_number_double(ledger_json_root(doc), &back),
				 LEDGER_OK);
		ledger_json_free(doc);
		memcpy(&back_bits, &back, sizeof(back));
		/* "0" stands for both zeros; only -0 cannot come back. */
		if (back_bits != bits && !(d == 0 && back == 0 && !signbit(back))) {
			if (bad++ < 10)
				print_error("%.*s read back as %016llx\n", (int)text_len, text,
					    (unsigned long long)back_bits);
			continue;
		}
		c = canon(text, text_len, DEPTH, &rc, &c_len);
		assert_int_equal(rc, LEDGER_OK);
		if (c_len != text_len || memcmp(c, text, text_len) != 0) {
			if (bad++ < 10)
				print_error("%.*s canonicalised as %s\n", (int)text_len, text, c);
		}
		free(c);
	}
	free(data);
	assert_true(count >= 30009);
	assert_int_equal(bad, 0);
}

/*
 * tests/data/jcs/exact_numbers.txt, which every SDK's tests read too:
 * INPUT<TAB>EXPECTED, EXPECTED the canonical bytes or "refused". Each
 * canonical form is also its own canonical form.
 */
static void test_jcs_exact_number_vectors(void **state)
{
	char *data = NULL, *line = NULL, *next = NULL;
	size_t len, count = 0, bad = 0;

	(void)state;
	data = read_file(DATA "/exact_numbers.txt", &len);
	for (line = data; line < data + len; line = next) {
		char *tab = NULL, *want = NULL, *got = NULL, *again = NULL;
		size_t in_len, want_len, got_len = 0, again_len = 0;
		enum ledger_err rc;

		next = memchr(line, '\n', (size_t)(data + len - line));
		next = next ? next + 1 : data + len;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		tab = memchr(line, '\t', (size_t)(next - line));
		assert_non_null(tab);
		in_len = (size_t)(tab - line);
		want = tab + 1;
		want_len = (size_t)(next - want);
		while (want_len && (want[want_len - 1] == '\n' || want[want_len - 1] == '\r'))
			want_len--;
		count++;

		got = canon(line, in_len, DEPTH, &rc, &got_len);
		if (want_len == 7 && memcmp(want, "refused", 7) == 0) {
			if (rc != LEDGER_ERR_INVALID && bad++ < 10)
				print_error("%.*s gave %s, expected it refused\n",
					    (int)(in_len > 80 ? 80 : in_len), line, got);
			free(got);
			continue;
		}
		if (rc != LEDGER_OK || got_len != want_len || memcmp(got, want, want_len) != 0) {
			if (bad++ < 10)
				print_error("%.*s gave %s, expected %.*s\n",
					    (int)(in_len > 80 ? 80 : in_len), line,
					    got ? got : "(refused)", (int)want_len, want);
			free(got);
			continue;
		}
		again = canon(got, got_len, DEPTH, &rc, &again_len);
		assert_int_equal(rc, LEDGER_OK);
		if (again_len != got_len || memcmp(again, got, got_len) != 0) {
			if (bad++ < 10)
				print_error("%s canonicalised again as %s\n", got, again);
		}
		free(again);
		free(got);
	}
	free(data);
	assert_true(count >= 100);
	assert_int_equal(bad, 0);
}

/*
 * The layout at each of its edges, with more digits than any double has:
 * up to 21 digits before the point stay plain, down to 0.000001.
 */
static void test_jcs_number_layout(void **state)
{
	static const struct {
		const char *in;
		const char *want;
	} cases[] = {
		{"123456789012345678901", "123456789012345678901"},
		{"1234567890123456789010", "1.23456789012345678901e+21"},
		{"100000000000000000000.5", "100000000000000000000.5"},
		{"1000000000000000000000.5", "1.0000000000000000000005e+21"},
		{"12345678901234567890.123456789", "12345678901234567890.123456789"},
		{"0.00000123456789012345678901", "0.00000123456789012345678901"},
		{"0.000000123456789012345678901", "1.23456789012345678901e-7"},
		{"-0.000001000000000000000000001", "-0.000001000000000000000000001"},
		{"1.0000000000000000000000000000000000000000000000000000001",
		 "1.0000000000000000000000000000000000000000000000000000001"},
		{"7e22", "7e+22"},
		{"7.10e-22", "7.1e-22"},
		/* JCS texts of doubles at powers of two (checked against Node's String()) */
		{"5.684341886080802e-14", "5.684341886080802e-14"},
		{"5.960464477539063e-8", "5.960464477539063e-8"},
		{"6.189700196426902e+26", "6.189700196426902e+26"},
		{"0.30000000000000004", "0.30000000000000004"},
		{"999999999999999900000", "999999999999999900000"},
		{"1.5e-323", "1.5e-323"},
		{"-1.7976931348623157e+308", "-1.7976931348623157e+308"},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_canon(cases[i].in, strlen(cases[i].in), cases[i].want,
			     strlen(cases[i].want));
}

/* @p count copies of @p c appended to @p b. */
static void put_many(struct ledger_buf *b, char c, size_t count)
{
	size_t i;

	for (i = 0; i < count; i++)
		ledger_buf_putc(b, c);
}

/*
 * Megabyte numbers and exponents of a hundred thousand digits: read in
 * one pass, no int overflow, each gives its exact canonical text.
 */
static void test_jcs_number_huge_texts(void **state)
{
	const size_t big = 1000000, exp_len = 100000;
	struct ledger_buf in = LEDGER_BUF_INIT, want = LEDGER_BUF_INIT;
	enum ledger_err rc;
	char *text = NULL, *got = NULL, *w = NULL;
	size_t i, len, got_len, w_len;
	int round;

	(void)state;
	for (round = 0; round < 6; round++) {
		switch (round) {
		case 0: /* 0.(10^6 zeros)1e+1000001 is 1 */
			ledger_buf_puts(&in, "0.");
			put_many(&in, '0', big);
			ledger_buf_printf(&in, "1e+%zu", big + 1);
			ledger_buf_puts(&want, "1");
			break;
		case 1: /* 1(10^6 zeros)e-1000001 is 0.1 */
			ledger_buf_putc(&in, '1');
			put_many(&in, '0', big);
			ledger_buf_printf(&in, "e-%zu", big + 1);
			ledger_buf_puts(&want, "0.1");
			break;
		case 2: /* -0.0000000(10^6 digits): exponent form, every digit kept */
			ledger_buf_puts(&in, "-0.0000000");
			ledger_buf_puts(&want, "-1.");
			for (i = 0; i < big; i++) {
				ledger_buf_putc(&in, (char)('1' + i % 9));
				if (i > 0)
					ledger_buf_putc(&want, (char)('1' + i % 9));
			}
			ledger_buf_puts(&want, "e-8");
			break;
		case 3: /* 1e-(10^5 nines): kept */
			ledger_buf_puts(&in, "1e-");
			put_many(&in, '9', exp_len);
			ledger_buf_puts(&want, "1e-");
			put_many(&want, '9', exp_len);
			break;
		case 4: /* -0.000e(10^5 nines): zero */
			ledger_buf_puts(&in, "-0.000e");
			put_many(&in, '9', exp_len);
			ledger_buf_puts(&want, "0");
			break;
		case 5: /* 1e+(10^5 nines): beyond the range */
			ledger_buf_puts(&in, "1e+");
			put_many(&in, '9', exp_len);
			break;
		}
		text = ledger_buf_steal(&in, &len);
		assert_non_null(text);
		got = canon(text, len, DEPTH, &rc, &got_len);
		if (round == 5) {
			assert_int_equal(rc, LEDGER_ERR_INVALID);
		} else {
			w = ledger_buf_steal(&want, &w_len);
			assert_non_null(w);
			assert_int_equal(rc, LEDGER_OK);
			assert_int_equal(got_len, w_len);
			assert_memory_equal(got, w, w_len);
			free(w);
		}
		free(got);
		free(text);
	}
}

/*
 * Random spellings: the canonical text has exactly the value of the text it
 * came from (the same digits, point and sign), and is its own canonical form.
 */
static void test_jcs_number_random_values_kept(void **state)
{
	unsigned seed = 12345;
	int round;

	(void)state;
	for (round = 0; round < 20000; round++) {
		struct ledger_json_doc *a = NULL, *b = NULL;
		struct ledger_json_decimal x, y;
		char text[128], *c = NULL, *c2 = NULL;
		size_t pos = 0, c_len = 0, c2_len = 0, i, n;
		enum ledger_err rc;

		if (rand_r(&seed) % 3 == 0)
			text[pos++] = '-';
		n = 1 + (size_t)rand_r(&seed) % 30;
		for (i = 0; i < n; i++)
			text[pos++] = (char)('0' + rand_r(&seed) % 10);
		if (n > 1 && text[pos - n] == '0')
			text[pos - n] = '1';
		if (rand_r(&seed) % 2) {
			text[pos++] = '.';
			n = 1 + (size_t)rand_r(&seed) % 30;
			for (i = 0; i < n; i++)
				text[pos++] = (char)('0' + rand_r(&seed) % 10);
		}
		if (rand_r(&seed) % 2)
			pos += (size_t)snprintf(text + pos, sizeof(text) - pos, "e%s%d",
						rand_r(&seed) % 2 ? "-" : "+", rand_r(&seed) % 340);
		c = canon(text, pos, DEPTH, &rc, &c_len);
		if (rc != LEDGER_OK) {
			assert_int_equal(rc, LEDGER_ERR_INVALID);
			continue;
		}
		assert_int_equal(ledger_json_parse(text, pos, DEPTH, &a, NULL), LEDGER_OK);
		assert_int_equal(ledger_json_parse(c, c_len, DEPTH, &b, NULL), LEDGER_OK);
		assert_int_equal(ledger_json_number_decimal(ledger_json_root(a), &x), LEDGER_OK);
		assert_int_equal(ledger_json_number_decimal(ledger_json_root(b), &y), LEDGER_OK);
		if (x.negative != y.negative || x.count != y.count || x.point != y.point)
			fail_msg("%.*s became %s", (int)pos, text, c);
		for (i = 0; i < x.count; i++) {
			char dx = x.digits[i + (i >= x.before_dot)];
			char dy = y.digits[i + (i >= y.before_dot)];

			if (dx != dy)
				fail_msg("%.*s became %s", (int)pos, text, c);
		}
		c2 = canon(c, c_len, DEPTH, &rc, &c2_len);
		assert_int_equal(rc, LEDGER_OK);
		assert_int_equal(c2_len, c_len);
		assert_memory_equal(c2, c, c_len);
		ledger_json_free(a);
		ledger_json_free(b);
		free(c);
		free(c2);
	}
}

static void test_jcs_key_order_utf16(void **state)
{
	/* Bytewise UTF-8 order would put U+E000..U+FFFF before the astral keys. */
	static const char in[] =
		"{\"\\ue000\":0,\"\\ud83d\\ude02\":1,\"a\":2,\"\\u00e9\":3,\"\\uffff\":4,"
		"\"\\ud800\\udc00\":5,\"\":6,\"ab\":7,\"\\u0080\":8,\"\\ud7ff\":9,\"\\ufb33\":10,"
		"\"\\n\":11,\"A\":12,\"\\udbff\\udfff\":13}";
	static const char want[] =
		"{\"\":6,\"\\n\":11,\"A\":12,\"a\":2,\"ab\":7,\"\xc2\x80\":8,\"\xc3\xa9\":3,"
		"\"\xed\x9f\xbf\":9,\"\xf0\x90\x80\x80\":5,\"\xf0\x9f\x98\x82\":1,"
		"\"\xf4\x8f\xbf\xbf\":13,\"\xee\x80\x80\":0,\"\xef\xac\xb3\":10,\"\xef\xbf\xbf\":4}";

	(void)state;
	expect_canon(TEXT(in), TEXT(want));
	/* Shorter sorts first; then code units, not bytes, decide. */
	expect_canon(TEXT("{\"b\":1,\"a\":2,\"aa\":3,\"a\\u0000\":4,\"B\":5}"),
		     TEXT("{\"B\":5,\"a\":2,\"a\\u0000\":4,\"aa\":3,\"b\":1}"));
	expect_canon(TEXT("{\"\xef\xbf\xbd\":1,\"\xf0\x9f\x98\x80\":2}"),
		     TEXT("{\"\xf0\x9f\x98\x80\":2,\"\xef\xbf\xbd\":1}"));
}

static void test_jcs_unicode_escapes(void **state)
{
	static const struct {
		const char *in;
		size_t in_len;
		const char *want;
		size_t want_len;
	} cases[] = {
		{TEXT("\"\\u20ac\""), TEXT("\"\xe2\x82\xac\"")},
		{TEXT("\"\\u000F\\u000f\\u001F\""), TEXT("\"\\u000f\\u000f\\u001f\"")},
		{TEXT("\"\\u007f\\u0080\""), TEXT("\"\x7f\xc2\x80\"")},
		{TEXT("\"\\/\\b\\f\\n\\r\\t\\\"\\\\\""), TEXT("\"/\\b\\f\\n\\r\\t\\\"\\\\\"")},
		{TEXT("\"\\u0000\""), TEXT("\"\\u0000\"")},
		{TEXT("\"\\u0008\\u000C\""), TEXT("\"\\b\\f\"")},
		{TEXT("\"\\ud83d\\ude02\""), TEXT("\"\xf0\x9f\x98\x82\"")},
		{TEXT("\"\\u2028\\u2029\""), TEXT("\"\xe2\x80\xa8\xe2\x80\xa9\"")},
		{TEXT("\"A\\u030a\""), TEXT("\"A\xcc\x8a\"")},
		{TEXT("{\"\\u0061\\n\":\"\\u0062\"}"), TEXT("{\"a\\n\":\"b\"}")},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_canon(cases[i].in, cases[i].in_len, cases[i].want, cases[i].want_len);
}

static void test_jcs_numbers_in_documents(void **state)
{
	static const char *const too_big[] = {
		"1e400",
		"[1e400]",
		"{\"a\":[1,{\"b\":-1e400}]}",
		"1.7976931348623159e308",
	};
	size_t i;

	(void)state;
	expect_canon(TEXT("[-0, 0, -0.0e10, 1e21, 1E+21, 1e20, 999999999999999999999, 0.000001,"
			  " 1e-7, 1.0, 5e-324, 123456789012345678901234567890, 4.50, 2e-3,"
			  " 1e-400, -1.5e-7]"),
		     TEXT("[0,0,0,1e+21,1e+21,100000000000000000000,999999999999999999999,"
			  "0.000001,1e-7,1,5e-324,1.2345678901234567890123456789e+29,4.5,0.002,"
			  "1e-400,-1.5e-7]"));
	for (i = 0; i < sizeof(too_big) / sizeof(too_big[0]); i++) {
		enum ledger_err rc = LEDGER_OK;
		size_t len;

		assert_null(canon(too_big[i], strlen(too_big[i]), DEPTH, &rc, &len));
		assert_int_equal(rc, LEDGER_ERR_INVALID);
	}
}

static void test_jcs_scalars_and_nesting(void **state)
{
	(void)state;
	expect_canon(TEXT(" true "), TEXT("true"));
	expect_canon(TEXT("false"), TEXT("false"));
	expect_canon(TEXT("\nnull\n"), TEXT("null"));
	expect_canon(TEXT("\"x\""), TEXT("\"x\""));
	expect_canon(TEXT("[ ]"), TEXT("[]"));
	expect_canon(TEXT("{ }"), TEXT("{}"));
	expect_canon(TEXT("[ [ ] , { } , [ [ 1 ] ] , { \"z\" : { \"y\" : [ ] , \"x\" : { } } } ]"),
		     TEXT("[[],{},[[1]],{\"z\":{\"x\":{},\"y\":[]}}]"));
	expect_canon(
		TEXT("{\"b\":[{\"d\":1,\"c\":2},{\"f\":[true,false,null]}],\"a\":{\"c\":{}}}"),
		TEXT("{\"a\":{\"c\":{}},\"b\":[{\"c\":2,\"d\":1},{\"f\":[true,false,null]}]}"));
}

/* Deep documents are written without recursion on the C stack. */
static void test_jcs_deep_nesting(void **state)
{
	const size_t levels = 200000;
	struct ledger_buf b = LEDGER_BUF_INIT;
	enum ledger_err rc;
	char *text = NULL, *c = NULL;
	size_t len, c_len, i;

	(void)state;
	for (i = 0; i < levels; i++)
		ledger_buf_puts(&b, i % 2 ? "{\"k\":" : "[");
	ledger_buf_putc(&b, '1');
	for (i = levels; i-- > 0;)
		ledger_buf_putc(&b, i % 2 ? '}' : ']');
	text = ledger_buf_steal(&b, &len);
	assert_non_null(text);
	c = canon(text, len, (unsigned)levels, &rc, &c_len);
	assert_int_equal(rc, LEDGER_OK);
	assert_int_equal(c_len, len);
	assert_memory_equal(c, text, len);
	free(c);
	free(text);
}

static void test_jcs_large_object(void **state)
{
	const size_t count = 50000;
	struct ledger_buf b = LEDGER_BUF_INIT;
	struct ledger_json_doc *doc = NULL;
	const struct ledger_json_value *root = NULL;
	enum ledger_err rc;
	char *text = NULL, *c = NULL;
	size_t len, c_len, i;

	(void)state;
	ledger_buf_putc(&b, '{');
	for (i = 0; i < count; i++)
		ledger_buf_printf(&b, "%s\"k%06zu\":%zu", i ? "," : "", (i * 7919) % count, i);
	ledger_buf_putc(&b, '}');
	text = ledger_buf_steal(&b, &len);
	assert_non_null(text);
	c = canon(text, len, DEPTH, &rc, &c_len);
	assert_int_equal(rc, LEDGER_OK);
	assert_int_equal(ledger_json_parse(c, c_len, DEPTH, &doc, NULL), LEDGER_OK);
	root = ledger_json_root(doc);
	assert_int_equal(root->u.obj.count, count);
	for (i = 0; i < count; i++) {
		char want[16];

		snprintf(want, sizeof(want), "k%06zu", i);
		assert_string_equal(root->u.obj.members[i].key, want);
	}
	ledger_json_free(doc);
	free(c);
	free(text);
}

static void test_jcs_fingerprint(void **state)
{
	static const struct {
		const char *in;
		const char *want;
	} cases[] = {
		/* printf '%s' '{"a":1}' | sha256sum */
		{"{\"a\":1}", "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"},
		{" { \"a\" : 1.0 } ",
		 "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"},
		{"{\"a\":10e-1}",
		 "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"},
		/* printf '%s' '{"a":"é","b":[1e+21,0.000001,1e-7,null]}' | sha256sum */
		{"{\"b\":[1E21,1e-6,1e-7,null],\"a\":\"\\u00e9\"}",
		 "3944a3f2dd25a2204fc920a93fbe45c6cbe32cd10d1ec4cd827bd96059a137c1"},
		/* printf '%s' '"x"' | sha256sum */
		{"\"\\u0078\"", "ba2df4903a2c14e86dc3bcca58911b44ac1d2514b7227bf6eb08cfb978f55a1b"},
	};
	struct ledger_json_doc *doc = NULL;
	char hex[65];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(
			ledger_json_parse(cases[i].in, strlen(cases[i].in), DEPTH, &doc, NULL),
			LEDGER_OK);
		memset(hex, 'z', sizeof(hex));
		assert_int_equal(ledger_jcs_fingerprint(ledger_json_root(doc), hex), LEDGER_OK);
		assert_string_equal(hex, cases[i].want);
		ledger_json_free(doc);
	}
	assert_int_equal(ledger_json_parse(TEXT("{\"a\":1e999}"), DEPTH, &doc, NULL), LEDGER_OK);
	assert_int_equal(ledger_jcs_fingerprint(ledger_json_root(doc), hex), LEDGER_ERR_INVALID);
	ledger_json_free(doc);
	assert_int_equal(ledger_jcs_fingerprint(NULL, hex), LEDGER_ERR_INVALID);
}

/* A buffer that already failed an append stays failed and unwritten. */
static void test_jcs_failed_buffer(void **state)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	struct ledger_json_doc *doc = NULL;

	(void)state;
	assert_int_equal(ledger_json_parse(TEXT("{\"b\":[1],\"a\":2}"), DEPTH, &doc, NULL),
			 LEDGER_OK);
	b.oom = true;
	assert_int_equal(ledger_jcs_canonicalize(ledger_json_root(doc), &b), LEDGER_OK);
	assert_true(b.oom);
	assert_int_equal(b.len, 0);
	assert_null(ledger_buf_steal(&b, NULL));
	ledger_json_free(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jcs_rfc8785_vectors),
		cmocka_unit_test(test_jcs_number_vectors),
		cmocka_unit_test(test_jcs_exact_number_vectors),
		cmocka_unit_test(test_jcs_number_layout),
		cmocka_unit_test(test_jcs_number_huge_texts),
		cmocka_unit_test(test_jcs_number_random_values_kept),
		cmocka_unit_test(test_jcs_key_order_utf16),
		cmocka_unit_test(test_jcs_unicode_escapes),
		cmocka_unit_test(test_jcs_numbers_in_documents),
		cmocka_unit_test(test_jcs_scalars_and_nesting),
		cmocka_unit_test(test_jcs_deep_nesting),
		cmocka_unit_test(test_jcs_large_object),
		cmocka_unit_test(test_jcs_fingerprint),
		cmocka_unit_test(test_jcs_failed_buffer),
	};

	return cmocka_run_group_tests_name("jcs", tests, NULL, NULL);
}
