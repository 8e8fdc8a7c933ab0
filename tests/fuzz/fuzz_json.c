/*
 * tests/fuzz/fuzz_json.c: libFuzzer target for the JSON reader
 * (ledger/common/json.c and json_number.c). Any bytes in: the reader must
 * never crash, leak or read past them, and must agree with the small
 * recursive reader below, written from RFC 8259 and json.h's contract, on
 * accept or refuse, on the kind of a refusal and on every decoded value.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/buf.h"
#include "ledger/common/json.h"
#include "ledger/common/json_number.h"
#include "ledger/common/jsonw.h"

#define DEPTH 64 /* what ledgerd allows in a body (api/service/input.c) */
#define MAX_SAFE_INT 9007199254740991ULL

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant: say which, and abort so libFuzzer keeps the input. */
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_json: %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* --- the reference reader ------------------------------------------------ */

struct node {
	enum ledger_json_type type;
	size_t start, end; /* the value's span in the input */
	char *str;         /* strings: the decoded bytes */
	size_t len;
	struct node *kids; /* arrays and objects, in document order */
	char **keys;       /* objects: decoded keys, parallel to kids */
	size_t *klens;
	size_t n;
};

struct ref {
	const unsigned char *s;
	size_t len, pos;
	unsigned max_depth;
	int err; /* an enum ledger_json_error_kind, or -1 while there is none */
};

struct text {
	char *s;
	size_t len, cap;
};

static void put(struct text *t, const void *bytes, size_t n)
{
	if (t->len + n + 1 > t->cap) {
		t->cap = (t->len + n + 1) * 2;
		t->s = realloc(t->s, t->cap);
		CHECK(t->s != NULL);
	}
	memcpy(t->s + t->len, bytes, n);
	t->len += n;
	t->s[t->len] = '\0';
}

static bool refuse(struct ref *r, enum ledger_json_error_kind kind)
{
	if (r->err < 0)
		r->err = (int)kind;
	return false;
}

static void node_free(struct node *n)
{
	for (size_t i = 0; i < n->n; i++) {
		node_free(&n->kids[i]);
		if (n->keys)
			free(n->keys[i]);
	}
	free(n->kids);
	free(n->keys);
	free(n->klens);
	free(n->str);
	memset(n, 0, sizeof(*n));
}

