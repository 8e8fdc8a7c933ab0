/*
 * api/cli/main.c: the ledgerd command: serve (the default), migrate, the
 * token commands (api/cli/tokencmd.c), gc, sql, version and help. Settings are
 * validated before anything starts; a bad one ends the process with one
 * line and exit status 2.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/service/server.h"
#include "api/wire/listen.h"
#include "api/wire/tls.h"
#include "api/cli/settings.h"
#include "ledger/common/log.h"
#include "ledger/common/trace.h"
#include "ledger/store/maintenance.h"
#include "ledger/store/token_watch.h"
#include "ledger/store/migrate.h"
#include "ledger/core/policy.h"
#include "ledger/store/replay_cache.h"
#include "ledger/store/store.h"
#include "api/cli/tokencmd.h"
#include "api/service/tokens.h"

#define EXIT_USAGE 2

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ledgerd [serve | migrate | token create|list|revoke|rotate | gc | sql [NAME] | "
		"version | help] [flags]\n\n"
		"  serve          serve the API until SIGTERM (the default)\n"
		"  migrate        apply the schema's migrations\n"
		"  token create   --tenant T --role R [--from-env VAR]: create a token and print it\n"
		"                 (--from-env: store the one the variable holds, print nothing)\n"
		"  token list     [--tenant T] [--json]: every token's id, tenant, role, state, times\n"
		"  token revoke   ID | --from-env VAR: revoke a token; every ledgerd refuses it within "
		"%d s\n"
		"  token rotate   ID | --from-env VAR [--grace D]: print a new token for the same "
		"tenant\n"
		"                 and role, and revoke the old one (after D: it works until then)\n"
		"  gc             run retention once and say what it removed\n"
		"  sql [NAME]     the names of ledgerd's SQL statements, or one's text (benchmarks, "
		"reviews)\n"
		"  version        the version and the schema it expects (also --version)\n"
		"  help, --help   this\n\n"
		"flags (each also an environment variable; the flag wins):\n",
		API_TOKEN_CACHE_MS / 1000);
	api_settings_usage(f);
}

static int cmd_migrate(const struct api_settings *cfg)
{
	struct ledger_store_conn *conn = NULL;
	struct ledger_schema_state db;
	char err[512];
	unsigned applied = 0;
	enum ledger_err rc;

	if (ledger_store_connect(cfg->database_url, &conn, err, sizeof(err)) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: cannot connect to the database: %s\n", err);
		return 1;
	}
	rc = ledger_store_migrate(conn, &applied, &db, err, sizeof(err));
	ledger_store_disconnect(conn);
	if (rc != LEDGER_OK) {
		fprintf(stderr, "ledgerd: migrate: %s\n", err);
		return 1;
	}
	printf("schema at version %d (%u migration%s applied)\n", db.version, applied,
	       applied == 1 ? "" : "s");
	if (ledger_migrate_fit(&db) == LEDGER_SCHEMA_NEWER)
		printf("the database's schema is newer than this ledgerd's (%d); its migrations "
		       "since are additive, and this ledgerd serves it\n",
		       ledger_migrate_expected_version());
	return 0;
}

/*
 * Reads the database's schema once before serving. A schema this ledgerd
 * may not serve (a newer one whose migrations are not all additive) ends
 * the start; an older one is served as unready (/readyz 503) until
 * `ledgerd migrate` runs; an unreachable database is left to the workers,
 * which reconnect. @return 0, or the exit status
 */
static int check_schema(const struct api_settings *cfg)
{
	struct ledger_store_conn *conn = NULL;
	struct ledger_schema_state db;
	int mine = ledger_migrate_expected_version();
	char err[512];
	enum ledger_err rc;

	if (ledger_store_connect(cfg->database_url, &conn, err, sizeof(err)) != LEDGER_OK)
		return 0;
	rc = ledger_store_schema_version(conn, &db);
	ledger_store_disconnect(conn);
	if (rc != LEDGER_OK)
		return 0;
	switch (ledger_migrate_fit(&db)) {
	case LEDGER_SCHEMA_CURRENT:
		break;
	case LEDGER_SCHEMA_NEWER:
		LOG_INFO("the database is at schema %d, newer than this ledgerd's %d; its "
			 "migrations since are additive, so this ledgerd serves it",
			 db.version, mine);
		break;
	case LEDGER_SCHEMA_OLDER:
		LOG_WARN("the database is at schema %d, older than this ledgerd's %d: /readyz "
			 "answers 503 and calls fail until ledgerd migrate runs",
			 db.version, mine);
		break;
	case LEDGER_SCHEMA_TOO_NEW:
		fprintf(stderr,
			"ledgerd: the database is at schema %d, which a ledgerd of schema %d or "
			"newer must serve; this one knows schema %d\n",
			db.version, db.oldest_binary_schema, mine);
		return 1;
	}
	return 0;
}

