/*
 * tests/unit/test_json.c: unit tests of the JSON reader (ledger/common/json.c), the
 * byte buffer and the writer (ledger/common/buf.c, ledger/common/jsonw.c). The reader is
 * the first code to see client bytes, so its refusals are pinned down here
 * one by one, with the offsets they report.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ledger/common/buf.h"
#include "ledger/common/json.h"
#include "ledger/common/json_number.h"
#include "ledger/common/jsonw.h"

#define DEPTH 64

/* A C string literal and its length, embedded NULs included. */
#define TEXT(s) s, sizeof(s) - 1

static struct ledger_json_doc *parse_ok(const char *text, size_t len, unsigned max_depth)
{
	struct ledger_json_doc *doc = NULL;
	struct ledger_json_error err;

	memset(&err, 0, sizeof(err));
	if (ledger_json_parse(text, len, max_depth, &doc, &err) != LEDGER_OK)
		fail_msg("refused %.*s: %s at %zu", (int)len, text, err.message, err.offset);
	assert_non_null(doc);
	return doc;
}

static void parse_bad(const char *text, size_t len, unsigned max_depth,
		      enum ledger_json_error_kind kind, size_t offset)
{
	struct ledger_json_doc *doc = (struct ledger_json_doc *)&doc;
	struct ledger_json_error err;

	memset(&err, 0, sizeof(err));
	if (ledger_json_parse(text, len, max_depth, &doc, &err) != LEDGER_ERR_INVALID)
		fail_msg("accepted %.*s", (int)len, text);
	assert_null(doc);
	if (err.kind != kind || err.offset != offset)
		fail_msg("%.*s: kind %d at %zu (%s), expected kind %d at %zu", (int)len, text,
			 (int)err.kind, err.offset, err.message, (int)kind, offset);
	assert_non_null(memchr(err.message, '\0', sizeof(err.message)));
	assert_true(strlen(err.message) > 0);
}

static void test_json_accepts_scalars(void **state)
{
	static const struct {
		const char *text;
		enum ledger_json_type type;
	} cases[] = {
		{"null", LEDGER_JSON_NULL},          {"true", LEDGER_JSON_TRUE},
		{"false", LEDGER_JSON_FALSE},        {"0", LEDGER_JSON_NUMBER},
		{"-0", LEDGER_JSON_NUMBER},          {"-0.0e-0", LEDGER_JSON_NUMBER},
		{"123.456E+78", LEDGER_JSON_NUMBER}, {"1e5", LEDGER_JSON_NUMBER},
		{"\"\"", LEDGER_JSON_STRING},        {"[]", LEDGER_JSON_ARRAY},
		{"{}", LEDGER_JSON_OBJECT},          {" \t\r\n[ \t\r\n] \t\r\n", LEDGER_JSON_ARRAY},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ledger_json_doc *doc = parse_ok(cases[i].text, strlen(cases[i].text), DEPTH);

		assert_int_equal(ledger_json_root(doc)->type, cases[i].type);
		ledger_json_free(doc);
	}
}

static void test_json_nested_structure(void **state)
{
	static const char text[] = "{\"a\":[1,{\"b\":null},[]],\"c\":{\"d\":\"e\"},\"f\":true}";
	struct ledger_json_doc *doc = parse_ok(TEXT(text), DEPTH);
	const struct ledger_json_value *root = ledger_json_root(doc);
	const struct ledger_json_value *a = NULL, *c = NULL;

	(void)state;
	assert_int_equal(root->type, LEDGER_JSON_OBJECT);
	assert_int_equal(root->u.obj.count, 3);
	/* Members stay in document order. */
	assert_string_equal(root->u.obj.members[0].key, "a");
	assert_string_equal(root->u.obj.members[1].key, "c");
	assert_string_equal(root->u.obj.members[2].key, "f");
	a = ledger_json_get(root, "a");
	assert_non_null(a);
	assert_int_equal(a->type, LEDGER_JSON_ARRAY);
	assert_int_equal(a->u.arr.count, 3);
	assert_int_equal(a->u.arr.items[0].type, LEDGER_JSON_NUMBER);
	assert_int_equal(a->u.arr.items[1].type, LEDGER_JSON_OBJECT);
	assert_int_equal(ledger_json_get(&a->u.arr.items[1], "b")->type, LEDGER_JSON_NULL);
	assert_int_equal(a->u.arr.items[2].type, LEDGER_JSON_ARRAY);
	assert_int_equal(a->u.arr.items[2].u.arr.count, 0);
	c = ledger_json_get(root, "c");
	assert_string_equal(ledger_json_get(c, "d")->u.str.s, "e");
	assert_int_equal(ledger_json_get(root, "f")->type, LEDGER_JSON_TRUE);
	ledger_json_free(doc);
}

static void test_json_get(void **state)
{
	static const char text[] = "{\"k\":1,\"k\\u0000x\":2,\"\":3}";
	struct ledger_json_doc *doc = parse_ok(TEXT(text), DEPTH);
	const struct ledger_json_value *root = ledger_json_root(doc);

	(void)state;
	assert_int_equal(ledger_json_get(root, "k")->raw_len, 1);
	assert_int_equal(ledger_json_get(root, "k")->raw[0], '1');
	assert_int_equal(ledger_json_get(root, "k\0x")->raw[0], '1');
	assert_int_equal(ledger_json_get(root, "")->raw[0], '3');
	assert_null(ledger_json_get(root, "x"));
	assert_null(ledger_json_get(root, "kx"));
	assert_null(ledger_json_get(&root->u.obj.members[0].value, "k"));
	assert_null(ledger_json_get(NULL, "k"));
	assert_null(ledger_json_get(root, NULL));
	assert_null(ledger_json_root(NULL));
	ledger_json_free(doc);
	ledger_json_free(NULL);
}

