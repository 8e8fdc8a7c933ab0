/*
 * sdk/programs/ledger-mcp/stdio.c: ledger-mcp between a client and the server it runs as
 * its child. Lines pass both ways unchanged; a keyed tools/call runs on a
 * thread of its own (its claim may wait on another holder), and the
 * server's answer to it is taken by id and given to that thread alone.
 *
 *   client stdin ──main loop──> PASS: server stdin (byte for byte)
 *                     │         CLAIM: worker ──forward──> server stdin
 *                     └ REFUSE: client stdout     ▲
 *   server stdout ──reader──> a worker's id? ─────┘ else client stdout
 *
 * The end: the client closes stdin (or SIGTERM): workers finish, the
 * server's stdin is closed and it is waited for. The server exits: workers
 * in flight answer outcome_left_unknown, and the proxy exits with it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ledger/common/clock.h"
#include "ledger/common/log.h"
#include "sdk/programs/ledger-mcp/intercept.h"
#include "sdk/programs/ledger-mcp/stdio.h"

extern char **environ;

#define READ_CHUNK 65536
#define MAX_WORKERS 256    /* calls in flight at once; past them the client is read no further */
#define TERM_AFTER_MS 5000 /* the server's grace once its stdin is closed */
#define KILL_AFTER_MS 5000 /* and after SIGTERM */

/* An intercepted call waiting for the server's answer. */
struct pending {
	char *id_key;           /* mcp_message_id_key() of its id */
	bool answered;          /* response holds the server's answer */
	bool cancelled;         /* the client sent notifications/cancelled for it */
	uint64_t cancelled_ms;  /* when */
	struct mcp_forward got; /* the answer, once there */
	struct pending *next;
};

struct stdio_proxy {
	struct mcp_proxy *p;
	pid_t child;
	int to_server;   /* the server's stdin */
	int from_server; /* its stdout */
	int wake[2];     /* the reader says "the server is gone" on it */

	pthread_mutex_t lock;  /* guards everything below */
	pthread_cond_t change; /* an answer came, a worker ended, the server went */
	struct pending *pending;
	unsigned workers; /* worker threads alive */
	bool server_gone; /* its stdout ended */

	pthread_mutex_t out_lock; /* one line at a time to the client */
	pthread_mutex_t in_lock;  /* one line at a time to the server */
};

/* One intercepted call on its worker thread. */
struct worker {
	struct stdio_proxy *sp;
	char *line; /* the client's message, owned */
	size_t len;
	struct mcp_message msg;
	struct pending entry;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Writes all of @p len bytes and a line break; false when the peer is gone. */
static bool write_line(int fd, pthread_mutex_t *lock, const char *s, size_t len)
{
	bool ok = true;

	pthread_mutex_lock(lock);
	for (int part = 0; part < 2 && ok; part++) {
		const char *at = part == 0 ? s : "\n";
		size_t left = part == 0 ? len : 1;

		while (left > 0) {
			ssize_t n = write(fd, at, left);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				ok = false;
				break;
			}
			at += n;
			left -= (size_t)n;
		}
	}
	pthread_mutex_unlock(lock);
	return ok;
}

static void to_client(struct stdio_proxy *sp, const char *s, size_t len)
{
	/* A client that went away still has its calls recorded: only the answer is lost. */
	(void)write_line(STDOUT_FILENO, &sp->out_lock, s, len);
}

