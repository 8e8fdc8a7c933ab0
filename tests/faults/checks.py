"""The invariants every fault scenario is judged by, from recorded traces.

Each check takes what was recorded (the client's events, ledgerd's timeline
of the request, the replicas' event logs, the tool service's log) and
returns a list of violations, each one sentence naming who saw what: an
empty list means the invariant held. Status codes alone prove nothing
here; the checks read what actually reached the client and what the ledger
recorded.
"""

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime

from ledger_client import args_sha256
from tokens import REPLICA_INFO, expected_tokens

# What the request's status must be once a stream ended each way.
REQUEST_STATUS = {"complete": "completed", "terminated": "terminated",
                  "client_closed": "terminated", "rejected": "failed"}
# The ledger writes times in milliseconds: a head may seem to precede it by that much.
CLOCK_SLACK_S = 0.002
# Decisions that may repeat without ending anything.
WAITING_ACTIONS = ("keep_waiting", "wait_for_fence")


def identity():
    """The identity the gateway must read from the fake replicas' info: each
    text field as "sha256:" and the hex of its UTF-8 (GATEWAY.md, "Identity")."""
    return {k: ("sha256:" + hashlib.sha256(v.encode()).hexdigest()
                if k in ("tokenizer", "chat_template") else v)
            for k, v in REPLICA_INFO.items()}


def model_revision():
    """The model_revision the gateway must derive from the fake replicas' info."""
    return "sha256:" + args_sha256(identity())


@dataclass(frozen=True)
class Expect:
    """How one stream must end, and what the ledger must show for it.

    outcome: "complete" ([DONE] after the whole answer), "terminated" (the
    error event after part of it), "client_closed" (the client left after
    some chunks) or "rejected" (HTTP 503 before any byte).
    """

    seed: int
    max_tokens: int
    outcome: str
    attempts: int  # attempts in the ledger's timeline
    attempt_id: str | None  # the one attempt whose chunks reach the client
    final_actions: tuple = ()  # failover decisions but keep_waiting/wait_for_fence, in order
    signal: str | None = None  # the failure the gateway reports (a keep_waiting's: overloaded)
    tool_at: int | None = None  # the answer makes its tool call before this token
    error_code: str | None = None  # of a rejection
    upstream_cancelled: bool = False  # an attempt was cancelled and acknowledged it
    # A rerun's replica that died before the rerun reached it: the gateway finds
    # its port closed and reports that instead (mass_failure kills two in turn).
    rerun_signal: str | None = None


def decisions(timeline):
    """The failover decisions in the timeline: [(attempt_id, action, detail)] in order."""
    return [(e.get("attempt_id"), e["detail"].get("action"), e["detail"])
            for e in timeline["events"] if e["type"] == "failover_decision"]


def upstream_cancelled(timeline):
    """Whether an attempt of the request was cancelled and its replica acknowledged it."""
    return any(a["state"] == "cancelled" for a in timeline["attempts"])


def retry_allowance(attempts, policy):
    """The most retries the pool budget lets through while @attempts are in its window.

    A retry is refused while the retries in the window number at least
    max(min_retries, percent_of_attempts% of the attempts in the window),
    so the last one let through had fewer than that before it.
    """
    return math.ceil(max(policy["min_retries"], policy["percent_of_attempts"] * attempts / 100))


