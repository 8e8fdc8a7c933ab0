/*
 * sdk/programs/ledgerctl/timeline.c: `ledgerctl show` in words. The history of a
 * request is what an incident review is about, so each event type gets a
 * phrase built from its detail object (docs/api.md, "The history of a
 * request"), with what must be said first and what may be left out last.
 */
#include "sdk/programs/ledgerctl/timeline.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdk/programs/ledgerctl/field.h"
#include "sdk/programs/ledgerctl/text.h"

#define WIDTH LEDGERCTL_TEXT_WIDTH
#define DETAIL_MIN 40 /* the DETAIL column is never narrower than this */
#define TIME_MIN 12   /* HH:MM:SS.mmm, in the attempts and tool calls tables */

/* --- one event's detail --- */

struct detail {
	struct ledger_buf *out;
	size_t room; /* characters per line */
	size_t used; /* characters on the current line */
	bool empty;  /* nothing said yet */
};

/*
 * Says one clause, after @p sep unless it is the first. A clause that does
 * not fit on the current line starts a new one, unless it is @p optional:
 * then it is left out, since the event's own words come first.
 */
static void say(struct detail *d, bool optional, const char *sep, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void say(struct detail *d, bool optional, const char *sep, const char *fmt, ...)
{
	struct ledger_buf text = LEDGER_BUF_INIT;
	char *raw = NULL;
	size_t w, wsep, trimmed;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&raw, fmt, ap);
	va_end(ap);
	if (n < 0) {
		raw = NULL;
		d->out->oom = true;
		goto out;
	}
	/* one line of printable text, whatever the values held */
	ledgerctl_text_put(&text, raw, (size_t)n, SIZE_MAX, LEDGERCTL_TEXT_AS_IS);
	w = ledgerctl_text_width(text.data, text.len);
	if (d->empty)
		sep = "";
	wsep = ledgerctl_text_width(sep, strlen(sep));
	if (d->used + wsep + w <= d->room) {
		ledger_buf_puts(d->out, sep);
		ledger_buf_append(d->out, text.data, text.len);
		d->used += wsep + w;
	} else if (optional) {
		goto out;
	} else {
		if (!d->empty) {
			/* the separator's punctuation stays on the line it closes */
			trimmed = strlen(sep);
			while (trimmed > 0 && sep[trimmed - 1] == ' ')
				trimmed--;
			if (d->used + trimmed <= d->room)
				ledger_buf_append(d->out, sep, trimmed);
			ledger_buf_putc(d->out, '\n');
		}
		ledgerctl_text_put(d->out, text.data, text.len, d->room, LEDGERCTL_TEXT_AS_IS);
		d->used = w < d->room ? w : d->room;
	}
	d->empty = false;
out:
	if (text.oom)
		d->out->oom = true;
	ledger_buf_free(&text);
	free(raw);
}

static const char *or_q(const char *s)
{
	return s != NULL ? s : "?";
}

/* The non-negative integer at @p key as text, or "?". */
static const char *num(const struct ledger_json_value *obj, const char *key, char buf[24])
{
	uint64_t v = 0;

	if (!ledgerctl_field_uint(obj, key, &v))
		return "?";
	snprintf(buf, 24, "%" PRIu64, v);
	return buf;
}

static void say_attempt_created(struct detail *d, const struct ledger_json_value *x,
				const struct ledger_json_value *request)
{
	const char *rev = ledgerctl_field_str(x, "model_revision");
	const char *request_rev = ledgerctl_field_str(request, "model_revision");
	const char *gateway = ledgerctl_field_str(x, "gateway");
	const char *model = ledgerctl_field_str(ledgerctl_field_obj(x, "identity"), "model");
	char e[24], l[24];

	say(d, false, "", "epoch %s, lease %s ms", num(x, "epoch", e), num(x, "lease_ms", l));
	if (ledgerctl_field_true(x, "retry"))
		say(d, false, ", ", "retry");
	if (ledgerctl_field_true(x, "reopened"))
		say(d, false, ", ", "reopened");
	if (gateway != NULL)
		say(d, false, ", ", "gateway %s", gateway);
	if (rev != NULL && (request_rev == NULL || strcmp(rev, request_rev) != 0))
		say(d, true, ", ", "revision %s", rev);
	if (model != NULL)
		say(d, true, ", ", "model %s", model);
}

