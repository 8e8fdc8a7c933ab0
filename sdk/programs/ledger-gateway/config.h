/*
 * sdk/programs/ledger-gateway/config.h: ledger-gateway's settings, one
 * table of flags and environment variables (the flag wins), checked
 * before anything starts (GATEWAY.md, "Command line").
 */
#ifndef GATEWAY_CONFIG_H
#define GATEWAY_CONFIG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdnoreturn.h>

#include <ledger_client.h>

#define MAX_REPLICAS 64

struct replica {
	char *name;
	char *url;
	_Atomic uint64_t down_until; /* ms, monotonic; 0: healthy */
};

struct gateway {
	const char *listen;
	const char *ledger_url;
	const char *ledger_token;
	const char *ledger_ca_file; /* the CAs of an https ledger; NULL: the system's */
	const char *tls_cert;       /* the listener's certificate chain (PEM); NULL: plain HTTP */
	const char *tls_key;        /* its private key */
	struct replica replicas[MAX_REPLICAS];
	size_t n_replicas;
	uint32_t lease_ms;
	uint32_t soft_ms;  /* silence after which a replica is slow (overloaded) */
	uint32_t stall_ms; /* silence after which it may be dead (heartbeat_timeout) */
	uint32_t max_attempts;
	const char *key_header;      /* the header naming the logical request (Idempotency-Key) */
	bool require_key;            /* a request without one is refused */
	const char *scope_header;    /* the header whose raw value scopes a key; NULL: none */
	const char *key_secret;      /* GATEWAY_KEY_SECRET: keys' request ids; NULL: keys refused */
	uint32_t first_byte_hold_ms; /* a keyed request's attempt goes on this long for a
	                                client that left before its first byte */
	uint32_t resume_hold_ms;     /* and this long after it */
	size_t max_kept_answer_bytes; /* answers kept in ledgerd up to this; beyond, their hash */
	char id[24];                  /* this process, as attempts name it ("gw-" and random) */
	struct ledger_client *ledger;
	atomic_uint next; /* round robin over replicas */
};

/**
 * Fills @p gw from argv and the environment over the defaults it holds.
 * Prints the usage and exits 0 for --help, 2 for a usage error.
 */
void config_parse(struct gateway *gw, int argc, char **argv);

/** Says @p why and the usage on stderr, and exits 2. */
noreturn void config_usage_exit(const char *why);

#endif
