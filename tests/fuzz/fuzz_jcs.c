/*
 * tests/fuzz/fuzz_jcs.c: libFuzzer target for the canonical form and the
 * fingerprint (ledger/common/jcs.c). Every document the reader accepts is
 * canonicalised twice, by ledgerd and by the slow reference below, written
 * from RFC 8785 and api.md's exact-number rule ("Fingerprints"): a tree
 * walk, keys sorted as UTF-16 code units, and numbers written as JCS writes
 * their double when that text has exactly their value, else laid out the
 * same way with their own digits. Any difference in the bytes, or in
 * accepting or refusing, is a crash.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "ledger/common/buf.h"
#include "ledger/common/jcs.h"
#include "ledger/common/json.h"

#define DEPTH 128 /* deeper than ledgerd's bodies, so the canonicaliser's stack grows */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant: say which, and abort so libFuzzer keeps the input. */
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_jcs: %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

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

static void puts_(struct text *t, const char *s)
{
	put(t, s, strlen(s));
}

/* --- signed decimal integers of any length: the exponents ------------------ */

struct big {
	bool neg;
	struct text mag; /* digits, most significant first, no leading zero; "" is 0 */
};

/* Digits @p d (@p n of them) into @p t, leading zeros cut. */
static void mag_set(struct text *t, const char *d, size_t n)
{
	while (n > 0 && *d == '0')
		d++, n--;
	t->len = 0;
	put(t, d, n);
}

static void big_set(struct big *b, bool neg, const char *d, size_t n)
{
	mag_set(&b->mag, d, n);
	b->neg = neg && b->mag.len > 0;
}

static void big_set_small(struct big *b, int64_t v)
{
	char d[24];
	uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

	snprintf(d, sizeof(d), "%llu", (unsigned long long)m);
	big_set(b, v < 0, d, strlen(d));
}

static int mag_cmp(const struct text *a, const struct text *b)
{
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	return a->len ? memcmp(a->s, b->s, a->len) : 0;
}

/* |a| + |b| or |a| - |b| (|a| >= |b|), digit by digit from the right. */
static void mag_op(struct text *out, const struct text *a, const struct text *b, bool sub)
{
	size_t n = (a->len > b->len ? a->len : b->len) + 1, i;
	char *r = calloc(n + 1, 1);
	int carry = 0;

	CHECK(r != NULL);
	for (i = 0; i < n; i++) {
		int x = i < a->len ? a->s[a->len - 1 - i] - '0' : 0;
		int y = i < b->len ? b->s[b->len - 1 - i] - '0' : 0;
		int z = sub ? x - y - carry : x + y + carry;

		carry = sub ? z < 0 : z > 9;
		z = sub ? (z + 10) % 10 : z % 10;
		r[n - 1 - i] = (char)('0' + z);
	}
	CHECK(carry == 0);
	mag_set(out, r, n);
	free(r);
}

/* *a += b */
static void big_add(struct big *a, const struct big *b)
{
	struct big r = {false, {NULL, 0, 0}};

	if (a->neg == b->neg) {
		mag_op(&r.mag, &a->mag, &b->mag, false);
		r.neg = a->neg;
	} else if (mag_cmp(&a->mag, &b->mag) >= 0) {
		mag_op(&r.mag, &a->mag, &b->mag, true);
		r.neg = a->neg;
	} else {
		mag_op(&r.mag, &b->mag, &a->mag, true);
		r.neg = b->neg;
	}
	if (r.mag.len == 0)
		r.neg = false;
	free(a->mag.s);
	*a = r;
}

static void big_add_small(struct big *a, int64_t v)
{
	struct big b = {false, {NULL, 0, 0}};

	big_set_small(&b, v);
	big_add(a, &b);
	free(b.mag.s);
}

/* The value when it has at most 17 digits (far past every bound it is compared with). */
static bool big_small(const struct big *b, int64_t *out)
{
	int64_t v = 0;

	if (b->mag.len > 17)
		return false;
	for (size_t i = 0; i < b->mag.len; i++)
		v = v * 10 + (b->mag.s[i] - '0');
	*out = b->neg ? -v : v;
	return true;
}

/* --- numbers ---------------------------------------------------------------- */

/* The exact value of a number's text: (-1)^neg x 0.D x 10^point. */
struct exact {
	bool neg;
	struct text digits; /* D: no leading or trailing zero; empty for zero */
	struct big point;
};

