/*
 * api/wire/stats.c: the wire's counters: relaxed atomic adds into fixed
 * tables, one cell per label, and their Prometheus text.
 */
#include "api/wire/stats.h"

#include <stdatomic.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* What the wire refuses, by error code (the last: any other code). */
static const char *const refused_codes[] = {
	"malformed_request",  "headers_too_large", "http_version_not_supported",
	"not_implemented",    "expectation_failed", "request_timeout",
	"other",
};
static atomic_ullong refused[COUNT(refused_codes)];
static const char *const accept_reasons[] = {"total", "per_address", "files", "memory"};
static atomic_ullong accept_refused[COUNT(accept_reasons)];
static const char *const timeout_phases[] = {"head", "body", "write"};
static atomic_ullong timeouts[COUNT(timeout_phases)];
static atomic_long connections;
static atomic_ullong shed;

/* The index of @p name in @p names, or @p n when it is not there. */
static size_t index_of(const char *const *names, size_t n, const char *name)
{
	size_t i = 0;

	while (i < n && strcmp(names[i], name) != 0)
		i++;
	return i;
}

static void add(atomic_ullong *cell)
{
	atomic_fetch_add_explicit(cell, 1, memory_order_relaxed);
}

void wire_stats_refused(const char *code)
{
	add(&refused[index_of(refused_codes, COUNT(refused_codes) - 1, code)]);
}

void wire_stats_connection_refused(const char *reason)
{
	size_t i = index_of(accept_reasons, COUNT(accept_reasons), reason);

	if (i < COUNT(accept_reasons))
		add(&accept_refused[i]);
}

void wire_stats_timeout(const char *phase)
{
	size_t i = index_of(timeout_phases, COUNT(timeout_phases), phase);

	if (i < COUNT(timeout_phases))
		add(&timeouts[i]);
}
void wire_stats_shed(void)
{
	add(&shed);
}

void wire_stats_connections(int delta)
{
	atomic_fetch_add_explicit(&connections, delta, memory_order_relaxed);
}

static void header(struct ledger_buf *out, const char *prefix, const char *name, const char *type,
		   const char *help)
{
	ledger_buf_printf(out, "# HELP %s%s %s\n# TYPE %s%s %s\n", prefix, name, help, prefix, name,
			  type);
}

static void labelled(struct ledger_buf *out, const char *prefix, const char *name,
		     const char *label, const char *const *names, atomic_ullong *cells, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ledger_buf_printf(out, "%s%s{%s=\"%s\"} %llu\n", prefix, name, label, names[i],
				  atomic_load_explicit(&cells[i], memory_order_relaxed));
}

void wire_stats_render(struct ledger_buf *out, const char *prefix)
{
	header(out, prefix, "http_connections", "gauge", "HTTP connections open.");
	ledger_buf_printf(out, "%shttp_connections %ld\n", prefix,
			  atomic_load_explicit(&connections, memory_order_relaxed));
	header(out, prefix, "http_connections_refused_total", "counter",
	       "Connections closed unanswered when accepted: past --max-connections (total), "
	       "--max-connections-per-address, or out of file descriptors or memory.");
	labelled(out, prefix, "http_connections_refused_total", "reason", accept_reasons,
		 accept_refused, COUNT(accept_reasons));
	header(out, prefix, "http_refused_total", "counter",
	       "Requests refused on the wire before any route (malformed, too large a head, a "
	       "deadline passed), by error code; the connection closes after each.");
	labelled(out, prefix, "http_refused_total", "code", refused_codes, refused,
		 COUNT(refused_codes));
	header(out, prefix, "http_timeouts_total", "counter",
	       "Connections cut by a deadline: --head-timeout (head), --body-timeout (body), "
	       "--idle-timeout on a reply not read, or --write-timeout behind one (write).");
	labelled(out, prefix, "http_timeouts_total", "phase", timeout_phases, timeouts,
		 COUNT(timeout_phases));
	header(out, prefix, "http_unread_shed_total", "counter",
	       "Connections closed because the reply bytes waiting on clients behind them passed "
	       "--max-unread-output in all, the longest behind first.");
	ledger_buf_printf(out, "%shttp_unread_shed_total %llu\n", prefix,
			  atomic_load_explicit(&shed, memory_order_relaxed));
}
