"""Attempts over HTTP: POST /v1/requests/{rid}/attempts (every row of its
table and their order where two apply), an attempt's own calls (renew,
deliver, cancel, cancel-ack, finish), zombies (an attempt without rights can
neither claim, renew a claim, renew, deliver nor finish), invariants 1 and 2
(at most one live attempt; no attempt after the first delta), the epoch,
the reopen of an abandoned request, and roles.

Contract: docs/api.md "Attempts (router integration)", docs/design.md invariants 1-3
and 7 and the attempt state machine; where docs/api.md is silent, the decisions
ledgerd documents (201/200 bodies, attempt_fenced with attempt_state, ...).

Every test works in a tenant of its own: the pool-wide retry budget is
counted per tenant, so tests never spend each other's retries.
"""

import threading
import time

import pytest

from conftest import claim_id, new_id
from http_helpers import TS_RE, Router, assert_error, assert_retry_after, leases_as_asked

SHORT_LEASE_MS = 250
PAST_SHORT_LEASE_S = 0.4  # sleep just past SHORT_LEASE_MS, with a margin

REQUEST_KEYS = {"request_id", "status", "phase", "first_delta_sent", "delivered_output_tokens",
                "attempts", "max_attempts", "model_revision", "input_sha256", "created_at"}


@pytest.fixture
def rt(service):
    return Router(service)


# --- POST attempts: created -------------------------------------------------


def test_create_is_201_with_attempt_and_request(rt):
    rid, aid = new_id("r"), new_id("a")
    r = rt.create(rid, aid, replica="gpu-7", model_revision="m-2026-01")
    assert r.status == 201, r
    b = r.json
    assert set(b) == {"attempt_id", "epoch", "attempt_number", "lease_ms", "gateway",
                      "request"}, b
    assert b["attempt_id"] == aid and b["gateway"] is None
    assert b["epoch"] == 1 and b["attempt_number"] == 1
    assert leases_as_asked(b["lease_ms"], 30000)  # the policy's default_lease_ms
    req = b["request"]
    assert REQUEST_KEYS <= set(req) <= REQUEST_KEYS | {"client_error"}, req
    assert req["request_id"] == rid
    assert req["status"] == "open" and req["phase"] == "prefill"
    assert req["first_delta_sent"] is False and req["delivered_output_tokens"] == 0
    assert req["attempts"] == 1 and req["max_attempts"] == 2  # the policy's max_attempts
    assert req["model_revision"] == "m-2026-01" and req["input_sha256"] is None
    assert req.get("client_error") is None
    assert TS_RE.match(req["created_at"]), req
    # The rows it leaves.
    assert rt.attempts(rid) == {aid: (1, "live")}
    rows = rt.sql("SELECT replica, model_revision, is_retry FROM attempts WHERE tenant = '%s'"
                  " AND request_id = '%s'" % (rt.tenant, rid))
    assert rows == [["gpu-7", "m-2026-01", "f"]]
    q = rt.request(rid)
    assert q["status"] == "open" and q["attempts"] == 1 and q["max_attempts"] == 2
    assert q["model_revision"] == "m-2026-01"


def test_create_echoes_lease_and_max_attempts_and_leaves_revision_null(rt):
    rid, aid = new_id("r"), new_id("a")
    r = rt.create(rid, aid, lease_ms=4321, max_attempts=4)
    assert r.status == 201, r
    assert leases_as_asked(r.json["lease_ms"], 4321)
    assert r.json["request"]["max_attempts"] == 4
    assert r.json["request"]["model_revision"] is None
    left = rt.sql("SELECT ceil(extract(epoch FROM lease_until - clock_timestamp()) * 1000)"
                  " FROM attempts WHERE tenant = '%s' AND request_id = '%s'"
                  % (rt.tenant, rid))[0][0]
    assert 0 < float(left) <= 4321


@pytest.mark.parametrize("field,value", [("lease_ms", 99), ("lease_ms", 3600001),
                                         ("lease_ms", "1000"), ("max_attempts", 0),
                                         ("max_attempts", 6), ("replica", 7),
                                         ("model_revision", "x" * 257),
                                         ("attempt_id", "bad/id"), ("attempt_id", "")])
def test_create_validates_its_body(rt, field, value):
    rid = new_id("r")
    body = {"attempt_id": new_id("a"), field: value}
    r = rt.post("/v1/requests/%s/attempts" % rid, body)
    err = assert_error(r, 400, "invalid_field")
    assert err["field"] == field
    assert rt.count("attempts", rid) == 0 and rt.request(rid) is None


def test_create_requires_attempt_id(rt):
    rid = new_id("r")
    r = rt.post("/v1/requests/%s/attempts" % rid, {"replica": "gpu-1"})
    err = assert_error(r, 400, "invalid_field")
    assert err["field"] == "attempt_id"
    assert rt.request(rid) is None


def test_create_accepts_the_lease_bounds(rt):
    for lease in (100, 3600000):
        rid, aid, b = rt.started_with_body(lease_ms=lease)
        assert leases_as_asked(b["lease_ms"], lease)


# --- POST attempts: the same attempt_id again ---------------------------------


def test_same_attempt_id_same_body_is_200_and_changes_nothing(rt):
    rid, aid = new_id("r"), new_id("a")
    body = {"replica": "gpu-1", "model_revision": "m1", "lease_ms": 20000}
    r1 = rt.create(rid, aid, **body)
    assert r1.status == 201, r1
    evs = rt.events(rid)
    r2 = rt.create(rid, aid, **body)
    assert r2.status == 200, r2
    b1, b2 = r1.json, r2.json
    assert set(b2) == set(b1)
    assert b2["attempt_id"] == aid and b2["epoch"] == 1 and b2["attempt_number"] == 1
    assert 0 < b2["lease_ms"] <= 20000  # what is left
    assert b2["request"] == b1["request"]
    assert rt.attempts(rid) == {aid: (1, "live")}
    assert rt.events(rid) == evs