/* What a router saw of its client (ledgerd's client events), with its counter n. */
static void say_client(struct detail *d, const struct ledger_json_value *x, const char *type)
{
	char n[24], v[24];

	if (strcmp(type, "client_disconnected") == 0) {
		say(d, false, "", "client disconnected");
		if (ledger_json_get(x, "hold_ms") != NULL)
			say(d, false, ", ", "held %s ms", num(x, "hold_ms", v));
	} else if (strcmp(type, "client_resumed") == 0) {
		say(d, false, "", "client resumed");
		if (ledger_json_get(x, "last_event_id") != NULL)
			say(d, false, " ", "after event %s", num(x, "last_event_id", v));
	} else {
		say(d, false, "", "hold ended: no client came back");
	}
	say(d, true, " ", "(n %s)", num(x, "n", n));
}

static void say_reason(struct detail *d, const struct ledger_json_value *x, const char *what)
{
	const char *reason = ledgerctl_field_str(x, "reason");

	say(d, false, "", "%s", what);
	if (reason != NULL)
		say(d, false, ": ", "%s", reason);
}

static void say_finished(struct detail *d, const struct ledger_json_value *x)
{
	const char *reason = ledgerctl_field_str(x, "reason");
	char t[24];

	say(d, false, "", "%s, %s tokens", or_q(ledgerctl_field_str(x, "outcome")),
	    num(x, "delivered_output_tokens", t));
	if (reason != NULL)
		say(d, false, ": ", "%s", reason);
}

static void say_request_status(struct detail *d, const struct ledger_json_value *x)
{
	const char *status = or_q(ledgerctl_field_str(x, "status"));
	const char *cause = ledgerctl_field_str(x, "cause");
	const char *client_error = ledgerctl_field_str(x, "client_error");

	if (strcmp(status, "open") == 0 && cause != NULL && strcmp(cause, "reopened") == 0) {
		say(d, false, "", "request reopened");
		return;
	}
	if (client_error != NULL)
		say(d, false, "", "request %s (%s)", status, client_error);
	else
		say(d, false, "", "request %s", status);
}

static void say_failover(struct detail *d, const struct ledger_json_value *x)
{
	const char *action = or_q(ledgerctl_field_str(x, "action"));
	const char *status = ledgerctl_field_str(x, "request_status_after");
	const char *client_error = ledgerctl_field_str(x, "client_error");
	const char *next = ledgerctl_field_str(x, "next_attempt_id");
	const struct ledger_json_value *in = ledgerctl_field_obj(x, "inputs");
	uint64_t unknown = 0, held = 0, prefill = 0, max_prefill = 0;
	char a[24], m[24], r[24];

	say(d, false, "", "%s -> %s", or_q(ledgerctl_field_str(x, "signal")), action);
	say(d, false, ": ", "source %s", or_q(ledgerctl_field_str(x, "source_state_after")));
	if (strcmp(action, "wait_for_fence") == 0)
		say(d, false, ", ", "retry in %s ms", num(x, "retry_after_ms", r));
	if (strcmp(action, "retry_prefill") == 0) {
		if (next != NULL)
			say(d, false, ", ", "next %s", next);
		else
			say(d, false, ", ", "no next attempt given");
	}
	if (client_error != NULL)
		say(d, false, ", ", "request %s (%s)", or_q(status), client_error);
	else if (status != NULL && strcmp(status, "open") != 0)
		say(d, false, ", ", "request %s", status);
	if (in == NULL)
		return;
	/* the inputs that explain a decision most often, while there is room */
	say(d, true, ", ", "attempts %s/%s", num(in, "attempts", a), num(in, "max_attempts", m));
	if (ledgerctl_field_uint(in, "unknown_tool_calls", &unknown) && unknown > 0)
		say(d, true, ", ", "unknown calls %" PRIu64, unknown);
	if (ledgerctl_field_uint(in, "held_tool_call_ms", &held) && held > 0)
		say(d, true, ", ", "held call %" PRIu64 " ms", held);
	if (ledgerctl_field_uint(in, "retry_prefill_tokens", &prefill) &&
	    ledgerctl_field_uint(in, "max_retry_prefill_tokens", &max_prefill) &&
	    prefill > max_prefill)
		say(d, true, ", ", "prefill %" PRIu64 " > %" PRIu64 " tokens", prefill,
		    max_prefill);
}

