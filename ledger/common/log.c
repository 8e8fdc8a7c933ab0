/*
 * ledger/common/log.c: the JSON-lines writer behind ledger/common/log.h. A line is built
 * whole in a buffer and written with one write(2), so lines of concurrent
 * threads never interleave.
 */
#include "ledger/common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ledger/common/buf.h"
#include "ledger/common/jsonw.h"

enum ledger_log_level ledger_log_threshold = LEDGER_LOG_INFO;

/* The ids of the call this thread serves now; borrowed from its owner. */
static _Thread_local const struct ledger_log_ids *context;

void ledger_log_context_set(const struct ledger_log_ids *ids)
{
	context = ids;
}

const struct ledger_log_ids *ledger_log_context(void)
{
	return context;
}

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int ledger_log_parse_level(const char *s, enum ledger_log_level *out)
{
	for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum ledger_log_level)i;
			return 0;
		}
	}
	return -1;
}

static void put_id(struct ledger_buf *b, const char *key, const char *value)
{
	if (value == NULL)
		return;
	ledger_buf_printf(b, ",\"%s\":", key);
	ledger_jsonw_escape(b, value, strlen(value));
}

void ledger_log_write(enum ledger_log_level level, const struct ledger_log_ids *ids,
		      const char *extra_json, const char *fmt, ...)
{
	char msg[1024];
	char ts[40];
	struct timespec now;
	struct tm tm;
	struct ledger_buf b = LEDGER_BUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);

	ledger_buf_printf(&b, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"msg\":", ts,
			  now.tv_nsec / 1000000, level_names[level]);
	ledger_jsonw_escape(&b, msg, strlen(msg));
	if (ids == NULL)
		ids = context;
	if (ids != NULL) {
		put_id(&b, "request_id", ids->request_id);
		put_id(&b, "attempt_id", ids->attempt_id);
		put_id(&b, "tool_call_id", ids->tool_call_id);
		put_id(&b, "trace_id", ids->trace_id);
		put_id(&b, "span_id", ids->span_id);
	}
	if (extra_json != NULL && extra_json[0] != '\0') {
		ledger_buf_putc(&b, ',');
		ledger_buf_puts(&b, extra_json);
	}
	ledger_buf_puts(&b, "}\n");
	if (!b.oom) {
		/* A short write to stderr has no better place to be reported. */
		ssize_t ignored = write(STDERR_FILENO, b.data, b.len);
		(void)ignored;
	}
	ledger_buf_free(&b);
}

void ledger_log_assert_failed(const char *file, int line, const char *what)
{
	ledger_log_write(LEDGER_LOG_ERROR, NULL, NULL, "assertion failed at %s:%d: %s", file, line,
			 what);
	abort();
}
