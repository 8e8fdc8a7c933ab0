/*
 * tests/unit/test_routes.c: the routing table and its matcher (api/service/routes.c),
 * table-driven: every route with its parameters, roles and query keys, then
 * what is 404, what is 405 and with which Allow set, which ids are invalid
 * (and which parameter the error names), trailing slashes, the segment limit,
 * and api_routes_percent_decode() on its own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/service/answers.h"
#include "api/service/attempts.h"
#include "api/service/ops.h"
#include "api/service/review.h"
#include "api/service/toolcalls.h"
#include "api/service/whoami.h"
#include "api/service/routes.h"
#include "ledger/core/call.h"
#include "ledger/core/role.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The role sets, spelled out here so a change to the table shows in a row. */
#define AGENT LEDGER_ROLE_BIT(LEDGER_ROLE_AGENT)
#define ROUTER LEDGER_ROLE_BIT(LEDGER_ROLE_ROUTER)
#define REVIEWER LEDGER_ROLE_BIT(LEDGER_ROLE_REVIEWER)
#define ADMIN LEDGER_ROLE_BIT(LEDGER_ROLE_ADMIN)
#define NO_TOKEN 0u

/* 128 bytes: the longest id; "x" once more is one too many. */
#define ID128                                                                                      \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"                         \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* "%41" (A) 128 times: 384 bytes on the wire, 128 once decoded. */
#define PCT16 "%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41"
#define PCT128 PCT16 PCT16 PCT16 PCT16 PCT16 PCT16 PCT16 PCT16
#define A16 "AAAAAAAAAAAAAAAA"
#define A128 A16 A16 A16 A16 A16 A16 A16 A16

/* One request line and what the matcher must say about it. */
struct row {
	const char *method;
	const char *path;
	enum api_match want;
	const char *name;                   /* OK: the route's metrics label */
	const char *params[API_MAX_PARAMS]; /* OK: the decoded parameters, in order */
	const char *allow;                  /* 405: the Allow set */
	const char *bad;                    /* invalid id: the parameter named */
};

#define OK(m, p, n, ...)                                                                           \
	{                                                                                          \
		m, p, API_MATCH_OK, n, {__VA_ARGS__}, NULL, NULL                                   \
	}
#define NOT_FOUND(m, p)                                                                            \
	{                                                                                          \
		m, p, API_MATCH_NOT_FOUND, NULL, {NULL}, NULL, NULL                                \
	}
#define NOT_ALLOWED(m, p, a)                                                                       \
	{                                                                                          \
		m, p, API_MATCH_METHOD_NOT_ALLOWED, NULL, {NULL}, a, NULL                          \
	}
#define INVALID(m, p, b)                                                                           \
	{                                                                                          \
		m, p, API_MATCH_INVALID_ID, NULL, {NULL}, NULL, b                                  \
	}

static const char *match_name(enum api_match m)
{
	switch (m) {
	case API_MATCH_OK:
		return "OK";
	case API_MATCH_NOT_FOUND:
		return "NOT_FOUND";
	case API_MATCH_METHOD_NOT_ALLOWED:
		return "METHOD_NOT_ALLOWED";
	case API_MATCH_INVALID_ID:
		return "INVALID_ID";
	}
	return "(out of range)";
}

