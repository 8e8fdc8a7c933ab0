/*
 * ledger/common/json.c: the strict JSON reader. It is iterative (an explicit stack
 * of open containers) so no input and no max_depth can exhaust the C stack,
 * and every value lives in one arena owned by the document so that freeing
 * a document, complete or abandoned half-way by an error, is one call.
 */
#include "ledger/common/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Blocks start small (most documents are small) and double up to a cap. */
#define ARENA_FIRST_UNITS 64
#define ARENA_MAX_UNITS 65536

struct block {
	struct block *next;
	size_t cap;  /* in units of max_align_t */
	size_t used; /* likewise */
	max_align_t data[];
};

struct ledger_json_doc {
	struct block *blocks; /* the head is the one still being filled */
	struct ledger_json_value root;
};

static void *arena_alloc(struct ledger_json_doc *doc, size_t size)
{
	const size_t unit = sizeof(max_align_t);
	struct block *b = doc->blocks;
	size_t units;
	size_t cap;

	if (size > SIZE_MAX - unit)
		return NULL;
	units = (size + unit - 1) / unit;
	if (units == 0)
		units = 1;
	if (b && b->cap - b->used >= units) {
		b->used += units;
		return b->data + b->used - units;
	}
	cap = b ? b->cap * 2 : ARENA_FIRST_UNITS;
	if (cap > ARENA_MAX_UNITS)
		cap = ARENA_MAX_UNITS;
	if (cap < units)
		cap = units;
	if (cap > (SIZE_MAX - sizeof(struct block)) / unit)
		return NULL;
	b = malloc(sizeof(struct block) + cap * unit);
	if (!b)
		return NULL;
	b->cap = cap;
	b->used = units;
	if (doc->blocks && units > ARENA_MAX_UNITS / 2) {
		/*
		 * A big array gets a block of its own; keep filling the
		 * current head with the small allocations that follow.
		 */
		b->next = doc->blocks->next;
		doc->blocks->next = b;
	} else {
		b->next = doc->blocks;
		doc->blocks = b;
	}
	return b->data;
}

struct frame {
	size_t start; /* offset of the opening bracket */
	size_t base;  /* first scratch slot holding this container's children */
	bool object;
};

/*
 * Children of open containers wait on scratch stacks shared by all levels;
 * a container that closes copies its slice into the arena and pops it, so
 * the total copying is linear in the size of the document.
 */
struct parser {
	const unsigned char *s;
	size_t len;
	size_t pos;
	unsigned max_depth;
	struct ledger_json_doc *doc;
	struct ledger_json_error *err;

	struct frame *frames;
	size_t nframes, capframes;
	struct ledger_json_value *items;
	size_t nitems, capitems;
	struct ledger_json_member *members;
	size_t nmembers, capmembers;
	size_t *key_offsets; /* parallel to members, for error reports */
	size_t capoffsets;
	const struct ledger_json_member **order;
	size_t caporder;
	char *sbuf;
	size_t slen, scap;
};

enum state {
	ST_VALUE, /* a value must come next */
	ST_KEY,   /* an object key must come next */
	ST_AFTER, /* a value ended: a comma, a closing bracket or the end */
};

