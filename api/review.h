/*
 * api/review.h: incident review (api/review.c): one request with
 * everything under it, and a tenant's requests.
 */
#ifndef API_REVIEW_H
#define API_REVIEW_H

#include "api/request.h"

extern const struct api_handler api_review_request;
extern const struct api_handler api_review_list;

#endif
