"""Results not kept: a completion whose result is over --max-result-bytes
is stored as the result's length and SHA-256, and so is one that sends
`result_not_kept` instead of its result; the completion still succeeds.
A later claim of the key is answered `409 result_not_kept` (never a claim,
never `in_progress`), from the database or from the replay cache; the same
completion repeated is `200`, any other `409 already_completed`; the views
and the history say that the result was not kept.

This module's ledgerd keeps results of up to 1 KiB whole and takes bodies
of 8 KiB. `make test` runs this file a second time with the fast paths off
(LEDGER_FAST_PATHS=off); tests/integration/test_fast_paths.py compares the
two paths field by field.

Contract: docs/api.md, "Results not kept" (this project's addition to
API.md's complete and to row 4 of its claim table).
"""

import hashlib
import json
import os
import subprocess

import pytest

from conftest import LEDGERD, claim_id, new_id
from http_helpers import TS_RE, Router, assert_error, assert_only_error, claim, key, path

KEEP_MAX = 1024
LEDGERD_ARGS = ["--max-result-bytes", "1KiB", "--max-body", "8KiB"]


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def big_text(n=KEEP_MAX + 1, seed="x"):
    """A JSON text of exactly @n bytes, spaced as no serialiser would write it."""
    head, tail = '{"items" :  ["', '"]}'
    return head + seed * (n - len(head) - len(tail)) + tail


BIG = big_text(3000)
BIG_SHA = sha(BIG)
TOOL, ARGS = "fetch", {"url": "https://example.com/big"}


def act(service, rid, cid, action, body=None, raw=None, token=None):
    return service.ledgerd.post(path(rid, cid, action), body, raw=raw,
                                token=token or service.token("agent"))


def claimed(service, rid=None, cid=None, **fields):
    """Claims a fresh key (or @rid, @cid); returns (rid, cid, fencing_token)."""
    if rid is None:
        rid, cid = key()
    body = {"claim_id": claim_id(), "tool": TOOL, "args": ARGS}
    body.update(fields)
    r = claim(service, rid, cid, body)
    assert r.status == 201, r
    return rid, cid, r.json["fencing_token"]


def complete_raw(service, rid, cid, token_, result_text, outcome="succeeded", extra=""):
    """A completion whose result is @result_text exactly."""
    raw = '{"fencing_token": %d, "outcome": "%s", "result": %s%s}' % (
        token_, outcome, result_text, extra)
    return act(service, rid, cid, "complete", raw=raw.encode())


def complete_not_kept(service, rid, cid, token_, nbytes, digest, outcome="succeeded", **kw):
    body = {"fencing_token": token_, "outcome": outcome,
            "result_not_kept": {"bytes": nbytes, "sha256": digest}}
    body.update(kw)
    return act(service, rid, cid, "complete", body)


def retry_claim(service, rid, cid, **fields):
    """The rerun's claim: the same call, another execution."""
    body = {"claim_id": claim_id(), "tool": TOOL, "args": ARGS}
    body.update(fields)
    return claim(service, rid, cid, body)


def row(service, rid, cid):
    rows = service.sql("SELECT state, fencing_token, result IS NULL, coalesce(result_bytes, -1),"
                       " coalesce(result_sha256, '') FROM tool_calls WHERE request_id = '%s'"
                       " AND tool_call_id = '%s'" % (rid, cid))
    assert len(rows) == 1, rows
    s, tok, no_result, nbytes, digest = rows[0]
    return {"state": s, "fencing_token": int(tok), "result": no_result != "t",
            "result_bytes": int(nbytes), "result_sha256": digest}


def events(service, rid):
    rows = service.sql("SELECT type, coalesce(tool_call_id, ''), detail::text FROM events"
                       " WHERE request_id = '%s' ORDER BY seq" % rid)
    return [(t, c, json.loads(d)) for t, c, d in rows]