static enum ledger_err fail(struct parser *p, enum ledger_json_error_kind kind, size_t offset,
			    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static enum ledger_err fail(struct parser *p, enum ledger_json_error_kind kind, size_t offset,
			    const char *fmt, ...)
{
	va_list ap;

	p->err->kind = kind;
	p->err->offset = offset;
	va_start(ap, fmt);
	vsnprintf(p->err->message, sizeof(p->err->message), fmt, ap);
	va_end(ap);
	return kind == LEDGER_JSON_ERR_NOMEM ? LEDGER_ERR_NOMEM : LEDGER_ERR_INVALID;
}

static enum ledger_err nomem(struct parser *p)
{
	return fail(p, LEDGER_JSON_ERR_NOMEM, p->pos, "out of memory");
}

/* Names the byte at @p off without putting unprintable bytes in a message. */
static void describe_byte(const struct parser *p, size_t off, char *out, size_t size)
{
	unsigned char c;

	if (off >= p->len) {
		snprintf(out, size, "end of input");
		return;
	}
	c = p->s[off];
	if (c > 0x20 && c < 0x7f)
		snprintf(out, size, "'%c'", c);
	else
		snprintf(out, size, "byte 0x%02x", c);
}

static enum ledger_err unexpected(struct parser *p, const char *wanted)
{
	char what[16];

	describe_byte(p, p->pos, what, sizeof(what));
	return fail(p, LEDGER_JSON_ERR_SYNTAX, p->pos, "expected %s, found %s", wanted, what);
}

/*
 * Grows a scratch array to hold at least @p need elements; returns the
 * (possibly moved) array or NULL, leaving the old one intact on failure.
 */
static void *grow(void *arr, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 16;
	void *q = NULL;

	if (need <= *cap)
		return arr;
	while (n < need) {
		if (n > SIZE_MAX / 2)
			return NULL;
		n *= 2;
	}
	if (n > SIZE_MAX / elem)
		return NULL;
	q = realloc(arr, n * elem);
	if (!q)
		return NULL;
	*cap = n;
	return q;
}

static bool sbuf_append(struct parser *p, const void *bytes, size_t n)
{
	char *q = NULL;

	if (n > SIZE_MAX - p->slen)
		return false;
	q = grow(p->sbuf, &p->scap, p->slen + n, 1);
	if (!q)
		return false;
	p->sbuf = q;
	memcpy(p->sbuf + p->slen, bytes, n);
	p->slen += n;
	return true;
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len) {
		unsigned char c = p->s[p->pos];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

/*
 * Length of the well-formed UTF-8 sequence at @p s (2 to 4 bytes), or 0 if
 * it is not one: overlong forms, encoded surrogates, code points past
 * U+10FFFF and sequences cut short are all refused.
 */
static size_t utf8_seq(const unsigned char *s, size_t avail)
{
	unsigned char c = s[0];
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n, i;

	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else {
		return 0;
	}
	if (avail < n || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

static bool hex4(const struct parser *p, size_t off, unsigned *out)
{
	unsigned v = 0;
	size_t i;

	if (off > p->len || p->len - off < 4)
		return false;
	for (i = 0; i < 4; i++) {
		unsigned char c = p->s[off + i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return false;
	}
	*out = v;
	return true;
}

static bool put_code_point(struct parser *p, unsigned cp)
{
	unsigned char b[4];
	size_t n;

	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xc0 | (cp >> 6));
		b[1] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (unsigned char)(0xe0 | (cp >> 12));
		b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		b[0] = (unsigned char)(0xf0 | (cp >> 18));
		b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	return sbuf_append(p, b, n);
}

/* Decodes the escape at p->pos (a backslash) into the string buffer. */
static enum ledger_err parse_escape(struct parser *p)
{
	static const char simple_from[] = "\"\\/bfnrt";
	static const char simple_to[] = "\"\\/\b\f\n\r\t";
	const char *hit = NULL;
	unsigned cp, lo;
	unsigned char c;

	if (p->pos + 1 >= p->len)
		return fail(p, LEDGER_JSON_ERR_SYNTAX, p->pos, "unterminated string");
	c = p->s[p->pos + 1];
	if (c != 'u') {
		hit = c ? strchr(simple_from, c) : NULL;
		if (!hit)
			return fail(p, LEDGER_JSON_ERR_SYNTAX, p->pos, "invalid escape");
		if (!sbuf_append(p, &simple_to[hit - simple_from], 1))
			return nomem(p);
		p->pos += 2;
		return LEDGER_OK;
	}
	if (!hex4(p, p->pos + 2, &cp))
		return fail(p, LEDGER_JSON_ERR_SYNTAX, p->pos, "invalid \\u escape");
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return fail(p, LEDGER_JSON_ERR_UTF8, p->pos, "lone low surrogate");
	if (cp >= 0xd800 && cp <= 0xdbff) {
		if (p->len - p->pos < 12 || p->s[p->pos + 6] != '\\' || p->s[p->pos + 7] != 'u' ||
		    !hex4(p, p->pos + 8, &lo) || lo < 0xdc00 || lo > 0xdfff)
			return fail(p, LEDGER_JSON_ERR_UTF8, p->pos, "lone high surrogate");
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		p->pos += 6;
	}
	if (!put_code_point(p, cp))
		return nomem(p);
	p->pos += 6;
	return LEDGER_OK;
}

/*
 * Parses the string at p->pos (its opening quote) and stores its decoded
 * bytes, NUL-terminated, in the arena.
 */
static enum ledger_err parse_string(struct parser *p, char **out, size_t *out_len)
{
	enum ledger_err rc;
	char *s = NULL;

	p->pos++;
	p->slen = 0;
	for (;;) {
		size_t run = p->pos;
		unsigned char c;
		size_t n;

		/* Copy plain ASCII in runs: it is most of any real text. */
		while (run < p->len && p->s[run] >= 0x20 && p->s[run] < 0x80 && p->s[run] != '"' &&
		       p->s[run] != '\\')
			run++;
		if (run > p->pos && !sbuf_append(p, p->s + p->pos, run - p->pos))
			return nomem(p);
		p->pos = run;
		if (p->pos == p->len)
			return fail(p, LEDGER_JSON_ERR_SYNTAX, p->pos, "unterminated string");
		c = p->s[p->pos];
		if (c == '"')
			break;
		if (c == '\\') {
			rc = parse_escape(p);
			if (rc != LEDGER_OK)
				return rc;
			continue;
		}
		if (c < 0x20)
			return fail(p, LEDGER_JSON_ERR_SYNTAX, p->pos,
				    "control character 0x%02x in string", c);
		n = utf8_seq(p->s + p->pos, p->len - p->pos);
		if (n == 0)
			return fail(p, LEDGER_JSON_ERR_UTF8, p->pos, "invalid UTF-8");
		if (!sbuf_append(p, p->s + p->pos, n))
			return nomem(p);
		p->pos += n;
	}
	p->pos++;
	if (p->slen == SIZE_MAX)
		return nomem(p);
	s = arena_alloc(p->doc, p->slen + 1);
	if (!s)
		return nomem(p);
	if (p->slen)
		memcpy(s, p->sbuf, p->slen);
	s[p->slen] = '\0';
	*out = s;
	*out_len = p->slen;
	return LEDGER_OK;
}

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static bool digit_at(const struct parser *p, size_t off)
{
	return off < p->len && is_digit(p->s[off]);
}

static enum ledger_err parse_number(struct parser *p)
{
	if (p->s[p->pos] == '-')
		p->pos++;
	if (!digit_at(p, p->pos))
		return unexpected(p, "a digit");
	if (p->s[p->pos] == '0') {
		p->pos++;
	} else {
		while (digit_at(p, p->pos))
			p->pos++;
	}
	if (p->pos < p->len && p->s[p->pos] == '.') {
		p->pos++;
		if (!digit_at(p, p->pos))
			return unexpected(p, "a digit");
		while (digit_at(p, p->pos))
			p->pos++;
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (!digit_at(p, p->pos))
			return unexpected(p, "a digit");
		while (digit_at(p, p->pos))
			p->pos++;
	}
	return LEDGER_OK;
}

static bool literal_at(const struct parser *p, const char *word)
{
	size_t n = strlen(word);

	return p->len - p->pos >= n && memcmp(p->s + p->pos, word, n) == 0;
}

/* Parses the non-container value at p->pos into @p v. */
static enum ledger_err parse_scalar(struct parser *p, struct ledger_json_value *v)
{
	size_t start = p->pos;
	enum ledger_err rc = LEDGER_OK;
	unsigned char c = p->s[p->pos];

	memset(v, 0, sizeof(*v));
	if (c == '"') {
		v->type = LEDGER_JSON_STRING;
		rc = parse_string(p, &v->u.str.s, &v->u.str.len);
	} else if (c == '-' || is_digit(c)) {
		v->type = LEDGER_JSON_NUMBER;
		rc = parse_number(p);
	} else if (literal_at(p, "true")) {
		v->type = LEDGER_JSON_TRUE;
		p->pos += 4;
	} else if (literal_at(p, "false")) {
		v->type = LEDGER_JSON_FALSE;
		p->pos += 5;
	} else if (literal_at(p, "null")) {
		v->type = LEDGER_JSON_NULL;
		p->pos += 4;
	} else {
		rc = unexpected(p, "a value");
	}
	v->raw = (const char *)p->s + start;
	v->raw_len = p->pos - start;
	return rc;
}

static int member_cmp(const void *a, const void *b)
{
	const struct ledger_json_member *x = *(const struct ledger_json_member *const *)a;
	const struct ledger_json_member *y = *(const struct ledger_json_member *const *)b;
	size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
	int c = memcmp(x->key, y->key, n);

	if (c)
		return c;
	if (x->key_len != y->key_len)
		return x->key_len < y->key_len ? -1 : 1;
	/* Equal keys stay in document order, so the second one is reported. */
	return x < y ? -1 : x > y;
}

static enum ledger_err dup_error(struct parser *p, const struct ledger_json_member *m)
{
	char shown[40];
	size_t i, n = 0;

	/* Quote at most 32 bytes of the key, and only printable ones. */
	for (i = 0; i < m->key_len && i < 32; i++) {
		unsigned char c = (unsigned char)m->key[i];

		shown[n++] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
	}
	if (m->key_len > 32) {
		memcpy(shown + n, "...", 3);
		n += 3;
	}
	shown[n] = '\0';
	return fail(p, LEDGER_JSON_ERR_DUPLICATE_KEY, p->key_offsets[m - p->members],
		    "duplicate key \"%s\"", shown);
}

/*
 * Refuses repeated keys among the @p count members at scratch slot @p base.
 * Sorting pointers and comparing neighbours keeps large objects at
 * O(n log n) where comparing every pair would be quadratic.
 */
static enum ledger_err check_duplicates(struct parser *p, size_t base, size_t count)
{
	const struct ledger_json_member *first_dup = NULL;
	const struct ledger_json_member **o = NULL;
	size_t i;

	if (count < 2)
		return LEDGER_OK;
	o = grow(p->order, &p->caporder, count, sizeof(*p->order));
	if (!o)
		return nomem(p);
	p->order = o;
	for (i = 0; i < count; i++)
		o[i] = &p->members[base + i];
	qsort(o, count, sizeof(*o), member_cmp);
	for (i = 1; i < count; i++) {
		if (o[i]->key_len != o[i - 1]->key_len ||
		    memcmp(o[i]->key, o[i - 1]->key, o[i]->key_len) != 0)
			continue;
		/* Report the earliest repetition in the document. */
		if (!first_dup || o[i] < first_dup)
			first_dup = o[i];
	}
	if (first_dup)
		return dup_error(p, first_dup);
	return LEDGER_OK;
}

static enum ledger_err open_container(struct parser *p, bool object)
{
	struct frame *f = NULL;

	if (p->nframes >= p->max_depth)
		return fail(p, LEDGER_JSON_ERR_DEPTH, p->pos, "nesting deeper than %u levels",
			    p->max_depth);
	f = grow(p->frames, &p->capframes, p->nframes + 1, sizeof(*p->frames));
	if (!f)
		return nomem(p);
	p->frames = f;
	f = &p->frames[p->nframes++];
	f->start = p->pos;
	f->base = object ? p->nmembers : p->nitems;
	f->object = object;
	p->pos++;
	return LEDGER_OK;
}

/* Closes the innermost container (p->pos is at its closing bracket). */
static enum ledger_err close_container(struct parser *p, struct ledger_json_value *v)
{
	const struct frame *f = &p->frames[p->nframes - 1];
	enum ledger_err rc;
	size_t count;
	void *dst = NULL;

	memset(v, 0, sizeof(*v));
	p->pos++;
	v->raw = (const char *)p->s + f->start;
	v->raw_len = p->pos - f->start;
	if (f->object) {
		v->type = LEDGER_JSON_OBJECT;
		count = p->nmembers - f->base;
		rc = check_duplicates(p, f->base, count);
		if (rc != LEDGER_OK)
			return rc;
		if (count) {
			dst = arena_alloc(p->doc, count * sizeof(*p->members));
			if (!dst)
				return nomem(p);
			memcpy(dst, p->members + f->base, count * sizeof(*p->members));
		}
		v->u.obj.members = dst;
		v->u.obj.count = count;
		p->nmembers = f->base;
	} else {
		v->type = LEDGER_JSON_ARRAY;
		count = p->nitems - f->base;
		if (count) {
			dst = arena_alloc(p->doc, count * sizeof(*p->items));
			if (!dst)
				return nomem(p);
			memcpy(dst, p->items + f->base, count * sizeof(*p->items));
		}
		v->u.arr.items = dst;
		v->u.arr.count = count;
		p->nitems = f->base;
	}
	p->nframes--;
	return LEDGER_OK;
}

/* Hands a finished value to whatever contains it. */
static enum ledger_err emit(struct parser *p, const struct ledger_json_value *v)
{
	struct ledger_json_value *items = NULL;

	if (p->nframes == 0) {
		p->doc->root = *v;
		return LEDGER_OK;
	}
	if (p->frames[p->nframes - 1].object) {
		p->members[p->nmembers - 1].value = *v;
		return LEDGER_OK;
	}
	items = grow(p->items, &p->capitems, p->nitems + 1, sizeof(*p->items));
	if (!items)
		return nomem(p);
	p->items = items;
	p->items[p->nitems++] = *v;
	return LEDGER_OK;
}

/* Parses `"key" :` and opens a member slot for the value that follows. */
static enum ledger_err parse_key(struct parser *p)
{
	struct ledger_json_member *m = NULL;
	size_t *offs = NULL;
	size_t key_off = p->pos;
	enum ledger_err rc;
	char *key = NULL;
	size_t key_len = 0;

	if (p->pos >= p->len || p->s[p->pos] != '"')
		return unexpected(p, "a string key");
	rc = parse_string(p, &key, &key_len);
	if (rc != LEDGER_OK)
		return rc;
	skip_ws(p);
	if (p->pos >= p->len || p->s[p->pos] != ':')
		return unexpected(p, "':'");
	p->pos++;
	m = grow(p->members, &p->capmembers, p->nmembers + 1, sizeof(*m));
	if (!m)
		return nomem(p);
	p->members = m;
	offs = grow(p->key_offsets, &p->capoffsets, p->nmembers + 1, sizeof(*offs));
	if (!offs)
		return nomem(p);
	p->key_offsets = offs;
	m = &p->members[p->nmembers];
	memset(m, 0, sizeof(*m));
	m->key = key;
	m->key_len = key_len;
	p->key_offsets[p->nmembers] = key_off;
	p->nmembers++;
	return LEDGER_OK;
}

static enum ledger_err after_value(struct parser *p, enum state *st)
{
	const struct frame *f = &p->frames[p->nframes - 1];
	struct ledger_json_value v;
	enum ledger_err rc;
	char closer = f->object ? '}' : ']';

	if (p->pos < p->len && p->s[p->pos] == ',') {
		p->pos++;
		*st = f->object ? ST_KEY : ST_VALUE;
		return LEDGER_OK;
	}
	if (p->pos < p->len && p->s[p->pos] == (unsigned char)closer) {
		rc = close_container(p, &v);
		if (rc != LEDGER_OK)
			return rc;
		*st = ST_AFTER;
		return emit(p, &v);
	}
	return unexpected(p, f->object ? "',' or '}'" : "',' or ']'");
}

static enum ledger_err begin_value(struct parser *p, enum state *st)
{
	struct ledger_json_value v;
	enum ledger_err rc;
	unsigned char c;
	bool object;

	if (p->pos >= p->len)
		return unexpected(p, "a value");
	c = p->s[p->pos];
	if (c != '[' && c != '{') {
		rc = parse_scalar(p, &v);
		if (rc != LEDGER_OK)
			return rc;
		*st = ST_AFTER;
		return emit(p, &v);
	}
	object = c == '{';
	rc = open_container(p, object);
	if (rc != LEDGER_OK)
		return rc;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == (object ? '}' : ']')) {
		rc = close_container(p, &v);
		if (rc != LEDGER_OK)
			return rc;
		*st = ST_AFTER;
		return emit(p, &v);
	}
	*st = object ? ST_KEY : ST_VALUE;
	return LEDGER_OK;
}

static enum ledger_err run(struct parser *p)
{
	enum state st = ST_VALUE;
	enum ledger_err rc = LEDGER_OK;

	for (;;) {
		skip_ws(p);
		switch (st) {
		case ST_VALUE:
			rc = begin_value(p, &st);
			break;
		case ST_KEY:
			rc = parse_key(p);
			st = ST_VALUE;
			break;
		case ST_AFTER:
			if (p->nframes == 0) {
				if (p->pos != p->len)
					return unexpected(p, "end of input");
				return LEDGER_OK;
			}
			rc = after_value(p, &st);
			break;
		default:
			abort();
		}
		if (rc != LEDGER_OK)
			return rc;
	}
}

enum ledger_err ledger_json_parse(const char *text, size_t len, unsigned max_depth,
				  struct ledger_json_doc **doc_out,
				  struct ledger_json_error *err_out)
{
	struct ledger_json_error scratch_err;
	struct parser p;
	enum ledger_err rc;

	if (!doc_out || (!text && len))
		abort();
	*doc_out = NULL;
	memset(&scratch_err, 0, sizeof(scratch_err));
	memset(&p, 0, sizeof(p));
	p.s = (const unsigned char *)text;
	p.len = len;
	p.max_depth = max_depth;
	p.err = err_out ? err_out : &scratch_err;
	if (len == 0) {
		rc = fail(&p, LEDGER_JSON_ERR_SYNTAX, 0, "empty input");
		goto out;
	}
	p.doc = calloc(1, sizeof(*p.doc));
	if (!p.doc) {
		rc = nomem(&p);
		goto out;
	}
	rc = run(&p);
out:
	if (rc == LEDGER_OK)
		*doc_out = p.doc;
	else
		ledger_json_free(p.doc);
	free(p.frames);
	free(p.items);
	free(p.members);
	free(p.key_offsets);
	free(p.order);
	free(p.sbuf);
	return rc;
}

const struct ledger_json_value *ledger_json_root(const struct ledger_json_doc *doc)
{
	return doc ? &doc->root : NULL;
}

void ledger_json_free(struct ledger_json_doc *doc)
{
	struct block *b = NULL;

	if (!doc)
		return;
	while (doc->blocks) {
		b = doc->blocks;
		doc->blocks = b->next;
		free(b);
	}
	free(doc);
}

const struct ledger_json_value *ledger_json_get(const struct ledger_json_value *obj,
						const char *key)
{
	size_t n, i;

	if (!obj || !key || obj->type != LEDGER_JSON_OBJECT)
		return NULL;
	n = strlen(key);
	for (i = 0; i < obj->u.obj.count; i++) {
		const struct ledger_json_member *m = &obj->u.obj.members[i];

		if (m->key_len == n && memcmp(m->key, key, n) == 0)
			return &m->value;
	}
	return NULL;
}