/* Sends the worker's message (as intercept.c gives it) to the server and waits for its answer. */
static void forward(void *ctx, const struct mcp_send *send, struct mcp_forward *out)
{
	struct worker *w = ctx;
	struct stdio_proxy *sp = w->sp;
	const struct mcp_settings *set = sp->p->set;
	uint64_t sent = now_ms();

	pthread_mutex_lock(&sp->lock);
	if (sp->server_gone) {
		pthread_mutex_unlock(&sp->lock);
		out->sent = MCP_SENT_REFUSED;
		snprintf(out->reason, sizeof(out->reason), "the server's process has exited");
		return;
	}
	w->entry.next = sp->pending;
	sp->pending = &w->entry;
	pthread_mutex_unlock(&sp->lock);

	if (!write_line(sp->to_server, &sp->in_lock, send->text, send->len)) {
		/* Not a whole line reached it: no server acts on half a message. */
		out->sent = MCP_SENT_REFUSED;
		snprintf(out->reason, sizeof(out->reason),
			 "the server's stdin is closed: the call was not delivered");
	}

	pthread_mutex_lock(&sp->lock);
	while (out->sent != MCP_SENT_REFUSED && !w->entry.answered) {
		uint64_t now = now_ms(), until = UINT64_MAX;
		struct timespec ts;

		if (sp->server_gone) {
			out->sent = MCP_SENT_LOST;
			snprintf(out->reason, sizeof(out->reason),
				 "the server's process exited during the call");
			break;
		}
		if (set->call_timeout_ms != 0)
			until = sent + set->call_timeout_ms;
		if (w->entry.cancelled && w->entry.cancelled_ms + set->lease_ms < until)
			until = w->entry.cancelled_ms + set->lease_ms;
		if (now >= until) {
			out->sent = MCP_SENT_LOST;
			snprintf(out->reason, sizeof(out->reason), "%s",
				 w->entry.cancelled ? "the client cancelled the call and the "
						      "server did not answer it"
						    : "the call outlived --call-timeout-ms");
			break;
		}
		if (until == UINT64_MAX) {
			pthread_cond_wait(&sp->change, &sp->lock);
			continue;
		}
		ts = ledger_clock_after(CLOCK_MONOTONIC, until - now);
		pthread_cond_timedwait(&sp->change, &sp->lock, &ts);
	}
	if (w->entry.answered) {
		*out = w->entry.got;
		memset(&w->entry.got, 0, sizeof(w->entry.got));
	}
	for (struct pending **pp = &sp->pending; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == &w->entry) {
			*pp = w->entry.next;
			break;
		}
	}
	pthread_mutex_unlock(&sp->lock);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct stdio_proxy *sp = w->sp;
	struct mcp_answer answer = {0};
	const struct mcp_origin origin = {w->line, w->len, NULL, NULL};
	bool cancelled;

	if (mcp_intercept_run(sp->p, &w->msg, &origin, forward, w, &answer) == LEDGER_OK) {
		pthread_mutex_lock(&sp->lock);
		cancelled = w->entry.cancelled;
		pthread_mutex_unlock(&sp->lock);
		/* A cancelled request gets no answer of ours; the server's own is its to give. */
		if (!cancelled || answer.source == MCP_FROM_SERVER)
			to_client(sp, answer.text.data, answer.text.len);
	} else {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "out of memory answering a tools/call");
	}
	ledger_buf_free(&answer.text);
	mcp_message_free(&w->msg);
	free(w->entry.id_key);
	free(w->entry.got.response);
	free(w->line);
	free(w);
	pthread_mutex_lock(&sp->lock);
	sp->workers--;
	pthread_cond_broadcast(&sp->change);
	pthread_mutex_unlock(&sp->lock);
	return NULL;
}

/* Starts a worker for the keyed tools/call in @p line (taken: owned by the worker). */
static void start_worker(struct stdio_proxy *sp, char *line, size_t len)
{
	struct worker *w = calloc(1, sizeof(*w));
	struct mcp_answer refusal = {0};
	pthread_attr_t attr;
	pthread_t t;

	if (w == NULL || mcp_message_parse(line, len, &w->msg) != LEDGER_OK ||
	    (w->entry.id_key = mcp_message_id_key(w->msg.id)) == NULL)
		goto fail;
	w->sp = sp;
	w->line = line;
	w->len = len;
	pthread_mutex_lock(&sp->lock);
	while (sp->workers >= MAX_WORKERS && !sp->server_gone)
		pthread_cond_wait(&sp->change, &sp->lock);
	sp->workers++;
	pthread_mutex_unlock(&sp->lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, worker_main, w) == 0) {
		pthread_attr_destroy(&attr);
		return;
	}
	pthread_attr_destroy(&attr);
	pthread_mutex_lock(&sp->lock);
	sp->workers--;
	pthread_mutex_unlock(&sp->lock);
fail:
	/* Nothing was claimed or sent: say so rather than drop the call. */
	LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "cannot start a tools/call: out of resources");
	if (w != NULL) {
		mcp_message_error(&refusal.text, w->msg.id, -32603,
				  "ledger-mcp: out of resources: the tool call was not started",
				  NULL);
		if (!refusal.text.oom)
			to_client(sp, refusal.text.data, refusal.text.len);
		ledger_buf_free(&refusal.text);
		mcp_message_free(&w->msg);
		free(w->entry.id_key);
		free(w);
	}
	free(line);
}

/* notifications/cancelled for an intercepted call: noted (the claim stays). */
static void note_cancel(struct stdio_proxy *sp, const struct mcp_message *m)
{
	const struct ledger_json_value *params = ledger_json_get(m->root, "params");
	char *key = mcp_message_id_key(ledger_json_get(params, "requestId"));

	if (key == NULL)
		return;
	pthread_mutex_lock(&sp->lock);
	for (struct pending *e = sp->pending; e != NULL; e = e->next) {
		if (strcmp(e->id_key, key) == 0 && !e->cancelled) {
			e->cancelled = true;
			e->cancelled_ms = now_ms();
			pthread_cond_broadcast(&sp->change);
		}
	}
	pthread_mutex_unlock(&sp->lock);
	free(key);
}

