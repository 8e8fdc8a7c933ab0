"""Failover over HTTP: POST /v1/requests/{rid}/failover, every row of its
table in order (and which row wins where two apply), each action and what it
leaves in the database, the retried final decision answered byte for byte,
the failover_decision events, settled_tool_calls; claims under attempts
(attempt_not_found, attempt_required, attempt_fenced, replay to a fenced
attempt, divergence); and the pool-wide retry budget on a ledgerd of its
own with a policy file.

Contract: docs/api.md "POST /v1/requests/{rid}/failover" and the claim rows about
attempts, docs/design.md invariants 1-3 and 7 and the failover policy; where
docs/api.md is silent, the decisions ledgerd documents (response fields,
source_state, settled_tool_calls, keep_waiting and wait_for_fence not
recorded, ...).

Every test works in a tenant of its own: the pool-wide retry budget is
counted per tenant, so tests never spend each other's retries.
"""

import json
import secrets
import threading
import time

import pytest

from conftest import Ledgerd, ledgerd_cmd, new_id
from http_helpers import (ANSWER_KEYS, Router, answer, assert_error, assert_retry_after,
                          fingerprint, result_text_of, leases_as_asked)

SHORT_LEASE_MS = 250
PAST_SHORT_LEASE_S = 0.4

CLIENT_ERROR_KEYS = {"code", "type", "param", "message", "request_id", "partial_output",
                     "delivered_output_tokens", "retryable"}


# --- helpers ----------------------------------------------------------------


def assert_client_error(ce, code, rid, partial, delivered, budget=None):
    """@budget: the "budget" a retry_budget_exhausted names ("request" or "pool")."""
    assert set(ce) == {"error"}, ce
    e = ce["error"]
    assert set(e) == CLIENT_ERROR_KEYS | ({"budget"} if budget else set()), e
    assert e.get("budget") == budget, e
    assert e["code"] == code
    assert e["type"] == "server_error"
    assert e["param"] is None
    assert isinstance(e["message"], str) and e["message"]
    assert e["request_id"] == rid
    assert e["partial_output"] is partial
    assert e["delivered_output_tokens"] == delivered
    assert e["retryable"] is False


@pytest.fixture
def rt(service):
    return Router(service)


# --- validation and 404 -------------------------------------------------------


@pytest.mark.parametrize("body,field", [
    ({"signal": "pod_lost"}, "attempt_id"),
    ({"attempt_id": "a-1"}, "signal"),
    ({"attempt_id": "a-1", "signal": "exploded"}, "signal"),
    ({"attempt_id": "a-1", "signal": "pod_lost", "retry_prefill_tokens": -1},
     "retry_prefill_tokens"),
    ({"attempt_id": "a-1", "signal": "pod_lost", "next_attempt": "a-2"}, "next_attempt"),
    ({"attempt_id": "a-1", "signal": "pod_lost", "next_attempt": {"replica": "g"}},
     "attempt_id"),
    ({"attempt_id": "a-1", "signal": "pod_lost",
      "next_attempt": {"attempt_id": "a-2", "lease_ms": 50}}, "lease_ms"),
])
def test_failover_validates_its_body(rt, body, field):
    rid, aid = rt.started()
    r = rt.post("/v1/requests/%s/failover" % rid, body)
    err = assert_error(r, 400, "invalid_field")
    assert err["field"] == field
    assert rt.attempts(rid) == {aid: (1, "live")}


def test_unknown_attempt_is_404_attempt_not_found(rt):
    rid, aid = rt.started()
    assert_error(rt.failover(rid, new_id("a"), "pod_lost"), 404, "attempt_not_found")
    assert rt.attempts(rid) == {aid: (1, "live")}
    rid2 = new_id("r")
    assert_error(rt.failover(rid2, aid, "pod_lost"), 404, "attempt_not_found")
    assert rt.request(rid2) is None


# --- row 1: a retried final decision ----------------------------------------


def test_retried_retry_prefill_is_the_same_answer_with_its_lease_aged(rt):
    """The recorded decision again, byte for byte but for one field: the new
    attempt's lease_ms is what is left of it now, as in every other answer,
    not the lease as granted."""
    rid, a1 = rt.started()
    a2 = new_id("a")
    body = {"attempt_id": a1, "signal": "pod_lost", "retry_prefill_tokens": 900,
            "next_attempt": {"attempt_id": a2, "replica": "gpu-2", "lease_ms": 8000}}
    r1 = rt.post("/v1/requests/%s/failover" % rid, body)
    answer(r1, "retry_prefill")
    time.sleep(1.2)
    r2 = rt.post("/v1/requests/%s/failover" % rid, body)
    assert r2.status == 200, r2
    first, again = r1.json["attempt"]["lease_ms"], r2.json["attempt"]["lease_ms"]
    assert 7000 < first <= 8000, first
    # The first answer's lease is aged from the call's start, a little before the
    # lease began: the two differ by the 1.2 s slept, give or take that little.
    assert first - 3000 < again <= first - 1000, (first, again)
    assert r2.body == r1.body.replace('"lease_ms":%d' % first, '"lease_ms":%d' % again, 1)
    # Rows 1 before 2: a1 is no longer the newest, yet the retry is answered.
    assert rt.attempts(rid) == {a1: (1, "dead"), a2: (2, "live")}
    assert rt.recorded(rid) == 1
    assert len(rt.decisions(rid)) == 1


def test_retried_terminate_stream_is_answered_although_the_request_is_closed(rt):
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 12).status == 200
    r1 = rt.failover(rid, a1, "upstream_closed")
    answer(r1, "terminate_stream")
    r2 = rt.failover(rid, a1, "upstream_closed")
    assert r2.status == 200 and r2.body == r1.body, r2
    # Another signal has no decision recorded: row 3 answers.
    err = assert_error(rt.failover(rid, a1, "network_error"), 409, "request_closed")
    assert err["client_error"] == r1.json["client_error"]
    assert len(rt.decisions(rid)) == 1


@pytest.mark.parametrize("setup", ["reject", "cancel_upstream"])
def test_retried_reject_and_cancel_upstream_are_the_same_body(rt, setup):
    if setup == "reject":
        rid, a1 = rt.started(max_attempts=1)
        signal = "replica_exited"
    else:
        rid, a1 = rt.started()
        signal = "client_disconnected"
    r1 = rt.failover(rid, a1, signal, next_aid=new_id("a"))
    answer(r1, setup)
    before = rt.events(rid)
    r2 = rt.failover(rid, a1, signal, next_aid=new_id("a"))
    assert r2.status == 200 and r2.body == r1.body, r2
    assert rt.events(rid) == before
    assert rt.recorded(rid) == 1
    assert list(rt.attempts(rid)) == [a1]


