/*
 * ledger/store/token_watch.c: the thread that keeps ledgerd's set of live
 * token hashes in step with api_tokens. It LISTENs before it reads, so a
 * change committed after the LISTEN is announced and one committed before
 * it is in the read; it says "stale" as soon as an announcement arrives, and
 * reads again; and it reads every reload_ms whatever happens, for a change
 * no trigger announced (a restore with triggers off, a session in replica
 * mode).
 *
 *   down ──store_conn_ready(), listen_on()──> listening
 *   listening ──reload() with nothing announced meanwhile──> loaded() called
 *   loaded ──an announcement (take_announcements())──> stale(), reload()
 *   loaded ──reload_ms passed──> reload()
 *   any ──the connection lost, a step failed or late──> lose(): stale(), down
 */
#include "ledger/store/token_watch.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ledger/common/log.h"
#include "ledger/store/conn.h"
#include "ledger/store/step.h"
#include "ledger/store/store.h"

#define RECONNECT_MS 1000

struct ledger_token_watch {
	struct ledger_token_watch_config cfg;
	pthread_t thread;
	int stop_fd;                   /* an eventfd, written once to stop the thread */
	struct ledger_store_conn conn; /* the thread's own */
	bool started;                  /* loaded() was called once */
	int64_t lost_at;               /* monotonic ms the connection was lost at; 0: not lost */
};

/*
 * Waits until @p deadline_ms (monotonic) for the stop or, with @p pg, for
 * anything the server sends.
 * @return true when stopping
 */
static bool wait_until(struct ledger_token_watch *w, PGconn *pg, int64_t deadline_ms)
{
	struct pollfd p[2] = {
		{.fd = w->stop_fd, .events = POLLIN},
		{.fd = pg != NULL ? PQsocket(pg) : -1, .events = POLLIN}, /* -1: ignored */
	};

	for (;;) {
		int64_t left = deadline_ms - store_conn_now_ms();
		int n = poll(p, 2, left <= 0 ? 0 : (left > INT_MAX ? INT_MAX : (int)left));

		if (n >= 0 || errno != EINTR)
			return p[0].revents != 0;
	}
}

/*
 * Reads what the server sent unasked and takes every notification (only
 * the one channel is listened to).
 * @param announced set when there was one
 * @return false when the connection is gone
 */
static bool take_announcements(PGconn *pg, bool *announced)
{
	PGnotify *n = NULL;

	if (PQconsumeInput(pg) != 1 || PQstatus(pg) != CONNECTION_OK)
		return false;
	while ((n = PQnotifies(pg)) != NULL) {
		*announced = true;
		PQfreemem(n);
	}
	return true;
}

static enum ledger_err listen_on(struct ledger_store_conn *c)
{
	struct store_step st;
	enum ledger_err rc;

	store_step_begin(&st, c);
	store_step_add_simple(&st, "LISTEN " LEDGER_TOKEN_WATCH_CHANNEL);
	rc = store_step_run(&st);
	store_step_clear(&st);
	return rc;
}

/*
 * Reads every live token's hash and hands them to loaded(), unless a change
 * was announced while the read ran: it may have committed after the read's
 * snapshot, so the caller reads again first.
 * @param n receives how many there were
 */
static enum ledger_err load(struct ledger_token_watch *w, bool *announced, size_t *n)
{
	unsigned char(*hashes)[32] = NULL;
	int64_t read_ms = store_conn_now_ms();
	enum ledger_err rc = LEDGER_ERR_UNAVAILABLE;

	/* Only on the connection that listens: were it down, the read would open a deaf one. */
	if (w->conn.pg != NULL && PQstatus(w->conn.pg) == CONNECTION_OK)
		rc = ledger_store_token_hashes(&w->conn, &hashes, n);
	if (rc == LEDGER_OK && !take_announcements(w->conn.pg, announced))
		rc = LEDGER_ERR_UNAVAILABLE;
	if (rc == LEDGER_OK && !*announced)
		rc = w->cfg.loaded(hashes, *n, read_ms);
	free(hashes);
	return rc;
}

