/*
 * api/cli/settings.c: the settings table behind api/cli/settings.h. Defaults come
 * first, the environment overrides them, flags override both; every value
 * is then parsed and range-checked in one place, and the first error is
 * reported as one line.
 */
#include "api/cli/settings.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind {
	K_STRING,   /* kept as given */
	K_INT,      /* plain decimal integer */
	K_DURATION, /* integer with a unit: ms, s, m, h, d; stored in ms */
	K_BYTES,    /* integer, optionally with KiB or MiB */
	K_LEVEL,    /* log level name */
	K_SWITCH,   /* on or off; stored as 1 or 0 */
	K_FLAG,     /* given bare, without a value; stored as 1 (0: not given) */
};

struct setting {
	const char *flag; /* without the leading "--" */
	const char *env;  /* NULL: flag only */
	enum kind kind;
	const char *def;  /* NULL: unset unless given */
	int64_t min, max; /* after unit conversion; ignored for strings */
	size_t offset;    /* into struct api_settings */
	const char *help;
};

#define OFF(field) offsetof(struct api_settings, field)
#define DAY_MS (24LL * 3600 * 1000)

static const struct setting settings[] = {
	{"database-url", "LEDGER_DATABASE_URL", K_STRING, NULL, 0, 0, OFF(database_url),
	 "libpq connection string or URI (multi-host allowed); required"},
	{"listen", "LEDGER_LISTEN", K_STRING, "127.0.0.1:8080", 0, 0, OFF(listen),
	 "HOST:PORT, [V6]:PORT or unix:/path/to.sock"},
	{"ops-listen", "LEDGER_OPS_LISTEN", K_STRING, NULL, 0, 0, OFF(ops_listen),
	 "HOST:PORT or unix:/path for /healthz, /readyz and /metrics alone (then not on "
	 "--listen's /metrics)"},
	{"ui", "LEDGER_UI", K_SWITCH, "on", 0, 1, OFF(ui),
	 "the incident-review page at /ui/ on --listen (off: /ui/ is 404)"},
	{"tls-cert", "LEDGER_TLS_CERT", K_STRING, NULL, 0, 0, OFF(tls_cert),
	 "PEM certificate chain: --listen serves HTTPS (with --tls-key; SIGHUP reloads both)"},
	{"tls-key", "LEDGER_TLS_KEY", K_STRING, NULL, 0, 0, OFF(tls_key),
	 "PEM private key of --tls-cert"},
	{"policy", "LEDGER_POLICY", K_STRING, NULL, 0, 0, OFF(policy_path),
	 "failover policy file (YAML); default: the built-in policy"},
	{"workers", "LEDGER_WORKERS", K_INT, "4", 1, 256, OFF(workers),
	 "database workers, one connection each"},
	{"batch-max", "LEDGER_BATCH_MAX", K_INT, "32", 1, 1024, OFF(batch_max),
	 "calls a database worker may commit in one transaction (1: no batching)"},
	{"replay-cache", "LEDGER_REPLAY_CACHE", K_BYTES, "16MiB", 0, 1LL << 30,
	 OFF(replay_cache_bytes),
	 "memory for replaying settled calls without the database (0: off)"},
	{"fast-paths", "LEDGER_FAST_PATHS", K_SWITCH, "on", 0, 1, OFF(fast_paths),
	 "one-statement fast paths, batching and replay-cache answers (off: every call locks "
	 "and decides in C)"},
	{"http-threads", "LEDGER_HTTP_THREADS", K_INT, "2", 1, 64, OFF(http_threads),
	 "HTTP polling threads"},
	{"head-timeout", "LEDGER_HEAD_TIMEOUT", K_DURATION, "10s", 100, 600 * 1000,
	 OFF(head_timeout_ms), "longest a request's head may take to arrive; then 408"},
	{"body-timeout", "LEDGER_BODY_TIMEOUT", K_DURATION, "30s", 100, 3600 * 1000,
	 OFF(body_timeout_ms), "longest a request's body may take after its head; then 408"},
	{"idle-timeout", "LEDGER_IDLE_TIMEOUT", K_DURATION, "60s", 100, 3600 * 1000,
	 OFF(idle_timeout_ms), "an idle keep-alive connection, or a reply not read, is closed"},
	{"write-timeout", "LEDGER_WRITE_TIMEOUT", K_DURATION, "60s", 100, 3600 * 1000,
	 OFF(write_timeout_ms),
	 "longest a client may be behind a reply, from its first byte, however often it reads a "
	 "little; then it is closed"},
	{"max-unread-output", "LEDGER_MAX_UNREAD_OUTPUT", K_BYTES, "64MiB", 1LL << 20, 64LL << 30,
	 OFF(max_unread_output),
	 "reply bytes waiting on clients behind them, in all; past it the longest behind are "
	 "closed"},
	{"max-connections", "LEDGER_MAX_CONNECTIONS", K_INT, "4096", 1, 1000000,
	 OFF(max_connections), "connections open at once; more are closed unanswered"},
	{"max-connections-per-address", "LEDGER_MAX_CONNECTIONS_PER_ADDRESS", K_INT, "256", 0,
	 1000000, OFF(max_connections_per_address),
	 "connections open at once from one client address (0: no limit)"},
	{"retention", "LEDGER_RETENTION", K_DURATION, "7d", 60 * 1000, 3650 * DAY_MS,
	 OFF(retention_ms), "age after which settled requests are removed"},
	{"tombstone-retention", "LEDGER_TOMBSTONE_RETENTION", K_DURATION, "90d", 60 * 1000,
	 3650 * DAY_MS, OFF(tombstone_ms), "how long a removed call still refuses to run"},
	{"log-level", "LEDGER_LOG_LEVEL", K_LEVEL, "info", 0, 0, OFF(log_level),
	 "debug, info, warn or error"},
	{"max-body", "LEDGER_MAX_BODY", K_BYTES, "1MiB", 1024, 64LL << 20, OFF(max_body_bytes),
	 "largest request body accepted"},
	{"max-kept-answer-bytes", "LEDGER_MAX_KEPT_ANSWER_BYTES", K_BYTES, "1MiB", 0, 64LL << 20,
	 OFF(max_kept_answer_bytes),
	 "largest answer a request keeps whole, decoded (a larger one keeps its length and "
	 "SHA-256); finish and failover take bodies this much larger, in base64"},
	{"max-result-bytes", "LEDGER_MAX_RESULT_BYTES", K_BYTES, "1MiB", 0, 64LL << 20,
	 OFF(max_result_bytes),
	 "largest tool-call result kept whole, as sent (a larger one keeps its length and "
	 "SHA-256; the completion succeeds)"},
	{"min-lease", "LEDGER_MIN_LEASE", K_DURATION, "100ms", 1, 3600 * 1000, OFF(min_lease_ms),
	 "smallest lease_ms accepted"},
	{"max-lease", "LEDGER_MAX_LEASE", K_DURATION, "1h", 1, DAY_MS, OFF(max_lease_ms),
	 "largest lease_ms accepted"},
	{"db-timeout", "LEDGER_DB_TIMEOUT", K_DURATION, "5s", 100, 600 * 1000, OFF(db_timeout_ms),
	 "longest a call waits for the database, queue included; then 503"},
	{"queue-max", "LEDGER_QUEUE_MAX", K_INT, "1024", 1, 1000000, OFF(queue_max),
	 "calls that may wait for a database worker; more are answered 503"},
	{"unavailable-retry", "LEDGER_UNAVAILABLE_RETRY", K_DURATION, "1s", 1, 60 * 1000,
	 OFF(unavailable_retry_ms), "retry_after_ms when the database is unreachable"},
	{"drain-timeout", "LEDGER_DRAIN_TIMEOUT", K_DURATION, "30s", 0, 3600 * 1000,
	 OFF(drain_timeout_ms), "how long shutdown waits for calls in flight"},
	{"gc-interval", "LEDGER_GC_INTERVAL", K_DURATION, "5m", 1000, DAY_MS, OFF(gc_interval_ms),
	 "how often serve runs retention"},
	{"gc-batch", "LEDGER_GC_BATCH", K_INT, "500", 1, 100000, OFF(gc_batch),
	 "requests removed per retention transaction"},
	{"tenant", NULL, K_STRING, NULL, 0, 0, OFF(tenant),
	 "token create: the tenant; token list: only this tenant's tokens"},
	{"role", NULL, K_STRING, NULL, 0, 0, OFF(role),
	 "token create: agent, router, reviewer or admin"},
	{"from-env", NULL, K_STRING, NULL, 0, 0, OFF(from_env),
	 "token create: store the token this environment variable holds instead of making one; "
	 "token revoke, rotate: the token to act on"},
	{"grace", NULL, K_DURATION, NULL, 1000, 30 * DAY_MS, OFF(grace_ms),
	 "token rotate: the old token keeps working this long (default: it stops now)"},
	{"json", NULL, K_FLAG, NULL, 0, 1, OFF(json), "token list: JSON instead of the table"},
};