static void say_claimed(struct detail *d, const struct ledger_json_value *x, const char *call)
{
	const char *tool = ledgerctl_field_str(x, "tool");
	const char *previous = ledgerctl_field_str(x, "previous_state");
	const char *owner = ledgerctl_field_str(x, "owner");
	char t[24], l[24];

	if (tool != NULL)
		say(d, false, "", "%s %s, token %s", call, tool, num(x, "fencing_token", t));
	else
		say(d, false, "", "%s, token %s", call, num(x, "fencing_token", t));
	if (previous != NULL)
		say(d, false, " ", "(after %s)", previous);
	if (ledgerctl_field_true(x, "tool_dedupes"))
		say(d, false, ", ", "tool dedupes");
	say(d, true, ", ", "lease %s ms", num(x, "lease_ms", l));
	if (owner != NULL)
		say(d, true, ", ", "by %s", owner);
}

/*
 * A completion whose result was kept as its length and SHA-256 only: its
 * later claims were told result_not_kept, which a reviewer must not miss.
 */
static void say_not_kept(struct detail *d, const struct ledger_json_value *x)
{
	const struct ledger_json_value *kept = ledger_json_get(x, "result_kept");
	char n[24];

	if (kept != NULL && kept->type == LEDGER_JSON_FALSE)
		say(d, false, ", ", "result not kept (%s bytes)", num(x, "result_bytes", n));
}

static void say_late(struct detail *d, const struct ledger_json_value *x, const char *call)
{
	const char *previous = ledgerctl_field_str(x, "previous_state");
	char t[24], c[24];

	say(d, false, "", "%s %s from token %s (current %s)", call,
	    or_q(ledgerctl_field_str(x, "outcome")), num(x, "fencing_token", t),
	    num(x, "current_token", c));
	say(d, false, ": ", "late, accepted");
	say_not_kept(d, x);
	if (previous != NULL)
		say(d, true, ", ", "was %s", previous);
}

/* A holder proved a not_executed resolution wrong: said so that no reader misses it. */
static void say_contradiction(struct detail *d, const struct ledger_json_value *x, const char *call,
			      bool duplicate)
{
	char t[24], r[24];

	say(d, false, "",
	    "%s %s: token %s reports %s after it was resolved not_executed "
	    "(token %s)",
	    duplicate ? "DUPLICATE EXECUTION" : "RESOLUTION WRONG", call,
	    num(x, "fencing_token", t), or_q(ledgerctl_field_str(x, "outcome")),
	    num(x, "resolved_token", r));
	if (duplicate)
		say(d, false, "; ",
		    "the key was claimed again since: the effect may have run twice");
}

static void say_released(struct detail *d, const struct ledger_json_value *x, const char *call)
{
	const char *reason = ledgerctl_field_str(x, "reason");
	const char *outcome = ledgerctl_field_str(x, "outcome");
	char t[24];

	say(d, false, "", "%s released, token %s", call, num(x, "fencing_token", t));
	if (reason != NULL)
		say(d, false, ": ", "%s", reason);
	else if (outcome != NULL)
		say(d, false, ": ", "%s%s", outcome,
		    ledgerctl_field_true(x, "retryable") ? ", retryable" : "");
}

static void say_resolved(struct detail *d, const struct ledger_json_value *x, const char *call)
{
	const char *previous = ledgerctl_field_str(x, "previous_state");
	const char *note = ledgerctl_field_str(x, "note");

	say(d, false, "", "%s -> %s by an operator", call,
	    or_q(ledgerctl_field_str(x, "resolution")));
	if (previous != NULL)
		say(d, false, " ", "(was %s)", previous);
	if (note != NULL)
		say(d, false, ": ", "%s", note);
}

