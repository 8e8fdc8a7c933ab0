/*
 * api/service/toolcalls.h: the tool-call endpoints (api/service/toolcalls.c), as the
 * routing table names them.
 */
#ifndef API_TOOLCALLS_H
#define API_TOOLCALLS_H

#include <stdbool.h>

#include "api/service/request.h"
#include "ledger/common/jsonw.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"

extern const struct api_handler api_toolcalls_claim;
extern const struct api_handler api_toolcalls_renew;
extern const struct api_handler api_toolcalls_complete;
extern const struct api_handler api_toolcalls_release;
extern const struct api_handler api_toolcalls_resolve;
extern const struct api_handler api_toolcalls_get;
extern const struct api_handler api_toolcalls_list;

/**
 * Writes a tool call as GET answers it, never with its claim_id; without
 * args and result unless @p payload; its lease left less @p elapsed_ms,
 * the time since the database measured it. Borrows everything.
 */
void api_toolcalls_write_call(struct ledger_jsonw *w, const char *rid, const char *cid,
			      const struct ledger_call *call, bool payload, int64_t elapsed_ms);

#endif
