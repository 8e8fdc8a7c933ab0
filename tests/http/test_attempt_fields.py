"""API 1.1's fields of an attempt over HTTP: `gateway`, `identity` and
`input_sha256` on POST attempts and on failover's next_attempt, and the
settled_tool_calls a created (or repeated) attempt carries.

Contract: API.md "Additions for ledger-gateway (1.1)"; docs/api.md "Create"
(what ledgerd decided where API.md is silent: a repeat with another gateway
is request_mismatch; an attempt without input_sha256 never mismatches; a
repeat of an attempt does not fix the request's input_sha256).

Every test works in a tenant of its own (the pool-wide budget is per tenant).
"""

import hashlib
import json

import pytest

from conftest import new_id
from http_helpers import Router, answer, assert_error

SHA_A = hashlib.sha256(b"input a").hexdigest()
SHA_B = hashlib.sha256(b"input b").hexdigest()


@pytest.fixture
def rt(service):
    return Router(service)


def view(rt, rid):
    r = rt.service.ledgerd.get("/v1/requests/%s" % rid, token=rt.tok)
    assert r.status == 200, r
    return r.json


def created_detail(rt, rid, aid):
    """The detail of @aid's attempt_created event."""
    found = [d for t, a, _, d in rt.events(rid) if t == "attempt_created" and a == aid]
    assert len(found) == 1, rt.events(rid)
    return found[0]


# --- gateway ------------------------------------------------------------------


def test_gateway_is_kept_and_shown_on_every_attempt_object(rt):
    rid, a1 = new_id("r"), new_id("a")
    gw = "gw-7.pod_3~x"
    r = rt.create(rid, a1, replica="gpu-1", gateway=gw)
    assert r.status == 201, r
    assert r.json["gateway"] == gw
    again = rt.create(rid, a1, replica="gpu-1", gateway=gw)
    assert again.status == 200 and again.json["gateway"] == gw, again
    assert created_detail(rt, rid, a1)["gateway"] == gw
    # failover's next_attempt takes one too, and its answer's attempt shows it
    a2 = new_id("a")
    b = answer(rt.failover(rid, a1, "replica_exited",
                           next_attempt={"attempt_id": a2, "gateway": "gw-8"}), "retry_prefill")
    assert b["attempt"]["gateway"] == "gw-8"
    rows = rt.sql("SELECT attempt_id, gateway FROM attempts WHERE tenant = '%s' AND"
                  " request_id = '%s' ORDER BY epoch" % (rt.tenant, rid))
    assert rows == [[a1, gw], [a2, "gw-8"]]
    v = view(rt, rid)
    assert [(a["attempt_id"], a["gateway"]) for a in v["attempts"]] == [(a1, gw), (a2, "gw-8")]


def test_an_attempt_without_gateway_shows_null(rt):
    rid, a1, b = rt.started_with_body(replica="gpu-1")
    assert b["gateway"] is None
    assert view(rt, rid)["attempts"][0]["gateway"] is None
    assert "gateway" not in created_detail(rt, rid, a1)


@pytest.mark.parametrize("first,again", [
    ({"gateway": "gw-1"}, {"gateway": "gw-2"}),
    ({"gateway": "gw-1"}, {}),
    ({}, {"gateway": "gw-1"}),
])
def test_same_attempt_id_with_another_gateway_is_request_mismatch(rt, first, again):
    rid, aid = rt.started(replica="gpu-1", **first)
    err = assert_error(rt.create(rid, aid, replica="gpu-1", **again), 422, "request_mismatch")
    assert "field" not in err  # the body differs, as for another replica
    assert rt.attempts(rid) == {aid: (1, "live")}


# --- validation -----------------------------------------------------------------

BAD = [
    ("gateway", ""), ("gateway", "gw/1"), ("gateway", "gw 1"), ("gateway", "g" * 129),
    ("gateway", 7), ("gateway", ["gw"]),
    ("identity", "model=x"), ("identity", ["model"]), ("identity", 1), ("identity", True),
    ("identity", {"model": "m", "pad": "x" * 4096}),
    ("identity", {"model": "nul\u0000inside"}),  # jsonb, the history's, holds no NUL
    ("identity", {"nul\u0000key": "m"}),
    ("input_sha256", SHA_A.upper()), ("input_sha256", SHA_A[:63]), ("input_sha256", SHA_A + "0"),
    ("input_sha256", "g" * 64), ("input_sha256", 5), ("input_sha256", {"sha": SHA_A}),
]


@pytest.mark.parametrize("field,value", BAD)
def test_post_attempts_refuses_a_bad_field(rt, field, value):
    rid = new_id("r")
    r = rt.post("/v1/requests/%s/attempts" % rid, {"attempt_id": new_id("a"), field: value})
    assert_error(r, 400, "invalid_field", field=field)
    assert rt.request(rid) is None


