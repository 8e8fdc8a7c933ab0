/*
 * api/service/review.c: incident review: one request with its attempts, calls and
 * history (GET /v1/requests/{rid}), and a tenant's requests, newest first
 * (GET /v1/requests). Both only read.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/service/review.h"

#include "api/service/input.h"
#include "api/service/reply.h"
#include "api/service/toolcalls.h"
#include "ledger/common/jsonw.h"
#include "ledger/core/render.h"

#define MAX_EVENTS 1000 /* events per page of a request's history */
#define DEFAULT_LIMIT 50
#define MAX_LIMIT 1000

/* A non-negative decimal integer filling all of @p s. */
static bool parse_int(const char *s, int64_t *out)
{
	char *end = NULL;
	long long v;

	if (!isdigit((unsigned char)s[0]))
		return false;
	v = strtoll(s, &end, 10);
	if (*end != '\0' || v < 0)
		return false;
	*out = v;
	return true;
}

static enum ledger_err limit_or_reply(struct api_request *req, unsigned *out)
{
	const char *limit = api_input_query(req, "limit");
	int64_t v = 0;

	*out = DEFAULT_LIMIT;
	if (limit == NULL)
		return LEDGER_OK;
	if (!parse_int(limit, &v) || v < 1 || v > MAX_LIMIT) {
		api_reply_invalid_field(req, "limit", "must be an integer from 1 to %d", MAX_LIMIT);
		return LEDGER_ERR_INVALID;
	}
	*out = (unsigned)v;
	return LEDGER_OK;
}

/* --- one request --- */

static enum ledger_err view_parse(struct api_request *req)
{
	const char *cursor = api_input_query(req, "events_cursor");
	int64_t *after = api_input_alloc_or_reply(req, sizeof(*after));
	char raw[32];

	if (after == NULL)
		return LEDGER_ERR_NOMEM;
	if (cursor != NULL &&
	    (api_input_cursor_decode(cursor, raw, sizeof(raw)) <= 0 || !parse_int(raw, after))) {
		api_reply_invalid_field(req, "events_cursor", "is not a cursor this request gave");
		return LEDGER_ERR_INVALID;
	}
	req->job.op.kind = LEDGER_STORE_REQUEST_VIEW;
	req->job.op.in.view.after_seq = *after;
	req->job.op.in.view.max_events = MAX_EVENTS;
	return LEDGER_OK;
}

static void write_attempt(struct ledger_jsonw *w, const struct ledger_attempt *a,
			  int64_t elapsed_ms)
{
	ledger_jsonw_object_begin(w);
	ledger_jsonw_key(w, "attempt_id");
	ledger_jsonw_string(w, a->attempt_id);
	ledger_jsonw_key(w, "epoch");
	ledger_jsonw_int(w, a->epoch);
	ledger_jsonw_key(w, "replica");
	ledger_jsonw_string(w, a->replica[0] != '\0' ? a->replica : NULL);
	ledger_jsonw_key(w, "gateway");
	ledger_jsonw_string(w, a->gateway[0] != '\0' ? a->gateway : NULL);
	ledger_jsonw_key(w, "model_revision");
	ledger_jsonw_string(w, a->model_revision[0] != '\0' ? a->model_revision : NULL);
	ledger_jsonw_key(w, "state");
	ledger_jsonw_string(w, ledger_attempt_state_name(a->state));
	ledger_jsonw_key(w, "lease_ms_left");
	ledger_jsonw_int(w, a->lease_ms_left > elapsed_ms ? a->lease_ms_left - elapsed_ms : 0);
	ledger_jsonw_key(w, "delivered_output_tokens");
	ledger_jsonw_int(w, a->delivered_output_tokens);
	ledger_jsonw_key(w, "retry");
	ledger_jsonw_bool(w, a->is_retry);
	ledger_jsonw_key(w, "created_at");
	ledger_jsonw_string(w, a->created_at);
	ledger_jsonw_key(w, "ended_at");
	ledger_jsonw_string(w, a->ended_at[0] != '\0' ? a->ended_at : NULL);
	ledger_jsonw_object_end(w);
}

static void write_event(struct ledger_jsonw *w, const struct ledger_event *e)
{
	ledger_jsonw_object_begin(w);
	ledger_jsonw_key(w, "seq");
	ledger_jsonw_int(w, e->seq);
	ledger_jsonw_key(w, "at");
	ledger_jsonw_string(w, e->at);
	ledger_jsonw_key(w, "type");
	ledger_jsonw_string(w, e->type);
	if (e->attempt_id[0] != '\0') {
		ledger_jsonw_key(w, "attempt_id");
		ledger_jsonw_string(w, e->attempt_id);
	}
	if (e->tool_call_id[0] != '\0') {
		ledger_jsonw_key(w, "tool_call_id");
		ledger_jsonw_string(w, e->tool_call_id);
	}
	ledger_jsonw_key(w, "detail");
	ledger_jsonw_raw(w, e->detail, strlen(e->detail));
	ledger_jsonw_object_end(w);
}