def assert_not_kept_answer(r, rid, cid, nbytes, digest, outcome="succeeded"):
    assert r.status == 200, r
    b = r.json
    assert set(b) == {"status", "outcome", "result_kept", "result_bytes", "result_sha256",
                      "completed_at", "idempotency_key"}, b
    assert (b["status"], b["outcome"], b["result_kept"], b["result_bytes"],
            b["result_sha256"]) == ("completed", outcome, False, nbytes, digest), b
    assert b["idempotency_key"] == "%s:%s" % (rid, cid)
    assert TS_RE.match(b["completed_at"]), b
    assert '"result"' not in r.body
    return b


def assert_result_not_kept(r, rid, cid, nbytes, digest, completed_at, outcome="succeeded"):
    """@r is the claim's 409 result_not_kept, with its details."""
    err = assert_only_error(r, 409, "result_not_kept")
    assert set(err) == {"code", "message", "outcome", "result_bytes", "result_sha256",
                        "completed_at", "idempotency_key"}, err
    assert (err["outcome"], err["result_bytes"], err["result_sha256"], err["completed_at"],
            err["idempotency_key"]) == (outcome, nbytes, digest, completed_at,
                                        "%s:%s" % (rid, cid)), err
    assert r.header("Idempotent-Replayed") is None and r.header("Retry-After") is None, r
    return err


# --- completing: over the bound, or the client's own form ---------------------


def test_a_result_over_the_bound_is_completed_and_kept_as_its_digest(service):
    rid, cid, tok = claimed(service)
    r = complete_raw(service, rid, cid, tok, BIG)
    assert_not_kept_answer(r, rid, cid, len(BIG), BIG_SHA)
    assert row(service, rid, cid) == {"state": "succeeded", "fencing_token": tok,
                                      "result": False, "result_bytes": len(BIG),
                                      "result_sha256": BIG_SHA}


def test_the_digest_is_of_the_exact_text_sent(service):
    # Non-ASCII text and escapes count as sent: bytes of the UTF-8 text, never re-serialised.
    text = '{"t": "h\u00e9llo \\u00e9", "pad":"%s"  }' % ("z" * KEEP_MAX)
    rid, cid, tok = claimed(service)
    r = complete_raw(service, rid, cid, tok, text)
    raw = text.encode()
    assert_not_kept_answer(r, rid, cid, len(raw), hashlib.sha256(raw).hexdigest())


def test_a_result_at_the_bound_is_kept_whole(service):
    text = big_text(KEEP_MAX)
    rid, cid, tok = claimed(service)
    r = complete_raw(service, rid, cid, tok, text)
    assert r.status == 200 and r.json["result"] == json.loads(text), r
    assert "result_kept" not in r.json
    assert row(service, rid, cid)["result"] is True
    replay = retry_claim(service, rid, cid)
    assert replay.status == 200 and replay.json["replayed"] is True, replay


def test_result_not_kept_is_stored_as_given(service):
    rid, cid, tok = claimed(service)
    digest = sha("[1, 2]")
    r = complete_not_kept(service, rid, cid, tok, 6, digest)
    assert_not_kept_answer(r, rid, cid, 6, digest)
    assert row(service, rid, cid) == {"state": "succeeded", "fencing_token": tok,
                                      "result": False, "result_bytes": 6,
                                      "result_sha256": digest}


def test_a_final_failure_may_keep_only_its_digest(service):
    rid, cid, tok = claimed(service)
    r = complete_not_kept(service, rid, cid, tok, 0, sha(""), outcome="failed",
                          retryable=False)
    assert_not_kept_answer(r, rid, cid, 0, sha(""), outcome="failed")
    assert_result_not_kept(retry_claim(service, rid, cid), rid, cid, 0, sha(""),
                           r.json["completed_at"], outcome="failed")


def test_a_late_completion_may_keep_only_its_digest(service):
    rid, cid, tok = claimed(service, lease_ms=100)
    service.sql("SELECT pg_sleep(0.3)")
    r = complete_raw(service, rid, cid, tok, BIG)
    assert r.status == 200 and r.json["late_completion"] is True, r
    assert (r.json["result_kept"], r.json["result_bytes"], r.json["result_sha256"]) == (
        False, len(BIG), BIG_SHA), r
    late = [d for t, _, d in events(service, rid) if t == "late_completion"]
    assert len(late) == 1 and late[0]["result_kept"] is False, late
    assert (late[0]["result_bytes"], late[0]["result_sha256"]) == (len(BIG), BIG_SHA)


