/*
 * tests/unit/test_settings.c: api_settings_load() (api/cli/settings.c),
 * table-driven: every setting's default, variable and flag; the flag over the
 * variable; both flag forms; each kind of value (integer, duration, size,
 * log level, switch, string, flag) at its bounds and beyond, with the exact line
 * that start-up prints; unknown flags, missing values and the command words.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cli/settings.h"
#include "ledger/common/log.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_ARGS 8
#define MAX_WORDS 3 /* as ledgerd's main() asks */

#define DAY_MS (24LL * 3600 * 1000)
#define MIB (1024LL * 1024)

enum type {
	T_STRING,
	T_INT, /* every number, whatever its unit, is stored as an int64_t */
	T_LEVEL,
};

/* The settings as this test knows them: one row each, in the table's order. */
static const struct known {
	const char *flag;
	const char *env;      /* NULL: flag only */
	const char *def_text; /* the default as written; NULL: none */
	size_t offset;
	enum type type;
	int64_t def; /* the default's value (T_INT, T_LEVEL) */
} known[] = {
#define AT(field) offsetof(struct api_settings, field)
	{"database-url", "LEDGER_DATABASE_URL", NULL, AT(database_url), T_STRING, 0},
	{"listen", "LEDGER_LISTEN", "127.0.0.1:8080", AT(listen), T_STRING, 0},
	{"policy", "LEDGER_POLICY", NULL, AT(policy_path), T_STRING, 0},
	{"workers", "LEDGER_WORKERS", "4", AT(workers), T_INT, 4},
	{"batch-max", "LEDGER_BATCH_MAX", "32", AT(batch_max), T_INT, 32},
	{"replay-cache", "LEDGER_REPLAY_CACHE", "16MiB", AT(replay_cache_bytes), T_INT, 16 * MIB},
	{"fast-paths", "LEDGER_FAST_PATHS", "on", AT(fast_paths), T_INT, 1},
	{"http-threads", "LEDGER_HTTP_THREADS", "2", AT(http_threads), T_INT, 2},
	{"retention", "LEDGER_RETENTION", "7d", AT(retention_ms), T_INT, 7 * DAY_MS},
	{"tombstone-retention", "LEDGER_TOMBSTONE_RETENTION", "90d", AT(tombstone_ms), T_INT,
	 90 * DAY_MS},
	{"log-level", "LEDGER_LOG_LEVEL", "info", AT(log_level), T_LEVEL, LEDGER_LOG_INFO},
	{"max-body", "LEDGER_MAX_BODY", "1MiB", AT(max_body_bytes), T_INT, MIB},
	{"max-kept-answer-bytes", "LEDGER_MAX_KEPT_ANSWER_BYTES", "1MiB", AT(max_kept_answer_bytes),
	 T_INT, MIB},
	{"max-result-bytes", "LEDGER_MAX_RESULT_BYTES", "1MiB", AT(max_result_bytes), T_INT, MIB},
	{"min-lease", "LEDGER_MIN_LEASE", "100ms", AT(min_lease_ms), T_INT, 100},
	{"max-lease", "LEDGER_MAX_LEASE", "1h", AT(max_lease_ms), T_INT, 3600 * 1000},
	{"unavailable-retry", "LEDGER_UNAVAILABLE_RETRY", "1s", AT(unavailable_retry_ms), T_INT,
	 1000},
	{"drain-timeout", "LEDGER_DRAIN_TIMEOUT", "30s", AT(drain_timeout_ms), T_INT, 30 * 1000},
	{"gc-interval", "LEDGER_GC_INTERVAL", "5m", AT(gc_interval_ms), T_INT, 5 * 60 * 1000},
	{"gc-batch", "LEDGER_GC_BATCH", "500", AT(gc_batch), T_INT, 500},
	{"tenant", NULL, NULL, AT(tenant), T_STRING, 0},
	{"role", NULL, NULL, AT(role), T_STRING, 0},
	{"from-env", NULL, NULL, AT(from_env), T_STRING, 0},
	{"grace", NULL, NULL, AT(grace_ms), T_INT, 0},
	{"json", NULL, NULL, AT(json), T_INT, 0},
#undef AT
};

static const struct known *find(const char *flag)
{
	for (size_t i = 0; i < COUNT(known); i++) {
		if (strcmp(known[i].flag, flag) == 0)
			return &known[i];
	}
	fail_msg("the test knows no setting --%s", flag);
	return NULL;
}

/* Every variable ledgerd reads, unset: a test sees only what it sets. */
static int clear_env(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(known); i++) {
		if (known[i].env != NULL)
			unsetenv(known[i].env);
	}
	ledger_log_threshold = LEDGER_LOG_INFO;
	return 0;
}

/* The inputs of one load: variables to set, then the arguments after argv[0]. */
struct input {
	const char *env[5]; /* name, value, name, value; NULL-terminated */
	const char *args[MAX_ARGS];
};

struct loaded {
	enum ledger_err rc;
	struct api_settings cfg;
	const char *words[MAX_WORDS];
	size_t nwords;
	char err[512];
};

static void load(const struct input *in, struct loaded *out)
{
	char *argv[MAX_ARGS + 2] = {"ledgerd"};
	int argc = 1;

	clear_env(NULL);
	for (size_t i = 0; i + 1 < COUNT(in->env) && in->env[i] != NULL; i += 2)
		setenv(in->env[i], in->env[i + 1], 1);
	for (size_t i = 0; i < MAX_ARGS && in->args[i] != NULL; i++)
		argv[argc++] = (char *)in->args[i];
	argv[argc] = NULL;
	memset(out, 0, sizeof(*out));
	strcpy(out->err, "(no error written)");
	out->rc = api_settings_load(&out->cfg, argc, argv, out->words, MAX_WORDS, &out->nwords,
				    out->err, sizeof(out->err));
}