static bool same(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

#define STR(s) ((s) != NULL ? (s) : "NULL")

/* What *route_out holds until the matcher sets it. */
static const struct api_route unset_route;

/* Checks one row; prints every difference. @return true when it passed. */
static bool check_row(const char *table, size_t i, const struct row *r)
{
	const struct api_route *route = &unset_route;
	char *params[API_MAX_PARAMS] = {NULL};
	const char *allow = "unset", *bad = "unset";
	enum api_match got = api_routes_match(r->method, r->path, &route, params, &allow, &bad);
	bool ok = true;

	if (got != r->want) {
		print_error("%s row %zu (%s %.60s): %s, want %s\n", table, i, r->method, r->path,
			    match_name(got), match_name(r->want));
		ok = false;
	}
	if (r->want == API_MATCH_OK &&
	    (route == NULL || route == &unset_route || !same(route->name, r->name) ||
	     !(same(route->method, r->method) ||
	       (same(r->method, "HEAD") && same(route->method, "GET"))))) {
		print_error("%s row %zu (%s %.60s): route %s, want %s\n", table, i, r->method,
			    r->path, route != NULL ? STR(route->name) : "NULL", r->name);
		ok = false;
	}
	if ((r->want == API_MATCH_NOT_FOUND || r->want == API_MATCH_METHOD_NOT_ALLOWED) &&
	    route != NULL) {
		print_error("%s row %zu (%s %.60s): route %s, want none\n", table, i, r->method,
			    r->path, STR(route->name));
		ok = false;
	}
	for (size_t k = 0; r->want == API_MATCH_OK && k < API_MAX_PARAMS; k++) {
		if (!same(params[k], r->params[k])) {
			print_error(
				"%s row %zu (%s %.60s): parameter %zu \"%.60s\", want \"%.60s\"\n",
				table, i, r->method, r->path, k, STR(params[k]), STR(r->params[k]));
			ok = false;
		}
	}
	if (!same(allow, r->allow)) {
		print_error("%s row %zu (%s %.60s): Allow %s, want %s\n", table, i, r->method,
			    r->path, STR(allow), STR(r->allow));
		ok = false;
	}
	if (!same(bad, r->bad)) {
		print_error("%s row %zu (%s %.60s): bad parameter %s, want %s\n", table, i,
			    r->method, r->path, STR(bad), STR(r->bad));
		ok = false;
	}
	for (size_t k = 0; k < API_MAX_PARAMS; k++)
		free(params[k]);
	return ok;
}

/* Runs a table; fails after printing every failing row. */
static void run_rows(const char *table, const struct row *rows, size_t n)
{
	size_t failed = 0;

	for (size_t i = 0; i < n; i++) {
		if (!check_row(table, i, &rows[i]))
			failed++;
	}
	if (failed > 0)
		fail_msg("%zu of %zu %s rows failed", failed, n, table);
}

/* --- every route of the table ---------------------------------------------- */

/* One row a route, in the table's order: each must match with its parameters. */
static const struct row route_rows[] = {
	OK("POST", "/v1/requests/r1/tool-calls/c1/claim", "tool_call_claim", "r1", "c1"),
	OK("POST", "/v1/requests/r1/tool-calls/c1/renew", "tool_call_renew", "r1", "c1"),
	OK("POST", "/v1/requests/r1/tool-calls/c1/complete", "tool_call_complete", "r1", "c1"),
	OK("POST", "/v1/requests/r1/tool-calls/c1/release", "tool_call_release", "r1", "c1"),
	OK("POST", "/v1/requests/r1/tool-calls/c1/resolve", "tool_call_resolve", "r1", "c1"),
	OK("GET", "/v1/requests/r1/tool-calls/c1", "tool_call_get", "r1", "c1"),
	OK("GET", "/v1/requests/r1", "request_get", "r1"),
	OK("GET", "/v1/requests", "request_list", NULL),
	OK("GET", "/v1/tool-calls", "tool_call_list", NULL),
	OK("GET", "/v1/whoami", "whoami", NULL),
	OK("POST", "/v1/requests/r1/attempts", "attempt_create", "r1"),
	OK("POST", "/v1/requests/r1/attempts/a1/renew", "attempt_renew", "r1", "a1"),
	OK("POST", "/v1/requests/r1/attempts/a1/deliver", "attempt_deliver", "r1", "a1"),
	OK("POST", "/v1/requests/r1/attempts/a1/cancel", "attempt_cancel", "r1", "a1"),
	OK("POST", "/v1/requests/r1/attempts/a1/cancel-ack", "attempt_cancel_ack", "r1", "a1"),
	OK("POST", "/v1/requests/r1/attempts/a1/finish", "attempt_finish", "r1", "a1"),
	OK("POST", "/v1/requests/r1/failover", "failover", "r1"),
	OK("GET", "/v1/requests/r1/answer", "request_answer", "r1"),
	OK("POST", "/v1/requests/r1/attempts/a1/client", "attempt_client", "r1", "a1"),
	OK("GET", "/healthz", "healthz", NULL),
	OK("GET", "/readyz", "readyz", NULL),
	OK("GET", "/metrics", "metrics", NULL),
};

static void test_routes_every_route_matches(void **state)
{
	(void)state;
	run_rows("route", route_rows, COUNT(route_rows));
}

/* A route added to the table without a row above fails here. */
static void test_routes_every_route_has_a_row(void **state)
{
	(void)state;
	assert_int_equal(api_routes_count, COUNT(route_rows));
	for (size_t i = 0; i < api_routes_count; i++) {
		if (!same(api_routes[i].name, route_rows[i].name) ||
		    !same(api_routes[i].method, route_rows[i].method))
			fail_msg("route %zu is %s %s, its row says %s %s", i, api_routes[i].method,
				 api_routes[i].name, route_rows[i].method, route_rows[i].name);
	}
}

/* Who may call each route (API.md's role table), and the handler behind it. */
static const struct {
	const char *name;
	unsigned roles;
	const struct api_handler *handler;
} role_rows[] = {
	{"tool_call_claim", AGENT | ROUTER | ADMIN, &api_toolcalls_claim},
	{"tool_call_renew", AGENT | ROUTER | ADMIN, &api_toolcalls_renew},
	{"tool_call_complete", AGENT | ROUTER | ADMIN, &api_toolcalls_complete},
	{"tool_call_release", AGENT | ROUTER | ADMIN, &api_toolcalls_release},
	{"tool_call_resolve", ADMIN, &api_toolcalls_resolve},
	{"tool_call_get", AGENT | ROUTER | REVIEWER | ADMIN, &api_toolcalls_get},
	{"request_get", ROUTER | REVIEWER | ADMIN, &api_review_request},
	{"request_list", ROUTER | REVIEWER | ADMIN, &api_review_list},
	{"tool_call_list", ROUTER | REVIEWER | ADMIN, &api_toolcalls_list},
	{"whoami", AGENT | ROUTER | REVIEWER | ADMIN, &api_whoami},
	{"attempt_create", ROUTER | ADMIN, &api_attempts_create},
	{"attempt_renew", ROUTER | ADMIN, &api_attempts_renew},
	{"attempt_deliver", ROUTER | ADMIN, &api_attempts_deliver},
	{"attempt_cancel", ROUTER | ADMIN, &api_attempts_cancel},
	{"attempt_cancel_ack", ROUTER | ADMIN, &api_attempts_cancel_ack},
	{"attempt_finish", ROUTER | ADMIN, &api_attempts_finish},
	{"failover", ROUTER | ADMIN, &api_attempts_failover},
	{"request_answer", ROUTER | ADMIN, &api_answers_get},
	{"attempt_client", ROUTER | ADMIN, &api_attempts_client},
	{"healthz", NO_TOKEN, &api_ops_healthz},
	{"readyz", NO_TOKEN, &api_ops_readyz},
	{"metrics", NO_TOKEN, &api_ops_metrics},
};

static void test_routes_roles_and_handlers(void **state)
{
	(void)state;
	assert_int_equal(api_routes_count, COUNT(role_rows));
	for (size_t i = 0; i < api_routes_count; i++) {
		const struct api_route *r = &api_routes[i];

		assert_string_equal(r->name, role_rows[i].name);
		if (r->roles != role_rows[i].roles)
			fail_msg("%s: roles 0x%x, want 0x%x", r->name, r->roles,
				 role_rows[i].roles);
		if (r->handler != role_rows[i].handler)
			fail_msg("%s: another handler", r->name);
	}
}

/* The query keys each route accepts; every other route accepts none. */
static const struct {
	const char *name;
	const char *keys[API_MAX_QUERY + 1];
} query_rows[] = {
	{"request_get", {"events_cursor", NULL}},
	{"request_list", {"status", "since", "attention", "limit", "cursor", NULL}},
	{"tool_call_list", {"state", "limit", "cursor", NULL}},
};

static void test_routes_query_keys(void **state)
{
	(void)state;
	for (size_t i = 0; i < api_routes_count; i++) {
		const struct api_route *r = &api_routes[i];
		const char *const *want = NULL;
		size_t k;

		for (size_t q = 0; q < COUNT(query_rows); q++) {
			if (strcmp(query_rows[q].name, r->name) == 0)
				want = query_rows[q].keys;
		}
		for (k = 0; want != NULL && want[k] != NULL; k++) {
			if (!same(r->query[k], want[k]))
				fail_msg("%s: query key %zu is %s, want %s", r->name, k,
					 STR(r->query[k]), want[k]);
		}
		if (r->query[k] != NULL)
			fail_msg("%s: query key %zu is %s, want the end", r->name, k, r->query[k]);
	}
}

/* --- 404 ---------------------------------------------------------------- */

static const struct row not_found_rows[] = {
	NOT_FOUND("GET", ""),            /* not absolute */
	NOT_FOUND("GET", "v1/requests"), /* not absolute */
	NOT_FOUND("GET", "/"),
	NOT_FOUND("GET", "/v1"),
	NOT_FOUND("GET", "/v2/requests"),
	NOT_FOUND("GET", "/V1/requests"),   /* literal segments are case-sensitive */
	NOT_FOUND("GET", "/v1/%72equests"), /* and compared undecoded */
	NOT_FOUND("GET", "//healthz"),      /* an empty segment is a segment */
	NOT_FOUND("GET", "/v1//requests"),
	NOT_FOUND("GET", "/healthz?verbose=1"), /* the matcher is given the path alone */
	NOT_FOUND("GET", "/metrics/x"),
	NOT_FOUND("GET", "/v1/requests/r1/tool-calls"),
	NOT_FOUND("POST", "/v1/requests/r1/tool-calls/c1/explode"),
	NOT_FOUND("GET", "/v1/requests/r1/attempts/a1"), /* an attempt has no GET */
	NOT_FOUND("POST", "/v1/requests/r1/attempts/a1"),
	NOT_FOUND("POST", "/v1/attempts"),
	NOT_FOUND("DELETE", "/nowhere"), /* an unknown method on no path: 404 */
};

static void test_routes_unknown_paths_are_not_found(void **state)
{
	(void)state;
	run_rows("not found", not_found_rows, COUNT(not_found_rows));
}

/* --- 405 ---------------------------------------------------------------- */

static const struct row not_allowed_rows[] = {
	NOT_ALLOWED("GET", "/v1/requests/r1/tool-calls/c1/claim", "POST"),
	NOT_ALLOWED("PUT", "/v1/requests/r1/tool-calls/c1/resolve", "POST"),
	NOT_ALLOWED("DELETE", "/v1/requests/r1/tool-calls/c1", "GET, HEAD"),
	NOT_ALLOWED("POST", "/v1/requests/r1/tool-calls/c1", "GET, HEAD"),
	NOT_ALLOWED("POST", "/v1/requests/r1", "GET, HEAD"),
	NOT_ALLOWED("POST", "/v1/requests", "GET, HEAD"),
	NOT_ALLOWED("PUT", "/v1/tool-calls", "GET, HEAD"),
	NOT_ALLOWED("GET", "/v1/requests/r1/attempts", "POST"),
	NOT_ALLOWED("GET", "/v1/requests/r1/attempts/a1/finish", "POST"),
	NOT_ALLOWED("GET", "/v1/requests/r1/failover", "POST"),
	NOT_ALLOWED("POST", "/healthz", "GET, HEAD"),
	NOT_ALLOWED("get", "/metrics", "GET, HEAD"), /* methods are case-sensitive */
	NOT_ALLOWED("", "/metrics", "GET, HEAD"),
	/* the path decides before the ids: a bad id on the wrong method is a 405 */
	NOT_ALLOWED("GET", "/v1/requests/bad:id/attempts", "POST"),
	NOT_ALLOWED("DELETE", "/v1/requests/" ID128 "x/tool-calls/c1", "GET, HEAD"),
	/* a path both a GET and a POST pattern match: the claim of call "tool-calls",
	 * or the GET of call "claim" in request "a/tool-calls" */
	NOT_ALLOWED("DELETE", "/v1/requests/a/tool-calls/tool-calls/claim", "GET, HEAD, POST"),
};

/* HEAD is served wherever GET is (RFC 9110 9.3.2), by the GET's route. */
static const struct row head_rows[] = {
	OK("HEAD", "/readyz", "readyz", NULL),
	OK("HEAD", "/v1/requests/r1", "request_get", "r1"),
	OK("HEAD", "/v1/requests/r1/tool-calls/c1", "tool_call_get", "r1", "c1"),
	NOT_ALLOWED("HEAD", "/v1/requests/r1/tool-calls/c1/claim", "POST"),
};

static void test_routes_head_is_served_where_get_is(void **state)
{
	(void)state;
	run_rows("head", head_rows, COUNT(head_rows));
}

static void test_routes_other_methods_are_not_allowed_with_allow(void **state)
{
	(void)state;
	run_rows("not allowed", not_allowed_rows, COUNT(not_allowed_rows));
}

/* --- ids ---------------------------------------------------------------- */

/* Ids the contract allows: [A-Za-z0-9._~-], 1..128 bytes once decoded. */
static const struct row valid_id_rows[] = {
	OK("POST", "/v1/requests/" ID128 "/failover", "failover", ID128),
	OK("POST", "/v1/requests/" PCT128 "/failover", "failover", A128),
	OK("POST", "/v1/requests/aZ09._~-/attempts", "attempt_create", "aZ09._~-"),
	OK("POST", "/v1/requests/r%2D1/tool-calls/c%7e2/claim", "tool_call_claim", "r-1", "c~2"),
	OK("GET", "/v1/requests/%41%62%63", "request_get", "Abc"),
	/* "." and ".." are ids like any other: no dot segment is resolved */
	OK("POST", "/v1/requests/./attempts", "attempt_create", "."),
	OK("POST", "/v1/requests/../attempts/../finish", "attempt_finish", "..", ".."),
	OK("GET", "/v1/requests/%2E%2E/tool-calls/%2e", "tool_call_get", "..", "."),
	/* a literal word is an id where an id stands */
	OK("GET", "/v1/requests/tool-calls/tool-calls/claim", "tool_call_get", "tool-calls",
	   "claim"),
	OK("POST", "/v1/requests/attempts/attempts", "attempt_create", "attempts"),
	/* the first route that matches with this method wins (table order) */
	OK("POST", "/v1/requests/a/tool-calls/tool-calls/claim", "tool_call_claim", "a",
	   "tool-calls"),
};

static void test_routes_valid_ids_are_decoded(void **state)
{
	(void)state;
	run_rows("valid id", valid_id_rows, COUNT(valid_id_rows));
}

static const struct row invalid_id_rows[] = {
	/* too long, on the wire or once decoded */
	INVALID("POST", "/v1/requests/" ID128 "x/failover", "request_id"),
	INVALID("POST", "/v1/requests/" PCT128 "%41/failover", "request_id"),
	INVALID("POST", "/v1/requests/r1/tool-calls/" ID128 "x/claim", "tool_call_id"),
	INVALID("POST", "/v1/requests/r1/attempts/" ID128 "x/renew", "attempt_id"),
	/* characters outside the set, raw or escaped */
	INVALID("POST", "/v1/requests/bad:id/attempts", "request_id"),
	INVALID("POST", "/v1/requests/r%3A1/attempts", "request_id"),
	INVALID("POST", "/v1/requests/r1/attempts/a@1/renew", "attempt_id"),
	INVALID("POST", "/v1/requests/r1/tool-calls/c%201/claim", "tool_call_id"),
	INVALID("POST", "/v1/requests/r1/tool-calls/c 1/claim", "tool_call_id"),
	INVALID("POST", "/v1/requests/r+1/failover", "request_id"), /* "+" is not a space */
	INVALID("POST", "/v1/requests/r%2B1/failover", "request_id"),
	INVALID("POST", "/v1/requests/caf\xc3\xa9/failover", "request_id"),
	INVALID("POST", "/v1/requests/caf%C3%A9/failover", "request_id"),
	INVALID("POST", "/v1/requests/r%001/failover", "request_id"), /* a NUL inside */
	INVALID("GET", "/v1/requests/r1?x", "request_id"),            /* the "?" is in the id */
	/* a "/" inside an id, escaped or not, is an invalid id and never a separator */
	INVALID("POST", "/v1/requests/r%2F1/failover", "request_id"),
	INVALID("POST", "/v1/requests/r%2f1/failover", "request_id"),
	INVALID("POST", "/v1/requests/a/b/failover", "request_id"),
	INVALID("GET", "/v1/requests/a/b/tool-calls/c1", "request_id"),
	INVALID("POST", "/v1/requests/r1/tool-calls/c/d/claim", "tool_call_id"),
	INVALID("POST", "/v1/requests/r1/attempts/a/b/renew", "attempt_id"),
	INVALID("GET", "/v1/requests/r1/tool-calls/c%2Fd", "tool_call_id"),
	/* the GET of call "claim" in request "a/tool-calls" */
	INVALID("GET", "/v1/requests/a/tool-calls/tool-calls/claim", "request_id"),
	/* empty */
	INVALID("POST", "/v1/requests//attempts", "request_id"),
	INVALID("POST", "/v1/requests/r1/tool-calls//claim", "tool_call_id"),
	INVALID("POST", "/v1/requests/r1/attempts//finish", "attempt_id"),
	/* malformed escapes */
	INVALID("POST", "/v1/requests/r%/failover", "request_id"),
	INVALID("POST", "/v1/requests/r%4/failover", "request_id"),
	INVALID("POST", "/v1/requests/r%zz/failover", "request_id"),
	INVALID("POST", "/v1/requests/r%G0/failover", "request_id"),
	INVALID("POST", "/v1/requests/r%%41/failover", "request_id"),
	/* two bad ids: the first is named */
	INVALID("POST", "/v1/requests/x:1/tool-calls/y:2/claim", "request_id"),
	INVALID("POST", "/v1/requests/r1/tool-calls/y:2/claim", "tool_call_id"),
	INVALID("POST", "/v1/requests/x:1/attempts/y:2/cancel", "request_id"),
};

static void test_routes_invalid_ids_name_the_parameter(void **state)
{
	(void)state;
	run_rows("invalid id", invalid_id_rows, COUNT(invalid_id_rows));
}

/* --- trailing slashes --------------------------------------------------------- */

static const struct row trailing_slash_rows[] = {
	NOT_FOUND("GET", "/healthz/"),
	NOT_FOUND("GET", "/v1/tool-calls/"),
	NOT_FOUND("GET", "/v1/requests/r1/"),
	NOT_FOUND("GET", "/v1/requests/r1/tool-calls/c1/"),
	NOT_FOUND("POST", "/v1/requests/r1/attempts/"),
	NOT_FOUND("POST", "/v1/requests/r1/tool-calls/c1/claim/"),
	NOT_FOUND("POST", "/v1/requests/r1/failover/"),
	/* the one exception: "/v1/requests/" is GET /v1/requests/{rid} with an empty id */
	INVALID("GET", "/v1/requests/", "request_id"),
	NOT_ALLOWED("POST", "/v1/requests/", "GET, HEAD"),
};

static void test_routes_trailing_slashes(void **state)
{
	(void)state;
	run_rows("trailing slash", trailing_slash_rows, COUNT(trailing_slash_rows));
}

/* --- the segment limit ---------------------------------------------------------- */

/* Writes "/v1/requests" + @n times "/a" + "/failover" into @buf. */
static void deep_failover(char *buf, size_t len, unsigned n)
{
	size_t o = (size_t)snprintf(buf, len, "/v1/requests");

	for (unsigned i = 0; i < n; i++)
		o += (size_t)snprintf(buf + o, len - o, "/a");
	snprintf(buf + o, len - o, "/failover");
}

/* Segments of the rid of a failover path, and what comes of it: 16 segments match. */
static const struct {
	unsigned rid_segments;
	enum api_match want;
} depth_rows[] = {
	{1, API_MATCH_OK},          {2, API_MATCH_INVALID_ID}, /* "a/a" */
	{13, API_MATCH_INVALID_ID}, /* 16 segments in all: still split, so an invalid id */
	{14, API_MATCH_NOT_FOUND},  /* 17: too deep to split, so no path */
	{40, API_MATCH_NOT_FOUND},
};

static void test_routes_too_many_segments_are_not_found(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(depth_rows); i++) {
		char path[256];
		struct row r = {"POST", path, depth_rows[i].want, NULL, {NULL}, NULL, NULL};

		deep_failover(path, sizeof(path), depth_rows[i].rid_segments);
		if (r.want == API_MATCH_OK) {
			r.name = "failover";
			r.params[0] = "a";
		}
		if (r.want == API_MATCH_INVALID_ID)
			r.bad = "request_id";
		if (!check_row("depth", i, &r))
			fail_msg("depth row %zu failed", i);
	}
}

