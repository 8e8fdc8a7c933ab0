"""The replay cache answers replays of settled calls from memory, and
never answers what the database would not: not after the request gained
an attempt, not for different args, not when turned off or when
retention is near."""

import json

import pytest

from conftest import Ledgerd, claim_id, new_id
from integration_helpers import metric


def path(rid, cid, action):
    return "/v1/requests/%s/tool-calls/%s/%s" % (rid, cid, action)


BODY = {"tool": "email.send", "args": {"to": "a@example.com", "n": 1}}


def settled(led, token, result):
    rid = new_id()
    r = led.post(path(rid, "call_01", "claim"), dict(BODY, claim_id=claim_id()), token=token)
    assert r.status == 201, r
    r = led.post(path(rid, "call_01", "complete"),
                 {"fencing_token": 1, "outcome": "succeeded", "result": result}, token=token)
    assert r.status == 200, r
    return rid


def replay(led, token, rid, **extra):
    return led.post(path(rid, "call_01", "claim"), dict(BODY, claim_id=claim_id(), **extra),
                    token=token)


@pytest.fixture(scope="module")
def uncached(service, tmp_path_factory):
    """A second ledgerd on the same database, without a replay cache."""
    led = Ledgerd(service.database_url, tmp_path_factory.mktemp("uncached") / "ledgerd.log",
                  extra_args=["--replay-cache", "0"])
    yield led
    led.stop()


def test_a_completion_is_replayed_from_memory_as_the_database_would(service, uncached):
    led = service.ledgerd
    token = service.token("agent")
    hits = metric(led, "ledger_replay_cache_hits_total")
    rid = settled(led, token, {"id": "msg-1", "text": "h\u00e9llo",  "n": 1.50})

    cached = replay(led, token, rid)        # kept when it was completed
    stored = replay(uncached, token, rid)  # read from the database
    assert cached.status == stored.status == 200
    assert cached.body == stored.body
    assert cached.header("Idempotent-Replayed") == stored.header("Idempotent-Replayed") == "true"
    assert metric(led, "ledger_replay_cache_hits_total") == hits + 1
    assert metric(uncached, "ledger_replay_cache_hits_total") == 0
    assert metric(led, "ledger_replay_cache_entries") >= 1
    assert metric(led, "ledger_replay_cache_bytes") > 0


def test_a_result_not_kept_is_answered_from_memory_as_the_database_would(service, uncached):
    """A call whose result was kept as its digest only is cached like any settled
    one: its claims are told 409 result_not_kept, from memory, with the same bytes."""
    led = service.ledgerd
    token = service.token("agent")
    rid = new_id()
    r = led.post(path(rid, "call_01", "claim"), dict(BODY, claim_id=claim_id()), token=token)
    assert r.status == 201, r
    r = led.post(path(rid, "call_01", "complete"),
                 {"fencing_token": 1, "outcome": "succeeded",
                  "result_not_kept": {"bytes": 3 << 20, "sha256": "0f" * 32}}, token=token)
    assert r.status == 200 and r.json["result_kept"] is False, r
    hits = metric(led, "ledger_replay_cache_hits_total")

    cached = replay(led, token, rid)
    stored = replay(uncached, token, rid)
    assert cached.status == stored.status == 409
    assert cached.json["error"]["code"] == "result_not_kept"
    assert cached.body == stored.body
    assert cached.header("Idempotent-Replayed") is stored.header("Idempotent-Replayed") is None
    assert metric(led, "ledger_replay_cache_hits_total") == hits + 1
    # Other args still go to the database, which refuses them.
    other = led.post(path(rid, "call_01", "claim"),
                     dict(BODY, claim_id=claim_id(), args={"to": "b@example.com", "n": 1}),
                     token=token)
    assert other.status == 422 and other.code == "args_mismatch", other


def test_a_replay_from_the_database_is_kept_for_the_next(service, uncached):
    led = service.ledgerd
    token = service.token("agent")
    rid = settled(uncached, token, [1, "two", None])  # completed elsewhere: not cached here
    hits = metric(led, "ledger_replay_cache_hits_total")

    first = replay(led, token, rid)
    assert metric(led, "ledger_replay_cache_hits_total") == hits
    second = replay(led, token, rid)
    assert metric(led, "ledger_replay_cache_hits_total") == hits + 1
    assert first.status == second.status == 200
    assert first.body == second.body


def test_cached_call_still_refuses_other_args(service):
    led = service.ledgerd
    token = service.token("agent")
    rid = settled(led, token, None)
    assert replay(led, token, rid).status == 200
    assert replay(led, token, rid).status == 200  # now cached
    other = led.post(path(rid, "call_01", "claim"),
                     dict(BODY, claim_id=claim_id(), args={"to": "b@example.com", "n": 1}),
                     token=token)
    assert other.status == 422 and other.code == "args_mismatch", other
    # The refusal went through the store, which records it.
    history = led.get("/v1/requests/%s" % rid, token=service.token("reviewer")).json
    assert "args_mismatch" in json.dumps(history["events"])


def test_an_attempt_begun_after_caching_makes_claims_name_one(service):
    led = service.ledgerd
    token = service.token("agent")
    rid = settled(led, token, {"ok": True})
    assert replay(led, token, rid).status == 200
    assert replay(led, token, rid).status == 200  # now cached
    r = led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1"},
                 token=service.token("router"))
    assert r.status == 201, r
    r = replay(led, token, rid)
    assert r.status == 409 and r.code == "attempt_required", r
    # Under the attempt, the stored result is replayed by the store.
    r = replay(led, token, rid, attempt_id="a1")
    assert r.status == 200 and r.json["replayed"] is True, r


def test_another_tenant_never_sees_a_cached_call(service):
    led = service.ledgerd
    rid = settled(led, service.token("agent", "t1"), {"secret": 1})
    assert replay(led, service.token("agent", "t1"), rid).status == 200
    assert replay(led, service.token("agent", "t1"), rid).status == 200  # cached for t1
    r = replay(led, service.token("agent", "t2"), rid)
    assert r.status == 201, r  # t2's own, new key


def test_a_forbidden_role_is_refused_even_when_cached(service):
    led = service.ledgerd
    token = service.token("agent")
    rid = settled(led, token, 1)
    assert replay(led, token, rid).status == 200
    assert replay(led, token, rid).status == 200
    r = replay(led, service.token("reviewer"), rid)
    assert r.status == 403 and r.code == "forbidden", r


def test_off_or_near_retention_every_replay_goes_to_the_database(service, tmp_path):
    token = service.token("agent")
    for name, args in (("off", ["--replay-cache", "0"]), ("short", ["--retention", "2m"])):
        led = Ledgerd(service.database_url, tmp_path / ("%s.log" % name), extra_args=args)
        try:
            rid = settled(led, token, {"n": 1})
            for _ in range(3):
                assert replay(led, token, rid).status == 200
            assert metric(led, "ledger_replay_cache_hits_total") == 0, name
            assert metric(led, "ledger_replay_cache_entries") == 0, name
        finally:
            led.stop()
