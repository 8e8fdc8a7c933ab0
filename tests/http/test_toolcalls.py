"""The tool-call endpoints over HTTP: claim (every row of the claim table
that can be provoked without attempts, and their order), renew, complete,
release, resolve, read one and list, with the rows and events each leaves
in the database.

Contract: the API contract ("Tool calls"); decisions where it is silent:
docs/api.md ("Tool calls", "Conventions").
"""

import hashlib
import json
import math
import re
import time

import pytest

from conftest import claim_id, new_id
from http_helpers import (TS_RE, Router, assert_error, claim, fingerprint, key, path,
                          result_text_of, leases_as_asked)

HEX64_RE = re.compile(r"^[0-9a-f]{64}$")

SHORT_LEASE_MS = 150
PAST_SHORT_LEASE_S = 0.3  # sleep just past SHORT_LEASE_MS, with a margin


def act(service, rid, cid, action, body=None, token=None, raw=None):
    if token is None:
        token = service.token("admin" if action == "resolve" else "agent")
    return service.ledgerd.post(path(rid, cid, action), {} if body is None else body,
                                token=token, raw=raw)


def complete(service, rid, cid, token_, outcome="succeeded", result=None, **kw):
    body = {"fencing_token": token_, "outcome": outcome}
    if result is not None:
        body["result"] = result
    body.update(kw)
    return act(service, rid, cid, "complete", body)


def release(service, rid, cid, token_, reason=None):
    body = {"fencing_token": token_}
    if reason is not None:
        body["reason"] = reason
    return act(service, rid, cid, "release", body)


def renew(service, rid, cid, token_, lease_ms=None):
    body = {"fencing_token": token_}
    if lease_ms is not None:
        body["lease_ms"] = lease_ms
    return act(service, rid, cid, "renew", body)


def resolve(service, rid, cid, resolution, result=None, note=None):
    body = {"resolution": resolution}
    if result is not None:
        body["result"] = result
    if note is not None:
        body["note"] = note
    return act(service, rid, cid, "resolve", body)


def get(service, rid, cid, token=None):
    return service.ledgerd.get(path(rid, cid), token=token or service.token("reviewer"))


def claimed(service, **fields):
    """Claims a fresh key; returns (rid, cid, claim_id, fencing_token)."""
    rid, cid = key()
    body = {"claim_id": claim_id()}
    body.update(fields)
    r = claim(service, rid, cid, body)
    assert r.status == 201, r
    return rid, cid, body["claim_id"], r.json["fencing_token"]


def expired(service, **fields):
    """A fresh key whose holder's lease ran out: (rid, cid, claim_id, token)."""
    fields.setdefault("lease_ms", SHORT_LEASE_MS)
    k = claimed(service, **fields)
    time.sleep(PAST_SHORT_LEASE_S)
    return k


def events(service, rid, tenant="t1"):
    """The request's events in order: [(type, tool_call_id, detail dict)]."""
    rows = service.sql("SELECT type, coalesce(tool_call_id, ''), detail::text FROM events"
                       " WHERE tenant = '%s' AND request_id = '%s' ORDER BY seq"
                       % (tenant, rid))
    return [(t, c, json.loads(d)) for t, c, d in rows]


def event_types(service, rid, tenant="t1"):
    return [t for t, _, _ in events(service, rid, tenant)]


def count(service, table, rid, tenant="t1"):
    return int(service.sql("SELECT count(*) FROM %s WHERE tenant = '%s' AND request_id = '%s'"
                           % (table, tenant, rid))[0][0])


def tombstone(service, rid, cid, args_sha256=None, outcome="succeeded", tenant="t1"):
    """A tombstone as retention leaves it, for a key without a tool_calls row."""
    service.sql("INSERT INTO tool_call_tombstones (tenant, request_id, tool_call_id,"
                " args_sha256, outcome, completed_at, expires_at) VALUES"
                " ('%s', '%s', '%s', %s, '%s', now() - interval '30 days',"
                " now() + interval '60 days')"
                % (tenant, rid, cid, "NULL" if args_sha256 is None else "'%s'" % args_sha256,
                   outcome))


# --- claim: new, same holder, other holders ---------------------------------


def test_claim_new_key_is_201_with_key_token_and_default_lease(service):
    rid, cid = key()
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "send_email"})
    assert r.status == 201, r
    b = r.json
    assert b["status"] == "claimed"
    assert b["idempotency_key"] == "%s:%s" % (rid, cid)
    assert b["fencing_token"] == 1
    assert leases_as_asked(b["lease_ms"], 30000)
    assert r.header("Idempotent-Replayed") is None


def test_claim_echoes_the_lease_asked_for(service):
    rid, cid = key()
    r = claim(service, rid, cid, {"claim_id": claim_id(), "lease_ms": 4321})
    assert r.status == 201, r
    assert leases_as_asked(r.json["lease_ms"], 4321)
    left = get(service, rid, cid).json["lease_ms_left"]
    assert 0 < left <= 4321


def test_claim_creates_its_request_open_without_attempts(service):
    rid, cid = key()
    assert count(service, "requests", rid) == 0
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 201, r
    rows = service.sql("SELECT status, attempt_count, first_delta_sent FROM requests"
                       " WHERE tenant = 't1' AND request_id = '%s'" % rid)
    assert rows == [["open", "0", "f"]]
    assert count(service, "tool_calls", rid) == 1


def test_claim_appends_a_claimed_event(service):
    rid, cid, _, tok = claimed(service, tool="t", owner="pod-7", args={"a": 1})
    evs = events(service, rid)
    assert len(evs) == 1, evs
    typ, ecid, detail = evs[0]
    assert typ == "claimed" and ecid == cid
    assert detail["fencing_token"] == tok
    assert detail.get("args_sha256") == fingerprint({"a": 1})


def test_second_call_of_the_same_request_reuses_the_request(service):
    rid, cid = key()
    assert claim(service, rid, cid, {"claim_id": claim_id()}).status == 201
    r = claim(service, rid, "other-call", {"claim_id": claim_id()})
    assert r.status == 201, r
    assert r.json["fencing_token"] == 1
    assert count(service, "requests", rid) == 1
    assert count(service, "tool_calls", rid) == 2


def test_same_claim_id_repeat_gets_the_same_token_with_200(service):
    rid, cid = key()
    body = {"claim_id": claim_id(), "tool": "t", "args": {"x": 1}, "lease_ms": 20000}
    r1 = claim(service, rid, cid, body)
    assert r1.status == 201, r1
    r2 = claim(service, rid, cid, body)
    assert r2.status == 200, r2
    assert r2.json["status"] == "claimed"
    assert r2.json["fencing_token"] == r1.json["fencing_token"]
    assert r2.json["idempotency_key"] == "%s:%s" % (rid, cid)
    assert 0 < r2.json["lease_ms"] <= 20000
    # It changed nothing: one holder, one claimed event.
    assert event_types(service, rid) == ["claimed"]
    assert get(service, rid, cid).json["fencing_token"] == r1.json["fencing_token"]


def test_anonymous_repeat_is_in_progress_with_retry_after(service):
    rid, cid = key()
    r1 = claim(service, rid, cid, {"owner": "worker@pod-1", "lease_ms": 30000})
    assert r1.status == 201, r1
    r2 = claim(service, rid, cid, {"owner": "worker@pod-1", "lease_ms": 30000})
    err = assert_error(r2, 409, "in_progress")
    assert 0 < err["retry_after_ms"] <= 30000
    assert r2.header("Retry-After") == str(math.ceil(err["retry_after_ms"] / 1000))
    assert err["holder"] == {"attempt_id": None, "owner": "worker@pod-1"}


