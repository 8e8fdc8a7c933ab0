"""Every log line written while a call is served carries its ids, so that an
incident review can join the log to the request's history: the reply line,
and the database's errors, whether the worker hit them alone or in a batch."""

import json
import threading
import time

from conftest import claim_id, new_id


def path(rid, cid, action):
    return "/v1/requests/%s/tool-calls/%s/%s" % (rid, cid, action)


def lines(led, since, msg):
    """The log's JSON lines after byte offset @since whose msg starts with
    @msg, once there is one: the log is copied from ledgerd's stderr by a
    thread, and may not hold the last call's lines yet."""
    deadline = time.time() + 10
    while True:
        text = led.log_text()[since:]
        found = [e for e in (json.loads(line) for line in text.splitlines()
                             if line.startswith("{")) if e["msg"].startswith(msg)]
        if found or time.time() > deadline:
            return found
        time.sleep(0.05)


def test_a_database_error_names_the_call_it_failed(service):
    led, token = service.ledgerd, service.token("agent")
    rid, cid = new_id(), "call_07"
    since = len(led.log_text())
    # The claim's table is gone: the statement fails with an undefined table.
    service.sql("ALTER TABLE tool_calls RENAME TO tool_calls_away")
    try:
        r = led.post(path(rid, cid, "claim"), {"claim_id": claim_id()}, token=token)
    finally:
        service.sql("ALTER TABLE tool_calls_away RENAME TO tool_calls")
    assert r.status == 503, r
    failures = lines(led, since, "database step failed")
    # ledgerd's own background work (expiring leases, the gauges of /metrics)
    # may meet the missing table too: its lines name no call. Every line that
    # names one names this call, and the claim's failure is among them.
    named = [e for e in failures if "request_id" in e or "tool_call_id" in e]
    assert named, "no database failure named the call: %s" % failures
    for e in named:
        assert e.get("request_id") == rid and e.get("tool_call_id") == cid, e


def test_the_reply_line_names_the_attempt_of_the_body(service):
    led, token = service.ledgerd, service.token("router")
    rid, aid = new_id(), new_id("a")
    r = led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": aid}, token=token)
    assert r.status == 201, r
    since = len(led.log_text())
    r = led.post(path(rid, "call_01", "claim"), {"claim_id": claim_id(), "attempt_id": aid},
                 token=token)
    assert r.status == 201, r
    replies = [e for e in lines(led, since, "tool_call_claim") if e["msg"] == "tool_call_claim"]
    assert replies and all(e.get("request_id") == rid and e.get("attempt_id") == aid and
                           e.get("tool_call_id") == "call_01" for e in replies), replies


def test_no_line_of_a_batch_is_left_without_its_call(service):
    """Many calls at once, some failing in the database: every line that
    speaks of a failed step names one of the calls."""
    led, token = service.ledgerd, service.token("agent")
    rids = [new_id() for _ in range(24)]
    since = len(led.log_text())
    service.sql("ALTER TABLE tool_calls RENAME TO tool_calls_away")
    try:
        threads = [threading.Thread(target=led.post,
                                    args=(path(rid, "call_01", "claim"), {"claim_id": claim_id()}),
                                    kwargs={"token": token}) for rid in rids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        service.sql("ALTER TABLE tool_calls_away RENAME TO tool_calls")
    failures = lines(led, since, "database step failed")
    assert failures
    for e in failures:
        assert e.get("request_id") in rids and e.get("tool_call_id") == "call_01", e