static int cmd_gc(const struct api_settings *cfg)
{
	struct ledger_store_conn *conn = NULL;
	struct ledger_gc_stats stats;
	bool done = false;
	char err[512];
	enum ledger_err rc = LEDGER_OK;

	if (ledger_store_connect(cfg->database_url, &conn, err, sizeof(err)) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: cannot connect to the database: %s\n", err);
		return 1;
	}
	memset(&stats, 0, sizeof(stats));
	while (!done && rc == LEDGER_OK)
		rc = ledger_store_gc_batch(conn, cfg->retention_ms, cfg->tombstone_ms,
					   (unsigned)cfg->gc_batch, &stats, &done);
	ledger_store_disconnect(conn);
	printf("removed %lld settled requests older than the retention period, with %lld tool "
	       "calls, %lld attempts and %lld events; left %lld tombstones; removed %lld expired "
	       "tombstones\n",
	       (long long)stats.requests, (long long)stats.tool_calls, (long long)stats.attempts,
	       (long long)stats.events, (long long)stats.tombstones,
	       (long long)stats.expired_tombstones);
	if (rc != LEDGER_OK) {
		fprintf(stderr, "ledgerd: gc stopped: the database failed (see the log); what is "
				"counted above was removed\n");
		return 1;
	}
	return 0;
}

static void close_sockets(struct api_server_sockets *sk)
{
	if (sk->api_fd >= 0)
		close(sk->api_fd);
	if (sk->ops_fd >= 0)
		close(sk->ops_fd);
	wire_tls_close(sk->tls);
	sk->api_fd = sk->ops_fd = -1;
	sk->tls = NULL;
}

/* Opens the listeners and reads the TLS credentials. @return 0, or the exit status */
static int open_sockets(const struct api_settings *cfg, struct api_server_sockets *sk)
{
	char err[400];

	if ((cfg->tls_cert == NULL) != (cfg->tls_key == NULL)) {
		fprintf(stderr, "ledgerd: --tls-cert and --tls-key go together\n");
		return EXIT_USAGE;
	}
	if (cfg->tls_cert != NULL && strncmp(cfg->listen, "unix:", 5) == 0) {
		fprintf(stderr,
			"ledgerd: --tls-cert: TLS is for a TCP --listen, not a unix socket\n");
		return EXIT_USAGE;
	}
	if (cfg->tls_cert != NULL &&
	    wire_tls_open(cfg->tls_cert, cfg->tls_key, &sk->tls, err, sizeof(err)) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: %s\n", err);
		return EXIT_USAGE;
	}
	sk->api_fd = wire_listen_open(cfg->listen, sk->api_bound, sizeof(sk->api_bound), err,
				      sizeof(err));
	if (sk->api_fd < 0) {
		int status = sk->api_fd == -2 ? EXIT_USAGE : 1;

		fprintf(stderr, "ledgerd: %s%s\n", sk->api_fd == -2 ? "--listen: " : "", err);
		close_sockets(sk);
		return status;
	}
	if (cfg->ops_listen != NULL) {
		sk->ops_fd = wire_listen_open(cfg->ops_listen, sk->ops_bound,
					      sizeof(sk->ops_bound), err, sizeof(err));
		if (sk->ops_fd < 0) {
			int status = sk->ops_fd == -2 ? EXIT_USAGE : 1;

			fprintf(stderr, "ledgerd: --ops-listen: %s\n", err);
			close_sockets(sk);
			return status;
		}
	}
	return 0;
}

