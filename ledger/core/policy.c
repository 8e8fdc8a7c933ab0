/*
 * ledger/core/policy.c: the failover policy of ledger/core/policy.h, built in or read
 * from YAML with libyaml's event API. Events carry their own line marks and
 * show anchors and aliases as they are, so one strict pass over a fixed
 * table of keys can name the first bad key and its line.
 */
#include "ledger/core/policy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <yaml.h>

#define MAX_FILE_BYTES (1024 * 1024)
#define MAX_SAFE_INT ((INT64_C(1) << 53) - 1)
#define MAX_KEYS 8 /* the most keys one mapping of the document has */
#define PATH_MAX_LEN 96

#define OFF(field) offsetof(struct ledger_policy, field)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

enum kind {
	K_SECTION,  /* a nested mapping of further keys */
	K_UNSIGNED, /* an integer stored in an unsigned field */
	K_INT64,    /* an integer stored in an int64_t field */
	K_LIMIT,    /* max_attempts_limit: K_UNSIGNED whose line max_attempts may need */
	K_ATTEMPTS, /* max_attempts: its range depends on max_attempts_limit */
	K_BOOL,     /* true or false */
	K_FALSE,    /* must be false: ledgerd implements only that */
	K_FIXED,    /* a string ledgerd implements one value of */
	K_REQUIRE,  /* before_first_delta.require */
};

struct field {
	const char *key;
	enum kind kind;
	const struct field *children; /* K_SECTION */
	size_t nchildren;
	int64_t min, max;  /* integers, as written */
	int64_t scale;     /* stored = written * scale; 0 means 1 */
	size_t offset;     /* into struct ledger_policy */
	const char *fixed; /* K_FIXED: the one supported value */
};

struct ctx {
	yaml_parser_t parser;
	yaml_event_t ev;
	bool have_ev;
	const char *yaml;
	size_t len;
	struct ledger_policy pol;
	int64_t attempts;     /* max_attempts as written, checked last */
	size_t attempts_line; /* 0: not in the document */
	size_t limit_line;    /* 0: not in the document */
	size_t last_line;     /* the text's last line, which no report goes past */
	enum ledger_err rc;
	char *err;
	size_t errlen;
};

static const char *const require_items[] = {"source_attempt_fenced", "retry_budget_available"};

static const struct field before_fields[] = {
	{.key = "require", .kind = K_REQUIRE},
	{.key = "action", .kind = K_FIXED, .fixed = "retry_prefill_on_healthy_replica"},
	{.key = "max_attempts", .kind = K_ATTEMPTS},
};

static const struct field after_fields[] = {
	{.key = "action", .kind = K_FIXED, .fixed = "terminate_stream"},
	{.key = "client_error", .kind = K_FIXED, .fixed = "upstream_decode_interrupted"},
	{.key = "automatic_retry", .kind = K_FALSE},
};

static const struct field uncertain_fields[] = {
	{.key = "action", .kind = K_FIXED, .fixed = "fence_source_attempt"},
	{.key = "wait_for", .kind = K_FIXED, .fixed = "cancel_ack_or_lease_expiry"},
	{.key = "then", .kind = K_FIXED, .fixed = "retry_only_if_no_delta_was_sent"},
};

static const struct field failure_fields[] = {
	{.key = "before_first_delta",
	 .kind = K_SECTION,
	 .children = before_fields,
	 .nchildren = COUNT(before_fields)},
	{.key = "after_first_delta",
	 .kind = K_SECTION,
	 .children = after_fields,
	 .nchildren = COUNT(after_fields)},
	{.key = "uncertain_source_liveness",
	 .kind = K_SECTION,
	 .children = uncertain_fields,
	 .nchildren = COUNT(uncertain_fields)},
};

static const struct field budget_fields[] = {
	{.key = "percent_of_attempts",
	 .kind = K_UNSIGNED,
	 .min = 0,
	 .max = 100,
	 .offset = OFF(budget_percent)},
	{.key = "window_s",
	 .kind = K_INT64,
	 .min = 1,
	 .max = 3600,
	 .scale = 1000,
	 .offset = OFF(budget_window_ms)},
	{.key = "min_retries",
	 .kind = K_UNSIGNED,
	 .min = 0,
	 .max = 1000000,
	 .offset = OFF(budget_min_retries)},
};

