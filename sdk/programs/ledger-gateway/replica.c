/*
 * sdk/programs/ledger-gateway/replica.c: the replicas of replica.h. Each
 * has a prober thread; what a probe finds is kept under the replica's lock
 * and read by the requests' threads when they pick. Every read of an
 * engine's answer goes through an allowlist of fields: a raw info answer is
 * never logged nor kept, since some carry secrets.
 */
#include "sdk/programs/ledger-gateway/replica.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/common/clock.h"
#include "ledger/common/sha256.h"
#include "sdk/programs/ledger-gateway/log.h"
#include "sdk/programs/ledger-gateway/upstream.h"

#define PROBE_TIMEOUT_MS 5000L /* SGLang's health check runs a generation */
#define FIRST_PROBE_WAIT_MS 6000u

/* The identity's fields, in GATEWAY.md's order. */
static const char *const FIELDS[] = {"model",           "weights_revision", "quantization",
				     "tokenizer",       "chat_template",    "kv_cache_dtype",
				     "parallel_layout", "adapters"};
#define N_FIELDS (sizeof(FIELDS) / sizeof(FIELDS[0]))

/* Text fields: recorded as "sha256:" and the hex of their UTF-8. */
static bool is_text_field(const char *field)
{
	return strcmp(field, "chat_template") == 0 || strcmp(field, "tokenizer") == 0;
}

static const char *const KIND_NAMES[] = {[REPLICA_KIND_UNKNOWN] = "unknown",
					 [REPLICA_KIND_LEDGER] = "ledger",
					 [REPLICA_KIND_LLAMA_CPP] = "llama.cpp",
					 [REPLICA_KIND_VLLM] = "vllm",
					 [REPLICA_KIND_SGLANG] = "sglang"};

static const char *const STATE_NAMES[] = {[REPLICA_HEALTHY] = "healthy",
					  [REPLICA_SLOW] = "slow",
					  [REPLICA_DOWN] = "down",
					  [REPLICA_QUARANTINED] = "quarantined"};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t probed; /* a replica's first probe ended */
} first = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

uint64_t gateway_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* --- reading an engine --- */

/* GET @p path of @p rep. @return the reply (status 0: no answer) */
static struct upstream_reply get(const struct replica *rep, const char *path)
{
	char url[1200];

	snprintf(url, sizeof(url), "%s%s", rep->url, path);
	return upstream_get(url, rep->api_key, PROBE_TIMEOUT_MS);
}

/* GET @p path as JSON: the document when it answered 200 with one, else NULL. */
static json_t *get_json(const struct replica *rep, const char *path, long *status)
{
	struct upstream_reply r = get(rep, path);
	json_t *doc = r.status == 200 ? json_loadb(r.body, r.len, 0, NULL) : NULL;

	if (status != NULL)
		*status = r.status;
	upstream_reply_clear(&r);
	return doc;
}

/* The owner /v1/models names for its first entry, or "". */
static const char *owned_by(json_t *models)
{
	const char *s = json_string_value(
		json_object_get(json_array_get(json_object_get(models, "data"), 0), "owned_by"));

	return s != NULL ? s : "";
}

/* The kind, detected in GATEWAY.md's order; first match wins. */
static enum replica_kind detect(const struct replica *rep)
{
	struct upstream_reply r = get(rep, "/v1/replica/info");
	enum replica_kind kind = REPLICA_KIND_UNKNOWN;
	json_t *models = NULL;

	if (r.status == 200) {
		upstream_reply_clear(&r);
		return REPLICA_KIND_LEDGER;
	}
	upstream_reply_clear(&r);
	r = get(rep, "/props");
	/* llama-server answers every path 503 "Loading model" while it loads. */
	if (r.status == 200 ||
	    (r.status == 503 && r.body != NULL && strstr(r.body, "Loading model") != NULL))
		kind = REPLICA_KIND_LLAMA_CPP;
	upstream_reply_clear(&r);
	if (kind != REPLICA_KIND_UNKNOWN)
		return kind;
	models = get_json(rep, "/v1/models", NULL);
	r = get(rep, "/get_model_info");
	if (r.status == 200 || strcmp(owned_by(models), "sglang") == 0)
		kind = REPLICA_KIND_SGLANG;
	upstream_reply_clear(&r);
	if (kind == REPLICA_KIND_UNKNOWN) {
		r = get(rep, "/version");
		if (r.status == 200 || strcmp(owned_by(models), "vllm") == 0)
			kind = REPLICA_KIND_VLLM;
		upstream_reply_clear(&r);
	}
	json_decref(models);
	return kind;
}