/* 16 empty segments split; 17 do not: neither is a path. */
static const struct row slash_rows[] = {
	NOT_FOUND("GET", "////////////////"),
	NOT_FOUND("GET", "/////////////////"),
};

static void test_routes_only_slashes_are_not_found(void **state)
{
	(void)state;
	run_rows("slashes", slash_rows, COUNT(slash_rows));
}

/* --- api_routes_percent_decode ------------------------------------------------ */

static const struct {
	const char *in;
	size_t len;      /* bytes of @in decoded */
	const char *out; /* NULL: malformed */
	size_t out_len;
} decode_rows[] = {
	{"", 0, "", 0},
	{"abc", 3, "abc", 3},
	{"%41", 3, "A", 1},
	{"%4a%4A", 6, "JJ", 2}, /* either case of hex digit */
	{"a%2Fb", 5, "a/b", 3},
	{"%2541", 5, "%41", 3}, /* one pass: "%25" gives "%", not an escape */
	{"+", 1, "+", 1},       /* no form decoding */
	{"%20", 3, " ", 1},
	{"%00", 3, "\0", 1}, /* a NUL inside: the length says so */
	{"a%00b", 5, "a\0b", 3},
	{"%ff%FF", 6, "\xff\xff", 2},
	{"%", 1, NULL, 0},
	{"%4", 2, NULL, 0},
	{"a%", 2, NULL, 0},
	{"%g1", 3, NULL, 0},
	{"%1g", 3, NULL, 0},
	{"%%41", 4, NULL, 0},
	{"% 41", 4, NULL, 0},
	{"%-1", 3, NULL, 0},
	/* only @len bytes are read */
	{"ab%41", 2, "ab", 2},
	{"%41", 2, NULL, 0}, /* the escape is cut by @len, not completed past it */
	{"a%41b", 4, "aA", 2},
	{"%41%", 3, "A", 1},
};

