/*
 * ledger/common/log.h: JSON-lines logging on standard error. One object per line
 * with ts, level, msg and the ids in play. The level is checked before any
 * argument is evaluated. Never pass tokens, arguments or results: ids and
 * codes only.
 */
#ifndef LEDGER_LOG_H
#define LEDGER_LOG_H

enum ledger_log_level {
	LEDGER_LOG_DEBUG,
	LEDGER_LOG_INFO,
	LEDGER_LOG_WARN,
	LEDGER_LOG_ERROR,
};

/* The ids a line is about; any of them may be NULL. */
struct ledger_log_ids {
	const char *request_id;
	const char *attempt_id;
	const char *tool_call_id;
	const char *trace_id; /* the call's trace, 32 lowercase hex digits (W3C Trace Context) */
	const char *span_id;  /* the call's span in it, 16 lowercase hex digits */
};

extern enum ledger_log_level ledger_log_threshold;

/**
 * Writes one line. Thread-safe (one write(2) per line).
 * @param ids borrowed; may be NULL
 * @param extra_json NULL, or already-encoded JSON members appended to the
 *        object as they are (e.g. "\"status\":503"); borrowed
 */
void ledger_log_write(enum ledger_log_level level, const struct ledger_log_ids *ids,
		      const char *extra_json, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/**
 * Sets the ids of the call the calling thread serves (NULL: none). Until
 * it is set again, every line the thread writes without ids of its own
 * carries them, database errors and retries included.
 * @param ids borrowed until the next call on this thread
 */
void ledger_log_context_set(const struct ledger_log_ids *ids);

/** The calling thread's ids (NULL: none), borrowed. */
const struct ledger_log_ids *ledger_log_context(void);

/** Logs "assertion failed" with the ids in play, then aborts: see LEDGER_ASSERT. */
void ledger_log_assert_failed(const char *file, int line, const char *what)
	__attribute__((noreturn));

/** Parses "debug", "info", "warn" or "error". @return 0, or -1 if unknown. */
int ledger_log_parse_level(const char *s, enum ledger_log_level *out);

#define LEDGER_LOG(level, ids, extra, ...)                                                         \
	do {                                                                                       \
		if ((level) >= ledger_log_threshold)                                               \
			ledger_log_write((level), (ids), (extra), __VA_ARGS__);                    \
	} while (0)

/*
 * A pair assertion at a seam (what SQL returned against what C decided,
 * counts in against counts out). It holds unless ledgerd has a bug: then
 * the line names the condition and the ids in play, and ledgerd aborts
 * rather than answer from an impossible state.
 */
#define LEDGER_ASSERT(cond)                                                                        \
	do {                                                                                       \
		if (!(cond))                                                                       \
			ledger_log_assert_failed(__FILE__, __LINE__, #cond);                       \
	} while (0)

#define LOG_DEBUG(...) LEDGER_LOG(LEDGER_LOG_DEBUG, NULL, NULL, __VA_ARGS__)
#define LOG_INFO(...) LEDGER_LOG(LEDGER_LOG_INFO, NULL, NULL, __VA_ARGS__)
#define LOG_WARN(...) LEDGER_LOG(LEDGER_LOG_WARN, NULL, NULL, __VA_ARGS__)
#define LOG_ERROR(...) LEDGER_LOG(LEDGER_LOG_ERROR, NULL, NULL, __VA_ARGS__)

#endif
