"""Sends an email at most once per logical request, however often this runs.

    pip install sdk/python    # or: export PYTHONPATH=sdk/python
    LEDGER_URL=http://127.0.0.1:8080 LEDGER_TOKEN=... python3 send_email.py REQUEST_ID

For an https ledgerd behind a private CA, LEDGER_CA_FILE names the CA's
PEM file (else the system's trust store verifies it).

Run it twice with the same REQUEST_ID, as a rerun after a failover would:
the first run sends the email, the second gets the recorded result back
and sends nothing.
"""

import os
import sys

from ledger_client import Ledger, stable_tool_call_id

ledger = Ledger(os.environ["LEDGER_URL"], os.environ["LEDGER_TOKEN"],
                ca_file=os.environ.get("LEDGER_CA_FILE") or None)


@ledger.idempotent(tool="send_email")
def send_email(to: str, subject: str, *, idempotency_key: str) -> dict[str, str]:
    # A real tool passes idempotency_key on to the mail provider as its own
    # idempotency key, and returns what the provider answered.
    print("sending email to %s (idempotency key %s)" % (to, idempotency_key))
    return {"message_id": "m-" + idempotency_key}


def main() -> None:
    request_id = sys.argv[1]
    # The first tool call of this request: the same id on every rerun.
    call = send_email(request_id=request_id, tool_call_id=stable_tool_call_id(0),
                      to="ana@example.com", subject="Your refund")
    if call.replayed:
        print("replayed: already sent as %s, not sent again" % call.result["message_id"])
    else:
        print("sent: %s" % call.result["message_id"])


if __name__ == "__main__":
    main()
