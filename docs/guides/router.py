"""A router's attempts and failover on the Python SDK (docs/guide-router.md).

    LEDGER_URL=... LEDGER_TOKEN=... python3 docs/guides/router.py REQUEST_ID FAILURE

Two stand-in replicas serve one streamed answer. The model first calls
send_email (a line in var/outbox.txt, or OUTBOX), then writes its text.
gpu-1 fails as FAILURE says; gpu-2 never fails:

    none        gpu-1 answers: the client gets the text and [DONE]
    exit-early  gpu-1 exits before any text: the request reruns on gpu-2
    stall       gpu-1 goes silent before any text: fenced, then rerun on gpu-2
    exit-late   gpu-1 exits mid-answer: the client gets the error event

stdout is what the client receives; the router's log goes to stderr. The
email is sent once whatever happens.
"""

import json
import os
import sys
import time

from ledger_client import AttemptFenced, Ledger, LedgerError, RequestClosed

ledger = Ledger(os.environ["LEDGER_URL"], os.environ["LEDGER_TOKEN"])
OUTBOX = os.environ.get("OUTBOX", "var/outbox.txt")
LEASE_MS = 3000  # short, so that a silent replica is fenced within seconds
DONE = "data: [DONE]\n\n"


class UpstreamFailed(Exception):
    """What the router saw go wrong, named by the signal it reports to failover."""

    def __init__(self, signal):
        super().__init__(signal)
        self.signal = signal


def log(message):
    print("router:", message, file=sys.stderr, flush=True)


def replica(name, failure, request_id, attempt_id, settled_tool_calls):
    """A stand-in model server: its answer to the router's request, as SSE events.

    A real one reads these from the request the router sends it: the headers
    X-Ledger-Request-Id, X-Ledger-Attempt-Id and X-Ledger-Settled-Tool-Calls.
    """
    log("%s runs %s; settled before it: %s" % (name, attempt_id, json.dumps(settled_tool_calls)))

    def send_email(idempotency_key, fencing_token):
        with open(OUTBOX, "a") as f:
            f.write("%s ana@example.com Your refund\n" % idempotency_key)
        return {"message_id": "m-" + idempotency_key}

    try:
        call = ledger.tool_call(request_id, "call_00", send_email, tool="send_email",
                                args={"to": "ana@example.com"}, attempt_id=attempt_id)
    except LedgerError as e:  # attempt_fenced, ...: the replica ends its stream
        log("%s: call_00 send_email %s" % (name, e.code))
        raise UpstreamFailed("upstream_closed") from e
    log("%s: call_00 send_email %s" % (name, "replayed" if call.replayed else "executed"))
    if failure == "exit-early":
        raise UpstreamFailed("replica_exited")  # its connection refused
    if failure == "stall":
        raise UpstreamFailed("heartbeat_timeout")  # no byte for the stall timeout
    for i, word in enumerate(["Your", " refund", " is", " on", " its", " way."]):
        if failure == "exit-late" and i == 2:
            raise UpstreamFailed("upstream_closed")  # the stream cut mid-answer
        yield "data: %s\n\n" % json.dumps({"choices": [{"delta": {"content": word}}]})
    yield DONE


def ask_failover(request_id, attempt, signal, next_attempt):
    """The one action ledgerd allows, once any wait_for_fence has been waited out."""
    while True:
        decision = ledger.failover(request_id, attempt, signal, next_attempt=next_attempt)
        log("failover %s %s: %s" % (attempt.attempt_id, signal, decision.action))
        if decision.action != "wait_for_fence":
            return decision
        # The old replica may be alive: its lease (or its cancel-ack) must end first.
        time.sleep(decision.retry_after_ms / 1000)


def serve(request_id, failure, client):
    """Streams one request's answer to @client from attempts on the two replicas."""
    replicas = {"gpu-1": failure, "gpu-2": "none"}
    name, settled, delivered = "gpu-1", [], 0
    try:
        attempt = ledger.begin_attempt(request_id, "a1", replica=name, lease_ms=LEASE_MS)
    except LedgerError as e:  # request_closed, first_delta_sent (this id ran before), ...
        log("no attempt: %s %s" % (e.code, e.message))
        return
    while True:
        attempt.start_heartbeat()  # renews the lease every third of it
        try:
            for event in replica(name, replicas[name], request_id, attempt.attempt_id,
                                 settled):
                if event == DONE:
                    attempt.finish("completed", delivered_output_tokens=delivered)
                    client.write(DONE)
                    return
                if delivered == 0:
                    attempt.deliver(1)  # the point of no retry: durable before the first byte
                elif attempt.revoked:  # a renewal was refused: publish nothing more
                    raise UpstreamFailed("heartbeat_timeout")
                client.write(event)
                delivered += 1
        except UpstreamFailed as e:
            signal = e.signal
        except AttemptFenced:  # deliver refused: this attempt must not publish
            signal = "heartbeat_timeout"
        attempt.stop_heartbeat()  # a failed replica's lease must be let run out
        if delivered > 0:
            try:
                attempt.deliver(delivered)  # what the client got, exactly
            except AttemptFenced:
                pass
        rerun = None if delivered > 0 else {"attempt_id": "a%d" % (attempt.attempt_number + 1),
                                            "replica": "gpu-2", "lease_ms": LEASE_MS}
        try:
            decision = ask_failover(request_id, attempt, signal, rerun)
        except (AttemptFenced, RequestClosed) as e:  # another router decided, or it is over
            log("no failover: %s" % e.code)
            return
        if decision.action == "retry_prefill":  # nothing was sent yet: run it again on gpu-2
            attempt, name, settled = decision.attempt, "gpu-2", decision.settled_tool_calls
        elif decision.action == "terminate_stream":  # the final event, and no [DONE] after it
            client.write(decision.sse_event)
            return
        else:  # reject, cancel_upstream: nothing was sent yet, so an error answer instead
            # (keep_waiting answers only "overloaded", which this router never reports)
            client.write("HTTP 503 %s\n" % json.dumps(decision.client_error))
            return


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sys.stdout)
