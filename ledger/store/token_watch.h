/*
 * ledger/store/token_watch.h: the thread of ledgerd serve that keeps the
 * hashes of every live token in step with the database, on a connection of
 * its own: it LISTENs on the channel sql/007's trigger notifies whenever
 * api_tokens changes, reads the hashes again on each notification, and
 * every reload_ms whatever happens. Whoever keeps the hashes is told of
 * each load and of each moment they may be out of date.
 */
#ifndef LEDGER_TOKEN_WATCH_H
#define LEDGER_TOKEN_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "ledger/common/err.h"

/* The channel sql/007_token_changes.sql notifies. */
#define LEDGER_TOKEN_WATCH_CHANNEL "ledger_tokens"

struct ledger_token_watch_config {
	const char *database_url; /* borrowed for the thread's lifetime */
	int64_t reload_ms;        /* the longest time between two loads */
	/*
	 * On the thread, after each load: the hashes of every live token
	 * (borrowed for the call) and the CLOCK_MONOTONIC milliseconds at
	 * which the read that found them was sent. Returns LEDGER_OK, or an
	 * error when it could not keep them (the thread loads again later).
	 */
	enum ledger_err (*loaded)(const unsigned char (*hashes)[32], size_t n, int64_t read_ms);
	/*
	 * On the thread, whenever what was loaded may be out of date: a change
	 * was announced and is not loaded yet, or the connection (and with it
	 * the announcements) is gone.
	 */
	void (*stale)(void);
};

struct ledger_token_watch;

/**
 * Starts the thread; it connects (and reconnects) by itself. Nothing is
 * loaded yet when this returns.
 * @param out receives the watch; stop it with ledger_token_watch_stop()
 */
LEDGER_MUSTCHECK enum ledger_err
ledger_token_watch_start(const struct ledger_token_watch_config *cfg,
			 struct ledger_token_watch **out);

/** Stops the thread at once (it calls stale() last) and frees @p w. NULL-safe. */
void ledger_token_watch_stop(struct ledger_token_watch *w);

#endif
