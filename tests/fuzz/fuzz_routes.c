/*
 * tests/fuzz/fuzz_routes.c: libFuzzer target for the router (api/service/routes.c).
 * An input is "METHOD PATH" (no space: a GET of the whole input). The
 * matcher must agree with the reference below, which reads the same table
 * as text: the route, the answer (a match, 404, 405 with its Allow, or an
 * invalid id and which), every decoded parameter, and those are valid ids.
 * api_routes_percent_decode() is held to a reference decoder as well.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/service/attempts.h"
#include "api/service/ops.h"
#include "api/service/review.h"
#include "api/service/routes.h"
#include "api/service/toolcalls.h"
#include "api/service/whoami.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant: say which, and abort so libFuzzer keeps the input. */
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_routes: %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/*
 * The table names its handlers only to hand them back: stand-ins keep the
 * target free of the handlers, the store and the server.
 */
const struct api_handler api_toolcalls_claim = {0};
const struct api_handler api_toolcalls_renew = {0};
const struct api_handler api_toolcalls_complete = {0};
const struct api_handler api_toolcalls_release = {0};
const struct api_handler api_toolcalls_resolve = {0};
const struct api_handler api_toolcalls_get = {0};
const struct api_handler api_toolcalls_list = {0};
const struct api_handler api_review_request = {0};
const struct api_handler api_review_list = {0};
const struct api_handler api_whoami = {0};
const struct api_handler api_attempts_create = {0};
const struct api_handler api_attempts_renew = {0};
const struct api_handler api_attempts_deliver = {0};
const struct api_handler api_attempts_cancel = {0};
const struct api_handler api_attempts_cancel_ack = {0};
const struct api_handler api_attempts_finish = {0};
const struct api_handler api_attempts_failover = {0};
const struct api_handler api_attempts_client = {0};
const struct api_handler api_answers_get = {0};
const struct api_handler api_ops_healthz = {0};
const struct api_handler api_ops_readyz = {0};
const struct api_handler api_ops_metrics = {0};

/* routes.c splits a path into at most this many segments; a longer one is no route's. */
#define MAX_SEGMENTS 16

struct span {
	const char *s;
	size_t len;
};

/* docs/api.md: 1 to 128 bytes of [A-Za-z0-9._~-]. */
static bool valid_id(const char *s, size_t len)
{
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				       "0123456789._~-";

	if (len < 1 || len > 128)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] == '\0' || strchr(alphabet, s[i]) == NULL)
			return false;
	return true;
}

/* %XX, either case, is one byte; any other '%' makes the text malformed (NULL). */
static char *ref_decode(const char *s, size_t len, size_t *out_len)
{
	static const char hex[] = "0123456789abcdef0123456789ABCDEF";
	char *out = malloc(len + 1);
	size_t n = 0;

	CHECK(out != NULL);
	for (size_t i = 0; i < len; i++) {
		const char *hi = NULL, *lo = NULL;

		if (s[i] != '%') {
			out[n++] = s[i];
			continue;
		}
		if (len - i >= 3) {
			hi = memchr(hex, s[i + 1], 32);
			lo = memchr(hex, s[i + 2], 32);
		}
		if (hi == NULL || lo == NULL) {
			free(out);
			return NULL;
		}
		out[n++] = (char)(((hi - hex) % 16) * 16 + (lo - hex) % 16);
		i += 2;
	}
	out[n] = '\0';
	*out_len = n;
	return out;
}

/* The end of the segment that starts at @p s: the next '/' or the NUL. */
static const char *seg_end(const char *s)
{
	while (*s != '\0' && *s != '/')
		s++;
	return s;
}

/*
 * Matches the pattern from @p p on against the path from @p u on (both at
 * a '/' or their end). A parameter is one path segment when it is the
 * pattern's last, else one or more segments, the fewest that let the rest
 * match: an id holding "/" is then found, and refused as an id.
 */
static bool ref_match(const char *p, const char *u, struct span *params, unsigned np)
{
	const char *ps, *pe, *us, *ue;

	if (*p == '\0')
		return *u == '\0';
	if (*u == '\0')
		return false;
	ps = p + 1, pe = seg_end(ps);
	us = u + 1, ue = seg_end(us);
	if (pe - ps >= 2 && ps[0] == '{' && pe[-1] == '}') {
		if (*pe == '\0') {
			params[np] = (struct span){us, (size_t)(ue - us)};
			return *ue == '\0';
		}
		for (const char *e = ue; *e == '/'; e = seg_end(e + 1)) {
			params[np] = (struct span){us, (size_t)(e - us)};
			if (ref_match(pe, e, params, np + 1))
				return true;
		}
		return false;
	}
	return pe - ps == ue - us && memcmp(ps, us, (size_t)(pe - ps)) == 0 &&
	       ref_match(pe, ue, params, np);
}

