/*
 * api/handlers.h: the handlers the routing table names, one group per file.
 */
#ifndef API_HANDLERS_H
#define API_HANDLERS_H

#include "api/server.h"

/* api/toolcalls.c */
extern const struct api_handler api_toolcalls_claim;
extern const struct api_handler api_toolcalls_renew;
extern const struct api_handler api_toolcalls_complete;
extern const struct api_handler api_toolcalls_release;
extern const struct api_handler api_toolcalls_resolve;
extern const struct api_handler api_toolcalls_get;
extern const struct api_handler api_toolcalls_list;

/* api/attempts.c */
extern const struct api_handler api_attempts_create;
extern const struct api_handler api_attempts_renew;
extern const struct api_handler api_attempts_deliver;
extern const struct api_handler api_attempts_cancel;
extern const struct api_handler api_attempts_cancel_ack;
extern const struct api_handler api_attempts_finish;
extern const struct api_handler api_attempts_failover;

/* api/review.c */
extern const struct api_handler api_review_request;
extern const struct api_handler api_review_list;

/* api/ops.c */
extern const struct api_handler api_ops_healthz;
extern const struct api_handler api_ops_readyz;
extern const struct api_handler api_ops_metrics;

#endif
