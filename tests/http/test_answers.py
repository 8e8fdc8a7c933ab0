"""Kept answers over HTTP (API 1.1): `answer` on a finish that ends the
request, `delivered_answer` on a failover whose decision ends it, what is
kept within and over --max-kept-answer-bytes, the client's own reduced form,
GET /v1/requests/{rid}/answer (404 answer_not_found, 403 to agents and
reviewers), the refused shapes, the body limit of finish and failover, and
that nothing is written twice nor shown in the request's review view.

This module's ledgerd keeps answers of up to 8 KiB and takes bodies of 1 KiB
(finish and failover: 1 KiB, the base64 of 8 KiB, and 4 KiB).

Contract: API.md "Additions for ledger-gateway (1.1)"; docs/api.md "Kept
answers" (what ledgerd decided where API.md is silent: content_type may be
empty; a finish that does not end the request refuses an answer; a failover
that does not end it ignores one).

Every test works in a tenant of its own (the pool-wide budget is per tenant).
"""

import base64
import hashlib
import json

import pytest

from conftest import new_id
from http_helpers import Router, answer, assert_error

KEPT_MAX = 8 * 1024
MAX_BODY = 1024
FINISH_LIMIT = MAX_BODY + (KEPT_MAX + 2) // 3 * 4 + 4096
LEDGERD_ARGS = ["--max-body", "1KiB", "--max-kept-answer-bytes", "8KiB"]

SSE = (b'id: 1\ndata: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
       b'id: 2\ndata: {"choices":[{"delta":{"content":"lo"}}]}\n\n')


def whole(data, status=200, content_type="text/event-stream"):
    return {"status": status, "content_type": content_type,
            "body_b64": base64.b64encode(data).decode()}


def reduced(data, status=200, content_type="application/json"):
    return {"status": status, "content_type": content_type, "kept": False,
            "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.fixture
def rt(service):
    return Router(service)


def get_answer(rt, rid, token=None):
    return rt.service.ledgerd.get("/v1/requests/%s/answer" % rid, token=token or rt.tok)


def kept(rt, rid):
    r = get_answer(rt, rid)
    assert r.status == 200, r
    return r.json


def count_answers(rt, rid):
    return rt.count("answers", rid)


# --- finish -----------------------------------------------------------------------


def test_a_completed_finish_keeps_its_answer(rt):
    rid, a1 = rt.started()
    r = rt.finish(rid, a1, "completed", delivered_output_tokens=2, answer=whole(SSE))
    assert r.status == 200 and r.json["request"]["status"] == "completed", r
    assert kept(rt, rid) == {"kept": True, "status": 200, "content_type": "text/event-stream",
                             "body_b64": base64.b64encode(SSE).decode()}
    assert "answer" not in r.json and "body_b64" not in r.body


def test_a_failed_finish_with_client_error_keeps_its_answer(rt):
    rid, a1 = rt.started()
    body = b'{"error": {"message": "too long", "code": "context_length_exceeded"}}'
    r = rt.finish(rid, a1, "failed",
                  client_error={"error": {"code": "context_length_exceeded"},
                                "http_status": 400},
                  answer=whole(body, 400, "application/json"))
    assert r.status == 200 and r.json["request"]["status"] == "failed", r
    assert kept(rt, rid) == {"kept": True, "status": 400, "content_type": "application/json",
                             "body_b64": base64.b64encode(body).decode()}


def test_an_empty_answer_and_an_empty_content_type_are_kept(rt):
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "completed", answer=whole(b"", 204, "")).status == 200
    assert kept(rt, rid) == {"kept": True, "status": 204, "content_type": "", "body_b64": ""}


def test_a_plain_failed_finish_refuses_an_answer(rt):
    rid, a1 = rt.started()
    r = rt.finish(rid, a1, "failed", answer=whole(SSE))
    assert_error(r, 400, "invalid_field", field="answer")
    assert rt.attempts(rid) == {a1: (1, "live")} and count_answers(rt, rid) == 0