def test_same_attempt_id_without_revision_both_times_is_200(rt):
    rid, aid = rt.started(replica="gpu-1")
    r = rt.create(rid, aid, replica="gpu-1")
    assert r.status == 200, r
    assert rt.request(rid)["attempts"] == 1


@pytest.mark.parametrize("first,again", [
    ({"replica": "gpu-1"}, {"replica": "gpu-2"}),
    ({"replica": "gpu-1"}, {}),
    ({"replica": "gpu-1", "model_revision": "m1"}, {"replica": "gpu-1", "model_revision": "m2"}),
    ({"replica": "gpu-1", "model_revision": "m1"}, {"replica": "gpu-1"}),
    ({"replica": "gpu-1"}, {"replica": "gpu-1", "model_revision": "m1"}),
])
def test_same_attempt_id_other_replica_or_revision_is_request_mismatch(rt, first, again):
    rid, aid = rt.started(**first)
    r = rt.create(rid, aid, **again)
    assert_error(r, 422, "request_mismatch")
    assert rt.attempts(rid) == {aid: (1, "live")}
    assert rt.request(rid)["attempts"] == 1


def test_repeat_and_mismatch_come_before_first_delta_sent(rt):
    """Rows 1-2 precede row 3: a retried create after the first delta still answers."""
    rid, aid = rt.started(replica="gpu-1")
    assert rt.deliver(rid, aid, 3).status == 200
    r = rt.create(rid, aid, replica="gpu-1")
    assert r.status == 200, r
    assert r.json["request"]["first_delta_sent"] is True
    assert_error(rt.create(rid, aid, replica="gpu-9"), 422, "request_mismatch")


def test_repeat_comes_before_request_closed(rt):
    rid, aid = rt.started(replica="gpu-1")
    assert rt.finish(rid, aid, "completed").status == 200
    r = rt.create(rid, aid, replica="gpu-1")
    assert r.status == 200, r
    assert r.json["request"]["status"] == "completed"
    assert_error(rt.create(rid, aid, replica="gpu-2"), 422, "request_mismatch")


# --- POST attempts: first_delta_sent and request_closed -----------------------


def test_no_attempt_after_first_delta_even_when_the_old_one_is_fenced(rt):
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 5).status == 200
    assert rt.cancel(rid, a1).status == 200
    assert rt.ack(rid, a1).json["state"] == "cancelled"
    r = rt.create(rid, new_id("a"))
    err = assert_error(r, 409, "first_delta_sent")
    assert "client_error" in err and err["client_error"] is None
    assert list(rt.attempts(rid)) == [a1]


def test_no_attempt_after_first_delta_when_the_old_lease_ran_out(rt):
    rid, a1 = rt.started(lease_ms=SHORT_LEASE_MS)
    assert rt.deliver(rid, a1, 1).status == 200
    time.sleep(PAST_SHORT_LEASE_S)
    assert_error(rt.create(rid, new_id("a")), 409, "first_delta_sent")
    assert rt.attempts(rid) == {a1: (1, "live")}


def test_no_attempt_after_first_delta_of_a_failed_attempt(rt):
    rid, a1 = rt.started(max_attempts=3)
    assert rt.deliver(rid, a1, 2).status == 200
    rt.failed(rid, a1)
    assert_error(rt.create(rid, new_id("a")), 409, "first_delta_sent")
    assert rt.count("attempts", rid) == 1


def test_first_delta_sent_carries_the_recorded_client_error_and_precedes_closed(rt):
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 37).status == 200
    f = rt.failover(rid, a1, "upstream_closed")
    assert f.status == 200 and f.json["action"] == "terminate_stream", f
    assert rt.request(rid)["status"] == "terminated"
    err = assert_error(rt.create(rid, new_id("a")), 409, "first_delta_sent")
    ce = err["client_error"]
    assert ce == f.json["client_error"]
    assert ce["error"]["code"] == "upstream_decode_interrupted"
    assert ce["error"]["delivered_output_tokens"] == 37


def test_completed_request_is_request_closed_with_null_client_error(rt):
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "completed").status == 200
    err = assert_error(rt.create(rid, new_id("a")), 409, "request_closed")
    assert "client_error" in err and err["client_error"] is None
    assert rt.count("attempts", rid) == 1


def test_failed_request_is_request_closed_with_its_client_error(rt):
    rid, a1 = rt.started()
    f = rt.failover(rid, a1, "replica_exited", retry_prefill_tokens=40000)
    assert f.status == 200 and f.json["action"] == "reject", f
    err = assert_error(rt.create(rid, new_id("a")), 409, "request_closed")
    assert err["client_error"]["error"]["code"] == "retry_cost_exceeded"
    assert err["client_error"] == f.json["client_error"]


def test_request_closed_comes_before_the_budget(rt):
    rid, a1 = rt.started(max_attempts=1)
    assert rt.finish(rid, a1, "completed").status == 200
    assert_error(rt.create(rid, new_id("a")), 409, "request_closed")


# --- POST attempts: retry_budget_exhausted ----------------------------------