/* Writes the arguments of @in into @buf, for a failure's message. */
static const char *show(const struct input *in, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = '\0';
	for (size_t i = 0; i + 1 < COUNT(in->env) && in->env[i] != NULL && o < len; i += 2)
		o += (size_t)snprintf(buf + o, len - o, "%s=%s ", in->env[i], in->env[i + 1]);
	o += (size_t)snprintf(buf + o, len > o ? len - o : 0, "ledgerd");
	for (size_t i = 0; i < MAX_ARGS && in->args[i] != NULL && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, " %s", in->args[i]);
	return buf;
}

static int64_t int_of(const struct api_settings *cfg, const struct known *k)
{
	const char *base = (const char *)cfg + k->offset;

	if (k->type == T_LEVEL)
		return (int64_t) * (const enum ledger_log_level *)(const void *)base;
	return *(const int64_t *)(const void *)base;
}

static const char *str_of(const struct api_settings *cfg, const struct known *k)
{
	return *(char *const *)(const void *)((const char *)cfg + k->offset);
}

/* --- defaults -------------------------------------------------------------- */

static void test_settings_defaults(void **state)
{
	static const struct input none = {{NULL}, {NULL}};
	struct loaded l;

	(void)state;
	load(&none, &l);
	assert_int_equal(l.rc, LEDGER_OK);
	assert_int_equal(l.nwords, 0);
	for (size_t i = 0; i < COUNT(known); i++) {
		const struct known *k = &known[i];

		if (k->type == T_STRING) {
			const char *got = str_of(&l.cfg, k);

			if (k->def_text == NULL ? got != NULL
						: got == NULL || strcmp(got, k->def_text) != 0)
				fail_msg("--%s defaults to %s, want %s", k->flag,
					 got != NULL ? got : "NULL",
					 k->def_text != NULL ? k->def_text : "NULL");
		} else if (int_of(&l.cfg, k) != k->def) {
			fail_msg("--%s defaults to %lld, want %lld", k->flag,
				 (long long)int_of(&l.cfg, k), (long long)k->def);
		}
	}
	assert_int_equal(ledger_log_threshold, LEDGER_LOG_INFO);
	api_settings_free(&l.cfg);
}

/* `ledgerd help` lists every setting with its variable and default. */
static void test_settings_usage_lists_every_setting(void **state)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	(void)state;
	assert_non_null(f);
	api_settings_usage(f);
	assert_int_equal(fclose(f), 0);
	for (size_t i = 0; i < COUNT(known); i++) {
		char flag[64], def[64], line[512];
		const char *at = NULL;

		snprintf(flag, sizeof(flag), "  --%s ", known[i].flag);
		at = strstr(text, flag);
		if (at == NULL)
			fail_msg("help lacks --%s", known[i].flag);
		snprintf(line, sizeof(line), "%.*s", (int)strcspn(at, "\n"), at);
		if (known[i].env != NULL && strstr(line, known[i].env) == NULL)
			fail_msg("help's line of --%s lacks %s: %s", known[i].flag, known[i].env,
				 line);
		snprintf(def, sizeof(def), "(default %s)", known[i].def_text);
		if (known[i].def_text != NULL &&
		    (strlen(line) < strlen(def) ||
		     strcmp(line + strlen(line) - strlen(def), def) != 0))
			fail_msg("help's line of --%s does not end in %s: %s", known[i].flag, def,
				 line);
		if (known[i].def_text == NULL && strstr(line, "(default ") != NULL)
			fail_msg("help gives --%s a default: %s", known[i].flag, line);
	}
	free(text);
}

/* --- values that load ------------------------------------------------------- */

/* An input that loads, and the value one setting must then hold. */
struct value_row {
	struct input in;
	const char *setting;
	int64_t want;         /* T_INT, T_LEVEL */
	const char *want_str; /* T_STRING */
};

static void run_value_rows(const char *table, const struct value_row *rows, size_t n)
{
	size_t failed = 0;

	for (size_t i = 0; i < n; i++) {
		const struct value_row *r = &rows[i];
		const struct known *k = find(r->setting);
		char args[512];
		struct loaded l;

		load(&r->in, &l);
		show(&r->in, args, sizeof(args));
		if (l.rc != LEDGER_OK) {
			print_error("%s row %zu (%s): refused: %s\n", table, i, args, l.err);
			failed++;
		} else if (k->type == T_STRING) {
			const char *got = str_of(&l.cfg, k);

			if (got == NULL || strcmp(got, r->want_str) != 0) {
				print_error("%s row %zu (%s): --%s is \"%s\", want \"%s\"\n", table,
					    i, args, k->flag, got != NULL ? got : "NULL",
					    r->want_str);
				failed++;
			}
		} else if (int_of(&l.cfg, k) != r->want) {
			print_error("%s row %zu (%s): --%s is %lld, want %lld\n", table, i, args,
				    k->flag, (long long)int_of(&l.cfg, k), (long long)r->want);
			failed++;
		}
		api_settings_free(&l.cfg);
	}
	if (failed > 0)
		fail_msg("%zu of %zu %s rows failed", failed, n, table);
}

#define ENV(...)                                                                                   \
	{                                                                                          \
		__VA_ARGS__, NULL                                                                  \
	}
#define ARGS(...)                                                                                  \
	{                                                                                          \
		__VA_ARGS__, NULL                                                                  \
	}
#define NO_ENV                                                                                     \
	{                                                                                          \
		NULL                                                                               \
	}

