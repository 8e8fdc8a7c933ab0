/*
 * sdk/programs/ledger-mcp/main.c: ledger-mcp's command line. One settings table (flag,
 * environment variable, default, bounds), read once and checked whole
 * before anything starts: a bad setting exits 2 with one line. Then the
 * ledgerd client is opened and the chosen transport runs.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger/common/log.h"
#include "ledger/common/trace.h"
#include "sdk/programs/ledger-mcp/http.h"
#include "sdk/programs/ledger-mcp/intercept.h"
#include "sdk/programs/ledger-mcp/stdio.h"

#ifndef LEDGER_VERSION
#define LEDGER_VERSION "unknown"
#endif

enum kind {
	K_STRING, /* kept as given */
	K_MS,     /* a whole number of milliseconds within [min, max] */
	K_BYTES,  /* a whole number of bytes, KiB or MiB, within [min, max] bytes */
	K_FLAG,   /* present, or the variable is 1/true/on */
};

struct setting {
	const char *flag; /* with its "--" */
	const char *env;
	enum kind kind;
	const char *def; /* NULL: unset unless given */
	uint32_t min, max;
	const char *help;
};

enum {
	S_LEDGER_URL,
	S_TOKEN,
	S_TOKEN_FILE,
	S_CA_FILE,
	S_LEASE,
	S_WAIT,
	S_CALL_TIMEOUT,
	S_LEDGER_RETRY,
	S_MAX_RESULT,
	S_REQUIRE_KEY,
	S_TRUST,
	S_STORE_ARGS,
	S_OWNER,
	S_LISTEN,
	S_UPSTREAM,
	S_TLS_CERT,
	S_TLS_KEY,
	S_LOG_LEVEL,
	S_COUNT,
};

static const struct setting settings[S_COUNT] = {
	[S_LEDGER_URL] = {"--ledger-url", "LEDGER_URL", K_STRING, "http://127.0.0.1:8080", 0, 0,
			  "ledgerd's address"},
	[S_TOKEN] = {"--token", "LEDGER_TOKEN", K_STRING, NULL, 0, 0,
		     "the tenant's agent token (or --token-file)"},
	[S_TOKEN_FILE] = {"--token-file", "LEDGER_TOKEN_FILE", K_STRING, NULL, 0, 0,
			  "a file whose first line is the token: kept out of the process list"},
	[S_CA_FILE] = {"--ca-file", "LEDGER_CA_FILE", K_STRING, NULL, 0, 0,
		       "https ledgerd: the PEM file of the CAs that may sign its certificate"},
	[S_LEASE] = {"--lease-ms", "LEDGER_MCP_LEASE_MS", K_MS, "30000", 100, 3600000,
		     "a claim's lease; renewed every third of it while the server runs the call"},
	[S_WAIT] = {"--wait-ms", "LEDGER_MCP_WAIT_MS", K_MS, "30000", 0, 3600000,
		    "how long a call waits while another holder runs the same key"},
	[S_CALL_TIMEOUT] = {"--call-timeout-ms", "LEDGER_MCP_CALL_TIMEOUT_MS", K_MS, "0", 0,
			    86400000,
			    "how long a forwarded call may run before it is given up as unknown "
			    "(0: no bound)"},
	[S_LEDGER_RETRY] = {"--ledger-retry-ms", "LEDGER_MCP_LEDGER_RETRY_MS", K_MS, "10000", 0,
			    3600000,
			    "how long a claim is re-sent while ledgerd does not answer (0: once)"},
	[S_MAX_RESULT] = {"--max-result-bytes", "LEDGER_MCP_MAX_RESULT_BYTES", K_BYTES, "1MiB", 1,
			  64u << 20,
			  "the largest result recorded whole; a larger one is recorded as its "
			  "length and SHA-256, and a retry gets -32022"},
	[S_REQUIRE_KEY] = {"--require-key", "LEDGER_MCP_REQUIRE_KEY", K_FLAG, NULL, 0, 0,
			   "refuse a tools/call that names no ledger key"},
	[S_TRUST] = {"--trust-annotations", "LEDGER_MCP_TRUST_ANNOTATIONS", K_FLAG, NULL, 0, 0,
		     "believe the server's tool annotations: readOnlyHint skips the claim, "
		     "idempotentHint claims as a tool that dedupes"},
	[S_STORE_ARGS] = {"--store-args", "LEDGER_MCP_STORE_ARGS", K_FLAG, NULL, 0, 0,
			  "send each call's arguments to ledgerd, for incident review"},
	[S_OWNER] = {"--owner", "LEDGER_MCP_OWNER", K_STRING, NULL, 0, 0,
		     "who executes, as review shows it (default ledger-mcp@HOSTNAME)"},
	[S_LISTEN] = {"--listen", "LEDGER_MCP_LISTEN", K_STRING, NULL, 0, 0,
		      "http: HOST:PORT to listen on (port 0: any free one)"},
	[S_UPSTREAM] =
		{"--upstream", "LEDGER_MCP_UPSTREAM", K_STRING, NULL, 0, 0,
		 "http: the server's Streamable HTTP endpoint, e.g. http://127.0.0.1:9000/mcp"},
	[S_TLS_CERT] = {"--tls-cert", "LEDGER_MCP_TLS_CERT", K_STRING, NULL, 0, 0,
			"http: serve HTTPS with this PEM certificate chain (SIGHUP reloads it)"},
	[S_TLS_KEY] = {"--tls-key", "LEDGER_MCP_TLS_KEY", K_STRING, NULL, 0, 0,
		       "http: the private key of --tls-cert"},
	[S_LOG_LEVEL] = {"--log-level", "LEDGER_MCP_LOG_LEVEL", K_STRING, "info", 0, 0,
			 "debug, info, warn or error (JSON lines on stderr)"},
};