def test_max_attempts_reached_is_retry_budget_exhausted(rt):
    rid, a1 = rt.started()  # the policy's max_attempts: 2
    rt.failed(rid, a1)
    a2 = new_id("a")
    r = rt.create(rid, a2)
    assert r.status == 201, r
    assert r.json["epoch"] == 2
    rt.failed(rid, a2)
    r = rt.create(rid, new_id("a"))
    err = assert_error(r, 409, "retry_budget_exhausted")
    # The request's own budget is spent for good: no time to wait for.
    assert err["budget"] == "request", err
    assert "retry_after_ms" not in err and r.header("Retry-After") is None, r
    assert list(rt.attempts(rid)) == [a1, a2]
    refused = [d for t, _, _, d in rt.events(rid) if t == "refused"]
    assert refused[-1]["code"] == "retry_budget_exhausted" and refused[-1]["budget"] == "request"


def test_max_attempts_one_allows_no_retry(rt):
    rid, a1 = rt.started(max_attempts=1)
    rt.failed(rid, a1)
    assert_error(rt.create(rid, new_id("a")), 409, "retry_budget_exhausted")
    assert rt.count("attempts", rid) == 1
    assert rt.request(rid)["status"] == "open"


def test_max_attempts_is_fixed_by_the_first_attempt(rt):
    rid, a1 = rt.started(max_attempts=3)
    rt.failed(rid, a1)
    a2 = new_id("a")
    r = rt.create(rid, a2, max_attempts=5)
    assert r.status == 201, r
    assert r.json["request"]["max_attempts"] == 3
    rt.failed(rid, a2)
    a3 = new_id("a")
    assert rt.create(rid, a3, max_attempts=1).status == 201
    rt.failed(rid, a3)
    assert_error(rt.create(rid, new_id("a"), max_attempts=5), 409, "retry_budget_exhausted")
    assert rt.request(rid)["max_attempts"] == 3


def test_budget_comes_before_revision_and_source_not_fenced(rt):
    rid, a1 = rt.started(max_attempts=1, model_revision="m1")
    # a1 is live (source_not_fenced would apply) and the revision differs.
    assert_error(rt.create(rid, new_id("a"), model_revision="m2"), 409,
                 "retry_budget_exhausted")


def test_pool_budget_of_the_default_policy_refuses_the_fourth_retry(service):
    """Default policy: max(3 retries, 20% of attempts) in 10 s, per tenant."""
    rt = Router(service)
    other = Router(service)
    rids = []
    for _ in range(4):
        rid, a1 = rt.started()
        rt.failed(rid, a1)
        rids.append(rid)
    for rid in rids[:3]:
        r = rt.create(rid, new_id("a"))
        assert r.status == 201, r
    r = rt.create(rids[3], new_id("a"))
    err = assert_error(r, 409, "retry_budget_exhausted")
    # The pool's budget comes back as the window moves on: when, it says.
    assert err["budget"] == "pool", err
    assert_retry_after(r, err, 10000)
    assert rt.count("attempts", rids[3]) == 1
    # A first attempt is no retry: it is still welcome.
    rt.started()
    # Another tenant's retries are its own.
    rid, a1 = other.started()
    other.failed(rid, a1)
    assert other.create(rid, new_id("a")).status == 201


def test_pool_budget_grows_with_the_tenants_attempts(service):
    """Default policy: retries < max(3, 20% of all attempts in the window).

    With 20 first attempts, k retries are allowed while 100 k < 20 (20 + k):
    five, not the three of min_retries.
    """
    rt = Router(service)
    for _ in range(14):
        rt.started()
    rids = []
    for _ in range(6):
        rid, a1 = rt.started()
        rt.failed(rid, a1)
        rids.append(rid)
    for rid in rids[:5]:
        r = rt.create(rid, new_id("a"))
        assert r.status == 201, r
    assert_error(rt.create(rids[5], new_id("a")), 409, "retry_budget_exhausted")


# --- POST attempts: revision_mismatch ---------------------------------------


def test_other_revision_is_revision_mismatch_with_both(rt):
    rid, a1 = rt.started(model_revision="m1")
    rt.failed(rid, a1)
    err = assert_error(rt.create(rid, new_id("a"), model_revision="m2"), 409,
                       "revision_mismatch")
    assert err["expected_model_revision"] == "m1"
    assert err["got_model_revision"] == "m2"
    assert rt.count("attempts", rid) == 1


def test_attempt_without_revision_takes_the_requests(rt):
    rid, a1 = rt.started(model_revision="m1")
    rt.failed(rid, a1)
    a2 = new_id("a")
    r = rt.create(rid, a2)
    assert r.status == 201, r
    assert r.json["request"]["model_revision"] == "m1"
    rows = rt.sql("SELECT model_revision FROM attempts WHERE tenant = '%s' AND request_id = '%s'"
                  " AND attempt_id = '%s'" % (rt.tenant, rid, a2))
    assert rows == [["m1"]]


def test_first_attempt_without_revision_lets_a_later_one_set_it(rt):
    rid, a1 = rt.started()
    rt.failed(rid, a1)
    r = rt.create(rid, new_id("a"), model_revision="m3")
    assert r.status == 201, r
    assert r.json["request"]["model_revision"] == "m3"


def test_revision_mismatch_comes_before_source_not_fenced(rt):
    rid, a1 = rt.started(model_revision="m1")
    assert_error(rt.create(rid, new_id("a"), model_revision="m2"), 409, "revision_mismatch")


# --- POST attempts: source_not_fenced ---------------------------------------


def test_live_previous_attempt_is_source_not_fenced_with_retry_after(rt):
    rid, a1 = rt.started(lease_ms=1900)
    r = rt.create(rid, new_id("a"))
    err = assert_error(r, 409, "source_not_fenced")
    assert 1000 < err["retry_after_ms"] <= 1900, err
    assert r.header("Retry-After") == "2"
    assert rt.attempts(rid) == {a1: (1, "live")}