/* One line from the client. Takes @p line (malloc'd). */
static void from_client(struct stdio_proxy *sp, char *line, size_t len)
{
	struct mcp_message m;
	struct ledger_buf answer = LEDGER_BUF_INIT;
	enum mcp_plan plan = MCP_PLAN_PASS;

	if (mcp_message_parse(line, len, &m) == LEDGER_OK) {
		plan = mcp_intercept_plan(sp->p, &m, &answer);
		if (m.kind == MCP_MSG_NOTIFICATION &&
		    strcmp(m.method, "notifications/cancelled") == 0)
			note_cancel(sp, &m);
	} else {
		/* Not JSON (cut short, not UTF-8, a NUL): JSON-RPC's parse error, id
		 * null, from here. The server would drop it or read it otherwise, and
		 * the client would wait for an answer that never comes. */
		LEDGER_LOG(LEDGER_LOG_WARN, NULL, NULL,
			   "a line from the client is not JSON: answered -32700");
		mcp_message_error(&answer, NULL, -32700,
				  "Parse error: the line is not a JSON text (RFC 8259, UTF-8)",
				  NULL);
		plan = MCP_PLAN_REFUSE;
	}
	mcp_message_free(&m);
	switch (plan) {
	case MCP_PLAN_CLAIM:
		start_worker(sp, line, len);
		line = NULL;
		break;
	case MCP_PLAN_REFUSE:
		if (!answer.oom)
			to_client(sp, answer.data, answer.len);
		break;
	case MCP_PLAN_PASS:
		if (!write_line(sp->to_server, &sp->in_lock, line, len))
			LEDGER_LOG(LEDGER_LOG_WARN, NULL, NULL,
				   "the server's stdin is closed: a message was not delivered");
		break;
	}
	ledger_buf_free(&answer);
	free(line);
}

/* One line from the server: a worker's answer, or the client's to read. */
static void from_server(struct stdio_proxy *sp, char *line, size_t len)
{
	struct mcp_message m;
	char *key = NULL;
	bool taken = false;

	if (mcp_message_parse(line, len, &m) == LEDGER_OK && m.kind == MCP_MSG_RESPONSE) {
		mcp_intercept_note_tools(sp->p, &m);
		key = mcp_message_id_key(m.id);
	}
	mcp_message_free(&m);
	if (key != NULL) {
		pthread_mutex_lock(&sp->lock);
		for (struct pending *e = sp->pending; e != NULL && !taken; e = e->next) {
			if (!e->answered && strcmp(e->id_key, key) == 0) {
				e->answered = true;
				e->got.sent = MCP_SENT_ANSWERED;
				e->got.response = line;
				e->got.len = len;
				taken = true;
				pthread_cond_broadcast(&sp->change);
			}
		}
		pthread_mutex_unlock(&sp->lock);
		free(key);
	}
	if (!taken) {
		to_client(sp, line, len);
		free(line);
	}
}

/* Splits what was read into lines; hands each whole one to @p fn. */
struct lines {
	char *buf;
	size_t len, cap;
};

static bool lines_feed(struct lines *l, int fd, bool *eof, struct stdio_proxy *sp,
		       void (*fn)(struct stdio_proxy *, char *, size_t))
{
	ssize_t n;
	size_t start = 0;

	if (l->cap - l->len < READ_CHUNK) {
		size_t cap = l->cap * 2 > l->len + READ_CHUNK ? l->cap * 2 : l->len + READ_CHUNK;
		char *grown = realloc(l->buf, cap);

		if (grown == NULL)
			return false;
		l->buf = grown;
		l->cap = cap;
	}
	do
		n = read(fd, l->buf + l->len, READ_CHUNK);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		*eof = true;
		return true;
	}
	size_t scanned = l->len;

	l->len += (size_t)n;
	for (size_t i = scanned; i < l->len; i++) {
		if (l->buf[i] != '\n')
			continue;
		size_t end = i > start && l->buf[i - 1] == '\r' ? i - 1 : i;
		char *line = strndup(l->buf + start, end - start);

		if (line == NULL)
			return false;
		if (end > start)
			fn(sp, line, end - start);
		else
			free(line);
		start = i + 1;
	}
	memmove(l->buf, l->buf + start, l->len - start);
	l->len -= start;
	return true;
}