# --- a later claim: 409 result_not_kept -----------------------------------------


def test_a_retry_is_told_the_result_was_not_kept_and_never_claims(service):
    holder = claim_id()
    rid, cid, tok = claimed(service, claim_id=holder)
    done = complete_raw(service, rid, cid, tok, BIG).json
    before = row(service, rid, cid)
    # The rerun, twice (the second answer may come from the replay cache), anonymously,
    # and the holder's own claim_id again: the call is finished, not held.
    for body in ({}, {}, {"claim_id": None}, {"claim_id": holder}):
        r = retry_claim(service, rid, cid, **body)
        assert_result_not_kept(r, rid, cid, len(BIG), BIG_SHA, done["completed_at"])
    assert row(service, rid, cid) == before
    assert [t for t, _, _ in events(service, rid)] == ["claimed", "completed"]


def test_every_retry_gets_the_same_bytes(service):
    rid, cid, tok = claimed(service)
    complete_not_kept(service, rid, cid, tok, 10, sha("0123456789"))
    bodies = {retry_claim(service, rid, cid).body for _ in range(3)}
    assert len(bodies) == 1, bodies


def test_the_order_of_checks_puts_args_mismatch_first(service):
    rid, cid, tok = claimed(service)
    complete_raw(service, rid, cid, tok, BIG)
    r = retry_claim(service, rid, cid, args={"url": "https://example.com/other"})
    assert_error(r, 422, "args_mismatch")
    r = retry_claim(service, rid, cid, tool="other")
    assert_error(r, 422, "args_mismatch")


def test_under_attempts_result_not_kept_comes_where_the_replay_would(service):
    rt = Router(service)
    rid, cid = new_id("r"), "call_01"
    assert rt.create(rid, "a1").status == 201
    c = rt.claim(rid, cid, tool=TOOL, args=ARGS, attempt_id="a1")
    assert c.status == 201, c
    done = rt.call(rid, cid, "complete", {"fencing_token": 1, "outcome": "succeeded",
                                          "result_not_kept": {"bytes": 3, "sha256": sha("abc")}})
    assert done.status == 200 and done.json["result_kept"] is False, done
    at = done.json["completed_at"]
    # attempt_not_found and attempt_required come first, as before a replay.
    assert_error(rt.claim(rid, cid, tool=TOOL, args=ARGS, attempt_id="a9"), 404,
                 "attempt_not_found")
    assert_error(rt.claim(rid, cid, tool=TOOL, args=ARGS), 409, "attempt_required")
    # The live attempt, then a fenced one: told, never fenced (it starts nothing).
    r = rt.claim(rid, cid, tool=TOOL, args=ARGS, attempt_id="a1")
    assert_result_not_kept(r, rid, cid, 3, sha("abc"), at)
    assert rt.cancel(rid, "a1").status == 200
    r = rt.claim(rid, cid, tool=TOOL, args=ARGS, attempt_id="a1")
    assert_result_not_kept(r, rid, cid, 3, sha("abc"), at)
    # A failover's rerun sees the call among the settled ones, as any other.
    assert rt.ack(rid, "a1").status == 200
    f = rt.failover(rid, "a1", "replica_exited", next_aid="a2")
    assert f.status == 200 and f.json["action"] == "retry_prefill", f
    assert [s["tool_call_id"] for s in f.json["settled_tool_calls"]] == [cid]
    r = rt.claim(rid, cid, tool=TOOL, args=ARGS, attempt_id="a2")
    assert_result_not_kept(r, rid, cid, 3, sha("abc"), at)


# --- the same completion again, or another --------------------------------------