def test_other_claim_id_is_in_progress_and_never_sees_the_holders_claim_id(service):
    rid, cid = key()
    holder = claim_id()
    assert claim(service, rid, cid, {"claim_id": holder, "owner": "a@pod"}).status == 201
    r = claim(service, rid, cid, {"claim_id": claim_id(), "owner": "b@pod"})
    err = assert_error(r, 409, "in_progress")
    assert "claim_id" not in err["holder"]
    assert err["holder"]["owner"] == "a@pod"
    assert holder not in r.body
    assert r.header("Retry-After") is not None


def test_retry_after_header_is_whole_seconds_rounded_up(service):
    rid, cid = key()
    assert claim(service, rid, cid, {"claim_id": claim_id(), "lease_ms": 1900}).status == 201
    r = claim(service, rid, cid, {"claim_id": claim_id(), "lease_ms": 1900})
    err = assert_error(r, 409, "in_progress")
    assert 1000 < err["retry_after_ms"] <= 1900, err
    assert r.header("Retry-After") == "2"


def test_in_progress_refusal_is_an_event_and_changes_nothing(service):
    rid, cid, cl, tok = claimed(service)
    assert claim(service, rid, cid, {"claim_id": claim_id()}).status == 409
    evs = events(service, rid)
    assert [e[0] for e in evs] == ["claimed", "refused"]
    assert evs[1][2]["code"] == "in_progress"
    g = get(service, rid, cid).json
    assert g["fencing_token"] == tok and g["holder"] == {"attempt_id": None, "owner": None}


def test_lease_run_out_is_outcome_unknown(service):
    rid, cid, cl, tok = expired(service, tool="charge")
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "charge"})
    assert_error(r, 409, "outcome_unknown")
    # Not even the old holder holds it any more.
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "charge"})
    assert_error(r, 409, "outcome_unknown")
    g = get(service, rid, cid).json
    assert g["state"] == "unknown"
    assert g["lease_ms_left"] == 0
    assert g["fencing_token"] == tok
    assert "claim_id" not in g["holder"] and cl not in get(service, rid, cid).body
    evs = events(service, rid)
    assert [e[0] for e in evs] == ["claimed", "refused", "refused"]
    assert evs[1][2]["code"] == "outcome_unknown"


def test_tool_dedupes_reclaim_after_lease_gets_a_higher_token(service):
    rid, cid, _, tok = expired(service, tool="t", tool_dedupes=True)
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "t", "tool_dedupes": True})
    assert r.status == 201, r
    assert r.json["status"] == "claimed"
    assert r.json["fencing_token"] > tok
    g = get(service, rid, cid).json
    assert g["state"] == "in_progress" and g["fencing_token"] == r.json["fencing_token"]
    assert event_types(service, rid) == ["claimed", "claimed"]


def test_released_key_is_claimed_again_with_a_higher_token(service):
    rid, cid, _, tok = claimed(service, tool="t")
    assert release(service, rid, cid, tok).status == 200
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "t"})
    assert r.status == 201, r
    assert r.json["fencing_token"] == tok + 1


# --- claim: args_mismatch ---------------------------------------------------


def test_tool_dedupes_is_fixed_by_the_first_claim(service):
    rid, cid, cl, _ = claimed(service, tool="t")  # tool_dedupes false by default
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t", "tool_dedupes": True})
    err = assert_error(r, 422, "args_mismatch")
    assert err["field"] == "tool_dedupes"

    rid, cid, cl, _ = claimed(service, tool="t", tool_dedupes=True)
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t"})
    err = assert_error(r, 422, "args_mismatch")
    assert err["field"] == "tool_dedupes"


def test_tool_dedupes_mismatch_refused_even_after_lease_ran_out(service):
    rid, cid, _, _ = expired(service, tool="t")
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "t", "tool_dedupes": True})
    err = assert_error(r, 422, "args_mismatch")
    assert err["field"] == "tool_dedupes"


def test_different_tool_is_args_mismatch(service):
    rid, cid, cl, _ = claimed(service, tool="send_email", args={"to": "a"})
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "send_sms", "args": {"to": "a"}})
    err = assert_error(r, 422, "args_mismatch")
    assert err["field"] == "tool"
    # An omitted tool is "no tool", which differs too.
    r = claim(service, rid, cid, {"claim_id": cl, "args": {"to": "a"}})
    assert assert_error(r, 422, "args_mismatch")["field"] == "tool"


def test_args_key_order_and_whitespace_do_not_change_the_fingerprint(service):
    rid, cid = key()
    cl = claim_id()
    raw1 = ('{"claim_id": "%s", "tool": "t", "args": {"b": 1, "a": [1, 2, {"y": 3, "x": 4}]}}'
            % cl)
    raw2 = ('{ "claim_id" : "%s" ,\n\t"tool":"t",  "args" :{ "a" :[ 1,2 ,{"x":4,"y" : 3} ],'
            '"b":1 } }' % cl)
    r1 = claim(service, rid, cid, raw=raw1.encode())
    assert r1.status == 201, r1
    r2 = claim(service, rid, cid, raw=raw2.encode())
    assert r2.status == 200, r2
    assert r2.json["fencing_token"] == r1.json["fencing_token"]
    expected = fingerprint({"b": 1, "a": [1, 2, {"y": 3, "x": 4}]})
    assert get(service, rid, cid).json["args_sha256"] == expected


def test_different_args_is_args_mismatch_with_both_fingerprints(service):
    first, second = {"amount": 100, "to": "acct-1"}, {"amount": 200, "to": "acct-1"}
    rid, cid, cl, _ = claimed(service, tool="pay", args=first)
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "pay", "args": second})
    err = assert_error(r, 422, "args_mismatch")
    assert err["field"] == "args"
    assert err["expected_args_sha256"] == fingerprint(first)
    assert err["got_args_sha256"] == fingerprint(second)
    assert HEX64_RE.match(err["got_args_sha256"])
    # Refused, recorded, and nothing changed.
    evs = events(service, rid)
    assert [e[0] for e in evs] == ["claimed", "refused"]
    assert evs[1][2]["code"] == "args_mismatch"
    assert get(service, rid, cid).json["args_sha256"] == fingerprint(first)


def test_omitted_args_differ_from_given_args(service):
    rid, cid, cl, _ = claimed(service, tool="t")
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t", "args": {"a": 1}})
    err = assert_error(r, 422, "args_mismatch")
    assert err["field"] == "args"
    assert err["expected_args_sha256"] is None
    assert err["got_args_sha256"] == fingerprint({"a": 1})


def test_args_sha256_given_directly_stands_for_args(service):
    args = {"id": 42, "op": "refund"}
    rid, cid = key()
    cl = claim_id()
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t", "args_sha256": fingerprint(args)})
    assert r.status == 201, r
    assert get(service, rid, cid).json["args_sha256"] == fingerprint(args)
    # The same call with args instead of the fingerprint is the same holder.
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t", "args": args})
    assert r.status == 200, r
    # Another fingerprint is another call.
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t", "args_sha256": "0" * 64})
    err = assert_error(r, 422, "args_mismatch")
    assert err["expected_args_sha256"] == fingerprint(args)
    assert err["got_args_sha256"] == "0" * 64


def test_args_with_a_mismatching_args_sha256_is_invalid_field(service):
    rid, cid = key()
    r = claim(service, rid, cid, {"claim_id": claim_id(), "args": {"a": 1},
                                  "args_sha256": fingerprint({"a": 2})})
    err = assert_error(r, 400, "invalid_field")
    assert err["field"] == "args_sha256"
    assert count(service, "requests", rid) == 0
    assert count(service, "tool_calls", rid) == 0
    # Both, agreeing, are fine.
    r = claim(service, rid, cid, {"claim_id": claim_id(), "args": {"a": 1},
                                  "args_sha256": fingerprint({"a": 1})})
    assert r.status == 201, r