def test_the_same_finish_again_writes_nothing_new(rt):
    rid, a1 = rt.started()
    first = rt.finish(rid, a1, "completed", answer=whole(SSE))
    assert first.status == 200, first
    events = rt.events(rid)
    again = rt.finish(rid, a1, "completed", answer=whole(SSE))
    assert again.status == 200 and again.json == first.json, again
    other = rt.finish(rid, a1, "completed", answer=whole(b"another answer"))
    assert other.status == 200, other
    assert kept(rt, rid)["body_b64"] == base64.b64encode(SSE).decode()
    assert rt.events(rid) == events and count_answers(rt, rid) == 1


def test_a_fenced_finish_keeps_nothing(rt):
    rid, a1 = rt.started()
    assert rt.cancel(rid, a1).status == 200
    assert_error(rt.finish(rid, a1, "completed", answer=whole(SSE)), 409, "attempt_fenced")
    assert_error(get_answer(rt, rid), 404, "answer_not_found")


# --- the bound ----------------------------------------------------------------------


def test_an_answer_at_the_bound_is_kept_whole(rt):
    data = bytes(range(256)) * (KEPT_MAX // 256)
    assert len(data) == KEPT_MAX
    rid, a1 = rt.started()
    body = json.dumps({"outcome": "completed", "answer": whole(data, 200,
                                                               "application/octet-stream")})
    assert MAX_BODY < len(body) <= FINISH_LIMIT
    r = rt.post("/v1/requests/%s/attempts/%s/finish" % (rid, a1), raw=body.encode())
    assert r.status == 200, r
    got = kept(rt, rid)
    assert got["kept"] is True and base64.b64decode(got["body_b64"]) == data


def test_an_answer_over_the_bound_keeps_its_length_and_sha256(rt):
    data = b"x" * (KEPT_MAX + 1)
    rid, a1 = rt.started()
    r = rt.finish(rid, a1, "completed", answer=whole(data, 200, "text/plain"))
    assert r.status == 200, r  # the call still succeeds
    assert kept(rt, rid) == {"kept": False, "status": 200, "content_type": "text/plain",
                             "bytes": KEPT_MAX + 1,
                             "sha256": hashlib.sha256(data).hexdigest()}
    rows = rt.sql("SELECT kept, body_b64 IS NULL FROM answers WHERE tenant = '%s' AND"
                  " request_id = '%s'" % (rt.tenant, rid))
    assert rows == [["f", "t"]]


def test_the_client_reduced_form_is_kept_as_given(rt):
    data = b"an answer too large for the gateway's own bound"
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "completed", answer=reduced(data)).status == 200
    assert kept(rt, rid) == {"kept": False, "status": 200, "content_type": "application/json",
                             "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_finish_and_failover_take_an_answer_at_the_bound_other_routes_keep_max_body(rt):
    big = json.dumps({"outcome": "completed", "answer": whole(b"y" * KEPT_MAX),
                      "reason": "r" * 200})
    assert len(big) > MAX_BODY
    rid, a1 = rt.started()
    assert rt.post("/v1/requests/%s/attempts/%s/finish" % (rid, a1), raw=big.encode()).status \
        == 200
    # past the room of the largest answer, even finish is too large
    over = b'{"outcome": "completed", "reason": "' + b"z" * FINISH_LIMIT + b'"}'
    r = rt.post("/v1/requests/%s/attempts/%s/finish" % (new_id("r"), "a1"), raw=over)
    assert_error(r, 413, "body_too_large")
    # every other route keeps --max-body
    pad = json.dumps({"attempt_id": "a1", "replica": "gpu-1", "model_revision": "m" * 256,
                      "identity": {"pad": "p" * 900}})
    assert len(pad) > MAX_BODY
    assert_error(rt.post("/v1/requests/%s/attempts" % new_id("r"), raw=pad.encode()), 413,
                 "body_too_large")
    claim = json.dumps({"args": {"pad": "p" * 2000}})
    assert_error(rt.post("/v1/requests/%s/tool-calls/c1/claim" % new_id("r"),
                         raw=claim.encode()), 413, "body_too_large")
    # failover takes the same room as finish
    rid, a1 = rt.started(max_attempts=1)
    fo = json.dumps({"attempt_id": a1, "signal": "replica_exited",
                     "delivered_answer": whole(b"w" * KEPT_MAX, 503, "application/json")})
    assert len(fo) > MAX_BODY
    b = answer(rt.post("/v1/requests/%s/failover" % rid, raw=fo.encode()), "reject")
    assert b["request_status"] == "failed"
    assert kept(rt, rid)["kept"] is True


# --- failover -----------------------------------------------------------------------


def test_a_reject_keeps_the_delivered_answer(rt):
    rid, a1 = rt.started(max_attempts=1)
    err = b'{"error": {"code": "retry_budget_exhausted"}}'
    b = answer(rt.failover(rid, a1, "replica_exited",
                           delivered_answer=whole(err, 503, "application/json")), "reject")
    assert b["request_status"] == "failed"
    assert kept(rt, rid)["body_b64"] == base64.b64encode(err).decode()


def test_a_terminated_stream_keeps_the_events_written_so_far(rt):
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 2).status == 200
    b = answer(rt.failover(rid, a1, "upstream_closed", delivered_answer=whole(SSE)),
               "terminate_stream")
    assert b["request_status"] == "terminated"
    assert kept(rt, rid)["body_b64"] == base64.b64encode(SSE).decode()


