/*
 * ledger/store/conn.c: the store's connections to PostgreSQL. A connection
 * stays in libpq pipeline mode and non-blocking for its whole life, so that
 * every wait for the server is a poll() with a deadline; it reconnects by
 * itself (at most every reconnect_ms) while the database is down, and
 * counts the failures /metrics shows. A commit the synchronous standby did
 * not confirm is recognised here, from the server's notice.
 *
 * A wait that outlives its deadline is never cancelled: a cancelled COMMIT
 * would leave a commit that is visible but not durable. The call is
 * answered 503 and the connection is stuck until ledger_store_settle()
 * has read what the server still owes it.
 *
 * Whether the database can be reached is one fact of the process, not of
 * a connection: it is told once, when connection attempts start failing
 * and when one succeeds again (the log line and ledger_database_up).
 */
#include "ledger/store/conn.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/common/log.h"
#include "ledger/store/store.h"

/* Failures by kind, indexed by enum ledger_err; /metrics reads them. */
static atomic_ullong errors[LEDGER_ERR_INTERNAL + 1];

void store_conn_count_error(enum ledger_err kind)
{
	if ((unsigned)kind <= LEDGER_ERR_INTERNAL)
		atomic_fetch_add(&errors[kind], 1);
}

uint64_t ledger_store_errors(enum ledger_err kind)
{
	return (unsigned)kind <= LEDGER_ERR_INTERNAL ? atomic_load(&errors[kind]) : 0;
}

/* The bound on one wait for the database, in ms; 0: none (the command-line tools). */
static atomic_llong wait_bound_ms;

/* Waits or timeouts past --db-timeout, for /metrics. */
static atomic_ullong timeouts;

void ledger_store_set_timeout(int64_t ms)
{
	atomic_store(&wait_bound_ms, ms > 0 ? ms : 0);
}

int64_t ledger_store_timeout(void)
{
	return atomic_load(&wait_bound_ms);
}

uint64_t ledger_store_timeouts(void)
{
	return atomic_load(&timeouts);
}

int64_t store_conn_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define monotonic_ms store_conn_now_ms

int64_t store_conn_deadline(const struct ledger_store_conn *c)
{
	int64_t bound = atomic_load(&wait_bound_ms), deadline = INT64_MAX;

	if (bound > 0)
		deadline = monotonic_ms() + bound;
	if (c->deadline_ms > 0 && c->deadline_ms < deadline)
		deadline = c->deadline_ms;
	return deadline;
}

/*
 * Waits for @p events on the connection's socket until @p deadline_ms.
 * @return false when the deadline passed first
 */
static bool poll_until(PGconn *pg, short events, int64_t deadline_ms)
{
	struct pollfd p = {.fd = PQsocket(pg), .events = events};

	if (p.fd < 0)
		return true; /* broken: libpq says so on the next call */
	for (;;) {
		int64_t left = deadline_ms == INT64_MAX ? -1 : deadline_ms - monotonic_ms();
		int n;

		if (deadline_ms != INT64_MAX && left <= 0)
			return false;
		n = poll(&p, 1, left < 0 || left > INT_MAX ? -1 : (int)left);
		if (n > 0 || (n < 0 && errno != EINTR))
			return true;
	}
}

bool store_conn_await(struct ledger_store_conn *c, int64_t deadline_ms)
{
	PGconn *pg = c->pg;
	int flushed;

	/* What does not fit the socket's buffer is sent as the server reads. */
	while ((flushed = PQflush(pg)) == 1) {
		if (!poll_until(pg, POLLIN | POLLOUT, deadline_ms))
			goto late;
		if (PQconsumeInput(pg) != 1)
			return true;
	}
	if (flushed < 0)
		return true;
	while (PQisBusy(pg)) {
		if (!poll_until(pg, POLLIN, deadline_ms))
			goto late;
		if (PQconsumeInput(pg) != 1)
			return true;
	}
	return true;
late:
	atomic_fetch_add(&timeouts, 1);
	return false;
}

/*
 * libpq reports server notices on stderr by default; make them log lines.
 * One notice changes an answer: when a commit's wait for the synchronous
 * standby is cancelled (a cancel request, or the backend terminated), the
 * server reports success with a WARNING that the transaction "has already
 * committed locally, but might not have been replicated to the standby".
 * That commit is not durable: a failover may lose it, so the step fails.
 */
