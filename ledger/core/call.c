/*
 * ledger/core/call.c: a tool call's row: clearing it, the digest of a
 * result that is not kept whole, and the names of its states, spelled once
 * for the HTTP layer, the store and the tests.
 */
#include "ledger/core/call.h"

#include <stdlib.h>
#include <string.h>

#include "ledger/common/sha256.h"

void ledger_call_clear(struct ledger_call *call)
{
	if (call == NULL)
		return;
	free(call->result);
	free(call->args);
	memset(call, 0, sizeof(*call));
	call->state = LEDGER_CALL_ABSENT;
}

bool ledger_call_digest_result(const char *text, size_t len, struct ledger_result_digest *out)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char digest[32];

	out->bytes = (int64_t)len;
	out->sha256[0] = '\0';
	if (!ledger_sha256(text, len, digest))
		return false;
	for (size_t i = 0; i < sizeof(digest); i++) {
		out->sha256[2 * i] = hex[digest[i] >> 4];
		out->sha256[2 * i + 1] = hex[digest[i] & 15];
	}
	out->sha256[LEDGER_SHA256_HEX] = '\0';
	return true;
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