# --- row 2: not the newest attempt ------------------------------------------


def test_failover_of_an_older_attempt_is_attempt_fenced_with_the_current(rt):
    rid, a1 = rt.started(lease_ms=SHORT_LEASE_MS)
    time.sleep(PAST_SHORT_LEASE_S)
    a2 = new_id("a")
    assert rt.create(rid, a2).status == 201
    r = rt.failover(rid, a1, "network_error", next_aid=new_id("a"))
    err = assert_error(r, 409, "attempt_fenced")
    assert err["current_attempt_id"] == a2
    assert rt.attempts(rid) == {a1: (1, "superseded"), a2: (2, "live")}
    assert rt.request(rid)["status"] == "open"
    assert rt.recorded(rid) == 0
    refused = [e for e in rt.events(rid) if e[0] == "refused"]
    assert refused and refused[-1][1] == a1 and refused[-1][3]["code"] == "attempt_fenced"


def test_attempt_fenced_comes_before_request_closed(rt):
    rid, a1 = rt.started()
    a2 = rt.failed_over(rid, a1)
    assert rt.finish(rid, a2, "completed").status == 200
    err = assert_error(rt.failover(rid, a1, "network_error"), 409, "attempt_fenced")
    assert err["current_attempt_id"] == a2


# --- row 3: request not open --------------------------------------------------


def test_failover_of_a_completed_request_is_request_closed(rt):
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "completed").status == 200
    err = assert_error(rt.failover(rid, a1, "pod_lost", next_aid=new_id("a")), 409,
                       "request_closed")
    assert "client_error" in err and err["client_error"] is None
    assert rt.attempts(rid) == {a1: (1, "finished")}
    assert rt.request(rid)["status"] == "completed"


def test_request_closed_comes_before_keep_waiting(rt):
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "completed").status == 200
    assert_error(rt.failover(rid, a1, "overloaded"), 409, "request_closed")


def test_abandoned_request_is_request_closed_for_other_signals(rt):
    rid, a1 = rt.started()
    answer(rt.failover(rid, a1, "client_disconnected"), "cancel_upstream")
    err = assert_error(rt.failover(rid, a1, "network_error"), 409, "request_closed")
    assert err["client_error"] is None
    assert rt.request(rid)["status"] == "abandoned"


def test_failed_request_is_request_closed_with_its_client_error(rt):
    rid, a1 = rt.started(max_attempts=1)
    b = answer(rt.failover(rid, a1, "replica_exited"), "reject")
    err = assert_error(rt.failover(rid, a1, "pod_lost"), 409, "request_closed")
    assert err["client_error"] == b["client_error"]


# --- row 4: overloaded ------------------------------------------------------


def test_overloaded_before_a_delta_keeps_waiting_and_moves_nothing(rt):
    rid, a1 = rt.started()
    r = rt.failover(rid, a1, "overloaded", next_aid=new_id("a"))
    b = answer(r, "keep_waiting")
    assert b["source_state"] == "live" and b["request_status"] == "open"
    assert b.get("client_error") is None and "attempt" not in b
    assert rt.attempts(rid) == {a1: (1, "live")}
    assert rt.request(rid)["status"] == "open"
    # Not recorded: a second call decides again (and is an event again).
    answer(rt.failover(rid, a1, "overloaded"), "keep_waiting")
    assert rt.recorded(rid) == 0
    assert len(rt.decisions(rid)) == 2
    # The source kept its rights.
    assert rt.deliver(rid, a1, 1).status == 200
    rt.claimed(rid, a1)


def test_overloaded_after_a_delta_keeps_waiting(rt):
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 8).status == 200
    b = answer(rt.failover(rid, a1, "overloaded"), "keep_waiting")
    assert b["request_status"] == "open" and b.get("client_error") is None
    q = rt.request(rid)
    assert q["status"] == "open" and q["client_error"] is None
    assert rt.deliver(rid, a1, 20).status == 200


def test_overloaded_comes_before_the_budget(rt):
    rid, a1 = rt.started(max_attempts=1)
    answer(rt.failover(rid, a1, "overloaded", retry_prefill_tokens=10 ** 6), "keep_waiting")
    assert rt.request(rid)["status"] == "open"


# --- row 5: client_disconnected ---------------------------------------------


def test_client_disconnected_before_a_delta_abandons(rt):
    rid, a1 = rt.started()
    b = answer(rt.failover(rid, a1, "client_disconnected", next_aid=new_id("a")),
               "cancel_upstream")
    assert b["source_state"] == "cancel_requested"
    assert b["request_status"] == "abandoned"
    assert b.get("client_error") is None
    assert rt.attempts(rid) == {a1: (1, "cancel_requested")}
    assert rt.request(rid)["status"] == "abandoned"
    # The source is revoked at once.
    assert_error(rt.deliver(rid, a1, 1), 409, "attempt_fenced")
    assert_error(rt.claim(rid, new_id("c"), attempt_id=a1), 409, "attempt_fenced")


def test_client_disconnected_after_a_delta_terminates(rt):
    rid, a1 = rt.started(max_attempts=1)
    assert rt.deliver(rid, a1, 3).status == 200
    b = answer(rt.failover(rid, a1, "client_disconnected"), "cancel_upstream")
    assert b["source_state"] == "cancel_requested"
    assert b["request_status"] == "terminated"
    assert rt.request(rid)["status"] == "terminated"
    assert rt.attempts(rid) == {a1: (1, "cancel_requested")}


def test_client_disconnected_after_a_delta_records_its_client_error(rt):
    """API.md row 5: the request ends terminated with the client error that says
    the client went away mid-answer, recorded as the request's."""
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 7).status == 200
    b = answer(rt.failover(rid, a1, "client_disconnected"), "cancel_upstream")
    assert set(b) == ANSWER_KEYS | {"client_error"}, b
    assert_client_error(b["client_error"], "client_disconnected", rid, True, 7)
    q = rt.request(rid)
    assert q["status"] == "terminated" and q["client_error"] == b["client_error"]
    # A later attempt is told why, as after any cut stream.
    err = assert_error(rt.create(rid, new_id("a")), 409, "first_delta_sent")
    assert err["client_error"] == b["client_error"]
    # The retried call gets the same answer; the history names the client error.
    assert rt.failover(rid, a1, "client_disconnected").json == b
    statuses = [d for t, _, _, d in rt.events(rid) if t == "request_status"]
    assert statuses[-1] == {"status": "terminated", "client_error": "client_disconnected"}


