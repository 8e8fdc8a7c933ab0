/*
 * ledger/common/trace_config.h: the tracer's settings as the OTEL_*
 * variables give them (the OpenTelemetry SDK environment variables, 1.x),
 * each validated with its default taken and a warning logged when a value
 * cannot be used; and the sampler those settings choose. Read once by
 * ledger_trace_init(); apart so that tests read the same table.
 */
#ifndef LEDGER_TRACE_CONFIG_H
#define LEDGER_TRACE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/common/otlp.h"
#include "ledger/common/trace.h"

enum ledger_trace_protocol {
	LEDGER_TRACE_PROTO_PROTOBUF, /* http/protobuf: the default */
	LEDGER_TRACE_PROTO_JSON,     /* http/json */
};

enum ledger_trace_sampler {
	LEDGER_TRACE_SAMPLER_ALWAYS_ON,
	LEDGER_TRACE_SAMPLER_ALWAYS_OFF,
	LEDGER_TRACE_SAMPLER_RATIO,
	LEDGER_TRACE_SAMPLER_PARENT_ON, /* parentbased_always_on: the default */
	LEDGER_TRACE_SAMPLER_PARENT_OFF,
	LEDGER_TRACE_SAMPLER_PARENT_RATIO,
};

#define LEDGER_TRACE_MAX_HEADERS 32

struct ledger_trace_config {
	bool enabled;   /* an endpoint, and neither disabled nor "none" */
	char *endpoint; /* owned: the URL spans are POSTed to */
	enum ledger_trace_protocol protocol;
	char *headers[LEDGER_TRACE_MAX_HEADERS]; /* owned: "Name: value", n_headers of them */
	size_t n_headers;
	long timeout_ms;                   /* OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT */
	char *ca_file;                     /* owned; NULL: the system's CAs. _CERTIFICATE */
	char *client_cert;                 /* owned; NULL: none. _CLIENT_CERTIFICATE */
	char *client_key;                  /* owned; NULL: none. _CLIENT_KEY */
	struct ledger_otlp_attr *resource; /* owned: the resource's attributes */
	size_t n_resource;
	enum ledger_trace_sampler sampler;
	double ratio;      /* OTEL_TRACES_SAMPLER_ARG, in [0, 1] */
	size_t queue_size; /* OTEL_BSP_MAX_QUEUE_SIZE */
	size_t batch_size; /* OTEL_BSP_MAX_EXPORT_BATCH_SIZE, <= queue_size */
	long delay_ms;     /* OTEL_BSP_SCHEDULE_DELAY */
};

/**
 * Reads the OTEL_* variables of the environment into @p out (zeroed
 * first); a value that cannot be used is logged (warn) and its default
 * taken. Free with ledger_trace_config_free().
 * @param service_name, service_version the defaults of service.name and
 *        service.version; borrowed, may be NULL
 */
void ledger_trace_config_read(struct ledger_trace_config *out, const char *service_name,
			      const char *service_version);

/** Frees what @p c owns. NULL-safe. */
void ledger_trace_config_free(struct ledger_trace_config *c);

/**
 * The sampler's decision for a new span of @p trace_id under @p parent
 * (NULL or not valid: a root span).
 */
bool ledger_trace_config_sample(enum ledger_trace_sampler sampler, double ratio,
				const struct ledger_trace_ctx *parent, const uint8_t trace_id[16]);

/**
 * Decodes %XX escapes of @p len bytes of @p s in place (W3C Baggage's
 * percent-encoding, as OTEL_EXPORTER_OTLP_HEADERS and
 * OTEL_RESOURCE_ATTRIBUTES use it). @return the new length, or -1 when an
 * escape is malformed
 */
long ledger_trace_config_percent_decode(char *s, size_t len);

/* ---------------------------------------------------------------------- */
/* The tracer's side of spans (trace.c), for span.c and the tests          */
/* ---------------------------------------------------------------------- */

/** The running tracer's sampler decision (false when tracing is off). */
bool ledger_trace_sample(const struct ledger_trace_ctx *parent, const uint8_t trace_id[16]);

/** Fills @p out with @p n random bytes, not all zero. */
void ledger_trace_random_id(uint8_t *out, size_t n);

/**
 * Takes an ended span: queued for export, or freed and counted dropped
 * when the queue is full, or freed when it is not recording or tracing is
 * off. Never blocks on I/O. @param s taken
 */
void ledger_trace_submit(struct ledger_span *s);

/** Spans waiting in the queue now. */
size_t ledger_trace_queued(void);

#endif
