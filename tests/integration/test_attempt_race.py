"""Routers race each other over one request: the database keeps the invariants.

Invariant 1: at most one live attempt per request. Invariant 2: no attempt
once a delta reached the client. Both are decided under the request's row
lock (or, for the hot begin, deliver and finish, by one statement under it,
batched with others: ledger/store/attempt_fast.c); these tests throw real
concurrency at them and check the rows.
"""

import re
import threading
import time

import pytest

from conftest import Ledgerd, new_id
from integration_helpers import metric

ROUTERS = 32
# Long enough that every racer of a round reaches the database before the
# round's winner expires, on a loaded 2-core machine running test files in
# parallel (at 150 ms a late racer sometimes found the winner expired and
# won a second attempt, legitimately: one live attempt at a time still held).
LEASE_MS = 1000


@pytest.fixture(scope="module")
def led(service, tmp_path_factory):
    """A ledgerd whose pool-wide retry budget never interferes: these tests race, not storm."""
    d = tmp_path_factory.mktemp("race")
    policy = d / "policy.yaml"
    policy.write_text("pool_retry_budget: {percent_of_attempts: 100, window_s: 1, "
                      "min_retries: 1000000}\n")
    server = Ledgerd(service.database_url, d / "ledgerd.log",
                     extra_args=["--policy", str(policy), "--workers", "8"])
    yield server
    server.stop()


def race(n, fn):
    """Runs fn(i) in n threads released together; returns their results in order."""
    start = threading.Barrier(n)
    results = [None] * n
    errors = []

    def run(i):
        try:
            start.wait()
            results[i] = fn(i)
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return results


def begin(led, token, rid, aid, **body):
    body.update(attempt_id=aid)
    return led.post("/v1/requests/%s/attempts" % rid, body, token=token)


def two_live_attempts(service):
    return service.sql("SELECT request_id FROM attempts WHERE state = 'live' "
                       "GROUP BY tenant, request_id HAVING count(*) > 1")


def test_exactly_one_router_creates_the_next_attempt(service, led):
    token = service.token("router")
    rid = new_id()
    assert begin(led, token, rid, "a-0", lease_ms=200, max_attempts=5).status == 201
    time.sleep(0.3)  # the live attempt died: its lease ran out

    answers = race(ROUTERS, lambda i: begin(led, token, rid, "a-%d" % (i + 1)))

    created = [r for r in answers if r.status == 201]
    assert len(created) == 1, [r.status for r in answers]
    assert all(r.status == 409 and r.code == "source_not_fenced"
               for r in answers if r.status != 201), answers
    assert created[0].json["epoch"] == 2
    rows = service.sql("SELECT epoch, state FROM attempts WHERE request_id = '%s' "
                       "ORDER BY epoch" % rid)
    assert rows == [["1", "superseded"], ["2", "live"]]


def test_many_requests_never_hold_two_live_attempts(service, led):
    token = service.token("router")
    rids = [new_id() for _ in range(8)]
    for rid in rids:
        assert begin(led, token, rid, "first", lease_ms=LEASE_MS, max_attempts=5).status == 201
    for round_ in range(3):
        time.sleep(LEASE_MS / 1000 + 0.1)  # every live attempt's lease ran out
        answers = race(ROUTERS, lambda i: begin(
            led, token, rids[i % len(rids)], "r%d-%d" % (round_, i), lease_ms=LEASE_MS))
        per_request = {}
        for i, r in enumerate(answers):
            # Created, but answered after its short lease ran out (a loaded
            # machine): ledgerd says 503 rather than hand over no lease.
            late = r.status == 503 and "after the lease" in r.body
            per_request.setdefault(rids[i % len(rids)], []).append(
                201 if late else r.status if r.status == 201 else "%d %s" % (r.status, r.code))
        # One new attempt per request and round, whoever wins the lock.
        assert all(s.count(201) == 1 for s in per_request.values()), per_request
        assert two_live_attempts(service) == []
    epochs = service.sql("SELECT request_id, array_agg(epoch ORDER BY epoch) FROM attempts "
                         "WHERE request_id IN (%s) GROUP BY request_id"
                         % ",".join("'%s'" % r for r in rids))
    assert all(e == "{1,2,3,4}" for _, e in epochs), epochs