def test_cancel_requested_blocks_until_cancel_ack(rt):
    rid, a1 = rt.started()
    assert rt.cancel(rid, a1).status == 200
    r = rt.create(rid, new_id("a"))
    err = assert_error(r, 409, "source_not_fenced")
    assert_retry_after(r, err, 30000)
    assert rt.ack(rid, a1).status == 200
    a2 = new_id("a")
    r = rt.create(rid, a2)
    assert r.status == 201, r
    states = rt.attempts(rid)
    assert states[a1] == (1, "cancelled") and states[a2] == (2, "live")


def test_cancel_requested_blocks_until_its_lease_runs_out(rt):
    rid, a1 = rt.started(lease_ms=SHORT_LEASE_MS)
    assert rt.cancel(rid, a1).status == 200
    assert_error(rt.create(rid, new_id("a")), 409, "source_not_fenced")
    time.sleep(PAST_SHORT_LEASE_S)
    a2 = new_id("a")
    assert rt.create(rid, a2).status == 201
    assert rt.live_count(rid) == 1
    assert rt.attempts(rid)[a2] == (2, "live")


def test_expired_previous_attempt_is_superseded_by_the_next(rt):
    rid, a1 = rt.started(lease_ms=SHORT_LEASE_MS)
    time.sleep(PAST_SHORT_LEASE_S)
    a2 = new_id("a")
    r = rt.create(rid, a2)
    assert r.status == 201, r
    assert r.json["epoch"] == 2
    assert rt.attempts(rid) == {a1: (1, "superseded"), a2: (2, "live")}


def test_source_not_fenced_comes_before_tool_call_in_progress(rt):
    rid, a1 = rt.started()
    rt.claimed(rid, a1)
    assert_error(rt.create(rid, new_id("a")), 409, "source_not_fenced")


# --- POST attempts: tool_call_in_progress and tool_outcome_unknown ------------


def test_held_call_of_the_previous_attempt_is_tool_call_in_progress(rt):
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, lease_ms=1900)
    rt.failed(rid, a1)
    r = rt.create(rid, new_id("a"))
    err = assert_error(r, 409, "tool_call_in_progress")
    assert 1000 < err["retry_after_ms"] <= 1900, err
    assert r.header("Retry-After") == "2"
    assert rt.count("attempts", rid) == 1
    # Once it completes, the rerun may start.
    c = rt.call(rid, cid, "complete", {"fencing_token": tok, "outcome": "succeeded",
                                      "result": {"ok": 1}})
    assert c.status == 200, c
    assert rt.create(rid, new_id("a")).status == 201


def test_released_call_no_longer_blocks(rt):
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1)
    rt.failed(rid, a1)
    assert_error(rt.create(rid, new_id("a")), 409, "tool_call_in_progress")
    assert rt.call(rid, cid, "release", {"fencing_token": tok}).status == 200
    assert rt.create(rid, new_id("a")).status == 201


def test_unknown_outcome_is_tool_outcome_unknown_until_resolved(rt):
    rid, a1 = rt.started()
    cid, _ = rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS, tool="charge")
    rt.failed(rid, a1)
    time.sleep(PAST_SHORT_LEASE_S)
    r = rt.create(rid, new_id("a"))
    assert_error(r, 409, "tool_outcome_unknown")
    assert r.header("Retry-After") is None
    assert rt.count("attempts", rid) == 1
    res = rt.post("/v1/requests/%s/tool-calls/%s/resolve" % (rid, cid),
                  {"resolution": "not_executed", "note": "checked"},
                  token=rt.service.token("admin", rt.tenant))
    assert res.status == 200, res
    assert rt.create(rid, new_id("a")).status == 201


def test_unknown_outcome_of_a_deduping_tool_does_not_block(rt):
    rid, a1 = rt.started()
    rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS, tool_dedupes=True)
    rt.failed(rid, a1)
    time.sleep(PAST_SHORT_LEASE_S)
    assert rt.create(rid, new_id("a")).status == 201


def test_tool_call_in_progress_comes_before_tool_outcome_unknown(rt):
    rid, a1 = rt.started()
    rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS)
    rt.claimed(rid, a1, lease_ms=30000)
    rt.failed(rid, a1)
    time.sleep(PAST_SHORT_LEASE_S)
    assert_error(rt.create(rid, new_id("a")), 409, "tool_call_in_progress")


def test_source_not_fenced_comes_before_tool_outcome_unknown(rt):
    rid, a1 = rt.started()
    rt.claimed(rid, a1, lease_ms=SHORT_LEASE_MS)
    time.sleep(PAST_SHORT_LEASE_S)
    assert_error(rt.create(rid, new_id("a")), 409, "source_not_fenced")


def test_call_held_before_any_attempt_does_not_block_the_first(rt):
    rid = new_id("r")
    r = rt.claim(rid, new_id("c"), lease_ms=30000)
    assert r.status == 201, r
    assert rt.create(rid, new_id("a")).status == 201


def test_unknown_outcome_from_before_any_attempt_blocks_the_first(rt):
    rid = new_id("r")
    r = rt.claim(rid, new_id("c"), lease_ms=SHORT_LEASE_MS)
    assert r.status == 201, r
    time.sleep(PAST_SHORT_LEASE_S)
    assert_error(rt.create(rid, new_id("a")), 409, "tool_outcome_unknown")
    assert rt.count("attempts", rid) == 0


# --- epoch and invariant 1 --------------------------------------------------


