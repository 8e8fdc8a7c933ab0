"""Retention removes settled requests, and only those, and leaves tombstones.

Rows are made old by moving their times back in the database (events are
append-only, so only the requests' and calls' times move); then `ledgerd gc`
runs with a 7-day retention, or serve's own pass with a short interval.
"""

import time

from conftest import Ledgerd, claim_id, ledgerd_cmd, new_id

# Rows age here by a rewrite of their times, which ledgerd's replay cache
# cannot see (real time ages its entries out within a minute): it is off.
LEDGERD_ARGS = ["--replay-cache", "0"]


def backdate(service, rid, days=8):
    """Makes a request and its calls look `days` old."""
    age = "interval '%d days'" % days
    service.sql("UPDATE requests SET created_at = created_at - %s, "
                "closed_at = closed_at - %s WHERE request_id = '%s'" % (age, age, rid))
    service.sql("UPDATE tool_calls SET created_at = created_at - %s, "
                "completed_at = completed_at - %s WHERE request_id = '%s'" % (age, age, rid))


def gc(service, *extra):
    out = ledgerd_cmd("gc", "--database-url", service.database_url, "--retention", "7d",
                      *extra)
    return out.stdout


def exists(service, rid):
    return service.sql("SELECT count(*) FROM requests WHERE request_id = '%s'" % rid) == [["1"]]


def call(led, token, rid, cid, action, body):
    return led.post("/v1/requests/%s/tool-calls/%s/%s" % (rid, cid, action), body, token=token)


def completed_request(service, with_attempt):
    """A request whose one call succeeded; closed by its attempt if it has one."""
    led = service.ledgerd
    rid = new_id()
    body = {"claim_id": claim_id(), "tool": "pay", "args": {"amount": 5}}
    if with_attempt:
        router = service.token("router")
        assert led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1"},
                        token=router).status == 201
        body["attempt_id"] = "a1"
    token = service.token("agent")
    r = call(led, token, rid, "call_01", "claim", body)
    assert r.status == 201, r
    assert call(led, token, rid, "call_01", "complete",
                {"fencing_token": 1, "outcome": "succeeded", "result": {"ok": 1}}).status == 200
    if with_attempt:
        assert led.post("/v1/requests/%s/attempts/a1/finish" % rid, {"outcome": "completed"},
                        token=service.token("router")).status == 200
    return rid, body


def test_old_settled_requests_go_and_leave_tombstones(service):
    led = service.ledgerd
    token = service.token("agent")
    closed, closed_body = completed_request(service, with_attempt=True)
    unattempted, plain_body = completed_request(service, with_attempt=False)
    backdate(service, closed)
    backdate(service, unattempted)

    out = gc(service)
    assert "removed" in out

    for rid, body in ((closed, closed_body), (unattempted, plain_body)):
        assert not exists(service, rid)
        assert service.sql("SELECT count(*) FROM events WHERE request_id = '%s'" % rid) == [["0"]]
        assert service.sql("SELECT count(*) FROM attempts WHERE request_id = '%s'" % rid) == \
            [["0"]]
        tomb = service.sql("SELECT outcome, args_sha256 IS NOT NULL, expires_at > now() + "
                           "interval '89 days' FROM tool_call_tombstones "
                           "WHERE request_id = '%s'" % rid)
        assert tomb == [["succeeded", "t", "t"]]
        # A late redelivery is refused, never run again.
        again = dict(body, claim_id=claim_id())
        again.pop("attempt_id", None)
        r = call(led, token, rid, "call_01", "claim", again)
        assert r.status == 410 and r.code == "result_expired", r
        assert r.json["error"]["outcome"] == "succeeded"
        assert not exists(service, rid)  # and no request is made up for it


def test_retention_removes_a_kept_answer_with_its_request(service):
    """API 1.1: an answer kept for a request goes with the request, in
    retention's own transaction; a recent request keeps its answer."""
    led = service.ledgerd
    router = service.token("router")
    kept = {"status": 200, "content_type": "text/event-stream", "body_b64": "ZGF0YTogaGkKCg=="}
    rids = []
    for _ in range(2):
        rid = new_id()
        assert led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1"},
                        token=router).status == 201
        assert led.post("/v1/requests/%s/attempts/a1/finish" % rid,
                        {"outcome": "completed", "answer": kept}, token=router).status == 200
        assert led.get("/v1/requests/%s/answer" % rid, token=router).status == 200
        rids.append(rid)
    old, recent = rids
    backdate(service, old)

    gc(service)

    assert not exists(service, old)
    assert service.sql("SELECT count(*) FROM answers WHERE request_id = '%s'" % old) == [["0"]]
    r = led.get("/v1/requests/%s/answer" % old, token=router)
    assert r.status == 404 and r.code == "answer_not_found", r
    assert exists(service, recent)
    assert led.get("/v1/requests/%s/answer" % recent, token=router).json["body_b64"] == \
        kept["body_b64"]