static void test_json_raw_spans(void **state)
{
	static const char text[] =
		" \n{ \"a\" : [ 1 , \"x\\n\" ,true ] ,\r\n\t\"b\" : { } , \"c\":-1.5e3 }\n ";
	struct ledger_json_doc *doc = parse_ok(TEXT(text), DEPTH);
	const struct ledger_json_value *root = ledger_json_root(doc);
	const struct ledger_json_value *a = ledger_json_get(root, "a");

	(void)state;
	assert_ptr_equal(root->raw, text + 2);
	assert_int_equal(root->raw_len, sizeof(text) - 1 - 4);
	assert_memory_equal(a->raw, "[ 1 , \"x\\n\" ,true ]", a->raw_len);
	assert_int_equal(a->raw_len, strlen("[ 1 , \"x\\n\" ,true ]"));
	assert_int_equal(a->u.arr.items[0].raw_len, 1);
	assert_memory_equal(a->u.arr.items[1].raw, "\"x\\n\"", 5);
	assert_int_equal(a->u.arr.items[1].raw_len, 5);
	assert_int_equal(a->u.arr.items[2].raw_len, 4);
	assert_int_equal(ledger_json_get(root, "b")->raw_len, 3);
	assert_memory_equal(ledger_json_get(root, "b")->raw, "{ }", 3);
	assert_int_equal(ledger_json_get(root, "c")->raw_len, 6);
	assert_memory_equal(ledger_json_get(root, "c")->raw, "-1.5e3", 6);
	ledger_json_free(doc);

	doc = parse_ok(TEXT("  -12.5e+3\t"), DEPTH);
	assert_int_equal(ledger_json_root(doc)->raw_len, 8);
	assert_memory_equal(ledger_json_root(doc)->raw, "-12.5e+3", 8);
	ledger_json_free(doc);
}

static void test_json_string_escapes(void **state)
{
	static const struct {
		const char *text;
		const char *want;
		size_t want_len;
	} cases[] = {
		{"\"plain\"", TEXT("plain")},
		{"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", TEXT("\"\\/\b\f\n\r\t")},
		{"\"\\u0041\\u00e9\\u00E9\"", TEXT("A\xc3\xa9\xc3\xa9")},
		{"\"\\u20ac\"", TEXT("\xe2\x82\xac")},
		{"\"\\uffff\"", TEXT("\xef\xbf\xbf")},
		{"\"\\ud83d\\ude02\"", TEXT("\xf0\x9f\x98\x82")},
		{"\"\\uD800\\uDC00\"", TEXT("\xf0\x90\x80\x80")},
		{"\"\\udbff\\udfff\"", TEXT("\xf4\x8f\xbf\xbf")},
		{"\"a\\u0000b\"", TEXT("a\0b")},
		{"\"\\u0000\"", TEXT("\0")},
		{"\"\x7f\"", TEXT("\x7f")},
		{"\"\xc2\x80\xdf\xbf\"", TEXT("\xc2\x80\xdf\xbf")},
		{"\"\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\"",
		 TEXT("\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80")},
		{"\"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\"", TEXT("\xf0\x90\x80\x80\xf4\x8f\xbf\xbf")},
		{"\"\"", TEXT("")},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ledger_json_doc *doc = parse_ok(cases[i].text, strlen(cases[i].text), DEPTH);
		const struct ledger_json_value *v = ledger_json_root(doc);

		assert_int_equal(v->type, LEDGER_JSON_STRING);
		assert_int_equal(v->u.str.len, cases[i].want_len);
		assert_memory_equal(v->u.str.s, cases[i].want, cases[i].want_len);
		assert_int_equal(v->u.str.s[v->u.str.len], '\0');
		assert_int_equal(v->raw_len, strlen(cases[i].text));
		ledger_json_free(doc);
	}
}