static void view_answer(struct api_request *req, const struct ledger_store_result *res)
{
	const struct ledger_request_view v = res->u.view;
	struct ledger_jsonw w;

	if (!v.request.exists) {
		api_reply_error(req, 404, "not_found", "no such request");
		return;
	}
	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "request");
	ledger_render_request(&w, req->params[0], &v.request, v.client_error);
	ledger_jsonw_key(&w, "attempts");
	ledger_jsonw_array_begin(&w);
	for (size_t i = 0; i < v.nattempts; i++)
		write_attempt(&w, &v.attempts[i], api_reply_elapsed_ms(res));
	ledger_jsonw_array_end(&w);
	ledger_jsonw_key(&w, "tool_calls");
	ledger_jsonw_array_begin(&w);
	for (size_t i = 0; i < v.ncalls; i++)
		api_toolcalls_write_call(&w, v.calls[i].request_id, v.calls[i].tool_call_id,
					 &v.calls[i].call, false, api_reply_elapsed_ms(res));
	ledger_jsonw_array_end(&w);
	ledger_jsonw_key(&w, "events");
	ledger_jsonw_array_begin(&w);
	for (size_t i = 0; i < v.nevents; i++)
		write_event(&w, &v.events[i]);
	ledger_jsonw_array_end(&w);
	if (v.more_events) {
		char seq[24], cursor[40];

		snprintf(seq, sizeof(seq), "%lld", (long long)v.events[v.nevents - 1].seq);
		api_input_cursor_encode(seq, strlen(seq), cursor, sizeof(cursor));
		ledger_jsonw_key(&w, "next_events_cursor");
		ledger_jsonw_string(&w, cursor);
	}
	ledger_jsonw_object_end(&w);
}

const struct api_handler api_review_request = {.parse = view_parse, .answer = view_answer};

/* --- a tenant's requests --- */

struct list_input {
	struct ledger_request_filter filter;
	char status[16];
	char since[40];
	char cursor_id[LEDGER_ID_MAX + 1];
	unsigned limit; /* the page's */
};

/* The decimal value of the @p n digits at @p s (already checked to be digits). */
static int digits(const char *s, int n)
{
	int v = 0;

	while (n-- > 0)
		v = v * 10 + (*s++ - '0');
	return v;
}

static bool is_leap(int y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/*
 * RFC 3339 with a zone, e.g. 2026-11-30T01:29:43Z, with a fraction of a
 * second and an offset allowed: the shape, then every field in its range
 * (a day that month has; a leap second), so that the database is never
 * handed a time it refuses.
 */
static bool is_rfc3339(const char *s)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd";
	static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int year, month, day;
	size_t i;

	for (i = 0; shape[i] != '\0'; i++) {
		if (shape[i] == 'd' ? !isdigit((unsigned char)s[i])
				    : (s[i] != shape[i] && !(shape[i] == 'T' && s[i] == 't')))
			return false;
	}
	year = digits(s, 4);
	month = digits(s + 5, 2);
	day = digits(s + 8, 2);
	if (year < 1 || month < 1 || month > 12 || day < 1 ||
	    day > days[month - 1] + (month == 2 && is_leap(year)) || digits(s + 11, 2) > 23 ||
	    digits(s + 14, 2) > 59 || digits(s + 17, 2) > 60)
		return false;
	if (s[i] == '.') {
		size_t first = ++i;

		while (isdigit((unsigned char)s[i]))
			i++;
		if (i == first || i - first > 9)
			return false;
	}
	if ((s[i] == 'Z' || s[i] == 'z') && s[i + 1] == '\0')
		return true;
	return (s[i] == '+' || s[i] == '-') && isdigit((unsigned char)s[i + 1]) &&
	       isdigit((unsigned char)s[i + 2]) && s[i + 3] == ':' &&
	       isdigit((unsigned char)s[i + 4]) && isdigit((unsigned char)s[i + 5]) &&
	       s[i + 6] == '\0' && digits(s + i + 1, 2) <= 23 && digits(s + i + 4, 2) <= 59;
}

/* The latest creation time a cursor can name: 9999-12-31T23:59:59.999999Z, in µs. */
#define CURSOR_MAX_US 253402300799999999LL

static enum ledger_err list_parse(struct api_request *req)
{
	const char *status = api_input_query(req, "status");
	const char *since = api_input_query(req, "since");
	const char *cursor = api_input_query(req, "cursor");
	const char *attention = api_input_query(req, "attention");
	struct list_input *in = api_input_alloc_or_reply(req, sizeof(*in));
	enum ledger_request_status parsed;