# Numbers one double cannot tell apart: the fingerprint keeps their exact
# digits (api.md, "Fingerprints"), so they are different calls.
NEIGHBOURS = [
    ("1234567890123456789", "1234567890123456790"),  # two order ids, one double
    ("9007199254740993", "9007199254740992"),  # 2^53 + 1 and 2^53
    ("0.30000000000000000001", "0.30000000000000000002"),  # past the 17th digit
    ("1e-400", "0"),  # an underflow is not zero
]


def sha_of_text(text):
    return hashlib.sha256(text.encode()).hexdigest()


def number_claim(service, rid, cid, number, **fields):
    """A claim whose args are {"order_id": <number>} written as the text @number."""
    body = {"claim_id": claim_id(), "tool": "charge"}
    body.update(fields)
    raw = json.dumps(body)[:-1] + ', "args": {"order_id": %s}}' % number
    return claim(service, rid, cid, raw=raw.encode())


@pytest.mark.parametrize("first,second", NEIGHBOURS)
def test_numbers_one_double_holds_are_different_calls(service, first, second):
    rid, cid = key()
    r = number_claim(service, rid, cid, first)
    assert r.status == 201, r
    assert complete(service, rid, cid, r.json["fencing_token"], result={"ok": 1}).status == 200
    # Never the first call's result: the second one is another call.
    r = number_claim(service, rid, cid, second)
    err = assert_error(r, 422, "args_mismatch")
    assert r.header("Idempotent-Replayed") is None
    assert err["field"] == "args"
    assert err["expected_args_sha256"] == sha_of_text('{"order_id":%s}' % first)
    assert err["got_args_sha256"] == sha_of_text('{"order_id":%s}' % second)
    assert err["expected_args_sha256"] != err["got_args_sha256"]
    # The first spelling again is the first call, replayed.
    r = number_claim(service, rid, cid, first)
    assert r.status == 200 and r.json["replayed"] is True, r


def test_big_order_ids_are_fingerprinted_by_their_digits(service):
    rid, cid, _, _ = claimed(service, tool="charge", args={"order_id": 1234567890123456789})
    assert get(service, rid, cid).json["args_sha256"] == fingerprint(
        {"order_id": 1234567890123456789})
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "charge",
                                  "args": {"order_id": 1234567890123456790}})
    err = assert_error(r, 422, "args_mismatch")
    assert err["got_args_sha256"] == fingerprint({"order_id": 1234567890123456790})


@pytest.mark.parametrize("settle", ["complete", "release"])
def test_rerun_with_the_neighbouring_big_int_is_a_divergence(service, settle):
    rt = Router(service)
    rid, a1 = rt.started()
    cid, tok = rt.claimed(rid, a1, "call_01", tool="charge",
                          args={"order_id": 1234567890123456789})
    if settle == "complete":
        assert rt.complete(rid, cid, tok, result={"charged": True}).status == 200
    else:
        assert rt.call(rid, cid, "release", {"fencing_token": tok}).status == 200
    a2 = rt.failed_over(rid, a1)
    # The rerun's call under the same ordinal shifted to the next order id.
    r = rt.claim(rid, cid, attempt_id=a2, tool="charge", args={"order_id": 1234567890123456790})
    err = assert_error(r, 422, "args_mismatch")
    assert r.header("Idempotent-Replayed") is None
    assert err["expected_args_sha256"] == fingerprint({"order_id": 1234567890123456789})
    assert err["got_args_sha256"] == fingerprint({"order_id": 1234567890123456790})
    assert rt.attempts(rid) == {a1: (1, "dead"), a2: (2, "cancel_requested")}
    q = rt.request(rid)
    assert q["status"] == "failed"
    assert q["client_error"]["error"]["code"] == "tool_call_divergence"
    assert_error(rt.create(rid, new_id("a")), 409, "request_closed")


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1.7976931348623159e308",
                                    "1e999999999999999999"])
def test_args_number_beyond_the_double_range_is_invalid_json(service, number):
    rid, cid = key()
    r = number_claim(service, rid, cid, number)
    assert_error(r, 400, "invalid_json")
    assert count(service, "requests", rid) == 0
    assert count(service, "tool_calls", rid) == 0


@pytest.mark.parametrize("number,canonical", [
    ("1.7976931348623157e308", "1.7976931348623157e+308"),  # the largest double
    ("-1e-400", "-1e-400"),  # below the smallest: in range, its digits kept
    ("0e999999999999999999", "0"),
])
def test_args_numbers_at_the_edges_of_the_range_are_kept(service, number, canonical):
    rid, cid = key()
    r = number_claim(service, rid, cid, number, store_args=True)
    assert r.status == 201, r
    g = get(service, rid, cid).json
    assert g["args_sha256"] == sha_of_text('{"order_id":%s}' % canonical)


def test_args_mismatch_takes_precedence_over_replay(service):
    rid, cid, cl, tok = claimed(service, tool="t", args={"a": 1})
    assert complete(service, rid, cid, tok, result={"ok": True}).status == 200
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t", "args": {"a": 2}})
    assert_error(r, 422, "args_mismatch")
    assert r.header("Idempotent-Replayed") is None


def test_args_mismatch_takes_precedence_over_in_progress_and_same_holder(service):
    rid, cid, cl, _ = claimed(service, tool="t", args={"a": 1})
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "t", "args": {"a": 2}})
    assert_error(r, 422, "args_mismatch")
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t", "args": {"a": 2}})
    assert_error(r, 422, "args_mismatch")


def test_args_mismatch_takes_precedence_over_outcome_unknown(service):
    rid, cid, _, _ = expired(service, tool="t", args={"a": 1})
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "t", "args": {"a": 9}})
    assert_error(r, 422, "args_mismatch")


def test_store_args_keeps_args_verbatim_for_get(service):
    rid, cid = key()
    raw_args = '{"b" : [1,  2], "a":"x"}'
    raw = ('{"claim_id": "%s", "store_args": true, "args": %s}' % (claim_id(), raw_args))
    assert claim(service, rid, cid, raw=raw.encode()).status == 201
    g = get(service, rid, cid)
    assert g.status == 200, g
    assert g.json["args"] == {"b": [1, 2], "a": "x"}
    assert re.search(r'"args"\s*:\s*' + re.escape(raw_args), g.body), g.body
    # Without store_args only the fingerprint is kept.
    rid2, cid2, _, _ = claimed(service, args={"a": "x"})
    g2 = get(service, rid2, cid2).json
    assert "args" not in g2
    assert g2["args_sha256"] == fingerprint({"a": "x"})
    assert service.sql("SELECT args IS NULL FROM tool_calls WHERE tenant = 't1'"
                       " AND request_id = '%s'" % rid2) == [["t"]]


# --- claim: replay ----------------------------------------------------------


def test_completed_call_is_replayed_to_every_claim(service):
    rid, cid, cl, tok = claimed(service, tool="t", args={"a": 1})
    c = complete(service, rid, cid, tok, result={"message_id": "m-1"})
    assert c.status == 200, c
    for who in (cl, claim_id(), None):
        body = {"tool": "t", "args": {"a": 1}}
        if who:
            body["claim_id"] = who
        r = claim(service, rid, cid, body)
        assert r.status == 200, r
        b = r.json
        assert b["status"] == "completed"
        assert b["outcome"] == "succeeded"
        assert b["result"] == {"message_id": "m-1"}
        assert b["replayed"] is True
        assert b["idempotency_key"] == "%s:%s" % (rid, cid)
        assert b["completed_at"] == c.json["completed_at"]
        assert TS_RE.match(b["completed_at"])
        assert r.header("Idempotent-Replayed") == "true"
    # A replay writes nothing.
    assert event_types(service, rid) == ["claimed", "completed"]


