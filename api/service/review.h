/*
 * api/service/review.h: incident review (api/service/review.c): one request with
 * everything under it, and a tenant's requests.
 */
#ifndef API_REVIEW_H
#define API_REVIEW_H

#include "api/service/request.h"

extern const struct api_handler api_review_request;
extern const struct api_handler api_review_list;

#endif
