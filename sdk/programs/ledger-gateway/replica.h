/*
 * sdk/programs/ledger-gateway/replica.h: the replicas as the gateway knows
 * them (GATEWAY.md, "The engine side"). A thread per replica probes it in
 * the background: it detects the engine's kind, asks its own health
 * endpoint, and reads its identity field by field from what the engine
 * serves (or takes it from the declaration, which a served value that
 * differs breaks: the replica is quarantined). An attempt goes to a
 * healthy replica whose identity is read and which serves the request's
 * model, the one with the fewest requests in flight, ties round robin.
 */
#ifndef GATEWAY_REPLICA_H
#define GATEWAY_REPLICA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sdk/programs/ledger-gateway/config.h"

#define GATEWAY_REPLICA_NONE SIZE_MAX

/* The replica an attempt goes to, as ledgerd is told of it. */
struct gateway_replica_pick {
	size_t index;   /* into gw->replicas; GATEWAY_REPLICA_NONE: none */
	char *revision; /* "sha256:" and the hex of the identity's canonical form; owned */
	char *identity; /* the identity fields, a JSON object's text; owned */
	bool no_model;  /* none: replicas are up, but none serves the model asked for */
};

/** Starts the probes of every replica of @p gw (borrowed for the process's life). */
void gateway_replicas_start(struct gateway *gw);

/**
 * Picks a replica for @p model (NULL: any) other than @p avoid
 * (GATEWAY_REPLICA_NONE: none to avoid), of the model revision @p revision
 * (NULL or "": any; a rerun's must be the request's), and counts a request
 * in flight on it, to be given back with gateway_replica_put(). Before the
 * first probes have ended, it waits for them.
 * @return the pick; free with gateway_replica_pick_clear()
 */
struct gateway_replica_pick gateway_replica_pick(struct gateway *gw, const char *model,
						 size_t avoid, const char *revision);

/** Frees what @p p owns (and not its request in flight: see gateway_replica_put()). */
void gateway_replica_pick_clear(struct gateway_replica_pick *p);

/** A request picked for replica @p k has ended there. */
void gateway_replica_put(struct gateway *gw, size_t k);

/* What an attempt saw of its replica. */
enum gateway_replica_seen {
	GATEWAY_SEEN_FAILED,       /* it failed: ejected until a probe succeeds */
	GATEWAY_SEEN_BUSY,         /* 408, 429, 503: slow, not failed, until a probe */
	GATEWAY_SEEN_UNAUTHORIZED, /* 401, 403: the gateway's key is wrong: quarantined */
};

/** Records what an attempt saw of replica @p k. */
void gateway_replica_saw(struct gateway *gw, size_t k, enum gateway_replica_seen seen);

/** Whether replica @p k gets the X-Ledger-* headers: it runs tools, or is of kind ledger. */
bool gateway_replica_runs_tools(struct gateway *gw, size_t k);

/** Replica @p k's kind as its probes found it or it was declared ("vllm", ...): static text. */
const char *gateway_replica_kind_name(struct gateway *gw, size_t k);

/** Whether the probes of replica @p k find it down (an attempt that waits for it asks). */
bool gateway_replica_is_down(struct gateway *gw, size_t k);

/**
 * /readyz's body: {"ready", "ledger", "replicas": [{"name", "kind", "state",
 * "reason", "field"?, "in_flight"}]}; a new reference. @p ready is set when
 * a replica is healthy with its identity read.
 */
json_t *gateway_replicas_readiness(struct gateway *gw, bool *ready);

/** /v1/models's body: the models of the healthy replicas, OpenAI's list; a new reference. */
json_t *gateway_replicas_models(struct gateway *gw);

/** Counts the replicas in each state, for /metrics: healthy, slow, down, quarantined. */
void gateway_replicas_count(struct gateway *gw, size_t counts[4]);

/** The monotonic clock in milliseconds. */
uint64_t gateway_now_ms(void);

#endif