def test_replay_takes_precedence_over_in_progress(service):
    # An anonymous repeat of a held key is in_progress; once the call is
    # completed the same repeat is a replay, never in_progress.
    rid, cid = key()
    r = claim(service, rid, cid, {"tool": "t"})
    assert r.status == 201, r
    assert_error(claim(service, rid, cid, {"tool": "t"}), 409, "in_progress")
    assert complete(service, rid, cid, r.json["fencing_token"], result=[1]).status == 200
    r = claim(service, rid, cid, {"tool": "t"})
    assert r.status == 200, r
    assert r.json["status"] == "completed" and r.json["replayed"] is True


def test_failed_final_outcome_is_replayed(service):
    rid, cid, cl, tok = claimed(service)
    r = complete(service, rid, cid, tok, outcome="failed", result={"error": "card_declined"})
    assert r.status == 200, r
    assert r.json["status"] == "completed" and r.json["outcome"] == "failed"
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 200, r
    assert r.json["outcome"] == "failed"
    assert r.json["result"] == {"error": "card_declined"}
    assert r.header("Idempotent-Replayed") == "true"


def test_result_is_stored_and_replayed_byte_for_byte(service):
    rid, cid, _, tok = claimed(service)
    result = (r'{ "z" :[1 ,[2,[3,{"\u00e9":"\ud83d\ude00 caf\u00E9"}]],[ ]],'
              r'"big":123456789012345678901234567890,  "huge":1e400,"neg":-0.0,'
              r'"esc":"a\/b\n\"q\"","small":1E-7 ,"t":true,"n":null}')
    raw = '{"fencing_token": %d,   "outcome":"succeeded",\n "result": %s }' % (tok, result)
    c = act(service, rid, cid, "complete", raw=raw.encode())
    assert c.status == 200, c
    assert result_text_of(c.body).startswith(result), c.body

    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 200, r
    assert r.header("Idempotent-Replayed") == "true"
    assert r.json["replayed"] is True
    assert result_text_of(r.body).startswith(result), r.body

    g = get(service, rid, cid)
    assert g.status == 200, g
    assert result_text_of(g.body).startswith(result), g.body

    stored = service.sql("SELECT result FROM tool_calls WHERE tenant = 't1'"
                         " AND request_id = '%s'" % rid)
    assert stored == [[result]]


def test_scalar_and_default_results_are_replayed(service):
    rid, cid, _, tok = claimed(service)
    raw = '{"fencing_token": %d, "outcome": "succeeded", "result": "done"}' % tok
    assert act(service, rid, cid, "complete", raw=raw.encode()).status == 200
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert result_text_of(r.body).startswith('"done"'), r.body

    rid, cid, _, tok = claimed(service)
    r = complete(service, rid, cid, tok)  # no result: null
    assert r.status == 200, r
    assert r.json["result"] is None
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 200 and r.json["result"] is None, r


# --- complete ---------------------------------------------------------------


def test_complete_by_the_holder_is_200_completed_with_an_event(service):
    rid, cid, _, tok = claimed(service)
    r = complete(service, rid, cid, tok, result={"ok": 1})
    assert r.status == 200, r
    b = r.json
    assert b["status"] == "completed"
    assert b["outcome"] == "succeeded"
    assert b["result"] == {"ok": 1}
    assert b["idempotency_key"] == "%s:%s" % (rid, cid)
    assert TS_RE.match(b["completed_at"])
    assert "late_completion" not in b or b["late_completion"] is False
    evs = events(service, rid)
    assert [e[0] for e in evs] == ["claimed", "completed"]
    assert evs[1][1] == cid
    g = get(service, rid, cid).json
    assert g["state"] == "succeeded" and g["holder"] is None and g["lease_ms_left"] == 0


def test_identical_completion_repeated_is_200_with_the_same_body(service):
    rid, cid, _, tok = claimed(service)
    raw = ('{"fencing_token": %d, "outcome": "succeeded", "result": {"id": "m-9", "n": [1, 2]}}'
           % tok).encode()
    r1 = act(service, rid, cid, "complete", raw=raw)
    assert r1.status == 200, r1
    r2 = act(service, rid, cid, "complete", raw=raw)
    assert r2.status == 200, r2
    assert r2.body == r1.body
    assert event_types(service, rid) == ["claimed", "completed"]


def test_conflicting_completion_is_already_completed_and_the_stored_one_stands(service):
    rid, cid, _, tok = claimed(service)
    r1 = complete(service, rid, cid, tok, result={"id": "first"})
    assert r1.status == 200, r1
    for body in ({"fencing_token": tok, "outcome": "succeeded", "result": {"id": "second"}},
                 {"fencing_token": tok, "outcome": "failed", "result": {"id": "first"}},
                 {"fencing_token": tok, "outcome": "failed", "retryable": True}):
        r = act(service, rid, cid, "complete", body)
        err = assert_error(r, 409, "already_completed")
        assert err["outcome"] == "succeeded"
        assert err["completed_at"] == r1.json["completed_at"]
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 200 and r.json["result"] == {"id": "first"}, r
    evs = events(service, rid)
    refused = [d for t, _, d in evs if t == "refused"]
    assert len(refused) == 3
    assert all(d["code"] == "already_completed" for d in refused), refused
    assert event_types(service, rid)[:2] == ["claimed", "completed"]


def test_same_result_with_other_bytes_is_a_different_completion(service):
    # "same token, outcome and result bytes": other spacing is other bytes.
    rid, cid, _, tok = claimed(service)
    raw1 = '{"fencing_token": %d, "outcome": "succeeded", "result": {"a":1}}' % tok
    raw2 = '{"fencing_token": %d, "outcome": "succeeded", "result": {"a": 1}}' % tok
    assert act(service, rid, cid, "complete", raw=raw1.encode()).status == 200
    assert_error(act(service, rid, cid, "complete", raw=raw2.encode()), 409,
                 "already_completed")


def test_retryable_failure_releases_the_key(service):
    rid, cid, _, tok = claimed(service)
    r = complete(service, rid, cid, tok, outcome="failed", retryable=True,
                 result={"error": "timeout"})
    assert r.status == 200, r
    assert r.json["status"] == "released"
    g = get(service, rid, cid).json
    assert g["state"] == "released" and g["holder"] is None
    assert "result" not in g and "outcome" not in g
    # The same retryable failure again: the same answer, nothing more.
    r2 = complete(service, rid, cid, tok, outcome="failed", retryable=True,
                  result={"error": "timeout"})
    assert r2.status == 200 and r2.json["status"] == "released", r2
    assert event_types(service, rid) == ["claimed", "released"]
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 201 and r.json["fencing_token"] == tok + 1, r


def test_late_completion_after_lease_ran_out_is_accepted(service):
    rid, cid, _, tok = expired(service)
    r = complete(service, rid, cid, tok, result={"id": "late"})
    assert r.status == 200, r
    assert r.json["status"] == "completed"
    assert r.json["late_completion"] is True
    assert r.json["result"] == {"id": "late"}
    assert "late_completion" in event_types(service, rid)
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 200 and r.json["result"] == {"id": "late"}, r


def test_late_completion_from_an_older_token_beats_the_newer_holder(service):
    rid, cid, _, old = expired(service, tool_dedupes=True)
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool_dedupes": True})
    assert r.status == 201, r
    new = r.json["fencing_token"]
    assert new > old
    r = complete(service, rid, cid, old, outcome="failed", result={"e": "x"})
    assert r.status == 200, r
    assert r.json["late_completion"] is True and r.json["outcome"] == "failed"
    evs = events(service, rid)
    late = [d for t, _, d in evs if t == "late_completion"]
    assert len(late) == 1, evs
    # The newer holder now finds it completed.
    assert_error(complete(service, rid, cid, new, result={"e": "y"}), 409, "already_completed")
    assert_error(release(service, rid, cid, new), 409, "stale_token")


