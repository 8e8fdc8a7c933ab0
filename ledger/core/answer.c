/*
 * ledger/core/answer.c: the bound on kept answers and their JSON form (see
 * answer.h).
 */
#include "ledger/core/answer.h"

void ledger_answer_bound(struct ledger_answer *a, int64_t max_bytes)
{
	if (a->kept && a->bytes > max_bytes) {
		a->kept = false;
		a->body_b64 = NULL;
	}
}

void ledger_answer_render(struct ledger_jsonw *w, const struct ledger_answer *a)
{
	ledger_jsonw_object_begin(w);
	ledger_jsonw_key(w, "kept");
	ledger_jsonw_bool(w, a->kept);
	ledger_jsonw_key(w, "status");
	ledger_jsonw_int(w, a->status);
	ledger_jsonw_key(w, "content_type");
	ledger_jsonw_string(w, a->content_type);
	if (a->kept) {
		ledger_jsonw_key(w, "body_b64");
		ledger_jsonw_string(w, a->body_b64);
	} else {
		ledger_jsonw_key(w, "bytes");
		ledger_jsonw_int(w, a->bytes);
		ledger_jsonw_key(w, "sha256");
		ledger_jsonw_string(w, a->sha256);
	}
	ledger_jsonw_object_end(w);
}