static void say_refused(struct detail *d, const struct ledger_json_value *x, const char *call)
{
	const char *op = or_q(ledgerctl_field_str(x, "operation"));
	const char *holder = ledgerctl_field_str(x, "holder_attempt_id");
	const char *holder_owner = ledgerctl_field_str(x, "holder_owner");
	const char *field = ledgerctl_field_str(x, "field");
	const char *attempt_state = ledgerctl_field_str(x, "attempt_state");
	const char *outcome = ledgerctl_field_str(x, "outcome");
	const char *resolution = ledgerctl_field_str(x, "resolution");
	const char *signal = ledgerctl_field_str(x, "signal");
	const char *newest = ledgerctl_field_str(x, "current_attempt_id");
	const char *owner = ledgerctl_field_str(x, "owner");
	char t[24], c[24];

	if (call != NULL)
		say(d, false, "", "%s %s refused: %s", op, call,
		    or_q(ledgerctl_field_str(x, "code")));
	else
		say(d, false, "", "%s refused: %s", op, or_q(ledgerctl_field_str(x, "code")));
	if (holder != NULL && holder_owner != NULL)
		say(d, false, ", ", "held by %s (%s)", holder, holder_owner);
	else if (holder != NULL || holder_owner != NULL)
		say(d, false, ", ", "held by %s", holder != NULL ? holder : holder_owner);
	if (field != NULL)
		say(d, false, ", ", "%s differs", field);
	if (attempt_state != NULL)
		say(d, false, ", ", "attempt %s", attempt_state);
	if (resolution != NULL)
		say(d, false, ", ", "as %s", resolution);
	if (signal != NULL)
		say(d, false, ", ", "%s", signal);
	if (newest != NULL)
		say(d, false, ", ", "newest %s", newest);
	if (ledger_json_get(x, "current_token") != NULL) {
		if (outcome != NULL)
			say(d, false, ", ", "%s from token %s (current %s)", outcome,
			    num(x, "fencing_token", t), num(x, "current_token", c));
		else
			say(d, false, ", ", "token %s (current %s)", num(x, "fencing_token", t),
			    num(x, "current_token", c));
	} else if (ledger_json_get(x, "fencing_token") != NULL) {
		say(d, true, ", ", "token %s", num(x, "fencing_token", t));
	}
	if (owner != NULL)
		say(d, true, ", ", "by %s", owner);
}

static void say_other(struct detail *d, const struct ledger_json_value *x)
{
	struct ledger_buf json = LEDGER_BUF_INIT;

	if (x == NULL) {
		say(d, false, "", "-");
		return;
	}
	ledgerctl_field_compact(&json, x);
	if (json.oom)
		d->out->oom = true;
	else
		say(d, false, "", "%s", json.data != NULL ? json.data : "");
	ledger_buf_free(&json);
}

void ledgerctl_timeline_detail(const struct ledger_json_value *event,
			       const struct ledger_json_value *request, size_t room,
			       struct ledger_buf *out)
{
	struct detail d = {out, room, 0, true};
	const char *type = or_q(ledgerctl_field_str(event, "type"));
	const char *call = ledgerctl_field_str(event, "tool_call_id");
	const struct ledger_json_value *x = ledgerctl_field_obj(event, "detail");
	char t[24];