def test_stale_retryable_failure_is_stale_token_and_changes_nothing(service):
    rid, cid, _, old = expired(service, tool_dedupes=True)
    cl2 = claim_id()
    r = claim(service, rid, cid, {"claim_id": cl2, "tool_dedupes": True})
    assert r.status == 201, r
    new = r.json["fencing_token"]
    lease_until = ("SELECT lease_until::text FROM tool_calls WHERE tenant = 't1'"
                   " AND request_id = '%s' AND tool_call_id = '%s'" % (rid, cid))
    before = service.sql(lease_until)
    r = complete(service, rid, cid, old, outcome="failed", retryable=True)
    assert_error(r, 409, "stale_token")
    after = get(service, rid, cid).json
    assert after["state"] == "in_progress"
    assert after["fencing_token"] == new
    assert cl2 not in get(service, rid, cid).body
    # The lease is the one the new claim took, to the microsecond: a stale
    # failure neither ends nor renews it.  (lease_ms_left, read twice, is
    # measured on two clocks and may differ by a millisecond either way.)
    assert service.sql(lease_until) == before
    assert count(service, "tool_calls", rid) == 1
    evs = events(service, rid)
    assert evs[-1][0] == "refused" and evs[-1][2]["code"] == "stale_token"


def test_retryable_failure_after_own_lease_ran_out_is_stale_token(service):
    rid, cid, _, tok = expired(service)
    assert_error(complete(service, rid, cid, tok, outcome="failed", retryable=True), 409,
                 "stale_token")
    assert get(service, rid, cid).json["state"] == "unknown"


def test_never_issued_token_is_stale_token(service):
    rid, cid, _, tok = claimed(service)
    for bad in (tok + 1, 99, 0):
        assert_error(complete(service, rid, cid, bad), 409, "stale_token")
        assert_error(release(service, rid, cid, bad), 409, "stale_token")
        assert_error(renew(service, rid, cid, bad), 409, "stale_token")
    g = get(service, rid, cid).json
    assert g["state"] == "in_progress" and g["fencing_token"] == tok
    assert complete(service, rid, cid, tok).status == 200


def test_never_claimed_key_is_404_for_complete_renew_release_and_resolve(service):
    rid, cid = key()
    assert_error(complete(service, rid, cid, 1), 404, "not_found")
    assert_error(renew(service, rid, cid, 1), 404, "not_found")
    assert_error(release(service, rid, cid, 1), 404, "not_found")
    assert_error(resolve(service, rid, cid, "succeeded"), 404, "not_found")
    assert_error(get(service, rid, cid), 404, "not_found")
    # Another call of an existing request is not found either.
    rid2, _, _, _ = claimed(service)
    assert_error(complete(service, rid2, "nope", 1), 404, "not_found")
    assert count(service, "requests", rid) == 0
    assert count(service, "events", rid) == 0


# --- release ----------------------------------------------------------------


def test_release_by_the_holder_and_its_repeat(service):
    rid, cid, _, tok = claimed(service)
    r = release(service, rid, cid, tok, reason="validation failed before sending")
    assert r.status == 200, r
    assert r.json == {"status": "released", "idempotency_key": "%s:%s" % (rid, cid),
                      "fencing_token": tok}
    r2 = release(service, rid, cid, tok, reason="validation failed before sending")
    assert r2.status == 200 and r2.json == r.json, r2
    evs = events(service, rid)
    assert [e[0] for e in evs] == ["claimed", "released"]
    assert evs[1][2].get("reason") == "validation failed before sending"
    assert get(service, rid, cid).json["state"] == "released"


def test_stale_release_is_stale_token(service):
    rid, cid, _, old = expired(service, tool_dedupes=True)
    # A holder whose lease ran out is no longer the holder.
    assert_error(release(service, rid, cid, old), 409, "stale_token")
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool_dedupes": True})
    assert r.status == 201, r
    new = r.json["fencing_token"]
    assert_error(release(service, rid, cid, old), 409, "stale_token")
    g = get(service, rid, cid).json
    assert g["state"] == "in_progress" and g["fencing_token"] == new
    refused = [d for t, _, d in events(service, rid) if t == "refused"]
    assert [d["code"] for d in refused] == ["stale_token", "stale_token"]


def test_release_after_completion_is_stale_token(service):
    rid, cid, _, tok = claimed(service)
    assert complete(service, rid, cid, tok).status == 200
    assert_error(release(service, rid, cid, tok), 409, "stale_token")
    assert get(service, rid, cid).json["state"] == "succeeded"


# --- renew ------------------------------------------------------------------


def test_renew_extends_the_lease(service):
    rid, cid, _, tok = claimed(service, lease_ms=300)
    r = renew(service, rid, cid, tok, lease_ms=3000)
    assert r.status == 200, r
    assert leases_as_asked(r.json["lease_ms"], 3000)
    assert r.json["fencing_token"] == tok
    time.sleep(0.45)  # past the first lease
    assert_error(claim(service, rid, cid, {"claim_id": claim_id()}), 409, "in_progress")
    g = get(service, rid, cid).json
    assert g["state"] == "in_progress"
    assert 1500 < g["lease_ms_left"] <= 3000


def test_renew_sets_now_plus_lease_never_adds(service):
    rid, cid, _, tok = claimed(service, lease_ms=600000)
    r = renew(service, rid, cid, tok, lease_ms=1000)
    assert r.status == 200, r
    assert 0 < get(service, rid, cid).json["lease_ms_left"] <= 1000


def test_renew_defaults_to_30_seconds(service):
    rid, cid, _, tok = claimed(service, lease_ms=1000)
    r = renew(service, rid, cid, tok)
    assert r.status == 200 and leases_as_asked(r.json["lease_ms"], 30000), r
    assert get(service, rid, cid).json["lease_ms_left"] > 20000


def test_renew_after_lease_ran_out_is_outcome_unknown(service):
    rid, cid, _, tok = expired(service)
    assert_error(renew(service, rid, cid, tok, lease_ms=30000), 409, "outcome_unknown")
    assert get(service, rid, cid).json["state"] == "unknown"
    refused = [d for t, _, d in events(service, rid) if t == "refused"]
    assert [d["code"] for d in refused] == ["outcome_unknown"]


def test_renew_by_a_former_holder_is_stale_token(service):
    rid, cid, _, tok = claimed(service)
    assert release(service, rid, cid, tok).status == 200
    assert_error(renew(service, rid, cid, tok), 409, "stale_token")
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 201, r
    assert_error(renew(service, rid, cid, tok), 409, "stale_token")
    assert renew(service, rid, cid, r.json["fencing_token"]).status == 200


def test_renew_of_a_completed_call_is_stale_token(service):
    rid, cid, _, tok = claimed(service)
    assert complete(service, rid, cid, tok).status == 200
    assert_error(renew(service, rid, cid, tok), 409, "stale_token")


# --- resolve ----------------------------------------------------------------


def test_resolve_unknown_as_succeeded_is_replayed(service):
    rid, cid, _, tok = expired(service)
    r = resolve(service, rid, cid, "succeeded", result={"id": "m-830"},
                note="found in the mail log")
    assert r.status == 200, r
    assert r.json["status"] == "completed" and r.json["outcome"] == "succeeded"
    assert r.json["result"] == {"id": "m-830"}
    g = get(service, rid, cid).json
    assert g["state"] == "succeeded" and g["fencing_token"] > tok
    c = claim(service, rid, cid, {"claim_id": claim_id()})
    assert c.status == 200 and c.json["result"] == {"id": "m-830"}, c
    assert c.header("Idempotent-Replayed") == "true"
    evs = events(service, rid)
    resolved = [d for t, _, d in evs if t == "resolved"]
    assert len(resolved) == 1 and resolved[0]["resolution"] == "succeeded", evs


def test_resolve_unknown_as_failed_stores_null_by_default(service):
    rid, cid, _, _ = expired(service)
    r = resolve(service, rid, cid, "failed")
    assert r.status == 200, r
    assert r.json["outcome"] == "failed" and r.json["result"] is None
    c = claim(service, rid, cid, {"claim_id": claim_id()})
    assert c.status == 200 and c.json["outcome"] == "failed" and c.json["result"] is None, c