static void notice_receiver(void *arg, const PGresult *res)
{
	struct ledger_store_conn *c = arg;
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);

	if ((msg != NULL && strstr(msg, "wait for synchronous replication") != NULL) ||
	    (detail != NULL && strstr(detail, "might not have been replicated") != NULL)) {
		c->unreplicated = true;
		LOG_WARN("a commit was not confirmed by the synchronous standby: %s",
			 msg != NULL ? msg : detail);
		return;
	}
	LOG_DEBUG("database notice: %s", msg);
}

/*
 * The cancelled wait for a synchronous standby is told by the WARNING's
 * English text alone (PostgreSQL gives it no SQLSTATE of its own), so a
 * server that translates its messages would hide it: say so once.
 */
static void warn_if_localized(struct ledger_store_conn *c)
{
	static atomic_bool warned;
	PGresult *res = NULL, *extra = NULL;
	const char *lc = NULL;

	/* Asked like every statement, within the bound: a server that stalls fails the connection. */
	if (PQsendQuery(c->pg, "SHOW lc_messages") != 1)
		return;
	if (!store_conn_await(c, store_conn_deadline(c))) {
		c->stuck = true;
		return;
	}
	res = PQgetResult(c->pg);
	/* Drained to the NULL that ends it, each read within the bound too. */
	while (res != NULL) {
		if (!store_conn_await(c, store_conn_deadline(c))) {
			c->stuck = true;
			break;
		}
		extra = PQgetResult(c->pg);
		if (extra == NULL)
			break;
		PQclear(extra);
	}
	if (!c->stuck && res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK &&
	    PQntuples(res) == 1)
		lc = PQgetvalue(res, 0, 0);
	if (lc != NULL && lc[0] != '\0' && strncmp(lc, "C", 1) != 0 &&
	    strncmp(lc, "POSIX", 5) != 0 && strncmp(lc, "en", 2) != 0 &&
	    !atomic_exchange(&warned, true))
		LOG_WARN("the database's lc_messages is %s: set it to C (or English) so that a "
			 "commit the synchronous standby did not confirm is recognised",
			 lc);
	PQclear(res);
}

bool ledger_store_stuck(const struct ledger_store_conn *c)
{
	return c != NULL && c->stuck;
}

void store_conn_drop(struct ledger_store_conn *c)
{
	if (c->pg != NULL)
		PQfinish(c->pg);
	c->pg = NULL;
	c->nprepared = 0;
	c->stuck = false;
}

/* --- connecting: every host of the URL in turn, within the call's deadline --- */

#define MAX_HOSTS 16
/* A host's share of what is left is at least this, so a slow but live one can answer. */
#define MIN_HOST_MS 500
/* Each host's bound when no deadline applies (the command-line tools). */
#define UNBOUNDED_HOST_MS 5000

/* The hosts of a multi-host URL, as libpq lists them: host, port and hostaddr by index. */
struct host_list {
	PQconninfoOption *opts; /* owns the strings below */
	char *host[MAX_HOSTS], *port[MAX_HOSTS], *hostaddr[MAX_HOSTS];
	unsigned nhost, nport, naddr, n;
};

/* Splits @p value at its commas, in place, into @p out. @return how many */
static unsigned split_list(char *value, char *out[MAX_HOSTS])
{
	unsigned n = 0;

	if (value == NULL || value[0] == '\0')
		return 0;
	for (char *p = value; n < MAX_HOSTS; n++) {
		char *comma = strchr(p, ',');

		out[n] = p;
		if (comma == NULL)
			return n + 1;
		*comma = '\0';
		p = comma + 1;
	}
	return n;
}

/* Reads the URL's hosts; a URL libpq cannot parse is left to libpq to refuse (n = 1). */
static void hosts_read(const char *url, struct host_list *h)
{
	memset(h, 0, sizeof(*h));
	h->n = 1;
	h->opts = PQconninfoParse(url, NULL);
	if (h->opts == NULL)
		return;
	for (PQconninfoOption *o = h->opts; o->keyword != NULL; o++) {
		if (strcmp(o->keyword, "host") == 0)
			h->nhost = split_list(o->val, h->host);
		else if (strcmp(o->keyword, "port") == 0)
			h->nport = split_list(o->val, h->port);
		else if (strcmp(o->keyword, "hostaddr") == 0)
			h->naddr = split_list(o->val, h->hostaddr);
	}
	h->n = h->nhost > h->naddr ? h->nhost : h->naddr;
	if (h->n == 0)
		h->n = 1;
}

/*
 * One attempt on host @p i (of several; all of them when there is one),
 * driven by PQconnectPoll() and bounded by @p deadline_ms: libpq's own
 * connect_timeout is per host and at least 2 s, so three silent hosts
 * held a call for 6 s past its deadline. @return the connection, or NULL
 * with @p err filled
 */