static void test_json_lone_surrogates(void **state)
{
	static const struct {
		const char *text;
		size_t offset;
	} cases[] = {
		{"\"\\ud800\"", 1},        {"\"\\udbff\"", 1},
		{"\"\\udc00\"", 1},        {"\"\\udfff\"", 1},
		{"\"ab\\ud800x\"", 3},     {"\"\\ud800\\u0041\"", 1},
		{"\"\\ud800\\ud800\"", 1}, {"\"\\ud800\\n\"", 1},
		{"\"\\ude02\\ud83d\"", 1}, {"\"\\ud83d\\ude02\\ude02\"", 13},
		{"[\"\\ud800", 2},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		parse_bad(cases[i].text, strlen(cases[i].text), DEPTH, LEDGER_JSON_ERR_UTF8,
			  cases[i].offset);
}

static void test_json_invalid_utf8(void **state)
{
	static const struct {
		const char *text;
		size_t len;
		size_t offset;
	} cases[] = {
		{TEXT("\"\x80\""), 1}, /* continuation byte alone */
		{TEXT("\"\xbf\""), 1},
		{TEXT("\"\xc0\x80\""), 1},     /* overlong NUL */
		{TEXT("\"\xc1\xbf\""), 1},     /* overlong ASCII */
		{TEXT("\"\xe0\x80\x80\""), 1}, /* overlong 3-byte */
		{TEXT("\"\xe0\x9f\xbf\""), 1},
		{TEXT("\"\xf0\x80\x80\x80\""), 1}, /* overlong 4-byte */
		{TEXT("\"\xf0\x8f\xbf\xbf\""), 1},
		{TEXT("\"\xed\xa0\x80\""), 1},             /* U+D800 encoded */
		{TEXT("\"\xed\xbf\xbf\""), 1},             /* U+DFFF encoded */
		{TEXT("\"\xed\xa0\xbd\xed\xb8\x82\""), 1}, /* CESU-8 pair */
		{TEXT("\"\xf4\x90\x80\x80\""), 1},         /* U+110000 */
		{TEXT("\"\xf5\x80\x80\x80\""), 1},
		{TEXT("\"\xf8\x88\x80\x80\x80\""), 1},
		{TEXT("\"\xfe\""), 1},
		{TEXT("\"\xff\""), 1},
		{TEXT("\"ok\xe2\x82\""), 3}, /* truncated before the quote */
		{TEXT("\"\xe2\x82"), 1},     /* truncated by the end */
		{TEXT("\"\xf0\x9f\x98"), 1},
		{TEXT("\"\xc3"), 1},
		{TEXT("\"\xc3\xa9\xc3\x28\""), 3}, /* bad continuation */
		{TEXT("{\"\xc3\":1}"), 2},         /* in a key */
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		parse_bad(cases[i].text, cases[i].len, DEPTH, LEDGER_JSON_ERR_UTF8,
			  cases[i].offset);
}

static void test_json_control_characters(void **state)
{
	unsigned c;

	(void)state;
	for (c = 0; c < 0x20; c++) {
		char text[4] = {'"', (char)c, '"', '\0'};

		parse_bad(text, 3, DEPTH, LEDGER_JSON_ERR_SYNTAX, 1);
	}
	parse_bad(TEXT("{\"a\tb\":1}"), DEPTH, LEDGER_JSON_ERR_SYNTAX, 3);
}

static void test_json_syntax_errors(void **state)
{
	static const struct {
		const char *text;
		size_t len;
		size_t offset;
	} cases[] = {
		{TEXT(" "), 1},
		{TEXT("\n\t "), 3},
		{TEXT("tru"), 0},
		{TEXT("nul"), 0},
		{TEXT("True"), 0},
		{TEXT("NaN"), 0},
		{TEXT("Infinity"), 0},
		{TEXT("-Infinity"), 1},
		{TEXT("'a'"), 0},
		{TEXT("\xef\xbb\xbf{}"), 0},
		{TEXT("\v1"), 0},
		{TEXT("\f1"), 0},
		{TEXT("\0"), 0},
		{TEXT("01"), 1},
		{TEXT("-01"), 2},
		{TEXT("1."), 2},
		{TEXT("1.e5"), 2},
		{TEXT(".5"), 0},
		{TEXT("-"), 1},
		{TEXT("- 1"), 1},
		{TEXT("+1"), 0},
		{TEXT("1e"), 2},
		{TEXT("1e+"), 3},
		{TEXT("1E-x"), 3},
		{TEXT("0x10"), 1},
		{TEXT("["), 1},
		{TEXT("[1"), 2},
		{TEXT("[1,"), 3},
		{TEXT("[1,]"), 3},
		{TEXT("[,1]"), 1},
		{TEXT("[1,,2]"), 3},
		{TEXT("[1 2]"), 3},
		{TEXT("[1}"), 2},
		{TEXT("{"), 1},
		{TEXT("{]"), 1},
		{TEXT("{\"a\"}"), 4},
		{TEXT("{\"a\" 1}"), 5},
		{TEXT("{\"a\":}"), 5},
		{TEXT("{\"a\":1,}"), 7},
		{TEXT("{\"a\":1]"), 6},
		{TEXT("{1:2}"), 1},
		{TEXT("{'a':1}"), 1},
		{TEXT("{\"a\":1 \"b\":2}"), 7},
		{TEXT("\"abc"), 4},
		{TEXT("\"abc\\"), 4},
		{TEXT("\"\\x\""), 1},
		{TEXT("\"\\U0041\""), 1},
		{TEXT("\"\\u12\""), 1},
		{TEXT("\"\\u12G4\""), 1},
		{TEXT("\"\\u004"), 1},
		{TEXT("\"\\\0\""), 1},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		parse_bad(cases[i].text, cases[i].len, DEPTH, LEDGER_JSON_ERR_SYNTAX,
			  cases[i].offset);
}

static void test_json_trailing_garbage(void **state)
{
	static const struct {
		const char *text;
		size_t len;
		size_t offset;
	} cases[] = {
		{TEXT("{}x"), 2},       {TEXT("[] []"), 3}, {TEXT("1 2"), 2},
		{TEXT("truefalse"), 4}, {TEXT("nullx"), 4}, {TEXT("\"a\"\"b\""), 3},
		{TEXT("{} \0"), 3},     {TEXT("[1]]"), 3},  {TEXT("0 ,"), 2},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		parse_bad(cases[i].text, cases[i].len, DEPTH, LEDGER_JSON_ERR_SYNTAX,
			  cases[i].offset);
}

static void test_json_empty_input(void **state)
{
	struct ledger_json_doc *doc = NULL;
	struct ledger_json_error err;

	(void)state;
	parse_bad("", 0, DEPTH, LEDGER_JSON_ERR_SYNTAX, 0);
	memset(&err, 0, sizeof(err));
	assert_int_equal(ledger_json_parse(NULL, 0, DEPTH, &doc, &err), LEDGER_ERR_INVALID);
	assert_null(doc);
	assert_int_equal(err.kind, LEDGER_JSON_ERR_SYNTAX);
	assert_int_equal(err.offset, 0);
	/* The length rules, not a NUL: "1" is all the parser may read here. */
	doc = parse_ok("12345", 1, DEPTH);
	assert_int_equal(ledger_json_root(doc)->raw_len, 1);
	ledger_json_free(doc);
}

static void test_json_error_without_err_out(void **state)
{
	struct ledger_json_doc *doc = NULL;

	(void)state;
	assert_int_equal(ledger_json_parse(TEXT("[1,"), DEPTH, &doc, NULL), LEDGER_ERR_INVALID);
	assert_null(doc);
	assert_int_equal(ledger_json_parse(TEXT("[1]"), DEPTH, &doc, NULL), LEDGER_OK);
	ledger_json_free(doc);
}

static void test_json_duplicate_keys(void **state)
{
	static const struct {
		const char *text;
		size_t len;
		size_t offset;
	} cases[] = {
		{TEXT("{\"a\":1,\"a\":2}"), 7},
		{TEXT("{\"a\":1,\"\\u0061\":2}"), 7},
		{TEXT("{\"\\u0061\":1,\"a\":2}"), 12},
		{TEXT("{\"\\/\":1,\"/\":2}"), 8},
		{TEXT("{\"\\ud83d\\ude02\":1,\"\xf0\x9f\x98\x82\":2}"), 18},
		{TEXT("{\"\":1,\"\":2}"), 6},
		{TEXT("{\"a\\u0000\":1,\"a\\u0000\":2}"), 13},
		{TEXT("{\"a\":1,\"b\":2,\"c\":3,\"b\":4,\"a\":5}"), 19},
		{TEXT("{\"x\":{\"b\":1,\"a\":2,\"b\":3}}"), 18},
		{TEXT("[{\"a\":1},{\"a\":1,\"a\":1}]"), 16},
	};
	static const char *const fine[] = {
		"{\"a\":1,\"b\":{\"a\":1},\"c\":[{\"a\":1},{\"a\":2}]}",
		"{\"a\\u0000b\":1,\"a\\u0000c\":2}",
		"{\"a\\u0000\":1,\"a\":2}",
		"{\"a\":1,\"A\":2,\"a \":3}",
		"{\"\xc3\xa9\":1,\"e\\u0301\":2}",
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		parse_bad(cases[i].text, cases[i].len, DEPTH, LEDGER_JSON_ERR_DUPLICATE_KEY,
			  cases[i].offset);
	for (i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
		ledger_json_free(parse_ok(fine[i], strlen(fine[i]), DEPTH));
}

static void test_json_duplicate_key_message_is_short(void **state)
{
	struct ledger_json_doc *doc = NULL;
	struct ledger_json_error err;
	struct ledger_buf b = LEDGER_BUF_INIT;
	char key[201];
	char *text = NULL;
	size_t len = 0;

	(void)state;
	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	ledger_buf_printf(&b, "{\"%s\":1,\"%s\":2}", key, key);
	text = ledger_buf_steal(&b, &len);
	assert_non_null(text);
	assert_int_equal(ledger_json_parse(text, len, DEPTH, &doc, &err), LEDGER_ERR_INVALID);
	assert_int_equal(err.kind, LEDGER_JSON_ERR_DUPLICATE_KEY);
	assert_int_equal(err.offset, 206);
	/* At most 32 bytes of the input are quoted back. */
	assert_non_null(strstr(err.message, "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"));
	assert_null(strstr(err.message, "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"));
	free(text);
}

/* A large object: duplicate detection must not be quadratic in its size. */
static void test_json_large_object(void **state)
{
	const size_t count = 200000;
	struct ledger_buf b = LEDGER_BUF_INIT;
	struct ledger_json_doc *doc = NULL;
	struct ledger_json_error err;
	const struct ledger_json_value *root = NULL;
	char *text = NULL;
	size_t len = 0, i, dup_at;
	clock_t t0;

	(void)state;
	ledger_buf_putc(&b, '{');
	for (i = 0; i < count; i++)
		ledger_buf_printf(&b, "%s\"k%zu\":%zu", i ? "," : "", (i * 7919) % count, i);
	ledger_buf_putc(&b, '}');
	text = ledger_buf_steal(&b, &len);
	assert_non_null(text);
	t0 = clock();
	doc = parse_ok(text, len, DEPTH);
	root = ledger_json_root(doc);
	assert_int_equal(root->u.obj.count, count);
	for (i = 0; i < count; i += count / 10) {
		char want[32];

		snprintf(want, sizeof(want), "k%zu", (i * 7919) % count);
		assert_string_equal(root->u.obj.members[i].key, want);
	}
	ledger_json_free(doc);

	/* The same with the last key repeating the first one. */
	text[len - 1] = '\0';
	ledger_buf_puts(&b, text);
	dup_at = b.len + 1;
	ledger_buf_puts(&b, ",\"k0\":0}");
	free(text);
	text = ledger_buf_steal(&b, &len);
	assert_non_null(text);
	assert_int_equal(ledger_json_parse(text, len, DEPTH, &doc, &err), LEDGER_ERR_INVALID);
	assert_int_equal(err.kind, LEDGER_JSON_ERR_DUPLICATE_KEY);
	assert_int_equal(err.offset, dup_at);
	/* Generous: a quadratic check would take minutes here. */
	assert_true((double)(clock() - t0) / CLOCKS_PER_SEC < 20.0);
	free(text);
}

/* "[[[...]]]" or "{"a":{"a":...}}" of @p levels, 0 giving "0". */
static char *nested(size_t levels, bool objects, size_t *len)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	size_t i;

	for (i = 0; i < levels; i++)
		ledger_buf_puts(&b, objects ? "{\"a\":" : "[");
	ledger_buf_putc(&b, '0');
	for (i = 0; i < levels; i++)
		ledger_buf_putc(&b, objects ? '}' : ']');
	return ledger_buf_steal(&b, len);
}

static void test_json_depth_limit(void **state)
{
	static const unsigned limits[] = {1, 2, 3, 16, 64, 1000};
	size_t i, len;
	int objects;

	(void)state;
	for (i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		for (objects = 0; objects < 2; objects++) {
			char *text = nested(limits[i], objects, &len);

			assert_non_null(text);
			ledger_json_free(parse_ok(text, len, limits[i]));
			free(text);
			text = nested(limits[i] + 1, objects, &len);
			assert_non_null(text);
			/* The offending bracket is the (max_depth+1)th opener. */
			parse_bad(text, len, limits[i], LEDGER_JSON_ERR_DEPTH,
				  objects ? limits[i] * 5 : limits[i]);
			free(text);
		}
	}
	/* Siblings do not add up: depth is nesting, not count. */
	ledger_json_free(parse_ok(TEXT("[[1],[2],{\"a\":[]},[[]]]"), 3));
	parse_bad(TEXT("[[1],[2],{\"a\":[[]]}]"), 3, LEDGER_JSON_ERR_DEPTH, 15);
	/* max_depth 0 allows scalars only. */
	ledger_json_free(parse_ok(TEXT("\"x\""), 0));
	parse_bad(TEXT("[]"), 0, LEDGER_JSON_ERR_DEPTH, 0);
	parse_bad(TEXT(" {}"), 0, LEDGER_JSON_ERR_DEPTH, 1);
}

/* Neither a huge limit nor a huge nesting may exhaust the C stack. */
static void test_json_deep_nesting(void **state)
{
	const size_t levels = 1000000;
	char *text = NULL;
	size_t len;

	(void)state;
	text = nested(levels, false, &len);
	assert_non_null(text);
	ledger_json_free(parse_ok(text, len, UINT_MAX));
	parse_bad(text, len - 1, UINT_MAX, LEDGER_JSON_ERR_SYNTAX, len - 1);
	parse_bad(text, len, 1000, LEDGER_JSON_ERR_DEPTH, 1000);
	free(text);
}

/* The number value of @p text parsed as a whole document. */
static enum ledger_err to_double(const char *text, double *out)
{
	struct ledger_json_doc *doc = parse_ok(text, strlen(text), DEPTH);
	enum ledger_err rc = ledger_json_number_double(ledger_json_root(doc), out);

	ledger_json_free(doc);
	return rc;
}

static void test_json_number_double(void **state)
{
	static const struct {
		const char *text;
		double want;
	} cases[] = {
		{"0", 0.0},
		{"1", 1.0},
		{"-1.5", -1.5},
		{"0.1", 0.1},
		{"1E2", 100.0},
		{"1e-2", 0.01},
		{"123456789012345678901234567890", 123456789012345678901234567890.0},
		{"9007199254740993", 9007199254740992.0}, /* a tie: even wins */
		{"9007199254740995", 9007199254740996.0},
		{"5e-324", 4.9406564584124654e-324},
		{"2.4703282292062328e-324", 4.9406564584124654e-324},
		{"2.4703282292062327e-324", 0.0},
		{"1e-400", 0.0},
		{"2.2250738585072014e-308", 2.2250738585072014e-308},
		{"1.7976931348623157e308", 1.7976931348623157e308},
		{"1.7976931348623158e308", 1.7976931348623157e308},
		{"0e999999999999999999999999", 0.0},
		{"0.000000000000000000000000000000000000000000001e45", 1.0},
		{"1000000000000000000000000000000000000000000000e-44", 10.0},
	};
	size_t i;
	double d;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(to_double(cases[i].text, &d), LEDGER_OK);
		if (memcmp(&d, &cases[i].want, sizeof(d)) != 0)
			fail_msg("%s gave %.17g", cases[i].text, d);
	}
	assert_int_equal(to_double("-0", &d), LEDGER_OK);
	assert_true(d == 0 && signbit(d));
	assert_int_equal(to_double("-0.0e7", &d), LEDGER_OK);
	assert_true(d == 0 && signbit(d));
	assert_int_equal(to_double("-1e-400", &d), LEDGER_OK);
	assert_true(d == 0 && signbit(d));
}

static void test_json_number_double_overflow(void **state)
{
	static const char *const cases[] = {
		"1e400",
		"-1e400",
		"1.7976931348623159e308",
		"1e99999999999999999999999",
	};
	struct ledger_json_doc *doc = NULL;
	size_t i;
	double d = 42;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(to_double(cases[i], &d), LEDGER_ERR_INVALID);
	assert_true(d == 42);
	doc = parse_ok(TEXT("[\"1\",true]"), DEPTH);
	assert_int_equal(ledger_json_number_double(ledger_json_root(doc), &d), LEDGER_ERR_INVALID);
	assert_int_equal(ledger_json_number_double(&ledger_json_root(doc)->u.arr.items[0], &d),
			 LEDGER_ERR_INVALID);
	assert_int_equal(ledger_json_number_double(NULL, &d), LEDGER_ERR_INVALID);
	ledger_json_free(doc);
}

/* Texts far longer than any double needs still round correctly. */
static void test_json_number_double_long_text(void **state)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	char *text = NULL;
	double d;
	size_t i;

	(void)state;
	/* 2^53 + 1, a tie, then a nonzero digit 2000 places on: rounds up. */
	ledger_buf_puts(&b, "9007199254740993.");
	for (i = 0; i < 2000; i++)
		ledger_buf_putc(&b, '0');
	ledger_buf_putc(&b, '1');
	text = ledger_buf_steal(&b, NULL);
	assert_int_equal(to_double(text, &d), LEDGER_OK);
	assert_true(d == 9007199254740994.0);
	text[strlen(text) - 1] = '0';
	assert_int_equal(to_double(text, &d), LEDGER_OK);
	assert_true(d == 9007199254740992.0);
	free(text);

	/* 1 followed by 400 zeros overflows; 0.(400 zeros)1 underflows. */
	ledger_buf_putc(&b, '1');
	for (i = 0; i < 400; i++)
		ledger_buf_putc(&b, '0');
	text = ledger_buf_steal(&b, NULL);
	assert_int_equal(to_double(text, &d), LEDGER_ERR_INVALID);
	free(text);
	ledger_buf_puts(&b, "0.");
	for (i = 0; i < 400; i++)
		ledger_buf_putc(&b, '0');
	ledger_buf_putc(&b, '1');
	text = ledger_buf_steal(&b, NULL);
	assert_int_equal(to_double(text, &d), LEDGER_OK);
	assert_true(d == 0);
	free(text);

	/* 3000 significant digits of 1/3, scaled: still the nearest double. */
	ledger_buf_puts(&b, "0.");
	for (i = 0; i < 3000; i++)
		ledger_buf_putc(&b, '3');
	ledger_buf_puts(&b, "e1");
	text = ledger_buf_steal(&b, NULL);
	assert_int_equal(to_double(text, &d), LEDGER_OK);
	assert_true(d == 10.0 / 3.0);
	free(text);
}

/*
 * The exact value of a number text, row by row: sign, significant digits
 * (read around the '.'), ECMAScript's point, or the long negative exponent
 * kept as text; and what is beyond the double range.
 */
static void test_json_number_decimal(void **state)
{
	static const struct {
		const char *text;
		enum ledger_err rc;
		bool negative;
		const char *digits; /* "" for zero */
		int64_t point;
		const char *tiny_exp; /* NULL: none */
	} cases[] = {
		{"0", LEDGER_OK, false, "", 0, NULL},
		{"-0.000e-99999999999999999999", LEDGER_OK, false, "", 0, NULL},
		{"0e99999999999999999999", LEDGER_OK, false, "", 0, NULL},
		{"1", LEDGER_OK, false, "1", 1, NULL},
		{"-120.0500", LEDGER_OK, true, "12005", 3, NULL},
		{"0.00120", LEDGER_OK, false, "12", -2, NULL},
		{"100", LEDGER_OK, false, "1", 3, NULL},
		{"100.000", LEDGER_OK, false, "1", 3, NULL},
		{"1.5E+2", LEDGER_OK, false, "15", 3, NULL},
		{"15e-1", LEDGER_OK, false, "15", 1, NULL},
		{"9007199254740993", LEDGER_OK, false, "9007199254740993", 16, NULL},
		{"1e-400", LEDGER_OK, false, "1", -399, NULL},
		{"0.001e999999999999999999", LEDGER_ERR_INVALID, false, "", 0, NULL},
		{"0.001e-999999999999999999", LEDGER_OK, false, "1", -1000000000000000001LL, NULL},
		{"12.3e-0001234567890123456789", LEDGER_OK, false, "123", 2, "1234567890123456789"},
		{"-5e-10000000000000000000", LEDGER_OK, true, "5", 1, "10000000000000000000"},
		{"1e400", LEDGER_ERR_INVALID, false, "", 0, NULL},
		{"1e308", LEDGER_OK, false, "1", 309, NULL},
		{"1.7976931348623158e308", LEDGER_OK, false, "17976931348623158", 309, NULL},
		{"1.7976931348623159e308", LEDGER_ERR_INVALID, false, "", 0, NULL},
		{"-1e309", LEDGER_ERR_INVALID, false, "", 0, NULL},
		{"1e1000000000000000000", LEDGER_ERR_INVALID, false, "", 0, NULL},
		{"\"1\"", LEDGER_ERR_INVALID, false, "", 0, NULL},
	};
	size_t i, j;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ledger_json_doc *doc = parse_ok(cases[i].text, strlen(cases[i].text), DEPTH);
		struct ledger_json_decimal d;
		enum ledger_err rc = ledger_json_number_decimal(ledger_json_root(doc), &d);
		char digits[64];

		if (rc != cases[i].rc)
			fail_msg("%s: %d, expected %d", cases[i].text, (int)rc, (int)cases[i].rc);
		if (rc == LEDGER_OK) {
			assert_true(d.count < sizeof(digits));
			for (j = 0; j < d.count; j++)
				digits[j] = d.digits[j + (j >= d.before_dot)];
			digits[d.count] = '\0';
			if (d.negative != cases[i].negative ||
			    strcmp(digits, cases[i].digits) != 0 ||
			    (d.count > 0 && d.point != cases[i].point))
				fail_msg("%s: %s0.%s x 10^%lld", cases[i].text,
					 d.negative ? "-" : "", digits, (long long)d.point);
			if (cases[i].tiny_exp == NULL) {
				assert_null(d.tiny_exp);
			} else {
				assert_int_equal(d.tiny_exp_len, strlen(cases[i].tiny_exp));
				assert_memory_equal(d.tiny_exp, cases[i].tiny_exp, d.tiny_exp_len);
			}
		}
		ledger_json_free(doc);
	}
	assert_int_equal(ledger_json_number_decimal(NULL, NULL), LEDGER_ERR_INVALID);
}

static void test_json_number_uint(void **state)
{
	static const struct {
		const char *text;
		uint64_t max;
		enum ledger_err rc;
		uint64_t want;
	} cases[] = {
		{"0", 0, LEDGER_OK, 0},
		{"1", 0, LEDGER_ERR_LIMIT, 0},
		{"7", 9, LEDGER_OK, 7},
		{"10", 9, LEDGER_ERR_LIMIT, 0},
		{"9007199254740991", 9007199254740991ULL, LEDGER_OK, 9007199254740991ULL},
		{"9007199254740992", 9007199254740991ULL, LEDGER_ERR_LIMIT, 0},
		{"18446744073709551615", UINT64_MAX, LEDGER_OK, UINT64_MAX},
		{"18446744073709551616", UINT64_MAX, LEDGER_ERR_LIMIT, 0},
		{"99999999999999999999", UINT64_MAX, LEDGER_ERR_LIMIT, 0},
		{"1000000000000000000000000000000000000000000000000000000000000000000000000000000"
		 "000000000000000000000",
		 UINT64_MAX, LEDGER_ERR_LIMIT, 0},
		{"-0", UINT64_MAX, LEDGER_ERR_INVALID, 0},
		{"-1", UINT64_MAX, LEDGER_ERR_INVALID, 0},
		{"1.0", UINT64_MAX, LEDGER_ERR_INVALID, 0},
		{"1e3", UINT64_MAX, LEDGER_ERR_INVALID, 0},
		{"1E3", UINT64_MAX, LEDGER_ERR_INVALID, 0},
		{"99999999999999999999.5", UINT64_MAX, LEDGER_ERR_INVALID, 0},
		{"\"1\"", UINT64_MAX, LEDGER_ERR_INVALID, 0},
		{"true", UINT64_MAX, LEDGER_ERR_INVALID, 0},
		{"[1]", UINT64_MAX, LEDGER_ERR_INVALID, 0},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ledger_json_doc *doc = parse_ok(cases[i].text, strlen(cases[i].text), DEPTH);
		uint64_t v = 12345;
		enum ledger_err rc =
			ledger_json_number_uint(ledger_json_root(doc), cases[i].max, &v);

		if (rc != cases[i].rc)
			fail_msg("%s: %d, expected %d", cases[i].text, (int)rc, (int)cases[i].rc);
		assert_int_equal(v, cases[i].rc == LEDGER_OK ? cases[i].want : 12345);
		ledger_json_free(doc);
	}
}

/* A value the parser never made: "01" is not a number text it accepts. */
static void test_json_number_uint_leading_zero(void **state)
{
	struct ledger_json_value v;
	uint64_t out = 0;

	(void)state;
	memset(&v, 0, sizeof(v));
	v.type = LEDGER_JSON_NUMBER;
	v.raw = "01";
	v.raw_len = 2;
	assert_int_equal(ledger_json_number_uint(&v, UINT64_MAX, &out), LEDGER_ERR_INVALID);
	v.raw_len = 0;
	assert_int_equal(ledger_json_number_uint(&v, UINT64_MAX, &out), LEDGER_ERR_INVALID);
	assert_int_equal(ledger_json_number_uint(NULL, UINT64_MAX, &out), LEDGER_ERR_INVALID);
	parse_bad(TEXT("01"), DEPTH, LEDGER_JSON_ERR_SYNTAX, 1);
}

static void test_json_buf(void **state)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	char big[5000];
	char *s = NULL;
	size_t len = 99;

	(void)state;
	s = ledger_buf_steal(&b, &len);
	assert_non_null(s);
	assert_string_equal(s, "");
	assert_int_equal(len, 0);
	free(s);

	ledger_buf_append(&b, "a\0b", 3);
	ledger_buf_putc(&b, 'c');
	ledger_buf_puts(&b, "de");
	ledger_buf_printf(&b, "%d-%s", 42, "x");
	assert_int_equal(b.len, 10);
	assert_memory_equal(b.data, "a\0bcde42-x", 10);
	assert_int_equal(b.data[b.len], '\0');
	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ledger_buf_printf(&b, "[%s]", big);
	assert_int_equal(b.len, 10 + sizeof(big) + 1);
	assert_int_equal(b.data[b.len - 1], ']');
	assert_int_equal(b.data[b.len], '\0');
	s = ledger_buf_steal(&b, &len);
	assert_int_equal(len, 10 + sizeof(big) + 1);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	free(s);

	/* After a failed append the buffer gives nothing back. */
	ledger_buf_puts(&b, "partial");
	b.oom = true;
	ledger_buf_puts(&b, "more");
	assert_int_equal(b.len, 7);
	assert_null(ledger_buf_steal(&b, &len));
	assert_int_equal(len, 0);
	assert_false(b.oom);
	ledger_buf_free(&b);
	ledger_buf_free(NULL);
}

static void test_json_writer_commas(void **state)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	struct ledger_json_doc *doc = NULL;
	char *s = NULL;
	size_t len;

	(void)state;
	ledger_jsonw_init(&w, &b);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "a");
	ledger_jsonw_int(&w, 1);
	ledger_jsonw_key(&w, "b");
	ledger_jsonw_array_begin(&w);
	ledger_jsonw_int(&w, INT64_MIN);
	ledger_jsonw_int(&w, INT64_MAX);
	ledger_jsonw_bool(&w, true);
	ledger_jsonw_bool(&w, false);
	ledger_jsonw_null(&w);
	ledger_jsonw_array_begin(&w);
	ledger_jsonw_array_end(&w);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_object_end(&w);
	ledger_jsonw_string(&w, NULL);
	ledger_jsonw_raw(&w, TEXT("{\"x\": [1, 2]}"));
	ledger_jsonw_array_end(&w);
	ledger_jsonw_key(&w, "c");
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "d");
	ledger_jsonw_string(&w, "e");
	ledger_jsonw_key(&w, "f");
	ledger_jsonw_string_n(&w, "g\0h", 3);
	ledger_jsonw_object_end(&w);
	ledger_jsonw_key(&w, "");
	ledger_jsonw_raw(&w, TEXT("0"));
	ledger_jsonw_object_end(&w);
	assert_int_equal(w.depth, 0);
	s = ledger_buf_steal(&b, &len);
	assert_string_equal(s, "{\"a\":1,\"b\":[-9223372036854775808,9223372036854775807,true,"
			       "false,null,[],{},null,{\"x\": [1, 2]}],\"c\":{\"d\":\"e\","
			       "\"f\":\"g\\u0000h\"},\"\":0}");
	/* What the writer writes, the reader reads. */
	doc = parse_ok(s, len, DEPTH);
	ledger_json_free(doc);
	free(s);

	/* A top-level scalar, and top-level containers. */
	ledger_jsonw_init(&w, &b);
	ledger_jsonw_string(&w, "x");
	s = ledger_buf_steal(&b, NULL);
	assert_string_equal(s, "\"x\"");
	free(s);
	ledger_jsonw_init(&w, &b);
	ledger_jsonw_array_begin(&w);
	ledger_jsonw_array_begin(&w);
	ledger_jsonw_int(&w, 1);
	ledger_jsonw_array_end(&w);
	ledger_jsonw_array_begin(&w);
	ledger_jsonw_int(&w, 2);
	ledger_jsonw_int(&w, 3);
	ledger_jsonw_array_end(&w);
	ledger_jsonw_array_end(&w);
	s = ledger_buf_steal(&b, NULL);
	assert_string_equal(s, "[[1],[2,3]]");
	free(s);
}

