/*
 * api/ops.c: the operational endpoints, which need no token: /healthz (the
 * process runs), /readyz (the database answers and its schema is the one
 * this binary expects) and /metrics (Prometheus text). Only /readyz asks
 * the database; the other two answer on the HTTP thread from parse().
 */
#include "api/ops.h"

#include <stdio.h>

#include "api/metrics.h"
#include "api/reply.h"
#include "api/server.h"
#include "ledger/common/jsonw.h"
#include "ledger/store/migrate.h"

static enum ledger_err healthz_parse(struct api_request *req)
{
	struct ledger_jsonw w;

	/* Answered on the HTTP thread: it must not depend on the database. */
	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "status");
	ledger_jsonw_string(&w, "ok");
	ledger_jsonw_object_end(&w);
	return LEDGER_OK;
}

const struct api_handler api_ops_healthz = {.parse = healthz_parse};

static enum ledger_err readyz_parse(struct api_request *req)
{
	req->job.op.kind = LEDGER_STORE_SCHEMA_VERSION;
	return LEDGER_OK;
}

static void readyz_answer(struct api_request *req, const struct ledger_store_result *res)
{
	int expected = ledger_migrate_expected_version(), version = res->u.schema_version;
	struct ledger_jsonw w;

	if (res->rc != LEDGER_OK) {
		api_reply_unavailable(req); /* whatever went wrong, the process is not ready */
		return;
	}
	if (version != expected) {
		api_reply_error_begin(
			req, &w, 503, "schema_mismatch",
			"the database schema is not the version this ledgerd expects; "
			"run ledgerd migrate");
		ledger_jsonw_key(&w, "schema_version");
		ledger_jsonw_int(&w, version);
		ledger_jsonw_key(&w, "expected_schema_version");
		ledger_jsonw_int(&w, expected);
		api_reply_error_end(req, &w);
		return;
	}
	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "status");
	ledger_jsonw_string(&w, "ready");
	ledger_jsonw_key(&w, "schema_version");
	ledger_jsonw_int(&w, version);
	ledger_jsonw_object_end(&w);
}

const struct api_handler api_ops_readyz = {
	.parse = readyz_parse, .answer = readyz_answer, .answers_errors = true};

static enum ledger_err metrics_parse(struct api_request *req)
{
	req->reply.status = 0;
	ledger_buf_free(&req->reply.body);
	api_metrics_render(&req->reply.body, api_server_queue_depth(req), api_server_stalled(req),
			   api_server_in_flight(req));
	req->reply.status = 200;
	req->reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
	return LEDGER_OK;
}

const struct api_handler api_ops_metrics = {.parse = metrics_parse};