/* Each setting from its variable, then from both flag forms. */
static const struct value_row source_rows[] = {
	{{ENV("LEDGER_DATABASE_URL", "postgres://db/ledger"), {NULL}},
	 "database-url",
	 0,
	 "postgres://db/ledger"},
	{{NO_ENV, ARGS("--database-url", "postgres://db/ledger")},
	 "database-url",
	 0,
	 "postgres://db/ledger"},
	{{NO_ENV, ARGS("--database-url=postgres://db/ledger")},
	 "database-url",
	 0,
	 "postgres://db/ledger"},
	{{ENV("LEDGER_LISTEN", "[::1]:9000"), {NULL}}, "listen", 0, "[::1]:9000"},
	{{NO_ENV, ARGS("--listen", "unix:/run/l.sock")}, "listen", 0, "unix:/run/l.sock"},
	{{NO_ENV, ARGS("--listen=0.0.0.0:1")}, "listen", 0, "0.0.0.0:1"},
	{{ENV("LEDGER_POLICY", "/etc/p.yaml"), {NULL}}, "policy", 0, "/etc/p.yaml"},
	{{NO_ENV, ARGS("--policy", "p.yaml")}, "policy", 0, "p.yaml"},
	{{ENV("LEDGER_WORKERS", "8"), {NULL}}, "workers", 8, NULL},
	{{NO_ENV, ARGS("--workers", "9")}, "workers", 9, NULL},
	{{NO_ENV, ARGS("--workers=10")}, "workers", 10, NULL},
	{{ENV("LEDGER_BATCH_MAX", "1"), {NULL}}, "batch-max", 1, NULL},
	{{NO_ENV, ARGS("--batch-max", "64")}, "batch-max", 64, NULL},
	{{ENV("LEDGER_REPLAY_CACHE", "0"), {NULL}}, "replay-cache", 0, NULL},
	{{NO_ENV, ARGS("--replay-cache", "2MiB")}, "replay-cache", 2 * MIB, NULL},
	{{ENV("LEDGER_FAST_PATHS", "off"), {NULL}}, "fast-paths", 0, NULL},
	{{NO_ENV, ARGS("--fast-paths", "off")}, "fast-paths", 0, NULL},
	{{NO_ENV, ARGS("--fast-paths=on")}, "fast-paths", 1, NULL},
	{{ENV("LEDGER_HTTP_THREADS", "3"), {NULL}}, "http-threads", 3, NULL},
	{{NO_ENV, ARGS("--http-threads=4")}, "http-threads", 4, NULL},
	{{ENV("LEDGER_RETENTION", "30d"), {NULL}}, "retention", 30 * DAY_MS, NULL},
	{{NO_ENV, ARGS("--retention", "12h")}, "retention", 12 * 3600 * 1000LL, NULL},
	{{ENV("LEDGER_TOMBSTONE_RETENTION", "1d"), {NULL}}, "tombstone-retention", DAY_MS, NULL},
	{{NO_ENV, ARGS("--tombstone-retention=2d")}, "tombstone-retention", 2 * DAY_MS, NULL},
	{{ENV("LEDGER_LOG_LEVEL", "debug"), {NULL}}, "log-level", LEDGER_LOG_DEBUG, NULL},
	{{NO_ENV, ARGS("--log-level", "warn")}, "log-level", LEDGER_LOG_WARN, NULL},
	{{ENV("LEDGER_MAX_BODY", "4KiB"), {NULL}}, "max-body", 4096, NULL},
	{{NO_ENV, ARGS("--max-body=2MiB")}, "max-body", 2 * MIB, NULL},
	{{ENV("LEDGER_MAX_KEPT_ANSWER_BYTES", "0"), {NULL}}, "max-kept-answer-bytes", 0, NULL},
	{{NO_ENV, ARGS("--max-kept-answer-bytes", "64MiB")},
	 "max-kept-answer-bytes",
	 64 * MIB,
	 NULL},
	{{ENV("LEDGER_MAX_RESULT_BYTES", "0"), {NULL}}, "max-result-bytes", 0, NULL},
	{{NO_ENV, ARGS("--max-result-bytes", "64MiB")}, "max-result-bytes", 64 * MIB, NULL},
	{{NO_ENV, ARGS("--max-result-bytes=512B")}, "max-result-bytes", 512, NULL},
	{{ENV("LEDGER_MIN_LEASE", "1s"), {NULL}}, "min-lease", 1000, NULL},
	{{NO_ENV, ARGS("--min-lease", "250ms")}, "min-lease", 250, NULL},
	{{ENV("LEDGER_MAX_LEASE", "2h"), {NULL}}, "max-lease", 2 * 3600 * 1000LL, NULL},
	{{NO_ENV, ARGS("--max-lease=10m")}, "max-lease", 600 * 1000, NULL},
	{{ENV("LEDGER_UNAVAILABLE_RETRY", "250ms"), {NULL}}, "unavailable-retry", 250, NULL},
	{{NO_ENV, ARGS("--unavailable-retry", "5s")}, "unavailable-retry", 5000, NULL},
	{{ENV("LEDGER_DRAIN_TIMEOUT", "0ms"), {NULL}}, "drain-timeout", 0, NULL},
	{{NO_ENV, ARGS("--drain-timeout=1m")}, "drain-timeout", 60 * 1000, NULL},
	{{ENV("LEDGER_GC_INTERVAL", "1h"), {NULL}}, "gc-interval", 3600 * 1000, NULL},
	{{NO_ENV, ARGS("--gc-interval", "30s")}, "gc-interval", 30 * 1000, NULL},
	{{ENV("LEDGER_GC_BATCH", "1"), {NULL}}, "gc-batch", 1, NULL},
	{{NO_ENV, ARGS("--gc-batch=100000")}, "gc-batch", 100000, NULL},
	{{NO_ENV, ARGS("--tenant", "acme")}, "tenant", 0, "acme"},
	{{NO_ENV, ARGS("--role=router")}, "role", 0, "router"},
	{{NO_ENV, ARGS("--from-env", "MY_TOKEN")}, "from-env", 0, "MY_TOKEN"},
	{{NO_ENV, ARGS("--grace", "10m")}, "grace", 600 * 1000, NULL},
	{{NO_ENV, ARGS("--grace=1s")}, "grace", 1000, NULL},
	{{NO_ENV, ARGS("--grace", "30d")}, "grace", 30 * DAY_MS, NULL},
	/* a flag without a value: given is 1 */
	{{NO_ENV, ARGS("--json")}, "json", 1, NULL},
	{{NO_ENV, ARGS("--json", "--json")}, "json", 1, NULL},
};