static void *reader_main(void *arg)
{
	struct stdio_proxy *sp = arg;
	struct lines l = {0};
	bool eof = false;

	while (!eof) {
		if (!lines_feed(&l, sp->from_server, &eof, sp, from_server)) {
			LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL,
				   "out of memory reading the server");
			break;
		}
	}
	free(l.buf);
	pthread_mutex_lock(&sp->lock);
	sp->server_gone = true;
	pthread_cond_broadcast(&sp->change);
	pthread_mutex_unlock(&sp->lock);
	(void)!write(sp->wake[1], "x", 1);
	return NULL;
}

static bool start_server(struct stdio_proxy *sp, char **argv)
{
	posix_spawn_file_actions_t fa;
	int in[2] = {-1, -1}, out[2] = {-1, -1};
	int rc;

	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "cannot make pipes: %s", strerror(errno));
		return false;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
	posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
	rc = posix_spawnp(&sp->child, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	if (rc != 0) {
		fprintf(stderr, "ledger-mcp: cannot start the server %s: %s\n", argv[0],
			strerror(rc));
		close(in[1]);
		close(out[0]);
		return false;
	}
	sp->to_server = in[1];
	sp->from_server = out[0];
	return true;
}

/* Waits for the server up to @p ms; true with @p status when it has exited. */
static bool reap(pid_t child, uint32_t ms, int *status)
{
	for (uint64_t until = now_ms() + ms;;) {
		pid_t r = waitpid(child, status, WNOHANG);

		if (r == child || (r < 0 && errno != EINTR))
			return true;
		if (now_ms() >= until)
			return false;
		usleep(20000);
	}
}

static int exit_status(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

int mcp_stdio_run(struct mcp_proxy *p)
{
	struct stdio_proxy sp = {.p = p, .to_server = -1, .from_server = -1, .wake = {-1, -1}};
	struct lines l = {0};
	pthread_condattr_t ca;
	pthread_t reader;
	sigset_t stop;
	int sfd = -1, status = 0;
	bool eof = false, gone = false;

	pthread_mutex_init(&sp.lock, NULL);
	pthread_mutex_init(&sp.out_lock, NULL);
	pthread_mutex_init(&sp.in_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sp.change, &ca);
	pthread_condattr_destroy(&ca);
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	if (pipe2(sp.wake, O_CLOEXEC) != 0 || (sfd = signalfd(-1, &stop, SFD_CLOEXEC)) < 0 ||
	    !start_server(&sp, p->set->server_argv)) {
		status = 1;
		goto out;
	}
	if (pthread_create(&reader, NULL, reader_main, &sp) != 0) {
		LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, "cannot start the server's reader");
		kill(sp.child, SIGTERM);
		status = 1;
		goto out;
	}
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, "started the server %s (pid %d)",
		   p->set->server_argv[0], (int)sp.child);

	while (!eof && !gone) {
		struct pollfd fds[3] = {
			{STDIN_FILENO, POLLIN, 0}, {sfd, POLLIN, 0}, {sp.wake[0], POLLIN, 0}};

		if (poll(fds, 3, -1) < 0 && errno != EINTR)
			break;
		if (fds[1].revents != 0) {
			LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL,
				   "stopping: calls in flight finish first");
			break;
		}
		if (fds[2].revents != 0)
			gone = true;
		else if (fds[0].revents != 0 &&
			 !lines_feed(&l, STDIN_FILENO, &eof, &sp, from_client))
			break;
	}

	/* Calls in flight are answered and recorded before the server is let go. */
	pthread_mutex_lock(&sp.lock);
	while (sp.workers > 0)
		pthread_cond_wait(&sp.change, &sp.lock);
	gone = sp.server_gone;
	pthread_mutex_unlock(&sp.lock);
	close(sp.to_server);
	sp.to_server = -1;
	if (gone) {
		/* The session is over: the client learns it from the end of stdout. */
		close(STDOUT_FILENO);
	}
	if (!reap(sp.child, TERM_AFTER_MS, &status)) {
		kill(sp.child, SIGTERM);
		if (!reap(sp.child, KILL_AFTER_MS, &status)) {
			kill(sp.child, SIGKILL);
			(void)reap(sp.child, KILL_AFTER_MS, &status);
		}
	}
	pthread_join(reader, NULL);
	LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, "the server exited (%d)", exit_status(status));
	status = exit_status(status);
out:
	free(l.buf);
	if (sp.to_server >= 0)
		close(sp.to_server);
	if (sp.from_server >= 0)
		close(sp.from_server);
	if (sfd >= 0)
		close(sfd);
	for (int i = 0; i < 2; i++)
		if (sp.wake[i] >= 0)
			close(sp.wake[i]);
	pthread_cond_destroy(&sp.change);
	pthread_mutex_destroy(&sp.lock);
	pthread_mutex_destroy(&sp.out_lock);
	pthread_mutex_destroy(&sp.in_lock);
	return status;
}
