/*
 * api/service/server.h: the HTTP server (api/service/server.c): the listening sockets and
 * the driver that walks every call through its life, and what
 * a handler may ask of the server it runs in.
 */
#ifndef API_SERVER_H
#define API_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "api/service/config.h"
#include "ledger/core/policy.h"
#include "ledger/store/store.h"

struct wire_tls;

/* What the server listens on, opened before anything else starts. */
struct api_server_sockets {
	int api_fd; /* --listen */
	char api_bound[300];
	int ops_fd; /* --ops-listen; -1: none */
	char ops_bound[300];
	struct wire_tls *tls; /* NULL: plaintext; borrowed */
};

/**
 * Starts serving on the sockets of @p sk (owned from now on); every
 * argument is borrowed until api_server_stop(). For api_server_run(), and
 * for tests and fuzzers that run a server in their own process.
 * @return the server, or NULL (a line on standard error says why)
 */
struct api_server *api_server_start(const struct api_config *cfg,
				    const struct ledger_policy *policy, struct ledger_store *store,
				    const struct api_server_sockets *sk);

/** Reads the TLS credentials again (SIGHUP); on failure the old ones stay. */
void api_server_reload(struct api_server *srv);

/** Stops accepting and waits for the calls in flight. @return false: --drain-timeout passed */
bool api_server_drain(struct api_server *srv);

/** Stops the threads and frees the server. */
void api_server_stop(struct api_server *srv);

/**
 * Serves on the sockets of @p sk (owned from now on) with @p store until
 * SIGTERM or SIGINT, then drains the calls in flight; SIGHUP reloads the
 * TLS credentials. @p cfg, @p policy and @p store are borrowed until it
 * returns.
 * @return 0 on a clean stop, 1 if it could not start
 */
int api_server_run(const struct api_config *cfg, const struct ledger_policy *policy,
		   struct ledger_store *store, const struct api_server_sockets *sk);

#endif