static void usage(FILE *f)
{
	fprintf(f,
		"ledger-mcp %s: an exactly-once proxy in front of an MCP server\n\n"
		"usage: ledger-mcp stdio [options] -- SERVER_CMD [ARGS...]\n"
		"       ledger-mcp http --listen HOST:PORT --upstream URL [options]\n"
		"       ledger-mcp help | version\n\n"
		"A tools/call whose params._meta names \"io.ledgerd/request_id\" and\n"
		"\"io.ledgerd/tool_call_id\" runs at most once: it is claimed in ledgerd\n"
		"before it reaches the server, and a repeat gets the stored result.\n\n"
		"options (each also an environment variable):\n",
		LEDGER_VERSION);
	for (size_t i = 0; i < S_COUNT; i++) {
		const struct setting *s = &settings[i];

		fprintf(f, "  %s%s\n      %s ($%s%s%s)\n", s->flag,
			s->kind == K_FLAG    ? ""
			: s->kind == K_MS    ? " MS"
			: s->kind == K_BYTES ? " BYTES"
					     : " VALUE",
			s->help, s->env, s->def != NULL ? ", default " : "",
			s->def != NULL ? s->def : "");
	}
	fprintf(f, "\nsdk/programs/ledger-mcp/README.md says what each error means and what to do.\n");
}

static void __attribute__((noreturn, format(printf, 1, 2))) bad(const char *fmt, ...)
{
	va_list ap;

	fputs("ledger-mcp: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static uint32_t parse_ms(const struct setting *s, const char *v)
{
	char *end = NULL;
	unsigned long long n;

	errno = 0;
	n = strtoull(v, &end, 10);
	if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 || n < s->min || n > s->max)
		bad("%s (or $%s) is a whole number of milliseconds, %u..%u, not \"%s\"", s->flag,
		    s->env, s->min, s->max, v);
	return (uint32_t)n;
}

/* A size: a whole number, then nothing or B (bytes), KiB or MiB. */
static size_t parse_bytes(const struct setting *s, const char *v)
{
	static const struct {
		const char *unit;
		unsigned long long scale;
	} units[] = {{"", 1}, {"B", 1}, {"KiB", 1024}, {"MiB", 1024 * 1024}};
	char *end = NULL;
	unsigned long long n;
	size_t i;

	errno = 0;
	n = strtoull(v, &end, 10);
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].unit) == 0)
			break;
	if (v[0] < '0' || v[0] > '9' || errno != 0 || i == sizeof(units) / sizeof(units[0]) ||
	    n > s->max / units[i].scale || n * units[i].scale < s->min)
		bad("%s (or $%s) is a size in bytes, KiB or MiB, %u..%u bytes, not \"%s\"", s->flag,
		    s->env, s->min, s->max, v);
	return (size_t)(n * units[i].scale);
}

