"""An acknowledged completion survives the death of ledgerd."""

from conftest import claim_id, new_id


def test_completion_acknowledged_then_kill9_is_replayed(service):
    led = service.ledgerd
    token = service.token("agent")
    path = "/v1/requests/%s/tool-calls/call_01" % new_id()
    raw_result = '{"receipt": "rcpt-77",  "amount": 12.50, "lines": [1, 2 ,3]}'

    r = led.post(path + "/claim", {"claim_id": claim_id(), "tool": "refund"}, token=token)
    assert r.status == 201, r
    body = '{"fencing_token": %d, "outcome": "succeeded", "result": %s}' % (
        r.json["fencing_token"], raw_result)
    done = led.post(path + "/complete", raw=body.encode(), token=token)
    assert done.status == 200, done

    # No goodbye: SIGKILL right after the acknowledgement.
    assert led.kill() == -9
    led.start("127.0.0.1:%d" % led.port)

    again = led.post(path + "/claim", {"claim_id": claim_id(), "tool": "refund"}, token=token)
    assert again.status == 200, again
    assert again.header("Idempotent-Replayed") == "true"
    assert again.json["status"] == "completed"
    # Byte for byte what was sent, not a re-serialisation.
    assert '"result":' + raw_result + "," in again.body


def test_claim_acknowledged_then_kill9_is_still_held(service):
    led = service.ledgerd
    token = service.token("agent")
    path = "/v1/requests/%s/tool-calls/call_01" % new_id()
    me = claim_id()

    r = led.post(path + "/claim", {"claim_id": me, "lease_ms": 60000}, token=token)
    assert r.status == 201, r
    led.kill()
    led.start("127.0.0.1:%d" % led.port)

    other = led.post(path + "/claim", {"claim_id": claim_id()}, token=token)
    assert other.status == 409 and other.code == "in_progress"
    mine = led.post(path + "/claim", {"claim_id": me, "lease_ms": 60000}, token=token)
    assert mine.status == 200 and mine.json["fencing_token"] == r.json["fencing_token"]