def check_stream(stream, timeline, expect):
    """The client-side invariants of one stream, and the ledger's account of it."""
    violations = []
    v = violations.append
    rid = stream.request_id
    if timeline is None:
        return ["ledger: no timeline for request %s" % rid]
    request = timeline["request"]

    # What reached the client.
    if expect.outcome == "rejected":
        error = (stream.error_body or {}).get("error") or {}
        if stream.status != 503:
            v("client: expected HTTP 503 before any byte, got %s" % stream.status)
        if stream.headers.get("x-should-retry") != "false":
            v("client: x-should-retry is %r, not 'false'" % stream.headers.get("x-should-retry"))
        if error.get("code") != expect.error_code:
            v("client: the error code is %r, not %r" % (error.get("code"), expect.error_code))
        if stream.events:
            v("client: a rejected request sent %d events" % len(stream.events))
    else:
        if stream.status != 200:
            v("client: expected HTTP 200 with a stream, got %s: %s"
              % (stream.status, stream.body[:300]))
        if stream.transport_error:
            v("client: reading the stream failed: %s" % stream.transport_error)
    attempt_ids = sorted({c["attempt_id"] for c in stream.chunks})
    if len(attempt_ids) > 1:
        v("client: one stream carried chunks of several attempts %s" % attempt_ids)
    if attempt_ids and attempt_ids != [expect.attempt_id]:
        v("client: the chunks came from %s, expected only %s" % (attempt_ids, expect.attempt_id))
    received = stream.contents
    answer = expected_tokens(expect.seed, expect.max_tokens, rid, expect.tool_at)
    if received != answer[:len(received)]:
        first = next((i for i, (a, b) in enumerate(zip(received, answer)) if a != b),
                     min(len(received), len(answer)))
        v("client: the content is not the answer's prefix (a gap, a repeat or a foreign "
          "fragment) from token %d: got %r, expected %r"
          % (first, received[first:first + 3], answer[first:first + 3]))
    if stream.done and stream.events[-1].data != "[DONE]":
        v("client: events came after [DONE]")
    if stream.done != (request["status"] == "completed"):
        v("client/ledger: [DONE] %s but the request is %s"
          % ("seen" if stream.done else "not seen", request["status"]))
    final = stream.final_event
    if expect.outcome == "complete":
        if not stream.done:
            v("client: no [DONE]; the last event was %s" % final)
        if len(received) != expect.max_tokens:
            v("client: %d content chunks, expected the whole answer of %d"
              % (len(received), expect.max_tokens))
    elif expect.outcome == "terminated":
        error = (final or {}).get("error") if isinstance(final, dict) else None
        if stream.done:
            v("client: [DONE] after a failure that followed a delta")
        if not isinstance(error, dict):
            v("client: the stream did not end with an error event; the last event was %s" % final)
        else:
            if error.get("code") != "upstream_decode_interrupted":
                v("client: the final error's code is %r" % error.get("code"))
            if error.get("delivered_output_tokens") != len(received):
                v("client: the final error says delivered_output_tokens=%r, the client "
                  "received %d" % (error.get("delivered_output_tokens"), len(received)))
            if error.get("partial_output") is not True:
                v("client: the final error's partial_output is %r" % error.get("partial_output"))
            if error.get("retryable") is not False:
                v("client: the final error's retryable is %r" % error.get("retryable"))
            if error.get("request_id") != rid:
                v("client: the final error names request %r, not %r"
                  % (error.get("request_id"), rid))
    elif expect.outcome == "client_closed" and not stream.closed_by_client:
        v("client: the stream ended before the client could leave")

    # The ledger's account.
    attempts = timeline["attempts"]
    names = [a["attempt_id"] for a in attempts]
    if names != ["a%d" % (i + 1) for i in range(expect.attempts)]:
        v("ledger: attempts %s, expected %d (a1..a%d)" % (names, expect.attempts,
                                                           expect.attempts))
    revisions = {a["model_revision"] for a in attempts}
    if revisions and revisions != {model_revision()}:
        v("ledger: model_revision %s, expected %s" % (sorted(revisions), model_revision()))
    if request["status"] != REQUEST_STATUS[expect.outcome]:
        v("ledger: the request is %s, expected %s"
          % (request["status"], REQUEST_STATUS[expect.outcome]))
    if request["first_delta_sent"] != bool(stream.events):
        v("ledger: first_delta_sent is %s but the client received %d events"
          % (request["first_delta_sent"], len(stream.events)))
    first_delta = [e for e in timeline["events"] if e["type"] == "first_delta"]
    if stream.status == 200 and stream.head_at is not None:
        # The gateway holds even the response head until deliver is durable.
        if not first_delta:
            v("ledger: no first_delta event, yet the client got a 200 stream")
        else:
            recorded = datetime.fromisoformat(first_delta[0]["at"].replace("Z", "+00:00"))
            early = recorded.timestamp() - stream.head_at
            if early > CLOCK_SLACK_S:
                v("client/ledger: the response head arrived %.1f ms before ledgerd recorded "
                  "the first delta" % (early * 1000))
    delivered = request["delivered_output_tokens"]
    if expect.outcome in ("complete", "terminated") and delivered != len(received):
        v("ledger: delivered_output_tokens=%s, the client received %d"
          % (delivered, len(received)))
    if upstream_cancelled(timeline) != expect.upstream_cancelled:
        v("ledger: upstream cancelled and acknowledged: %s, expected %s"
          % (upstream_cancelled(timeline), expect.upstream_cancelled))
    for attempt_id, action, detail in decisions(timeline):
        wanted = {"overloaded"} if action == "keep_waiting" else {expect.signal}
        if action != "keep_waiting" and expect.rerun_signal and attempt_id != "a1":
            wanted.add(expect.rerun_signal)
        if detail.get("signal") not in wanted:
            v("ledger: a %s decision on the signal %s, expected %s"
              % (action, detail.get("signal"), " or ".join(sorted(wanted))))
    final_actions = tuple(a for _, a, _ in decisions(timeline) if a not in WAITING_ACTIONS)
    if final_actions != expect.final_actions:
        v("ledger: failover decisions %s, expected %s"
          % (list(final_actions), list(expect.final_actions)))
    return violations


def check_replicas(replica_events, timeline):
    """Every generation belongs to an attempt of the ledger, and none ran twice.

    @replica_events: the events of every replica for the request.
    """
    violations = []
    attempts = [a["attempt_id"] for a in timeline["attempts"]]
    served = [e["attempt_id"] for e in replica_events if e["event"] == "request"]
    for aid in sorted(set(served)):
        if aid not in attempts:
            violations.append("replicas: attempt %s generated, the ledger has no such attempt"
                              % aid)
        if served.count(aid) > 1:
            violations.append("replicas: attempt %s generated %d times" % (aid, served.count(aid)))
    return violations


def check_tool_log(tool_log, request_id, executions):
    """Each idempotency key executed at most once; the request's call exactly @executions times."""
    violations = []
    executed = [e["idempotency_key"] for e in tool_log if not e.get("deduped")]
    for key in sorted(set(executed)):
        if executed.count(key) > 1:
            violations.append("tools: %s executed %d times" % (key, executed.count(key)))
    mine = [k for k in executed if k.startswith(request_id + ":")]
    if len(mine) != executions:
        violations.append("tools: the request's tool call executed %d times, expected %d"
                          % (len(mine), executions))
    return violations


def trace(scenario, stream, timeline, tool_log):
    """The one JSON object a run prints: what the client got and what the ledger recorded."""
    return {
        "scenario": scenario,
        "request_id": stream.request_id,
        "http_status": stream.status,
        "chunks": stream.chunks,
        "final_event": stream.error_body if stream.status != 200 else stream.final_event,
        "done": stream.done,
        "attempts": None if timeline is None else timeline["attempts"],
        "tool_log": [{"idempotency_key": e["idempotency_key"], "executed_at": e["executed_at"]}
                     for e in tool_log if not e.get("deduped")],
        "upstream_cancelled": timeline is not None and upstream_cancelled(timeline),
    }