static bool parse_flag_env(const struct setting *s, const char *v)
{
	if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0 || strcmp(v, "on") == 0)
		return true;
	if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0 || strcmp(v, "off") == 0 || v[0] == 0)
		return false;
	bad("$%s is 1 or 0, not \"%s\"", s->env, v);
}

/* The token from its file: the first line, without its line break. */
static char *read_token_file(const char *path)
{
	char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	if (f == NULL)
		bad("cannot read the token file %s: %s", path, strerror(errno));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if (buf[0] == '\0')
		bad("the token file %s holds no token on its first line", path);
	char *token = strdup(buf);

	explicit_bzero(buf, sizeof(buf));
	if (token == NULL)
		bad("out of memory");
	return token;
}

/* Reads the settings of @p argv (after the mode) into @p set; exits 2 on any error. */
static void read_settings(int argc, char **argv, bool stdio_mode, struct mcp_settings *set)
{
	const char *value[S_COUNT] = {0};
	bool from_flag[S_COUNT] = {0};
	bool on[S_COUNT] = {0};
	int i;

	for (size_t k = 0; k < S_COUNT; k++) {
		const char *env = getenv(settings[k].env);

		value[k] = settings[k].def;
		if (env != NULL && settings[k].kind == K_FLAG)
			on[k] = parse_flag_env(&settings[k], env);
		else if (env != NULL)
			value[k] = env;
	}
	for (i = 0; i < argc; i++) {
		const char *arg = argv[i];
		size_t k;

		if (strcmp(arg, "--") == 0)
			break;
		for (k = 0; k < S_COUNT; k++)
			if (strcmp(arg, settings[k].flag) == 0)
				break;
		if (k == S_COUNT)
			bad("unknown option \"%s\" (ledger-mcp help lists them)", arg);
		if (settings[k].kind == K_FLAG) {
			on[k] = true;
			continue;
		}
		if (i + 1 >= argc)
			bad("%s needs a value", arg);
		value[k] = argv[++i];
		from_flag[k] = true;
	}
	if (stdio_mode) {
		if (i >= argc || i + 1 >= argc)
			bad("stdio needs the server's command after --: ledger-mcp stdio [options] -- "
			    "SERVER_CMD [ARGS...]");
		set->server_argv = &argv[i + 1];
	} else if (i < argc) {
		bad("http takes no command: the server is --upstream");
	}

	set->ledger_url = value[S_LEDGER_URL];
	if (strncmp(set->ledger_url, "http://", 7) != 0 &&
	    strncmp(set->ledger_url, "https://", 8) != 0)
		bad("--ledger-url (or $LEDGER_URL) is an http:// or https:// URL, not \"%s\"",
		    set->ledger_url);
	if (from_flag[S_TOKEN] && from_flag[S_TOKEN_FILE])
		bad("give --token or --token-file, not both");
	if (value[S_TOKEN_FILE] != NULL && (from_flag[S_TOKEN_FILE] || !from_flag[S_TOKEN]))
		set->token = read_token_file(value[S_TOKEN_FILE]);
	else if (value[S_TOKEN] != NULL && value[S_TOKEN][0] != '\0' &&
		 (set->token = strdup(value[S_TOKEN])) == NULL)
		bad("out of memory");
	if (set->token == NULL)
		bad("no token: set --token-file (or $LEDGER_TOKEN_FILE) or $LEDGER_TOKEN to an agent "
		    "token of the tenant (ledgerd token create)");
	set->ca_file = value[S_CA_FILE];
	if (set->ca_file != NULL) {
		struct ledger_client_error err = {0};

		if (ledger_client_ca_file_check(set->ca_file, &err) != LEDGER_CLIENT_OK)
			bad("--ca-file: %s", err.message);
	}
	set->lease_ms = parse_ms(&settings[S_LEASE], value[S_LEASE]);
	set->wait_ms = parse_ms(&settings[S_WAIT], value[S_WAIT]);
	set->call_timeout_ms = parse_ms(&settings[S_CALL_TIMEOUT], value[S_CALL_TIMEOUT]);
	set->ledger_retry_ms = parse_ms(&settings[S_LEDGER_RETRY], value[S_LEDGER_RETRY]);
	set->max_result_bytes = parse_bytes(&settings[S_MAX_RESULT], value[S_MAX_RESULT]);
	set->require_key = on[S_REQUIRE_KEY];
	set->trust_annotations = on[S_TRUST];
	set->store_args = on[S_STORE_ARGS];
	set->owner = value[S_OWNER];
	if (set->owner != NULL && strlen(set->owner) > 256)
		bad("--owner is at most 256 bytes");
	if (ledger_log_parse_level(value[S_LOG_LEVEL], &ledger_log_threshold) != 0)
		bad("--log-level is debug, info, warn or error, not \"%s\"", value[S_LOG_LEVEL]);
	set->listen = value[S_LISTEN];
	set->upstream = value[S_UPSTREAM];
	set->tls_cert = value[S_TLS_CERT];
	set->tls_key = value[S_TLS_KEY];
	if (stdio_mode)
		return;
	if ((set->tls_cert == NULL) != (set->tls_key == NULL))
		bad("--tls-cert and --tls-key go together");
	if (set->listen == NULL)
		bad("http needs --listen HOST:PORT (or $LEDGER_MCP_LISTEN)");
	if (strrchr(set->listen, ':') == NULL)
		bad("--listen is HOST:PORT, [V6]:PORT or unix:/path, not \"%s\"", set->listen);
	if (set->upstream == NULL)
		bad("http needs --upstream URL, the server's Streamable HTTP endpoint (or "
		    "$LEDGER_MCP_UPSTREAM)");
	if (strncmp(set->upstream, "http://", 7) != 0 && strncmp(set->upstream, "https://", 8) != 0)
		bad("--upstream is an http:// or https:// URL, not \"%s\"", set->upstream);
}