def test_resolve_unknown_as_not_executed_makes_it_claimable(service):
    rid, cid, _, tok = expired(service)
    r = resolve(service, rid, cid, "not_executed", note="no charge in the processor")
    assert r.status == 200, r
    assert r.json["status"] == "released"
    assert r.json["fencing_token"] > tok
    assert get(service, rid, cid).json["state"] == "released"
    c = claim(service, rid, cid, {"claim_id": claim_id()})
    assert c.status == 201, c
    assert c.json["fencing_token"] > r.json["fencing_token"]
    assert "resolved" in event_types(service, rid)


def test_resolve_in_progress_revokes_the_holder(service):
    rid, cid, _, tok = claimed(service)
    r = resolve(service, rid, cid, "succeeded", result={"id": "by-hand"})
    assert r.status == 200, r
    g = get(service, rid, cid).json
    assert g["state"] == "succeeded" and g["fencing_token"] > tok
    # The old holder can neither release nor complete differently.
    assert_error(release(service, rid, cid, tok), 409, "stale_token")
    err = assert_error(complete(service, rid, cid, tok, result={"id": "from-holder"}), 409,
                       "already_completed")
    assert err["outcome"] == "succeeded"
    c = claim(service, rid, cid, {"claim_id": claim_id()})
    assert c.json["result"] == {"id": "by-hand"}, c


def test_resolve_in_progress_as_not_executed_fences_the_old_holder(service):
    rid, cid, _, tok = claimed(service)
    r = resolve(service, rid, cid, "not_executed")
    assert r.status == 200 and r.json["status"] == "released", r
    assert r.json["fencing_token"] > tok
    assert_error(release(service, rid, cid, tok), 409, "stale_token")
    assert_error(renew(service, rid, cid, tok), 409, "stale_token")
    assert_error(complete(service, rid, cid, tok, outcome="failed", retryable=True), 409,
                 "stale_token")
    c = claim(service, rid, cid, {"claim_id": claim_id()})
    assert c.status == 201 and c.json["fencing_token"] > r.json["fencing_token"], c


def metric_value(service, name):
    for line in service.ledgerd.get("/metrics").body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric " + name)


def test_late_completion_after_not_executed_is_accepted_and_contradicts_the_resolve(service):
    """The resolution was wrong: the old holder did run it. Its final outcome is
    accepted (nobody else ran it since) and the history says the resolve was wrong."""
    rid, cid, _, tok = expired(service)
    assert resolve(service, rid, cid, "not_executed", note="no ticket found").status == 200
    before = metric_value(service, "ledger_resolve_contradictions_total")
    r = complete(service, rid, cid, tok, result={"ticket": "T-9"})
    assert r.status == 200 and r.json["status"] == "completed", r
    assert r.json["result"] == {"ticket": "T-9"}
    evs = events(service, rid)
    assert [e[0] for e in evs][-3:] == ["resolved", "late_completion", "resolve_contradicted"]
    detail = evs[-1][2]
    assert detail["fencing_token"] == tok and detail["resolved_token"] > tok, detail
    assert detail["newer_holder"] is False, detail
    assert metric_value(service, "ledger_resolve_contradictions_total") == before + 1
    again = claim(service, rid, cid, {"claim_id": claim_id()})
    assert again.status == 200 and again.json["result"] == {"ticket": "T-9"}, again


def test_late_completion_after_not_executed_and_a_new_holder_is_a_duplicate_execution(service):
    rid, cid, _, old = expired(service)
    assert resolve(service, rid, cid, "not_executed").status == 200
    new = claim(service, rid, cid, {"claim_id": claim_id()})
    assert new.status == 201, new
    before = metric_value(service, "ledger_duplicate_executions_total")
    # The new holder ran it and completed; then the old holder's answer comes in.
    assert complete(service, rid, cid, new.json["fencing_token"], result={"n": 2}).status == 200
    r = complete(service, rid, cid, old, result={"n": 1})
    err = assert_error(r, 409, "already_completed")
    assert err["outcome"] == "succeeded"
    evs = events(service, rid)
    assert [e[0] for e in evs][-2:] == ["refused", "duplicate_execution"], evs
    detail = evs[-1][2]
    assert detail["fencing_token"] == old and detail["newer_holder"] is True, detail
    assert detail["current_token"] == new.json["fencing_token"], detail
    assert metric_value(service, "ledger_duplicate_executions_total") == before + 1
    # The stored completion stands.
    assert claim(service, rid, cid, {"claim_id": claim_id()}).json["result"] == {"n": 2}


def test_late_completion_while_a_new_holder_runs_is_a_duplicate_execution(service):
    rid, cid, _, old = expired(service)
    assert resolve(service, rid, cid, "not_executed").status == 200
    new = claim(service, rid, cid, {"claim_id": claim_id(), "lease_ms": 30000})
    assert new.status == 201, new
    r = complete(service, rid, cid, old, result={"n": 1})
    assert r.status == 200 and r.json["status"] == "completed", r
    assert event_types(service, rid)[-2:] == ["late_completion", "duplicate_execution"]
    # The new holder's own answer, if it differs, conflicts with the stored one.
    assert_error(complete(service, rid, cid, new.json["fencing_token"], result={"n": 2}), 409,
                 "already_completed")


def test_a_retryable_failure_after_not_executed_contradicts_nothing(service):
    rid, cid, _, tok = expired(service)
    assert resolve(service, rid, cid, "not_executed").status == 200
    assert_error(complete(service, rid, cid, tok, outcome="failed", retryable=True), 409,
                 "stale_token")
    types = event_types(service, rid)
    assert "resolve_contradicted" not in types and "duplicate_execution" not in types


def test_resolve_a_released_call(service):
    rid, cid, _, tok = claimed(service)
    assert release(service, rid, cid, tok).status == 200
    r = resolve(service, rid, cid, "succeeded", result=7)
    assert r.status == 200 and r.json["status"] == "completed" and r.json["result"] == 7, r


def test_resolve_a_completed_call_is_already_completed(service):
    rid, cid, _, tok = claimed(service)
    c = complete(service, rid, cid, tok, result={"id": 1})
    assert c.status == 200, c
    for resolution in ("succeeded", "failed", "not_executed"):
        r = resolve(service, rid, cid, resolution)
        err = assert_error(r, 409, "already_completed")
        assert err["outcome"] == "succeeded"
        assert err["completed_at"] == c.json["completed_at"]
    g = get(service, rid, cid).json
    assert g["state"] == "succeeded" and g["result"] == {"id": 1} and g["fencing_token"] == tok
    refused = [d for t, _, d in events(service, rid) if t == "refused"]
    assert len(refused) == 3 and all(d["code"] == "already_completed" for d in refused)


def test_resolve_repeated_is_200_with_the_same_answer(service):
    rid, cid, _, _ = expired(service)
    r1 = resolve(service, rid, cid, "succeeded", result={"x": [1, 2]}, note="checked")
    assert r1.status == 200, r1
    r2 = resolve(service, rid, cid, "succeeded", result={"x": [1, 2]}, note="checked")
    assert r2.status == 200, r2
    assert r2.json == r1.json
    # A different resolution of a resolved call is a conflict.
    assert_error(resolve(service, rid, cid, "failed", result={"x": [1, 2]}), 409,
                 "already_completed")
    assert event_types(service, rid).count("resolved") == 1

    rid, cid, _, _ = expired(service)
    n1 = resolve(service, rid, cid, "not_executed")
    n2 = resolve(service, rid, cid, "not_executed")
    assert n1.status == 200 and n2.status == 200, (n1, n2)
    assert n2.json == n1.json
    assert event_types(service, rid).count("resolved") == 1