	if (x == NULL) {
		say_other(&d, ledger_json_get(event, "detail"));
		return;
	}
	if (strcmp(type, "attempt_created") == 0) {
		say_attempt_created(&d, x, request);
	} else if (strcmp(type, "attempt_revoked") == 0) {
		say(&d, false, "", "-> %s (%s)", or_q(ledgerctl_field_str(x, "state")),
		    or_q(ledgerctl_field_str(x, "cause")));
	} else if (strcmp(type, "attempt_cancel_requested") == 0) {
		say_reason(&d, x, "cancel requested");
	} else if (strcmp(type, "attempt_cancelled") == 0) {
		say_reason(&d, x, "cancel acknowledged: the worker stopped");
	} else if (strcmp(type, "attempt_finished") == 0) {
		say_finished(&d, x);
	} else if (strcmp(type, "first_delta") == 0) {
		say(&d, false, "", "first delta sent (%s tokens)",
		    num(x, "delivered_output_tokens", t));
		say(&d, false, ": ", "no rerun from here on");
	} else if (strcmp(type, "request_status") == 0) {
		say_request_status(&d, x);
	} else if (strcmp(type, "failover_decision") == 0) {
		say_failover(&d, x);
	} else if (strcmp(type, "refused") == 0) {
		say_refused(&d, x, call);
	} else if (strcmp(type, "client_disconnected") == 0 ||
		   strcmp(type, "client_resumed") == 0 || strcmp(type, "client_hold_ended") == 0) {
		say_client(&d, x, type);
	} else if (call == NULL) {
		say_other(&d, x); /* a call event needs its call */
	} else if (strcmp(type, "claimed") == 0) {
		say_claimed(&d, x, call);
	} else if (strcmp(type, "completed") == 0) {
		say(&d, false, "", "%s %s, token %s", call, or_q(ledgerctl_field_str(x, "outcome")),
		    num(x, "fencing_token", t));
		say_not_kept(&d, x);
	} else if (strcmp(type, "late_completion") == 0) {
		say_late(&d, x, call);
	} else if (strcmp(type, "duplicate_execution") == 0 ||
		   strcmp(type, "resolve_contradicted") == 0) {
		say_contradiction(&d, x, call, type[0] == 'd');
	} else if (strcmp(type, "released") == 0) {
		say_released(&d, x, call);
	} else if (strcmp(type, "resolved") == 0) {
		say_resolved(&d, x, call);
	} else {
		say_other(&d, x);
	}
}

/* --- times --- */

/* True when @p at has the shape 2026-11-30T01:29:43.123Z (the API's). */
static bool is_stamp(const char *at)
{
	return at != NULL && strlen(at) >= 23 && at[4] == '-' && at[7] == '-' && at[10] == 'T' &&
	       at[13] == ':' && at[16] == ':' && at[19] == '.';
}

/* HH:MM:SS.mmm of @p at, or @p at itself (or NULL) when it has another shape. */
static const char *clock_of(const char *at, char buf[16])
{
	if (!is_stamp(at))
		return at;
	memcpy(buf, at + 11, 12);
	buf[12] = '\0';
	return buf;
}

/* YYYY-MM-DD HH:MM:SS.mmmZ, for times shown with their day. */
static const char *stamp_of(const char *at, char buf[40])
{
	if (!is_stamp(at))
		return at != NULL ? at : "-";
	snprintf(buf, 40, "%s", at);
	buf[10] = ' ';
	return buf;
}

/* --- the request --- */

/* Appends @p line cut to the width and a newline. */
static void put_line(struct ledger_buf *out, struct ledger_buf *line)
{
	if (line->oom)
		out->oom = true;
	else if (line->len > 0)
		ledgerctl_text_put(out, line->data, line->len, WIDTH, LEDGERCTL_TEXT_AS_IS);
	ledger_buf_putc(out, '\n');
	line->len = 0;
}