/*
 * What was loaded may be out of date from now on: the connection goes, and
 * a new one is tried at once (store_conn_ready() spaces the tries).
 */
static void lose(struct ledger_token_watch *w)
{
	w->cfg.stale();
	store_conn_drop(&w->conn);
	if (w->started && w->lost_at == 0) {
		w->lost_at = store_conn_now_ms();
		LOG_INFO("the token watch lost its connection: tokens are looked up in the "
			 "database until it listens again");
	}
}

/* load(), and says so when it is the first since the connection was lost. */
static enum ledger_err reload(struct ledger_token_watch *w, bool *announced)
{
	size_t n = 0;
	enum ledger_err rc = load(w, announced, &n);

	if (rc != LEDGER_OK || *announced)
		return rc;
	if (w->lost_at != 0)
		LOG_INFO("the token watch listens again after %.1f s: %zu live tokens",
			 (double)(store_conn_now_ms() - w->lost_at) / 1000.0, n);
	else if (!w->started)
		LOG_DEBUG("the token watch listens: %zu live tokens", n);
	w->started = true;
	w->lost_at = 0;
	return LEDGER_OK;
}

/*
 * After a failed step: again at once when the connection was lost or late
 * (a new one is tried at once, then no more than every RECONNECT_MS:
 * store_conn_ready()); after reload_ms when the database refused the
 * statement on a sound connection (not migrated, a standby), since it
 * refuses it again for a while.
 * @return true when stopping
 */
static bool fail(struct ledger_token_watch *w)
{
	bool refused =
		w->conn.pg != NULL && !w->conn.stuck && PQstatus(w->conn.pg) == CONNECTION_OK;

	lose(w);
	return refused && wait_until(w, NULL, store_conn_now_ms() + w->cfg.reload_ms);
}

static void *run(void *arg)
{
	struct ledger_token_watch *w = arg;
	bool listening = false, due = true;
	int64_t next_load = 0;

	for (;;) {
		bool announced = false;

		if (!listening) {
			if (!store_conn_ready(&w->conn)) {
				lose(w);
				if (wait_until(w, NULL, store_conn_now_ms() + RECONNECT_MS))
					break;
				continue;
			}
			if (listen_on(&w->conn) != LEDGER_OK) {
				if (fail(w))
					break;
				continue;
			}
			listening = true;
			due = true;
		}
		if (due || store_conn_now_ms() >= next_load) {
			if (reload(w, &announced) != LEDGER_OK) {
				listening = false;
				if (fail(w))
					break;
				continue;
			}
			next_load = store_conn_now_ms() + w->cfg.reload_ms;
			/* A change announced during the read: stale until the next one. */
			due = announced;
			if (due) {
				w->cfg.stale();
				continue;
			}
		}
		if (wait_until(w, w->conn.pg, next_load))
			break;
		if (!take_announcements(w->conn.pg, &announced)) {
			listening = false;
			lose(w);
			continue;
		}
		if (announced) {
			w->cfg.stale();
			due = true;
		}
	}
	w->cfg.stale();
	store_conn_drop(&w->conn);
	return NULL;
}

enum ledger_err ledger_token_watch_start(const struct ledger_token_watch_config *cfg,
					 struct ledger_token_watch **out)
{
	struct ledger_token_watch *w = calloc(1, sizeof(*w));

	*out = NULL;
	if (w == NULL)
		return LEDGER_ERR_NOMEM;
	w->cfg = *cfg;
	store_conn_init(&w->conn, cfg->database_url, RECONNECT_MS);
	w->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (w->stop_fd < 0) {
		free(w);
		return LEDGER_ERR_INTERNAL;
	}
	if (pthread_create(&w->thread, NULL, run, w) != 0) {
		close(w->stop_fd);
		free(w);
		return LEDGER_ERR_INTERNAL;
	}
	*out = w;
	return LEDGER_OK;
}

void ledger_token_watch_stop(struct ledger_token_watch *w)
{
	uint64_t one = 1;

	if (w == NULL)
		return;
	if (write(w->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		abort(); /* an eventfd takes 8 bytes unless its count would overflow */
	pthread_join(w->thread, NULL);
	close(w->stop_fd);
	free(w);
}
