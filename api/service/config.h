/*
 * api/service/config.h: what ledgerd's service runs with. The command line
 * fills it from its settings (api/cli/settings.c) and the service reads it,
 * so that nothing below the command line knows of flags or variables.
 */
#ifndef API_CONFIG_H
#define API_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

struct api_config {
	const char *listen;           /* --listen: a "unix:/path" socket is removed at stop */
	bool ui;                      /* the incident-review page at /ui/ on the API listener */
	int64_t max_body_bytes;       /* larger bodies: 413 body_too_large */
	int64_t max_kept_answer_bytes; /* a larger answer keeps its length and SHA-256 only */
	int64_t max_result_bytes;      /* a larger tool-call result keeps its length and SHA-256 */
	int64_t min_lease_ms;         /* lease_ms bounds; outside: 400 invalid_field */
	int64_t max_lease_ms;
	int64_t unavailable_retry_ms; /* retry_after_ms of 503 store_unavailable */
	int64_t drain_timeout_ms;     /* how long a stop waits for calls in flight */
	int64_t head_timeout_ms;      /* a request's head must arrive within this of its first byte */
	int64_t body_timeout_ms;      /* its body within this of its head */
	int64_t idle_timeout_ms;      /* an idle keep-alive connection, or an unread reply */
	int64_t write_timeout_ms;     /* a client behind a reply, from its first byte */
	int64_t max_unread_output;    /* reply bytes waiting on clients behind */
	int64_t max_connections;      /* open at once, in all */
	int64_t max_connections_per_address; /* open at once from one address; 0: no limit */
	int64_t http_threads;                /* polling threads */
	int64_t workers;                     /* database connections, kept out of the file budget */
};

#endif
