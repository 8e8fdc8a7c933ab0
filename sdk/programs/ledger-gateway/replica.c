/*
 * sdk/programs/ledger-gateway/replica.c: the choice of replica.h, round
 * robin over the replicas not marked down, each read before it is chosen.
 */
#include "sdk/programs/ledger-gateway/replica.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "sdk/programs/ledger-gateway/upstream.h"

#define DOWN_MS 5000u /* a failed replica is skipped this long */
#define INFO_TIMEOUT_MS 1000L

/* What makes two replicas' output interchangeable: it names the model revision. */
static const char *const IDENTITY_KEYS[] = {"weights_revision", "quantization",   "tokenizer",
					    "chat_template",    "kv_cache_dtype", "parallel_layout",
					    "adapters"};

uint64_t gateway_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/*
 * Reads the identity of @p rep into @p p: the allowlisted fields of its
 * info (a raw answer is never kept: some carry secrets) and the SDK's
 * fingerprint of them. @return false if it does not answer
 */
static bool read_identity(const struct replica *rep, struct gateway_replica_pick *p)
{
	char url[1024], hex[65], *info_text = NULL;
	json_t *info = NULL, *picked = json_object();
	bool ok = false;

	snprintf(url, sizeof(url), "%s/v1/replica/info", rep->url);
	info_text = upstream_get(url, INFO_TIMEOUT_MS);
	if (info_text != NULL)
		info = json_loads(info_text, 0, NULL);
	if (info == NULL || !json_is_object(info) || picked == NULL)
		goto out;
	for (size_t i = 0; i < sizeof(IDENTITY_KEYS) / sizeof(IDENTITY_KEYS[0]); i++) {
		json_t *v = json_object_get(info, IDENTITY_KEYS[i]);

		json_object_set(picked, IDENTITY_KEYS[i], v != NULL ? v : json_null());
	}
	p->identity = json_dumps(picked, JSON_COMPACT);
	ok = p->identity != NULL &&
	     ledger_client_args_sha256(p->identity, strlen(p->identity), hex) == LEDGER_CLIENT_OK &&
	     asprintf(&p->revision, "sha256:%s", hex) >= 0;
	if (!ok)
		p->revision = NULL;
out:
	free(info_text);
	json_decref(info);
	json_decref(picked);
	return ok;
}

struct gateway_replica_pick gateway_replica_pick(struct gateway *gw, size_t avoid)
{
	struct gateway_replica_pick p = {.index = GATEWAY_REPLICA_NONE};
	unsigned start = atomic_fetch_add(&gw->next, 1);

	for (size_t i = 0; i < gw->n_replicas; i++) {
		size_t k = (start + i) % gw->n_replicas;
		struct replica *rep = &gw->replicas[k];

		if (k == avoid || atomic_load(&rep->down_until) > gateway_now_ms())
			continue;
		if (read_identity(rep, &p)) {
			p.index = k;
			return p;
		}
		gateway_replica_pick_clear(&p);
		gateway_replica_down(gw, k);
	}
	return p;
}

void gateway_replica_pick_clear(struct gateway_replica_pick *p)
{
	free(p->revision);
	free(p->identity);
	*p = (struct gateway_replica_pick){.index = GATEWAY_REPLICA_NONE};
}

void gateway_replica_down(struct gateway *gw, size_t k)
{
	atomic_store(&gw->replicas[k].down_until, gateway_now_ms() + DOWN_MS);
}
