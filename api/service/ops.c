/*
 * api/service/ops.c: the operational endpoints, which need no token: /healthz (the
 * process runs), /readyz (the database answers and its schema is one this
 * binary serves: its own, or a newer one whose migrations are additive) and /metrics (Prometheus text). Only /readyz asks
 * the database, and while it is ready at most once a READY_FRESH_MS (a
 * call that finds it unreachable ends that at once): a flood of probes
 * costs the database nothing more. The other two answer on the HTTP thread from
 * parse().
 */
#include "api/service/ops.h"

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "api/service/metrics.h"
#include "api/service/reply.h"
#include "api/wire/net.h"
#include "ledger/common/jsonw.h"
#include "ledger/store/migrate.h"
#include "ledger/store/store.h"

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

/* A readiness check answers the probes that follow it for this long. */
#define READY_FRESH_MS 1000

/* The last check: what the database said, and when (monotonic ms; 0: never). */
static atomic_llong checked_ms;
static atomic_int checked_rc, checked_version, checked_oldest;
/* Calls the store answered "unavailable" by the time of that check. */
static atomic_ullong checked_unreachable;

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void readyz_reply(struct api_request *req, enum ledger_err rc,
			 const struct ledger_schema_state *db);

static enum ledger_err readyz_parse(struct api_request *req)
{
	long long at = atomic_load(&checked_ms);

	if (at != 0 && now_ms() - at < READY_FRESH_MS &&
	    atomic_load(&checked_unreachable) == api_metrics_store_unreachable_count()) {
		struct ledger_schema_state db = {atomic_load(&checked_version),
						 atomic_load(&checked_oldest)};

		readyz_reply(req, (enum ledger_err)atomic_load(&checked_rc), &db);
		return LEDGER_OK;
	}
	req->job.op.kind = LEDGER_STORE_SCHEMA_VERSION;
	return LEDGER_OK;
}

static void readyz_answer(struct api_request *req, const struct ledger_store_result *res)
{
	/*
	 * Only readiness is remembered: a probe after an outage or a migration
	 * asks again at once, and while the database is away the probe's own
	 * lane (one worker, a short queue) bounds what probes cost.
	 */
	if (res->rc == LEDGER_OK && ledger_migrate_servable(ledger_migrate_fit(&res->u.schema))) {
		atomic_store(&checked_unreachable, api_metrics_store_unreachable_count());
		atomic_store(&checked_rc, (int)res->rc);
		atomic_store(&checked_version, res->u.schema.version);
		atomic_store(&checked_oldest, res->u.schema.oldest_binary_schema);
		atomic_store(&checked_ms, now_ms());
	} else {
		atomic_store(&checked_ms, 0);
	}
	api_metrics_readiness_check();
	readyz_reply(req, res->rc, &res->u.schema);
}

static void readyz_reply(struct api_request *req, enum ledger_err rc,
			 const struct ledger_schema_state *db)
{
	enum ledger_schema_fit fit = ledger_migrate_fit(db);
	struct ledger_jsonw w;

	if (rc != LEDGER_OK) {
		api_reply_unavailable(req); /* whatever went wrong, the process is not ready */
		return;
	}
	if (!ledger_migrate_servable(fit)) {
		api_reply_error_begin(
			req, &w, 503, "schema_mismatch",
			fit == LEDGER_SCHEMA_OLDER
				? "the database schema is older than this ledgerd's; run ledgerd "
				  "migrate"
				: "the database schema is newer than this ledgerd may serve; run a "
				  "ledgerd of schema oldest_binary_schema or newer");
		ledger_jsonw_key(&w, "schema_version");
		ledger_jsonw_int(&w, db->version);
		ledger_jsonw_key(&w, "expected_schema_version");
		ledger_jsonw_int(&w, ledger_migrate_expected_version());
		if (fit == LEDGER_SCHEMA_TOO_NEW) {
			ledger_jsonw_key(&w, "oldest_binary_schema");
			ledger_jsonw_int(&w, db->oldest_binary_schema);
		}
		api_reply_error_end(req, &w);
		return;
	}
	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "status");
	ledger_jsonw_string(&w, "ready");
	ledger_jsonw_key(&w, "schema_version");
	ledger_jsonw_int(&w, db->version);
	ledger_jsonw_object_end(&w);
}

const struct api_handler api_ops_readyz = {
	.parse = readyz_parse, .answer = readyz_answer, .answers_errors = true};

static enum ledger_err metrics_parse(struct api_request *req)
{
	req->reply.status = 0;
	ledger_buf_free(&req->reply.body);
	api_metrics_render(&req->reply.body, ledger_store_queue_depth(req->store),
			   ledger_store_stalled(req->store), wire_net_in_flight(req->net));
	req->reply.status = 200;
	req->reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
	return LEDGER_OK;
}

const struct api_handler api_ops_metrics = {.parse = metrics_parse};