/* The health endpoint of each kind. */
static const char *health_path(enum replica_kind kind)
{
	return kind == REPLICA_KIND_LEDGER ? "/v1/replica/info" : "/health";
}

/* "sha256:" and the hex of @p text's bytes, as a new JSON string. */
static json_t *text_digest(const char *text, size_t len)
{
	unsigned char d[32];
	char hex[8 + 65] = "sha256:";

	if (!ledger_sha256(text, len, d))
		return NULL;
	for (size_t i = 0; i < 32; i++)
		snprintf(hex + 7 + 2 * i, 3, "%02x", d[i]);
	return json_string(hex);
}

/* Sets @p field of @p id to @p v (taken) when it is served: not NULL. Text fields that
 * are strings are digested. */
static void put(json_t *id, const char *field, json_t *v)
{
	if (v == NULL)
		return;
	if (is_text_field(field) && json_is_string(v) &&
	    strncmp(json_string_value(v), "sha256:", 7) != 0) {
		json_t *d = text_digest(json_string_value(v), json_string_length(v));

		json_decref(v);
		v = d;
	}
	if (v != NULL)
		json_object_set_new(id, field, v);
}

/* A member of @p obj, a new reference, or NULL when absent. */
static json_t *member(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	return v != NULL ? json_incref(v) : NULL;
}

/* The model ids /v1/models lists (base models only: an entry with a parent is an adapter). */
static json_t *model_ids(json_t *models, json_t *adapters)
{
	json_t *ids = json_array(), *entry;
	size_t i;

	json_array_foreach(json_object_get(models, "data"), i, entry)
	{
		json_t *id = json_object_get(entry, "id"),
		       *parent = json_object_get(entry, "parent");

		if (!json_is_string(id))
			continue;
		if (json_is_string(parent) && adapters != NULL)
			json_array_append(adapters, id);
		json_array_append(ids, id);
	}
	return ids;
}

/* What one probe of an engine found. */
struct found {
	enum replica_kind kind;
	enum replica_state state;
	const char *reason;
	json_t *identity; /* the fields served */
	json_t *models;   /* the ids served; NULL: any name */
	bool refused;     /* an endpoint refused the gateway's key (401, 403) */
};

/* GET @p path of @p rep as JSON for a probe's @p f, which notes a refused key. */
static json_t *read_json(const struct replica *rep, struct found *f, const char *path)
{
	long status = 0;
	json_t *doc = get_json(rep, path, &status);

	if (status == 401 || status == 403)
		f->refused = true;
	return doc;
}

static void read_ledger(const struct replica *rep, struct found *f)
{
	json_t *info = read_json(rep, f, "/v1/replica/info");

	for (size_t i = 0; json_is_object(info) && i < N_FIELDS; i++)
		put(f->identity, FIELDS[i], member(info, FIELDS[i]));
	json_decref(info);
}

static void read_llama_cpp(const struct replica *rep, struct found *f)
{
	json_t *models = read_json(rep, f, "/v1/models"), *props = read_json(rep, f, "/props");
	json_t *first_model = json_array_get(json_object_get(models, "data"), 0);
	json_t *meta = json_object_get(first_model, "meta");
	json_t *lora = read_json(rep, f, "/lora-adapters");

	put(f->identity, "model", member(first_model, "id"));
	if (json_object_get(f->identity, "model") == NULL)
		put(f->identity, "model", member(props, "model_path"));
	if (json_is_object(meta))
		put(f->identity, "tokenizer",
		    json_pack("{s:O?,s:O?}", "vocab_type", json_object_get(meta, "vocab_type"),
			      "n_vocab", json_object_get(meta, "n_vocab")));
	put(f->identity, "chat_template", member(props, "chat_template"));
	if (json_is_array(lora))
		put(f->identity, "adapters", json_incref(lora));
	/* llama-server serves one model under any name. */
	json_decref(models);
	json_decref(props);
	json_decref(lora);
}