static void render_request(const struct ledger_json_value *rq, struct ledger_buf *out)
{
	struct ledger_buf line = LEDGER_BUF_INIT;
	const struct ledger_json_value *ce = ledger_json_get(rq, "client_error");
	const struct ledger_json_value *err = ledgerctl_field_obj(ce, "error");
	char n[24], m[24], stamp[40];

	ledger_buf_puts(&line, "request  ");
	ledgerctl_text_puts(&line, ledgerctl_field_str(rq, "request_id"), 60, LEDGERCTL_TEXT_AS_IS);
	ledger_buf_puts(&line, "  ");
	ledgerctl_text_puts(&line, ledgerctl_field_str(rq, "status"), 16, LEDGERCTL_TEXT_AS_IS);
	ledger_buf_puts(&line, "  phase ");
	ledgerctl_text_puts(&line, ledgerctl_field_str(rq, "phase"), 10, LEDGERCTL_TEXT_AS_IS);
	if (ledgerctl_field_true(rq, "first_delta_sent"))
		ledger_buf_printf(&line, ", first delta sent (%s tokens)",
				  num(rq, "delivered_output_tokens", n));
	else
		ledger_buf_puts(&line, ", no delta sent");
	put_line(out, &line);

	ledger_buf_puts(&line, "revision ");
	ledgerctl_text_puts(&line, ledgerctl_field_str(rq, "model_revision"), 40,
			    LEDGERCTL_TEXT_AS_IS);
	ledger_buf_printf(&line, "   attempts %s of %s   created %s", num(rq, "attempts", n),
			  num(rq, "max_attempts", m),
			  stamp_of(ledgerctl_field_str(rq, "created_at"), stamp));
	put_line(out, &line);

	if (ce != NULL && ce->type != LEDGER_JSON_NULL) {
		const char *message = ledgerctl_field_str(err, "message");

		ledger_buf_puts(&line, "error    ");
		if (ledgerctl_field_str(err, "code") != NULL) {
			ledger_buf_puts(&line, ledgerctl_field_str(err, "code"));
			if (message != NULL) {
				ledger_buf_puts(&line, ": ");
				ledger_buf_puts(&line, message);
			}
		} else {
			ledgerctl_field_compact(&line, ce);
		}
		put_line(out, &line);
	}
	if (line.oom)
		out->oom = true;
	ledger_buf_free(&line);
}

/* --- attempts and tool calls --- */

static const char *with_lease(const struct ledger_json_value *v, char buf[64])
{
	const char *state = ledgerctl_field_str(v, "state");
	uint64_t left = 0;

	if (state == NULL || !ledgerctl_field_uint(v, "lease_ms_left", &left) || left == 0 ||
	    strlen(state) > 32)
		return state;
	snprintf(buf, 64, "%s (%" PRIu64 " ms left)", state, left);
	return buf;
}

/* True when an attempt of @p list names the gateway that ran it (API 1.1). */
static bool any_gateway(const struct ledger_json_value *list)
{
	for (size_t i = 0; i < list->u.arr.count; i++) {
		if (ledgerctl_field_str(&list->u.arr.items[i], "gateway") != NULL)
			return true;
	}
	return false;
}

static enum ledger_err render_attempts(const struct ledger_json_value *list, struct ledger_buf *out)
{
	static const char *const headers[] = {"ATTEMPT", "EPOCH", "REPLICA", "STATE",
					      "CREATED", "ENDED", "GATEWAY"};
	struct ledgerctl_table *t = NULL;
	enum ledger_err rc = LEDGER_ERR_NOMEM;
	bool gateways;

	if (list == NULL || list->u.arr.count == 0) {
		ledger_buf_puts(out, "no attempts\n");
		return LEDGER_OK;
	}
	/* the gateway's column only where a gateway ran one: older answers look as before */
	gateways = any_gateway(list);
	t = ledgerctl_table_new(gateways ? 7 : 6, headers);
	if (t == NULL)
		goto out;
	ledgerctl_table_align_right(t, 1);
	for (size_t i = 0; i < list->u.arr.count; i++) {
		const struct ledger_json_value *a = &list->u.arr.items[i];
		size_t row = ledgerctl_table_add_row(t);
		char e[24], state[64], c[16], x[16];

		ledgerctl_table_set(t, row, 0, ledgerctl_field_str(a, "attempt_id"));
		ledgerctl_table_set(t, row, 1, num(a, "epoch", e));
		ledgerctl_table_set(t, row, 2, ledgerctl_field_str(a, "replica"));
		ledgerctl_table_set(t, row, 3, with_lease(a, state));
		ledgerctl_table_set(t, row, 4, clock_of(ledgerctl_field_str(a, "created_at"), c));
		ledgerctl_table_set(t, row, 5, clock_of(ledgerctl_field_str(a, "ended_at"), x));
		if (gateways)
			ledgerctl_table_set(t, row, 6, ledgerctl_field_str(a, "gateway"));
	}
	ledgerctl_table_fit(t, WIDTH, TIME_MIN);
	rc = ledgerctl_table_print(t, out, WIDTH);
out:
	ledgerctl_table_free(t);
	return rc;
}