def test_the_same_not_kept_completion_repeated_is_200(service):
    rid, cid, tok = claimed(service)
    first = complete_raw(service, rid, cid, tok, BIG)
    assert first.status == 200, first
    # The same text again, its digest alone, and the digest first then the text.
    again = complete_raw(service, rid, cid, tok, BIG)
    assert again.status == 200 and again.body == first.body, again
    by_digest = complete_not_kept(service, rid, cid, tok, len(BIG), BIG_SHA)
    assert by_digest.status == 200 and by_digest.body == first.body, by_digest

    rid2, cid2, tok2 = claimed(service)
    first2 = complete_not_kept(service, rid2, cid2, tok2, len(BIG), BIG_SHA)
    again2 = complete_raw(service, rid2, cid2, tok2, BIG)
    assert again2.status == 200 and again2.body == first2.body, again2
    for r in (rid, rid2):
        assert [t for t, _, _ in events(service, r)] == ["claimed", "completed"]


def test_a_kept_result_and_its_digest_are_the_same_completion(service):
    # Another ledgerd with a smaller bound may turn a retried completion into its digest.
    small = '{"id": "m-1"}'
    rid, cid, tok = claimed(service)
    first = complete_raw(service, rid, cid, tok, small)
    assert first.status == 200 and first.json["result"] == {"id": "m-1"}, first
    r = complete_not_kept(service, rid, cid, tok, len(small), sha(small))
    assert r.status == 200 and r.body == first.body, r
    assert_error(complete_not_kept(service, rid, cid, tok, len(small), sha('{"id":"m-1"}')),
                 409, "already_completed")
    assert_error(complete_not_kept(service, rid, cid, tok, len(small) + 1, sha(small)), 409,
                 "already_completed")


@pytest.mark.parametrize("other", [
    ("digest", lambda s, rid, cid, tok: complete_not_kept(s, rid, cid, tok, len(BIG),
                                                          sha(BIG + " "))),
    ("bytes", lambda s, rid, cid, tok: complete_not_kept(s, rid, cid, tok, len(BIG) + 1,
                                                         BIG_SHA)),
    ("outcome", lambda s, rid, cid, tok: complete_not_kept(s, rid, cid, tok, len(BIG), BIG_SHA,
                                                           outcome="failed")),
    ("text", lambda s, rid, cid, tok: complete_raw(s, rid, cid, tok, big_text(3000, "y"))),
    ("small text", lambda s, rid, cid, tok: complete_raw(s, rid, cid, tok, "null")),
    ("retryable", lambda s, rid, cid, tok: act(s, rid, cid, "complete", {
        "fencing_token": tok, "outcome": "failed", "retryable": True})),
], ids=lambda o: o[0])
def test_a_different_completion_is_already_completed(service, other):
    rid, cid, tok = claimed(service)
    first = complete_raw(service, rid, cid, tok, BIG)
    err = assert_error(other[1](service, rid, cid, tok), 409, "already_completed")
    assert (err["outcome"], err["completed_at"]) == ("succeeded", first.json["completed_at"])
    refused = [d for t, _, d in events(service, rid) if t == "refused"]
    assert [d["code"] for d in refused] == ["already_completed"], refused
    assert row(service, rid, cid)["result_sha256"] == BIG_SHA


# --- bad bodies -------------------------------------------------------------------


GOOD = {"bytes": 3, "sha256": sha("abc")}


