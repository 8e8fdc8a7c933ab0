"""One tool of an agent, run at most once per logical request (docs/guide-agent.md).

    LEDGER_URL=... LEDGER_TOKEN=... python3 docs/guides/agent.py REQUEST_ID [ATTEMPT_ID]

The tool is send_email. Its side effect appends a line to var/outbox.txt
(OUTBOX names another file). Run it again with the same REQUEST_ID, as a
rerun after a failover would: every call gets the first run's result back
and nothing is sent twice.
"""

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from ledger_client import AttemptFenced, Ledger, LedgerError, OutcomeUnknown, stable_tool_call_id

ledger = Ledger(os.environ["LEDGER_URL"], os.environ["LEDGER_TOKEN"])
OUTBOX = os.environ.get("OUTBOX", "var/outbox.txt")

# What the model asks for, turn by turn: two calls at once, then one more.
# A real agent gets them from the model; a faithful rerun gets the same.
MODEL_TURNS = [
    [{"to": "ana@example.com", "subject": "Your refund"},
     {"to": "bob@example.com", "subject": "Your refund"}],
    [{"to": "ana@example.com", "subject": "Refund sent"}],
]


def send_email(to, subject, idempotency_key):
    """The side effect. A real mail API would take idempotency_key as its own key."""
    with open(OUTBOX, "a") as f:
        f.write("%s %s %s\n" % (idempotency_key, to, subject))
    return {"message_id": "m-" + idempotency_key}


def call_tool(request_id, attempt_id, tool_call_id, args):
    """Runs one call of send_email at most once. Returns its result, or None: stop the run."""
    try:
        call = ledger.tool_call(
            request_id, tool_call_id,
            lambda idempotency_key, fencing_token: send_email(**args,
                                                              idempotency_key=idempotency_key),
            tool="send_email", args=args, attempt_id=attempt_id, wait_s=10)
    except AttemptFenced:
        print(tool_call_id, "attempt_fenced: this attempt was replaced; stop, publish nothing")
        return None
    except OutcomeUnknown:
        print(tool_call_id, "outcome_unknown: it may have run; a person resolves it first")
        return None
    except LedgerError as e:  # args_mismatch (the rerun diverged), in_progress, unreachable...
        print(tool_call_id, "%s: %s" % (e.code, e.message))
        return None
    # executed: it ran now. replayed: an earlier run ran it; this is its recorded result.
    print(tool_call_id, "replayed" if call.replayed else "executed", call.outcome,
          call.result_json)
    return call.result


def main():
    # A model server gets these from the router, in the X-Ledger-Request-Id and
    # X-Ledger-Attempt-Id headers of the request it serves.
    request_id = sys.argv[1]
    attempt_id = sys.argv[2] if len(sys.argv) > 2 else None
    messages = [{"role": "user", "content": "Refund order 829, then tell Ana and Bob."}]
    for turn in MODEL_TURNS:
        # The k-th tool call of the conversation is call_<k>: count the calls made
        # before this turn, then number this turn's calls in the model's order.
        made = sum(len(m.get("tool_calls", [])) for m in messages)
        ids = [stable_tool_call_id(made + i) for i in range(len(turn))]
        messages.append({"role": "assistant", "tool_calls": turn})
        with ThreadPoolExecutor() as pool:  # parallel calls keep the ids given above
            results = list(pool.map(call_tool, [request_id] * len(turn),
                                    [attempt_id] * len(turn), ids, turn))
        if any(r is None for r in results):
            sys.exit(3)
        messages += [{"role": "tool", "content": json.dumps(r)} for r in results]


if __name__ == "__main__":
    main()