static const struct field top_fields[] = {
	{.key = "on_upstream_failure",
	 .kind = K_SECTION,
	 .children = failure_fields,
	 .nchildren = COUNT(failure_fields)},
	{.key = "default_lease_ms",
	 .kind = K_INT64,
	 .min = 100,
	 .max = 3600000,
	 .offset = OFF(default_lease_ms)},
	{.key = "max_attempts_limit",
	 .kind = K_LIMIT,
	 .min = 1,
	 .max = 100,
	 .offset = OFF(max_attempts_limit)},
	{.key = "max_retry_prefill_tokens",
	 .kind = K_INT64,
	 .min = 0,
	 .max = MAX_SAFE_INT,
	 .offset = OFF(max_retry_prefill_tokens)},
	{.key = "require_same_revision", .kind = K_BOOL, .offset = OFF(require_same_revision)},
	{.key = "pool_retry_budget",
	 .kind = K_SECTION,
	 .children = budget_fields,
	 .nchildren = COUNT(budget_fields)},
};

_Static_assert(COUNT(top_fields) <= MAX_KEYS && COUNT(failure_fields) <= MAX_KEYS &&
		       COUNT(before_fields) <= MAX_KEYS && COUNT(after_fields) <= MAX_KEYS &&
		       COUNT(uncertain_fields) <= MAX_KEYS && COUNT(budget_fields) <= MAX_KEYS,
	       "a mapping has more keys than the duplicate check tracks");

void ledger_policy_default(struct ledger_policy *p)
{
	p->max_attempts = 2;
	p->max_attempts_limit = 5;
	p->default_lease_ms = 30000;
	p->max_retry_prefill_tokens = 32768;
	p->require_same_revision = true;
	p->budget_percent = 20;
	p->budget_window_ms = 10000;
	p->budget_min_retries = 3;
}