/* vLLM's kv cache dtype, from its Prometheus text: vllm:cache_config_info{...cache_dtype="X"...}. */
static json_t *vllm_cache_dtype(const struct replica *rep)
{
	struct upstream_reply r = get(rep, "/metrics");
	const char *line = r.status == 200 ? strstr(r.body, "vllm:cache_config_info{") : NULL;
	const char *at = NULL, *end = NULL;
	json_t *v = NULL;

	if (line != NULL) {
		const char *close = strchr(line, '}');

		at = strstr(line, "cache_dtype=\"");
		if (at != NULL && (close == NULL || at < close)) {
			at += strlen("cache_dtype=\"");
			end = strchr(at, '"');
		}
	}
	if (at != NULL && end != NULL)
		v = json_stringn(at, (size_t)(end - at));
	upstream_reply_clear(&r);
	return v;
}

static void read_vllm(const struct replica *rep, struct found *f)
{
	json_t *models = read_json(rep, f, "/v1/models"), *adapters = json_array();
	json_t *base = NULL, *entry;
	size_t i;

	f->models = model_ids(models, adapters);
	json_array_foreach(json_object_get(models, "data"), i, entry)
	{
		if (!json_is_string(json_object_get(entry, "parent"))) {
			base = entry;
			break;
		}
	}
	if (base != NULL) {
		const char *id = json_string_value(json_object_get(base, "id"));
		const char *root = json_string_value(json_object_get(base, "root"));

		/* The served name, and the weights it stands for when they differ. */
		if (id != NULL && root != NULL && strcmp(id, root) != 0)
			put(f->identity, "model", json_sprintf("%s (%s)", id, root));
		else
			put(f->identity, "model", member(base, "id"));
	}
	put(f->identity, "kv_cache_dtype", vllm_cache_dtype(rep));
	put(f->identity, "adapters", adapters);
	json_decref(models);
}

static void read_sglang(const struct replica *rep, struct found *f)
{
	json_t *models = read_json(rep, f, "/v1/models");
	json_t *info = read_json(rep, f, "/get_model_info");
	json_t *server = read_json(rep, f, "/server_info");
	json_t *version, *tp, *pp;

	if (server == NULL)
		server = read_json(rep, f, "/get_server_info");
	f->models = model_ids(models, NULL);
	put(f->identity, "model", member(json_array_get(json_object_get(models, "data"), 0), "id"));
	if (json_object_get(f->identity, "model") == NULL)
		put(f->identity, "model", member(info, "model_path"));
	version = json_object_get(info, "weight_version");
	if (json_is_string(version) && strcmp(json_string_value(version), "default") != 0)
		put(f->identity, "weights_revision", json_incref(version));
	put(f->identity, "quantization", member(server, "quantization"));
	put(f->identity, "tokenizer", member(server, "tokenizer_path"));
	if (json_object_get(f->identity, "tokenizer") == NULL)
		put(f->identity, "tokenizer", member(info, "tokenizer_path"));
	put(f->identity, "chat_template", member(server, "chat_template"));
	put(f->identity, "kv_cache_dtype", member(server, "kv_cache_dtype"));
	tp = json_object_get(server, "tp_size");
	pp = json_object_get(server, "pp_size");
	if (json_is_integer(tp))
		put(f->identity, "parallel_layout",
		    json_integer_value(pp) > 1
			    ? json_sprintf("tp%lld-pp%lld", (long long)json_integer_value(tp),
					   (long long)json_integer_value(pp))
			    : json_sprintf("tp%lld", (long long)json_integer_value(tp)));
	put(f->identity, "adapters", member(server, "lora_paths"));
	json_decref(models);
	json_decref(info);
	json_decref(server);
}