def test_resolve_not_executed_with_a_result_is_400(service):
    rid, cid, _, tok = expired(service)
    r = resolve(service, rid, cid, "not_executed", result={"x": 1})
    err = assert_error(r, 400, "invalid_field")
    assert err["field"] == "result"
    g = get(service, rid, cid).json
    assert g["state"] == "unknown" and g["fencing_token"] == tok


# --- GET one ----------------------------------------------------------------


def test_get_of_a_held_call(service):
    rid, cid = key()
    cl = claim_id()
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "send_email", "args": {"to": "a"},
                                  "owner": "mailer@pod-7", "lease_ms": 10000})
    assert r.status == 201, r
    g = get(service, rid, cid)
    assert g.status == 200, g
    b = g.json
    assert b["request_id"] == rid and b["tool_call_id"] == cid
    assert b["idempotency_key"] == "%s:%s" % (rid, cid)
    assert b["tool"] == "send_email"
    assert b["state"] == "in_progress"
    assert b["fencing_token"] == 1
    assert b["holder"] == {"attempt_id": None, "owner": "mailer@pod-7"}
    assert cl not in g.body
    assert 0 < b["lease_ms_left"] <= 10000
    assert b["args_sha256"] == fingerprint({"to": "a"})
    assert b["tool_dedupes"] is False
    assert TS_RE.match(b["created_at"])
    for absent in ("outcome", "result", "completed_at", "args"):
        assert absent not in b, b


def test_get_of_a_completed_call(service):
    rid, cid, _, tok = claimed(service, tool_dedupes=True)
    c = complete(service, rid, cid, tok, result={"message_id": "m-829"})
    b = get(service, rid, cid).json
    assert b["state"] == "succeeded"
    assert b["holder"] is None
    assert b["lease_ms_left"] == 0
    assert b["tool_dedupes"] is True
    assert b["outcome"] == "succeeded"
    assert b["result"] == {"message_id": "m-829"}
    assert b["completed_at"] == c.json["completed_at"]
    assert b["created_at"] <= b["completed_at"]


def test_get_absent_claim_fields_read_as_null(service):
    rid, cid = key()
    assert claim(service, rid, cid).status == 201  # empty body: anonymous, nothing given
    b = get(service, rid, cid).json
    assert b["tool"] is None
    assert b["args_sha256"] is None
    assert b["holder"] == {"attempt_id": None, "owner": None}


def test_no_reader_learns_the_claim_id_that_would_let_it_pose_as_the_holder(service):
    """GET, the list of calls and the request's timeline never show the holder's
    claim_id: a reader that knew it could claim as the holder and get its token."""
    rid, cid = key()
    cl = claim_id()
    r = claim(service, rid, cid, {"claim_id": cl, "owner": "mailer@pod-7", "lease_ms": 30000})
    assert r.status == 201, r
    seen = [get(service, rid, cid).body,
            service.ledgerd.get("/v1/tool-calls?state=in_progress&limit=1000",
                                token=service.token("reviewer")).body,
            service.ledgerd.get("/v1/requests/%s" % rid, token=service.token("reviewer")).body]
    for body in seen:
        assert cl not in body
    # What a reader could have re-claimed with is only another holder's claim.
    assert_error(claim(service, rid, cid, {"claim_id": claim_id(), "owner": "mailer@pod-7",
                                           "lease_ms": 30000}), 409, "in_progress")


def test_get_works_for_agent_and_admin_tokens(service):
    rid, cid, _, _ = claimed(service)
    for role in ("agent", "router", "admin"):
        r = get(service, rid, cid, token=service.token(role))
        assert r.status == 200, (role, r)


# --- list -------------------------------------------------------------------


def list_calls(service, tenant, query=""):
    return service.ledgerd.get("/v1/tool-calls" + query, token=service.token("reviewer", tenant))


def tenant_with_states(service):
    """A fresh tenant with one call in each state; returns (tenant, {state: key})."""
    tenant = new_id("tl")
    tok = service.token("agent", tenant)
    rid = new_id("r")
    keys = {}

    def c(cid, **fields):
        body = {"claim_id": claim_id()}
        body.update(fields)
        r = service.ledgerd.post(path(rid, cid, "claim"), body, token=tok)
        assert r.status == 201, r
        keys_cid = (rid, cid)
        return keys_cid, r.json["fencing_token"]

    def a(k, action, body):
        r = service.ledgerd.post(path(k[0], k[1], action), body, token=tok)
        assert r.status == 200, r

    keys["unknown"], _ = c("c1", lease_ms=SHORT_LEASE_MS)
    k, t = c("c2")
    a(k, "complete", {"fencing_token": t, "outcome": "succeeded", "result": 1})
    keys["succeeded"] = k
    k, t = c("c3")
    a(k, "complete", {"fencing_token": t, "outcome": "failed", "result": 2})
    keys["failed"] = k
    k, t = c("c4")
    a(k, "release", {"fencing_token": t})
    keys["released"] = k
    keys["in_progress"], _ = c("c5")
    time.sleep(PAST_SHORT_LEASE_S)
    return tenant, keys


def test_list_filters_by_state(service):
    tenant, keys = tenant_with_states(service)
    everything = list_calls(service, tenant)
    assert everything.status == 200, everything
    b = everything.json
    assert set(b) == {"items", "next_cursor"}
    assert b["next_cursor"] is None
    got = [(i["request_id"], i["tool_call_id"]) for i in b["items"]]
    assert got == sorted(keys.values())
    for state, k in keys.items():
        r = list_calls(service, tenant, "?state=" + state)
        assert r.status == 200, r
        items = r.json["items"]
        assert [(i["request_id"], i["tool_call_id"]) for i in items] == [k], (state, items)
        assert items[0]["state"] == state
        assert r.json["next_cursor"] is None


def test_list_items_are_the_get_objects_without_args_and_result(service):
    tenant = new_id("tl")
    tok = service.token("agent", tenant)
    rid, cid = key()
    r = service.ledgerd.post(path(rid, cid, "claim"),
                             {"claim_id": claim_id(), "tool": "t", "args": {"a": 1},
                              "store_args": True}, token=tok)
    assert r.status == 201, r
    r = service.ledgerd.post(path(rid, cid, "complete"),
                             {"fencing_token": 1, "outcome": "succeeded", "result": {"r": 1}},
                             token=tok)
    assert r.status == 200, r
    one = service.ledgerd.get(path(rid, cid), token=tok).json
    assert one["args"] == {"a": 1} and one["result"] == {"r": 1}
    items = list_calls(service, tenant).json["items"]
    assert len(items) == 1
    expected = {k: v for k, v in one.items() if k not in ("args", "result")}
    assert items[0] == expected


def test_list_pages_through_with_the_cursor_without_repeats_or_gaps(service):
    tenant = new_id("tl")
    tok = service.token("agent", tenant)
    made = []
    for rid in ("r-b", "r-a", "r-c"):
        for cid in ("c-2", "c-1", "c-3"):
            r = service.ledgerd.post(path(rid, cid, "claim"), {"claim_id": claim_id()},
                                     token=tok)
            assert r.status == 201, r
            made.append((rid, cid))
    seen, cursor, pages = [], None, 0
    while True:
        q = "?limit=4" + ("&cursor=" + cursor if cursor else "")
        r = list_calls(service, tenant, q)
        assert r.status == 200, r
        items = r.json["items"]
        assert len(items) <= 4
        seen += [(i["request_id"], i["tool_call_id"]) for i in items]
        pages += 1
        cursor = r.json["next_cursor"]
        if cursor is None:
            break
        assert isinstance(cursor, str) and cursor
        assert pages < 10
    assert pages == 3
    assert seen == sorted(made)


