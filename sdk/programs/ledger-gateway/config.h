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

#include <jansson.h>
#include <ledger_client.h>
#include <pthread.h>

#define MAX_REPLICAS 64

/* The engines a replica may be (GATEWAY.md, "The engine side"). */
enum replica_kind {
	REPLICA_KIND_UNKNOWN, /* not declared, not yet detected */
	REPLICA_KIND_LEDGER,  /* ledgerd's test replica: GET /v1/replica/info */
	REPLICA_KIND_LLAMA_CPP,
	REPLICA_KIND_VLLM,
	REPLICA_KIND_SGLANG,
};

/* Where a replica stands, as its probes and its attempts found it. */
enum replica_state {
	REPLICA_HEALTHY,
	REPLICA_SLOW,        /* loading or busy: no attempt while a healthy one is free */
	REPLICA_DOWN,        /* failed, or not read yet */
	REPLICA_QUARANTINED, /* its identity differs from the declaration, or it refuses our key */
};

struct replica {
	char *name;
	char *url;
	enum replica_kind kind; /* declared, or detected by its probes */
	char *api_key;          /* from api_key_env, sent as a bearer, probes included; or NULL */
	bool runs_tools;        /* it claims tool calls itself: it gets the X-Ledger-* headers */
	json_t *declared;       /* the identity fields declared in --config, or NULL */

	/* What the probes found: replica.c, under its lock. */
	pthread_mutex_t lock;
	enum replica_state state;
	const char *reason; /* why it is not healthy (static text) */
	char field[32];     /* the identity field that quarantined it */
	bool probed;        /* its first probe ended */
	char *identity;     /* the identity's JSON text, or NULL: not read */
	char *revision;     /* "sha256:" of its canonical form */
	json_t *models;     /* the model ids it serves (an array), or NULL: any name */
	unsigned in_flight; /* requests picked for it and not yet put back */
};

struct gateway {
	const char *listen;
	const char *ledger_url;
	const char *ledger_token;
	const char *ledger_ca_file; /* the CAs of an https ledger; NULL: the system's */
	const char *tls_cert;       /* the listener's certificate chain (PEM); NULL: plain HTTP */
	const char *tls_key;        /* its private key */
	const char *ops_listen;     /* health, readiness, metrics apart; NULL: on listen */
	struct replica replicas[MAX_REPLICAS];
	size_t n_replicas;
	uint32_t lease_ms;
	uint32_t soft_ms;  /* silence after which a replica is slow (overloaded) */
	uint32_t stall_ms; /* silence after which it may be dead (heartbeat_timeout) */
	uint32_t max_attempts;
	uint32_t probe_interval_ms;  /* between two probes of a replica */
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
	atomic_uint next; /* round robin among the replicas with the fewest in flight */
};

/**
 * Fills @p gw from argv and the environment over the defaults it holds.
 * Prints the usage and exits 0 for --help, 2 for a usage error.
 */
void config_parse(struct gateway *gw, int argc, char **argv);

/** Says @p why and the usage on stderr, and exits 2. */
noreturn void config_usage_exit(const char *why);

#endif