static void test_settings_each_from_variable_and_flag(void **state)
{
	(void)state;
	run_value_rows("source", source_rows, COUNT(source_rows));
}

/* The flag wins over the variable, whichever form it takes. */
static const struct value_row precedence_rows[] = {
	{{ENV("LEDGER_WORKERS", "8"), ARGS("--workers", "2")}, "workers", 2, NULL},
	{{ENV("LEDGER_WORKERS", "8"), ARGS("--workers=3")}, "workers", 3, NULL},
	{{ENV("LEDGER_LISTEN", "10.0.0.1:1"), ARGS("--listen", "10.0.0.2:2")},
	 "listen",
	 0,
	 "10.0.0.2:2"},
	{{ENV("LEDGER_RETENTION", "30d"), ARGS("--retention=1d")}, "retention", DAY_MS, NULL},
	{{ENV("LEDGER_LOG_LEVEL", "debug"), ARGS("--log-level", "error")},
	 "log-level",
	 LEDGER_LOG_ERROR,
	 NULL},
	{{ENV("LEDGER_FAST_PATHS", "off"), ARGS("--fast-paths", "on")}, "fast-paths", 1, NULL},
	{{ENV("LEDGER_MAX_BODY", "4KiB"), ARGS("--max-body", "8KiB")}, "max-body", 8192, NULL},
	/* the variable's text is never read once the flag is given: not even checked */
	{{ENV("LEDGER_WORKERS", "many"), ARGS("--workers", "5")}, "workers", 5, NULL},
	{{ENV("LEDGER_LISTEN", ""), ARGS("--listen=h:1")}, "listen", 0, "h:1"},
	/* a variable of one setting leaves the others at their defaults */
	{{ENV("LEDGER_WORKERS", "8"), ARGS("--batch-max", "2")}, "workers", 8, NULL},
	/* a flag given twice: the last wins */
	{{NO_ENV, ARGS("--workers", "2", "--workers=7")}, "workers", 7, NULL},
};

static void test_settings_flag_wins_over_variable(void **state)
{
	(void)state;
	run_value_rows("precedence", precedence_rows, COUNT(precedence_rows));
}

/* Each kind of value at its bounds and in each of its spellings. */
static const struct value_row kind_rows[] = {
	/* integers: plain decimal, leading zeros allowed */
	{{NO_ENV, ARGS("--workers", "1")}, "workers", 1, NULL},
	{{NO_ENV, ARGS("--workers", "256")}, "workers", 256, NULL},
	{{NO_ENV, ARGS("--workers", "0042")}, "workers", 42, NULL},
	/* durations: ms, s, m, h, d */
	{{NO_ENV, ARGS("--min-lease", "1ms")}, "min-lease", 1, NULL},
	{{NO_ENV, ARGS("--min-lease", "3600000ms")}, "min-lease", 3600 * 1000, NULL},
	{{NO_ENV, ARGS("--unavailable-retry", "60s")}, "unavailable-retry", 60 * 1000, NULL},
	{{NO_ENV, ARGS("--unavailable-retry", "007s")}, "unavailable-retry", 7000, NULL},
	{{NO_ENV, ARGS("--gc-interval", "1s")}, "gc-interval", 1000, NULL},
	{{NO_ENV, ARGS("--gc-interval", "1d")}, "gc-interval", DAY_MS, NULL},
	{{NO_ENV, ARGS("--retention", "1m")}, "retention", 60 * 1000, NULL},
	{{NO_ENV, ARGS("--retention", "3650d")}, "retention", 3650 * DAY_MS, NULL},
	{{NO_ENV, ARGS("--max-lease", "24h")}, "max-lease", DAY_MS, NULL},
	{{NO_ENV, ARGS("--drain-timeout", "0s")}, "drain-timeout", 0, NULL},
	{{NO_ENV, ARGS("--drain-timeout", "60m")}, "drain-timeout", 3600 * 1000, NULL},
	/* sizes: plain bytes, B, KiB, MiB */
	{{NO_ENV, ARGS("--max-body", "1024")}, "max-body", 1024, NULL},
	{{NO_ENV, ARGS("--max-body", "1024B")}, "max-body", 1024, NULL},
	{{NO_ENV, ARGS("--max-body", "1KiB")}, "max-body", 1024, NULL},
	{{NO_ENV, ARGS("--max-body", "64MiB")}, "max-body", 64 * MIB, NULL},
	{{NO_ENV, ARGS("--max-body", "65536KiB")}, "max-body", 64 * MIB, NULL},
	{{NO_ENV, ARGS("--replay-cache", "0B")}, "replay-cache", 0, NULL},
	{{NO_ENV, ARGS("--replay-cache", "1024MiB")}, "replay-cache", 1024 * MIB, NULL},
	/* log levels */
	{{NO_ENV, ARGS("--log-level", "debug")}, "log-level", LEDGER_LOG_DEBUG, NULL},
	{{NO_ENV, ARGS("--log-level", "info")}, "log-level", LEDGER_LOG_INFO, NULL},
	{{NO_ENV, ARGS("--log-level", "warn")}, "log-level", LEDGER_LOG_WARN, NULL},
	{{NO_ENV, ARGS("--log-level", "error")}, "log-level", LEDGER_LOG_ERROR, NULL},
	/* the switch */
	{{NO_ENV, ARGS("--fast-paths", "on")}, "fast-paths", 1, NULL},
	{{NO_ENV, ARGS("--fast-paths", "off")}, "fast-paths", 0, NULL},
	/* strings are kept as given: "=" and "--" inside a value are its own */
	{{NO_ENV, ARGS("--database-url=host=db dbname=l")}, "database-url", 0, "host=db dbname=l"},
	{{NO_ENV, ARGS("--database-url", "--listen")}, "database-url", 0, "--listen"},
	{{NO_ENV, ARGS("--listen", " x ")}, "listen", 0, " x "},
};

