/*
 * ledger/common/trace_config.c: the OTEL_* variables read into the tracer's
 * settings, and the sampler. The OpenTelemetry specification asks that a
 * value that cannot be used is reported and its default taken, never that
 * the process fails: tracing is an aid, not a dependency.
 */
#include "ledger/common/trace_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ledger/common/log.h"

#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_QUEUE 2048
#define DEFAULT_BATCH 512
#define DEFAULT_DELAY_MS 5000
#define MAX_RESOURCE_ATTRS 128

/* A variable's value, NULL when unset or empty (the specification treats
 * an empty value as unset). */
static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* The signal's own variable when set, else the general one; *which names it. */
static const char *env2(const char *traces, const char *general, const char **which)
{
	const char *v = env(traces);

	*which = traces;
	if (!v) {
		v = env(general);
		*which = general;
	}
	return v;
}

/* A whole non-negative decimal integer no greater than @p max. */
static bool parse_long(const char *s, long max, long *out)
{
	char *end = NULL;
	long v;

	while (isspace((unsigned char)*s))
		s++;
	if (!isdigit((unsigned char)*s))
		return false;
	errno = 0;
	v = strtol(s, &end, 10);
	while (end && isspace((unsigned char)*end))
		end++;
	if (errno || !end || *end || v > max)
		return false;
	*out = v;
	return true;
}

static long read_long(const char *name, long min, long max, long def)
{
	const char *v = env(name);
	long n;

	if (!v)
		return def;
	if (!parse_long(v, max, &n) || n < min) {
		LOG_WARN("%s=%s is not a whole number from %ld to %ld; %ld is used", name, v, min,
			 max, def);
		return def;
	}
	return n;
}

long ledger_trace_config_percent_decode(char *s, size_t len)
{
	size_t i, o = 0;

	for (i = 0; i < len; i++) {
		if (s[i] == '%') {
			char hex[3];
			char *end = NULL;

			if (i + 2 >= len || !isxdigit((unsigned char)s[i + 1]) ||
			    !isxdigit((unsigned char)s[i + 2]))
				return -1;
			hex[0] = s[i + 1];
			hex[1] = s[i + 2];
			hex[2] = '\0';
			s[o++] = (char)strtol(hex, &end, 16);
			i += 2;
		} else {
			s[o++] = s[i];
		}
	}
	if (o < len)
		s[o] = '\0';
	return (long)o;
}

/* Trims ASCII white space of [*s, *s + *len). */
static void trim(const char **s, size_t *len)
{
	while (*len && isspace((unsigned char)**s)) {
		(*s)++;
		(*len)--;
	}
	while (*len && isspace((unsigned char)(*s)[*len - 1]))
		(*len)--;
}

/*
 * Splits "k1=v1,k2=v2" into its pairs, each key and value trimmed and
 * percent-decoded, and calls @p fn with them (NUL-terminated, borrowed).
 * @return false when a member is malformed (no '=', an empty key, a bad
 *         escape, a NUL): @p fn is then not called for it
 */
static bool each_pair(const char *list,
		      bool (*fn)(void *arg, const char *key, size_t klen, const char *val,
				 size_t vlen),
		      void *arg, bool stop_on_error)
{
	const char *p = list;
	bool ok = true;

	while (*p) {
		const char *end = strchr(p, ',');
		const char *eq, *k, *v;
		size_t mlen = end ? (size_t)(end - p) : strlen(p), klen, vlen;
		char *kd = NULL, *vd = NULL;
		long kn, vn;

		eq = memchr(p, '=', mlen);
		k = p;
		klen = eq ? (size_t)(eq - p) : mlen;
		trim(&k, &klen);
		if (!eq || !klen) {
			if (klen || eq) /* an empty member (",,") is no error */
				ok = false;
			goto next;
		}
		v = eq + 1;
		vlen = mlen - (size_t)(v - p);
		trim(&v, &vlen);
		kd = strndup(k, klen);
		vd = strndup(v, vlen);
		if (!kd || !vd) {
			ok = false;
			goto next;
		}
		kn = ledger_trace_config_percent_decode(kd, klen);
		vn = ledger_trace_config_percent_decode(vd, vlen);
		if (kn <= 0 || vn < 0 || strlen(kd) != (size_t)kn || strlen(vd) != (size_t)vn) {
			ok = false;
			goto next;
		}
		if (!fn(arg, kd, (size_t)kn, vd, (size_t)vn))
			ok = false;
	next:
		free(kd);
		free(vd);
		if (!ok && stop_on_error)
			return false;
		if (!end)
			break;
		p = end + 1;
	}
	return ok;
}

