"""Many executors race for the same keys: each key runs exactly once.

32 threads each try to run every one of 12 tool calls, as an agent runtime
would: claim; run the tool when claimed (recorded in a shared log, like the
tool's own side effect) and complete; when told `in_progress`, wait and claim
again. Every executor must end with the one stored result of each key.
"""

import threading
import time
from collections import Counter

from conftest import claim_id, new_id

EXECUTORS = 32
KEYS = 12


def execute_once(led, token, rid, cid, me, executions, lock):
    path = "/v1/requests/%s/tool-calls/%s" % (rid, cid)
    body = {"claim_id": claim_id(), "tool": "charge", "args": {"amount": 100, "key": cid},
            "owner": "executor-%d" % me}
    deadline = time.time() + 30
    while time.time() < deadline:
        r = led.post(path + "/claim", body, token=token)
        if r.status == 201:
            with lock:
                executions[cid] += 1
            time.sleep(0.005)  # the side effect takes a moment
            result = {"charged_by": me, "key": cid}
            c = led.post(path + "/complete", {"fencing_token": r.json["fencing_token"],
                                              "outcome": "succeeded", "result": result},
                         token=token)
            assert c.status == 200, c
            return c.json["result"]
        if r.status == 200 and r.json["status"] == "completed":
            assert r.header("Idempotent-Replayed") == "true"
            return r.json["result"]
        assert r.status == 409 and r.code == "in_progress", r
        time.sleep(min(r.json["error"]["retry_after_ms"], 20) / 1000)
    raise AssertionError("no outcome for %s within 30 s" % cid)


def test_every_key_executes_exactly_once(service):
    led = service.ledgerd
    token = service.token("agent")
    rid = new_id()
    keys = ["call_%02d" % i for i in range(KEYS)]
    executions = Counter()
    results = {}
    lock = threading.Lock()
    start = threading.Barrier(EXECUTORS)
    errors = []

    def executor(me):
        try:
            start.wait()
            for cid in keys:
                got = execute_once(led, token, rid, cid, me, executions, lock)
                with lock:
                    results.setdefault(cid, []).append(got)
        except Exception as e:  # reported below, with the executor
            errors.append("executor %d: %r" % (me, e))

    threads = [threading.Thread(target=executor, args=(i,)) for i in range(EXECUTORS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert executions == Counter({cid: 1 for cid in keys})
    for cid in keys:
        assert len(results[cid]) == EXECUTORS
        # Every executor got the one stored result, whoever ran it.
        assert all(r == results[cid][0] for r in results[cid]), results[cid]
    # The ledger agrees: one claim per key, one token each.
    rows = service.sql("SELECT tool_call_id, state, fencing_token FROM tool_calls "
                       "WHERE request_id = '%s' ORDER BY 1" % rid)
    assert rows == [[cid, "succeeded", "1"] for cid in keys]
    claimed = service.sql("SELECT count(*) FROM events WHERE request_id = '%s' "
                          "AND type = 'claimed'" % rid)
    assert claimed == [[str(KEYS)]]


def test_concurrent_first_claims_of_one_new_request(service):
    """Many claims that each would create the request: one row, every key claimed once."""
    led = service.ledgerd
    token = service.token("agent")
    rid = new_id()
    statuses = []
    lock = threading.Lock()
    start = threading.Barrier(EXECUTORS)

    def claim(i):
        start.wait()
        r = led.post("/v1/requests/%s/tool-calls/call_%02d/claim" % (rid, i % 4),
                     {"claim_id": claim_id()}, token=token)
        with lock:
            statuses.append(r.status)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(EXECUTORS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [201] * 4 + [409] * (EXECUTORS - 4)
    assert service.sql("SELECT count(*) FROM requests WHERE request_id = '%s'" % rid) == [["1"]]