/*
 * Whether a 503 of the health endpoint means the engine is loading (slow),
 * not failed: llama-server says "Loading model"; SGLang answers 503 until
 * its warm-up passed, so a 503 before it was ever healthy is its start.
 * vLLM answers nothing while it loads: its 503 is an engine that died.
 */
static bool loading(enum replica_kind kind, bool ever_healthy, const struct upstream_reply *r)
{
	if (kind == REPLICA_KIND_LLAMA_CPP)
		return r->body != NULL && strstr(r->body, "Loading model") != NULL;
	return kind == REPLICA_KIND_SGLANG && !ever_healthy;
}

/*
 * Probes @p rep once: its kind (unless known), its health, its identity and
 * its models. Nothing of it is under the lock: the caller commits it.
 */
static void probe(const struct replica *rep, enum replica_kind kind, bool ever_healthy,
		  struct found *f)
{
	struct upstream_reply health = {0};

	f->kind = kind != REPLICA_KIND_UNKNOWN ? kind : detect(rep);
	f->identity = json_object();
	if (f->kind == REPLICA_KIND_UNKNOWN) {
		f->state = REPLICA_DOWN;
		f->reason = "kind_unknown";
		return;
	}
	health = get(rep, health_path(f->kind));
	if (health.status == 401 || health.status == 403) {
		f->state = REPLICA_QUARANTINED;
		f->reason = "unauthorized";
	} else if (health.status == 503 && loading(f->kind, ever_healthy, &health)) {
		f->state = REPLICA_SLOW;
		f->reason = "loading";
	} else if (health.status != 200) {
		f->state = REPLICA_DOWN;
		f->reason = health.status == 0 ? "unreachable" : "unhealthy";
	} else {
		f->state = REPLICA_HEALTHY;
		f->reason = "";
	}
	upstream_reply_clear(&health);
	if (f->state != REPLICA_HEALTHY)
		return;
	f->refused = false;
	switch (f->kind) {
	case REPLICA_KIND_LEDGER:
		read_ledger(rep, f);
		break;
	case REPLICA_KIND_LLAMA_CPP:
		read_llama_cpp(rep, f);
		break;
	case REPLICA_KIND_VLLM:
		read_vllm(rep, f);
		break;
	case REPLICA_KIND_SGLANG:
		read_sglang(rep, f);
		break;
	case REPLICA_KIND_UNKNOWN:
		break;
	}
	/* Health endpoints are open on every engine: the key shows on what it guards. */
	if (f->refused) {
		f->state = REPLICA_QUARANTINED;
		f->reason = "unauthorized";
	}
}

/*
 * The identity: each field served, else declared, else "unknown". A
 * declared field served otherwise names itself in @p field. @return the
 * identity (a new reference) or NULL on a mismatch
 */
static json_t *identity_of(const struct replica *rep, json_t *served, char field[32])
{
	json_t *id = json_object();

	for (size_t i = 0; i < N_FIELDS; i++) {
		json_t *s = json_object_get(served, FIELDS[i]);
		json_t *d =
			rep->declared != NULL ? json_object_get(rep->declared, FIELDS[i]) : NULL;

		if (s != NULL && d != NULL && !json_equal(s, d)) {
			snprintf(field, 32, "%s", FIELDS[i]);
			json_decref(id);
			return NULL;
		}
		json_object_set_new(id, FIELDS[i],
				    s != NULL   ? json_incref(s)
				    : d != NULL ? json_incref(d)
						: json_string("unknown"));
	}
	return id;
}