# --- row 6: terminate_stream ------------------------------------------------


def test_after_a_delta_the_stream_is_terminated_with_the_client_error(rt):
    rid, a1 = rt.started()
    for n in (10, 37, 20):
        assert rt.deliver(rid, a1, n).status == 200
    r = rt.failover(rid, a1, "upstream_closed", next_aid=new_id("a"))
    b = answer(r, "terminate_stream")
    assert set(b) == ANSWER_KEYS | {"client_error"}, b
    assert b["source_state"] == "dead" and b["request_status"] == "terminated"
    assert_client_error(b["client_error"], "upstream_decode_interrupted", rid, True, 37)
    q = rt.request(rid)
    assert q["status"] == "terminated" and q["client_error"] == b["client_error"]
    assert rt.attempts(rid) == {a1: (1, "dead")}  # no rerun, even with next_attempt


def test_uncertain_liveness_after_a_delta_terminates_without_waiting(rt):
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 5).status == 200
    b = answer(rt.failover(rid, a1, "heartbeat_timeout"), "terminate_stream")
    assert b["source_state"] == "cancel_requested"
    assert "retry_after_ms" not in b
    assert_client_error(b["client_error"], "upstream_decode_interrupted", rid, True, 5)
    assert rt.attempts(rid) == {a1: (1, "cancel_requested")}


@pytest.mark.parametrize("fields", [{"max_attempts": 1}, {}])
def test_terminate_stream_comes_before_reject(rt, fields):
    rid, a1 = rt.started(**fields)
    rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS)
    assert rt.deliver(rid, a1, 2).status == 200
    time.sleep(PAST_SHORT_LEASE_S)  # the call's outcome is now unknown
    b = answer(rt.failover(rid, a1, "replica_exited", retry_prefill_tokens=40000),
               "terminate_stream")
    assert b["client_error"]["error"]["code"] == "upstream_decode_interrupted"


# --- row 7: reject on budget or cost ------------------------------------------


def test_max_attempts_reached_is_reject_retry_budget_exhausted(rt):
    rid, a1 = rt.started(max_attempts=1)
    b = answer(rt.failover(rid, a1, "replica_exited", next_aid=new_id("a")), "reject")
    assert set(b) == ANSWER_KEYS | {"client_error"}, b
    assert b["source_state"] == "dead" and b["request_status"] == "failed"
    assert_client_error(b["client_error"], "retry_budget_exhausted", rid, False, 0,
                        budget="request")
    q = rt.request(rid)
    assert q["status"] == "failed" and q["client_error"] == b["client_error"]
    assert list(rt.attempts(rid)) == [a1]
    err = assert_error(rt.create(rid, new_id("a")), 409, "request_closed")
    assert err["client_error"] == b["client_error"]


def test_second_failover_of_a_two_attempt_request_is_rejected(rt):
    rid, a1 = rt.started()
    a2 = rt.failed_over(rid, a1)
    b = answer(rt.failover(rid, a2, "pod_lost", next_aid=new_id("a")), "reject")
    assert b["client_error"]["error"]["code"] == "retry_budget_exhausted"
    assert rt.attempts(rid) == {a1: (1, "dead"), a2: (2, "dead")}


def test_rerun_over_the_token_limit_is_retry_cost_exceeded(rt):
    rid, a1 = rt.started()
    b = answer(rt.failover(rid, a1, "replica_exited", retry_prefill_tokens=32769,
                           next_aid=new_id("a")), "reject")
    assert_client_error(b["client_error"], "retry_cost_exceeded", rid, False, 0)
    assert rt.request(rid)["status"] == "failed"
    assert list(rt.attempts(rid)) == [a1]


def test_rerun_at_the_token_limit_is_allowed(rt):
    rid, a1 = rt.started()
    answer(rt.failover(rid, a1, "replica_exited", retry_prefill_tokens=32768,
                       next_aid=new_id("a")), "retry_prefill")


def test_budget_comes_before_unknown_outcome(rt):
    rid, a1 = rt.started(max_attempts=1)
    rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS)
    time.sleep(PAST_SHORT_LEASE_S)
    b = answer(rt.failover(rid, a1, "replica_exited"), "reject")
    assert b["client_error"]["error"]["code"] == "retry_budget_exhausted"


def test_cost_comes_before_unknown_outcome(rt):
    rid, a1 = rt.started()
    rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS)
    time.sleep(PAST_SHORT_LEASE_S)
    b = answer(rt.failover(rid, a1, "replica_exited", retry_prefill_tokens=50000), "reject")
    assert b["client_error"]["error"]["code"] == "retry_cost_exceeded"


def test_budget_comes_before_waiting_for_the_fence(rt):
    rid, a1 = rt.started(max_attempts=1)  # lease 30 s: liveness uncertain, not fenced
    b = answer(rt.failover(rid, a1, "network_error"), "reject")
    assert b["source_state"] == "cancel_requested"
    assert "retry_after_ms" not in b
    assert rt.request(rid)["status"] == "failed"


# --- row 8: reject on an unknown outcome ------------------------------------


def test_unknown_outcome_is_reject_tool_outcome_unknown(rt):
    rid, a1 = rt.started()
    rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS, tool="charge")
    time.sleep(PAST_SHORT_LEASE_S)
    b = answer(rt.failover(rid, a1, "pod_lost", next_aid=new_id("a")), "reject")
    assert b["request_status"] == "failed" and b["source_state"] == "dead"
    assert_client_error(b["client_error"], "tool_outcome_unknown", rid, False, 0)
    assert list(rt.attempts(rid)) == [a1]
    assert rt.request(rid)["client_error"] == b["client_error"]


def test_unknown_outcome_of_a_deduping_tool_does_not_reject(rt):
    rid, a1 = rt.started()
    rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS, tool_dedupes=True)
    time.sleep(PAST_SHORT_LEASE_S)
    answer(rt.failover(rid, a1, "pod_lost", next_aid=new_id("a")), "retry_prefill")