@pytest.mark.parametrize("field,value", BAD)
def test_next_attempt_refuses_a_bad_field(rt, field, value):
    rid, a1 = rt.started()
    r = rt.failover(rid, a1, "replica_exited",
                    next_attempt={"attempt_id": new_id("a"), field: value})
    assert_error(r, 400, "invalid_field", field=field)
    assert rt.attempts(rid) == {a1: (1, "live")} and rt.recorded(rid) == 0


def test_identity_of_4096_bytes_is_taken_and_one_more_is_not(rt):
    base = {"model": "m", "pad": ""}
    room = 4096 - len(json.dumps(base, separators=(",", ":")))
    ok = {"model": "m", "pad": "x" * room}
    text = json.dumps(ok, separators=(",", ":"))
    assert len(text) == 4096
    rid = new_id("r")
    r = rt.post("/v1/requests/%s/attempts" % rid, raw=(
        '{"attempt_id": "a1", "identity": %s}' % text).encode())
    assert r.status == 201, r
    over = text[:-2] + 'x"}'
    r = rt.post("/v1/requests/%s/attempts" % new_id("r"), raw=(
        '{"attempt_id": "a1", "identity": %s}' % over).encode())
    assert_error(r, 400, "invalid_field", field="identity")


# --- identity -------------------------------------------------------------------


def test_identity_is_recorded_in_the_creation_event_only(rt):
    identity = {"model": "meta-llama/Llama-3.1-8B-Instruct", "weights_revision": "0e9e39f",
                "quantization": "fp8", "tokenizer": "sha256:41aa", "adapters": [],
                "kv_cache_dtype": None, "n": 12345678901234567890}
    raw = json.dumps(identity)
    rid = new_id("r")
    r = rt.post("/v1/requests/%s/attempts" % rid,
                raw=('{"attempt_id": "a1", "identity": %s}' % raw).encode())
    assert r.status == 201, r
    assert "identity" not in r.json
    detail = created_detail(rt, rid, "a1")
    assert detail["identity"] == identity  # every value as sent, big numbers too
    v = view(rt, rid)
    assert "identity" not in v["attempts"][0]
    assert [e["detail"]["identity"] for e in v["events"] if e["type"] == "attempt_created"] \
        == [identity]
    # a rerun's identity goes with its own creation event
    other = {"model": "meta-llama/Llama-3.1-8B-Instruct", "quantization": "fp8"}
    answer(rt.failover(rid, "a1", "replica_exited",
                       next_attempt={"attempt_id": "a2", "identity": other}), "retry_prefill")
    assert created_detail(rt, rid, "a2")["identity"] == other


# --- input_sha256 ---------------------------------------------------------------


def test_the_first_attempt_fixes_input_sha256_and_the_request_shows_it(rt):
    rid, a1, b = rt.started_with_body(input_sha256=SHA_A)
    assert b["request"]["input_sha256"] == SHA_A
    assert view(rt, rid)["request"]["input_sha256"] == SHA_A
    assert created_detail(rt, rid, a1)["input_sha256"] == SHA_A
    rt.failed(rid, a1)
    # the same input again is welcome, and so is an older client that names none
    a2 = new_id("a")
    r = rt.create(rid, a2, input_sha256=SHA_A)
    assert r.status == 201, r
    rt.failed(rid, a2)
    rid2, b1 = rt.started(max_attempts=3)
    rt.failed(rid2, b1)
    assert rt.create(rid2, new_id("a")).status == 201
    assert view(rt, rid2)["request"]["input_sha256"] is None


def test_a_later_attempt_with_another_input_is_request_mismatch(rt):
    rid, a1 = rt.started(input_sha256=SHA_A)
    rt.failed(rid, a1)
    before = rt.events(rid)
    err = assert_error(rt.create(rid, new_id("a"), input_sha256=SHA_B), 422, "request_mismatch",
                       field="input_sha256")
    assert err["expected_input_sha256"] == SHA_A and err["got_input_sha256"] == SHA_B
    assert list(rt.attempts(rid)) == [a1]
    assert view(rt, rid)["request"]["input_sha256"] == SHA_A
    refused = [d for t, _, _, d in rt.events(rid)[len(before):]]
    assert [d["code"] for d in refused] == ["request_mismatch"]


def test_input_sha256_is_fixed_by_the_first_attempt_that_gives_one(rt):
    rid, a1 = rt.started(max_attempts=3)
    assert view(rt, rid)["request"]["input_sha256"] is None
    rt.failed(rid, a1)
    a2 = new_id("a")
    r = rt.create(rid, a2, input_sha256=SHA_B)
    assert r.status == 201 and r.json["request"]["input_sha256"] == SHA_B, r
    rt.failed(rid, a2)
    assert_error(rt.create(rid, new_id("a"), input_sha256=SHA_A), 422, "request_mismatch",
                 field="input_sha256")


