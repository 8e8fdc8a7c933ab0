/*
 * api/service/whoami.c: GET /v1/whoami answers {"tenant", "role"} of the token
 * that called it, from the authentication the driver already did: no
 * database call. It names nothing the caller could not already know, and
 * only to a valid token.
 */
#include "api/service/whoami.h"

#include "api/service/reply.h"
#include "ledger/common/jsonw.h"
#include "ledger/core/role.h"

static enum ledger_err whoami_parse(struct api_request *req)
{
	struct ledger_jsonw w;

	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "tenant");
	ledger_jsonw_string(&w, req->tenant);
	ledger_jsonw_key(&w, "role");
	ledger_jsonw_string(&w, ledger_role_name(req->role));
	ledger_jsonw_object_end(&w);
	return LEDGER_OK;
}

const struct api_handler api_whoami = {.parse = whoami_parse};