def test_unknown_outcome_comes_before_waiting_for_the_fence(rt):
    rid, a1 = rt.started()  # its lease runs: wait_for_fence would apply
    rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS)
    time.sleep(PAST_SHORT_LEASE_S)
    b = answer(rt.failover(rid, a1, "network_error"), "reject")
    assert b["client_error"]["error"]["code"] == "tool_outcome_unknown"


# --- row 9: wait_for_fence --------------------------------------------------


@pytest.mark.parametrize("signal", ["network_error", "heartbeat_timeout"])
def test_uncertain_liveness_waits_for_the_fence(rt, signal):
    rid, a1 = rt.started(lease_ms=1900)
    a2 = new_id("a")
    r = rt.failover(rid, a1, signal, next_attempt={"attempt_id": a2})
    b = answer(r, "wait_for_fence")
    assert set(b) == ANSWER_KEYS | {"retry_after_ms"}, b
    assert 1000 < b["retry_after_ms"] <= 1900, b
    assert r.header("Retry-After") == "2"
    assert b["source_state"] == "cancel_requested" and b["request_status"] == "open"
    assert rt.attempts(rid) == {a1: (1, "cancel_requested")}  # revoked, no rerun yet
    assert rt.recorded(rid) == 0
    assert [d[1]["action"] for d in rt.decisions(rid)] == ["wait_for_fence"]
    # The revoked source may not act.
    assert_error(rt.deliver(rid, a1, 1), 409, "attempt_fenced")
    # After the acknowledgement the same call decides again: rerun, source stays cancelled.
    assert rt.act(rid, a1, "cancel-ack").json["state"] == "cancelled"
    b = answer(rt.failover(rid, a1, signal, next_attempt={"attempt_id": a2}), "retry_prefill")
    assert b["source_state"] == "cancelled"
    assert b["attempt"]["attempt_id"] == a2
    assert rt.attempts(rid) == {a1: (1, "cancelled"), a2: (2, "live")}


def test_after_the_lease_runs_out_the_source_is_superseded(rt):
    rid, a1 = rt.started(lease_ms=SHORT_LEASE_MS)
    a2 = new_id("a")
    answer(rt.failover(rid, a1, "heartbeat_timeout", next_attempt={"attempt_id": a2}),
           "wait_for_fence")
    time.sleep(PAST_SHORT_LEASE_S)
    b = answer(rt.failover(rid, a1, "heartbeat_timeout", next_attempt={"attempt_id": a2}),
               "retry_prefill")
    assert b["source_state"] == "superseded"
    assert rt.attempts(rid) == {a1: (1, "superseded"), a2: (2, "live")}


def test_expired_source_with_uncertain_liveness_is_rerun_at_once(rt):
    rid, a1 = rt.started(lease_ms=SHORT_LEASE_MS)
    time.sleep(PAST_SHORT_LEASE_S)
    b = answer(rt.failover(rid, a1, "network_error", next_aid=new_id("a")), "retry_prefill")
    assert b["source_state"] == "superseded"


def test_held_call_of_a_dead_source_waits_for_the_call(rt):
    """Row 9 applies to a certainly gone replica too when it holds a call; its
    effect in docs/api.md: "source revoked and cancel_requested"."""
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, lease_ms=1900, tool="send_email", args={"to": "x"})
    a2 = new_id("a")
    r = rt.failover(rid, a1, "replica_exited", next_attempt={"attempt_id": a2})
    b = answer(r, "wait_for_fence")
    assert b["source_state"] == "cancel_requested"
    assert rt.attempts(rid) == {a1: (1, "cancel_requested")}
    assert_error(rt.claim(rid, new_id("c"), attempt_id=a1), 409, "attempt_fenced")
    assert 1000 < b["retry_after_ms"] <= 1900, b
    assert r.header("Retry-After") == "2"
    assert list(rt.attempts(rid)) == [a1]
    # The late completion settles it; the rerun then knows about it.
    assert rt.complete(rid, cid, tok, result={"id": 1}).status == 200
    b = answer(rt.failover(rid, a1, "replica_exited", next_attempt={"attempt_id": a2}),
               "retry_prefill")
    assert b["source_state"] == "dead"
    assert rt.attempts(rid) == {a1: (1, "dead"), a2: (2, "live")}
    assert b["settled_tool_calls"] == [{"tool_call_id": cid, "tool": "send_email",
                                        "args_sha256": fingerprint({"to": "x"}),
                                        "outcome": "succeeded"}]


@pytest.mark.parametrize("attempt_lease,call_lease", [(1500, 4000), (4000, 1500)])
def test_wait_is_the_longer_of_lease_and_held_call(rt, attempt_lease, call_lease):
    rid, a1 = rt.started(lease_ms=attempt_lease)
    rt.claimed(rid, a1, lease_ms=call_lease)
    r = rt.failover(rid, a1, "network_error")
    b = answer(r, "wait_for_fence")
    assert 3000 < b["retry_after_ms"] <= 4000, b
    assert r.header("Retry-After") == "4"


def test_acknowledged_source_with_a_held_call_still_waits(rt):
    rid, a1 = rt.started()
    rt.claimed(rid, a1, lease_ms=1900)
    assert rt.act(rid, a1, "cancel-ack").status == 200
    b = answer(rt.failover(rid, a1, "network_error"), "wait_for_fence")
    assert 0 < b["retry_after_ms"] <= 1900
    assert b["source_state"] == "cancelled"


def test_certainly_gone_needs_no_fence_even_after_a_cancel(rt):
    rid, a1 = rt.started()  # its lease runs
    assert rt.act(rid, a1, "cancel", {"reason": "slow"}).status == 200
    b = answer(rt.failover(rid, a1, "pod_lost", next_aid=new_id("a")), "retry_prefill")
    assert b["source_state"] == "dead"
    assert rt.attempts(rid)[a1] == (1, "dead")


# --- row 10: retry_prefill --------------------------------------------------