def test_concurrent_failovers_create_one_rerun_and_agree(service, led):
    token = service.token("router")
    rid = new_id()
    assert begin(led, token, rid, "a-0", max_attempts=5).status == 201

    answers = race(ROUTERS, lambda i: led.post(
        "/v1/requests/%s/failover" % rid,
        {"attempt_id": "a-0", "signal": "pod_lost",
         "next_attempt": {"attempt_id": "rerun-%d" % i, "replica": "gpu-%d" % i}},
        token=token))

    assert all(r.status == 200 for r in answers), answers
    # The first decision is recorded; every other router gets it verbatim,
    # but for the new attempt's lease, which says what is left of it.
    leases = [r.json["attempt"]["lease_ms"] for r in answers]
    assert all(25000 < lease <= 30000 for lease in leases), leases
    assert len({re.sub(r'"lease_ms":\d+', '"lease_ms":L', r.body) for r in answers}) == 1
    assert answers[0].json["action"] == "retry_prefill"
    rows = service.sql("SELECT attempt_id, state FROM attempts WHERE request_id = '%s' "
                       "ORDER BY epoch" % rid)
    assert rows == [["a-0", "dead"], [answers[0].json["attempt"]["attempt_id"], "live"]]


def test_deliver_and_failover_race_never_both_win(service, led):
    """Either the delta was delivered (no rerun, ever) or the rerun exists (deliver refused)."""
    token = service.token("router")
    outcomes = set()
    for n in range(12):
        rid = new_id()
        assert begin(led, token, rid, "a-0", max_attempts=5).status == 201

        def act(i, rid=rid):
            if i == 0:
                return led.post("/v1/requests/%s/attempts/a-0/deliver" % rid,
                                {"delivered_output_tokens": 1}, token=token)
            return led.post("/v1/requests/%s/failover" % rid,
                            {"attempt_id": "a-0", "signal": "upstream_closed",
                             "next_attempt": {"attempt_id": "a-1"}}, token=token)

        deliver, failover = race(2, act)
        assert failover.status == 200, failover
        if deliver.status == 200:
            assert failover.json["action"] == "terminate_stream"
            outcomes.add("delivered")
        else:
            assert deliver.status == 409 and deliver.code == "attempt_fenced"
            assert failover.json["action"] == "retry_prefill"
            outcomes.add("rerun")
        rows = service.sql("SELECT first_delta_sent, attempt_count FROM requests "
                           "WHERE request_id = '%s'" % rid)
        assert rows in ([["t", "1"]], [["f", "2"]]), rows
    assert outcomes  # at least one side won each time; which one is the scheduler's


@pytest.fixture(scope="module")
def batching(service, tmp_path_factory):
    """A ledgerd with one store worker taking up to 64 jobs at a time: whatever
    waits for it is committed in one batch, the attempts' fast paths with it."""
    d = tmp_path_factory.mktemp("race-batch")
    policy = d / "policy.yaml"
    policy.write_text("pool_retry_budget: {percent_of_attempts: 100, window_s: 1, "
                      "min_retries: 1000000}\n")
    server = Ledgerd(service.database_url, d / "ledgerd.log",
                     extra_args=["--policy", str(policy), "--workers", "1",
                                 "--batch-max", "64"])
    yield server
    server.stop()


