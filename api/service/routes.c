/*
 * api/service/routes.c: the routing table, read top to bottom, and its matcher.
 * Paths are matched on their raw form, segment by segment; parameters are
 * decoded only after a route matched, so "%2F" inside an id is an invalid
 * id and never a path separator.
 */
#include "api/service/routes.h"

#include <stdlib.h>
#include <string.h>

#include "api/service/answers.h"
#include "api/service/attempts.h"
#include "api/wire/http.h"
#include "api/service/ops.h"
#include "api/service/review.h"
#include "api/service/toolcalls.h"
#include "api/service/whoami.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"

#define AGENT LEDGER_ROLE_BIT(LEDGER_ROLE_AGENT)
#define ROUTER LEDGER_ROLE_BIT(LEDGER_ROLE_ROUTER)
#define REVIEWER LEDGER_ROLE_BIT(LEDGER_ROLE_REVIEWER)
#define ADMIN LEDGER_ROLE_BIT(LEDGER_ROLE_ADMIN)

/* Agents act on tool calls; routers may do all they do. */
#define ACTORS (AGENT | ROUTER | ADMIN)
#define READERS (AGENT | ROUTER | REVIEWER | ADMIN)
#define LISTERS (ROUTER | REVIEWER | ADMIN)
#define ROUTERS (ROUTER | ADMIN)

/* One route a line, as a table reads. */
/* clang-format off */
const struct api_route api_routes[] = {
	/* method path                                           handler                  roles     metrics label         query                ops only */
	{"POST", "/v1/requests/{rid}/tool-calls/{cid}/claim",    &api_toolcalls_claim,    ACTORS,   "tool_call_claim",    {NULL}, false},
	{"POST", "/v1/requests/{rid}/tool-calls/{cid}/renew",    &api_toolcalls_renew,    ACTORS,   "tool_call_renew",    {NULL}, false},
	{"POST", "/v1/requests/{rid}/tool-calls/{cid}/complete", &api_toolcalls_complete, ACTORS,   "tool_call_complete", {NULL}, false},
	{"POST", "/v1/requests/{rid}/tool-calls/{cid}/release",  &api_toolcalls_release,  ACTORS,   "tool_call_release",  {NULL}, false},
	{"POST", "/v1/requests/{rid}/tool-calls/{cid}/resolve",  &api_toolcalls_resolve,  ADMIN,    "tool_call_resolve",  {NULL}, false},
	{"GET",  "/v1/requests/{rid}/tool-calls/{cid}",          &api_toolcalls_get,      READERS,  "tool_call_get",      {NULL}, false},
	{"GET",  "/v1/requests/{rid}",                           &api_review_request,     LISTERS,  "request_get",        {"events_cursor", NULL}, false},
	{"GET",  "/v1/requests",                                 &api_review_list,        LISTERS,  "request_list",       {"status", "since", "attention", "limit", "cursor", NULL}, false},
	{"GET",  "/v1/tool-calls",                               &api_toolcalls_list,     LISTERS,  "tool_call_list",     {"state", "limit", "cursor", NULL}, false},
	{"GET",  "/v1/whoami",                                   &api_whoami,             READERS,  "whoami",             {NULL}, false},
	{"POST", "/v1/requests/{rid}/attempts",                  &api_attempts_create,    ROUTERS,  "attempt_create",     {NULL}, false},
	{"POST", "/v1/requests/{rid}/attempts/{aid}/renew",      &api_attempts_renew,     ROUTERS,  "attempt_renew",      {NULL}, false},
	{"POST", "/v1/requests/{rid}/attempts/{aid}/deliver",    &api_attempts_deliver,   ROUTERS,  "attempt_deliver",    {NULL}, false},
	{"POST", "/v1/requests/{rid}/attempts/{aid}/cancel",     &api_attempts_cancel,    ROUTERS,  "attempt_cancel",     {NULL}, false},
	{"POST", "/v1/requests/{rid}/attempts/{aid}/cancel-ack", &api_attempts_cancel_ack, ROUTERS, "attempt_cancel_ack", {NULL}, false},
	{"POST", "/v1/requests/{rid}/attempts/{aid}/finish",     &api_attempts_finish,    ROUTERS,  "attempt_finish",     {NULL}, false},
	{"POST", "/v1/requests/{rid}/failover",                  &api_attempts_failover,  ROUTERS,  "failover",           {NULL}, false},
	{"GET",  "/v1/requests/{rid}/answer",                    &api_answers_get,        ROUTERS,  "request_answer",     {NULL}, false},
	{"POST", "/v1/requests/{rid}/attempts/{aid}/client",     &api_attempts_client,    ROUTERS,  "attempt_client",     {NULL}, false},
	{"GET",  "/healthz",                                     &api_ops_healthz,        0,        "healthz",            {NULL}, false},
	{"GET",  "/readyz",                                      &api_ops_readyz,         0,        "readyz",             {NULL}, false},
	{"GET",  "/metrics",                                     &api_ops_metrics,        0,        "metrics",            {NULL}, true},
};
/* clang-format on */

const size_t api_routes_count = sizeof(api_routes) / sizeof(api_routes[0]);

#define MAX_SEGMENTS 16

struct segs {
	const char *s[MAX_SEGMENTS];
	size_t len[MAX_SEGMENTS];
	unsigned n;
};