@pytest.mark.parametrize("signal", ["replica_exited", "pod_lost", "upstream_closed"])
def test_dead_replica_is_rerun_in_the_same_transaction(rt, signal):
    rid, a1 = rt.started(model_revision="m1", replica="gpu-1")
    a2 = new_id("a")
    r = rt.failover(rid, a1, signal, retry_prefill_tokens=1200,
                    next_attempt={"attempt_id": a2, "replica": "gpu-2", "lease_ms": 7000})
    b = answer(r, "retry_prefill")
    assert set(b) == ANSWER_KEYS | {"attempt", "settled_tool_calls"}, b
    assert (b["request_id"], b["attempt_id"], b["signal"]) == (rid, a1, signal)
    assert b["source_state"] == "dead" and b["request_status"] == "open"
    assert b["settled_tool_calls"] == []
    att = b["attempt"]
    assert set(att) == {"attempt_id", "epoch", "attempt_number", "lease_ms", "gateway",
                        "request"}
    assert (att["attempt_id"], att["epoch"], att["attempt_number"]) == (a2, 2, 2)
    assert att["gateway"] is None
    assert leases_as_asked(att["lease_ms"], 7000)
    req = att["request"]
    assert req["request_id"] == rid and req["status"] == "open"
    assert req["attempts"] == 2 and req["max_attempts"] == 2
    assert req["model_revision"] == "m1" and req["first_delta_sent"] is False
    assert rt.attempts(rid) == {a1: (1, "dead"), a2: (2, "live")}
    rows = rt.sql("SELECT replica, model_revision, is_retry FROM attempts WHERE tenant = '%s'"
                  " AND request_id = '%s' AND attempt_id = '%s'" % (rt.tenant, rid, a2))
    assert rows == [["gpu-2", "m1", "t"]]
    # The rerun has the rights; the source none.
    rt.claimed(rid, a2)
    assert_error(rt.claim(rid, new_id("c"), attempt_id=a1), 409, "attempt_fenced")
    assert rt.recorded(rid) == 1


def test_retry_prefill_without_next_attempt_leaves_it_to_post_attempts(rt):
    rid, a1 = rt.started()
    b = answer(rt.failover(rid, a1, "replica_exited"), "retry_prefill")
    assert "attempt" in b and b["attempt"] is None
    assert rt.attempts(rid) == {a1: (1, "dead")}
    a2 = new_id("a")
    r = rt.create(rid, a2)
    assert r.status == 201 and r.json["epoch"] == 2, r


def test_next_attempt_takes_the_default_lease(rt):
    rid, a1 = rt.started()
    b = answer(rt.failover(rid, a1, "replica_exited",
                           next_attempt={"attempt_id": new_id("a")}), "retry_prefill")
    assert leases_as_asked(b["attempt"]["lease_ms"], 30000)


def test_failed_source_is_rerun_and_stays_failed(rt):
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "failed").status == 200
    b = answer(rt.failover(rid, a1, "network_error", next_aid=new_id("a")), "retry_prefill")
    assert b["source_state"] == "failed"
    assert rt.attempts(rid)[a1] == (1, "failed")


def test_next_attempt_with_another_revision_is_revision_mismatch_and_changes_nothing(rt):
    rid, a1 = rt.started(model_revision="m1")
    before = rt.events(rid)
    r = rt.failover(rid, a1, "replica_exited",
                    next_attempt={"attempt_id": new_id("a"), "model_revision": "m2"})
    assert_error(r, 409, "revision_mismatch")
    assert rt.attempts(rid) == {a1: (1, "live")}
    assert rt.request(rid)["status"] == "open"
    assert rt.events(rid) == before
    assert rt.recorded(rid) == 0
    # Fixed, the call is decided anew.
    a2 = new_id("a")
    b = answer(rt.failover(rid, a1, "replica_exited",
                           next_attempt={"attempt_id": a2, "model_revision": "m1"}),
               "retry_prefill")
    assert b["attempt"]["attempt_id"] == a2


@pytest.mark.parametrize("reuse", ["source", "older"])
def test_next_attempt_reusing_an_id_is_request_mismatch_and_changes_nothing(rt, reuse):
    rid, a1 = rt.started(max_attempts=3)
    if reuse == "source":
        src, nxt = a1, a1
    else:
        src, nxt = rt.failed_over(rid, a1), a1
    before_attempts, before_events = rt.attempts(rid), rt.events(rid)
    r = rt.failover(rid, src, "replica_exited", next_attempt={"attempt_id": nxt})
    assert_error(r, 422, "request_mismatch")
    assert rt.attempts(rid) == before_attempts
    assert rt.attempts(rid)[src][1] == "live"
    assert rt.events(rid) == before_events


def test_next_attempt_without_revision_takes_the_requests(rt):
    rid, a1 = rt.started(model_revision="m7")
    a2 = rt.failed_over(rid, a1)
    rows = rt.sql("SELECT model_revision FROM attempts WHERE tenant = '%s' AND request_id = '%s'"
                  " AND attempt_id = '%s'" % (rt.tenant, rid, a2))
    assert rows == [["m7"]]


def test_settled_tool_calls_lists_every_settled_call_of_the_request(rt):
    rid = new_id("r")
    # A call settled before the request had attempts.
    r = rt.claim(rid, "call_00", tool="lookup", args={"q": 1})
    assert r.status == 201, r
    assert rt.complete(rid, "call_00", r.json["fencing_token"], result=[]).status == 200
    a1 = new_id("a")
    assert rt.create(rid, a1).status == 201
    c1, t1 = rt.claimed(rid, a1, "call_01", tool="send_email", args={"to": "a@b"})
    assert rt.complete(rid, c1, t1, result={"id": "m-1"}).status == 200
    c2, t2 = rt.claimed(rid, a1, "call_02", tool="charge", args={"amount": 5})
    assert rt.complete(rid, c2, t2, "failed", result={"declined": True}).status == 200
    c3, t3 = rt.claimed(rid, a1, "call_03", tool="x", args={})
    assert rt.call(rid, c3, "release", {"fencing_token": t3}).status == 200
    c4, t4 = rt.claimed(rid, a1, "call_04", tool="y", args={})
    r = rt.complete(rid, c4, t4, "failed", result={"e": 1}, retryable=True)
    assert r.status == 200 and r.json["status"] == "released", r
    sha = "ab" * 32
    c5, t5 = rt.claimed(rid, a1, "call_05", args_sha256=sha)
    r5 = rt.complete(rid, c5, t5, result={"done": True})
    assert r5.status == 200, r5
    b = answer(rt.failover(rid, a1, "replica_exited", next_aid=new_id("a")), "retry_prefill")
    got = sorted(b["settled_tool_calls"], key=lambda c: c["tool_call_id"])
    assert got == [
        {"tool_call_id": "call_00", "tool": "lookup", "args_sha256": fingerprint({"q": 1}),
         "outcome": "succeeded"},
        {"tool_call_id": "call_01", "tool": "send_email",
         "args_sha256": fingerprint({"to": "a@b"}), "outcome": "succeeded"},
        {"tool_call_id": "call_02", "tool": "charge", "args_sha256": fingerprint({"amount": 5}),
         "outcome": "failed"},
        {"tool_call_id": "call_05", "tool": None, "args_sha256": sha, "outcome": "succeeded"},
    ]