static void exact_of(const char *raw, size_t len, struct exact *x)
{
	size_t i = 0, nfrac = 0, trailing = 0, e_from, lead = 0;
	bool frac = false, eneg = false;
	struct text all = {NULL, 0, 0};

	memset(x, 0, sizeof(*x));
	put(&all, "", 0);
	put(&x->digits, "", 0);
	x->neg = raw[0] == '-';
	if (x->neg)
		i++;
	for (; i < len && raw[i] != 'e' && raw[i] != 'E'; i++) {
		if (raw[i] == '.') {
			frac = true;
			continue;
		}
		put(&all, &raw[i], 1);
		nfrac += frac;
	}
	if (i < len) {
		i++;
		if (raw[i] == '+' || raw[i] == '-')
			eneg = raw[i++] == '-';
	}
	e_from = i;
	big_set(&x->point, eneg, raw + e_from, len - e_from);
	/* value = all x 10^(E - nfrac), the same with zeros cut from both ends */
	while (lead < all.len && all.s[lead] == '0')
		lead++;
	while (trailing < all.len - lead && all.s[all.len - 1 - trailing] == '0')
		trailing++;
	if (lead == all.len) {
		x->neg = false;
		big_set(&x->point, false, "", 0);
	} else {
		size_t k = all.len - lead - trailing;

		put(&x->digits, all.s + lead, k);
		big_add_small(&x->point, (int64_t)k - (int64_t)nfrac + (int64_t)trailing);
	}
	free(all.s);
}

/* ECMAScript's Number::toString layout of (-1)^neg x 0.D x 10^n, D of k digits. */
static void layout(struct text *o, bool neg, const char *d, size_t k, const struct big *n)
{
	int64_t p = 0, ik = (int64_t)k;
	bool small = big_small(n, &p);

	if (neg)
		puts_(o, "-");
	if (small && ik <= p && p <= 21) {
		put(o, d, k);
		for (int64_t i = 0; i < p - ik; i++)
			puts_(o, "0");
	} else if (small && 0 < p && p <= 21) {
		put(o, d, (size_t)p);
		puts_(o, ".");
		put(o, d + p, k - (size_t)p);
	} else if (small && -6 < p && p <= 0) {
		puts_(o, "0.");
		for (int64_t i = 0; i < -p; i++)
			puts_(o, "0");
		put(o, d, k);
	} else {
		struct big e = {n->neg, {NULL, 0, 0}};

		put(o, d, 1);
		if (k > 1) {
			puts_(o, ".");
			put(o, d + 1, k - 1);
		}
		big_set(&e, n->neg, n->mag.s, n->mag.len);
		big_add_small(&e, -1);
		puts_(o, e.neg ? "e-" : "e+");
		put(o, e.mag.len ? e.mag.s : "0", e.mag.len ? e.mag.len : 1);
		free(e.mag.s);
	}
}

/*
 * The shortest digits s (k of them) with 0.s x 10^n == @p d > 0 once read
 * back (ECMAScript's Number::toString, step 5): for each length, the
 * correctly rounded digits and their two neighbours, since near a power
 * of two the nearest decimal may miss the rounding interval while its
 * neighbour on the wider side is inside it.
 */
static void shortest(double d, char s[24], size_t *k, int64_t *n)
{
	char buf[64];

	for (int p = 1; p <= 17; p++) {
		unsigned long long s0 = 0;
		int x = 0;
		char *e = NULL;

		snprintf(buf, sizeof(buf), "%.*e", p - 1, d);
		e = strchr(buf, 'e');
		CHECK(e != NULL);
		x = atoi(e + 1);
		for (char *c = buf; c < e; c++)
			if (*c != '.')
				s0 = s0 * 10 + (unsigned long long)(*c - '0');
		const unsigned long long cand[3] = {s0, s0 - 1, s0 + 1};
		for (int i = 0; i < 3; i++) {
			int exp10 = x - (p - 1);
			size_t len;

			if (cand[i] == 0)
				continue;
			snprintf(buf, sizeof(buf), "%llue%d", cand[i], exp10);
			if (strtod(buf, NULL) != d)
				continue;
			snprintf(s, 24, "%llu", cand[i]);
			len = strlen(s);
			while (len > 1 && s[len - 1] == '0')
				s[--len] = '\0', exp10++;
			*k = len;
			*n = (int64_t)len + exp10;
			return;
		}
	}
	CHECK(!"no 17-digit decimal reads back as the double");
}

