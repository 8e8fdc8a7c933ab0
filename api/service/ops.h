/*
 * api/service/ops.h: the operational endpoints (api/service/ops.c), which need no token.
 */
#ifndef API_OPS_H
#define API_OPS_H

#include "api/service/request.h"

extern const struct api_handler api_ops_healthz;
extern const struct api_handler api_ops_readyz;
extern const struct api_handler api_ops_metrics;

#endif