# --- events -----------------------------------------------------------------


@pytest.mark.parametrize("scenario,action", [
    ("rerun", "retry_prefill"), ("delta", "terminate_stream"), ("budget", "reject"),
    ("gone", "cancel_upstream"), ("slow", "keep_waiting"), ("uncertain", "wait_for_fence")])
def test_every_decision_is_an_event_with_its_inputs(rt, scenario, action):
    rid, a1 = rt.started(max_attempts=1 if scenario == "budget" else 2)
    if scenario == "delta":
        assert rt.deliver(rid, a1, 4).status == 200
    signal = {"rerun": "pod_lost", "delta": "pod_lost", "budget": "pod_lost",
              "gone": "client_disconnected", "slow": "overloaded",
              "uncertain": "network_error"}[scenario]
    answer(rt.failover(rid, a1, signal, retry_prefill_tokens=321), action)
    decisions = rt.decisions(rid)
    assert len(decisions) == 1, rt.events(rid)
    aid, detail = decisions[0]
    assert aid == a1
    assert isinstance(detail.get("inputs"), dict) and detail["inputs"], detail
    text = json.dumps(detail)
    assert '"%s"' % action in text and '"%s"' % signal in text, detail
    assert rt.recorded(rid) == (0 if action in ("keep_waiting", "wait_for_fence") else 1)


def test_the_source_revocation_is_an_event_of_the_same_decision(rt):
    rid, a1 = rt.started()
    a2 = rt.failed_over(rid, a1)
    types = [(t, a) for t, a, _, _ in rt.events(rid)]
    assert ("failover_decision", a1) in types
    assert any(t == "attempt_revoked" and a == a1 for t, a in types), types
    assert rt.attempts(rid)[a2] == (2, "live")


def test_deliver_and_failover_racing_never_rerun_after_a_delta(service):
    """Invariant 2 under a race: either the delta wins (and the stream is
    terminated) or the failover wins (and the delta is refused)."""
    for _ in range(8):
        rt = Router(service)
        rid, a1 = rt.started()
        a2 = new_id("a")
        out = {}
        barrier = threading.Barrier(2)

        def deliver():
            barrier.wait()
            out["deliver"] = rt.deliver(rid, a1, 1)

        def failover():
            barrier.wait()
            out["failover"] = rt.failover(rid, a1, "replica_exited",
                                          next_attempt={"attempt_id": a2})

        threads = [threading.Thread(target=deliver), threading.Thread(target=failover)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        d, f = out["deliver"], out["failover"]
        assert f.status == 200, f
        if d.status == 200:
            assert f.json["action"] == "terminate_stream", (d, f)
            assert list(rt.attempts(rid)) == [a1]
            assert rt.request(rid)["status"] == "terminated"
        else:
            assert_error(d, 409, "attempt_fenced")
            assert f.json["action"] == "retry_prefill", (d, f)
            assert rt.request(rid)["first_delta_sent"] is False
            assert list(rt.attempts(rid)) == [a1, a2]


# --- claims under attempts ----------------------------------------------------


def test_claim_under_an_unknown_attempt_is_attempt_not_found(rt):
    rid, a1 = rt.started()
    cid = new_id("c")
    assert_error(rt.claim(rid, cid, attempt_id=new_id("a")), 404, "attempt_not_found")
    assert rt.sql("SELECT count(*) FROM tool_calls WHERE tenant = '%s' AND request_id = '%s'"
                  % (rt.tenant, rid)) == [["0"]]
    # A request without attempts: the same, and the request is not created.
    rid2 = new_id("r")
    assert_error(rt.claim(rid2, cid, attempt_id=a1), 404, "attempt_not_found")
    assert rt.request(rid2) is None


def test_attempt_not_found_comes_before_args_mismatch_and_replay(rt):
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, tool="t", args={"a": 1})
    assert rt.complete(rid, cid, tok, result={"ok": True}).status == 200
    for args in ({"a": 1}, {"a": 2}):
        r = rt.claim(rid, cid, attempt_id=new_id("a"), tool="t", args=args)
        assert_error(r, 404, "attempt_not_found")


def test_claim_without_attempt_on_a_request_with_attempts_is_attempt_required(rt):
    rid = new_id("r")
    # A completed call from before the first attempt: even its replay needs the attempt.
    r = rt.claim(rid, "call_00", tool="t", args={"a": 1})
    assert rt.complete(rid, "call_00", r.json["fencing_token"], result={"x": 1}).status == 200
    a1 = new_id("a")
    assert rt.create(rid, a1).status == 201
    assert_error(rt.claim(rid, "call_00", tool="t", args={"a": 1}), 409, "attempt_required")
    assert_error(rt.claim(rid, "call_00", tool="t", args={"a": 2}), 409, "attempt_required")
    cid = new_id("c")
    assert_error(rt.claim(rid, cid), 409, "attempt_required")
    r = rt.claim(rid, "call_00", attempt_id=a1, tool="t", args={"a": 1})
    assert r.status == 200 and r.json["replayed"] is True, r


def test_claim_under_the_live_attempt_records_it_as_holder(rt):
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, owner="agent@pod-1")
    g = rt.service.ledgerd.get("/v1/requests/%s/tool-calls/%s" % (rid, cid), token=rt.tok)
    assert g.status == 200, g
    assert g.json["holder"]["attempt_id"] == a1
    ev = [e for e in rt.events(rid) if e[0] == "claimed"]
    assert ev and ev[-1][1] == a1


def test_claim_under_a_fenced_attempt_is_refused_as_an_event(rt):
    rid, a1 = rt.started()
    a2 = rt.failed_over(rid, a1)
    cid = new_id("c")
    r = rt.claim(rid, cid, attempt_id=a1, tool="send_email", owner="zombie@pod-1")
    assert_error(r, 409, "attempt_fenced")
    refused = [e for e in rt.events(rid) if e[0] == "refused" and e[2] == cid]
    assert len(refused) == 1, rt.events(rid)
    assert refused[0][1] == a1
    assert refused[0][3]["code"] == "attempt_fenced"
    assert rt.sql("SELECT count(*) FROM tool_calls WHERE tenant = '%s' AND request_id = '%s'"
                  % (rt.tenant, rid)) == [["0"]]
    # The live attempt is not disturbed.
    rt.claimed(rid, a2, cid)