	if (in == NULL)
		return LEDGER_ERR_NOMEM;
	if (status != NULL) {
		if (ledger_attempt_request_status_parse(status, &parsed) != 0) {
			api_reply_invalid_field(req, "status",
						"must be open, completed, failed, terminated or "
						"abandoned");
			return LEDGER_ERR_INVALID;
		}
		snprintf(in->status, sizeof(in->status), "%s", status);
		in->filter.status = in->status;
	}
	if (since != NULL) {
		if (strlen(since) >= sizeof(in->since) || !is_rfc3339(since)) {
			api_reply_invalid_field(
				req, "since",
				"must be an RFC 3339 time, e.g. 2026-11-30T01:29:43Z");
			return LEDGER_ERR_INVALID;
		}
		snprintf(in->since, sizeof(in->since), "%s", since);
		in->filter.since = in->since;
	}
	if (attention != NULL) {
		if (strcmp(attention, "true") != 0 && strcmp(attention, "false") != 0) {
			api_reply_invalid_field(req, "attention", "must be true or false");
			return LEDGER_ERR_INVALID;
		}
		in->filter.attention_only = strcmp(attention, "true") == 0;
	}
	if (cursor != NULL) {
		char raw[LEDGER_ID_MAX + 32];
		char *colon = NULL;

		if (api_input_cursor_decode(cursor, raw, sizeof(raw)) <= 0 ||
		    (colon = strchr(raw, ':')) == NULL) {
			api_reply_invalid_field(req, "cursor", "is not a cursor this list gave");
			return LEDGER_ERR_INVALID;
		}
		*colon = '\0';
		if (!parse_int(raw, &in->filter.cursor_created_us) ||
		    in->filter.cursor_created_us > CURSOR_MAX_US ||
		    !ledger_id_valid(colon + 1, strlen(colon + 1))) {
			api_reply_invalid_field(req, "cursor", "is not a cursor this list gave");
			return LEDGER_ERR_INVALID;
		}
		snprintf(in->cursor_id, sizeof(in->cursor_id), "%s", colon + 1);
		in->filter.cursor_request_id = in->cursor_id;
		in->filter.has_cursor = true;
	}
	if (limit_or_reply(req, &in->filter.limit) != LEDGER_OK)
		return LEDGER_ERR_INVALID;
	in->limit = in->filter.limit;
	in->filter.limit = in->limit + 1; /* one more tells whether a next page exists */
	req->job.op.kind = LEDGER_STORE_LIST_REQUESTS;
	req->job.op.in.requests = &in->filter;
	return LEDGER_OK;
}

/* The API's names of enum ledger_attention's bits, in its order. */
static const struct {
	unsigned bit;
	const char *name;
} attention_names[] = {
	{LEDGER_ATTENTION_OUTCOME_UNKNOWN, "outcome_unknown"},
	{LEDGER_ATTENTION_ZOMBIE_REFUSED, "zombie_refused"},
	{LEDGER_ATTENTION_TERMINATED, "terminated"},
	{LEDGER_ATTENTION_DIVERGENCE, "divergence"},
	{LEDGER_ATTENTION_DUPLICATE_EXECUTION, "duplicate_execution"},
};

/* A request of the list: the request object and why it needs attention. */
static void write_listed(struct ledger_jsonw *w, const struct ledger_listed_request *item)
{
	ledger_jsonw_object_begin(w);
	ledger_render_request_members(w, item->request_id, &item->request, item->client_error);
	ledger_jsonw_key(w, "attention");
	ledger_jsonw_array_begin(w);
	for (size_t i = 0; i < sizeof(attention_names) / sizeof(attention_names[0]); i++) {
		if (item->attention & attention_names[i].bit)
			ledger_jsonw_string(w, attention_names[i].name);
	}
	ledger_jsonw_array_end(w);
	ledger_jsonw_object_end(w);
}

static void list_answer(struct api_request *req, const struct ledger_store_result *res)
{
	const struct list_input *in = req->input;
	const struct ledger_listed_request *items = res->u.requests.items;
	size_t n = res->u.requests.count;
	unsigned limit = in->limit;
	struct ledger_jsonw w;

	api_reply_begin(req, &w, 200);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "items");
	ledger_jsonw_array_begin(&w);
	for (size_t i = 0; i < n && i < limit; i++)
		write_listed(&w, &items[i]);
	ledger_jsonw_array_end(&w);
	ledger_jsonw_key(&w, "next_cursor");
	if (n > limit) {
		char raw[LEDGER_ID_MAX + 32], cursor[2 * (LEDGER_ID_MAX + 32)];
		int len = snprintf(raw, sizeof(raw), "%lld:%s",
				   (long long)items[limit - 1].created_us,
				   items[limit - 1].request_id);

		api_input_cursor_encode(raw, (size_t)len, cursor, sizeof(cursor));
		ledger_jsonw_string(&w, cursor);
	} else {
		ledger_jsonw_null(&w);
	}
	ledger_jsonw_object_end(&w);
}

const struct api_handler api_review_list = {.parse = list_parse, .answer = list_answer};
