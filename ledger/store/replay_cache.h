/*
 * ledger/store/replay_cache.h: a bounded in-process cache of settled tool calls.
 * A settled call never changes (docs/design.md invariant 5), so the replay of a claim made
 * outside attempts can be answered from memory, on the HTTP thread, without
 * the database.
 *
 * Two things can change the answer to such a claim, and the cache follows
 * both. Retention removes the call: an entry lives at most
 * LEDGER_REPLAY_CACHE_TTL_MS and is never kept within a safety margin of
 * the call's removal time. The request gains an attempt, after which a
 * claim must name one (409 attempt_required): every request key has a
 * stamp, read before the database is, and bumped after an attempt is
 * created; an entry made under an older stamp is not served.
 */
#ifndef LEDGER_REPLAY_CACHE_H
#define LEDGER_REPLAY_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/core/call.h"
#include "ledger/core/role.h"

#define LEDGER_REPLAY_CACHE_TTL_MS 60000

/**
 * Sizes the cache; 0 bytes turns it off. Call once, before any other use,
 * while no other thread runs. @return false if memory ran out (then off)
 */
bool ledger_replay_cache_init(size_t max_bytes, int64_t retention_ms);

/** Frees everything; the cache is off afterwards. */
void ledger_replay_cache_free(void);

/**
 * The stamp of request (@p tenant, @p rid): read it before the database
 * is, and pass it to ledger_replay_cache_put(). Thread-safe.
 */
uint32_t ledger_replay_cache_stamp(const char *tenant, const char *rid);

/**
 * Call after the request may have gained an attempt (whatever the store
 * answered), before replying: its entries are no longer served.
 */
void ledger_replay_cache_invalidate(const char *tenant, const char *rid);

/**
 * Remembers the settled call @p call (SUCCEEDED or FAILED) of key
 * (@p tenant, @p rid, @p cid), read from a request without attempts under
 * @p stamp, with its result or, not kept, its digest. Thread-safe; a call
 * too large for the budget is not kept.
 */
void ledger_replay_cache_put(const char *tenant, const char *rid, const char *cid,
			     const struct ledger_call *call, uint32_t stamp);

/**
 * Looks the key up. Thread-safe.
 * @param call on a hit, filled as the store would for a replay: state, tool,
 *        args_sha256, tool_dedupes, result (owned: ledger_call_clear()) or
 *        result_not_kept and result_digest, and completed_at; left ABSENT
 *        on a miss
 * @return true on a hit
 */
bool ledger_replay_cache_get(const char *tenant, const char *rid, const char *cid,
			     struct ledger_call *call);

/** Entries and bytes held, for /metrics. */
void ledger_replay_cache_stats(size_t *entries, size_t *bytes);

#endif