def test_a_client_gone_after_a_delta_keeps_what_it_was_sent(rt):
    rid, a1 = rt.started()
    assert rt.deliver(rid, a1, 2).status == 200
    answer(rt.failover(rid, a1, "client_disconnected", delivered_answer=whole(SSE)),
           "cancel_upstream")
    assert kept(rt, rid)["kept"] is True


@pytest.mark.parametrize("setup,signal,action", [
    ("live", "client_disconnected", "cancel_upstream"),  # abandoned: it may reopen
    ("live", "overloaded", "keep_waiting"),
    ("live", "network_error", "wait_for_fence"),
    ("live", "replica_exited", "retry_prefill"),
])
def test_a_decision_that_does_not_end_the_request_ignores_the_answer(rt, setup, signal,
                                                                     action):
    rid, a1 = rt.started()
    kw = {"next_aid": new_id("a")} if action == "retry_prefill" else {}
    answer(rt.failover(rid, a1, signal, delivered_answer=whole(SSE), **kw), action)
    assert_error(get_answer(rt, rid), 404, "answer_not_found")
    assert count_answers(rt, rid) == 0


def test_a_replayed_decision_writes_nothing_new(rt):
    rid, a1 = rt.started(max_attempts=1)
    first = rt.failover(rid, a1, "pod_lost", delivered_answer=whole(b"first"))
    answer(first, "reject")
    events = rt.events(rid)
    again = rt.failover(rid, a1, "pod_lost", delivered_answer=whole(b"second"))
    assert again.status == 200 and again.body == first.body, again
    assert base64.b64decode(kept(rt, rid)["body_b64"]) == b"first"
    assert rt.events(rid) == events and count_answers(rt, rid) == 1


def test_a_refused_failover_keeps_nothing(rt):
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "completed").status == 200
    assert_error(rt.failover(rid, a1, "pod_lost", delivered_answer=whole(SSE)), 409,
                 "request_closed")
    assert_error(get_answer(rt, rid), 404, "answer_not_found")


# --- GET /v1/requests/{rid}/answer ---------------------------------------------------


def test_answer_not_found_for_no_request_no_answer_and_another_tenant(rt, service):
    assert_error(get_answer(rt, new_id("r")), 404, "answer_not_found")
    rid, a1 = rt.started()
    assert_error(get_answer(rt, rid), 404, "answer_not_found")
    assert rt.finish(rid, a1, "completed").status == 200
    assert_error(get_answer(rt, rid), 404, "answer_not_found")  # finished without one
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "completed", answer=whole(SSE)).status == 200
    other = Router(service)
    assert_error(get_answer(other, rid), 404, "answer_not_found")