def test_epoch_grows_by_one_per_attempt(rt):
    rid, a1, b1 = rt.started_with_body(max_attempts=3)
    assert b1["epoch"] == 1
    rt.failed(rid, a1)
    a2 = new_id("a")
    b2 = rt.create(rid, a2).json
    assert (b2["epoch"], b2["attempt_number"], b2["request"]["attempts"]) == (2, 2, 2)
    rt.failed(rid, a2)
    a3 = new_id("a")
    b3 = rt.create(rid, a3).json
    assert (b3["epoch"], b3["attempt_number"], b3["request"]["attempts"]) == (3, 3, 3)
    assert rt.attempts(rid) == {a1: (1, "failed"), a2: (2, "failed"), a3: (3, "live")}
    rows = rt.sql("SELECT attempt_id, is_retry FROM attempts WHERE tenant = '%s' AND"
                  " request_id = '%s' ORDER BY epoch" % (rt.tenant, rid))
    assert rows == [[a1, "f"], [a2, "t"], [a3, "t"]]


def test_concurrent_creates_make_exactly_one_live_attempt(rt):
    rid = new_id("r")
    aids = [new_id("a") for _ in range(12)]
    results = {}
    barrier = threading.Barrier(len(aids))

    def go(aid):
        barrier.wait()
        results[aid] = rt.create(rid, aid)

    threads = [threading.Thread(target=go, args=(a,)) for a in aids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    created = [a for a, r in results.items() if r.status == 201]
    assert len(created) == 1, results
    for a, r in results.items():
        if a not in created:
            assert_error(r, 409, "source_not_fenced")
    assert rt.attempts(rid) == {created[0]: (1, "live")}
    assert rt.live_count(rid) == 1


def test_at_most_one_live_attempt_through_a_life(rt):
    rid, a1 = rt.started(lease_ms=SHORT_LEASE_MS, max_attempts=3)
    assert rt.live_count(rid) == 1
    time.sleep(PAST_SHORT_LEASE_S)
    a2 = new_id("a")
    assert rt.create(rid, a2).status == 201
    assert rt.live_count(rid) == 1
    assert rt.cancel(rid, a2).status == 200
    assert rt.live_count(rid) == 0
    assert rt.ack(rid, a2).status == 200
    a3 = new_id("a")
    assert rt.create(rid, a3).status == 201
    assert rt.live_count(rid) == 1
    assert rt.attempts(rid) == {a1: (1, "superseded"), a2: (2, "cancelled"), a3: (3, "live")}


# --- renew ------------------------------------------------------------------


def test_renew_is_200_and_sets_a_new_deadline(rt):
    rid, aid = rt.started(lease_ms=SHORT_LEASE_MS)
    r = rt.renew(rid, aid, 20000)
    assert r.status == 200, r
    assert set(r.json) == {"attempt_id", "epoch", "lease_ms"}
    assert (r.json["attempt_id"], r.json["epoch"]) == (aid, 1)
    assert leases_as_asked(r.json["lease_ms"], 20000)
    time.sleep(PAST_SHORT_LEASE_S)
    # Still live past the first lease: it may act.
    assert rt.deliver(rid, aid, 1).status == 200
    left = float(rt.sql("SELECT extract(epoch FROM lease_until - clock_timestamp()) * 1000"
                        " FROM attempts WHERE tenant = '%s' AND request_id = '%s'"
                        % (rt.tenant, rid))[0][0])
    assert 15000 < left <= 20000


def test_renew_without_lease_takes_the_default(rt):
    rid, aid = rt.started(lease_ms=1000)
    r = rt.renew(rid, aid)
    assert r.status == 200, r
    assert leases_as_asked(r.json["lease_ms"], 30000)


def test_renew_of_an_expired_attempt_is_fenced(rt):
    rid, aid = rt.started(lease_ms=SHORT_LEASE_MS)
    time.sleep(PAST_SHORT_LEASE_S)
    err = assert_error(rt.renew(rid, aid, 30000), 409, "attempt_fenced")
    assert err["attempt_state"] == "expired"
    # It did not come back to life: the next attempt is free to start.
    assert rt.create(rid, new_id("a")).status == 201


@pytest.mark.parametrize("action,body", [("renew", {"lease_ms": 1000}),
                                         ("deliver", {"delivered_output_tokens": 1}),
                                         ("cancel", {"reason": "x"}), ("cancel-ack", {}),
                                         ("finish", {"outcome": "completed"})])
def test_unknown_attempt_is_attempt_not_found(rt, action, body):
    rid, aid = rt.started()
    r = rt.act(rid, new_id("a"), action, body)
    assert_error(r, 404, "attempt_not_found")
    # A request that does not exist: the same answer, and no row made.
    rid2 = new_id("r")
    assert_error(rt.act(rid2, aid, action, body), 404, "attempt_not_found")
    assert rt.request(rid2) is None


@pytest.mark.parametrize("action,body,field", [
    ("renew", {"lease_ms": 50}, "lease_ms"),
    ("deliver", {"delivered_output_tokens": -1}, "delivered_output_tokens"),
    ("deliver", {"delivered_output_tokens": "3"}, "delivered_output_tokens"),
    ("finish", {"outcome": "done"}, "outcome"),
    ("finish", {}, "outcome"),
    ("cancel", {"reason": "x" * 257}, "reason"),
])
def test_attempt_calls_validate_their_body(rt, action, body, field):
    rid, aid = rt.started()
    err = assert_error(rt.act(rid, aid, action, body), 400, "invalid_field")
    assert err["field"] == field
    assert rt.attempts(rid) == {aid: (1, "live")}


# --- deliver ----------------------------------------------------------------


def test_deliver_sets_first_delta_and_decode_durably(rt):
    rid, aid = rt.started()
    r = rt.deliver(rid, aid, 0)
    assert r.status == 200, r
    assert r.json == {"request_id": rid, "attempt_id": aid, "first_delta_sent": True,
                      "phase": "decode", "delivered_output_tokens": 0}
    q = rt.request(rid)
    assert q["first_delta_sent"] is True and q["phase"] == "decode"
    assert q["status"] == "open"
    assert [e[0] for e in rt.events(rid)].count("first_delta") == 1


def test_deliver_reports_the_largest_count_so_far(rt):
    rid, aid = rt.started()
    assert rt.deliver(rid, aid, 10).json["delivered_output_tokens"] == 10
    assert rt.deliver(rid, aid, 25).json["delivered_output_tokens"] == 25
    r = rt.deliver(rid, aid, 7)
    assert r.status == 200, r
    assert r.json == {"request_id": rid, "attempt_id": aid, "first_delta_sent": True,
                      "phase": "decode", "delivered_output_tokens": 25}
    assert rt.request(rid)["delivered_output_tokens"] == 25
    assert [e[0] for e in rt.events(rid)].count("first_delta") == 1


# --- cancel, cancel-ack -----------------------------------------------------


def test_cancel_is_200_cancel_requested_with_the_request(rt):
    rid, aid = rt.started()
    r = rt.cancel(rid, aid, "client went away")
    assert r.status == 200, r
    b = r.json
    assert set(b) == {"attempt_id", "epoch", "state", "request"}
    assert (b["attempt_id"], b["epoch"], b["state"]) == (aid, 1, "cancel_requested")
    assert b["request"]["request_id"] == rid and b["request"]["status"] == "open"
    assert REQUEST_KEYS <= set(b["request"])
    assert rt.attempts(rid) == {aid: (1, "cancel_requested")}


def test_cancel_repeated_is_200_and_unchanged(rt):
    rid, aid = rt.started()
    assert rt.cancel(rid, aid).status == 200
    n = len(rt.events(rid))
    r = rt.cancel(rid, aid)
    assert r.status == 200, r
    assert r.json["state"] == "cancel_requested"
    assert len(rt.events(rid)) == n


@pytest.mark.parametrize("end", ["completed", "failed", "cancelled"])
def test_cancel_of_an_ended_attempt_is_200_with_its_state(rt, end):
    rid, aid = rt.started()
    if end == "cancelled":
        assert rt.ack(rid, aid).status == 200
    else:
        assert rt.finish(rid, aid, end).status == 200
    want = {"completed": "finished", "failed": "failed", "cancelled": "cancelled"}[end]
    r = rt.cancel(rid, aid)
    assert r.status == 200, r
    assert r.json["state"] == want
    assert rt.attempts(rid) == {aid: (1, want)}


def test_cancel_of_a_dead_attempt_keeps_it_dead(rt):
    rid, a1 = rt.started()
    f = rt.failover(rid, a1, "replica_exited")
    assert f.status == 200 and f.json["source_state"] == "dead", f
    r = rt.cancel(rid, a1)
    assert r.status == 200 and r.json["state"] == "dead", r
    assert rt.attempts(rid)[a1] == (1, "dead")


def test_cancel_ack_from_live_is_cancelled_and_unblocks(rt):
    rid, a1 = rt.started()
    r = rt.ack(rid, a1)
    assert r.status == 200, r
    assert (r.json["attempt_id"], r.json["epoch"], r.json["state"]) == (a1, 1, "cancelled")
    assert r.json["request"]["status"] == "open"
    assert rt.ack(rid, a1).json["state"] == "cancelled"  # repeated: unchanged
    assert rt.create(rid, new_id("a")).status == 201


def test_cancel_ack_from_cancel_requested_is_cancelled(rt):
    rid, a1 = rt.started()
    assert rt.cancel(rid, a1).status == 200
    r = rt.ack(rid, a1)
    assert r.status == 200 and r.json["state"] == "cancelled", r
    assert rt.attempts(rid) == {a1: (1, "cancelled")}
    types = [e[0] for e in rt.events(rid)]
    assert "attempt_cancel_requested" in types and "attempt_cancelled" in types


# --- finish -----------------------------------------------------------------


def test_finish_completed_closes_the_request(rt):
    rid, aid = rt.started()
    assert rt.deliver(rid, aid, 3).status == 200
    r = rt.finish(rid, aid, "completed", delivered_output_tokens=120, reason="stop")
    assert r.status == 200, r
    b = r.json
    assert (b["attempt_id"], b["epoch"], b["state"]) == (aid, 1, "finished")
    assert b["request"]["status"] == "completed"
    assert b["request"]["delivered_output_tokens"] == 120
    q = rt.request(rid)
    assert q["status"] == "completed" and q["delivered_output_tokens"] == 120
    assert rt.attempts(rid) == {aid: (1, "finished")}


def test_finish_failed_leaves_the_request_open(rt):
    rid, aid = rt.started()
    r = rt.finish(rid, aid, "failed", reason="oom")
    assert r.status == 200, r
    assert r.json["state"] == "failed" and r.json["request"]["status"] == "open"
    assert rt.request(rid)["status"] == "open"
    assert rt.attempts(rid) == {aid: (1, "failed")}


@pytest.mark.parametrize("outcome,state", [("completed", "finished"), ("failed", "failed")])
def test_finish_repeated_is_200_and_changes_nothing(rt, outcome, state):
    rid, aid = rt.started()
    body = {"delivered_output_tokens": 9, "reason": "r"}
    r1 = rt.finish(rid, aid, outcome, **body)
    assert r1.status == 200, r1
    n = len(rt.events(rid))
    r2 = rt.finish(rid, aid, outcome, **body)
    assert r2.status == 200, r2
    assert r2.json["state"] == state
    assert r2.json["request"]["status"] == r1.json["request"]["status"]
    assert len(rt.events(rid)) == n


def test_finish_other_outcome_after_finish_is_fenced(rt):
    rid, aid = rt.started()
    assert rt.finish(rid, aid, "failed").status == 200
    err = assert_error(rt.finish(rid, aid, "completed"), 409, "attempt_fenced")
    assert err["attempt_state"] == "failed"
    assert rt.request(rid)["status"] == "open"


# --- zombies ----------------------------------------------------------------


def zombie(rt, kind):
    """An attempt of @kind without rights: (rid, aid, held claim or None, attempt_state).

    The held claim (cid, fencing_token) was made while the attempt was live
    and is still in progress within its own lease. A superseded or dead
    attempt has none: a held call blocks the rerun (and a failover of a
    source holding one waits, leaving it cancel_requested).
    """
    rid, a1 = rt.started(lease_ms=SHORT_LEASE_MS if kind in ("expired", "superseded")
                            else 30000)
    held = None if kind in ("superseded", "dead") else rt.claimed(rid, a1, lease_ms=30000)
    if kind == "cancel_requested":
        assert rt.cancel(rid, a1).status == 200
    elif kind == "cancelled":
        assert rt.cancel(rid, a1).status == 200
        assert rt.ack(rid, a1).status == 200
    elif kind == "dead":
        # retry_prefill without next_attempt: the source dead, the request open.
        f = rt.failover(rid, a1, "replica_exited")
        assert f.status == 200 and f.json["source_state"] == "dead", f
        assert f.json["action"] == "retry_prefill", f
    elif kind == "expired":
        time.sleep(PAST_SHORT_LEASE_S)
    elif kind == "superseded":
        time.sleep(PAST_SHORT_LEASE_S)
        assert rt.create(rid, new_id("a")).status == 201
    elif kind == "failed":
        rt.failed(rid, a1)
    elif kind == "finished":
        assert rt.finish(rid, a1, "completed").status == 200
    elif kind == "closed_request":
        # The API never leaves a live attempt in a closed request; close the
        # row directly to check "of an open request" on its own.
        rt.sql("UPDATE requests SET status = 'failed' WHERE tenant = '%s' AND"
               " request_id = '%s'" % (rt.tenant, rid))
    state = {"closed_request": None}.get(kind, kind)
    return rid, a1, held, state


ZOMBIES = ["cancel_requested", "cancelled", "dead", "expired", "superseded", "failed",
           "finished", "closed_request"]


@pytest.mark.parametrize("kind", ZOMBIES)
def test_zombie_cannot_claim_renew_deliver_or_finish(rt, kind):
    rid, aid, held, state = zombie(rt, kind)
    before = rt.request(rid)
    refused_before = sum(1 for e in rt.events(rid) if e[0] == "refused")

    cid = new_id("c")
    r = rt.claim(rid, cid, attempt_id=aid, tool="send_email")
    assert_error(r, 409, "attempt_fenced")
    assert rt.sql("SELECT count(*) FROM tool_calls WHERE tenant = '%s' AND request_id = '%s'"
                  " AND tool_call_id = '%s'" % (rt.tenant, rid, cid)) == [["0"]]

    if held is not None:
        r = rt.call(rid, held[0], "renew", {"fencing_token": held[1], "lease_ms": 30000})
        assert_error(r, 409, "attempt_fenced")

    err = assert_error(rt.renew(rid, aid, 30000), 409, "attempt_fenced")
    if state is not None:
        assert err["attempt_state"] == state

    err = assert_error(rt.deliver(rid, aid, 5), 409, "attempt_fenced")
    if state is not None:
        assert err["attempt_state"] == state

    other = "failed" if kind == "finished" else "completed"
    err = assert_error(rt.finish(rid, aid, other), 409, "attempt_fenced")
    if state is not None:
        assert err["attempt_state"] == state

    after = rt.request(rid)
    assert after == before  # no delta published, no status moved
    assert after["first_delta_sent"] is False
    # Every refusal is in the history, under the zombie.
    refused = [e for e in rt.events(rid) if e[0] == "refused"]
    expected = 4 if held is not None else 3
    assert len(refused) - refused_before >= expected, refused
    claim_refusals = [e for e in refused if e[2] == cid]
    assert len(claim_refusals) == 1, refused
    assert claim_refusals[0][1] == aid
    assert claim_refusals[0][3]["code"] == "attempt_fenced"


def test_cancel_requested_has_no_rights_at_once_for_its_own_held_key(rt):
    """Row 6 of the claim table precedes 7 and 8: a revoked holder's repeat is fenced."""
    rid, aid = rt.started()
    cl = claim_id()
    r = rt.claim(rid, "call_01", attempt_id=aid, claim_id=cl)
    assert r.status == 201, r
    assert rt.cancel(rid, aid).status == 200
    assert_error(rt.claim(rid, "call_01", attempt_id=aid, claim_id=cl), 409, "attempt_fenced")
    assert_error(rt.claim(rid, "call_01", attempt_id=aid), 409, "attempt_fenced")


# --- reopen of an abandoned request -----------------------------------------


def test_abandoned_request_reopens_with_a_new_attempt(rt):
    rid, a1 = rt.started()
    f = rt.failover(rid, a1, "client_disconnected")
    assert f.status == 200, f
    assert f.json["action"] == "cancel_upstream" and f.json["request_status"] == "abandoned"
    assert rt.request(rid)["status"] == "abandoned"
    # The revoked source still blocks until it acknowledges.
    assert_error(rt.create(rid, new_id("a")), 409, "source_not_fenced")
    assert rt.ack(rid, a1).status == 200
    a2 = new_id("a")
    r = rt.create(rid, a2)
    assert r.status == 201, r
    assert r.json["epoch"] == 2
    assert r.json["request"]["status"] == "open" and r.json["request"]["attempts"] == 2
    assert rt.request(rid)["status"] == "open"
    assert rt.attempts(rid) == {a1: (1, "cancelled"), a2: (2, "live")}
    # The reopened request serves claims under its new attempt.
    rt.claimed(rid, a2)


def test_reopen_is_a_retry_within_max_attempts(rt):
    rid, a1 = rt.started(max_attempts=1)
    assert rt.failover(rid, a1, "client_disconnected").json["action"] == "cancel_upstream"
    assert rt.ack(rid, a1).status == 200
    assert_error(rt.create(rid, new_id("a")), 409, "retry_budget_exhausted")
    assert rt.request(rid)["status"] == "abandoned"


def test_refused_reopen_leaves_the_request_abandoned(service):
    """A refused attempt changes nothing: the request stays abandoned, for its own
    budget and for the pool's, and a later attempt within budget still reopens it."""
    rt = Router(service)
    spent, a1 = rt.started(max_attempts=1)
    assert rt.failover(spent, a1, "client_disconnected").json["request_status"] == "abandoned"
    assert rt.ack(spent, a1).status == 200
    err = assert_error(rt.create(spent, new_id("a")), 409,
                       "retry_budget_exhausted")
    assert err["budget"] == "request"
    assert rt.request(spent)["status"] == "abandoned"
    assert rt.attempts(spent) == {a1: (1, "cancelled")}
    # The tenant's pool: three retries in the window (the default min_retries) ...
    rid, a1 = rt.started()
    assert rt.failover(rid, a1, "client_disconnected").json["request_status"] == "abandoned"
    assert rt.ack(rid, a1).status == 200
    for _ in range(3):
        other, b1 = rt.started()
        rt.failed(other, b1)
        assert rt.create(other, new_id("a")).status == 201
    before = rt.events(rid)
    # ... so the reopen is a retry the pool refuses.
    r = rt.create(rid, new_id("a"))
    err = assert_error(r, 409, "retry_budget_exhausted")
    assert err["budget"] == "pool"
    assert_retry_after(r, err, 10000)
    q = rt.request(rid)
    assert q["status"] == "abandoned" and q["attempts"] == 1, q
    assert rt.attempts(rid) == {a1: (1, "cancelled")}
    after = rt.events(rid)
    assert after[:len(before)] == before and [t for t, _, _, _ in after[len(before):]] == [
        "refused"]


def test_abandoned_after_a_delta_never_reopens(rt):
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 4).status == 200
    f = rt.failover(rid, a1, "client_disconnected")
    assert f.status == 200 and f.json["request_status"] == "terminated", f
    assert rt.ack(rid, a1).status == 200
    assert_error(rt.create(rid, new_id("a")), 409, "first_delta_sent")


