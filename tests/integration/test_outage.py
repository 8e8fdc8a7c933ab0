"""PostgreSQL goes away under a running ledgerd, then comes back."""

import time

from conftest import claim_id, new_id


def claim(led, token):
    path = "/v1/requests/%s/tool-calls/call_01/claim" % new_id()
    return led.post(path, {"claim_id": claim_id()}, token=token, timeout=15)


def test_database_down_answers_503_then_serves_again(service):
    led = service.ledgerd
    token = service.token("agent")
    assert claim(led, token).status == 201
    assert led.get("/readyz").status == 200

    service.cluster.stop()
    try:
        down = [claim(led, token) for _ in range(3)]
        for r in down:
            assert r.status == 503, r
            assert r.code == "store_unavailable"
            assert r.json["error"]["retry_after_ms"] > 0
            assert int(r.header("Retry-After")) >= 1
        assert led.get("/readyz").status == 503
        assert led.get("/healthz").status == 200
        # A token seen before still authenticates from the cache; an unknown
        # one cannot be checked: neither may be answered with a guess.
        stranger = claim(led, "ldg_not-a-token-at-all")
        assert stranger.status == 503, stranger
    finally:
        service.cluster.start()

    deadline = time.time() + 20
    while True:
        r = claim(led, token)
        if r.status == 201:
            break
        assert r.status == 503, r
        assert time.time() < deadline, "ledgerd did not recover"
        time.sleep(0.2)
    assert led.get("/readyz").status == 200
    assert led.proc.poll() is None  # the same process, never restarted