/* Commits what a probe found to @p rep. */
static void commit(struct replica *rep, struct found *f)
{
	char field[32] = "", hex[65], *text = NULL, *revision = NULL;
	json_t *id = NULL;
	bool changed = false;

	if (f->state == REPLICA_HEALTHY) {
		id = identity_of(rep, f->identity, field);
		if (id == NULL) {
			f->state = REPLICA_QUARANTINED;
			f->reason = "identity_mismatch";
		} else {
			text = json_dumps(id, JSON_COMPACT | JSON_SORT_KEYS);
			if (text == NULL ||
			    ledger_client_args_sha256(text, strlen(text), hex) !=
				    LEDGER_CLIENT_OK ||
			    asprintf(&revision, "sha256:%s", hex) < 0) {
				f->state = REPLICA_DOWN;
				f->reason = "out_of_memory";
				free(text);
				text = NULL;
				revision = NULL;
			}
		}
	}
	pthread_mutex_lock(&rep->lock);
	rep->kind = f->kind;
	rep->state = f->state;
	rep->reason = f->reason;
	snprintf(rep->field, sizeof(rep->field), "%s", field);
	if (text != NULL) {
		changed = rep->revision != NULL && strcmp(rep->revision, revision) != 0;
		free(rep->identity);
		free(rep->revision);
		rep->identity = text;
		rep->revision = revision;
		json_decref(rep->models);
		rep->models = f->models;
		f->models = NULL;
	}
	pthread_mutex_unlock(&rep->lock);
	if (changed)
		gateway_log("replica identity changed", NULL, NULL,
			    "\"replica\":\"%s\",\"revision\":\"%s\"", rep->name, revision);
	json_decref(id);
	json_decref(f->identity);
	json_decref(f->models);
}

struct prober {
	struct gateway *gw;
	struct replica *rep;
};

static void *prober_main(void *arg)
{
	struct prober *p = arg;
	struct replica *rep = p->rep;
	enum replica_kind declared = rep->kind;
	enum replica_state last = REPLICA_DOWN;
	const char *last_reason = "";
	bool ever_healthy = false;

	for (;;) {
		struct found f = {0};

		probe(rep, declared != REPLICA_KIND_UNKNOWN ? declared : rep->kind, ever_healthy,
		      &f);
		ever_healthy = ever_healthy || f.state == REPLICA_HEALTHY;
		commit(rep, &f);
		if (f.state != last || strcmp(f.reason, last_reason) != 0)
			gateway_log(
				"replica", NULL, NULL,
				"\"replica\":\"%s\",\"kind\":\"%s\",\"state\":\"%s\",\"reason\":\"%s\"",
				rep->name, KIND_NAMES[f.kind], STATE_NAMES[f.state], f.reason);
		last = f.state;
		last_reason = f.reason;
		pthread_mutex_lock(&first.lock);
		if (!rep->probed) {
			rep->probed = true;
			pthread_cond_broadcast(&first.probed);
		}
		pthread_mutex_unlock(&first.lock);
		sleep_ms(p->gw->probe_interval_ms);
	}
	return NULL;
}

void gateway_replicas_start(struct gateway *gw)
{
	for (size_t k = 0; k < gw->n_replicas; k++) {
		struct replica *rep = &gw->replicas[k];
		struct prober *p = malloc(sizeof(*p));
		pthread_attr_t attr;
		pthread_t thread;
		const char *field;
		json_t *v;

		pthread_mutex_init(&rep->lock, NULL);
		rep->state = REPLICA_DOWN;
		rep->reason = "not_probed";
		/* A declared text may be given as the text or as its digest: compared as digests. */
		json_object_foreach(rep->declared, field, v)
		{
			if (is_text_field(field) && json_is_string(v) &&
			    strncmp(json_string_value(v), "sha256:", 7) != 0)
				json_object_set_new(
					rep->declared, field,
					text_digest(json_string_value(v), json_string_length(v)));
		}
		if (p != NULL)
			*p = (struct prober){gw, rep};
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (p == NULL || pthread_create(&thread, &attr, prober_main, p) != 0)
			config_usage_exit("no memory or thread for a replica's probes");
		pthread_attr_destroy(&attr);
	}
}

/* --- choosing --- */

/* Whether @p rep (locked) serves @p model. */
static bool serves(const struct replica *rep, const char *model)
{
	json_t *id;
	size_t i;

	if (model == NULL || rep->models == NULL)
		return true;
	json_array_foreach(rep->models, i, id)
	{
		if (strcmp(json_string_value(id), model) == 0)
			return true;
	}
	return false;
}