/* A file the exporter's TLS reads (a CA, a client certificate or key):
 * the signal's own variable, else the general one; one that cannot be read
 * is warned of and not used. */
static char *read_file_name(const char *traces, const char *general)
{
	const char *which;
	const char *v = env2(traces, general, &which);

	if (!v)
		return NULL;
	if (access(v, R_OK) != 0) {
		LOG_WARN("%s=%s cannot be read; it is not used", which, v);
		return NULL;
	}
	return strdup(v);
}

/* ---------------------------------------------------------------------- */
/* Headers                                                                */
/* ---------------------------------------------------------------------- */

static bool header_token(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
			return false;
	return len > 0;
}

static bool add_header(void *arg, const char *key, size_t klen, const char *val, size_t vlen)
{
	struct ledger_trace_config *c = arg;
	size_t i;
	char *line;

	if (!header_token(key, klen))
		return false;
	for (i = 0; i < vlen; i++)
		if ((unsigned char)val[i] < 0x20 && val[i] != '\t')
			return false; /* no header of ours splits into two */
	if (asprintf(&line, "%s: %s", key, val) < 0)
		return false;
	/* A name given again (the traces variable after the general one) replaces it. */
	for (i = 0; i < c->n_headers; i++) {
		if (strncasecmp(c->headers[i], key, klen) == 0 && c->headers[i][klen] == ':') {
			free(c->headers[i]);
			c->headers[i] = line;
			return true;
		}
	}
	if (c->n_headers == LEDGER_TRACE_MAX_HEADERS) {
		free(line);
		return false;
	}
	c->headers[c->n_headers++] = line;
	return true;
}

static void read_headers(struct ledger_trace_config *c, const char *name)
{
	const char *v = env(name);

	if (v && !each_pair(v, add_header, c, false))
		LOG_WARN(
			"%s: a member is not name=value (percent-encoded) or too many; it is skipped",
			name);
}

/* ---------------------------------------------------------------------- */
/* The resource                                                           */
/* ---------------------------------------------------------------------- */

static bool set_resource(void *arg, const char *key, size_t klen, const char *val, size_t vlen)
{
	struct ledger_trace_config *c = arg;
	struct ledger_otlp_attr *a = NULL;
	size_t i;
	char *k, *v;

	(void)klen;
	for (i = 0; i < c->n_resource; i++)
		if (strcmp(c->resource[i].key, key) == 0)
			a = &c->resource[i];
	if (!a && c->n_resource == MAX_RESOURCE_ATTRS)
		return false;
	k = strdup(key);
	v = ledger_otlp_utf8_dup(val, vlen, LEDGER_OTLP_MAX_STR, &vlen);
	if (!k || !v) {
		free(k);
		free(v);
		return false;
	}
	if (a)
		ledger_otlp_attr_clear(a);
	else
		a = &c->resource[c->n_resource++];
	a->key = k;
	a->type = LEDGER_ATTR_STR;
	a->v.s.p = v;
	a->v.s.len = vlen;
	return true;
}

/* A dry run: whether every member of OTEL_RESOURCE_ATTRIBUTES is well formed. */
static bool check_pair(void *arg, const char *key, size_t klen, const char *val, size_t vlen)
{
	(void)arg;
	(void)key;
	(void)klen;
	(void)val;
	(void)vlen;
	return true;
}

static void read_resource(struct ledger_trace_config *c, const char *service_name,
			  const char *service_version)
{
	const char *attrs = env("OTEL_RESOURCE_ATTRIBUTES");
	const char *name = env("OTEL_SERVICE_NAME");

	c->resource = calloc(MAX_RESOURCE_ATTRS, sizeof(*c->resource));
	if (!c->resource)
		return;
	set_resource(c, "service.name", 12, service_name ? service_name : "unknown_service",
		     strlen(service_name ? service_name : "unknown_service"));
	if (service_version)
		set_resource(c, "service.version", 15, service_version, strlen(service_version));
	set_resource(c, "telemetry.sdk.name", 18, "ledgerd", 7);
	set_resource(c, "telemetry.sdk.language", 22, "c", 1);
	set_resource(c, "telemetry.sdk.version", 21, LEDGER_VERSION, strlen(LEDGER_VERSION));
	/* The specification: a malformed value is discarded whole. */
	if (attrs) {
		if (each_pair(attrs, check_pair, NULL, true))
			each_pair(attrs, set_resource, c, false);
		else
			LOG_WARN(
				"OTEL_RESOURCE_ATTRIBUTES is not a list of key=value (percent-encoded); "
				"it is ignored");
	}
	if (name)
		set_resource(c, "service.name", 12, name, strlen(name));
}