@pytest.mark.parametrize("body,says", [
    ({"result": 1, "result_not_kept": GOOD}, "not both"),
    ({"result": None, "result_not_kept": GOOD}, "not both"),
    ({"result_not_kept": {"bytes": -1, "sha256": GOOD["sha256"]}}, "bytes"),
    ({"result_not_kept": {"bytes": 1.5, "sha256": GOOD["sha256"]}}, "bytes"),
    ({"result_not_kept": {"bytes": 2 ** 53, "sha256": GOOD["sha256"]}}, "bytes"),
    ({"result_not_kept": {"bytes": "3", "sha256": GOOD["sha256"]}}, "bytes"),
    ({"result_not_kept": {"bytes": 3, "sha256": GOOD["sha256"].upper()}}, "sha256"),
    ({"result_not_kept": {"bytes": 3, "sha256": GOOD["sha256"][:63]}}, "sha256"),
    ({"result_not_kept": {"bytes": 3, "sha256": 7}}, "sha256"),
    ({"result_not_kept": {"bytes": 3}}, "bytes"),
    ({"result_not_kept": {"sha256": GOOD["sha256"]}}, "bytes"),
    ({"result_not_kept": dict(GOOD, kept=False)}, "bytes"),
    ({"result_not_kept": [3, GOOD["sha256"]]}, "bytes"),
    ({"result_not_kept": True}, "bytes"),
    ({"outcome": "failed", "retryable": True, "result_not_kept": GOOD}, "retryable"),
], ids=lambda v: json.dumps(v)[:60] if isinstance(v, dict) else v)
def test_a_bad_result_not_kept_is_invalid_field_and_changes_nothing(service, body, says):
    rid, cid, tok = claimed(service)
    full = {"fencing_token": tok, "outcome": "succeeded"}
    full.update(body)
    err = assert_only_error(act(service, rid, cid, "complete", full), 400, "invalid_field",
                            "result_not_kept")
    assert says in err["message"], err
    assert row(service, rid, cid)["state"] == "in_progress"
    assert [t for t, _, _ in events(service, rid)] == ["claimed"]


def test_neither_result_nor_result_not_kept_stores_null_as_before(service):
    # API 1's complete: a result left out is the JSON null, kept (docs/api.md).
    rid, cid, tok = claimed(service)
    r = act(service, rid, cid, "complete", {"fencing_token": tok, "outcome": "succeeded"})
    assert r.status == 200 and r.json["result"] is None, r
    assert retry_claim(service, rid, cid).json["result"] is None


def test_result_not_kept_null_is_left_out(service):
    rid, cid, tok = claimed(service)
    r = act(service, rid, cid, "complete", {"fencing_token": tok, "outcome": "succeeded",
                                            "result": 5, "result_not_kept": None})
    assert r.status == 200 and r.json["result"] == 5, r


def test_a_body_over_max_body_is_still_413(service):
    rid, cid, tok = claimed(service)
    r = complete_raw(service, rid, cid, tok, big_text(9000))
    assert_error(r, 413, "body_too_large")
    assert row(service, rid, cid)["state"] == "in_progress"


# --- what readers see -------------------------------------------------------------


def test_the_views_show_the_digest_and_no_result(service):
    reviewer = service.token("reviewer")
    rid, cid, tok = claimed(service)
    done = complete_raw(service, rid, cid, tok, BIG).json
    cid_kept = new_id("c")
    _, _, tok2 = claimed(service, rid, cid_kept)
    assert complete_raw(service, rid, cid_kept, tok2, '{"ok": true}').status == 200

    g = service.ledgerd.get(path(rid, cid), token=reviewer)
    assert g.status == 200, g
    v = g.json
    assert (v["state"], v["outcome"], v["result_kept"], v["result_bytes"],
            v["result_sha256"], v["completed_at"]) == ("succeeded", "succeeded", False,
                                                       len(BIG), BIG_SHA, done["completed_at"])
    assert "result" not in v
    kept = service.ledgerd.get(path(rid, cid_kept), token=reviewer).json
    assert kept["result"] == {"ok": True} and "result_kept" not in kept
    assert "result_bytes" not in kept and "result_sha256" not in kept
    # An agent reads it the same way.
    assert service.ledgerd.get(path(rid, cid), token=service.token("agent")).json == v

    # The request's review view and the list: the same fields, never a result.
    view = service.ledgerd.get("/v1/requests/%s" % rid, token=reviewer).json
    calls = {c["tool_call_id"]: c for c in view["tool_calls"]}
    assert (calls[cid]["result_kept"], calls[cid]["result_bytes"],
            calls[cid]["result_sha256"]) == (False, len(BIG), BIG_SHA)
    assert "result_kept" not in calls[cid_kept]
    assert all("result" not in c for c in calls.values())
    listed = []
    cursor = None
    while True:
        q = "/v1/tool-calls?state=succeeded&limit=1000" + ("&cursor=" + cursor if cursor else "")
        page = service.ledgerd.get(q, token=reviewer).json
        listed += [c for c in page["items"] if c["request_id"] == rid]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    mine = {c["tool_call_id"]: c for c in listed}
    assert mine[cid]["result_kept"] is False and mine[cid]["result_sha256"] == BIG_SHA
    assert "result_kept" not in mine[cid_kept]


