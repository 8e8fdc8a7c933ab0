/*
 * sdk/programs/ledger-gateway/replica.h: choosing the replica of an
 * attempt. A replica answers its info before it is chosen (the read doubles
 * as a health check), and what decides its output names its model revision:
 * two attempts on replicas of one revision are interchangeable.
 */
#ifndef GATEWAY_REPLICA_H
#define GATEWAY_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "sdk/programs/ledger-gateway/config.h"

#define GATEWAY_REPLICA_NONE SIZE_MAX

/* The replica an attempt goes to, as ledgerd is told of it. */
struct gateway_replica_pick {
	size_t index;   /* into gw->replicas; GATEWAY_REPLICA_NONE: none answers */
	char *revision; /* "sha256:" and the hex of the identity's canonical form; owned */
	char *identity; /* the identity fields, a JSON object's text; owned */
};

/**
 * Picks a healthy replica of @p gw other than @p avoid
 * (GATEWAY_REPLICA_NONE: none to avoid), round robin, and reads its
 * identity; one that does not answer is down for a while.
 * @return the pick; free with gateway_replica_pick_clear()
 */
struct gateway_replica_pick gateway_replica_pick(struct gateway *gw, size_t avoid);

/** Frees what @p p owns. */
void gateway_replica_pick_clear(struct gateway_replica_pick *p);

/** Marks replica @p k of @p gw down for a while: it failed an attempt. */
void gateway_replica_down(struct gateway *gw, size_t k);

/** The monotonic clock in milliseconds. */
uint64_t gateway_now_ms(void);

#endif