static void test_routes_percent_decode(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(decode_rows); i++) {
		size_t out_len = 12345;
		char *out =
			api_routes_percent_decode(decode_rows[i].in, decode_rows[i].len, &out_len);

		if (decode_rows[i].out == NULL) {
			if (out != NULL)
				fail_msg("row %zu (\"%s\", %zu): decoded, want malformed", i,
					 decode_rows[i].in, decode_rows[i].len);
			continue;
		}
		if (out == NULL)
			fail_msg("row %zu (\"%s\", %zu): malformed, want decoded", i,
				 decode_rows[i].in, decode_rows[i].len);
		if (out_len != decode_rows[i].out_len)
			fail_msg("row %zu (\"%s\"): %zu bytes, want %zu", i, decode_rows[i].in,
				 out_len, decode_rows[i].out_len);
		assert_memory_equal(out, decode_rows[i].out, out_len);
		assert_int_equal(out[out_len], '\0'); /* NUL-terminated */
		free(out);
	}
}

static void test_routes_percent_decode_length_is_optional(void **state)
{
	char *out = api_routes_percent_decode("a%42c", 5, NULL);

	(void)state;
	assert_non_null(out);
	assert_string_equal(out, "aBc");
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_routes_every_route_matches),
		cmocka_unit_test(test_routes_every_route_has_a_row),
		cmocka_unit_test(test_routes_roles_and_handlers),
		cmocka_unit_test(test_routes_query_keys),
		cmocka_unit_test(test_routes_unknown_paths_are_not_found),
		cmocka_unit_test(test_routes_other_methods_are_not_allowed_with_allow),
		cmocka_unit_test(test_routes_head_is_served_where_get_is),
		cmocka_unit_test(test_routes_valid_ids_are_decoded),
		cmocka_unit_test(test_routes_invalid_ids_name_the_parameter),
		cmocka_unit_test(test_routes_trailing_slashes),
		cmocka_unit_test(test_routes_too_many_segments_are_not_found),
		cmocka_unit_test(test_routes_only_slashes_are_not_found),
		cmocka_unit_test(test_routes_percent_decode),
		cmocka_unit_test(test_routes_percent_decode_length_is_optional),
	};

	return cmocka_run_group_tests_name("routes", tests, NULL, NULL);
}
