/*
 * api/ops.h: the operational endpoints (api/ops.c), which need no token.
 */
#ifndef API_OPS_H
#define API_OPS_H

#include "api/request.h"

extern const struct api_handler api_ops_healthz;
extern const struct api_handler api_ops_readyz;
extern const struct api_handler api_ops_metrics;

/**
 * A call found the database unreachable: the next /readyz asks it again
 * rather than answer from a check that found it ready. Thread-safe.
 */
void api_ops_readiness_doubt(void);

#endif