def test_replay_is_served_to_a_fenced_attempt(rt):
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, tool="send_email", args={"to": "x"})
    raw_result = '{"message_id" :  "m-9", "n": [1, 2.50]}'
    raw = ('{"fencing_token": %d, "outcome": "succeeded", "result": %s}'
           % (tok, raw_result)).encode()
    assert rt.call(rid, cid, "complete", raw=raw).status == 200
    a2 = rt.failed_over(rid, a1)
    for aid in (a1, a2):
        r = rt.claim(rid, cid, attempt_id=aid, tool="send_email", args={"to": "x"})
        assert r.status == 200, r
        assert r.json["status"] == "completed" and r.json["replayed"] is True
        assert r.header("Idempotent-Replayed") == "true"
        assert result_text_of(r.body).startswith(raw_result)
    assert rt.attempts(rid) == {a1: (1, "dead"), a2: (2, "live")}
    # And after the request completed, to every attempt it had.
    assert rt.finish(rid, a2, "completed").status == 200
    for aid in (a1, a2):
        r = rt.claim(rid, cid, attempt_id=aid, tool="send_email", args={"to": "x"})
        assert r.status == 200 and r.json["replayed"] is True, r
        assert result_text_of(r.body).startswith(raw_result)


def test_tombstone_is_result_expired_even_to_a_fenced_attempt(rt):
    rid, a1 = rt.started()
    a2 = rt.failed_over(rid, a1)
    rt.sql("INSERT INTO tool_call_tombstones (tenant, request_id, tool_call_id, args_sha256,"
           " outcome, completed_at, expires_at) VALUES ('%s', '%s', 'call_00', NULL,"
           " 'succeeded', now() - interval '30 days', now() + interval '60 days')"
           % (rt.tenant, rid))
    for aid in (a1, a2):
        assert_error(rt.claim(rid, "call_00", attempt_id=aid), 410, "result_expired")


def divergent(rt, other):
    """A rerun a2 claiming call_01 that a1 completed; @other changes the claim."""
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, "call_01", tool="send_email", args={"to": "a"})
    assert rt.complete(rid, cid, tok, result={"id": 1}).status == 200
    a2 = rt.failed_over(rid, a1)
    body = {"tool": "send_email", "args": {"to": "a"}}
    body.update(other)
    return rid, a1, a2, cid, rt.claim(rid, cid, attempt_id=a2, **body)


@pytest.mark.parametrize("other", [{"args": {"to": "b"}}, {"tool": "charge"},
                                   {"tool_dedupes": True}])
def test_divergence_under_a_live_attempt_fails_the_request(rt, other):
    rid, a1, a2, cid, r = divergent(rt, other)
    err = assert_error(r, 422, "args_mismatch")
    assert err["expected_args_sha256"] == fingerprint({"to": "a"})
    if "args" in other:
        assert err["got_args_sha256"] == fingerprint(other["args"])
    assert r.header("Idempotent-Replayed") is None
    assert rt.attempts(rid) == {a1: (1, "dead"), a2: (2, "cancel_requested")}
    q = rt.request(rid)
    assert q["status"] == "failed"
    assert_client_error(q["client_error"], "tool_call_divergence", rid, False, 0)
    # No further attempt, claim or failover.
    err = assert_error(rt.create(rid, new_id("a")), 409, "request_closed")
    assert err["client_error"] == q["client_error"]
    assert_error(rt.claim(rid, "call_02", attempt_id=a2), 409, "attempt_fenced")
    err = assert_error(rt.failover(rid, a2, "replica_exited"), 409, "request_closed")
    assert err["client_error"] == q["client_error"]


def test_divergence_of_a_released_call_also_fails_the_request(rt):
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, "call_01", tool="t", args={"k": 1})
    assert rt.call(rid, cid, "release", {"fencing_token": tok}).status == 200
    a2 = rt.failed_over(rid, a1)
    assert_error(rt.claim(rid, cid, attempt_id=a2, tool="t", args={"k": 2}), 422,
                 "args_mismatch")
    assert rt.request(rid)["status"] == "failed"
    assert rt.attempts(rid)[a2] == (2, "cancel_requested")


def test_mismatch_under_a_fenced_attempt_changes_nothing(rt):
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, "call_01", tool="send_email", args={"to": "a"})
    assert rt.complete(rid, cid, tok, result={"id": 1}).status == 200
    a2 = rt.failed_over(rid, a1)
    r = rt.claim(rid, cid, attempt_id=a1, tool="send_email", args={"to": "z"})
    assert_error(r, 422, "args_mismatch")
    assert rt.attempts(rid) == {a1: (1, "dead"), a2: (2, "live")}
    q = rt.request(rid)
    assert q["status"] == "open" and q["client_error"] is None
    r = rt.claim(rid, cid, attempt_id=a2, tool="send_email", args={"to": "a"})
    assert r.status == 200 and r.json["replayed"] is True, r


def test_renewing_a_claim_of_a_revoked_source_is_attempt_fenced(rt):
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, lease_ms=5000)
    answer(rt.failover(rid, a1, "network_error"), "wait_for_fence")
    r = rt.call(rid, cid, "renew", {"fencing_token": tok, "lease_ms": 30000})
    assert_error(r, 409, "attempt_fenced")
    # Its completion is still accepted: the side effect happened.
    assert rt.complete(rid, cid, tok, result={"ok": 1}).status == 200


# --- the pool-wide budget, on a ledgerd with a policy file ---------------------

POLICY = """\
on_upstream_failure:
  before_first_delta:
    max_attempts: 3
default_lease_ms: 45000
max_retry_prefill_tokens: 1000
require_same_revision: false
pool_retry_budget: {percent_of_attempts: 0, window_s: 2, min_retries: 2}
"""
WINDOW_S = 2


