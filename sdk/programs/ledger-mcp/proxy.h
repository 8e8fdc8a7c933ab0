/*
 * sdk/programs/ledger-mcp/proxy.h: what every part of ledger-mcp shares: its settings, its
 * ledgerd client, and the tool annotations a trusted server listed. The
 * transports (stdio.c, http.c) move messages; intercept.c decides what a
 * tools/call becomes; this struct is all they have in common.
 */
#ifndef MCP_PROXY_H
#define MCP_PROXY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdk/c/ledger_client.h"

/* The settings, validated by main.c before any transport starts. */
struct mcp_settings {
	const char *ledger_url;   /* ledgerd's address */
	const char *ca_file;      /* https: the CAs that may sign ledgerd's certificate, or NULL */
	char *token;              /* the bearer token (--token, --token-file): owned; wiped and
	                           freed once the client holds its copy */
	uint32_t lease_ms;        /* a claim's lease between renewals */
	uint32_t wait_ms;         /* how long a call waits while another holder runs it */
	uint32_t call_timeout_ms; /* how long a forwarded call may run; 0: no bound */
	uint32_t ledger_retry_ms; /* how long a call to ledgerd is re-sent; 0: sent once */
	size_t max_result_bytes;  /* a longer result is recorded as its length and SHA-256 */
	bool require_key;         /* refuse a tools/call without the two keys */
	bool trust_annotations;   /* readOnlyHint skips the claim, idempotentHint dedupes */
	bool store_args;          /* send the arguments to ledgerd for incident review */
	const char *owner;        /* who executes, for review: "ledger-mcp@HOST" by default */
	const char *listen;       /* http: HOST:PORT to listen on */
	const char *upstream;     /* http: the server's Streamable HTTP endpoint URL */
	const char *tls_cert;     /* http: the listener's PEM certificate chain; NULL: plain */
	const char *tls_key;      /* http: its private key */
	char **server_argv;       /* stdio: the server's command and arguments (borrowed) */
};

/* What a trusted server said of one tool in tools/list. */
struct mcp_tool_hint {
	char *name;      /* owned */
	bool read_only;  /* annotations.readOnlyHint: true */
	bool idempotent; /* annotations.idempotentHint: true */
};

struct mcp_proxy {
	const struct mcp_settings *set; /* borrowed for the proxy's life */
	struct ledger_client *client;   /* thread-safe; owned by main.c */
	pthread_mutex_t hints_lock;     /* guards the three below */
	struct mcp_tool_hint *hints;    /* every tool listed so far, the latest listing wins */
	size_t n_hints, cap_hints;
};

#endif
