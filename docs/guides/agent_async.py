"""The agent of agent.py for asyncio: one tool, run at most once per logical request.

    LEDGER_URL=... LEDGER_TOKEN=... python3 docs/guides/agent_async.py REQUEST_ID [ATTEMPT_ID]

The same tool, the same keys, the same output as agent.py; the tool is an
async def, decorated, and a turn's parallel calls are coroutines gathered.
"""

import asyncio
import json
import os
import sys

from ledger_client import AttemptFenced, LedgerError, OutcomeUnknown, stable_tool_call_id
from ledger_client.aio import AsyncLedger

ledger = AsyncLedger(os.environ["LEDGER_URL"], os.environ["LEDGER_TOKEN"])
OUTBOX = os.environ.get("OUTBOX", "var/outbox.txt")

MODEL_TURNS = [
    [{"to": "ana@example.com", "subject": "Your refund"},
     {"to": "bob@example.com", "subject": "Your refund"}],
    [{"to": "ana@example.com", "subject": "Refund sent"}],
]


@ledger.idempotent(tool="send_email", wait_s=10)
async def send_email(to, subject, *, idempotency_key):
    """The side effect. A real mail API would take idempotency_key as its own key."""
    with open(OUTBOX, "a") as f:
        f.write("%s %s %s\n" % (idempotency_key, to, subject))
    return {"message_id": "m-" + idempotency_key}


async def call_tool(request_id, attempt_id, tool_call_id, args):
    """Runs one call of send_email at most once. Returns its result, or None: stop the run."""
    try:
        call = await send_email(request_id=request_id, tool_call_id=tool_call_id,
                                attempt_id=attempt_id, **args)
    except AttemptFenced:
        print(tool_call_id, "attempt_fenced: this attempt was replaced; stop, publish nothing")
        return None
    except OutcomeUnknown:
        print(tool_call_id, "outcome_unknown: it may have run; a person resolves it first")
        return None
    except LedgerError as e:  # args_mismatch (the rerun diverged), in_progress, unreachable...
        print(tool_call_id, "%s: %s" % (e.code, e.message))
        return None
    print(tool_call_id, "replayed" if call.replayed else "executed", call.outcome,
          call.result_json)
    return call.result


async def main():
    request_id = sys.argv[1]
    attempt_id = sys.argv[2] if len(sys.argv) > 2 else None
    messages = [{"role": "user", "content": "Refund order 829, then tell Ana and Bob."}]
    async with ledger:
        for turn in MODEL_TURNS:
            made = sum(len(m.get("tool_calls", [])) for m in messages)
            ids = [stable_tool_call_id(made + i) for i in range(len(turn))]
            messages.append({"role": "assistant", "tool_calls": turn})
            results = await asyncio.gather(*(call_tool(request_id, attempt_id, cid, args)
                                             for cid, args in zip(ids, turn)))
            if any(r is None for r in results):
                sys.exit(3)
            messages += [{"role": "tool", "content": json.dumps(r)} for r in results]


if __name__ == "__main__":
    asyncio.run(main())
