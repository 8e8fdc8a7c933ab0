/*
 * sdk/programs/ledger-gateway/config.c: the settings table behind
 * config.h. Defaults first, then the environment, then the flags; every
 * value is parsed and range-checked in one place, and the first error
 * stops start-up with one line and the usage (exit status 2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <yaml.h>

#include "sdk/programs/ledger-gateway/config.h"

enum kind {
	K_STRING,  /* kept as given */
	K_MS,      /* a whole number of milliseconds within [min, max] */
	K_BYTES,   /* a number of bytes, optionally with KiB or MiB, within [min, max] */
	K_SWITCH,  /* a bare flag; the variable says 1, true or on */
	K_REPLICA, /* NAME=URL, repeatable; the variable a comma-separated list */
};

struct setting {
	const char *flag; /* NULL: a variable only (a secret never goes on a command line) */
	const char *env;
	enum kind kind;
	const char *def; /* NULL: unset unless given */
	uint64_t min, max;
	const char *help;
	const char *arg; /* what the flag's value is called in the usage; NULL: from the kind */
};

enum {
	S_LISTEN,
	S_LEDGER_URL,
	S_LEDGER_TOKEN,
	S_CA_FILE,
	S_REPLICA,
	S_CONFIG,
	S_PROBE_INTERVAL,
	S_TLS_CERT,
	S_TLS_KEY,
	S_OPS_LISTEN,
	S_LEASE,
	S_MAX_ATTEMPTS,
	S_SOFT,
	S_STALL,
	S_KEY_HEADER,
	S_REQUIRE_KEY,
	S_SCOPE_HEADER,
	S_KEY_SECRET,
	S_FIRST_BYTE_HOLD,
	S_RESUME_HOLD,
	S_MAX_KEPT,
	S_COUNT,
};

#define HOUR_MS 3600000u