/* The name the API gives a parameter in an invalid_id answer. */
static const char *ref_param_name(const char *pattern, unsigned k)
{
	const char *p = pattern;

	for (unsigned seen = 0; (p = strchr(p, '{')) != NULL; p++) {
		if (seen++ < k)
			continue;
		if (strncmp(p, "{rid}", 5) == 0)
			return "request_id";
		if (strncmp(p, "{cid}", 5) == 0)
			return "tool_call_id";
		if (strncmp(p, "{aid}", 5) == 0)
			return "attempt_id";
		break;
	}
	CHECK(!"a parameter the API has no name for");
	return NULL;
}

struct result {
	enum api_match match;
	const struct api_route *route;
	char *params[API_MAX_PARAMS];
	const char *allow, *bad;
};

static void ref_route(const char *method, const char *path, struct result *r)
{
	struct span spans[API_MAX_PARAMS + 1];
	bool get = false, post = false;
	unsigned slashes = 0;

	memset(r, 0, sizeof(*r));
	r->match = API_MATCH_NOT_FOUND;
	for (const char *s = path; *s != '\0'; s++)
		slashes += *s == '/';
	if (path[0] != '/' || slashes > MAX_SEGMENTS)
		return;
	for (size_t i = 0; i < api_routes_count; i++) {
		const struct api_route *route = &api_routes[i];
		unsigned n = 0;

		memset(spans, 0, sizeof(spans));
		if (!ref_match(route->pattern, path, spans, 0))
			continue;
		/* HEAD is GET's (RFC 9110 9.3.2). */
		if (strcmp(route->method, method) != 0 &&
		    !(strcmp(method, "HEAD") == 0 && strcmp(route->method, "GET") == 0)) {
			get = get || strcmp(route->method, "GET") == 0;
			post = post || strcmp(route->method, "POST") == 0;
			continue;
		}
		r->route = route;
		r->match = API_MATCH_OK;
		for (const char *p = route->pattern; (p = strchr(p, '{')) != NULL; p++)
			n++;
		CHECK(n <= API_MAX_PARAMS);
		for (unsigned k = 0; k < n; k++) {
			size_t len = 0;

			r->params[k] = ref_decode(spans[k].s, spans[k].len, &len);
			if (r->params[k] == NULL || !valid_id(r->params[k], len)) {
				r->match = API_MATCH_INVALID_ID;
				r->bad = ref_param_name(route->pattern, k);
				break;
			}
		}
		return;
	}
	if (get || post) {
		r->match = API_MATCH_METHOD_NOT_ALLOWED;
		r->allow = get && post ? "GET, HEAD, POST" : get ? "GET, HEAD" : "POST";
	}
}

static bool same_str(const char *a, const char *b)
{
	return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static const char *shown(const char *s)
{
	return s != NULL ? s : "(none)";
}

static void check_decode(const char *s, size_t len)
{
	size_t got_len = 12345, want_len = 0;
	char *got = api_routes_percent_decode(s, len, &got_len);
	char *want = ref_decode(s, len, &want_len);

	CHECK((got == NULL) == (want == NULL));
	if (got != NULL) {
		CHECK(got_len == want_len && memcmp(got, want, want_len) == 0);
		CHECK(got[got_len] == '\0');
	}
	free(got);
	free(want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	const char *space = memchr(text, ' ', size);
	char *method = NULL, *path = NULL;
	struct result got, want;

	if (space != NULL) {
		method = strndup(text, (size_t)(space - text));
		path = strndup(space + 1, size - (size_t)(space - text) - 1);
		check_decode(space + 1, size - (size_t)(space - text) - 1);
	} else {
		method = strdup("GET");
		path = strndup(text, size);
		check_decode(text, size);
	}
	CHECK(method != NULL && path != NULL);

	memset(&got, 0, sizeof(got));
	got.match = api_routes_match(method, path, &got.route, got.params, &got.allow, &got.bad);
	ref_route(method, path, &want);
	if (got.match != want.match || got.route != want.route ||
	    !same_str(got.allow, want.allow) || !same_str(got.bad, want.bad))
		fprintf(stderr,
			"fuzz_routes: %s %s: answer %d route %s allow %s bad %s;"
			" the reference: %d %s %s %s\n",
			method, path, got.match, got.route ? got.route->name : "(none)",
			shown(got.allow), shown(got.bad), want.match,
			want.route ? want.route->name : "(none)", shown(want.allow),
			shown(want.bad));
	CHECK(got.match == want.match);
	CHECK(got.route == want.route);
	CHECK(same_str(got.allow, want.allow));
	CHECK(same_str(got.bad, want.bad));
	if (got.match == API_MATCH_OK) {
		for (unsigned k = 0; k < API_MAX_PARAMS; k++) {
			CHECK(same_str(got.params[k], want.params[k]));
			if (got.params[k] != NULL)
				CHECK(valid_id(got.params[k], strlen(got.params[k])));
		}
	}

	for (unsigned k = 0; k < API_MAX_PARAMS; k++) {
		free(got.params[k]);
		free(want.params[k]);
	}
	free(method);
	free(path);
	return 0;
}
