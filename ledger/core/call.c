/*
 * ledger/core/call.c: a tool call's row: clearing it, and the names of its
 * states, spelled once for the HTTP layer, the store and the tests.
 */
#include "ledger/core/call.h"

#include <stdlib.h>
#include <string.h>

void ledger_call_clear(struct ledger_call *call)
{
	if (call == NULL)
		return;
	free(call->result);
	free(call->args);
	memset(call, 0, sizeof(*call));
	call->state = LEDGER_CALL_ABSENT;
}

const char *ledger_call_state_name(enum ledger_call_state s)
{
	switch (s) {
	case LEDGER_CALL_ABSENT:
		return "absent";
	case LEDGER_CALL_IN_PROGRESS:
		return "in_progress";
	case LEDGER_CALL_UNKNOWN:
		return "unknown";
	case LEDGER_CALL_SUCCEEDED:
		return "succeeded";
	case LEDGER_CALL_FAILED:
		return "failed";
	case LEDGER_CALL_RELEASED:
		return "released";
	case LEDGER_CALL_TOMBSTONE:
		return "expired";
	}
	abort();
}