# --- roles and tenants --------------------------------------------------------


@pytest.mark.parametrize("role", ["agent", "reviewer"])
def test_agent_and_reviewer_may_not_drive_attempts(service, role):
    rt = Router(service)
    weak = service.token(role, rt.tenant)
    rid, aid = rt.started()
    r = rt.create(new_id("r"), new_id("a"), token=weak)
    assert_error(r, 403, "forbidden")
    for action, body in [("renew", {"lease_ms": 1000}), ("deliver", {}),
                         ("cancel", {}), ("cancel-ack", {}), ("finish", {"outcome": "completed"})]:
        assert_error(rt.act(rid, aid, action, body, token=weak), 403, "forbidden")
    r = rt.post("/v1/requests/%s/failover" % rid, {"attempt_id": aid, "signal": "pod_lost"},
                token=weak)
    assert_error(r, 403, "forbidden")
    assert rt.attempts(rid) == {aid: (1, "live")}
    assert rt.request(rid)["first_delta_sent"] is False


def test_admin_may_drive_attempts(service):
    rt = Router(service, role="admin")
    rid, aid = rt.started()
    assert rt.renew(rid, aid, 5000).status == 200
    assert rt.deliver(rid, aid, 1).status == 200
    assert rt.finish(rid, aid, "completed").json["request"]["status"] == "completed"