/* @return false for a number outside the double range (refused). */
static bool ref_number(struct text *o, const struct ledger_json_value *v)
{
	char *raw = strndup(v->raw, v->raw_len);
	struct exact x;
	double d;
	bool ok = true;

	CHECK(raw != NULL);
	d = strtod(raw, NULL);
	exact_of(v->raw, v->raw_len, &x);
	if (isinf(d)) {
		ok = false;
	} else if (x.digits.len == 0) {
		puts_(o, "0"); /* -0 too */
	} else {
		char s[24];
		size_t k = 0;
		int64_t n = 0, p = 0;

		if (d != 0)
			shortest(fabs(d), s, &k, &n);
		if (d != 0 && k == x.digits.len && memcmp(s, x.digits.s, k) == 0 &&
		    big_small(&x.point, &p) && p == n) {
			/* JCS's own text has exactly the number's value. */
			struct big bn = {false, {NULL, 0, 0}};

			big_set_small(&bn, n);
			layout(o, d < 0, s, k, &bn);
			free(bn.mag.s);
		} else {
			layout(o, x.neg, x.digits.s, x.digits.len, &x.point);
		}
	}
	free(x.digits.s);
	free(x.point.mag.s);
	free(raw);
	return ok;
}

/* --- strings and keys ------------------------------------------------------- */

/* RFC 8785, 3.2.2.2: the two-character escapes, \u00xx for other controls, the rest as is. */
static void ref_string(struct text *o, const char *s, size_t len)
{
	puts_(o, "\"");
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];

		switch (c) {
		case '"':
			puts_(o, "\\\"");
			break;
		case '\\':
			puts_(o, "\\\\");
			break;
		case '\b':
			puts_(o, "\\b");
			break;
		case '\f':
			puts_(o, "\\f");
			break;
		case '\n':
			puts_(o, "\\n");
			break;
		case '\r':
			puts_(o, "\\r");
			break;
		case '\t':
			puts_(o, "\\t");
			break;
		default:
			if (c < 0x20) {
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				puts_(o, esc);
			} else {
				put(o, &c, 1);
			}
		}
	}
	puts_(o, "\"");
}

/* The UTF-16 code units of a key (valid UTF-8, the reader checked it); never more than its bytes. */
static size_t utf16(const char *key, size_t len, uint16_t *out)
{
	const unsigned char *s = (const unsigned char *)key;
	size_t n = 0, i = 0;

	while (i < len) {
		uint32_t cp;
		size_t extra = s[i] >= 0xf0 ? 3 : s[i] >= 0xe0 ? 2 : s[i] >= 0xc0 ? 1 : 0;

		cp = extra == 0 ? s[i] : s[i] & (0x3f >> extra);
		for (size_t j = 1; j <= extra; j++)
			cp = cp << 6 | (s[i + j] & 0x3f);
		i += extra + 1;
		if (cp >= 0x10000) {
			out[n++] = (uint16_t)(0xd800 + ((cp - 0x10000) >> 10));
			out[n++] = (uint16_t)(0xdc00 + ((cp - 0x10000) & 0x3ff));
		} else {
			out[n++] = (uint16_t)cp;
		}
	}
	return n;
}

static int key_order(const struct ledger_json_member *a, const struct ledger_json_member *b)
{
	uint16_t *x = malloc((a->key_len + 1) * sizeof(*x));
	uint16_t *y = malloc((b->key_len + 1) * sizeof(*y));
	size_t nx, ny, i;
	int c = 0;

	CHECK(x != NULL && y != NULL);
	nx = utf16(a->key, a->key_len, x);
	ny = utf16(b->key, b->key_len, y);
	for (i = 0; i < nx && i < ny && c == 0; i++)
		c = x[i] < y[i] ? -1 : x[i] > y[i];
	if (c == 0)
		c = nx < ny ? -1 : nx > ny;
	free(x);
	free(y);
	return c;
}

/* --- the reference canonicaliser ------------------------------------------- */