def test_the_history_records_that_the_result_was_not_kept(service):
    rid, cid, tok = claimed(service)
    complete_raw(service, rid, cid, tok, BIG)
    done = [d for t, _, d in events(service, rid) if t == "completed"]
    assert done == [{"outcome": "succeeded", "fencing_token": tok, "result_kept": False,
                     "result_bytes": len(BIG), "result_sha256": BIG_SHA}], done
    # A kept result's event is as it was: no word of results.
    rid2, cid2, tok2 = claimed(service)
    complete_raw(service, rid2, cid2, tok2, "1")
    done2 = [d for t, _, d in events(service, rid2) if t == "completed"]
    assert done2 == [{"outcome": "succeeded", "fencing_token": tok2}], done2


def test_resolve_is_unchanged(service):
    admin = service.token("admin")
    rid, cid, tok = claimed(service)
    complete_raw(service, rid, cid, tok, BIG)
    r = act(service, rid, cid, "resolve", {"resolution": "succeeded", "result": 1},
            token=admin)
    assert_error(r, 409, "already_completed")
    # A resolution keeps the result it is given whole, whatever its size.
    rid2, cid2, _ = claimed(service, lease_ms=100)
    service.sql("SELECT pg_sleep(0.3)")
    big = json.loads(BIG)
    r = act(service, rid2, cid2, "resolve", {"resolution": "succeeded", "result": big},
            token=admin)
    assert r.status == 200 and r.json["result"] == big, r
    assert retry_claim(service, rid2, cid2).json["result"] == big


# --- the replay cache and retention -------------------------------------------------


def metric(service, name):
    for line in service.ledgerd.get("/metrics").body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric %s" % name)


def test_the_replay_cache_answers_result_not_kept_as_the_database_would(service):
    rid, cid, tok = claimed(service)
    done = complete_raw(service, rid, cid, tok, BIG).json
    hits = metric(service, "ledger_replay_cache_hits_total")
    first = retry_claim(service, rid, cid)
    second = retry_claim(service, rid, cid)
    assert_result_not_kept(second, rid, cid, len(BIG), BIG_SHA, done["completed_at"])
    assert first.body == second.body
    # With the fast paths on, the completion filled the cache: both came from memory.
    if os.environ.get("LEDGER_FAST_PATHS", "on") != "off":
        assert metric(service, "ledger_replay_cache_hits_total") == hits + 2
    else:
        assert metric(service, "ledger_replay_cache_hits_total") == hits


def test_retention_leaves_a_tombstone_of_a_not_kept_call(service):
    rid, cid, tok = claimed(service)
    complete_raw(service, rid, cid, tok, BIG)
    service.sql("UPDATE requests SET created_at = created_at - interval '8 days'"
                " WHERE request_id = '%s'; UPDATE tool_calls SET created_at = created_at"
                " - interval '8 days', completed_at = completed_at - interval '8 days'"
                " WHERE request_id = '%s'" % (rid, rid))
    gc = subprocess.run([str(LEDGERD), "gc", "--database-url", service.database_url,
                         "--retention", "7d"], capture_output=True, text=True, timeout=60)
    assert gc.returncode == 0 and "removed" in gc.stdout, gc
    assert service.sql("SELECT outcome FROM tool_call_tombstones WHERE request_id = '%s'"
                       % rid) == [["succeeded"]]
    # (A claim would still be answered from the replay cache for up to a minute: the
    # times above were moved behind serve's back. The database says it is gone.)
    g = service.ledgerd.get(path(rid, cid), token=service.token("reviewer"))
    err = assert_error(g, 410, "result_expired")
    assert err["outcome"] == "succeeded"