int main(int argc, char **argv)
{
	struct mcp_settings set = {0};
	struct mcp_proxy proxy = {0};
	struct ledger_client_options opts = {0};
	char owner[300];
	char host[256] = "";
	sigset_t stop;
	bool stdio_mode;
	int status = 1;

	if (argc < 2)
		bad("give a mode: ledger-mcp stdio ... -- SERVER_CMD, or ledger-mcp http ... "
		    "(ledger-mcp help)");
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("ledger-mcp %s\n", LEDGER_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "stdio") != 0 && strcmp(argv[1], "http") != 0)
		bad("unknown mode \"%s\": stdio or http (ledger-mcp help)", argv[1]);
	stdio_mode = strcmp(argv[1], "stdio") == 0;
	read_settings(argc - 2, argv + 2, stdio_mode, &set);
	if (set.owner == NULL) {
		(void)gethostname(host, sizeof(host) - 1);
		snprintf(owner, sizeof(owner), "ledger-mcp@%s",
			 host[0] != '\0' ? host : "localhost");
		set.owner = owner;
	}

	/* A peer that went away is an error of a write, not a death of the proxy. */
	signal(SIGPIPE, SIG_IGN);
	/* Stopping is the transports' to handle, on every thread alike. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	/*
	 * The tracer, configured by OTEL_* (docs/tracing-sdk-c.md). The C SDK's
	 * archive keeps a tracer of its own, which the client starts from the
	 * same variables under the same name; that one writes the execute_tool
	 * spans.
	 */
	ledger_trace_init("ledger-mcp", LEDGER_VERSION);
	opts.url = set.ledger_url;
	opts.token = set.token;
	opts.ca_file = set.ca_file;
	opts.user_agent = "ledger-mcp/" LEDGER_VERSION;
	opts.no_retry = set.ledger_retry_ms == 0;
	opts.retry_ms = set.ledger_retry_ms;
	opts.max_result_bytes = set.max_result_bytes;
	if (ledger_client_open(&opts, &proxy.client) != LEDGER_CLIENT_OK)
		bad("cannot use --ledger-url %s with this token", set.ledger_url);
	explicit_bzero(set.token, strlen(set.token));
	free(set.token);
	set.token = NULL;
	proxy.set = &set;
	pthread_mutex_init(&proxy.hints_lock, NULL);

	status = stdio_mode ? mcp_stdio_run(&proxy) : mcp_http_run(&proxy);

	ledger_client_close(proxy.client); /* sends the spans still queued */
	mcp_intercept_free_hints(&proxy);
	pthread_mutex_destroy(&proxy.hints_lock);
	ledger_trace_shutdown();
	return status;
}