static void test_settings_each_kind_of_value(void **state)
{
	(void)state;
	run_value_rows("kind", kind_rows, COUNT(kind_rows));
}

/* The level also becomes the log threshold. */
static void test_settings_log_level_sets_the_threshold(void **state)
{
	static const struct input warn = {NO_ENV, ARGS("--log-level", "warn")};
	static const struct input none = {{NULL}, {NULL}};
	struct loaded l;

	(void)state;
	load(&warn, &l);
	assert_int_equal(l.rc, LEDGER_OK);
	assert_int_equal(ledger_log_threshold, LEDGER_LOG_WARN);
	api_settings_free(&l.cfg);
	load(&none, &l);
	assert_int_equal(l.rc, LEDGER_OK);
	assert_int_equal(ledger_log_threshold, LEDGER_LOG_INFO);
	api_settings_free(&l.cfg);
}

/* --- values that are refused, with the one line start-up prints --------------- */

struct error_row {
	struct input in;
	const char *err;
};

static void run_error_rows(const char *table, const struct error_row *rows, size_t n)
{
	size_t failed = 0;

	for (size_t i = 0; i < n; i++) {
		char args[512];
		struct loaded l;

		load(&rows[i].in, &l);
		show(&rows[i].in, args, sizeof(args));
		if (l.rc != LEDGER_ERR_INVALID || strcmp(l.err, rows[i].err) != 0) {
			print_error("%s row %zu (%s): rc %d, \"%s\"\n    want \"%s\"\n", table, i,
				    args, (int)l.rc, l.err, rows[i].err);
			failed++;
		}
		api_settings_free(&l.cfg);
	}
	if (failed > 0)
		fail_msg("%zu of %zu %s rows failed", failed, n, table);
}

#define INT_RANGE(flag, lo, hi, got)                                                               \
	"--" flag ": must be an integer between " lo " and " hi " (got \"" got "\")"
#define DUR_RANGE(flag, lo, hi, got)                                                               \
	"--" flag ": must be a duration such as 500ms, 30s, 5m, 12h or 7d between " lo " and " hi  \
	" ms (got \"" got "\")"
#define BYTES_RANGE(flag, lo, hi, got)                                                             \
	"--" flag ": must be a size in bytes, KiB or MiB between " lo " and " hi " (got \"" got    \
	"\")"

static const struct error_row range_rows[] = {
	/* integers */
	{{NO_ENV, ARGS("--workers", "0")}, INT_RANGE("workers", "1", "256", "0")},
	{{NO_ENV, ARGS("--workers", "257")}, INT_RANGE("workers", "1", "256", "257")},
	{{NO_ENV, ARGS("--batch-max=1025")}, INT_RANGE("batch-max", "1", "1024", "1025")},
	{{NO_ENV, ARGS("--http-threads", "65")}, INT_RANGE("http-threads", "1", "64", "65")},
	{{NO_ENV, ARGS("--gc-batch", "100001")}, INT_RANGE("gc-batch", "1", "100000", "100001")},
	/* durations */
	{{NO_ENV, ARGS("--retention", "59s")},
	 DUR_RANGE("retention", "60000", "315360000000", "59s")},
	{{NO_ENV, ARGS("--retention", "3651d")},
	 DUR_RANGE("retention", "60000", "315360000000", "3651d")},
	{{NO_ENV, ARGS("--tombstone-retention", "1s")},
	 DUR_RANGE("tombstone-retention", "60000", "315360000000", "1s")},
	{{NO_ENV, ARGS("--min-lease", "0ms")}, DUR_RANGE("min-lease", "1", "3600000", "0ms")},
	{{NO_ENV, ARGS("--min-lease", "2h")}, DUR_RANGE("min-lease", "1", "3600000", "2h")},
	{{NO_ENV, ARGS("--max-lease", "25h")}, DUR_RANGE("max-lease", "1", "86400000", "25h")},
	{{NO_ENV, ARGS("--unavailable-retry", "61s")},
	 DUR_RANGE("unavailable-retry", "1", "60000", "61s")},
	{{NO_ENV, ARGS("--drain-timeout", "2h")}, DUR_RANGE("drain-timeout", "0", "3600000", "2h")},
	{{NO_ENV, ARGS("--gc-interval", "999ms")},
	 DUR_RANGE("gc-interval", "1000", "86400000", "999ms")},
	{{NO_ENV, ARGS("--grace", "0s")}, DUR_RANGE("grace", "1000", "2592000000", "0s")},
	{{NO_ENV, ARGS("--grace", "31d")}, DUR_RANGE("grace", "1000", "2592000000", "31d")},
	/* sizes */
	{{NO_ENV, ARGS("--max-body", "1023")}, BYTES_RANGE("max-body", "1024", "67108864", "1023")},
	{{NO_ENV, ARGS("--max-body", "65MiB")},
	 BYTES_RANGE("max-body", "1024", "67108864", "65MiB")},
	{{NO_ENV, ARGS("--replay-cache", "1025MiB")},
	 BYTES_RANGE("replay-cache", "0", "1073741824", "1025MiB")},
	/* too large to hold: the same line */
	{{NO_ENV, ARGS("--workers", "99999999999999999999")},
	 INT_RANGE("workers", "1", "256", "99999999999999999999")},
	{{NO_ENV, ARGS("--retention", "9223372036854775807d")},
	 DUR_RANGE("retention", "60000", "315360000000", "9223372036854775807d")},
	{{NO_ENV, ARGS("--max-body", "9007199254740992MiB")},
	 BYTES_RANGE("max-body", "1024", "67108864", "9007199254740992MiB")},
};

static void test_settings_out_of_range_is_one_line(void **state)
{
	(void)state;
	run_error_rows("range", range_rows, COUNT(range_rows));
}