/* ---------------------------------------------------------------------- */
/* The whole                                                              */
/* ---------------------------------------------------------------------- */

static bool is_true(const char *name)
{
	const char *v = env(name);

	if (!v || strcasecmp(v, "false") == 0)
		return false;
	if (strcasecmp(v, "true") == 0)
		return true;
	LOG_WARN("%s=%s is neither true nor false; false is used", name, v);
	return false;
}

static void read_sampler(struct ledger_trace_config *c)
{
	static const struct {
		const char *name;
		enum ledger_trace_sampler sampler;
	} names[] = {
		{"always_on", LEDGER_TRACE_SAMPLER_ALWAYS_ON},
		{"always_off", LEDGER_TRACE_SAMPLER_ALWAYS_OFF},
		{"traceidratio", LEDGER_TRACE_SAMPLER_RATIO},
		{"parentbased_always_on", LEDGER_TRACE_SAMPLER_PARENT_ON},
		{"parentbased_always_off", LEDGER_TRACE_SAMPLER_PARENT_OFF},
		{"parentbased_traceidratio", LEDGER_TRACE_SAMPLER_PARENT_RATIO},
	};
	const char *v = env("OTEL_TRACES_SAMPLER");
	const char *arg = env("OTEL_TRACES_SAMPLER_ARG");
	size_t i;

	c->sampler = LEDGER_TRACE_SAMPLER_PARENT_ON;
	c->ratio = 1.0;
	if (v) {
		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strcmp(v, names[i].name) == 0)
				break;
		if (i < sizeof(names) / sizeof(names[0]))
			c->sampler = names[i].sampler;
		else
			LOG_WARN("OTEL_TRACES_SAMPLER=%s is not a sampler of ledgerd's; "
				 "parentbased_always_on is used",
				 v);
	}
	if (arg && (c->sampler == LEDGER_TRACE_SAMPLER_RATIO ||
		    c->sampler == LEDGER_TRACE_SAMPLER_PARENT_RATIO)) {
		char *end = NULL;
		double r;

		errno = 0;
		r = strtod(arg, &end);
		while (end && isspace((unsigned char)*end))
			end++;
		if (errno || end == arg || !end || *end || !(r >= 0.0 && r <= 1.0))
			LOG_WARN(
				"OTEL_TRACES_SAMPLER_ARG=%s is not a ratio from 0 to 1; 1.0 is used",
				arg);
		else
			c->ratio = r;
	}
}

static void read_endpoint(struct ledger_trace_config *c)
{
	const char *traces = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
	const char *base = env("OTEL_EXPORTER_OTLP_ENDPOINT");
	const char *name =
		traces ? "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" : "OTEL_EXPORTER_OTLP_ENDPOINT";
	const char *url = traces ? traces : base;

	if (!url)
		return;
	if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0) {
		LOG_WARN("%s=%s is not an http:// or https:// URL; tracing stays off", name, url);
		return;
	}
	if (traces) {
		c->endpoint = strdup(traces);
	} else {
		size_t len = strlen(base);

		/* The specification: the base URL with "v1/traces" as its last segment. */
		if (asprintf(&c->endpoint, "%.*s/v1/traces",
			     (int)(len && base[len - 1] == '/' ? len - 1 : len), base) < 0)
			c->endpoint = NULL;
	}
}