#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static const struct setting *find_flag(const char *name, size_t len)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		if (strlen(settings[i].flag) == len && strncmp(settings[i].flag, name, len) == 0)
			return &settings[i];
	}
	return NULL;
}

/* Parses a decimal integer with an optional unit suffix from @p units. */
static int parse_scaled(const char *s, const char *const *units, const int64_t *scales,
			bool unit_required, int64_t *out)
{
	char *end = NULL;
	long long v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0)
		return -1;
	if (*end == '\0') {
		if (unit_required)
			return -1;
		*out = v;
		return 0;
	}
	for (size_t i = 0; units[i] != NULL; i++) {
		if (strcmp(end, units[i]) == 0) {
			if (v > INT64_MAX / scales[i])
				return -1;
			*out = v * scales[i];
			return 0;
		}
	}
	return -1;
}

static const char *const duration_units[] = {"ms", "s", "m", "h", "d", NULL};
static const int64_t duration_scales[] = {1, 1000, 60 * 1000, 3600 * 1000, DAY_MS};
static const char *const byte_units[] = {"B", "KiB", "MiB", NULL};
static const int64_t byte_scales[] = {1, 1024, 1024 * 1024};

static const char *kind_hint(enum kind k)
{
	switch (k) {
	case K_INT:
		return "an integer";
	case K_DURATION:
		return "a duration such as 500ms, 30s, 5m, 12h or 7d";
	case K_BYTES:
		return "a size in bytes, KiB or MiB";
	case K_LEVEL:
		return "one of debug, info, warn, error";
	case K_SWITCH:
		return "on or off";
	case K_FLAG:
		return "given without a value";
	case K_STRING:
		break;
	}
	return "a string";
}