def test_a_repeat_of_an_attempt_neither_fixes_nor_escapes_input_sha256(rt):
    rid, a1 = rt.started(replica="gpu-1")
    # the attempt was made without one: its repeat with one is the same attempt, and fixes nothing
    r = rt.create(rid, a1, replica="gpu-1", input_sha256=SHA_A)
    assert r.status == 200 and r.json["request"]["input_sha256"] is None, r
    rid, a1 = rt.started(replica="gpu-1", input_sha256=SHA_A)
    assert rt.create(rid, a1, replica="gpu-1", input_sha256=SHA_A).status == 200
    assert rt.create(rid, a1, replica="gpu-1").status == 200
    err = assert_error(rt.create(rid, a1, replica="gpu-1", input_sha256=SHA_B), 422,
                       "request_mismatch", field="input_sha256")
    assert err["expected_input_sha256"] == SHA_A


def test_input_mismatch_is_row_2_before_first_delta_sent_and_closed(rt):
    rid, a1 = rt.started(input_sha256=SHA_A)
    assert rt.deliver(rid, a1, 2).status == 200
    assert_error(rt.create(rid, new_id("a"), input_sha256=SHA_B), 422, "request_mismatch",
                 field="input_sha256")
    assert_error(rt.create(rid, new_id("a"), input_sha256=SHA_A), 409, "first_delta_sent")
    rid, a1 = rt.started(input_sha256=SHA_A)
    assert rt.finish(rid, a1, "completed").status == 200
    assert_error(rt.create(rid, new_id("a"), input_sha256=SHA_B), 422, "request_mismatch",
                 field="input_sha256")
    # and before the budget
    rid, a1 = rt.started(input_sha256=SHA_A, max_attempts=1)
    rt.failed(rid, a1)
    assert_error(rt.create(rid, new_id("a"), input_sha256=SHA_B), 422, "request_mismatch",
                 field="input_sha256")


def test_next_attempt_with_another_input_is_request_mismatch_and_moves_nothing(rt):
    rid, a1 = rt.started(input_sha256=SHA_A)
    r = rt.failover(rid, a1, "replica_exited",
                    next_attempt={"attempt_id": new_id("a"), "input_sha256": SHA_B})
    err = assert_error(r, 422, "request_mismatch", field="input_sha256")
    assert err["expected_input_sha256"] == SHA_A and err["got_input_sha256"] == SHA_B
    assert rt.attempts(rid) == {a1: (1, "live")}
    assert rt.recorded(rid) == 0 and rt.decisions(rid) == []
    # the same input, or none, reruns
    a2 = new_id("a")
    b = answer(rt.failover(rid, a1, "replica_exited",
                           next_attempt={"attempt_id": a2, "input_sha256": SHA_A}),
               "retry_prefill")
    assert b["attempt"]["request"]["input_sha256"] == SHA_A


def test_next_attempt_fixes_the_input_of_a_request_without_one(rt):
    rid, a1 = rt.started()
    b = answer(rt.failover(rid, a1, "pod_lost",
                           next_attempt={"attempt_id": new_id("a"), "input_sha256": SHA_B}),
               "retry_prefill")
    assert b["attempt"]["request"]["input_sha256"] == SHA_B
    assert view(rt, rid)["request"]["input_sha256"] == SHA_B


# --- settled_tool_calls -----------------------------------------------------------


def test_created_and_repeated_attempts_carry_the_settled_calls(rt):
    rid, a1, b = rt.started_with_body(max_attempts=3)
    assert "settled_tool_calls" not in b  # none settled yet
    c1, t1 = rt.claimed(rid, a1, cid="call_01", tool="mail", args={"to": "a"})
    assert rt.complete(rid, c1, t1, result={"id": 1}).status == 200
    c2, t2 = rt.claimed(rid, a1, cid="call_02", tool="charge", args={"n": 1})
    assert rt.complete(rid, c2, t2, outcome="failed", result={"e": 1}).status == 200
    c3, t3 = rt.claimed(rid, a1, cid="call_03", tool="mail")
    assert rt.call(rid, c3, "release", {"fencing_token": t3}).status == 200
    rt.failed(rid, a1)
    a2 = new_id("a")
    r = rt.create(rid, a2, gateway="gw-1")
    assert r.status == 201, r
    want = [
        {"tool_call_id": "call_01", "tool": "mail",
         "args_sha256": hashlib.sha256(b'{"to":"a"}').hexdigest(), "outcome": "succeeded"},
        {"tool_call_id": "call_02", "tool": "charge",
         "args_sha256": hashlib.sha256(b'{"n":1}').hexdigest(), "outcome": "failed"},
    ]
    assert r.json["settled_tool_calls"] == want
    again = rt.create(rid, a2, gateway="gw-1")
    assert again.status == 200, again
    assert again.json["settled_tool_calls"] == want
    # failover's shape, from the same rows
    b = answer(rt.failover(rid, a2, "replica_exited", next_attempt={"attempt_id": new_id("a")}),
               "retry_prefill")
    assert b["settled_tool_calls"] == want