static const struct error_row malformed_rows[] = {
	/* integers: plain decimal digits only */
	{{NO_ENV, ARGS("--workers", "-1")}, INT_RANGE("workers", "1", "256", "-1")},
	{{NO_ENV, ARGS("--workers", "+4")}, INT_RANGE("workers", "1", "256", "+4")},
	{{NO_ENV, ARGS("--workers", " 4")}, INT_RANGE("workers", "1", "256", " 4")},
	{{NO_ENV, ARGS("--workers", "4 ")}, INT_RANGE("workers", "1", "256", "4 ")},
	{{NO_ENV, ARGS("--workers", "1.5")}, INT_RANGE("workers", "1", "256", "1.5")},
	{{NO_ENV, ARGS("--workers", "0x10")}, INT_RANGE("workers", "1", "256", "0x10")},
	{{NO_ENV, ARGS("--workers", "1e2")}, INT_RANGE("workers", "1", "256", "1e2")},
	{{NO_ENV, ARGS("--workers", "4ms")}, INT_RANGE("workers", "1", "256", "4ms")},
	{{NO_ENV, ARGS("--workers", "four")}, INT_RANGE("workers", "1", "256", "four")},
	{{NO_ENV, ARGS("--workers=")}, INT_RANGE("workers", "1", "256", "")},
	/* durations: a unit is required, spelled exactly */
	{{NO_ENV, ARGS("--min-lease", "500")}, DUR_RANGE("min-lease", "1", "3600000", "500")},
	{{NO_ENV, ARGS("--min-lease", "1S")}, DUR_RANGE("min-lease", "1", "3600000", "1S")},
	{{NO_ENV, ARGS("--min-lease", "1sec")}, DUR_RANGE("min-lease", "1", "3600000", "1sec")},
	{{NO_ENV, ARGS("--min-lease", "1 s")}, DUR_RANGE("min-lease", "1", "3600000", "1 s")},
	{{NO_ENV, ARGS("--min-lease", "1.5s")}, DUR_RANGE("min-lease", "1", "3600000", "1.5s")},
	{{NO_ENV, ARGS("--min-lease", "1us")}, DUR_RANGE("min-lease", "1", "3600000", "1us")},
	{{NO_ENV, ARGS("--min-lease", "1m30s")}, DUR_RANGE("min-lease", "1", "3600000", "1m30s")},
	{{NO_ENV, ARGS("--min-lease", "s")}, DUR_RANGE("min-lease", "1", "3600000", "s")},
	{{NO_ENV, ARGS("--drain-timeout", "-1s")},
	 DUR_RANGE("drain-timeout", "0", "3600000", "-1s")},
	/* sizes: B, KiB and MiB, exactly */
	{{NO_ENV, ARGS("--max-body", "1KB")}, BYTES_RANGE("max-body", "1024", "67108864", "1KB")},
	{{NO_ENV, ARGS("--max-body", "1kib")}, BYTES_RANGE("max-body", "1024", "67108864", "1kib")},
	{{NO_ENV, ARGS("--max-body", "1 KiB")},
	 BYTES_RANGE("max-body", "1024", "67108864", "1 KiB")},
	{{NO_ENV, ARGS("--max-body", "1M")}, BYTES_RANGE("max-body", "1024", "67108864", "1M")},
	{{NO_ENV, ARGS("--replay-cache", "1GiB")},
	 BYTES_RANGE("replay-cache", "0", "1073741824", "1GiB")},
	/* log levels and the switch: the names, in lower case */
	{{NO_ENV, ARGS("--log-level", "verbose")},
	 "--log-level: must be one of debug, info, warn, error (got \"verbose\")"},
	{{NO_ENV, ARGS("--log-level", "INFO")},
	 "--log-level: must be one of debug, info, warn, error (got \"INFO\")"},
	{{NO_ENV, ARGS("--log-level", "warning")},
	 "--log-level: must be one of debug, info, warn, error (got \"warning\")"},
	{{NO_ENV, ARGS("--fast-paths", "yes")}, "--fast-paths: must be on or off (got \"yes\")"},
	{{NO_ENV, ARGS("--fast-paths", "ON")}, "--fast-paths: must be on or off (got \"ON\")"},
	{{NO_ENV, ARGS("--fast-paths", "1")}, "--fast-paths: must be on or off (got \"1\")"},
	{{NO_ENV, ARGS("--fast-paths=")}, "--fast-paths: must be on or off (got \"\")"},
	/* strings: anything but empty */
	{{NO_ENV, ARGS("--listen=")}, "--listen: must not be empty"},
	{{NO_ENV, ARGS("--database-url", "")}, "--database-url: must not be empty"},
	{{NO_ENV, ARGS("--tenant=")}, "--tenant: must not be empty"},
	/* the value is quoted up to 40 characters */
	{{NO_ENV, ARGS("--workers", "0123456789012345678901234567890123456789xyz")},
	 INT_RANGE("workers", "1", "256", "0123456789012345678901234567890123456789")},
};

static void test_settings_malformed_is_one_line(void **state)
{
	(void)state;
	run_error_rows("malformed", malformed_rows, COUNT(malformed_rows));
}