static void test_json_writer_escaping(void **state)
{
	static const struct {
		const char *in;
		size_t in_len;
		const char *want;
	} cases[] = {
		{TEXT(""), "\"\""},
		{TEXT("plain text"), "\"plain text\""},
		{TEXT("\"\\/"), "\"\\\"\\\\/\""},
		{TEXT("\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\""},
		{TEXT("\x01\x0b\x1f\x1e"), "\"\\u0001\\u000b\\u001f\\u001e\""},
		{TEXT("\0"), "\"\\u0000\""},
		{TEXT("a\0b"), "\"a\\u0000b\""},
		{TEXT("\x7f"), "\"\x7f\""},
		{TEXT("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x82"),
		 "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x82\""},
		{TEXT("\xe2\x80\xa8</script>"), "\"\xe2\x80\xa8</script>\""},
		{TEXT("x\"y\x1a"), "\"x\\\"y\\u001a\""},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ledger_buf b = LEDGER_BUF_INIT;
		char *s = NULL;

		ledger_jsonw_escape(&b, cases[i].in, cases[i].in_len);
		s = ledger_buf_steal(&b, NULL);
		assert_string_equal(s, cases[i].want);
		free(s);
	}
}

static void test_json_writer_escapes_keys(void **state)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	char *s = NULL;

	(void)state;
	ledger_jsonw_init(&w, &b);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "a\"b\n");
	ledger_jsonw_string(&w, "\t");
	ledger_jsonw_object_end(&w);
	s = ledger_buf_steal(&b, NULL);
	assert_string_equal(s, "{\"a\\\"b\\n\":\"\\t\"}");
	free(s);
}

