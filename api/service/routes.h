/*
 * api/service/routes.h: the routing table (method, path pattern, handler, roles,
 * accepted query keys), read top to bottom, and the matcher that maps a
 * method and a raw path to a route with its decoded parameters.
 */
#ifndef API_ROUTES_H
#define API_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

#include "api/service/request.h"

struct api_route {
	const char *method;
	const char *pattern; /* segments; "{name}" is a path parameter */
	const struct api_handler *handler;
	unsigned roles;                       /* LEDGER_ROLE_BIT()s; 0: no token needed */
	const char *name;                     /* the route's label in metrics */
	const char *query[API_MAX_QUERY + 1]; /* accepted query keys, NULL-terminated */
	bool ops_only;                        /* with --ops-listen, served there alone (/metrics) */
};

extern const struct api_route api_routes[];
extern const size_t api_routes_count;

enum api_match {
	API_MATCH_OK,
	API_MATCH_NOT_FOUND,          /* no route has this path */
	API_MATCH_METHOD_NOT_ALLOWED, /* *allow_out lists the methods */
	API_MATCH_INVALID_ID,         /* *bad_out names the parameter */
};

/**
 * Finds the route for @p method and the raw (still percent-encoded) @p path,
 * and decodes its parameters into @p params (new strings; caller frees).
 * A parameter other than the last segment may span several segments, so
 * that an id containing "/" is reported as an invalid id, not a 404.
 */
enum api_match api_routes_match(const char *method, const char *path,
				const struct api_route **route_out, char *params[API_MAX_PARAMS],
				const char **allow_out, const char **bad_out);

/** Decodes %XX escapes of @p len bytes of @p s into a new string. NULL if malformed. */
char *api_routes_percent_decode(const char *s, size_t len, size_t *len_out);

#endif
