/*
 * tests/fuzz/fuzz_http.c: whole HTTP requests, heads and bodies, through
 * ledgerd's server in this process (api/wire/net.c, api/wire/http.c, the driver and
 * every handler; the store answers as tests/fuzz/store_stub.c says).
 *
 * Each input is written to a new connection on a unix socket, as one or
 * more requests, then the write side is shut. The server must answer and
 * close within a bound (a hang is a finding), and what it writes must be
 * whole HTTP/1.1 replies: a status line, one Content-Length that matches
 * the body, and for every error the JSON envelope. The token "fuzz" is
 * cached as an admin's before each input (the seeds carry it in an
 * "Authorization: Bearer fuzz" field), so the fuzzer reaches every
 * handler's parse().
 *
 * Tracing is on, exporting to a loopback port where nothing listens (the
 * exports fail, counted, on the tracer's thread): every call's
 * traceparent and tracestate are parsed and its spans made, as ledgerd
 * does when OTEL_EXPORTER_OTLP_ENDPOINT is set.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api/service/server.h"
#include "api/cli/settings.h"
#include "api/wire/listen.h"
#include "api/service/tokens.h"
#include "ledger/common/json.h"
#include "ledger/common/log.h"
#include "ledger/common/trace.h"
#include "ledger/core/policy.h"

static struct api_settings cfg;
static struct api_config acfg;
static struct ledger_policy policy;
static char sock_path[108];
static unsigned char token_sha256[32];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static char *args[] = {"fuzz_http", "--log-level",
			       "error",     "--http-threads",
			       "1",         "--head-timeout",
			       "2s",        "--body-timeout",
			       "2s",        NULL};
	struct api_server_sockets sk = {.api_fd = -1, .ops_fd = -1};
	const char *words[1];
	size_t nwords = 0;
	char err[400];

	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	snprintf(sock_path, sizeof(sock_path), "/tmp/ledgerd-fuzz-http-%d.sock", (int)getpid());
	if (api_settings_load(&cfg, 9, args, words, 1, &nwords, err, sizeof(err)) != LEDGER_OK) {
		fprintf(stderr, "fuzz_http: %s\n", err);
		abort();
	}
	ledger_log_threshold = LEDGER_LOG_ERROR + 1; /* quiet: findings are crashes */
	setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces", 1);
	setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200", 1);
	setenv("OTEL_TRACES_SAMPLER", "always_on", 1);
	ledger_trace_init("fuzz_http", "0");
	if (!ledger_trace_enabled()) {
		fprintf(stderr, "fuzz_http: tracing did not start\n");
		abort();
	}
	free(cfg.listen);
	cfg.listen = malloc(strlen(sock_path) + 6);
	sprintf(cfg.listen, "unix:%s", sock_path);
	ledger_policy_default(&policy);
	api_settings_config(&cfg, &acfg);
	sk.api_fd =
		wire_listen_open(cfg.listen, sk.api_bound, sizeof(sk.api_bound), err, sizeof(err));
	if (sk.api_fd < 0 || api_server_start(&acfg, &policy, NULL, &sk) == NULL) {
		fprintf(stderr, "fuzz_http: cannot start the server: %s\n", err);
		abort();
	}
	api_tokens_hash("fuzz", 4, token_sha256);
	return 0;
}

/*
 * Writes @p data and reads the replies at once, until the server closes;
 * aborts when it does not within a bound. @return the bytes read
 */
static size_t exchange(int fd, const unsigned char *data, size_t size, char *buf, size_t cap)
{
	struct timespec start, now;
	size_t off = 0, len = 0;
	bool shut = false;

	clock_gettime(CLOCK_MONOTONIC, &start);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN | (shut ? 0 : POLLOUT)};
		ssize_t n;

		if (!shut && off == size) {
			shutdown(fd, SHUT_WR);
			shut = true;
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 10) {
			fprintf(stderr, "fuzz_http: no close within 10 s\n");
			abort();
		}
		if (poll(&p, 1, 1000) <= 0)
			continue;
		if ((p.revents & POLLOUT) != 0) {
			n = send(fd, data + off, size - off, MSG_NOSIGNAL);
			if (n > 0)
				off += (size_t)n;
			else if (n < 0 && errno != EAGAIN)
				shut = true; /* refused and closed before the input's end */
		}
		if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
			char sink[4096];

			n = len < cap ? read(fd, buf + len, cap - len)
				      : read(fd, sink, sizeof(sink));
			if (n == 0 || (n < 0 && errno != EAGAIN))
				return len;
			if (n > 0 && len < cap)
				len += (size_t)n;
		}
	}
}

/* Checks the replies in buf[0, len): whole, framed, errors in the envelope. */
static void check_replies(const char *buf, size_t len)
{
	size_t at = 0;

	while (at < len) {
		const char *head = buf + at, *end, *cl;
		unsigned status = 0;
		size_t body_len, head_len;
		char *endp = NULL;

		end = memmem(head, len - at, "\r\n\r\n", 4);
		if (end == NULL) {
			fprintf(stderr, "fuzz_http: a reply without a whole head\n");
			abort();
		}
		head_len = (size_t)(end - head) + 4;
		if (len - at < 12 || memcmp(head, "HTTP/1.1 ", 9) != 0 ||
		    sscanf(head + 9, "%3u", &status) != 1 || status < 100 || status > 599) {
			fprintf(stderr, "fuzz_http: a reply without a status line\n");
			abort();
		}
		if (status < 200) {
			at += head_len; /* 100 Continue: a head alone */
			continue;
		}
		cl = memmem(head, head_len, "\r\nContent-Length: ", 18);
		if (cl == NULL) {
			fprintf(stderr, "fuzz_http: a reply without Content-Length\n");
			abort();
		}
		body_len = strtoul(cl + 18, &endp, 10);
		if (memmem(cl + 2, head_len - (size_t)(cl + 2 - head),
			   "\r\nContent-Length: ", 18) != NULL) {
			fprintf(stderr, "fuzz_http: two Content-Length fields\n");
			abort();
		}
		if (at + head_len + body_len > len) {
			fprintf(stderr, "fuzz_http: a reply cut short\n");
			abort();
		}
		if (status >= 400) {
			struct ledger_json_doc *doc = NULL;
			const struct ledger_json_value *root, *error, *code;

			if (ledger_json_parse(head + head_len, body_len, 64, &doc, NULL) !=
				    LEDGER_OK ||
			    (root = ledger_json_root(doc)) == NULL ||
			    (error = ledger_json_get(root, "error")) == NULL ||
			    (code = ledger_json_get(error, "code")) == NULL ||
			    ledger_json_get(error, "message") == NULL) {
				fprintf(stderr, "fuzz_http: an error %u that is not the envelope\n",
					status);
				abort();
			}
			(void)code;
			ledger_json_free(doc);
		}
		at += head_len + body_len;
	}
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	static char reply[1 << 20];
	struct sockaddr_un sa;
	size_t len;
	int fd;

	/* The cache forgets after 10 s; the fuzzer runs longer. (A read time to come is now.) */
	api_tokens_cache_put(token_sha256, "t1", LEDGER_ROLE_ADMIN, LLONG_MAX);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, sock_path, strlen(sock_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		abort();
	len = exchange(fd, data, size, reply, sizeof(reply));
	close(fd);
	/* A HEAD's reply has a Content-Length and no body: its framing is not checked. */
	if (memmem(data, size, "HEAD", 4) == NULL && len < sizeof(reply))
		check_replies(reply, len);
	return 0;
}