/* Waits until every replica's first probe ended, at most FIRST_PROBE_WAIT_MS. */
static void wait_first_probes(struct gateway *gw)
{
	uint64_t until = gateway_now_ms() + FIRST_PROBE_WAIT_MS;

	pthread_mutex_lock(&first.lock);
	for (size_t k = 0; k < gw->n_replicas; k++) {
		while (!gw->replicas[k].probed && gateway_now_ms() < until) {
			struct timespec ts = ledger_clock_after(CLOCK_REALTIME, 100);

			pthread_cond_timedwait(&first.probed, &first.lock, &ts);
		}
	}
	pthread_mutex_unlock(&first.lock);
}

/* @p rep's identity is of the model revision @p revision (NULL or "": any). */
static bool of_revision(const struct replica *rep, const char *revision)
{
	return revision == NULL || revision[0] == '\0' ||
	       (rep->revision != NULL && strcmp(rep->revision, revision) == 0);
}

struct gateway_replica_pick gateway_replica_pick(struct gateway *gw, const char *model,
						 size_t avoid, const char *revision)
{
	struct gateway_replica_pick p = {.index = GATEWAY_REPLICA_NONE};
	unsigned start = atomic_fetch_add(&gw->next, 1), best_load = 0;
	bool any_up = false, any_serves = false;

	wait_first_probes(gw);
	/* Healthy first; a slow one only when no healthy one serves the model. */
	for (int pass = 0; pass < 2 && p.index == GATEWAY_REPLICA_NONE; pass++) {
		enum replica_state want = pass == 0 ? REPLICA_HEALTHY : REPLICA_SLOW;

		for (size_t i = 0; i < gw->n_replicas; i++) {
			size_t k = (start + i) % gw->n_replicas;
			struct replica *rep = &gw->replicas[k];

			pthread_mutex_lock(&rep->lock);
			if (k != avoid && rep->state == want && rep->identity != NULL) {
				bool model_ok = serves(rep, model);

				any_up = true;
				any_serves = any_serves || model_ok;
				if (model_ok && of_revision(rep, revision) &&
				    (p.index == GATEWAY_REPLICA_NONE ||
				     rep->in_flight < best_load)) {
					p.index = k;
					best_load = rep->in_flight;
				}
			}
			pthread_mutex_unlock(&rep->lock);
		}
	}
	if (p.index == GATEWAY_REPLICA_NONE) {
		p.no_model = any_up && !any_serves;
		return p;
	}
	pthread_mutex_lock(&gw->replicas[p.index].lock);
	gw->replicas[p.index].in_flight++;
	p.identity = strdup(gw->replicas[p.index].identity);
	p.revision = strdup(gw->replicas[p.index].revision);
	pthread_mutex_unlock(&gw->replicas[p.index].lock);
	if (p.identity == NULL || p.revision == NULL) {
		gateway_replica_put(gw, p.index);
		gateway_replica_pick_clear(&p);
	}
	return p;
}

void gateway_replica_pick_clear(struct gateway_replica_pick *p)
{
	free(p->revision);
	free(p->identity);
	*p = (struct gateway_replica_pick){.index = GATEWAY_REPLICA_NONE};
}

void gateway_replica_put(struct gateway *gw, size_t k)
{
	struct replica *rep = &gw->replicas[k];

	pthread_mutex_lock(&rep->lock);
	if (rep->in_flight > 0)
		rep->in_flight--;
	pthread_mutex_unlock(&rep->lock);
}

void gateway_replica_saw(struct gateway *gw, size_t k, enum gateway_replica_seen seen)
{
	struct replica *rep = &gw->replicas[k];

	pthread_mutex_lock(&rep->lock);
	switch (seen) {
	case GATEWAY_SEEN_FAILED:
		if (rep->state != REPLICA_QUARANTINED) {
			rep->state = REPLICA_DOWN;
			rep->reason = "failed";
		}
		break;
	case GATEWAY_SEEN_BUSY:
		if (rep->state == REPLICA_HEALTHY) {
			rep->state = REPLICA_SLOW;
			rep->reason = "busy";
		}
		break;
	case GATEWAY_SEEN_UNAUTHORIZED:
		rep->state = REPLICA_QUARANTINED;
		rep->reason = "unauthorized";
		rep->field[0] = '\0';
		break;
	}
	pthread_mutex_unlock(&rep->lock);
}

