/*
 * sdk/programs/ledgerctl/timeline.h: the text of `ledgerctl show` (a request, its
 * attempts, its tool calls and its history as one readable timeline, so
 * that an operator who was not there can follow an incident in order) and
 * of `ledgerctl unknown`, the calls waiting for that operator.
 */
#ifndef LEDGERCTL_TIMELINE_H
#define LEDGERCTL_TIMELINE_H

#include <stddef.h>

#include "ledger/common/buf.h"
#include "ledger/common/err.h"
#include "ledger/common/json.h"

/* One request as GET /v1/requests/{rid} describes it, every page of events joined. */
struct ledgerctl_review {
	const struct ledger_json_value *request;    /* object; borrowed */
	const struct ledger_json_value *attempts;   /* array, or NULL; borrowed */
	const struct ledger_json_value *tool_calls; /* array, or NULL; borrowed */
	const struct ledger_json_value **events;    /* nevents event objects in order; borrowed */
	size_t nevents;
};

/**
 * Appends the text of `show` for @p r to @p out: every line at most
 * LEDGERCTL_TEXT_WIDTH characters, every value made printable.
 * @param r borrowed for the call
 * @return LEDGER_OK, or LEDGER_ERR_NOMEM (@p out is then incomplete)
 */
LEDGER_MUSTCHECK enum ledger_err ledgerctl_timeline_render(const struct ledgerctl_review *r,
							   struct ledger_buf *out);

/**
 * The one-line detail of an event (its type and detail object) in words,
 * wrapped to lines of at most @p room characters separated by '\n' when
 * what must be said does not fit in one; what may be left out is left out.
 * @param event borrowed for the call
 * @param request the request object the event belongs to (its revision), or NULL
 * @param out receives the text; already printable
 */
void ledgerctl_timeline_detail(const struct ledger_json_value *event,
			       const struct ledger_json_value *request, size_t room,
			       struct ledger_buf *out);

/**
 * Appends the table of `ledgerctl unknown` to @p out: one row per tool
 * call in @p calls (@p ncalls tool call objects, borrowed), or one line
 * saying there is none.
 * @return LEDGER_OK, or LEDGER_ERR_NOMEM (@p out is then incomplete)
 */
LEDGER_MUSTCHECK enum ledger_err
ledgerctl_timeline_render_unknown(const struct ledger_json_value *const *calls, size_t ncalls,
				  struct ledger_buf *out);

#endif