static const struct setting settings[S_COUNT] = {
	[S_LISTEN] = {"--listen", "GATEWAY_LISTEN", K_STRING, "127.0.0.1:8000", 0, 0,
		      "HOST:PORT, [V6]:PORT or unix:/path to serve on", "ADDRESS"},
	[S_LEDGER_URL] = {"--ledger-url", "LEDGER_URL", K_STRING, NULL, 0, 0,
			  "ledgerd's address, http(s)://HOST:PORT (required)", "URL"},
	[S_LEDGER_TOKEN] = {"--ledger-token", "LEDGER_TOKEN", K_STRING, NULL, 0, 0,
			    "a router token (required); give it in the variable, not the flag",
			    "TOKEN"},
	[S_CA_FILE] = {"--ledger-ca-file", "LEDGER_CA_FILE", K_STRING, NULL, 0, 0,
		       "the PEM file of the CAs that may sign ledgerd's certificate, for an https "
		       "URL (else the system's trust store); always verified",
		       "FILE"},
	[S_REPLICA] = {"--replica", "GATEWAY_REPLICAS", K_REPLICA, NULL, 0, 0,
		       "NAME=URL of a replica, repeatable (the variable: NAME=URL,NAME=URL)"},
	[S_CONFIG] = {"--config", "GATEWAY_CONFIG", K_STRING, NULL, 0, 0,
		      "a YAML file of replicas: name, url, kind, api_key_env, runs_tools, identity",
		      "FILE"},
	[S_PROBE_INTERVAL] = {"--probe-interval-ms", "GATEWAY_PROBE_INTERVAL_MS", K_MS, "2000", 50,
			      HOUR_MS, "how often each replica's health and identity are read"},
	[S_TLS_CERT] = {"--tls-cert", "GATEWAY_TLS_CERT", K_STRING, NULL, 0, 0,
			"serve HTTPS with this PEM certificate chain (with --tls-key; SIGHUP "
			"reloads both)",
			"FILE"},
	[S_TLS_KEY] = {"--tls-key", "GATEWAY_TLS_KEY", K_STRING, NULL, 0, 0,
		       "the private key of --tls-cert", "FILE"},
	[S_OPS_LISTEN] = {"--ops-listen", "GATEWAY_OPS_LISTEN", K_STRING, NULL, 0, 0,
			  "an address of its own for /healthz, /readyz and /metrics (plain HTTP); "
			  "then --listen has no /metrics",
			  "ADDRESS"},
	[S_LEASE] = {"--lease-ms", "GATEWAY_LEASE_MS", K_MS, "10000", 100, HOUR_MS,
		     "an attempt's lease, renewed while its replica streams"},
	[S_MAX_ATTEMPTS] = {"--max-attempts", "GATEWAY_MAX_ATTEMPTS", K_MS, "0", 0, 1000,
			    "attempts a request may have (0: the policy's)", "N"},
	[S_SOFT] = {"--soft-timeout-ms", "GATEWAY_SOFT_TIMEOUT_MS", K_MS, "2000", 1, HOUR_MS,
		    "a replica silent this long is slow (overloaded)"},
	[S_STALL] = {"--stall-timeout-ms", "GATEWAY_STALL_TIMEOUT_MS", K_MS, "10000", 1, HOUR_MS,
		     "a replica silent this long may be dead (heartbeat_timeout)"},
	[S_KEY_HEADER] = {"--idempotency-header", "GATEWAY_IDEMPOTENCY_HEADER", K_STRING,
			  "Idempotency-Key", 0, 0,
			  "the header that names a client's logical request", "NAME"},
	[S_REQUIRE_KEY] = {"--require-idempotency-key", "GATEWAY_REQUIRE_IDEMPOTENCY_KEY", K_SWITCH,
			   NULL, 0, 0,
			   "refuse a request without a key (400 idempotency_key_required)"},
	[S_SCOPE_HEADER] = {"--client-scope-header", "GATEWAY_CLIENT_SCOPE_HEADER", K_STRING,
			    "Authorization", 0, 0,
			    "the header whose raw value scopes a key (\"\": one scope for all)",
			    "NAME"},
	[S_KEY_SECRET] = {NULL, "GATEWAY_KEY_SECRET", K_STRING, NULL, 0, 0,
			  "the secret the pool shares, from which a key's request id is derived "
			  "(16 bytes or more); required once a key is used"},
	[S_FIRST_BYTE_HOLD] = {"--first-byte-hold-ms", "GATEWAY_FIRST_BYTE_HOLD_MS", K_MS, "10000",
			       0, HOUR_MS,
			       "a keyed request whose client left before the first byte goes on "
			       "this long for a repeat to attach"},
	[S_RESUME_HOLD] = {"--resume-hold-ms", "GATEWAY_RESUME_HOLD_MS", K_MS, "0", 0, HOUR_MS,
			   "and this long after the first byte"},
	[S_MAX_KEPT] =
		{"--max-kept-answer-bytes", "GATEWAY_MAX_KEPT_ANSWER_BYTES", K_BYTES, "1MiB", 0,
		 64u << 20,
		 "answers kept in ledgerd up to this many bytes; beyond, their size and hash"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ledger-gateway --ledger-url URL --replica NAME=URL [--replica ...] "
		   "[options]\n"
		   "  (the router token in LEDGER_TOKEN)\n\noptions (each also a variable):\n");
	for (size_t i = 0; i < S_COUNT; i++) {
		const struct setting *s = &settings[i];

		fprintf(f, "  %s%s%s\n      %s ($%s%s%s)\n",
			s->flag != NULL ? s->flag : "(no flag)",
			s->flag != NULL && s->kind != K_SWITCH ? " " : "",
			s->flag == NULL || s->kind == K_SWITCH ? ""
			: s->arg != NULL                       ? s->arg
			: s->kind == K_REPLICA                 ? "NAME=URL"
			: s->kind == K_MS                      ? "MS"
			: s->kind == K_BYTES                   ? "BYTES"
							       : "VALUE",
			s->help, s->env, s->def != NULL ? ", default " : "",
			s->def != NULL ? s->def : "");
	}
	fprintf(f, "  --version\n      the version, then exit\n");
}

noreturn void config_usage_exit(const char *why)
{
	fprintf(stderr, "ledger-gateway: %s\n", why);
	usage(stderr);
	exit(2);
}

/* Exits on the setting @p what, which is @p problem. */
static noreturn void bad(const char *what, const char *problem)
{
	char why[512];

	snprintf(why, sizeof(why), "%s %s", what, problem);
	config_usage_exit(why);
}