def test_without_token_is_401(rt):
    r = rt.service.ledgerd.post("/v1/requests/%s/attempts" % new_id("r"),
                                {"attempt_id": new_id("a")})
    assert_error(r, 401, "unauthorized")


def test_another_tenants_attempt_does_not_exist(service):
    a, b = Router(service), Router(service)
    rid, aid = a.started(replica="gpu-1")
    for action, body in [("renew", {"lease_ms": 1000}), ("deliver", {}), ("cancel", {}),
                         ("finish", {"outcome": "completed"})]:
        assert_error(b.act(rid, aid, action, body), 404, "attempt_not_found")
    assert_error(b.failover(rid, aid, "pod_lost"), 404, "attempt_not_found")
    # The same ids are free in tenant b, and a's attempt is untouched.
    r = b.create(rid, aid, replica="gpu-2")
    assert r.status == 201, r
    assert r.json["epoch"] == 1
    assert a.attempts(rid) == {aid: (1, "live")}
    assert a.request(rid)["first_delta_sent"] is False


def test_bad_ids_in_the_path_are_invalid_id(rt):
    r = rt.post("/v1/requests/%s/attempts" % "bad%20id", {"attempt_id": new_id("a")})
    assert_error(r, 400, "invalid_id")
    rid, _ = rt.started()
    r = rt.act(rid, "x" * 129, "renew", {"lease_ms": 1000})
    assert_error(r, 400, "invalid_id")