/* Runs @p body in a child and reports whether it died of abort(). */
static bool aborts(void (*body)(void))
{
	pid_t pid;
	int status = 0;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Keep the intended abort from leaving a core file behind. */
		struct rlimit no_core = {0, 0};

		setrlimit(RLIMIT_CORE, &no_core);
		body();
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void write_nested(unsigned levels)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	unsigned i;

	ledger_jsonw_init(&w, &b);
	for (i = 0; i < levels; i++)
		ledger_jsonw_array_begin(&w);
	for (i = 0; i < levels; i++)
		ledger_jsonw_array_end(&w);
	ledger_buf_free(&b);
}

static void write_max_depth(void)
{
	write_nested(LEDGER_JSONW_MAX_DEPTH);
}

static void write_past_max_depth(void)
{
	write_nested(LEDGER_JSONW_MAX_DEPTH + 1);
}

static void close_unopened(void)
{
	struct ledger_buf b = LEDGER_BUF_INIT;
	struct ledger_jsonw w;

	ledger_jsonw_init(&w, &b);
	ledger_jsonw_object_end(&w);
	ledger_buf_free(&b);
}

static void test_json_writer_depth(void **state)
{
	(void)state;
	assert_false(aborts(write_max_depth));
	assert_true(aborts(write_past_max_depth));
	assert_true(aborts(close_unopened));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_accepts_scalars),
		cmocka_unit_test(test_json_nested_structure),
		cmocka_unit_test(test_json_get),
		cmocka_unit_test(test_json_raw_spans),
		cmocka_unit_test(test_json_string_escapes),
		cmocka_unit_test(test_json_lone_surrogates),
		cmocka_unit_test(test_json_invalid_utf8),
		cmocka_unit_test(test_json_control_characters),
		cmocka_unit_test(test_json_syntax_errors),
		cmocka_unit_test(test_json_trailing_garbage),
		cmocka_unit_test(test_json_empty_input),
		cmocka_unit_test(test_json_error_without_err_out),
		cmocka_unit_test(test_json_duplicate_keys),
		cmocka_unit_test(test_json_duplicate_key_message_is_short),
		cmocka_unit_test(test_json_large_object),
		cmocka_unit_test(test_json_depth_limit),
		cmocka_unit_test(test_json_deep_nesting),
		cmocka_unit_test(test_json_number_double),
		cmocka_unit_test(test_json_number_double_overflow),
		cmocka_unit_test(test_json_number_double_long_text),
		cmocka_unit_test(test_json_number_decimal),
		cmocka_unit_test(test_json_number_uint),
		cmocka_unit_test(test_json_number_uint_leading_zero),
		cmocka_unit_test(test_json_buf),
		cmocka_unit_test(test_json_writer_commas),
		cmocka_unit_test(test_json_writer_escaping),
		cmocka_unit_test(test_json_writer_escapes_keys),
		cmocka_unit_test(test_json_writer_depth),
	};

	return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}