static void add_replica(struct gateway *gw, const char *spec, size_t len)
{
	const char *eq = memchr(spec, '=', len);
	struct replica *r = &gw->replicas[gw->n_replicas];

	if (eq == NULL || eq == spec || len - (size_t)(eq - spec) < 5 ||
	    strncmp(eq + 1, "http", 4) != 0)
		config_usage_exit("a replica is NAME=http://HOST:PORT");
	if (gw->n_replicas == MAX_REPLICAS)
		config_usage_exit("too many replicas");
	r->name = strndup(spec, (size_t)(eq - spec));
	r->url = strndup(eq + 1, len - (size_t)(eq - spec) - 1);
	if (r->name == NULL || r->url == NULL)
		config_usage_exit("out of memory");
	for (size_t k = 0; k < gw->n_replicas; k++) {
		if (strcmp(gw->replicas[k].name, r->name) == 0)
			bad(r->name, "names two replicas");
	}
	gw->n_replicas++;
}

/* --- --config: the replicas in YAML --- */

/* A scalar node's text, or NULL. */
static const char *scalar(yaml_node_t *n)
{
	return n != NULL && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* A YAML node as JSON: scalars as strings, except plain true/false/null and integers. */
static json_t *node_json(yaml_document_t *doc, yaml_node_t *n)
{
	json_t *out = NULL;

	if (n == NULL)
		return json_null();
	if (n->type == YAML_SCALAR_NODE) {
		const char *v = scalar(n);
		char *end = NULL;
		long long i = strtoll(v, &end, 10);
		bool plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;

		if (plain && (strcmp(v, "null") == 0 || strcmp(v, "~") == 0 || v[0] == '\0'))
			return json_null();
		if (plain && strcmp(v, "true") == 0)
			return json_true();
		if (plain && strcmp(v, "false") == 0)
			return json_false();
		if (plain && v[0] != '\0' && *end == '\0')
			return json_integer(i);
		return json_string(v);
	}
	if (n->type == YAML_SEQUENCE_NODE) {
		out = json_array();
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     it < n->data.sequence.items.top; it++)
			json_array_append_new(out,
					      node_json(doc, yaml_document_get_node(doc, *it)));
		return out;
	}
	out = json_object();
	for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top;
	     pr++) {
		const char *key = scalar(yaml_document_get_node(doc, pr->key));

		if (key != NULL)
			json_object_set_new(out, key,
					    node_json(doc, yaml_document_get_node(doc, pr->value)));
	}
	return out;
}

static const char *const IDENTITY_FIELDS[] = {
	"model",         "weights_revision", "quantization",    "tokenizer",
	"chat_template", "kv_cache_dtype",   "parallel_layout", "adapters"};

static enum replica_kind kind_named(const char *name)
{
	static const char *const names[] = {[REPLICA_KIND_LEDGER] = "ledger",
					    [REPLICA_KIND_LLAMA_CPP] = "llama.cpp",
					    [REPLICA_KIND_VLLM] = "vllm",
					    [REPLICA_KIND_SGLANG] = "sglang"};

	for (size_t k = REPLICA_KIND_LEDGER; k <= REPLICA_KIND_SGLANG; k++) {
		if (strcmp(name, names[k]) == 0)
			return (enum replica_kind)k;
	}
	return REPLICA_KIND_UNKNOWN;
}

/* One entry of replicas: in the file @p path. */
static void config_replica(struct gateway *gw, const char *path, json_t *entry)
{
	const char *name = json_string_value(json_object_get(entry, "name"));
	const char *url = json_string_value(json_object_get(entry, "url"));
	json_t *kind = json_object_get(entry, "kind"), *env = json_object_get(entry, "api_key_env");
	json_t *tools = json_object_get(entry, "runs_tools"),
	       *id = json_object_get(entry, "identity");
	const char *key;
	json_t *v;
	char *spec = NULL;
	struct replica *r;

	if (!json_is_object(entry) || name == NULL || url == NULL)
		bad(path, "has a replica without its name and url");
	json_object_foreach(entry, key, v)
	{
		if (strcmp(key, "name") != 0 && strcmp(key, "url") != 0 &&
		    strcmp(key, "kind") != 0 && strcmp(key, "api_key_env") != 0 &&
		    strcmp(key, "runs_tools") != 0 && strcmp(key, "identity") != 0)
			bad(path, "has an unknown key in a replica");
	}
	if (asprintf(&spec, "%s=%s", name, url) < 0)
		config_usage_exit("out of memory");
	add_replica(gw, spec, strlen(spec));
	free(spec);
	r = &gw->replicas[gw->n_replicas - 1];
	if (kind != NULL &&
	    (!json_is_string(kind) ||
	     (r->kind = kind_named(json_string_value(kind))) == REPLICA_KIND_UNKNOWN))
		bad(path, "has a kind other than llama.cpp, vllm, sglang or ledger");
	if (env != NULL) {
		if (!json_is_string(env))
			bad(path, "has an api_key_env that is no variable's name");
		r->api_key = getenv(json_string_value(env));
		if (r->api_key == NULL || r->api_key[0] == '\0')
			bad(json_string_value(env), "(an api_key_env) is not set");
	}
	if (tools != NULL && !json_is_boolean(tools))
		bad(path, "has a runs_tools that is not true or false");
	r->runs_tools = json_is_true(tools) || r->kind == REPLICA_KIND_LEDGER;
	if (id != NULL) {
		if (!json_is_object(id))
			bad(path, "has an identity that is not a mapping");
		json_object_foreach(id, key, v)
		{
			size_t i = 0;

			while (i < sizeof(IDENTITY_FIELDS) / sizeof(IDENTITY_FIELDS[0]) &&
			       strcmp(key, IDENTITY_FIELDS[i]) != 0)
				i++;
			if (i == sizeof(IDENTITY_FIELDS) / sizeof(IDENTITY_FIELDS[0]))
				bad(path, "declares an identity field GATEWAY.md does not name");
		}
		r->declared = json_incref(id);
	}
}