static void ws(struct ref *r)
{
	while (r->pos < r->len && (r->s[r->pos] == ' ' || r->s[r->pos] == '\t' ||
				   r->s[r->pos] == '\n' || r->s[r->pos] == '\r'))
		r->pos++;
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Four hex digits at @p at, or -1. */
static long hex4_at(const struct ref *r, size_t at)
{
	long v = 0;

	if (at + 4 > r->len)
		return -1;
	for (size_t i = 0; i < 4; i++) {
		int h = hexval(r->s[at + i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

static void put_utf8(struct text *t, unsigned long cp)
{
	unsigned char b[4];

	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		put(t, b, 1);
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xc0 + cp / 64);
		b[1] = (unsigned char)(0x80 + cp % 64);
		put(t, b, 2);
	} else if (cp < 0x10000) {
		b[0] = (unsigned char)(0xe0 + cp / 4096);
		b[1] = (unsigned char)(0x80 + cp / 64 % 64);
		b[2] = (unsigned char)(0x80 + cp % 64);
		put(t, b, 3);
	} else {
		b[0] = (unsigned char)(0xf0 + cp / 262144);
		b[1] = (unsigned char)(0x80 + cp / 4096 % 64);
		b[2] = (unsigned char)(0x80 + cp / 64 % 64);
		b[3] = (unsigned char)(0x80 + cp % 64);
		put(t, b, 4);
	}
}

/*
 * One UTF-8 character at r->pos, decoded and then judged: the shortest
 * form, not a surrogate, at most U+10FFFF.
 */
static bool utf8_char(struct ref *r, struct text *t)
{
	unsigned char c = r->s[r->pos];
	unsigned long cp, min;
	size_t n;

	if (c >= 0xc0 && c < 0xe0) {
		n = 2, cp = c & 0x1f, min = 0x80;
	} else if (c >= 0xe0 && c < 0xf0) {
		n = 3, cp = c & 0x0f, min = 0x800;
	} else if (c >= 0xf0 && c < 0xf8) {
		n = 4, cp = c & 0x07, min = 0x10000;
	} else {
		return refuse(r, LEDGER_JSON_ERR_UTF8);
	}
	if (r->len - r->pos < n)
		return refuse(r, LEDGER_JSON_ERR_UTF8);
	for (size_t i = 1; i < n; i++) {
		if ((r->s[r->pos + i] & 0xc0) != 0x80)
			return refuse(r, LEDGER_JSON_ERR_UTF8);
		cp = cp * 64 + (r->s[r->pos + i] & 0x3f);
	}
	if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return refuse(r, LEDGER_JSON_ERR_UTF8);
	put(t, r->s + r->pos, n);
	r->pos += n;
	return true;
}

static bool escape(struct ref *r, struct text *t)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	long cp, lo;
	unsigned char c;

	if (r->pos + 1 >= r->len)
		return refuse(r, LEDGER_JSON_ERR_SYNTAX);
	c = r->s[r->pos + 1];
	if (c != 'u') {
		for (size_t i = 0; i < sizeof(from) - 1; i++) {
			if (from[i] == c) {
				put(t, &to[i], 1);
				r->pos += 2;
				return true;
			}
		}
		return refuse(r, LEDGER_JSON_ERR_SYNTAX);
	}
	cp = hex4_at(r, r->pos + 2);
	if (cp < 0)
		return refuse(r, LEDGER_JSON_ERR_SYNTAX);
	r->pos += 6;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return refuse(r, LEDGER_JSON_ERR_UTF8);
	if (cp >= 0xd800 && cp <= 0xdbff) {
		/* Only a \u escape of a low surrogate may follow. */
		if (r->pos + 1 >= r->len || r->s[r->pos] != '\\' || r->s[r->pos + 1] != 'u')
			return refuse(r, LEDGER_JSON_ERR_UTF8);
		lo = hex4_at(r, r->pos + 2);
		if (lo < 0xdc00 || lo > 0xdfff)
			return refuse(r, LEDGER_JSON_ERR_UTF8);
		cp = 0x10000 + (cp - 0xd800) * 1024 + (lo - 0xdc00);
		r->pos += 6;
	}
	put_utf8(t, (unsigned long)cp);
	return true;
}

/* The string at r->pos (its opening quote), decoded into *out. */
static bool string(struct ref *r, char **out, size_t *out_len)
{
	struct text t = {NULL, 0, 0};

	put(&t, "", 0);
	r->pos++;
	for (;;) {
		unsigned char c;

		if (r->pos == r->len) {
			refuse(r, LEDGER_JSON_ERR_SYNTAX);
			goto fail;
		}
		c = r->s[r->pos];
		if (c == '"')
			break;
		if (c == '\\') {
			if (!escape(r, &t))
				goto fail;
		} else if (c < 0x20) {
			refuse(r, LEDGER_JSON_ERR_SYNTAX);
			goto fail;
		} else if (c < 0x80) {
			put(&t, &c, 1);
			r->pos++;
		} else if (!utf8_char(r, &t)) {
			goto fail;
		}
	}
	r->pos++;
	*out = t.s;
	*out_len = t.len;
	return true;
fail:
	free(t.s);
	return false;
}

static bool digits(struct ref *r)
{
	size_t from = r->pos;

	while (r->pos < r->len && r->s[r->pos] >= '0' && r->s[r->pos] <= '9')
		r->pos++;
	return r->pos > from ? true : refuse(r, LEDGER_JSON_ERR_SYNTAX);
}

static bool number(struct ref *r)
{
	if (r->s[r->pos] == '-')
		r->pos++;
	if (r->pos < r->len && r->s[r->pos] == '0')
		r->pos++;
	else if (!digits(r))
		return false;
	if (r->pos < r->len && r->s[r->pos] == '.') {
		r->pos++;
		if (!digits(r))
			return false;
	}
	if (r->pos < r->len && (r->s[r->pos] == 'e' || r->s[r->pos] == 'E')) {
		r->pos++;
		if (r->pos < r->len && (r->s[r->pos] == '+' || r->s[r->pos] == '-'))
			r->pos++;
		if (!digits(r))
			return false;
	}
	return true;
}

static bool word(struct ref *r, const char *w)
{
	size_t n = strlen(w);

	if (r->len - r->pos < n || memcmp(r->s + r->pos, w, n) != 0)
		return refuse(r, LEDGER_JSON_ERR_SYNTAX);
	r->pos += n;
	return true;
}

static bool value(struct ref *r, struct node *v, unsigned open);

static void add_kid(struct node *v)
{
	v->kids = realloc(v->kids, (v->n + 1) * sizeof(*v->kids));
	CHECK(v->kids != NULL);
	memset(&v->kids[v->n], 0, sizeof(*v->kids));
	if (v->type == LEDGER_JSON_OBJECT) {
		v->keys = realloc(v->keys, (v->n + 1) * sizeof(*v->keys));
		v->klens = realloc(v->klens, (v->n + 1) * sizeof(*v->klens));
		CHECK(v->keys != NULL && v->klens != NULL);
		v->keys[v->n] = NULL;
	}
	v->n++;
}

/* An array or object at r->pos; @p open containers enclose it. */
static bool container(struct ref *r, struct node *v, unsigned open)
{
	bool object = r->s[r->pos] == '{';
	char close = object ? '}' : ']';

	if (open >= r->max_depth)
		return refuse(r, LEDGER_JSON_ERR_DEPTH);
	v->type = object ? LEDGER_JSON_OBJECT : LEDGER_JSON_ARRAY;
	r->pos++;
	ws(r);
	if (r->pos < r->len && r->s[r->pos] == close) {
		r->pos++;
		return true;
	}
	for (;;) {
		add_kid(v);
		if (object) {
			if (r->pos >= r->len || r->s[r->pos] != '"')
				return refuse(r, LEDGER_JSON_ERR_SYNTAX);
			if (!string(r, &v->keys[v->n - 1], &v->klens[v->n - 1]))
				return false;
			ws(r);
			if (r->pos >= r->len || r->s[r->pos] != ':')
				return refuse(r, LEDGER_JSON_ERR_SYNTAX);
			r->pos++;
			ws(r);
		}
		if (!value(r, &v->kids[v->n - 1], open + 1))
			return false;
		ws(r);
		if (r->pos < r->len && r->s[r->pos] == ',') {
			r->pos++;
			ws(r);
			continue;
		}
		if (r->pos < r->len && r->s[r->pos] == close)
			break;
		return refuse(r, LEDGER_JSON_ERR_SYNTAX);
	}
	r->pos++;
	/* Repeated keys are found once the object is whole, every pair compared. */
	for (size_t i = 0; object && i < v->n; i++)
		for (size_t j = 0; j < i; j++)
			if (v->klens[i] == v->klens[j] &&
			    memcmp(v->keys[i], v->keys[j], v->klens[i]) == 0)
				return refuse(r, LEDGER_JSON_ERR_DUPLICATE_KEY);
	return true;
}

static bool value(struct ref *r, struct node *v, unsigned open)
{
	unsigned char c;
	bool ok;

	if (r->pos >= r->len)
		return refuse(r, LEDGER_JSON_ERR_SYNTAX);
	v->start = r->pos;
	c = r->s[r->pos];
	if (c == '{' || c == '[') {
		ok = container(r, v, open);
	} else if (c == '"') {
		v->type = LEDGER_JSON_STRING;
		ok = string(r, &v->str, &v->len);
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		v->type = LEDGER_JSON_NUMBER;
		ok = number(r);
	} else if (c == 't') {
		v->type = LEDGER_JSON_TRUE;
		ok = word(r, "true");
	} else if (c == 'f') {
		v->type = LEDGER_JSON_FALSE;
		ok = word(r, "false");
	} else if (c == 'n') {
		v->type = LEDGER_JSON_NULL;
		ok = word(r, "null");
	} else {
		ok = refuse(r, LEDGER_JSON_ERR_SYNTAX);
	}
	v->end = r->pos;
	return ok;
}

/* @return -1 when the reference accepts @p s (then *root holds it), else the error kind. */
static int ref_parse(const uint8_t *s, size_t len, unsigned max_depth, struct node *root)
{
	struct ref r = {s, len, 0, max_depth, -1};

	memset(root, 0, sizeof(*root));
	ws(&r);
	if (value(&r, root, 0)) {
		ws(&r);
		if (r.pos != r.len)
			refuse(&r, LEDGER_JSON_ERR_SYNTAX);
	}
	return r.err;
}

/* --- checks of ledgerd's tree ---------------------------------------------- */

/* @p v holds what @p n holds; with @p base, at the same place of the input too. */
static void same_tree(const struct ledger_json_value *v, const struct node *n, const uint8_t *base)
{
	const uint8_t *raw = (const uint8_t *)v->raw;

	CHECK(v->type == n->type);
	CHECK(v->raw != NULL && v->raw_len > 0);
	if (base != NULL)
		CHECK(raw == base + n->start && v->raw_len == n->end - n->start);
	switch (v->type) {
	case LEDGER_JSON_NULL:
		CHECK(v->raw_len == 4 && memcmp(raw, "null", 4) == 0);
		break;
	case LEDGER_JSON_TRUE:
		CHECK(v->raw_len == 4 && memcmp(raw, "true", 4) == 0);
		break;
	case LEDGER_JSON_FALSE:
		CHECK(v->raw_len == 5 && memcmp(raw, "false", 5) == 0);
		break;
	case LEDGER_JSON_NUMBER:
		break;
	case LEDGER_JSON_STRING:
		CHECK(v->u.str.len == n->len && memcmp(v->u.str.s, n->str, n->len) == 0);
		CHECK(v->u.str.s[v->u.str.len] == '\0');
		break;
	case LEDGER_JSON_ARRAY:
		CHECK(v->u.arr.count == n->n);
		for (size_t i = 0; i < n->n; i++)
			same_tree(&v->u.arr.items[i], &n->kids[i], base);
		break;
	case LEDGER_JSON_OBJECT:
		CHECK(v->u.obj.count == n->n);
		for (size_t i = 0; i < n->n; i++) {
			const struct ledger_json_member *m = &v->u.obj.members[i];

			CHECK(m->key_len == n->klens[i] &&
			      memcmp(m->key, n->keys[i], m->key_len) == 0);
			CHECK(m->key[m->key_len] == '\0');
			/* A key without NUL is found by name: the one member of that key. */
			if (strlen(m->key) == m->key_len)
				CHECK(ledger_json_get(v, m->key) == &m->value);
			same_tree(&m->value, &n->kids[i], base);
		}
		break;
	}
}

/* Numbers of a tree: the JSON text, nowhere else, decides their value. */
static void same_numbers(const struct ledger_json_value *v)
{
	if (v->type == LEDGER_JSON_ARRAY) {
		for (size_t i = 0; i < v->u.arr.count; i++)
			same_numbers(&v->u.arr.items[i]);
		return;
	}
	if (v->type == LEDGER_JSON_OBJECT) {
		for (size_t i = 0; i < v->u.obj.count; i++)
			same_numbers(&v->u.obj.members[i].value);
		return;
	}
	if (v->type != LEDGER_JSON_NUMBER)
		return;

	char *text = strndup(v->raw, v->raw_len);
	double want, got = 0;
	enum ledger_err rc;
	uint64_t u = 0, exact = 0;
	bool plain = true, over = false;
	const uint64_t maxes[] = {UINT64_MAX, MAX_SAFE_INT, 100, 0};

	CHECK(text != NULL);
	/* glibc's strtod rounds the whole text correctly, however long. */
	want = strtod(text, NULL);
	rc = ledger_json_number_double(v, &got);
	CHECK(isinf(want) ? rc == LEDGER_ERR_INVALID : rc == LEDGER_OK);
	if (rc == LEDGER_OK)
		CHECK(memcmp(&got, &want, sizeof(got)) == 0);

	/* Plain integers: digits only, no leading zero, no sign. */
	for (size_t i = 0; i < v->raw_len; i++) {
		if (text[i] < '0' || text[i] > '9') {
			plain = false;
			break;
		}
		if (exact > (UINT64_MAX - (uint64_t)(text[i] - '0')) / 10)
			over = true;
		exact = exact * 10 + (uint64_t)(text[i] - '0');
	}
	if (v->raw_len > 1 && text[0] == '0')
		plain = false;
	for (size_t i = 0; i < sizeof(maxes) / sizeof(maxes[0]); i++) {
		rc = ledger_json_number_uint(v, maxes[i], &u);
		if (!plain)
			CHECK(rc == LEDGER_ERR_INVALID);
		else if (over || exact > maxes[i])
			CHECK(rc == LEDGER_ERR_LIMIT);
		else
			CHECK(rc == LEDGER_OK && u == exact);
	}
	free(text);
}

static unsigned depth_of(const struct node *n)
{
	unsigned d = 0;

	if (n->type != LEDGER_JSON_ARRAY && n->type != LEDGER_JSON_OBJECT)
		return 0;
	for (size_t i = 0; i < n->n; i++) {
		unsigned k = depth_of(&n->kids[i]);

		if (k > d)
			d = k;
	}
	return d + 1;
}

/* Writes @p v back as JSON text: the writer's escapes, the numbers' own text. */
static void rewrite(struct ledger_buf *b, const struct ledger_json_value *v)
{
	switch (v->type) {
	case LEDGER_JSON_NULL:
		ledger_buf_puts(b, "null");
		break;
	case LEDGER_JSON_TRUE:
		ledger_buf_puts(b, "true");
		break;
	case LEDGER_JSON_FALSE:
		ledger_buf_puts(b, "false");
		break;
	case LEDGER_JSON_NUMBER:
		ledger_buf_append(b, v->raw, v->raw_len);
		break;
	case LEDGER_JSON_STRING:
		ledger_jsonw_escape(b, v->u.str.s, v->u.str.len);
		break;
	case LEDGER_JSON_ARRAY:
		ledger_buf_putc(b, '[');
		for (size_t i = 0; i < v->u.arr.count; i++) {
			if (i)
				ledger_buf_putc(b, ',');
			rewrite(b, &v->u.arr.items[i]);
		}
		ledger_buf_putc(b, ']');
		break;
	case LEDGER_JSON_OBJECT:
		ledger_buf_putc(b, '{');
		for (size_t i = 0; i < v->u.obj.count; i++) {
			const struct ledger_json_member *m = &v->u.obj.members[i];

			if (i)
				ledger_buf_putc(b, ',');
			ledger_jsonw_escape(b, m->key, m->key_len);
			ledger_buf_putc(b, ':');
			rewrite(b, &m->value);
		}
		ledger_buf_putc(b, '}');
		break;
	}
}

static enum ledger_err parse(const uint8_t *data, size_t size, unsigned max_depth,
			     struct ledger_json_doc **doc, struct ledger_json_error *err)
{
	enum ledger_err rc;

	static char unset;

	memset(err, 0xa5, sizeof(*err));
	*doc = (struct ledger_json_doc *)(void *)&unset; /* a failure must leave NULL */
	rc = ledger_json_parse((const char *)data, size, max_depth, doc, err);
	if (rc == LEDGER_OK) {
		CHECK(*doc != NULL && ledger_json_root(*doc) != NULL);
	} else {
		CHECK(rc == LEDGER_ERR_INVALID);
		CHECK(*doc == NULL);
		CHECK(err->offset <= size);
		CHECK(memchr(err->message, '\0', sizeof(err->message)) != NULL);
	}
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ledger_json_doc *doc = NULL, *again = NULL;
	struct ledger_json_error err;
	struct ledger_buf b = LEDGER_BUF_INIT, b2 = LEDGER_BUF_INIT;
	struct node root;
	enum ledger_err rc;
	int want;
	unsigned d;

	want = ref_parse(data, size, DEPTH, &root);
	rc = parse(data, size, DEPTH, &doc, &err);
	if (want >= 0) {
		if (rc == LEDGER_OK)
			fprintf(stderr,
				"fuzz_json: accepted what the reference refuses (kind %d)\n", want);
		CHECK(rc != LEDGER_OK);
		if ((int)err.kind != want)
			fprintf(stderr, "fuzz_json: refused as kind %d (%s), the reference %d\n",
				(int)err.kind, err.message, want);
		CHECK((int)err.kind == want);
		goto out;
	}
	if (rc != LEDGER_OK)
		fprintf(stderr, "fuzz_json: refused what the reference accepts: %s at %zu\n",
			err.message, err.offset);
	CHECK(rc == LEDGER_OK);
	same_tree(ledger_json_root(doc), &root, data);
	same_numbers(ledger_json_root(doc));

	/* The depth limit is exact: the document's own depth passes, one less does not. */
	d = depth_of(&root);
	CHECK(d <= DEPTH);
	if (d > 0) {
		CHECK(parse(data, size, d, &again, &err) == LEDGER_OK);
		ledger_json_free(again);
		again = NULL;
		CHECK(parse(data, size, d - 1, &again, &err) == LEDGER_ERR_INVALID);
		CHECK(err.kind == LEDGER_JSON_ERR_DEPTH);
	}

	/* Written back with the writer's escapes, it reads as the same document. */
	rewrite(&b, ledger_json_root(doc));
	CHECK(!b.oom);
	CHECK(parse((const uint8_t *)b.data, b.len, DEPTH, &again, &err) == LEDGER_OK);
	same_tree(ledger_json_root(again), &root, NULL);
	/* and writes back to the same bytes. */
	rewrite(&b2, ledger_json_root(again));
	CHECK(!b2.oom && b2.len == b.len && memcmp(b2.data, b.data, b.len) == 0);
out:
	ledger_json_free(again);
	ledger_json_free(doc);
	ledger_buf_free(&b);
	ledger_buf_free(&b2);
	node_free(&root);
	return 0;
}