/* Splits "/a/b/c" into a, b, c. @return -1 if not absolute or too deep. */
static int split(const char *path, struct segs *out)
{
	const char *p = path;

	out->n = 0;
	if (*p != '/')
		return -1;
	while (*p == '/') {
		const char *start = ++p;
		while (*p != '\0' && *p != '/')
			p++;
		if (out->n == MAX_SEGMENTS)
			return -1;
		out->s[out->n] = start;
		out->len[out->n] = (size_t)(p - start);
		out->n++;
	}
	return 0;
}

static bool is_param(const char *seg, size_t len)
{
	return len >= 2 && seg[0] == '{' && seg[len - 1] == '}';
}

/*
 * Matches pattern segments from @p pi on against path segments from @p si
 * on, recording each parameter's span. A parameter that is not the last
 * segment takes one segment or more (shortest first).
 */
static bool match_from(const struct segs *pat, unsigned pi, const struct segs *path, unsigned si,
		       unsigned *param_first, unsigned *param_count, unsigned np)
{
	if (pi == pat->n)
		return si == path->n;
	if (si == path->n)
		return false;
	if (!is_param(pat->s[pi], pat->len[pi]))
		return pat->len[pi] == path->len[si] &&
		       memcmp(pat->s[pi], path->s[si], path->len[si]) == 0 &&
		       match_from(pat, pi + 1, path, si + 1, param_first, param_count, np);
	if (pi + 1 == pat->n) {
		param_first[np] = si;
		param_count[np] = 1;
		return si + 1 == path->n;
	}
	for (unsigned k = 1; si + k < path->n; k++) {
		param_first[np] = si;
		param_count[np] = k;
		if (match_from(pat, pi + 1, path, si + k, param_first, param_count, np + 1))
			return true;
	}
	return false;
}

char *api_routes_percent_decode(const char *s, size_t len, size_t *len_out)
{
	char *out = malloc(len + 1);
	size_t o = 0;

	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		int hi, lo;

		if (s[i] != '%') {
			out[o++] = s[i];
			continue;
		}
		if (len - i < 3 || (hi = wire_http_hex_value(s[i + 1])) < 0 ||
		    (lo = wire_http_hex_value(s[i + 2])) < 0) {
			free(out);
			return NULL;
		}
		out[o++] = (char)(hi << 4 | lo);
		i += 2;
	}
	out[o] = '\0';
	if (len_out != NULL)
		*len_out = o;
	return out;
}

/* The API's name of a path parameter, for error details. */
static const char *param_name(const char *seg, size_t len)
{
	static const struct {
		const char *pattern, *name;
	} names[] = {{"{rid}", "request_id"}, {"{cid}", "tool_call_id"}, {"{aid}", "attempt_id"}};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strlen(names[i].pattern) == len && memcmp(names[i].pattern, seg, len) == 0)
			return names[i].name;
	}
	abort(); /* a pattern of the table names a parameter this list lacks */
}

/*
 * Decodes and checks each parameter into @p params.
 * @return false with *bad_out naming the first invalid one ("request_id", ...)
 */
static bool decode_params(const struct segs *pat, const struct segs *path, const unsigned *first,
			  const unsigned *count, char *params[API_MAX_PARAMS], const char **bad_out)
{
	unsigned np = 0;

	for (unsigned pi = 0; pi < pat->n; pi++) {
		unsigned last;
		const char *start;
		size_t raw_len, len = 0;

		if (!is_param(pat->s[pi], pat->len[pi]))
			continue;
		last = first[np] + count[np] - 1;
		start = path->s[first[np]];
		raw_len = (size_t)(path->s[last] + path->len[last] - start);
		params[np] = api_routes_percent_decode(start, raw_len, &len);
		if (params[np] == NULL || !ledger_id_valid(params[np], len)) {
			*bad_out = param_name(pat->s[pi], pat->len[pi]);
			return false;
		}
		np++;
	}
	return true;
}

enum api_match api_routes_match(const char *method, const char *path,
				const struct api_route **route_out, char *params[API_MAX_PARAMS],
				const char **allow_out, const char **bad_out)
{
	struct segs p, pat;
	unsigned first[API_MAX_PARAMS + 1], count[API_MAX_PARAMS + 1];
	static const char *const allow_sets[] = {"GET, HEAD", "POST", "GET, HEAD, POST"};
	bool get = false, post = false;

	*route_out = NULL;
	*allow_out = NULL;
	*bad_out = NULL;
	if (split(path, &p) != 0)
		return API_MATCH_NOT_FOUND;
	for (size_t i = 0; i < api_routes_count; i++) {
		const struct api_route *r = &api_routes[i];

		if (split(r->pattern, &pat) != 0)
			abort(); /* the table is ours */
		if (!match_from(&pat, 0, &p, 0, first, count, 0))
			continue;
		/* HEAD is served wherever GET is (RFC 9110 9.3.2): the same head,
		 * and the wire writes no body. */
		if (strcmp(r->method, method) != 0 &&
		    !(strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0)) {
			get = get || strcmp(r->method, "GET") == 0;
			post = post || strcmp(r->method, "POST") == 0;
			continue;
		}
		*route_out = r;
		if (!decode_params(&pat, &p, first, count, params, bad_out))
			return API_MATCH_INVALID_ID;
		return API_MATCH_OK;
	}
	if (get || post) {
		*allow_out = allow_sets[(get && post) ? 2 : post ? 1 : 0];
		return API_MATCH_METHOD_NOT_ALLOWED;
	}
	return API_MATCH_NOT_FOUND;
}