/* The holder as an operator knows it: its attempt and owner (never its claim_id). */
static const char *holder_of(const struct ledger_json_value *call, char *buf, size_t size)
{
	const struct ledger_json_value *h = ledgerctl_field_obj(call, "holder");
	const char *attempt = ledgerctl_field_str(h, "attempt_id");
	const char *owner = ledgerctl_field_str(h, "owner");

	if (attempt != NULL && owner != NULL)
		snprintf(buf, size, "%s (%s)", attempt, owner);
	else if (attempt != NULL || owner != NULL)
		snprintf(buf, size, "%s", attempt != NULL ? attempt : owner);
	else
		return NULL;
	return buf;
}

static enum ledger_err render_calls(const struct ledger_json_value *list, struct ledger_buf *out)
{
	static const char *const headers[] = {"TOOL CALL", "TOOL",           "STATE",
					      "TOKEN",     "HOLDER/ATTEMPT", "COMPLETED"};
	struct ledgerctl_table *t = NULL;
	enum ledger_err rc = LEDGER_ERR_NOMEM;

	if (list == NULL || list->u.arr.count == 0) {
		ledger_buf_puts(out, "no tool calls\n");
		return LEDGER_OK;
	}
	t = ledgerctl_table_new(6, headers);
	if (t == NULL)
		goto out;
	ledgerctl_table_align_right(t, 3);
	for (size_t i = 0; i < list->u.arr.count; i++) {
		const struct ledger_json_value *c = &list->u.arr.items[i];
		size_t row = ledgerctl_table_add_row(t);
		char tok[24], state[64], holder[600], done[16];

		ledgerctl_table_set(t, row, 0, ledgerctl_field_str(c, "tool_call_id"));
		ledgerctl_table_set(t, row, 1, ledgerctl_field_str(c, "tool"));
		ledgerctl_table_set(t, row, 2, with_lease(c, state));
		ledgerctl_table_set(t, row, 3, num(c, "fencing_token", tok));
		ledgerctl_table_set(t, row, 4, holder_of(c, holder, sizeof(holder)));
		ledgerctl_table_set(t, row, 5,
				    clock_of(ledgerctl_field_str(c, "completed_at"), done));
	}
	ledgerctl_table_fit(t, WIDTH, TIME_MIN);
	rc = ledgerctl_table_print(t, out, WIDTH);
out:
	ledgerctl_table_free(t);
	return rc;
}

static enum ledger_err render_unknown(const struct ledger_json_value *const *calls, size_t n,
				      struct ledger_buf *out)
{
	static const char *const headers[] = {"REQUEST", "TOOL CALL", "TOOL",
					      "TOKEN",   "HOLDER",    "CREATED"};
	struct ledgerctl_table *t = ledgerctl_table_new(6, headers);
	enum ledger_err rc = LEDGER_ERR_NOMEM;

	if (t == NULL)
		goto out;
	ledgerctl_table_align_right(t, 3);
	for (size_t i = 0; i < n; i++) {
		const struct ledger_json_value *c = calls[i];
		size_t row = ledgerctl_table_add_row(t);
		char tok[24], holder[600], stamp[40];

		ledgerctl_table_set(t, row, 0, ledgerctl_field_str(c, "request_id"));
		ledgerctl_table_set(t, row, 1, ledgerctl_field_str(c, "tool_call_id"));
		ledgerctl_table_set(t, row, 2, ledgerctl_field_str(c, "tool"));
		ledgerctl_table_set(t, row, 3, num(c, "fencing_token", tok));
		ledgerctl_table_set(t, row, 4, holder_of(c, holder, sizeof(holder)));
		ledgerctl_table_set(t, row, 5,
				    stamp_of(ledgerctl_field_str(c, "created_at"), stamp));
	}
	ledgerctl_table_fit(t, WIDTH, 24); /* YYYY-MM-DD HH:MM:SS.mmmZ */
	rc = ledgerctl_table_print(t, out, WIDTH);
out:
	ledgerctl_table_free(t);
	return rc;
}

