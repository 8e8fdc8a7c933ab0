"""Leases on the database's clock: renewed claims hold, silent ones turn unknown."""

import threading
import time

from conftest import claim_id, new_id


def test_renewed_claim_stays_held(service):
    """A 1 s lease renewed every 300 ms holds for 3 s; others wait meanwhile."""
    led = service.ledgerd
    token = service.token("agent")
    path = "/v1/requests/%s/tool-calls/call_01" % new_id()
    r = led.post(path + "/claim", {"claim_id": claim_id(), "lease_ms": 1000}, token=token)
    assert r.status == 201
    fencing = r.json["fencing_token"]

    started = time.monotonic()
    while time.monotonic() - started < 3.0:
        time.sleep(0.3)
        renewed = led.post(path + "/renew", {"fencing_token": fencing, "lease_ms": 1000},
                           token=token)
        assert renewed.status == 200, renewed
        other = led.post(path + "/claim", {"claim_id": claim_id()}, token=token)
        assert other.status == 409 and other.code == "in_progress", other
        assert 0 < other.json["error"]["retry_after_ms"] <= 1000
        state = led.get(path, token=token).json
        assert state["state"] == "in_progress"

    done = led.post(path + "/complete", {"fencing_token": fencing, "outcome": "succeeded",
                                         "result": {"ok": True}}, token=token)
    assert done.status == 200 and "late_completion" not in done.json
    assert service.sql("SELECT type FROM events WHERE request_id = '%s' AND type IN "
                       "('completed', 'late_completion')" % path.split("/")[3]) == [["completed"]]


def test_silent_claim_becomes_outcome_unknown(service):
    led = service.ledgerd
    token = service.token("agent")
    admin = service.token("admin")
    rid = new_id()
    path = "/v1/requests/%s/tool-calls/call_01" % rid
    r = led.post(path + "/claim", {"claim_id": claim_id(), "lease_ms": 1000}, token=token)
    assert r.status == 201
    time.sleep(1.2)

    again = led.post(path + "/claim", {"claim_id": claim_id()}, token=token)
    assert again.status == 409 and again.code == "outcome_unknown", again
    assert led.get(path, token=token).json["state"] == "unknown"
    late_renew = led.post(path + "/renew", {"fencing_token": r.json["fencing_token"]},
                          token=token)
    assert late_renew.status == 409 and late_renew.code == "outcome_unknown"
    listed = led.get("/v1/tool-calls?state=unknown&limit=1000", token=admin).json["items"]
    assert any(i["request_id"] == rid for i in listed)
    # Never handed out silently: still unknown a while later.
    time.sleep(0.3)
    assert led.post(path + "/claim", {"claim_id": claim_id()}, token=token).code == \
        "outcome_unknown"


def test_renew_counts_from_now_not_from_the_old_deadline(service):
    led = service.ledgerd
    token = service.token("agent")
    path = "/v1/requests/%s/tool-calls/call_01" % new_id()
    r = led.post(path + "/claim", {"claim_id": claim_id(), "lease_ms": 60000}, token=token)
    renewed = led.post(path + "/renew", {"fencing_token": r.json["fencing_token"],
                                         "lease_ms": 500}, token=token)
    assert renewed.status == 200
    left = led.get(path, token=token).json["lease_ms_left"]
    assert 0 < left <= 500
    time.sleep(0.7)
    assert led.get(path, token=token).json["state"] == "unknown"


def test_heartbeat_races_a_competitor(service):
    """A renewing holder and a crowd of claimants: the holder never loses the key."""
    led = service.ledgerd
    token = service.token("agent")
    path = "/v1/requests/%s/tool-calls/call_01" % new_id()
    r = led.post(path + "/claim", {"claim_id": claim_id(), "lease_ms": 400}, token=token)
    fencing = r.json["fencing_token"]
    stop = threading.Event()
    stolen = []

    def crowd():
        while not stop.is_set():
            c = led.post(path + "/claim", {"claim_id": claim_id()}, token=token)
            if c.status != 409 or c.code != "in_progress":
                stolen.append(c)

    threads = [threading.Thread(target=crowd) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(10):
            time.sleep(0.1)
            assert led.post(path + "/renew", {"fencing_token": fencing, "lease_ms": 400},
                            token=token).status == 200
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert stolen == []