const char *gateway_replica_kind_name(struct gateway *gw, size_t k)
{
	struct replica *rep = &gw->replicas[k];
	const char *name;

	pthread_mutex_lock(&rep->lock);
	name = KIND_NAMES[rep->kind];
	pthread_mutex_unlock(&rep->lock);
	return name;
}

bool gateway_replica_runs_tools(struct gateway *gw, size_t k)
{
	struct replica *rep = &gw->replicas[k];
	bool tools;

	pthread_mutex_lock(&rep->lock);
	tools = rep->runs_tools || rep->kind == REPLICA_KIND_LEDGER;
	pthread_mutex_unlock(&rep->lock);
	return tools;
}

bool gateway_replica_is_down(struct gateway *gw, size_t k)
{
	struct replica *rep = &gw->replicas[k];
	bool down;

	pthread_mutex_lock(&rep->lock);
	down = rep->state == REPLICA_DOWN || rep->state == REPLICA_QUARANTINED;
	pthread_mutex_unlock(&rep->lock);
	return down;
}

/* --- what the operator and the clients read --- */

json_t *gateway_replicas_readiness(struct gateway *gw, bool *ready)
{
	json_t *list = json_array();

	*ready = false;
	for (size_t k = 0; k < gw->n_replicas; k++) {
		struct replica *rep = &gw->replicas[k];
		json_t *item;

		pthread_mutex_lock(&rep->lock);
		item = json_pack("{s:s,s:s,s:s,s:s,s:i}", "name", rep->name, "kind",
				 KIND_NAMES[rep->kind], "state", STATE_NAMES[rep->state], "reason",
				 rep->reason != NULL ? rep->reason : "", "in_flight",
				 (json_int_t)rep->in_flight);
		if (item != NULL && rep->field[0] != '\0')
			json_object_set_new(item, "field", json_string(rep->field));
		if (rep->state == REPLICA_HEALTHY && rep->identity != NULL)
			*ready = true;
		pthread_mutex_unlock(&rep->lock);
		json_array_append_new(list, item);
	}
	return list;
}

json_t *gateway_replicas_models(struct gateway *gw)
{
	json_t *data = json_array(), *seen = json_object();

	for (size_t k = 0; k < gw->n_replicas; k++) {
		struct replica *rep = &gw->replicas[k];
		json_t *id;
		size_t i;

		pthread_mutex_lock(&rep->lock);
		if (rep->state == REPLICA_HEALTHY && rep->identity != NULL) {
			json_t *one = NULL, *ids = rep->models;

			/* An engine that takes any name lists the model its identity names. */
			if (ids == NULL) {
				json_t *identity = json_loads(rep->identity, 0, NULL);

				one = json_pack("[O]", json_object_get(identity, "model"));
				json_decref(identity);
				ids = one;
			}
			json_array_foreach(ids, i, id)
			{
				const char *name = json_string_value(id);

				if (name == NULL || json_object_get(seen, name) != NULL ||
				    strcmp(name, "unknown") == 0)
					continue;
				json_object_set_new(seen, name, json_true());
				json_array_append_new(data,
						      json_pack("{s:s,s:s,s:i,s:s}", "id", name,
								"object", "model", "created", 0,
								"owned_by", KIND_NAMES[rep->kind]));
			}
			json_decref(one);
		}
		pthread_mutex_unlock(&rep->lock);
	}
	json_decref(seen);
	return json_pack("{s:s,s:o}", "object", "list", "data", data);
}

void gateway_replicas_count(struct gateway *gw, size_t counts[4])
{
	memset(counts, 0, 4 * sizeof(counts[0]));
	for (size_t k = 0; k < gw->n_replicas; k++) {
		pthread_mutex_lock(&gw->replicas[k].lock);
		counts[gw->replicas[k].state]++;
		pthread_mutex_unlock(&gw->replicas[k].lock);
	}
}
