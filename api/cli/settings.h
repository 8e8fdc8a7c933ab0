/*
 * api/cli/settings.h: every setting of ledgerd in one table, each a flag and
 * an environment variable (the flag wins), validated at start-up so that
 * ledgerd never runs half-configured.
 */
#ifndef API_SETTINGS_H
#define API_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "api/service/config.h"
#include "ledger/common/err.h"
#include "ledger/common/log.h"

struct api_settings {
	char *database_url;         /* libpq connection string or URI; NULL: unset */
	char *listen;               /* "host:port", "[v6]:port" or "unix:/path" */
	char *ops_listen;           /* NULL: /healthz, /readyz and /metrics on listen */
	int64_t ui;                 /* 1: the incident-review page at /ui/ on listen */
	char *tls_cert, *tls_key;   /* NULL: plaintext */
	char *policy_path;          /* NULL: the built-in policy */
	int64_t workers;            /* store workers, one connection each */
	int64_t batch_max;          /* calls a worker may commit together (1: no batching) */
	int64_t replay_cache_bytes; /* budget of the replay cache; 0: off */
	int64_t fast_paths;         /* 1: fast paths, batching, replay-cache answers; 0: off */
	int64_t http_threads;       /* HTTP polling threads */
	int64_t head_timeout_ms;    /* a request's head must arrive within this of its first byte */
	int64_t body_timeout_ms;    /* its body within this of its head */
	int64_t idle_timeout_ms;    /* an idle keep-alive connection, or an unread reply */
	int64_t write_timeout_ms;   /* a client behind a reply, from its first byte */
	int64_t max_unread_output;  /* reply bytes waiting on clients behind */
	int64_t max_connections;    /* open at once, in all */
	int64_t max_connections_per_address; /* open at once from one address; 0: no limit */
	int64_t retention_ms;                /* settled requests older than this are removed */
	int64_t tombstone_ms;                /* how long a removed call's tombstone stays */
	enum ledger_log_level log_level;
	int64_t max_body_bytes;        /* larger bodies: 413 body_too_large */
	int64_t max_kept_answer_bytes; /* a larger answer keeps its length and SHA-256 only */
	int64_t max_result_bytes;      /* a larger tool-call result keeps its length and SHA-256 */
	int64_t min_lease_ms;          /* lease_ms bounds; outside: 400 invalid_field */
	int64_t max_lease_ms;
	int64_t db_timeout_ms;        /* bound on a call's wait for the database, queue included */
	int64_t queue_max;            /* calls that may wait for a worker; more: 503 */
	int64_t unavailable_retry_ms; /* retry_after_ms of 503 store_unavailable */
	int64_t drain_timeout_ms;     /* how long SIGTERM waits for calls in flight */
	int64_t gc_interval_ms;       /* how often serve runs retention */
	int64_t gc_batch;             /* requests (and tombstones) per retention transaction */
	char *tenant;                 /* token create: --tenant; token list: the one to show */
	char *role;                   /* token create: --role */
	char *from_env;               /* token create, revoke, rotate: the variable of a token */
	int64_t grace_ms;             /* token rotate: the old token's grace; 0: not given */
	int64_t json;                 /* token list: 1 with --json */
};

/**
 * Fills @p cfg from the defaults, then the environment, then @p argv
 * (flags as "--name value" or "--name=value"; the first non-flag words are
 * the command, stored in @p words up to @p max_words).
 *
 * @param cfg receives owned strings; release with api_settings_free()
 * @param err receives one line saying what is wrong (no trailing newline)
 * @return LEDGER_OK or LEDGER_ERR_INVALID
 */
LEDGER_MUSTCHECK enum ledger_err api_settings_load(struct api_settings *cfg, int argc, char **argv,
						   const char **words, size_t max_words,
						   size_t *nwords, char *err, size_t errlen);

/** Fills @p out, what the service runs with, from @p cfg (borrowed: @p out points into it). */
void api_settings_config(const struct api_settings *cfg, struct api_config *out);

/** Frees the strings of @p cfg. */
void api_settings_free(struct api_settings *cfg);

/**
 * For a command that needs the database: 0 when @p cfg names one, else 2
 * (a usage error) after saying which flag or variable is missing.
 */
int api_settings_need_database(const struct api_settings *cfg);

/** Writes the flag and variable reference (for `ledgerd help`) to @p out. */
void api_settings_usage(FILE *out);

#endif