enum ledger_err ledgerctl_timeline_render_unknown(const struct ledger_json_value *const *calls,
						  size_t ncalls, struct ledger_buf *out)
{
	if (ncalls == 0) {
		ledger_buf_puts(out, "no tool call has an unknown outcome\n");
		return out->oom ? LEDGER_ERR_NOMEM : LEDGER_OK;
	}
	return render_unknown(calls, ncalls, out);
}

/* --- the history --- */

static const char *replica_of(const struct ledger_json_value *attempts, const char *attempt_id)
{
	if (attempts == NULL || attempt_id == NULL)
		return NULL;
	for (size_t i = 0; i < attempts->u.arr.count; i++) {
		const struct ledger_json_value *a = &attempts->u.arr.items[i];
		const char *id = ledgerctl_field_str(a, "attempt_id");

		if (id != NULL && strcmp(id, attempt_id) == 0)
			return ledgerctl_field_str(a, "replica");
	}
	return NULL;
}

static enum ledger_err render_events(const struct ledgerctl_review *r, struct ledger_buf *out)
{
	static const char *const headers[] = {"TIME", "ATTEMPT", "REPLICA", "EVENT", "DETAIL"};
	struct ledgerctl_table *t = NULL;
	struct ledger_buf detail = LEDGER_BUF_INIT;
	size_t *rows = NULL;
	char day[11] = "";
	enum ledger_err rc = LEDGER_ERR_NOMEM;
	size_t room;

	if (r->nevents == 0) {
		ledger_buf_puts(out, "no events\n");
		return LEDGER_OK;
	}
	t = ledgerctl_table_new(5, headers);
	rows = calloc(r->nevents, sizeof(*rows));
	if (t == NULL || rows == NULL)
		goto out;
	/* First the columns, whose widths decide the room each detail gets. */
	for (size_t i = 0; i < r->nevents; i++) {
		const struct ledger_json_value *e = r->events[i];
		const char *at = ledgerctl_field_str(e, "at");
		const char *attempt = ledgerctl_field_str(e, "attempt_id");
		char clock[16];

		if (is_stamp(at) && strncmp(day, at, 10) != 0) {
			char marker[32];

			memcpy(day, at, 10);
			snprintf(marker, sizeof(marker), "-- %s --", day);
			ledgerctl_table_add_line(t, marker);
		}
		rows[i] = ledgerctl_table_add_row(t);
		ledgerctl_table_set(t, rows[i], 0, clock_of(at, clock));
		ledgerctl_table_set(t, rows[i], 1, attempt);
		ledgerctl_table_set(t, rows[i], 2, replica_of(r->attempts, attempt));
		ledgerctl_table_set(t, rows[i], 3, ledgerctl_field_str(e, "type"));
	}
	room = ledgerctl_table_fit(t, WIDTH, DETAIL_MIN);
	for (size_t i = 0; i < r->nevents; i++) {
		detail.len = 0;
		if (detail.data != NULL)
			detail.data[0] = '\0';
		ledgerctl_timeline_detail(r->events[i], r->request, room, &detail);
		if (detail.oom)
			goto out;
		ledgerctl_table_set(t, rows[i], 4, detail.data != NULL ? detail.data : "");
	}
	rc = ledgerctl_table_print(t, out, WIDTH);
out:
	ledger_buf_free(&detail);
	free(rows);
	ledgerctl_table_free(t);
	return rc;
}

enum ledger_err ledgerctl_timeline_render(const struct ledgerctl_review *r, struct ledger_buf *out)
{
	enum ledger_err rc;

	render_request(r->request, out);
	ledger_buf_putc(out, '\n');
	rc = render_attempts(r->attempts, out);
	if (rc != LEDGER_OK)
		return rc;
	ledger_buf_putc(out, '\n');
	rc = render_calls(r->tool_calls, out);
	if (rc != LEDGER_OK)
		return rc;
	ledger_buf_putc(out, '\n');
	rc = render_events(r, out);
	if (rc != LEDGER_OK)
		return rc;
	return out->oom ? LEDGER_ERR_NOMEM : LEDGER_OK;
}
