/*
 * sdk/programs/ledger-gateway/config.h: the gateway's settings, from its flags and its
 * environment (the flag wins).
 */
#ifndef GATEWAY_CONFIG_H
#define GATEWAY_CONFIG_H

#include <stdatomic.h>
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