static bool ref_canon(struct text *o, const struct ledger_json_value *v)
{
	const struct ledger_json_member **m = NULL;
	bool ok = true;
	size_t n, i, j;

	switch (v->type) {
	case LEDGER_JSON_NULL:
		puts_(o, "null");
		return true;
	case LEDGER_JSON_TRUE:
		puts_(o, "true");
		return true;
	case LEDGER_JSON_FALSE:
		puts_(o, "false");
		return true;
	case LEDGER_JSON_NUMBER:
		return ref_number(o, v);
	case LEDGER_JSON_STRING:
		ref_string(o, v->u.str.s, v->u.str.len);
		return true;
	case LEDGER_JSON_ARRAY:
		puts_(o, "[");
		for (i = 0; ok && i < v->u.arr.count; i++) {
			if (i)
				puts_(o, ",");
			ok = ref_canon(o, &v->u.arr.items[i]);
		}
		puts_(o, "]");
		return ok;
	case LEDGER_JSON_OBJECT:
		break;
	}
	n = v->u.obj.count;
	m = malloc((n + 1) * sizeof(*m));
	CHECK(m != NULL);
	/* Insertion sort: slow, and plainly right. */
	for (i = 0; i < n; i++) {
		for (j = i; j > 0 && key_order(m[j - 1], &v->u.obj.members[i]) > 0; j--)
			m[j] = m[j - 1];
		m[j] = &v->u.obj.members[i];
	}
	puts_(o, "{");
	for (i = 0; ok && i < n; i++) {
		if (i)
			puts_(o, ",");
		ref_string(o, m[i]->key, m[i]->key_len);
		puts_(o, ":");
		ok = ref_canon(o, &m[i]->value);
	}
	puts_(o, "}");
	free(m);
	return ok;
}

static void sha256_hex(const char *s, size_t len, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	CHECK(EVP_Digest(s, len, md, &n, EVP_sha256(), NULL) == 1 && n == 32);
	for (unsigned int i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static void show(const char *what, const char *s, size_t len)
{
	fprintf(stderr, "fuzz_jcs: %s (%zu bytes): %.*s\n", what, len,
		(int)(len > 2000 ? 2000 : len), s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ledger_json_doc *doc = NULL, *again = NULL;
	struct ledger_buf got = LEDGER_BUF_INIT, twice = LEDGER_BUF_INIT;
	struct text want = {NULL, 0, 0};
	char hex[65], want_hex[65];
	enum ledger_err rc;
	bool ok;

	if (ledger_json_parse((const char *)data, size, DEPTH, &doc, NULL) != LEDGER_OK)
		return 0;
	put(&want, "", 0);
	ok = ref_canon(&want, ledger_json_root(doc));
	rc = ledger_jcs_canonicalize(ledger_json_root(doc), &got);
	if (!ok) {
		if (rc != LEDGER_ERR_INVALID)
			show("accepted what the reference refuses", got.data, got.len);
		CHECK(rc == LEDGER_ERR_INVALID);
	} else {
		if (rc != LEDGER_OK || got.len != want.len || memcmp(got.data, want.s, want.len)) {
			show("ledgerd", got.data ? got.data : "", got.len);
			show("reference", want.s, want.len);
		}
		CHECK(rc == LEDGER_OK && !got.oom);
		CHECK(got.len == want.len && memcmp(got.data, want.s, want.len) == 0);
	}

	/* The fingerprint is the SHA-256 of those bytes, or refused with them. */
	rc = ledger_jcs_fingerprint(ledger_json_root(doc), hex);
	if (!ok) {
		CHECK(rc == LEDGER_ERR_INVALID && hex[0] == '\0');
		goto out;
	}
	sha256_hex(want.s, want.len, want_hex);
	CHECK(rc == LEDGER_OK && strcmp(hex, want_hex) == 0);

	/* The canonical form is JSON, and its own canonical form. */
	CHECK(ledger_json_parse(want.s, want.len, DEPTH, &again, NULL) == LEDGER_OK);
	CHECK(ledger_jcs_canonicalize(ledger_json_root(again), &twice) == LEDGER_OK);
	CHECK(twice.len == want.len && memcmp(twice.data, want.s, want.len) == 0);
out:
	ledger_json_free(again);
	ledger_json_free(doc);
	ledger_buf_free(&got);
	ledger_buf_free(&twice);
	free(want.s);
	return 0;
}