static void describe(const struct setting *st, bool from_flag, char *err, size_t errlen,
		     const char *what)
{
	if (from_flag || st->env == NULL)
		snprintf(err, errlen, "--%s: %s", st->flag, what);
	else
		snprintf(err, errlen, "%s: %s", st->env, what);
}

static int apply(struct api_settings *cfg, const struct setting *st, const char *value,
		 bool from_flag, char *err, size_t errlen)
{
	char *base = (char *)cfg + st->offset;
	char what[200];
	int64_t v = 0;
	int rc = 0;

	switch (st->kind) {
	case K_STRING: {
		char **slot = (char **)(void *)base;
		if (value[0] == '\0') {
			describe(st, from_flag, err, errlen, "must not be empty");
			return -1;
		}
		free(*slot);
		*slot = strdup(value);
		if (*slot == NULL) {
			describe(st, from_flag, err, errlen, "out of memory");
			return -1;
		}
		return 0;
	}
	case K_LEVEL:
		if (ledger_log_parse_level(value, (enum ledger_log_level *)(void *)base) != 0)
			rc = -1;
		break;
	case K_SWITCH:
		if (strcmp(value, "on") == 0)
			v = 1;
		else if (strcmp(value, "off") == 0)
			v = 0;
		else
			rc = -1;
		break;
	case K_FLAG:
		v = 1; /* the loader refuses a value given to it */
		break;
	case K_INT:
		rc = parse_scaled(value, (const char *const[]){NULL}, NULL, false, &v);
		break;
	case K_DURATION:
		rc = parse_scaled(value, duration_units, duration_scales, true, &v);
		break;
	case K_BYTES:
		rc = parse_scaled(value, byte_units, byte_scales, false, &v);
		break;
	}
	if (rc == 0 && st->kind != K_LEVEL && (v < st->min || v > st->max))
		rc = -1;
	if (rc != 0) {
		if (st->kind == K_LEVEL || st->kind == K_STRING || st->kind == K_SWITCH)
			snprintf(what, sizeof(what), "must be %s (got \"%.40s\")",
				 kind_hint(st->kind), value);
		else
			snprintf(what, sizeof(what),
				 "must be %s between %lld and %lld%s (got \"%.40s\")",
				 kind_hint(st->kind), (long long)st->min, (long long)st->max,
				 st->kind == K_DURATION ? " ms" : "", value);
		describe(st, from_flag, err, errlen, what);
		return -1;
	}
	if (st->kind != K_LEVEL)
		*(int64_t *)(void *)base = v;
	return 0;
}

