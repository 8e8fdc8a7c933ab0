/*
 * sdk/programs/ledger-gateway/config.c: the gateway's settings, from its flags and its
 * environment, checked before anything starts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdk/programs/ledger-gateway/config.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ledger-gateway --listen HOST:PORT --ledger-url URL --ledger-token TOKEN\n"
		"               [--ledger-ca-file FILE] --replica NAME=URL [--replica NAME=URL ...]\n"
		"               [--lease-ms N] [--soft-timeout-ms N] [--stall-timeout-ms N]"
		" [--max-attempts N]\n"
		"               [--tls-cert FILE --tls-key FILE]\n"
		"--listen: HOST:PORT, [V6]:PORT or unix:/path (default 127.0.0.1:8000)\n"
		"--ledger-ca-file: the PEM file of the CAs that may sign the ledger's certificate,\n"
		"               for an https URL (else the system's trust store); always verified\n"
		"--tls-cert, --tls-key: serve HTTPS with this PEM certificate chain and key\n"
		"               (SIGHUP reloads both)\n"
		"environment: GATEWAY_LISTEN, LEDGER_URL, LEDGER_TOKEN, LEDGER_CA_FILE,"
		" GATEWAY_REPLICAS (NAME=URL,NAME=URL),\n"
		"             GATEWAY_TLS_CERT, GATEWAY_TLS_KEY\n");
}

noreturn void config_usage_exit(const char *why)
{
	fprintf(stderr, "ledger-gateway: %s\n", why);
	usage(stderr);
	exit(2);
}

static void add_replica(struct gateway *gw, const char *spec)
{
	const char *eq = strchr(spec, '=');
	struct replica *r = &gw->replicas[gw->n_replicas];

	if (eq == NULL || eq == spec || strncmp(eq + 1, "http", 4) != 0)
		config_usage_exit("a replica is NAME=http://HOST:PORT");
	if (gw->n_replicas == MAX_REPLICAS)
		config_usage_exit("too many replicas");
	r->name = strndup(spec, (size_t)(eq - spec));
	r->url = strdup(eq + 1);
	if (r->name == NULL || r->url == NULL)
		config_usage_exit("out of memory");
	gw->n_replicas++;
}

static uint32_t parse_ms(const char *s, const char *what)
{
	char *end = NULL;
	unsigned long v = strtoul(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v == 0 || v > 3600000ul)
		config_usage_exit(what);
	return (uint32_t)v;
}

void config_parse(struct gateway *gw, int argc, char **argv)
{
	const char *env = getenv("GATEWAY_REPLICAS");
	const char *ca_source = "LEDGER_CA_FILE"; /* where the CA file's name came from */

	gw->listen = getenv("GATEWAY_LISTEN");
	gw->ledger_url = getenv("LEDGER_URL");
	gw->ledger_token = getenv("LEDGER_TOKEN");
	gw->ledger_ca_file = getenv("LEDGER_CA_FILE");
	gw->tls_cert = getenv("GATEWAY_TLS_CERT");
	gw->tls_key = getenv("GATEWAY_TLS_KEY");
	if (gw->ledger_ca_file != NULL && gw->ledger_ca_file[0] == '\0')
		gw->ledger_ca_file = NULL;
	for (int i = 1; i < argc; i++) {
		const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
			usage(stdout);
			exit(0);
		}
		if (value == NULL)
			config_usage_exit("a flag without its value");
		i++;
		if (strcmp(flag, "--listen") == 0)
			gw->listen = value;
		else if (strcmp(flag, "--ledger-url") == 0)
			gw->ledger_url = value;
		else if (strcmp(flag, "--ledger-token") == 0)
			gw->ledger_token = value;
		else if (strcmp(flag, "--ledger-ca-file") == 0) {
			gw->ledger_ca_file = value;
			ca_source = flag;
		} else if (strcmp(flag, "--replica") == 0)
			add_replica(gw, value);
		else if (strcmp(flag, "--lease-ms") == 0)
			gw->lease_ms = parse_ms(value, "--lease-ms is 1..3600000");
		else if (strcmp(flag, "--soft-timeout-ms") == 0)
			gw->soft_ms = parse_ms(value, "--soft-timeout-ms is 1..3600000");
		else if (strcmp(flag, "--stall-timeout-ms") == 0)
			gw->stall_ms = parse_ms(value, "--stall-timeout-ms is 1..3600000");
		else if (strcmp(flag, "--tls-cert") == 0)
			gw->tls_cert = value;
		else if (strcmp(flag, "--tls-key") == 0)
			gw->tls_key = value;
		else if (strcmp(flag, "--max-attempts") == 0)
			gw->max_attempts = parse_ms(value, "--max-attempts is a positive number");
		else
			config_usage_exit("unknown flag");
	}
	if (gw->n_replicas == 0 && env != NULL) {
		char *list = strdup(env), *save = NULL;

		for (char *t = strtok_r(list, ",", &save); t != NULL;
		     t = strtok_r(NULL, ",", &save))
			add_replica(gw, t);
		free(list);
	}
	if (gw->listen == NULL)
		gw->listen = "127.0.0.1:8000";
	if (gw->ledger_url == NULL || gw->ledger_token == NULL)
		config_usage_exit("the ledger's URL and a router token are required");
	if (gw->n_replicas == 0)
		config_usage_exit("at least one replica is required");
	if (gw->tls_cert != NULL && gw->tls_cert[0] == '\0')
		gw->tls_cert = NULL;
	if (gw->tls_key != NULL && gw->tls_key[0] == '\0')
		gw->tls_key = NULL;
	if ((gw->tls_cert == NULL) != (gw->tls_key == NULL))
		config_usage_exit("--tls-cert and --tls-key go together");
	if (gw->soft_ms >= gw->stall_ms)
		config_usage_exit("the soft timeout must be shorter than the stall timeout");
	if (gw->ledger_ca_file != NULL) {
		struct ledger_client_error err = {0};
		char why[sizeof(err.message) + 32];

		if (ledger_client_ca_file_check(gw->ledger_ca_file, &err) != LEDGER_CLIENT_OK) {
			snprintf(why, sizeof(why), "%s: %s", ca_source, err.message);
			config_usage_exit(why);
		}
	}
}
