"""finish with the client's own error over HTTP (API 1.1): `{"outcome":
"failed", "client_error": {...}}` ends the attempt failed and the request
failed, with no failover, and the client error is recorded verbatim as the
request's; the refused shapes; the same finish again.

Contract: API.md "Additions for ledger-gateway (1.1)"; docs/api.md "An
attempt's own calls" (what ledgerd decided where API.md is silent: only
"error" and "http_status" at the top; a completed finish with one is refused).

Every test works in a tenant of its own (the pool-wide budget is per tenant).
"""

import json

import pytest

from http_helpers import Router, assert_error

# The engine's answer to a bad prompt, as a gateway passes it on: odd spacing
# kept, to show the text is recorded as sent, not re-serialised.
CLIENT_ERROR = ('{"error": {"message": "This model\'s maximum context length is 8192 tokens",'
                '  "type":"invalid_request_error", "param": null, "code": "context_length_exceeded"}'
                ' , "http_status": 400}')


@pytest.fixture
def rt(service):
    return Router(service)


def finish_raw(rt, rid, aid, text):
    return rt.post("/v1/requests/%s/attempts/%s/finish" % (rid, aid),
                   raw=('{"outcome": "failed", "delivered_output_tokens": 0,'
                        ' "client_error": %s}' % text).encode())


def stored(rt, rid):
    return rt.sql("SELECT client_error FROM requests WHERE tenant = '%s' AND request_id = '%s'"
                  % (rt.tenant, rid))[0][0]


def test_finish_with_client_error_fails_the_request_with_it_verbatim(rt):
    rid, a1 = rt.started()
    r = finish_raw(rt, rid, a1, CLIENT_ERROR)
    assert r.status == 200, r
    assert r.json["state"] == "failed"
    assert r.json["request"]["status"] == "failed"
    assert r.json["request"]["client_error"] == json.loads(CLIENT_ERROR)
    assert CLIENT_ERROR in r.body  # the very text, in the answer too
    assert stored(rt, rid) == CLIENT_ERROR
    assert rt.attempts(rid) == {a1: (1, "failed")}
    # the request is closed: no failover, no rerun, and whoever asks is told why
    err = assert_error(rt.create(rid, "a2"), 409, "request_closed")
    assert err["client_error"] == json.loads(CLIENT_ERROR)
    r = rt.post("/v1/requests/%s/attempts" % rid, {"attempt_id": "a3"})
    assert CLIENT_ERROR in r.body
    f = rt.failover(rid, a1, "replica_exited", next_aid="a4")
    err = assert_error(f, 409, "request_closed")
    assert err["client_error"] == json.loads(CLIENT_ERROR)
    view = rt.service.ledgerd.get("/v1/requests/%s" % rid, token=rt.tok)
    assert view.json["request"]["client_error"] == json.loads(CLIENT_ERROR)
    # the history says the request failed on the client's own error
    evs = [(t, d) for t, _, _, d in rt.events(rid)]
    assert ("attempt_finished", {"outcome": "failed", "delivered_output_tokens": 0}) in evs
    assert ("request_status", {"status": "failed", "cause": "client_error",
                               "client_error": "context_length_exceeded"}) in evs


def test_the_same_finish_again_is_200_and_changes_nothing(rt):
    rid, a1 = rt.started()
    first = finish_raw(rt, rid, a1, CLIENT_ERROR)
    assert first.status == 200, first
    events = rt.events(rid)
    again = finish_raw(rt, rid, a1, CLIENT_ERROR)
    assert again.status == 200, again
    assert again.json == first.json
    assert rt.events(rid) == events and stored(rt, rid) == CLIENT_ERROR


@pytest.mark.parametrize("text", [
    '{"error": {}}',
    '{"error": {"code": "bad_request", "message": "no"}, "http_status": 599}',
    '{"error": {"message": "no"}, "http_status": 100}',
    '{"http_status": null, "error": {"code": 7}}',
])
def test_accepted_shapes(rt, text):
    rid, a1 = rt.started()
    r = finish_raw(rt, rid, a1, text)
    assert r.status == 200, r
    assert stored(rt, rid) == text


def test_a_client_error_of_16_kib_is_taken(rt):
    head = '{"error": {"message": "'
    text = head + "x" * (16 * 1024 - len(head) - 3) + '"}}'
    assert len(text) == 16 * 1024
    rid, a1 = rt.started()
    assert finish_raw(rt, rid, a1, text).status == 200
    rid, a1 = rt.started()
    assert_error(finish_raw(rt, rid, a1, text[:-3] + 'x"}}'), 400, "invalid_field",
                 field="client_error")
    assert rt.attempts(rid) == {a1: (1, "live")}


@pytest.mark.parametrize("text", [
    '"context_length_exceeded"',                       # not an object
    '[{"error": {}}]',
    '{}',                                              # no error
    '{"error": "too long"}',                           # error not an object
    '{"error": null}',
    '{"error": {}, "status": 400}',                    # another key at the top
    '{"error": {}, "http_status": 99}',
    '{"error": {}, "http_status": 600}',
    '{"error": {}, "http_status": "400"}',
    '{"error": {}, "http_status": 400.5}',
    '{"error": {}, "http_status": -400}',
    '{"error": {"message": "nul \\u0000 inside"}}',     # jsonb holds no NUL
])
def test_refused_shapes_are_invalid_field_and_change_nothing(rt, text):
    rid, a1 = rt.started()
    assert_error(finish_raw(rt, rid, a1, text), 400, "invalid_field", field="client_error")
    assert rt.attempts(rid) == {a1: (1, "live")}
    assert rt.request(rid)["status"] == "open" and rt.request(rid)["client_error"] is None


def test_client_error_with_outcome_completed_is_invalid_field(rt):
    rid, a1 = rt.started()
    r = rt.finish(rid, a1, "completed", client_error={"error": {"code": "x"}})
    assert_error(r, 400, "invalid_field", field="client_error")
    assert rt.attempts(rid) == {a1: (1, "live")}


def test_a_fenced_attempt_cannot_end_the_request_with_an_error(rt):
    rid, a1 = rt.started()
    assert rt.cancel(rid, a1).status == 200
    r = finish_raw(rt, rid, a1, CLIENT_ERROR)
    assert_error(r, 409, "attempt_fenced")
    assert rt.request(rid)["status"] == "open" and rt.request(rid)["client_error"] is None


def test_a_plain_failed_finish_still_leaves_the_request_open(rt):
    rid, a1 = rt.started()
    r = rt.finish(rid, a1, "failed", reason="upstream 500")
    assert r.status == 200 and r.json["request"]["status"] == "open", r
    assert "client_error" not in r.json["request"]