enum ledger_err api_settings_load(struct api_settings *cfg, int argc, char **argv,
				  const char **words, size_t max_words, size_t *nwords, char *err,
				  size_t errlen)
{
	/* Each setting's winning text and where it came from, validated once. */
	const char *value[NSETTINGS];
	bool from_flag[NSETTINGS];

	memset(cfg, 0, sizeof(*cfg));
	*nwords = 0;
	for (size_t i = 0; i < NSETTINGS; i++) {
		const char *env = settings[i].env != NULL ? getenv(settings[i].env) : NULL;

		value[i] = env != NULL ? env : settings[i].def;
		from_flag[i] = false;
	}
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *eq = NULL;
		const struct setting *st = NULL;
		size_t namelen;

		if (strncmp(arg, "--", 2) != 0) {
			if (*nwords >= max_words) {
				snprintf(err, errlen, "unexpected argument \"%.40s\"", arg);
				return LEDGER_ERR_INVALID;
			}
			words[(*nwords)++] = arg;
			continue;
		}
		arg += 2;
		eq = strchr(arg, '=');
		namelen = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
		st = find_flag(arg, namelen);
		if (st == NULL) {
			snprintf(err, errlen, "unknown flag --%.*s (see: ledgerd help)",
				 (int)(namelen > 40 ? 40 : namelen), arg);
			return LEDGER_ERR_INVALID;
		}
		if (st->kind == K_FLAG) {
			if (eq != NULL) {
				snprintf(err, errlen, "--%s takes no value", st->flag);
				return LEDGER_ERR_INVALID;
			}
			value[st - settings] = "";
			from_flag[st - settings] = true;
			continue;
		}
		if (eq == NULL && i + 1 >= argc) {
			snprintf(err, errlen, "--%s needs a value", st->flag);
			return LEDGER_ERR_INVALID;
		}
		value[st - settings] = eq != NULL ? eq + 1 : argv[++i];
		from_flag[st - settings] = true;
	}
	for (size_t i = 0; i < NSETTINGS; i++) {
		if (value[i] != NULL &&
		    apply(cfg, &settings[i], value[i], from_flag[i], err, errlen) != 0) {
			if (value[i] == settings[i].def)
				abort(); /* a default outside its own range is a bug */
			return LEDGER_ERR_INVALID;
		}
	}
	if (cfg->min_lease_ms > cfg->max_lease_ms) {
		snprintf(err, errlen, "--min-lease (%lld ms) is larger than --max-lease (%lld ms)",
			 (long long)cfg->min_lease_ms, (long long)cfg->max_lease_ms);
		return LEDGER_ERR_INVALID;
	}
	ledger_log_threshold = cfg->log_level;
	return LEDGER_OK;
}

void api_settings_free(struct api_settings *cfg)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		if (settings[i].kind == K_STRING) {
			char **slot = (char **)(void *)((char *)cfg + settings[i].offset);
			free(*slot);
			*slot = NULL;
		}
	}
}

int api_settings_need_database(const struct api_settings *cfg)
{
	if (cfg->database_url != NULL)
		return 0;
	fprintf(stderr, "ledgerd: --database-url or LEDGER_DATABASE_URL is required\n");
	return 2;
}

void api_settings_usage(FILE *f)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		fprintf(f, "  --%-20s %-28s %s", settings[i].flag,
			settings[i].env != NULL ? settings[i].env : "", settings[i].help);
		if (settings[i].def != NULL)
			fprintf(f, " (default %s)", settings[i].def);
		fputc('\n', f);
	}
}

void api_settings_config(const struct api_settings *cfg, struct api_config *out)
{
	*out = (struct api_config){
		.listen = cfg->listen,
		.ui = cfg->ui != 0,
		.max_body_bytes = cfg->max_body_bytes,
		.max_kept_answer_bytes = cfg->max_kept_answer_bytes,
		.max_result_bytes = cfg->max_result_bytes,
		.min_lease_ms = cfg->min_lease_ms,
		.max_lease_ms = cfg->max_lease_ms,
		.unavailable_retry_ms = cfg->unavailable_retry_ms,
		.drain_timeout_ms = cfg->drain_timeout_ms,
		.head_timeout_ms = cfg->head_timeout_ms,
		.body_timeout_ms = cfg->body_timeout_ms,
		.idle_timeout_ms = cfg->idle_timeout_ms,
		.write_timeout_ms = cfg->write_timeout_ms,
		.max_unread_output = cfg->max_unread_output,
		.max_connections = cfg->max_connections,
		.max_connections_per_address = cfg->max_connections_per_address,
		.http_threads = cfg->http_threads,
		.workers = cfg->workers,
	};
}