static PGconn *connect_one(const struct ledger_store_conn *c, const struct host_list *h,
			   unsigned i, int64_t deadline_ms, char *err, size_t errlen)
{
	/*
	 * The URL's own settings win over the defaults before it; the host
	 * after it picks one of its hosts (expand_dbname reads it as a
	 * connection string). Keepalives only let an idle connection notice a
	 * database that vanished; every wait is bounded by poll().
	 */
	const char *keys[10] = {"application_name", "keepalives_idle", "keepalives_interval",
				"keepalives_count", "dbname"};
	const char *vals[10] = {"ledgerd", "30", "5", "3", c->database_url};
	unsigned k = 5;
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;
	PGconn *pg;

	if (h->n > 1) {
		if (i < h->nhost) {
			keys[k] = "host";
			vals[k++] = h->host[i];
		}
		if (i < h->naddr) {
			keys[k] = "hostaddr";
			vals[k++] = h->hostaddr[i];
		}
		if (h->nport > 0) {
			keys[k] = "port";
			vals[k++] = h->port[h->nport == 1 ? 0 : i < h->nport ? i : h->nport - 1];
		}
	}
	keys[k] = NULL;
	vals[k] = NULL;
	pg = PQconnectStartParams(keys, vals, 1);
	if (pg == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	while (PQstatus(pg) != CONNECTION_BAD && st != PGRES_POLLING_OK &&
	       st != PGRES_POLLING_FAILED) {
		if (!poll_until(pg, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline_ms)) {
			snprintf(err, errlen, "%s%s%s did not answer in time",
				 h->n > 1 && i < h->nhost ? h->host[i] : "the database",
				 h->n > 1 && h->nport > 0 ? ":" : "",
				 h->n > 1 && h->nport > 0 ? vals[k - 1] : "");
			PQfinish(pg);
			return NULL;
		}
		st = PQconnectPoll(pg);
	}
	if (PQstatus(pg) != CONNECTION_OK) {
		const char *msg = PQerrorMessage(pg);

		snprintf(err, errlen, "%.*s", (int)strcspn(msg, "\n"), msg);
		PQfinish(pg);
		return NULL;
	}
	return pg;
}

/*
 * Opens the connection; on failure leaves it down and fills @p err. The
 * hosts are tried in turn, from the one that last served (or the first
 * one not yet tried, after a try that ran out of time), each with a share
 * of what is left of the call's deadline: a host that does not answer
 * never keeps the next one from being tried, and the whole attempt never
 * outlasts the call it is made for.
 */
static enum ledger_err conn_open(struct ledger_store_conn *c, char *err, size_t errlen)
{
	int64_t deadline = store_conn_deadline(c);
	struct host_list h;
	PGconn *pg = NULL;
	unsigned tried = 0;

	c->last_attempt_ms = monotonic_ms();
	hosts_read(c->database_url, &h);
	if (c->next_host >= h.n)
		c->next_host = 0;
	snprintf(err, errlen, "no host to connect to");
	while (pg == NULL && tried < h.n) {
		unsigned i = (c->next_host + tried) % h.n;
		int64_t now = monotonic_ms(), share, until;

		if (deadline != INT64_MAX && now >= deadline)
			break;
		share = deadline == INT64_MAX ? UNBOUNDED_HOST_MS
					      : (deadline - now) / (int64_t)(h.n - tried);
		if (share < MIN_HOST_MS)
			share = MIN_HOST_MS;
		until = deadline != INT64_MAX && now + share > deadline ? deadline : now + share;
		pg = connect_one(c, &h, i, until, err, errlen);
		tried++;
		if (pg != NULL)
			c->next_host = i;
	}
	if (pg == NULL && tried < h.n)
		c->next_host = (c->next_host + tried) % h.n; /* the next try starts where this one stopped */
	PQconninfoFree(h.opts);
	if (pg == NULL)
		return strcmp(err, "out of memory") == 0 ? LEDGER_ERR_NOMEM : LEDGER_ERR_UNAVAILABLE;
	PQsetNoticeReceiver(pg, notice_receiver, c);
	if (PQsetnonblocking(pg, 1) != 0) {
		snprintf(err, errlen, "cannot make the connection non-blocking");
		PQfinish(pg);
		return LEDGER_ERR_INTERNAL;
	}
	c->pg = pg;
	c->nprepared = 0;
	c->stuck = false;
	warn_if_localized(c);
	if (c->stuck) {
		/* Nothing was written yet: this connection can simply go. */
		c->stuck = false;
		store_conn_drop(c);
		snprintf(err, errlen, "the database did not answer within %lld ms",
			 (long long)atomic_load(&wait_bound_ms));
		return LEDGER_ERR_UNAVAILABLE;
	}
	if (PQenterPipelineMode(pg) != 1) {
		snprintf(err, errlen, "cannot enter pipeline mode");
		store_conn_drop(c);
		return LEDGER_ERR_INTERNAL;
	}
	return LEDGER_OK;
}

/*
 * --- reachability: one state for the process ---
 *
 *   reachable ──a connection attempt fails──> unreachable   (logs "database unreachable: ...")
 *   unreachable ──an attempt succeeds──> reachable          (logs "... reachable again after")
 *
 * Only connection attempts move it. A call that finds its connection
 * broken says nothing by itself: after an outage every idle worker still
 * holds a connection from before it, and each would announce an outage
 * that is over. Its next attempt tells. An attempt that began before the
 * last change is out of date and moves nothing either, so the workers'
 * attempts racing each other cannot make the state flap.
 */
static pthread_mutex_t reach_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool reach_down;   /* read by /metrics without the lock */
static int64_t reach_changed_ms; /* monotonic, of the last change; 0: never */

static void reach_note(int64_t attempt_began_ms, bool ok, const char *err)
{
	int64_t now = monotonic_ms(), down_ms = 0;
	bool changed = false;

	pthread_mutex_lock(&reach_lock);
	if (attempt_began_ms >= reach_changed_ms && ok == atomic_load(&reach_down)) {
		down_ms = now - reach_changed_ms;
		reach_changed_ms = now;
		atomic_store(&reach_down, !ok);
		changed = true;
	}
	pthread_mutex_unlock(&reach_lock);
	if (!changed)
		return;
	if (ok) {
		char extra[48];

		snprintf(extra, sizeof(extra), "\"unreachable_ms\":%lld", (long long)down_ms);
		LEDGER_LOG(LEDGER_LOG_WARN, NULL, extra, "database reachable again after %.1f s",
			   (double)down_ms / 1000.0);
	} else {
		LOG_WARN("database unreachable: %s", err);
	}
}

bool ledger_store_reachable(void)
{
	return !atomic_load(&reach_down);
}

bool store_conn_ready(struct ledger_store_conn *c)
{
	char err[256];
	enum ledger_err rc;

	if (c->stuck)
		return false;
	if (c->pg != NULL && PQstatus(c->pg) == CONNECTION_OK)
		return true;
	store_conn_drop(c);
	if (monotonic_ms() - c->last_attempt_ms < c->reconnect_ms)
		return false;
	rc = conn_open(c, err, sizeof(err));
	if (rc != LEDGER_OK) {
		store_conn_count_error(LEDGER_ERR_UNAVAILABLE);
		if (rc == LEDGER_ERR_UNAVAILABLE)
			reach_note(c->last_attempt_ms, false, err);
		else
			LOG_ERROR("cannot open a database connection: %s", err);
		return false;
	}
	reach_note(c->last_attempt_ms, true, NULL);
	return true;
}

void store_conn_check_idle(struct ledger_store_conn *c)
{
	/*
	 * Reads what the server sent unasked, without a query: a server that
	 * shut down sent its FATAL and closed the socket, and libpq marks the
	 * connection bad once it reads that. Nothing is parsed here; a next
	 * step's results are read as before.
	 */
	if (c->pg == NULL || c->stuck || PQstatus(c->pg) != CONNECTION_OK)
		return;
	if (PQconsumeInput(c->pg) != 1 || PQstatus(c->pg) != CONNECTION_OK)
		store_conn_drop(c);
}

enum ledger_err ledger_store_connect(const char *database_url, struct ledger_store_conn **out,
				     char *err, size_t errlen)
{
	struct ledger_store_conn *c = calloc(1, sizeof(*c));
	enum ledger_err rc;

	*out = NULL;
	if (c == NULL) {
		snprintf(err, errlen, "out of memory");
		return LEDGER_ERR_NOMEM;
	}
	c->database_url = database_url;
	rc = conn_open(c, err, errlen);
	if (rc != LEDGER_OK) {
		free(c);
		return rc;
	}
	*out = c;
	return LEDGER_OK;
}

void ledger_store_disconnect(struct ledger_store_conn *c)
{
	if (c == NULL)
		return;
	store_conn_drop(c);
	free(c);
}

void store_conn_init(struct ledger_store_conn *c, const char *database_url, int64_t reconnect_ms)
{
	memset(c, 0, sizeof(*c));
	c->database_url = database_url;
	c->reconnect_ms = reconnect_ms;
	c->last_attempt_ms = monotonic_ms() - reconnect_ms; /* the first try is due at once */
}
