/*
 * api/service/attempts.h: the router's endpoints (api/service/attempts.c): attempts, their
 * own calls (client events among them) and failover, as the routing table names them.
 */
#ifndef API_ATTEMPTS_H
#define API_ATTEMPTS_H

#include "api/service/request.h"

extern const struct api_handler api_attempts_create;
extern const struct api_handler api_attempts_renew;
extern const struct api_handler api_attempts_deliver;
extern const struct api_handler api_attempts_cancel;
extern const struct api_handler api_attempts_cancel_ack;
extern const struct api_handler api_attempts_finish;
extern const struct api_handler api_attempts_failover;
extern const struct api_handler api_attempts_client;

#endif