static int fail(struct ctx *c, size_t line, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Keeps the first error only: later ones are consequences of it. */
static int fail(struct ctx *c, size_t line, const char *path, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (c->rc != LEDGER_OK)
		return -1;
	c->rc = LEDGER_ERR_INVALID;
	if (c->err == NULL || c->errlen == 0)
		return -1;
	if (line > c->last_line)
		line = c->last_line;
	if (path != NULL && path[0] != '\0')
		n = snprintf(c->err, c->errlen, "line %zu: %s: ", line, path);
	else
		n = snprintf(c->err, c->errlen, "line %zu: ", line);
	if (n < 0 || (size_t)n >= c->errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static int nomem(struct ctx *c)
{
	if (c->rc == LEDGER_OK) {
		c->rc = LEDGER_ERR_NOMEM;
		if (c->err != NULL && c->errlen > 0)
			snprintf(c->err, c->errlen, "out of memory while reading the policy");
	}
	return -1;
}

static size_t line_of(const yaml_mark_t *m)
{
	return m->line + 1;
}

/*
 * The line of byte @p offset, for reader errors (they carry an offset, not
 * a mark) and for the text's last line. Breaks count as libyaml counts them
 * in UTF-8: \n, \r, \r\n, NEL, LS and PS each end a line.
 */
static size_t line_at_offset(const struct ctx *c, size_t offset)
{
	const unsigned char *s = (const unsigned char *)c->yaml;
	size_t n = offset < c->len ? offset : c->len;
	size_t line = 1;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\n' || (s[i] == '\r' && (i + 1 == n || s[i + 1] != '\n')))
			line++;
		else if (s[i] == 0xc2 && i + 1 < n && s[i + 1] == 0x85)
			line++;
		else if (s[i] == 0xe2 && n - i >= 3 && s[i + 1] == 0x80 &&
			 (s[i + 2] == 0xa8 || s[i + 2] == 0xa9))
			line++;
	}
	return line;
}

/*
 * The last line a report may name. At the end of a text without a final
 * break, libyaml moves its mark to a line the text does not have ("line 2"
 * for the one-line "default_lease_ms: [1"); the report names the text's
 * last line instead. A UTF-16 text, told by its byte order mark as libyaml
 * tells it, is not counted.
 */
static size_t last_line(const struct ctx *c)
{
	const unsigned char *s = (const unsigned char *)c->yaml;

	if (c->len >= 2 && ((s[0] == 0xff && s[1] == 0xfe) || (s[0] == 0xfe && s[1] == 0xff)))
		return SIZE_MAX;
	return line_at_offset(c, c->len);
}

static int syntax_error(struct ctx *c, const yaml_parser_t *yp)
{
	const char *problem = yp->problem ? yp->problem : "malformed document";
	size_t context_line = line_of(&yp->context_mark);

	switch (yp->error) {
	case YAML_MEMORY_ERROR:
		return nomem(c);
	case YAML_READER_ERROR:
		return fail(c, line_at_offset(c, yp->problem_offset), NULL, "YAML syntax error: %s",
			    problem);
	default:
		break;
	}
	if (yp->context != NULL)
		return fail(c, line_of(&yp->problem_mark), NULL,
			    "YAML syntax error: %s (%s on line %zu)", problem, yp->context,
			    context_line < c->last_line ? context_line : c->last_line);
	return fail(c, line_of(&yp->problem_mark), NULL, "YAML syntax error: %s", problem);
}

/*
 * A first pass that only parses: a syntax error anywhere is reported ahead
 * of the key errors, which a broken structure would make misleading (a badly
 * indented key reads as the continuation of the value above it).
 */
static int check_syntax(struct ctx *c)
{
	yaml_parser_t yp;
	yaml_event_t ev;
	bool done = false;
	int rc = 0;

	if (!yaml_parser_initialize(&yp))
		return nomem(c);
	yaml_parser_set_input_string(&yp, (const unsigned char *)c->yaml, c->len);
	while (!done) {
		if (!yaml_parser_parse(&yp, &ev)) {
			rc = syntax_error(c, &yp);
			break;
		}
		done = ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&yp);
	return rc;
}

/*
 * Advances to the next event. Anchors, aliases and tags are refused here,
 * once for every position: the policy is small enough to write out, and an
 * alias could make one value stand for several keys.
 */
static int next(struct ctx *c, const char *path)
{
	const yaml_event_t *e = &c->ev;
	const yaml_char_t *anchor = NULL;
	const yaml_char_t *tag = NULL;

	if (c->have_ev) {
		yaml_event_delete(&c->ev);
		c->have_ev = false;
	}
	if (!yaml_parser_parse(&c->parser, &c->ev))
		return syntax_error(c, &c->parser);
	c->have_ev = true;
	switch (e->type) {
	case YAML_ALIAS_EVENT:
		return fail(c, line_of(&e->start_mark), path,
			    "YAML aliases are not supported: write the value out");
	case YAML_SCALAR_EVENT:
		anchor = e->data.scalar.anchor;
		tag = e->data.scalar.tag;
		break;
	case YAML_SEQUENCE_START_EVENT:
		anchor = e->data.sequence_start.anchor;
		tag = e->data.sequence_start.tag;
		break;
	case YAML_MAPPING_START_EVENT:
		anchor = e->data.mapping_start.anchor;
		tag = e->data.mapping_start.tag;
		break;
	default:
		break;
	}
	if (anchor != NULL)
		return fail(c, line_of(&e->start_mark), path,
			    "YAML anchors are not supported: write the value out");
	if (tag != NULL)
		return fail(c, line_of(&e->start_mark), path, "YAML tags are not supported");
	return 0;
}

/* Copies at most 40 bytes of @p s, unprintable bytes replaced, so a message stays one line. */
static void printable(char *out, size_t size, const unsigned char *s, size_t len)
{
	size_t n = 0, i;

	for (i = 0; i < len && i < 40 && n + 4 < size; i++)
		out[n++] = (s[i] < 0x20 || s[i] == 0x7f || s[i] == '"') ? '?' : (char)s[i];
	if (i < len && n + 4 < size) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
}

/* Names the current value for "(got ...)" in a message. */
static void describe(const struct ctx *c, char *out, size_t size)
{
	const yaml_event_t *e = &c->ev;
	char text[64];

	switch (e->type) {
	case YAML_MAPPING_START_EVENT:
		snprintf(out, size, "a mapping");
		return;
	case YAML_SEQUENCE_START_EVENT:
		snprintf(out, size, "a sequence");
		return;
	case YAML_SCALAR_EVENT:
		break;
	default:
		snprintf(out, size, "nothing");
		return;
	}
	printable(text, sizeof(text), e->data.scalar.value, e->data.scalar.length);
	if (e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && e->data.scalar.length == 0)
		snprintf(out, size, "nothing");
	else if (e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
		snprintf(out, size, "\"%s\"", text);
	else if (e->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
		 e->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
		snprintf(out, size, "the quoted string \"%s\"", text);
	else
		snprintf(out, size, "the block string \"%s\"", text);
}

static bool is_plain(const yaml_event_t *e)
{
	return e->type == YAML_SCALAR_EVENT && e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static bool scalar_is(const yaml_event_t *e, const char *s)
{
	size_t n = strlen(s);

	return e->type == YAML_SCALAR_EVENT && e->data.scalar.length == n &&
	       memcmp(e->data.scalar.value, s, n) == 0;
}

/*
 * Decimal digits only: a sign, a fraction, another base or quotes are type
 * errors. A leading zero is refused too, since YAML 1.1 reads 010 as octal.
 * @return 0 and *out, or -1 when it is no such integer or above 2^63-1
 */
static int plain_integer(const yaml_event_t *e, int64_t *out)
{
	const unsigned char *s = e->data.scalar.value;
	size_t len = e->data.scalar.length;
	uint64_t v = 0;

	if (!is_plain(e) || len == 0 || len > 19 || (len > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		return -1;
	*out = (int64_t)v;
	return 0;
}

static int parse_integer(struct ctx *c, const struct field *f, const char *path)
{
	size_t line = line_of(&c->ev.start_mark);
	char got[96];
	int64_t v = 0;

	if (plain_integer(&c->ev, &v) != 0 || v < f->min || v > f->max) {
		describe(c, got, sizeof(got));
		return fail(c, line, path, "must be an integer from %lld to %lld (got %s)",
			    (long long)f->min, (long long)f->max, got);
	}
	if (f->scale > 1)
		v *= f->scale;
	if (f->kind == K_INT64)
		*(int64_t *)(void *)((char *)&c->pol + f->offset) = v;
	else
		*(unsigned *)(void *)((char *)&c->pol + f->offset) = (unsigned)v;
	if (f->kind == K_LIMIT)
		c->limit_line = line;
	return 0;
}

static int parse_attempts(struct ctx *c, const char *path)
{
	char got[96];

	if (plain_integer(&c->ev, &c->attempts) != 0) {
		describe(c, got, sizeof(got));
		return fail(c, line_of(&c->ev.start_mark), path,
			    "must be an integer from 1 to max_attempts_limit (got %s)", got);
	}
	c->attempts_line = line_of(&c->ev.start_mark);
	return 0;
}

static int parse_bool(struct ctx *c, const struct field *f, const char *path)
{
	const yaml_event_t *e = &c->ev;
	bool *slot = (bool *)(void *)((char *)&c->pol + f->offset);
	char got[96];

	if (is_plain(e) && scalar_is(e, "true")) {
		*slot = true;
		return 0;
	}
	if (is_plain(e) && scalar_is(e, "false")) {
		*slot = false;
		return 0;
	}
	describe(c, got, sizeof(got));
	return fail(c, line_of(&e->start_mark), path, "must be true or false (got %s)", got);
}

static int parse_false(struct ctx *c, const char *path)
{
	const yaml_event_t *e = &c->ev;
	char got[96];

	if (is_plain(e) && scalar_is(e, "false"))
		return 0;
	if (is_plain(e) && scalar_is(e, "true"))
		return fail(c, line_of(&e->start_mark), path,
			    "must be false: a delta already reached the client, so ledgerd never "
			    "retries automatically");
	describe(c, got, sizeof(got));
	return fail(c, line_of(&e->start_mark), path,
		    "must be false, the only behaviour ledgerd implements (got %s)", got);
}

static int parse_fixed(struct ctx *c, const struct field *f, const char *path)
{
	char got[96];

	if (scalar_is(&c->ev, f->fixed))
		return 0;
	describe(c, got, sizeof(got));
	return fail(c, line_of(&c->ev.start_mark), path,
		    "must be %s, the only behaviour ledgerd implements (got %s)", f->fixed, got);
}

/* Both conditions, each once, in either order: ledgerd checks both always. */
static int parse_require(struct ctx *c, const char *path)
{
	static const char want[] = "must be [source_attempt_fenced, retry_budget_available] "
				   "(both, in any order): ledgerd implements no other condition";
	size_t start = line_of(&c->ev.start_mark);
	bool seen[COUNT(require_items)] = {false};
	size_t nseen = 0, i;
	char got[96];

	if (c->ev.type != YAML_SEQUENCE_START_EVENT) {
		describe(c, got, sizeof(got));
		return fail(c, start, path, "%s (got %s)", want, got);
	}
	for (;;) {
		if (next(c, path) != 0)
			return -1;
		if (c->ev.type == YAML_SEQUENCE_END_EVENT)
			break;
		for (i = 0; i < COUNT(require_items); i++) {
			if (scalar_is(&c->ev, require_items[i]))
				break;
		}
		if (i == COUNT(require_items) || seen[i]) {
			describe(c, got, sizeof(got));
			return fail(c, line_of(&c->ev.start_mark), path, "%s (got %s%s)", want,
				    i < COUNT(require_items) ? "twice " : "", got);
		}
		seen[i] = true;
		nseen++;
	}
	if (nseen != COUNT(require_items))
		return fail(c, start, path, "%s (got %zu of them)", want, nseen);
	return 0;
}

static void list_keys(const struct field *fields, size_t n, char *out, size_t size)
{
	size_t used = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n && used < size; i++) {
		int w = snprintf(out + used, size - used, "%s%s", i ? ", " : "", fields[i].key);

		if (w < 0)
			return;
		used += (size_t)w;
	}
}

/*
 * Reads the keys of the mapping whose start is the current event, up to
 * and including its end. The document is at most three mappings deep, so
 * the recursion is bounded by the tables, not by the input.
 */
static int parse_mapping(struct ctx *c, const struct field *fields, size_t n, const char *path)
{
	size_t first_line[MAX_KEYS] = {0};
	char child[PATH_MAX_LEN];
	char text[96];
	char keys[160];
	const struct field *f;
	size_t line, i;
	int rc = -1;

	for (;;) {
		if (next(c, path) != 0)
			return -1;
		if (c->ev.type == YAML_MAPPING_END_EVENT)
			return 0;
		line = line_of(&c->ev.start_mark);
		if (c->ev.type != YAML_SCALAR_EVENT)
			return fail(c, line, path, "keys must be strings");
		for (i = 0; i < n; i++) {
			if (scalar_is(&c->ev, fields[i].key))
				break;
		}
		if (i == n) {
			printable(text, sizeof(text), c->ev.data.scalar.value,
				  c->ev.data.scalar.length);
			list_keys(fields, n, keys, sizeof(keys));
			if (path[0] != '\0')
				return fail(c, line, NULL, "%s.%s: unknown key (expected %s)", path,
					    text, keys);
			return fail(c, line, NULL, "%s: unknown key (expected %s)", text, keys);
		}
		f = &fields[i];
		snprintf(child, sizeof(child), "%s%s%s", path, path[0] ? "." : "", f->key);
		if (first_line[i] != 0)
			return fail(c, line, child, "duplicate key (first on line %zu)",
				    first_line[i]);
		first_line[i] = line;
		if (next(c, child) != 0)
			return -1;
		switch (f->kind) {
		case K_SECTION:
			if (c->ev.type != YAML_MAPPING_START_EVENT) {
				describe(c, text, sizeof(text));
				list_keys(f->children, f->nchildren, keys, sizeof(keys));
				return fail(c, line_of(&c->ev.start_mark), child,
					    "must be a mapping of %s (got %s)", keys, text);
			}
			rc = parse_mapping(c, f->children, f->nchildren, child);
			break;
		case K_UNSIGNED:
		case K_INT64:
		case K_LIMIT:
			rc = parse_integer(c, f, child);
			break;
		case K_ATTEMPTS:
			rc = parse_attempts(c, child);
			break;
		case K_BOOL:
			rc = parse_bool(c, f, child);
			break;
		case K_FALSE:
			rc = parse_false(c, child);
			break;
		case K_FIXED:
			rc = parse_fixed(c, f, child);
			break;
		case K_REQUIRE:
			rc = parse_require(c, child);
			break;
		}
		if (rc != 0)
			return -1;
	}
}

/* Either key may come first, so the pair is checked once both are known. */
static int check_attempts(struct ctx *c)
{
	static const char attempts_path[] = "on_upstream_failure.before_first_delta.max_attempts";
	unsigned limit = c->pol.max_attempts_limit;

	if (c->attempts_line != 0) {
		if (c->attempts < 1 || c->attempts > (int64_t)limit)
			return fail(c, c->attempts_line, attempts_path,
				    "must be an integer from 1 to max_attempts_limit (%u)", limit);
		c->pol.max_attempts = (unsigned)c->attempts;
		return 0;
	}
	if (c->pol.max_attempts > limit)
		return fail(c, c->limit_line, "max_attempts_limit",
			    "must be at least %s (%u, built in); lower that too", attempts_path,
			    c->pol.max_attempts);
	return 0;
}

/* The root event is current: a mapping, or an empty document meaning "all built in". */
static int parse_root(struct ctx *c)
{
	const yaml_event_t *e = &c->ev;

	if (e->type == YAML_MAPPING_START_EVENT)
		return parse_mapping(c, top_fields, COUNT(top_fields), "");
	if (is_plain(e) && e->data.scalar.length == 0)
		return 0;
	return fail(c, line_of(&e->start_mark), NULL,
		    "the policy must be a mapping of keys at the top level");
}

enum ledger_err ledger_policy_parse(const char *yaml, size_t len, struct ledger_policy *p,
				    char *err, size_t errlen)
{
	struct ctx c;
	bool parser_ready = false;

	memset(&c, 0, sizeof(c));
	c.yaml = yaml ? yaml : "";
	c.len = yaml ? len : 0;
	c.last_line = last_line(&c);
	c.err = err;
	c.errlen = errlen;
	c.rc = LEDGER_OK;
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	ledger_policy_default(&c.pol);
	if (check_syntax(&c) != 0)
		goto out;
	if (!yaml_parser_initialize(&c.parser)) {
		nomem(&c);
		goto out;
	}
	parser_ready = true;
	yaml_parser_set_input_string(&c.parser, (const unsigned char *)c.yaml, c.len);

	if (next(&c, NULL) != 0) /* the stream start */
		goto out;
	if (next(&c, NULL) != 0)
		goto out;
	if (c.ev.type == YAML_STREAM_END_EVENT)
		goto out; /* no document at all: only comments or blank */
	if (next(&c, NULL) != 0 || parse_root(&c) != 0)
		goto out;
	if (next(&c, NULL) != 0) /* the document end */
		goto out;
	if (next(&c, NULL) != 0)
		goto out;
	if (c.ev.type != YAML_STREAM_END_EVENT) {
		fail(&c, line_of(&c.ev.start_mark), NULL,
		     "a second YAML document: the policy is one document");
		goto out;
	}
	check_attempts(&c);
out:
	if (c.have_ev)
		yaml_event_delete(&c.ev);
	if (parser_ready)
		yaml_parser_delete(&c.parser);
	if (c.rc == LEDGER_OK)
		*p = c.pol;
	return c.rc;
}

/* Reads at most MAX_FILE_BYTES + 1 bytes, so an oversized file is told apart. */
static enum ledger_err read_all(int fd, char *buf, size_t *len, int *errnum)
{
	size_t n = 0;
	ssize_t r;

	while (n <= MAX_FILE_BYTES) {
		r = read(fd, buf + n, MAX_FILE_BYTES + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			/* EISDIR and the like: the setting names the wrong file. */
			*errnum = errno;
			return LEDGER_ERR_INVALID;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*len = n;
	return n > MAX_FILE_BYTES ? LEDGER_ERR_LIMIT : LEDGER_OK;
}

enum ledger_err ledger_policy_load(const char *path, struct ledger_policy *p, char *err,
				   size_t errlen)
{
	char msg[512];
	char *buf = NULL;
	size_t len = 0;
	enum ledger_err rc;
	int errnum = 0;
	int fd = -1;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = LEDGER_ERR_INVALID;
		if (err != NULL)
			snprintf(err, errlen, "policy file %s: cannot open: %s", path,
				 strerror(errno));
		goto out;
	}
	buf = malloc(MAX_FILE_BYTES + 1);
	if (buf == NULL) {
		rc = LEDGER_ERR_NOMEM;
		if (err != NULL)
			snprintf(err, errlen, "policy file %s: out of memory", path);
		goto out;
	}
	rc = read_all(fd, buf, &len, &errnum);
	if (rc == LEDGER_ERR_LIMIT) {
		if (err != NULL)
			snprintf(err, errlen, "policy file %s: larger than 1 MiB", path);
		goto out;
	}
	if (rc != LEDGER_OK) {
		if (err != NULL)
			snprintf(err, errlen, "policy file %s: cannot read: %s", path,
				 strerror(errnum));
		goto out;
	}
	rc = ledger_policy_parse(buf, len, p, msg, sizeof(msg));
	if (rc != LEDGER_OK && err != NULL)
		snprintf(err, errlen, "policy file %s: %s", path, msg);
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc;
}