/* A bad value from a variable is named by the variable, unless a flag overrode it. */
static const struct error_row variable_error_rows[] = {
	{{ENV("LEDGER_WORKERS", "0"), {NULL}},
	 "LEDGER_WORKERS: must be an integer between 1 and 256 (got \"0\")"},
	{{ENV("LEDGER_WORKERS", ""), {NULL}},
	 "LEDGER_WORKERS: must be an integer between 1 and 256 (got \"\")"},
	{{ENV("LEDGER_RETENTION", "7"), {NULL}},
	 "LEDGER_RETENTION: must be a duration such as 500ms, 30s, 5m, 12h or 7d between 60000 and "
	 "315360000000 ms (got \"7\")"},
	{{ENV("LEDGER_MAX_BODY", "1GiB"), {NULL}},
	 "LEDGER_MAX_BODY: must be a size in bytes, KiB or MiB between 1024 and 67108864 (got "
	 "\"1GiB\")"},
	{{ENV("LEDGER_MAX_KEPT_ANSWER_BYTES", "65MiB"), {NULL}},
	 "LEDGER_MAX_KEPT_ANSWER_BYTES: must be a size in bytes, KiB or MiB between 0 and 67108864 "
	 "(got \"65MiB\")"},
	{{ENV("LEDGER_MAX_RESULT_BYTES", "65MiB"), {NULL}},
	 "LEDGER_MAX_RESULT_BYTES: must be a size in bytes, KiB or MiB between 0 and 67108864 "
	 "(got \"65MiB\")"},
	{{NO_ENV, ARGS("--max-result-bytes", "1GB")},
	 "--max-result-bytes: must be a size in bytes, KiB or MiB between 0 and 67108864 "
	 "(got \"1GB\")"},
	{{ENV("LEDGER_LOG_LEVEL", "trace"), {NULL}},
	 "LEDGER_LOG_LEVEL: must be one of debug, info, warn, error (got \"trace\")"},
	{{ENV("LEDGER_FAST_PATHS", "true"), {NULL}},
	 "LEDGER_FAST_PATHS: must be on or off (got \"true\")"},
	/* a variable set to "" is given, not unset */
	{{ENV("LEDGER_DATABASE_URL", ""), {NULL}}, "LEDGER_DATABASE_URL: must not be empty"},
	{{ENV("LEDGER_POLICY", ""), {NULL}}, "LEDGER_POLICY: must not be empty"},
	/* a flag of another setting does not hide the variable's error */
	{{ENV("LEDGER_WORKERS", "0"), ARGS("--batch-max", "2")},
	 "LEDGER_WORKERS: must be an integer between 1 and 256 (got \"0\")"},
	/* a bad flag over a good variable is named by the flag */
	{{ENV("LEDGER_WORKERS", "8"), ARGS("--workers", "0")},
	 INT_RANGE("workers", "1", "256", "0")},
};

static void test_settings_variable_errors_name_the_variable(void **state)
{
	(void)state;
	run_error_rows("variable", variable_error_rows, COUNT(variable_error_rows));
}

static const struct error_row argument_error_rows[] = {
	{{NO_ENV, ARGS("--nope")}, "unknown flag --nope (see: ledgerd help)"},
	{{NO_ENV, ARGS("--nope=3")}, "unknown flag --nope (see: ledgerd help)"},
	{{NO_ENV, ARGS("--Workers", "4")}, "unknown flag --Workers (see: ledgerd help)"},
	{{NO_ENV, ARGS("--worker", "4")}, "unknown flag --worker (see: ledgerd help)"},
	{{NO_ENV, ARGS("--")}, "unknown flag -- (see: ledgerd help)"},
	{{NO_ENV, ARGS("--=x")}, "unknown flag -- (see: ledgerd help)"},
	{{NO_ENV, ARGS("--0123456789012345678901234567890123456789xyz")},
	 "unknown flag --0123456789012345678901234567890123456789 (see: ledgerd help)"},
	/* the unknown flag is reported before any value is checked */
	{{NO_ENV, ARGS("--workers", "0", "--nope")}, "unknown flag --nope (see: ledgerd help)"},
	{{NO_ENV, ARGS("--workers")}, "--workers needs a value"},
	{{NO_ENV, ARGS("serve", "--listen")}, "--listen needs a value"},
	{{NO_ENV, ARGS("--fast-paths")}, "--fast-paths needs a value"}, /* no bare switch */
	{{NO_ENV, ARGS("--json=on")}, "--json takes no value"},         /* and no valued flag */
	{{NO_ENV, ARGS("--json=")}, "--json takes no value"},
	{{NO_ENV, ARGS("a", "b", "c", "d")}, "unexpected argument \"d\""},
	{{NO_ENV,
	  ARGS("a", "b", "c", "--workers", "2", "0123456789012345678901234567890123456789xyz")},
	 "unexpected argument \"0123456789012345678901234567890123456789\""},
	/* of several bad values, the first in the settings table is reported */
	{{NO_ENV, ARGS("--workers", "0", "--listen=")}, "--listen: must not be empty"},
	{{ENV("LEDGER_GC_BATCH", "0"), ARGS("--workers", "0")},
	 INT_RANGE("workers", "1", "256", "0")},
};

static void test_settings_bad_arguments_are_one_line(void **state)
{
	(void)state;
	run_error_rows("argument", argument_error_rows, COUNT(argument_error_rows));
}

/* The lease bounds are checked against each other once both are known. */
static const struct error_row lease_rows[] = {
	{{NO_ENV, ARGS("--min-lease", "5s", "--max-lease", "1s")},
	 "--min-lease (5000 ms) is larger than --max-lease (1000 ms)"},
	{{NO_ENV, ARGS("--max-lease", "50ms")},
	 "--min-lease (100 ms) is larger than --max-lease (50 ms)"},
	{{NO_ENV, ARGS("--min-lease=1h", "--max-lease=59m")},
	 "--min-lease (3600000 ms) is larger than --max-lease (3540000 ms)"},
	/* named by the flags even when the values came from the variables */
	{{ENV("LEDGER_MIN_LEASE", "10s", "LEDGER_MAX_LEASE", "5s"), {NULL}},
	 "--min-lease (10000 ms) is larger than --max-lease (5000 ms)"},
};

static void test_settings_min_lease_above_max_lease_is_refused(void **state)
{
	(void)state;
	run_error_rows("lease", lease_rows, COUNT(lease_rows));
}