static int cmd_serve(const struct api_settings *cfg)
{
	struct ledger_store_config scfg = {
		.database_url = cfg->database_url,
		.workers = (unsigned)cfg->workers,
		.batch_max = (unsigned)cfg->batch_max,
		.reconnect_ms = 200,
		.queue_max = (size_t)cfg->queue_max,
	};
	struct ledger_maintenance_config mcfg = {
		.database_url = cfg->database_url,
		.retention_ms = cfg->retention_ms,
		.tombstone_ms = cfg->tombstone_ms,
		.gc_interval_ms = cfg->gc_interval_ms,
		.gc_batch = (unsigned)cfg->gc_batch,
	};
	struct ledger_token_watch_config wcfg = {
		.database_url = cfg->database_url,
		.reload_ms = API_TOKEN_SET_RELOAD_MS,
		.loaded = api_tokens_known_load,
		.stale = api_tokens_known_stale,
	};
	struct api_config acfg;
	struct ledger_maintenance *maintenance = NULL;
	struct ledger_token_watch *watch = NULL;
	struct ledger_store *store = NULL;
	struct ledger_policy policy;
	struct api_server_sockets sk = {.api_fd = -1, .ops_fd = -1};
	char err[400];
	int rc;

	api_settings_config(cfg, &acfg);
	/* The failover policy is read and checked at start-up, like any setting. */
	ledger_policy_default(&policy);
	if (cfg->policy_path != NULL &&
	    ledger_policy_load(cfg->policy_path, &policy, err, sizeof(err)) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: --policy: %s\n", err);
		return EXIT_USAGE;
	}
	ledger_store_set_fast_paths(cfg->fast_paths != 0);
	ledger_store_set_timeout(cfg->db_timeout_ms);
	rc = check_schema(cfg);
	if (rc != 0)
		return rc;
	if (!ledger_replay_cache_init((size_t)cfg->replay_cache_bytes, cfg->retention_ms)) {
		fprintf(stderr, "ledgerd: out of memory for --replay-cache\n");
		return 1;
	}
	/* Credentials and addresses that are wrong or taken fail before anything starts. */
	rc = open_sockets(cfg, &sk);
	if (rc != 0)
		return rc;
	if (ledger_store_open(&scfg, &store) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: cannot start the database workers\n");
		close_sockets(&sk);
		return 1;
	}
	if (ledger_maintenance_start(&mcfg, &maintenance) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: cannot start the maintenance thread\n");
		ledger_store_close(store);
		close_sockets(&sk);
		return 1;
	}
	/* Until it has read the live tokens, every token is looked up as it comes. */
	if (ledger_token_watch_start(&wcfg, &watch) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: cannot start the token watch thread\n");
		ledger_maintenance_stop(maintenance);
		ledger_store_close(store);
		close_sockets(&sk);
		return 1;
	}
	/*
	 * Spans start with the first call and end with the last: the tracer
	 * runs across serving, and its shutdown, after the drain, sends what
	 * the calls left queued.
	 */
	ledger_trace_init("ledgerd", LEDGER_VERSION);
	rc = api_server_run(&acfg, &policy, store, &sk);
	ledger_trace_shutdown();
	wire_tls_close(sk.tls);
	ledger_token_watch_stop(watch);
	ledger_maintenance_stop(maintenance);
	ledger_store_close(store);
	ledger_replay_cache_free();
	return rc;
}

int main(int argc, char **argv)
{
	struct api_settings cfg;
	const char *words[3] = {NULL, NULL, NULL};
	size_t nwords = 0;
	char err[512];
	sigset_t block;
	int rc = EXIT_USAGE;

	/*
	 * Every thread inherits this mask: the signals that stop ledgerd are
	 * taken by sigwait() in api_server_run(), never by a worker.
	 */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* Asked for help or the version, a command answers with it, whatever else its line holds. */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("ledgerd %s (schema %d)\n", LEDGER_VERSION,
			       ledger_migrate_expected_version());
			return 0;
		}
	}
	if (api_settings_load(&cfg, argc, argv, words, 3, &nwords, err, sizeof(err)) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: %s\n", err);
		api_settings_free(&cfg);
		return EXIT_USAGE;
	}
	if (nwords == 0 || strcmp(words[0], "serve") == 0) {
		if (nwords > 1)
			goto unexpected;
		rc = api_settings_need_database(&cfg);
		if (rc == 0)
			rc = cmd_serve(&cfg);
	} else if (strcmp(words[0], "migrate") == 0 && nwords == 1) {
		rc = api_settings_need_database(&cfg);
		if (rc == 0)
			rc = cmd_migrate(&cfg);
	} else if (strcmp(words[0], "token") == 0) {
		rc = api_tokencmd_run(&cfg, words, nwords);
	} else if (strcmp(words[0], "gc") == 0 && nwords == 1) {
		rc = api_settings_need_database(&cfg);
		if (rc == 0)
			rc = cmd_gc(&cfg);
	} else if (strcmp(words[0], "sql") == 0 && nwords == 1) {
		/* The names of every statement, one a line. */
		for (size_t i = 0; ledger_store_sql_name(i) != NULL; i++)
			printf("%s\n", ledger_store_sql_name(i));
		rc = 0;
	} else if (strcmp(words[0], "sql") == 0 && nwords == 2) {
		/* For benchmarks, which must run ledgerd's own SQL. */
		const char *sql = ledger_store_sql(words[1]);

		rc = sql != NULL ? 0 : 1;
		if (sql != NULL)
			printf("%s\n", sql);
		else
			fprintf(stderr, "ledgerd: no statement called %s\n", words[1]);
	} else if (strcmp(words[0], "version") == 0 && nwords == 1) {
		printf("ledgerd %s (schema %d)\n", LEDGER_VERSION,
		       ledger_migrate_expected_version());
		rc = 0;
	} else if (strcmp(words[0], "help") == 0) {
		usage(stdout);
		rc = 0;
	} else {
		goto unexpected;
	}
	api_settings_free(&cfg);
	return rc;
unexpected:
	fprintf(stderr, "ledgerd: unknown command \"%s\" (see: ledgerd help)\n",
		nwords > 1 ? words[nwords - 1] : words[0]);
	api_settings_free(&cfg);
	return EXIT_USAGE;
}