void ledger_trace_config_read(struct ledger_trace_config *out, const char *service_name,
			      const char *service_version)
{
	const char *which;
	const char *v;

	memset(out, 0, sizeof(*out));
	out->protocol = LEDGER_TRACE_PROTO_PROTOBUF;
	out->timeout_ms = DEFAULT_TIMEOUT_MS;
	out->queue_size = DEFAULT_QUEUE;
	out->batch_size = DEFAULT_BATCH;
	out->delay_ms = DEFAULT_DELAY_MS;

	v = env2("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL", &which);
	if (v && strcmp(v, "http/json") == 0)
		out->protocol = LEDGER_TRACE_PROTO_JSON;
	else if (v && strcmp(v, "grpc") == 0)
		LOG_WARN("%s=grpc: ledgerd exports over HTTP only; http/protobuf is used", which);
	else if (v && strcmp(v, "http/protobuf") != 0)
		LOG_WARN("%s=%s is not http/protobuf or http/json; http/protobuf is used", which,
			 v);

	v = env2("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT", &which);
	if (v) {
		long ms;

		if (parse_long(v, 3600 * 1000L, &ms) && ms > 0)
			out->timeout_ms = ms;
		else
			LOG_WARN(
				"%s=%s is not a number of milliseconds from 1 to 3600000; %d is used",
				which, v, DEFAULT_TIMEOUT_MS);
	}
	out->ca_file = read_file_name("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
				      "OTEL_EXPORTER_OTLP_CERTIFICATE");
	out->client_cert = read_file_name("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
					  "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE");
	out->client_key = read_file_name("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
					 "OTEL_EXPORTER_OTLP_CLIENT_KEY");
	v = env2("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION", &which);
	if (v && strcmp(v, "none") != 0)
		LOG_WARN("%s=%s: ledgerd sends spans uncompressed", which, v);
	read_headers(out, "OTEL_EXPORTER_OTLP_HEADERS");
	read_headers(out, "OTEL_EXPORTER_OTLP_TRACES_HEADERS");

	out->queue_size = (size_t)read_long("OTEL_BSP_MAX_QUEUE_SIZE", 1, 1000000, DEFAULT_QUEUE);
	out->batch_size =
		(size_t)read_long("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1, 1000000, DEFAULT_BATCH);
	if (out->batch_size > out->queue_size) {
		/* The specification: a batch is never larger than the queue. */
		LOG_WARN("OTEL_BSP_MAX_EXPORT_BATCH_SIZE=%zu is larger than the queue (%zu); the "
			 "queue's size is used",
			 out->batch_size, out->queue_size);
		out->batch_size = out->queue_size;
	}
	out->delay_ms = read_long("OTEL_BSP_SCHEDULE_DELAY", 0, 3600 * 1000L, DEFAULT_DELAY_MS);

	read_sampler(out);
	read_resource(out, service_name, service_version);
	read_endpoint(out);

	out->enabled = out->endpoint != NULL;
	v = env("OTEL_TRACES_EXPORTER");
	if (v && strcmp(v, "none") == 0) {
		out->enabled = false;
	} else if (v && strcmp(v, "otlp") != 0) {
		LOG_WARN("OTEL_TRACES_EXPORTER=%s: ledgerd exports with otlp alone; otlp is used",
			 v);
	}
	if (is_true("OTEL_SDK_DISABLED"))
		out->enabled = false;
	if (!out->resource)
		out->enabled = false;
}

void ledger_trace_config_free(struct ledger_trace_config *c)
{
	size_t i;

	if (!c)
		return;
	free(c->endpoint);
	c->endpoint = NULL;
	free(c->ca_file);
	free(c->client_cert);
	free(c->client_key);
	c->ca_file = c->client_cert = c->client_key = NULL;
	for (i = 0; i < c->n_headers; i++)
		free(c->headers[i]);
	c->n_headers = 0;
	for (i = 0; i < c->n_resource; i++)
		ledger_otlp_attr_clear(&c->resource[i]);
	free(c->resource);
	c->resource = NULL;
	c->n_resource = 0;
}

/* TraceIdRatioBased: the trace id's last 7 bytes (56 bits, random in
 * every id W3C level 2 calls random) below ratio * 2^56. A child takes its
 * trace's decision, so every process of a trace decides alike. */
static bool ratio_sample(double ratio, const uint8_t trace_id[16])
{
	uint64_t r = 0;
	int i;

	if (ratio >= 1.0)
		return true;
	if (ratio <= 0.0)
		return false;
	for (i = 9; i < 16; i++)
		r = r << 8 | trace_id[i];
	return (double)r < ratio * 72057594037927936.0; /* 2^56 */
}

bool ledger_trace_config_sample(enum ledger_trace_sampler sampler, double ratio,
				const struct ledger_trace_ctx *parent, const uint8_t trace_id[16])
{
	bool has_parent = parent && parent->valid;

	switch (sampler) {
	case LEDGER_TRACE_SAMPLER_ALWAYS_ON:
		return true;
	case LEDGER_TRACE_SAMPLER_ALWAYS_OFF:
		return false;
	case LEDGER_TRACE_SAMPLER_RATIO:
		return ratio_sample(ratio, trace_id);
	case LEDGER_TRACE_SAMPLER_PARENT_ON:
		return has_parent ? (parent->flags & 1) != 0 : true;
	case LEDGER_TRACE_SAMPLER_PARENT_OFF:
		return has_parent ? (parent->flags & 1) != 0 : false;
	case LEDGER_TRACE_SAMPLER_PARENT_RATIO:
		return has_parent ? (parent->flags & 1) != 0 : ratio_sample(ratio, trace_id);
	}
	return false;
}