def test_batched_delivers_finishes_and_failovers_keep_the_fence(service, batching):
    """Two routers on each of many requests, at once: one delivers and finishes
    the first attempt, the other fails it over and runs the rerun. Their begins,
    delivers and finishes are batched together (across requests, and with the
    failovers' transactions in between); whoever wins each request, the fence
    holds: one attempt's delta reaches the client, never two, and the history
    says exactly what happened."""
    led = batching
    token = service.token("router")
    rids = [new_id("fence") for _ in range(12)]
    batched_before = metric(led, "ledger_store_batched_calls_total")
    # Every first attempt begun at once: one batch of attempt_create_fast.
    begun = race(len(rids), lambda i: begin(led, token, rids[i], "a-0", max_attempts=5))
    assert all(r.status == 201 for r in begun), [(r.status, r.body) for r in begun]

    def act(i):
        rid, role = rids[i // 6], i % 6
        url = "/v1/requests/%s/" % rid
        if role in (0, 1):  # the first router delivers (twice, as deltas come)
            return led.post(url + "attempts/a-0/deliver",
                            {"delivered_output_tokens": role + 1}, token=token)
        if role == 2:
            return led.post(url + "attempts/a-0/finish",
                            {"outcome": "completed", "delivered_output_tokens": 5}, token=token)
        if role == 3:  # the second router saw a-0's upstream close
            return led.post(url + "failover",
                            {"attempt_id": "a-0", "signal": "upstream_closed",
                             "next_attempt": {"attempt_id": "a-1", "replica": "gpu-b"}},
                            token=token)
        if role == 4:
            return led.post(url + "attempts/a-1/deliver", {"delivered_output_tokens": 1},
                            token=token)
        return led.post(url + "attempts/a-1/finish", {"outcome": "completed"}, token=token)

    answers = race(6 * len(rids), act)
    assert metric(led, "ledger_store_batched_calls_total") > batched_before
    for n, rid in enumerate(rids):
        d0, d0b, f0, fo, d1, f1 = answers[6 * n:6 * n + 6]
        for r in (d0, d0b, f0, d1, f1):
            assert r.status in (200, 404, 409), (rid, r.status, r.body)
            assert r.status != 409 or r.code == "attempt_fenced", (rid, r.body)
        assert fo.status in (200, 409), (rid, fo.status, fo.body)
        a0_delivered = 200 in (d0.status, d0b.status)
        a1_delivered = d1.status == 200
        # The fence: never a delta from both attempts.
        assert not (a0_delivered and a1_delivered), rid
        rerun = fo.status == 200 and fo.json["action"] == "retry_prefill"
        if a0_delivered or f0.status == 200:
            assert not rerun, (rid, fo.body)  # no rerun once a-0 delivered or finished
        if a1_delivered or f1.status == 200:
            assert rerun and d0.status != 200 and d0b.status != 200, rid
        if f0.status == 200:
            assert f1.status != 200, rid
        rows = service.sql(
            "SELECT attempt_id, state FROM attempts WHERE request_id = '%s' ORDER BY epoch" % rid)
        assert [a for a, _ in rows] == (["a-0", "a-1"] if rerun else ["a-0"]), (rid, rows)
        assert sum(1 for _, s in rows if s == "live") <= 1, rows
        req = service.sql("SELECT status, first_delta_sent, delivered_output_tokens FROM requests"
                          " WHERE request_id = '%s'" % rid)[0]
        events = service.sql("SELECT type, coalesce(attempt_id, ''), detail::text FROM events"
                             " WHERE request_id = '%s' ORDER BY seq" % rid)
        types = [t for t, _, _ in events]
        # The history says it: one first delta at most, by the attempt that delivered.
        deltas = [a for t, a, _ in events if t == "first_delta"]
        assert deltas == (["a-0"] if a0_delivered else ["a-1"] if a1_delivered else []), (
            rid, events)
        assert (req[1] == "t") == bool(deltas), (rid, req)
        if deltas:  # no attempt begun after it
            assert "attempt_created" not in types[types.index("first_delta"):], events
        # Each attempt finished once at most, the request completed once at most.
        for aid in ("a-0", "a-1"):
            assert sum(1 for t, a, _ in events if t == "attempt_finished" and a == aid) <= 1
        completed = [e for e in events if e[0] == "request_status" and '"completed"' in e[2]]
        assert len(completed) == (1 if req[0] == "completed" else 0), (rid, events)
        assert (req[0] == "completed") == (f0.status == 200 or f1.status == 200), (rid, req)