@pytest.mark.parametrize("role,status", [("router", 200), ("admin", 200), ("reviewer", 403),
                                         ("agent", 403)])
def test_routers_and_admins_read_answers_agents_and_reviewers_may_not(rt, service, role,
                                                                       status):
    rid, a1 = rt.started()
    assert rt.finish(rid, a1, "completed", answer=whole(SSE)).status == 200
    r = get_answer(rt, rid, token=service.token(role, rt.tenant))
    assert r.status == status, r
    if status == 403:
        assert_error(r, 403, "forbidden")
    r = get_answer(rt, new_id("r"), token=service.token(role, rt.tenant))
    assert r.status == (404 if status == 200 else 403), r


def test_answers_are_not_in_the_request_view(rt, service):
    rid, a1 = rt.started()
    marker = b"a body no review may show"
    assert rt.finish(rid, a1, "completed", answer=whole(marker)).status == 200
    encoded = base64.b64encode(marker).decode()
    for role in ("router", "reviewer", "admin"):
        v = service.ledgerd.get("/v1/requests/%s" % rid, token=service.token(role, rt.tenant))
        assert v.status == 200, v
        assert encoded not in v.body and "body_b64" not in v.body and '"answer"' not in v.body
    listed = service.ledgerd.get("/v1/requests", token=service.token("reviewer", rt.tenant))
    assert encoded not in listed.body


def test_post_on_the_answer_is_405(rt):
    r = rt.post("/v1/requests/%s/answer" % new_id("r"), {})
    assert_error(r, 405, "method_not_allowed")
    assert r.header("Allow") == "GET, HEAD"


# --- refused shapes -------------------------------------------------------------------

BAD_ANSWERS = [
    "text", ["list"], 200,
    {}, {"status": 200, "content_type": "text/plain"},                      # no bytes
    {"status": 200, "body_b64": ""},                                         # no content type
    dict(whole(b"x"), extra=1),
    dict(whole(b"x"), kept=True),
    dict(whole(b"x"), status=99), dict(whole(b"x"), status=600), dict(whole(b"x"), status="200"),
    dict(whole(b"x"), status=200.5), dict(whole(b"x"), status=None),
    dict(whole(b"x"), content_type="t" * 257), dict(whole(b"x"), content_type=7),
    dict(whole(b"x"), content_type="a\u0000b"),
    dict(whole(b"x"), body_b64="eA"), dict(whole(b"x"), body_b64="eB=="),
    dict(whole(b"x"), body_b64="e A="), dict(whole(b"x"), body_b64="-_=="),
    dict(whole(b"x"), body_b64=None), dict(whole(b"x"), body_b64=["eA=="]),
    dict(reduced(b"x"), kept=True), dict(reduced(b"x"), kept=None),
    dict(reduced(b"x"), bytes=-1), dict(reduced(b"x"), bytes="1"),
    dict(reduced(b"x"), bytes=2 ** 53), dict(reduced(b"x"), sha256="A" * 64),
    dict(reduced(b"x"), sha256="a" * 63), {k: v for k, v in reduced(b"x").items()
                                           if k != "sha256"},
    dict(reduced(b"x"), body_b64="eA=="),
]


@pytest.mark.parametrize("bad", BAD_ANSWERS)
def test_finish_refuses_a_bad_answer(rt, bad):
    rid, a1 = rt.started()
    assert_error(rt.finish(rid, a1, "completed", answer=bad), 400, "invalid_field",
                 field="answer")
    assert rt.attempts(rid) == {a1: (1, "live")} and count_answers(rt, rid) == 0


@pytest.mark.parametrize("bad", BAD_ANSWERS[::3])
def test_failover_refuses_a_bad_delivered_answer(rt, bad):
    rid, a1 = rt.started(max_attempts=1)
    assert_error(rt.failover(rid, a1, "pod_lost", delivered_answer=bad), 400,
                 "invalid_field", field="delivered_answer")
    assert rt.attempts(rid) == {a1: (1, "live")} and rt.recorded(rid) == 0