static void load_config(struct gateway *gw, const char *path)
{
	FILE *f = fopen(path, "rb");
	yaml_parser_t parser;
	yaml_document_t doc;
	json_t *root, *list;
	size_t i;

	if (f == NULL)
		bad(path, "cannot be read");
	if (!yaml_parser_initialize(&parser))
		config_usage_exit("out of memory");
	yaml_parser_set_input_file(&parser, f);
	if (!yaml_parser_load(&parser, &doc))
		bad(path, "is not YAML");
	root = node_json(&doc, yaml_document_get_root_node(&doc));
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	fclose(f);
	list = json_object_get(root, "replicas");
	if (!json_is_object(root) || json_object_size(root) != 1 || !json_is_array(list))
		bad(path, "must hold one key, replicas, a list");
	for (i = 0; i < json_array_size(list); i++)
		config_replica(gw, path, json_array_get(list, i));
	json_decref(root);
}

/* A number with an optional unit (KiB, MiB for bytes), within the setting's bounds. */
static uint64_t number(const struct setting *s, const char *v)
{
	char *end = NULL;
	unsigned long long n = strtoull(v, &end, 10);

	if (*v < '0' || *v > '9')
		end = NULL;
	else if (s->kind == K_BYTES && strcmp(end, "KiB") == 0)
		n <<= 10, end += 3;
	else if (s->kind == K_BYTES && strcmp(end, "MiB") == 0)
		n <<= 20, end += 3;
	if (end == NULL || *end != '\0' || n < s->min || n > s->max) {
		char range[80];

		snprintf(range, sizeof(range), "is a number in %llu..%llu",
			 (unsigned long long)s->min, (unsigned long long)s->max);
		bad(s->flag != NULL ? s->flag : s->env, range);
	}
	return n;
}

static bool truthy(const char *v)
{
	return strcmp(v, "1") == 0 || strcmp(v, "true") == 0 || strcmp(v, "on") == 0;
}

/* Reads argv over the environment over the defaults into @p value (set: @p on). */
static void read_values(int argc, char **argv, const char *value[S_COUNT], bool on[S_COUNT],
			struct gateway *gw)
{
	bool replica_flag = false;

	for (size_t k = 0; k < S_COUNT; k++) {
		const char *env = getenv(settings[k].env);

		value[k] = env != NULL ? env : settings[k].def;
		on[k] = env != NULL && truthy(env);
	}
	for (int i = 1; i < argc; i++) {
		size_t k = 0;

		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			exit(0);
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("ledger-gateway %s\n", LEDGER_VERSION);
			exit(0);
		}
		while (k < S_COUNT &&
		       (settings[k].flag == NULL || strcmp(argv[i], settings[k].flag) != 0))
			k++;
		if (k == S_COUNT)
			config_usage_exit("unknown flag");
		if (settings[k].kind == K_SWITCH) {
			on[k] = true;
			continue;
		}
		if (i + 1 == argc)
			config_usage_exit("a flag without its value");
		value[k] = argv[++i];
		if (k == S_REPLICA) {
			replica_flag = true;
			add_replica(gw, value[k], strlen(value[k]));
		}
	}
	/* Flags name the replicas; without any, the variable does. */
	for (const char *v = value[S_REPLICA]; !replica_flag && v != NULL && *v != '\0';) {
		size_t n = strcspn(v, ",");

		add_replica(gw, v, n);
		v += n + (v[n] == ',');
	}
}