def test_list_pages_within_a_state(service):
    tenant = new_id("tl")
    tok = service.token("agent", tenant)
    held = []
    for i in range(5):
        rid, cid = "r-%d" % i, "c"
        r = service.ledgerd.post(path(rid, cid, "claim"), {"claim_id": claim_id()}, token=tok)
        assert r.status == 201, r
        if i % 2 == 0:
            held.append((rid, cid))
        else:
            r = service.ledgerd.post(path(rid, cid, "release"), {"fencing_token": 1}, token=tok)
            assert r.status == 200, r
    r1 = list_calls(service, tenant, "?state=in_progress&limit=2")
    assert r1.status == 200, r1
    assert r1.json["next_cursor"]
    r2 = list_calls(service, tenant, "?state=in_progress&limit=2&cursor="
                    + r1.json["next_cursor"])
    assert r2.status == 200, r2
    assert r2.json["next_cursor"] is None
    got = [(i["request_id"], i["tool_call_id"]) for i in r1.json["items"] + r2.json["items"]]
    assert got == held


def test_list_default_limit_is_50_and_1000_is_allowed(service):
    tenant = new_id("tl")
    tok = service.token("agent", tenant)
    rid = new_id("r")
    for i in range(51):
        r = service.ledgerd.post(path(rid, "c-%03d" % i, "claim"), {}, token=tok)
        assert r.status == 201, r
    r = list_calls(service, tenant)
    assert r.status == 200, r
    assert len(r.json["items"]) == 50
    assert r.json["next_cursor"]
    r = list_calls(service, tenant, "?limit=1000")
    assert r.status == 200 and len(r.json["items"]) == 51, r
    assert r.json["next_cursor"] is None
    r = list_calls(service, tenant, "?limit=51")
    assert len(r.json["items"]) == 51 and r.json["next_cursor"] is None, r


def test_list_of_an_empty_tenant(service):
    r = list_calls(service, new_id("tl"))
    assert r.status == 200, r
    assert r.json == {"items": [], "next_cursor": None}


def test_list_unknown_state_is_invalid_field(service):
    for q in ("?state=bogus", "?state=", "?state=IN_PROGRESS", "?state=completed"):
        r = list_calls(service, "t1", q)
        err = assert_error(r, 400, "invalid_field")
        assert err["field"] == "state", q


def test_list_bad_limit_is_invalid_field(service):
    for q in ("?limit=0", "?limit=1001", "?limit=-1", "?limit=abc", "?limit=1.5", "?limit=",
              "?limit=99999999999999999999"):
        r = list_calls(service, "t1", q)
        err = assert_error(r, 400, "invalid_field")
        assert err["field"] == "limit", q


def test_list_bad_cursor_is_invalid_field(service):
    for q in ("?cursor=!!!", "?cursor=not-a-cursor", "?cursor=", "?cursor=cj1hOmI"):
        r = list_calls(service, "t1", q)
        err = assert_error(r, 400, "invalid_field")
        assert err["field"] == "cursor", q


def test_list_cursor_that_decodes_to_nul_is_invalid_field_naming_cursor(service):
    # A percent-encoded NUL in a query value: still a bad value of `cursor`
    # ("invalid_field ... (details: field)").
    r = list_calls(service, "t1", "?cursor=%00")
    err = assert_error(r, 400, "invalid_field")
    assert err.get("field") == "cursor", r


def test_list_repeated_parameter_is_invalid_field(service):
    r = list_calls(service, "t1", "?limit=1&limit=2")
    err = assert_error(r, 400, "invalid_field")
    assert err["field"] == "limit"


# --- result_expired ---------------------------------------------------------


def test_tombstone_answers_result_expired_to_claim_and_writes_nothing(service):
    rid, cid = key()
    tombstone(service, rid, cid, outcome="failed")
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    err = assert_error(r, 410, "result_expired")
    assert err["outcome"] == "failed"
    assert TS_RE.match(err["completed_at"])
    assert count(service, "tool_calls", rid) == 0
    assert count(service, "requests", rid) == 0
    assert count(service, "events", rid) == 0
    # Again, anonymously: still never executed.
    assert_error(claim(service, rid, cid), 410, "result_expired")


def test_tombstone_answers_result_expired_to_every_call(service):
    rid, cid = key()
    tombstone(service, rid, cid)
    assert_error(complete(service, rid, cid, 1), 410, "result_expired")
    assert_error(renew(service, rid, cid, 1), 410, "result_expired")
    assert_error(release(service, rid, cid, 1), 410, "result_expired")
    assert_error(resolve(service, rid, cid, "succeeded"), 410, "result_expired")
    assert_error(resolve(service, rid, cid, "not_executed"), 410, "result_expired")
    err = assert_error(get(service, rid, cid), 410, "result_expired")
    assert err["outcome"] == "succeeded"
    assert count(service, "tool_calls", rid) == 0
    assert count(service, "events", rid) == 0


def test_args_mismatch_takes_precedence_over_result_expired(service):
    args = {"order": 17}
    rid, cid = key()
    tombstone(service, rid, cid, args_sha256=fingerprint(args))
    r = claim(service, rid, cid, {"claim_id": claim_id(), "args": {"order": 18}})
    err = assert_error(r, 422, "args_mismatch")
    assert err["expected_args_sha256"] == fingerprint(args)
    r = claim(service, rid, cid, {"claim_id": claim_id(), "args": args})
    assert_error(r, 410, "result_expired")


# --- attempts are not served yet --------------------------------------------


def test_claim_with_attempt_id_is_attempt_not_found_and_writes_nothing(service):
    rid, cid = key()
    r = claim(service, rid, cid, {"claim_id": claim_id(), "attempt_id": "att-1"})
    assert_error(r, 404, "attempt_not_found")
    assert count(service, "requests", rid) == 0
    assert count(service, "tool_calls", rid) == 0
    assert count(service, "events", rid) == 0


def test_attempt_not_found_takes_precedence_over_everything(service):
    rid, cid, cl, tok = claimed(service, tool="t", args={"a": 1})
    # Before args_mismatch and before the same holder's repeat.
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "x", "attempt_id": "att-1"})
    assert_error(r, 404, "attempt_not_found")
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t", "args": {"a": 1},
                                  "attempt_id": "att-1"})
    assert_error(r, 404, "attempt_not_found")
    # Before a replay.
    assert complete(service, rid, cid, tok, result=1).status == 200
    r = claim(service, rid, cid, {"claim_id": cl, "tool": "t", "args": {"a": 1},
                                  "attempt_id": "att-1"})
    assert_error(r, 404, "attempt_not_found")
    assert r.header("Idempotent-Replayed") is None
    g = get(service, rid, cid).json
    assert g["state"] == "succeeded" and g["fencing_token"] == tok


# --- the history ------------------------------------------------------------


def test_every_transition_and_refusal_is_an_event_in_order(service):
    rid, cid, cl, t1 = claimed(service, owner="o")
    assert_error(claim(service, rid, cid, {"claim_id": claim_id()}), 409, "in_progress")
    assert release(service, rid, cid, t1, reason="not sent").status == 200
    assert_error(release(service, rid, cid, t1 + 5), 409, "stale_token")
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    t2 = r.json["fencing_token"]
    assert complete(service, rid, cid, t2, result={"ok": 1}).status == 200
    assert_error(complete(service, rid, cid, t2, result={"ok": 2}), 409, "already_completed")
    assert_error(resolve(service, rid, cid, "failed"), 409, "already_completed")
    evs = events(service, rid)
    assert [(t, d.get("code")) for t, _, d in evs] == [
        ("claimed", None),
        ("refused", "in_progress"),
        ("released", None),
        ("refused", "stale_token"),
        ("claimed", None),
        ("completed", None),
        ("refused", "already_completed"),
        ("refused", "already_completed"),
    ]
    assert all(c == cid for _, c, _ in evs)
    seqs = service.sql("SELECT seq FROM events WHERE tenant = 't1' AND request_id = '%s'"
                       " ORDER BY seq" % rid)
    assert len(seqs) == len(evs)
