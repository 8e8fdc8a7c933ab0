/*
 * api/service/whoami.h: GET /v1/whoami, the tenant and role of the caller's own
 * token, for a client (the page at /ui/) that shows only what the role may do.
 */
#ifndef API_WHOAMI_H
#define API_WHOAMI_H

#include "api/service/request.h"

extern const struct api_handler api_whoami;

#endif
