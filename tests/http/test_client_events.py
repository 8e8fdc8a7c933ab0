"""Client events over HTTP: POST /v1/requests/{rid}/attempts/{aid}/client,
ledgerd's own addition to the API (not in API.md): what a router saw of its
client during an attempt (disconnected, resumed, hold_ended), appended to
the request's history; a retried call (the same attempt and n) appends
nothing; 404 attempt_not_found; no rights needed; the request's row locked
first; roles.

Contract: docs/api.md "Client events" (ledgerd's own).

Every test works in a tenant of its own.
"""

import time

import pytest

from conftest import hold_request_lock, new_id
from http_helpers import Router, assert_error


@pytest.fixture
def rt(service):
    return Router(service)


def client(rt, rid, aid, token=None, **body):
    return rt.post("/v1/requests/%s/attempts/%s/client" % (rid, aid), body, token)


def client_events(rt, rid):
    return [(t, a, d) for t, a, _, d in rt.events(rid) if t.startswith("client_")]


@pytest.mark.parametrize("body,recorded,detail", [
    ({"event": "disconnected", "n": 1, "hold_ms": 10000}, "client_disconnected",
     {"n": 1, "hold_ms": 10000}),
    ({"event": "disconnected", "n": 2}, "client_disconnected", {"n": 2}),
    ({"event": "resumed", "n": 3, "last_event_id": 17}, "client_resumed",
     {"n": 3, "last_event_id": 17}),
    ({"event": "resumed", "n": 4, "last_event_id": 0}, "client_resumed",
     {"n": 4, "last_event_id": 0}),
    ({"event": "resumed", "n": 5}, "client_resumed", {"n": 5}),
    ({"event": "hold_ended", "n": 9007199254740991}, "client_hold_ended",
     {"n": 9007199254740991}),
])
def test_each_event_is_appended_to_the_history(rt, body, recorded, detail):
    rid, a1 = rt.started()
    r = client(rt, rid, a1, **body)
    assert r.status == 200, r
    assert r.json == {"recorded": recorded}
    assert client_events(rt, rid) == [(recorded, a1, detail)]
    view = rt.service.ledgerd.get("/v1/requests/%s" % rid, token=rt.tok).json
    assert [(e["type"], e["attempt_id"], e["detail"]) for e in view["events"]
            if e["type"] == recorded] == [(recorded, a1, detail)]


def test_a_life_of_a_held_stream_in_order(rt):
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 3).status == 200
    assert client(rt, rid, a1, event="disconnected", n=1, hold_ms=5000).status == 200
    assert client(rt, rid, a1, event="resumed", n=2, last_event_id=3).status == 200
    assert client(rt, rid, a1, event="disconnected", n=3, hold_ms=5000).status == 200
    assert client(rt, rid, a1, event="hold_ended", n=4).status == 200
    assert [(t, d["n"]) for t, _, d in client_events(rt, rid)] == [
        ("client_disconnected", 1), ("client_resumed", 2), ("client_disconnected", 3),
        ("client_hold_ended", 4)]


def test_the_same_attempt_and_n_again_appends_nothing(rt):
    rid, a1 = rt.started()
    first = client(rt, rid, a1, event="disconnected", n=7, hold_ms=100)
    assert first.status == 200, first
    events = rt.events(rid)
    again = client(rt, rid, a1, event="disconnected", n=7, hold_ms=100)
    assert again.status == 200 and again.json == first.json, again
    # n names the call: another body under the same n is the call already recorded
    other = client(rt, rid, a1, event="hold_ended", n=7)
    assert other.status == 200 and other.json == {"recorded": "client_disconnected"}, other
    assert rt.events(rid) == events
    # another n, or the same n of another attempt, is another event
    assert client(rt, rid, a1, event="hold_ended", n=8).json == {"recorded": "client_hold_ended"}
    assert rt.failover(rid, a1, "replica_exited", next_aid="a-2").status == 200
    assert client(rt, rid, "a-2", event="disconnected", n=7).status == 200
    assert [(t, a, d["n"]) for t, a, d in client_events(rt, rid)] == [
        ("client_disconnected", a1, 7), ("client_hold_ended", a1, 8),
        ("client_disconnected", "a-2", 7)]