/* A string setting, or NULL when given empty. */
static const char *text(const char *v)
{
	return v != NULL && v[0] != '\0' ? v : NULL;
}

void config_parse(struct gateway *gw, int argc, char **argv)
{
	const char *value[S_COUNT];
	bool on[S_COUNT];
	unsigned char raw[8];

	read_values(argc, argv, value, on, gw);
	if (text(value[S_CONFIG]) != NULL)
		load_config(gw, value[S_CONFIG]);
	for (size_t k = 0; k < gw->n_replicas; k++) {
		if (gw->replicas[k].kind == REPLICA_KIND_LEDGER)
			gw->replicas[k].runs_tools = true;
	}
	gw->probe_interval_ms =
		(uint32_t)number(&settings[S_PROBE_INTERVAL], value[S_PROBE_INTERVAL]);
	gw->listen = value[S_LISTEN];
	gw->ledger_url = text(value[S_LEDGER_URL]);
	gw->ledger_token = text(value[S_LEDGER_TOKEN]);
	gw->ledger_ca_file = text(value[S_CA_FILE]);
	gw->tls_cert = text(value[S_TLS_CERT]);
	gw->tls_key = text(value[S_TLS_KEY]);
	gw->ops_listen = text(value[S_OPS_LISTEN]);
	gw->lease_ms = (uint32_t)number(&settings[S_LEASE], value[S_LEASE]);
	gw->max_attempts = (uint32_t)number(&settings[S_MAX_ATTEMPTS], value[S_MAX_ATTEMPTS]);
	gw->soft_ms = (uint32_t)number(&settings[S_SOFT], value[S_SOFT]);
	gw->stall_ms = (uint32_t)number(&settings[S_STALL], value[S_STALL]);
	gw->key_header = text(value[S_KEY_HEADER]);
	gw->require_key = on[S_REQUIRE_KEY];
	gw->scope_header = text(value[S_SCOPE_HEADER]);
	gw->key_secret = text(value[S_KEY_SECRET]);
	gw->first_byte_hold_ms =
		(uint32_t)number(&settings[S_FIRST_BYTE_HOLD], value[S_FIRST_BYTE_HOLD]);
	gw->resume_hold_ms = (uint32_t)number(&settings[S_RESUME_HOLD], value[S_RESUME_HOLD]);
	gw->max_kept_answer_bytes = (size_t)number(&settings[S_MAX_KEPT], value[S_MAX_KEPT]);
	if (gw->ledger_url == NULL || gw->ledger_token == NULL)
		config_usage_exit("the ledger's URL and a router token are required");
	if (gw->n_replicas == 0)
		config_usage_exit("at least one replica is required");
	if ((gw->tls_cert == NULL) != (gw->tls_key == NULL))
		config_usage_exit("--tls-cert and --tls-key go together");
	if (gw->soft_ms >= gw->stall_ms)
		config_usage_exit("the soft timeout must be shorter than the stall timeout");
	if (gw->key_header == NULL)
		config_usage_exit("--idempotency-header names a header");
	if (gw->key_secret != NULL && strlen(gw->key_secret) < 16)
		config_usage_exit("GATEWAY_KEY_SECRET must hold 16 bytes or more");
	if (gw->require_key && gw->key_secret == NULL)
		config_usage_exit("--require-idempotency-key needs GATEWAY_KEY_SECRET");
	if (gw->ledger_ca_file != NULL) {
		struct ledger_client_error err = {0};

		if (ledger_client_ca_file_check(gw->ledger_ca_file, &err) != LEDGER_CLIENT_OK)
			bad(getenv("LEDGER_CA_FILE") != NULL && strcmp(getenv("LEDGER_CA_FILE"),
								       gw->ledger_ca_file) == 0
				    ? "LEDGER_CA_FILE:"
				    : "--ledger-ca-file:",
			    err.message);
	}
	/* This process, as the attempts it runs name it: a repeat tells its own from others'. */
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		config_usage_exit("no randomness for the gateway's id");
	snprintf(gw->id, sizeof(gw->id), "gw-");
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(gw->id + 3 + 2 * i, 3, "%02x", raw[i]);
}