class PolicyService:
    """What Router needs, for a ledgerd of its own started with POLICY."""

    def __init__(self, cluster, tmp):
        self.cluster = cluster
        self.dbname = "failover_policy_%s" % secrets.token_hex(3)
        self.database_url = cluster.create_db(self.dbname)
        ledgerd_cmd("migrate", "--database-url", self.database_url)
        policy = tmp / "policy.yaml"
        policy.write_text(POLICY)
        self._tokens = {}
        self.ledgerd = Ledgerd(self.database_url, tmp / "ledgerd.log",
                               extra_args=["--policy", str(policy)])

    def token(self, role="agent", tenant="t1"):
        if (tenant, role) not in self._tokens:
            out = ledgerd_cmd("token", "create", "--tenant", tenant, "--role", role,
                              "--database-url", self.database_url)
            self._tokens[(tenant, role)] = out.stdout.strip()
        return self._tokens[(tenant, role)]

    def sql(self, query):
        return self.cluster.psql(query, self.dbname)


@pytest.fixture(scope="module")
def policy_service(cluster, tmp_path_factory):
    svc = PolicyService(cluster, tmp_path_factory.mktemp("failover_policy"))
    yield svc
    svc.ledgerd.stop()


def test_pool_budget_refuses_a_burst_of_retries_then_refills(policy_service):
    a, b = Router(policy_service), Router(policy_service)
    reqs = [a.started() for _ in range(6)]
    (r1, a1), (r2, a2), (r3, a3), (r4, a4), (r5, a5), (r6, a6) = reqs
    rb, ab = b.started()
    assert a.finish(r4, a4, "failed").status == 200
    # The burst: two retries of tenant a are allowed in the window ...
    t_first_retry = time.monotonic()
    n1 = a.failed_over(r1, a1)
    n2 = a.failed_over(r2, a2)
    t_last_retry = time.monotonic()
    # ... the third is refused, by failover and by POST attempts alike.
    f = a.failover(r3, a3, "replica_exited", next_aid=new_id("a"))
    c = a.create(r4, new_id("a"))
    elapsed = time.monotonic() - t_last_retry
    assert elapsed < WINDOW_S - 0.5, "the burst took too long to test the window"
    bf = answer(f, "reject")
    assert bf["request_status"] == "failed" and bf["source_state"] == "dead"
    assert_client_error(bf["client_error"], "retry_budget_exhausted", r3, False, 0,
                        budget="pool")
    assert a.decisions(r3)[-1][1]["budget"] == "pool"
    assert list(a.attempts(r3)) == [a3]
    err = assert_error(c, 409, "retry_budget_exhausted")
    assert err["budget"] == "pool"
    # The first retry of the window leaves it first: then min_retries (2) allow one.
    assert_retry_after(c, err, WINDOW_S * 1000)
    assert err["retry_after_ms"] >= WINDOW_S * 1000 - (time.monotonic() - t_first_retry) * 1000 \
        - 1000, err
    assert list(a.attempts(r4)) == [a4]
    # The retries are counted for the tenant that made them only.
    b.failed_over(rb, ab)
    assert a.attempts(r1)[n1] == (2, "live") and a.attempts(r2)[n2] == (2, "live")
    # Once the window has passed, retries are allowed again, two of them.
    time.sleep(max(0.0, WINDOW_S + 0.2 - (time.monotonic() - t_last_retry)))
    r = a.create(r4, new_id("a"))
    assert r.status == 201, r
    a.failed_over(r5, a5)
    f = a.failover(r6, a6, "pod_lost", next_aid=new_id("a"))
    assert answer(f, "reject")["client_error"]["error"]["code"] == "retry_budget_exhausted"


def test_pool_refusal_says_when_a_retry_is_welcome_again(policy_service):
    """retry_after_ms of a pool refusal is when the window next allows a retry:
    waited out, the same attempt is created."""
    rt = Router(policy_service)
    reqs = [rt.started() for _ in range(3)]
    for rid, aid in reqs[:2]:
        rt.failed_over(rid, aid)
    rid, aid = reqs[2]
    rt.failed(rid, aid)
    a2 = new_id("a")
    r = rt.create(rid, a2)
    err = assert_error(r, 409, "retry_budget_exhausted")
    assert err["budget"] == "pool", err
    assert_retry_after(r, err, WINDOW_S * 1000)
    time.sleep(err["retry_after_ms"] / 1000 + 0.1)
    r = rt.create(rid, a2)
    assert r.status == 201, r


def test_policy_sets_default_lease_and_max_attempts(policy_service):
    rt = Router(policy_service)
    rid, a1 = new_id("r"), new_id("a")
    r = rt.create(rid, a1)
    assert r.status == 201, r
    assert leases_as_asked(r.json["lease_ms"], 45000)
    assert r.json["request"]["max_attempts"] == 3


def test_policy_sets_the_rerun_token_limit(policy_service):
    rt = Router(policy_service)
    rid, a1 = rt.started()
    b = answer(rt.failover(rid, a1, "replica_exited", retry_prefill_tokens=1001), "reject")
    assert b["client_error"]["error"]["code"] == "retry_cost_exceeded"
    rid, a1 = rt.started()
    answer(rt.failover(rid, a1, "replica_exited", retry_prefill_tokens=1000,
                       next_aid=new_id("a")), "retry_prefill")


def test_policy_without_same_revision_allows_another_revision(policy_service):
    rt = Router(policy_service)
    rid, a1 = rt.started(model_revision="m1")
    b = answer(rt.failover(rid, a1, "replica_exited",
                           next_attempt={"attempt_id": new_id("a"), "model_revision": "m2"}),
               "retry_prefill")
    assert b["attempt"]["attempt_id"]
    rows = rt.sql("SELECT model_revision FROM attempts WHERE tenant = '%s' AND"
                  " request_id = '%s' ORDER BY epoch" % (rt.tenant, rid))
    assert rows == [["m1"], ["m2"]]


def test_concurrent_retries_of_one_tenant_share_the_budget(policy_service):
    rt = Router(policy_service)
    reqs = [rt.started() for _ in range(6)]
    out = {}
    barrier = threading.Barrier(len(reqs))

    def go(rid, aid):
        barrier.wait()
        out[rid] = rt.failover(rid, aid, "replica_exited", next_aid=new_id("a"))

    threads = [threading.Thread(target=go, args=r) for r in reqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    actions = sorted(answer(r, r.json["action"])["action"] for r in out.values())
    assert actions == ["reject"] * 4 + ["retry_prefill"] * 2, out
    retries = rt.sql("SELECT count(*) FROM attempts WHERE tenant = '%s' AND is_retry"
                     % rt.tenant)
    assert retries == [["2"]]