def test_nothing_open_held_unknown_or_recent_is_removed(service):
    led = service.ledgerd
    token = service.token("agent")
    router = service.token("router")
    keep = {}

    # An open request (its attempt still running), however old.
    rid = new_id()
    assert led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1"},
                    token=router).status == 201
    keep["open with an attempt"] = rid
    # A closed request whose call is still held, and one whose call is unknown.
    for name, lease in (("closed, call held", 60000), ("closed, call unknown", 100)):
        rid = new_id()
        assert led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1"},
                        token=router).status == 201
        assert call(led, token, rid, "call_01", "claim",
                    {"claim_id": claim_id(), "attempt_id": "a1", "lease_ms": lease}).status == 201
        assert led.post("/v1/requests/%s/failover" % rid,
                        {"attempt_id": "a1", "signal": "client_disconnected"},
                        token=router).json["request_status"] == "abandoned"
        keep[name] = rid
    # Requests without attempts: a held call, an unknown one, a recent completion.
    for name, lease in (("unattempted, call held", 60000), ("unattempted, call unknown", 100)):
        rid = new_id()
        assert call(led, token, rid, "call_01", "claim",
                    {"claim_id": claim_id(), "lease_ms": lease}).status == 201
        keep[name] = rid
    recent_rid, _ = completed_request(service, with_attempt=False)
    old_call_recent_one = new_id()
    for cid in ("call_01", "call_02"):
        assert call(led, token, old_call_recent_one, cid, "claim",
                    {"claim_id": claim_id()}).status == 201
        assert call(led, token, old_call_recent_one, cid, "complete",
                    {"fencing_token": 1, "outcome": "failed", "result": None}).status == 200
    time.sleep(0.2)  # the 100 ms leases ran out: unknown
    for rid in keep.values():
        backdate(service, rid)
    backdate(service, old_call_recent_one)
    service.sql("UPDATE tool_calls SET completed_at = now() WHERE request_id = '%s' "
                "AND tool_call_id = 'call_02'" % old_call_recent_one)
    keep["recent"] = recent_rid
    keep["unattempted, one call settled recently"] = old_call_recent_one

    gc(service)

    for name, rid in keep.items():
        assert exists(service, rid), name
        assert service.sql("SELECT count(*) FROM tool_call_tombstones WHERE request_id = '%s'"
                           % rid) == [["0"]], name


def test_expired_tombstones_are_removed(service):
    rid, _ = completed_request(service, with_attempt=False)
    backdate(service, rid)
    gc(service, "--tombstone-retention", "1m")
    assert service.sql("SELECT count(*) FROM tool_call_tombstones WHERE request_id = '%s'"
                       % rid) == [["1"]]
    service.sql("UPDATE tool_call_tombstones SET expires_at = now() - interval '1 second' "
                "WHERE request_id = '%s'" % rid)
    out = gc(service)
    assert service.sql("SELECT count(*) FROM tool_call_tombstones WHERE request_id = '%s'"
                       % rid) == [["0"]]
    assert out.rstrip().endswith("removed 1 expired tombstones"), out


def test_small_batches_remove_everything(service):
    rids = [completed_request(service, with_attempt=False)[0] for _ in range(7)]
    for rid in rids:
        backdate(service, rid)
    out = gc(service, "--gc-batch", "2")
    assert all(not exists(service, rid) for rid in rids), out


def test_serve_runs_retention_by_itself(service, tmp_path):
    rid, _ = completed_request(service, with_attempt=True)
    backdate(service, rid)
    led = Ledgerd(service.database_url, tmp_path / "gc.log",
                  extra_args=["--gc-interval", "1s", "--retention", "7d"])
    try:
        deadline = time.time() + 10
        while exists(service, rid):
            assert time.time() < deadline, "serve's retention pass did not run"
            time.sleep(0.2)
        while "retention removed" not in led.log_text():  # the log line follows the commit
            assert time.time() < deadline, "serve's retention pass was not logged"
            time.sleep(0.1)
    finally:
        led.stop()