def test_an_attempt_the_request_does_not_have_is_attempt_not_found(rt, service):
    rid, a1 = rt.started()
    err = assert_error(client(rt, rid, "a-none", event="resumed", n=1), 404,
                       "attempt_not_found")
    assert err["attempt_id"] == "a-none"
    assert_error(client(rt, new_id("r"), a1, event="resumed", n=1), 404, "attempt_not_found")
    other = Router(service)
    assert_error(client(other, rid, a1, event="resumed", n=1), 404, "attempt_not_found")
    assert client_events(rt, rid) == []
    assert other.request(rid) is None


def test_no_rights_are_needed_it_is_history(rt):
    rid, a1 = rt.started()
    assert rt.cancel(rid, a1).status == 200
    assert client(rt, rid, a1, event="hold_ended", n=1).status == 200
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "completed").status == 200
    assert client(rt, rid, a1, event="disconnected", n=1).status == 200
    assert [t for t, _, _ in client_events(rt, rid)] == ["client_disconnected"]
    assert rt.request(rid)["status"] == "completed"


def test_the_request_row_is_locked_first(rt, service):
    rid, a1 = rt.started()
    lock = hold_request_lock(service.sql, rid, 1)
    t0 = time.monotonic()
    r = client(rt, rid, a1, event="disconnected", n=1)
    waited = time.monotonic() - t0
    lock.join()
    assert r.status == 200, r
    assert waited >= 0.5, waited  # it waited for the other transaction's lock


@pytest.mark.parametrize("body,field", [
    ({"n": 1}, "event"),
    ({"event": "gone", "n": 1}, "event"),
    ({"event": "client_disconnected", "n": 1}, "event"),
    ({"event": "resumed"}, "n"),
    ({"event": "resumed", "n": 0}, "n"),
    ({"event": "resumed", "n": -1}, "n"),
    ({"event": "resumed", "n": "1"}, "n"),
    ({"event": "resumed", "n": 1.5}, "n"),
    ({"event": "resumed", "n": 1, "last_event_id": -1}, "last_event_id"),
    ({"event": "resumed", "n": 1, "last_event_id": "3"}, "last_event_id"),
    ({"event": "disconnected", "n": 1, "last_event_id": 3}, "last_event_id"),
    ({"event": "hold_ended", "n": 1, "last_event_id": 3}, "last_event_id"),
    ({"event": "disconnected", "n": 1, "hold_ms": -5}, "hold_ms"),
    ({"event": "resumed", "n": 1, "hold_ms": 5}, "hold_ms"),
    ({"event": "hold_ended", "n": 1, "hold_ms": 5}, "hold_ms"),
    ({"event": "resumed", "n": 1, "reason": "x"}, "reason"),
])
def test_a_bad_body_is_invalid_field(rt, body, field):
    rid, a1 = rt.started()
    assert_error(client(rt, rid, a1, **body), 400, "invalid_field", field=field)
    assert client_events(rt, rid) == []


@pytest.mark.parametrize("role,status", [("agent", 403), ("reviewer", 403), ("admin", 200)])
def test_routers_and_admins_only(rt, service, role, status):
    rid, a1 = rt.started()
    r = client(rt, rid, a1, token=service.token(role, rt.tenant), event="resumed", n=1)
    assert r.status == status, r


def test_get_on_the_client_path_is_405(rt):
    rid, a1 = rt.started()
    r = rt.service.ledgerd.get("/v1/requests/%s/attempts/%s/client" % (rid, a1), token=rt.tok)
    assert_error(r, 405, "method_not_allowed")
    assert r.header("Allow") == "POST"