static const struct value_row equal_lease_rows[] = {
	{{NO_ENV, ARGS("--min-lease", "1s", "--max-lease", "1s")}, "min-lease", 1000, NULL},
	{{NO_ENV, ARGS("--min-lease", "1s", "--max-lease", "1s")}, "max-lease", 1000, NULL},
};

static void test_settings_min_lease_equal_to_max_lease_loads(void **state)
{
	(void)state;
	run_value_rows("equal lease", equal_lease_rows, COUNT(equal_lease_rows));
}

/* A short error buffer gets a truncated, terminated line. */
static void test_settings_error_fits_its_buffer(void **state)
{
	char *argv[] = {"ledgerd", "--workers", "0", NULL};
	struct api_settings cfg;
	const char *words[MAX_WORDS];
	size_t nwords = 99;
	char err[12];

	(void)state;
	clear_env(NULL);
	memset(err, 'x', sizeof(err));
	assert_int_equal(
		api_settings_load(&cfg, 3, argv, words, MAX_WORDS, &nwords, err, sizeof(err)),
		LEDGER_ERR_INVALID);
	assert_string_equal(err, "--workers: ");
	api_settings_free(&cfg);
}

/* --- command words ------------------------------------------------------------ */

static const struct {
	struct input in;
	size_t nwords;
	const char *words[MAX_WORDS];
} word_rows[] = {
	{{NO_ENV, {NULL}}, 0, {NULL}},
	{{NO_ENV, ARGS("serve")}, 1, {"serve"}},
	{{NO_ENV, ARGS("migrate", "--database-url", "x")}, 1, {"migrate"}},
	{{NO_ENV, ARGS("--database-url", "x", "migrate")}, 1, {"migrate"}},
	{{NO_ENV, ARGS("token", "create", "--tenant", "t1", "--role", "agent")},
	 2,
	 {"token", "create"}},
	{{NO_ENV, ARGS("--tenant", "t1", "token", "--role=agent", "create")},
	 2,
	 {"token", "create"}},
	{{NO_ENV, ARGS("sql", "claim_insert")}, 2, {"sql", "claim_insert"}},
	/* a flag without a value takes no word after it */
	{{NO_ENV, ARGS("token", "--json", "list")}, 2, {"token", "list"}},
	{{NO_ENV, ARGS("token", "revoke", "--grace", "1m", "0123456789ab")},
	 3,
	 {"token", "revoke", "0123456789ab"}},
	{{NO_ENV, ARGS("a", "b", "c")}, 3, {"a", "b", "c"}},
	/* one dash is not a flag */
	{{NO_ENV, ARGS("-h")}, 1, {"-h"}},
	{{NO_ENV, ARGS("-", "--workers", "2")}, 1, {"-"}},
	/* the word after a flag that takes a value is the value */
	{{NO_ENV, ARGS("--listen", "serve")}, 0, {NULL}},
	{{NO_ENV, ARGS("--listen", "--workers", "serve")}, 1, {"serve"}},
};

static void test_settings_command_words(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(word_rows); i++) {
		char args[512];
		struct loaded l;

		load(&word_rows[i].in, &l);
		show(&word_rows[i].in, args, sizeof(args));
		if (l.rc != LEDGER_OK)
			fail_msg("row %zu (%s): refused: %s", i, args, l.err);
		if (l.nwords != word_rows[i].nwords)
			fail_msg("row %zu (%s): %zu words, want %zu", i, args, l.nwords,
				 word_rows[i].nwords);
		for (size_t w = 0; w < l.nwords; w++) {
			if (strcmp(l.words[w], word_rows[i].words[w]) != 0)
				fail_msg("row %zu (%s): word %zu is \"%s\", want \"%s\"", i, args,
					 w, l.words[w], word_rows[i].words[w]);
		}
		api_settings_free(&l.cfg);
	}
}

/* What the service runs with comes from the settings: the bounds of kept answers and results. */
static void test_settings_config_carries_the_service_settings(void **state)
{
	const struct input in = {NO_ENV, ARGS("--max-body", "4KiB", "--max-kept-answer-bytes",
					      "8KiB", "--max-result-bytes", "2KiB")};
	struct api_config c;
	struct loaded l;

	(void)state;
	load(&in, &l);
	assert_int_equal(l.rc, LEDGER_OK);
	api_settings_config(&l.cfg, &c);
	assert_int_equal(c.max_body_bytes, 4096);
	assert_int_equal(c.max_kept_answer_bytes, 8192);
	assert_int_equal(c.max_result_bytes, 2048);
	assert_int_equal(c.min_lease_ms, 100);
	api_settings_free(&l.cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_settings_defaults, clear_env),
		cmocka_unit_test_setup(test_settings_usage_lists_every_setting, clear_env),
		cmocka_unit_test_setup(test_settings_each_from_variable_and_flag, clear_env),
		cmocka_unit_test_setup(test_settings_flag_wins_over_variable, clear_env),
		cmocka_unit_test_setup(test_settings_each_kind_of_value, clear_env),
		cmocka_unit_test_setup(test_settings_log_level_sets_the_threshold, clear_env),
		cmocka_unit_test_setup(test_settings_out_of_range_is_one_line, clear_env),
		cmocka_unit_test_setup(test_settings_malformed_is_one_line, clear_env),
		cmocka_unit_test_setup(test_settings_variable_errors_name_the_variable, clear_env),
		cmocka_unit_test_setup(test_settings_bad_arguments_are_one_line, clear_env),
		cmocka_unit_test_setup(test_settings_min_lease_above_max_lease_is_refused,
				       clear_env),
		cmocka_unit_test_setup(test_settings_min_lease_equal_to_max_lease_loads, clear_env),
		cmocka_unit_test_setup(test_settings_error_fits_its_buffer, clear_env),
		cmocka_unit_test_setup(test_settings_command_words, clear_env),
		cmocka_unit_test_setup(test_settings_config_carries_the_service_settings,
				       clear_env),
	};

	return cmocka_run_group_tests_name("settings", tests, NULL, clear_env);
}
