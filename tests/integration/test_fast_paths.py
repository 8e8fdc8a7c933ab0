"""The one-statement fast paths (ledger/store/fast.c, and claim_many and
complete_many in ledger/store/batch.c) answer exactly what the C decision
(ledger/core/decide.c) answers under the request's lock, with the SQL itself.

Two ledgerd processes share one database: the module's own, with its fast
paths on, and one started with `--fast-paths off`, where every call locks,
reads and lets the C decision choose. Every case seeds the same rows twice,
by SQL, under two request ids, makes the same call on each ledgerd and
compares everything a client or a reviewer can see: the status, the body
(ids and times normalised), the headers that matter, the tool_calls row,
the request, its attempts, the tombstone and the events appended.

The live attempt's deliver and finish (ledger/store/attempt_fast.c) are
compared the same way, on seeded requests and attempts.

Each case runs twice: alone (claim_fast, complete_fast, renew_fast,
attempt_deliver_fast, attempt_finish_fast) and in one batch, committed together while the only store worker was held on a row
lock (claim_many and complete_many over arrays, renew_fast inside the batch).
Where a fast statement writes, its event's time equals the time it wrote
into the row (one clock read), which the general path, reading the clock
once per statement, never does: that is how each case also checks which
path answered.
"""

import hashlib
import json
import subprocess
import threading
import time
from datetime import datetime

import pytest

from conftest import PGBIN, Ledgerd, new_id

# The module's ledgerd has the fast paths: one worker, so that it can be
# held, and room for every case in one batch. Both ledgerds keep results of
# up to 100 bytes whole (RESULT and every other result below fit; BIG does not).
KEEP = ("--max-result-bytes", "100")
LEDGERD_ARGS = ("--workers", "1", "--batch-max", "1024") + KEEP

TENANT = "t1"
CID = "call_01"
HOLDER = "holder-0123456789abcdef"  # the claim_id of the seeded holder
OTHER = "other-0123456789abcdef01"  # another execution's claim_id
CLAIM_LEASE = 40000  # the lease a claim asks for
RENEW_LEASE = 70000  # the lease a renewal asks for (not a claim's: told apart)
LIVE = 600  # seconds left of a seeded lease that runs
GONE = -100  # seconds since a seeded lease ran out
RESULT = '{"id": "msg-1",  "n": 1.50, "text": "h\\u00e9llo"}'  # stored text, not canonical
BIG = '{"report" :  "%s"}' % ("r" * 150)  # over --max-result-bytes: kept as its digest


def digest(text):
    """A result not kept: its length and SHA-256, as stored."""
    raw = text.encode()
    return len(raw), hashlib.sha256(raw).hexdigest()


def fingerprint(args):
    """The args_sha256 of plain JSON (ASCII strings, no numbers): its JCS form's SHA-256."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


ARGS = {"to": "a@example.com"}
SHA = fingerprint(ARGS)
SHA_B = fingerprint({"to": "b@example.com"})


# --- seeding: rows as SQL, every time relative to the seeding transaction's now() ---

def lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'%s'" % str(v).replace("'", "''")


def at(seconds):
    return "NULL" if seconds is None else "now() + interval '%d seconds'" % seconds


def request(status="open", attempts=0, max_attempts=None, revision=None, input_sha=None):
    closed = at(-60) if status != "open" else "NULL"
    return lambda rid: (
        "INSERT INTO requests (tenant, request_id, status, attempt_count, created_at, "
        "closed_at, max_attempts, model_revision, input_sha256) "
        "VALUES (%s, %s, %s, %d, %s, %s, %s, %s, %s)"
        % (lit(TENANT), lit(rid), lit(status), attempts, at(-3600), closed,
           lit(max_attempts), lit(revision), lit(input_sha)))


def first_delta(delivered):
    """The request past its first delta (after its attempts: none may follow it)."""
    return lambda rid: (
        "UPDATE requests SET first_delta_sent = true, phase = 'decode', "
        "delivered_output_tokens = %d WHERE tenant = %s AND request_id = %s"
        % (delivered, lit(TENANT), lit(rid)))


def attempt(aid="a1", epoch=1, state="live", lease=LIVE, delivered=0, outcome=None):
    ended = at(-30) if state not in ("live", "cancel_requested") else "NULL"
    return lambda rid: (
        "INSERT INTO attempts (tenant, request_id, attempt_id, epoch, replica, state, "
        "lease_until, revision_given, is_retry, created_at, ended_at, "
        "delivered_output_tokens, outcome) VALUES "
        "(%s, %s, %s, %d, 'replica-%d', %s, %s, false, %s, %s, %s, %d, %s)"
        % (lit(TENANT), lit(rid), lit(aid), epoch, epoch, lit(state), at(lease),
           lit(epoch > 1), at(-3000 + epoch), ended, delivered, lit(outcome)))


def call(state="in_progress", token=1, claim=HOLDER, attempt_id=None, owner="agent-1",
         tool="mail", sha=SHA, dedupes=False, lease=LIVE, args=None, outcome=None,
         result=None, completed_token=None, completed_by=None, cid=CID, not_kept=None):
    """A tool_calls row; a final state gets its outcome, RESULT and completion by default,
    or with @not_kept (bytes, sha256) no result but that digest."""
    final = state in ("succeeded", "failed")
    nbytes, digest_hex = not_kept or (None, None)
    if final:
        outcome = outcome or state
        result = None if not_kept else (result or RESULT)
        completed_token = completed_token or token
        completed_by = completed_by or "holder"
        lease = GONE if lease == LIVE else lease
    return lambda rid: (
        "INSERT INTO tool_calls (tenant, request_id, tool_call_id, tool, args_sha256, args, "
        "tool_dedupes, state, fencing_token, claim_id, attempt_id, owner, lease_until, "
        "renewed_at, outcome, result, result_bytes, result_sha256, completed_token, "
        "completed_by, completed_at, created_at) VALUES (%s)" % ", ".join([
            lit(TENANT), lit(rid), lit(cid), lit(tool), lit(sha), lit(args), lit(dedupes),
            lit(state), lit(token), lit(claim), lit(attempt_id), lit(owner), at(lease),
            at(-1800) if lease is not None else "NULL", lit(outcome), lit(result),
            lit(nbytes), lit(digest_hex), lit(completed_token), lit(completed_by),
            at(-1200) if final else "NULL", at(-2400)]))


def tombstone(sha=SHA, outcome="succeeded", expires=86400):
    return lambda rid: (
        "INSERT INTO tool_call_tombstones (tenant, request_id, tool_call_id, args_sha256, "
        "outcome, completed_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
        % (lit(TENANT), lit(rid), lit(CID), lit(sha), lit(outcome), at(-7200), at(expires)))


# --- the cases ---

class Case:
    """One seeded state and the calls made on it.

    @steps: (operation, body) pairs, body a dict or the exact text to send.
    @expect: what API.md says the last call answers: (status, code or body status).
    @fast: which fast statement must have written ("claim", "complete"), None: none.
    """

    def __init__(self, op, name, seed, steps, expect, fast=None, xfail_single=None,
                 xfail_batch=None):
        self.op = op
        self.name = "%s: %s" % (op, name)
        self.seed = seed
        self.steps = steps
        self.expect = expect
        self.fast = fast
        self.xfail_single = xfail_single
        self.xfail_batch = xfail_batch

    def seed_sql(self, rid):
        return [row(rid) for row in self.seed]


def claim_body(**kw):
    body = {"claim_id": OTHER, "tool": "mail", "args": ARGS, "owner": "agent-2",
            "lease_ms": CLAIM_LEASE}
    for k, v in kw.items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    return body


def completion(token=1, outcome="succeeded", result=None, retryable=None):
    """A completion's exact text: the result as stored (RESULT unless given)."""
    text = '{"fencing_token": %d, "outcome": "%s", "result": %s' % (
        token, outcome, RESULT if result is None else result)
    if retryable is not None:
        text += ', "retryable": %s' % ("true" if retryable else "false")
    return text + "}"


def completion_not_kept(token=1, outcome="succeeded", of=BIG, nbytes=None):
    """A completion that sends the digest of @of instead of the result."""
    n, hexdigest = digest(of)
    return ('{"fencing_token": %d, "outcome": "%s", "result_not_kept": '
            '{"bytes": %d, "sha256": "%s"}}' % (token, outcome, n if nbytes is None else nbytes,
                                                hexdigest))


def renewal(token=1):
    return {"fencing_token": token, "lease_ms": RENEW_LEASE}


def claim(name, seed, body, expect, **kw):
    return Case("claim", name, seed, [("claim", body)], expect, **kw)


def complete(name, seed, body, expect, **kw):
    return Case("complete", name, seed, [("complete", body)], expect, **kw)


def renew(name, seed, body, expect, **kw):
    return Case("renew", name, seed, [("renew", body)], expect, **kw)


live_attempt = [request(attempts=1), attempt()]

CLAIMS = [
    # 1: attempt_not_found
    claim("attempt_not_found: no such attempt of the request", live_attempt,
          claim_body(attempt_id="a9"), (404, "attempt_not_found")),
    claim("attempt_not_found: the request has no attempts", [],
          claim_body(attempt_id="a1"), (404, "attempt_not_found")),
    claim("attempt_not_found: before the replay of a settled call",
          [request(), call("succeeded")], claim_body(attempt_id="a1"),
          (404, "attempt_not_found")),
    # 2: attempt_required
    claim("attempt_required: a key nobody claimed", live_attempt, claim_body(),
          (409, "attempt_required")),
    claim("attempt_required: before the replay of a settled call",
          live_attempt + [call("succeeded", attempt_id="a1")], claim_body(),
          (409, "attempt_required")),
    claim("attempt_required: before a tombstone", live_attempt + [tombstone()], claim_body(),
          (409, "attempt_required")),
    # 3: args_mismatch, in its three forms
    claim("args_mismatch (args): a held call", [request(), call(sha=SHA_B)], claim_body(),
          (422, "args_mismatch")),
    claim("args_mismatch (tool): a held call", [request(), call(tool="sms")], claim_body(),
          (422, "args_mismatch")),
    claim("args_mismatch (tool_dedupes): a held call", [request(), call(dedupes=True)],
          claim_body(), (422, "args_mismatch")),
    claim("args_mismatch (args): a settled call, never replayed",
          [request(), call("succeeded", sha=SHA_B)], claim_body(), (422, "args_mismatch")),
    claim("args_mismatch (tool): a settled call", [request(), call("failed", tool="sms")],
          claim_body(), (422, "args_mismatch")),
    claim("args_mismatch (tool_dedupes): a settled call",
          [request(), call("succeeded", dedupes=True)], claim_body(), (422, "args_mismatch")),
    claim("args_mismatch (args): no args over a fingerprinted call", [request(), call()],
          claim_body(args=None), (422, "args_mismatch")),
    claim("args_mismatch (args): a tombstone, its request removed", [tombstone(sha=SHA_B)],
          claim_body(), (422, "args_mismatch")),
    claim("args_mismatch (args): a tombstone under its request",
          [request(), tombstone(sha=SHA_B)], claim_body(), (422, "args_mismatch")),
    claim("args_mismatch under the live attempt: divergence",
          live_attempt + [call(sha=SHA_B, attempt_id="a1")], claim_body(attempt_id="a1"),
          (422, "args_mismatch")),
    claim("args_mismatch under a fenced attempt changes nothing",
          [request(attempts=1), attempt(state="cancel_requested"),
           call("succeeded", sha=SHA_B, attempt_id="a1")],
          claim_body(attempt_id="a1"), (422, "args_mismatch")),
    # 4: replay
    claim("replay of a success", [request(), call("succeeded")], claim_body(),
          (200, "completed")),
    claim("replay of a failure", [request(), call("failed")], claim_body(), (200, "completed")),
    claim("replay of a late completion, anonymous claim",
          [request(), call("succeeded", token=2, completed_token=1, completed_by="late")],
          claim_body(claim_id=None), (200, "completed")),
    claim("replay of a resolved call, no tool and no args",
          [request(), call("succeeded", tool=None, sha=None, completed_by="resolve")],
          claim_body(tool=None, args=None), (200, "completed")),
    claim("replay under the live attempt", live_attempt + [call("succeeded", attempt_id="a1")],
          claim_body(attempt_id="a1"), (200, "completed")),
    claim("replay to a fenced attempt",
          [request(attempts=1), attempt(state="cancelled"), call("failed", attempt_id="a1")],
          claim_body(attempt_id="a1"), (200, "completed")),
    # 4: result_not_kept, where the replay would be
    claim("result_not_kept of a success", [request(), call("succeeded", not_kept=digest(BIG))],
          claim_body(), (409, "result_not_kept")),
    claim("result_not_kept of a failure, anonymous claim",
          [request(), call("failed", not_kept=digest(BIG))], claim_body(claim_id=None),
          (409, "result_not_kept")),
    claim("result_not_kept to the holder's own claim_id",
          [request(), call("succeeded", not_kept=digest(BIG))], claim_body(claim_id=HOLDER),
          (409, "result_not_kept")),
    claim("result_not_kept under the live attempt",
          live_attempt + [call("succeeded", attempt_id="a1", not_kept=digest(BIG))],
          claim_body(attempt_id="a1"), (409, "result_not_kept")),
    claim("result_not_kept to a fenced attempt",
          [request(attempts=1), attempt(state="cancelled"),
           call("succeeded", attempt_id="a1", not_kept=digest(BIG))],
          claim_body(attempt_id="a1"), (409, "result_not_kept")),
    claim("args_mismatch before result_not_kept",
          [request(), call("succeeded", sha=SHA_B, not_kept=digest(BIG))], claim_body(),
          (422, "args_mismatch")),
    claim("attempt_required before result_not_kept",
          live_attempt + [call("succeeded", attempt_id="a1", not_kept=digest(BIG))],
          claim_body(), (409, "attempt_required")),
    # 5: result_expired
    claim("result_expired: a tombstone, its request removed", [tombstone()], claim_body(),
          (410, "result_expired")),
    claim("result_expired: a failure's tombstone under its request",
          [request(), tombstone(outcome="failed")], claim_body(), (410, "result_expired")),
    claim("result_expired: before attempt_fenced",
          [request(attempts=1), attempt(state="cancel_requested"), tombstone()],
          claim_body(attempt_id="a1"), (410, "result_expired")),
    claim("a tombstone past its period: claimed anew", [tombstone(expires=-10)], claim_body(),
          (201, "claimed")),
    # 6: attempt_fenced
    claim("attempt_fenced: cancel requested", [request(attempts=1),
                                               attempt(state="cancel_requested")],
          claim_body(attempt_id="a1"), (409, "attempt_fenced")),
    claim("attempt_fenced: the attempt's lease ran out", [request(attempts=1),
                                                         attempt(lease=GONE)],
          claim_body(attempt_id="a1"), (409, "attempt_fenced")),
    claim("attempt_fenced: superseded",
          [request(attempts=2), attempt(state="superseded"), attempt("a2", 2)],
          claim_body(attempt_id="a1"), (409, "attempt_fenced")),
    claim("attempt_fenced: the request is closed",
          [request("completed", attempts=1), attempt(state="finished")],
          claim_body(attempt_id="a1"), (409, "attempt_fenced")),
    claim("attempt_fenced: its own held call",
          [request(attempts=1), attempt(state="dead"), call(attempt_id="a1")],
          claim_body(claim_id=HOLDER, attempt_id="a1"), (409, "attempt_fenced")),
    # 7: held by the same claim_id
    claim("held: the same claim_id again", [request(), call()], claim_body(claim_id=HOLDER),
          (200, "claimed")),
    claim("held: the same claim_id under the live attempt",
          live_attempt + [call(attempt_id="a1", token=3)],
          claim_body(claim_id=HOLDER, attempt_id="a1"), (200, "claimed")),
    # 8: in_progress
    claim("in_progress: another claim_id", [request(), call()], claim_body(),
          (409, "in_progress")),
    claim("in_progress: an anonymous claim", [request(), call()], claim_body(claim_id=None),
          (409, "in_progress")),
    claim("in_progress: an anonymous holder", [request(), call(claim=None)],
          claim_body(), (409, "in_progress")),
    claim("in_progress: held under the superseded attempt",
          [request(attempts=2), attempt(state="superseded"), attempt("a2", 2),
           call(attempt_id="a1", owner="agent-a1")],
          claim_body(attempt_id="a2"), (409, "in_progress")),
    # 9: outcome_unknown
    claim("outcome_unknown: the lease ran out", [request(), call(lease=GONE)], claim_body(),
          (409, "outcome_unknown")),
    claim("outcome_unknown: the same claim_id after its lease", [request(), call(lease=GONE)],
          claim_body(claim_id=HOLDER), (409, "outcome_unknown")),
    claim("outcome_unknown: no lease recorded", [request(), call(lease=None)], claim_body(),
          (409, "outcome_unknown")),
    # 10: new
    claim("new: no request yet", [], claim_body(), (201, "claimed"), fast="claim"),
    claim("new: a request without attempts, another call settled",
          [request(), call("succeeded", cid="call_02")], claim_body(), (201, "claimed"),
          fast="claim"),
    claim("new: anonymous, no tool, no args, default lease", [],
          {"owner": "agent-2"}, (201, "claimed"), fast="claim"),
    claim("new: store_args and tool_dedupes", [],
          claim_body(store_args=True, tool_dedupes=True), (201, "claimed"), fast="claim"),
    claim("new: under the live attempt", live_attempt, claim_body(attempt_id="a1"),
          (201, "claimed")),
    # 10: reclaim
    claim("reclaim after release", [request(), call("released")], claim_body(),
          (201, "claimed")),
    claim("reclaim after release, keeping the args", [request(), call("released", token=2)],
          claim_body(store_args=True), (201, "claimed")),
    claim("reclaim after release under the live attempt",
          live_attempt + [call("released", attempt_id="a1")], claim_body(attempt_id="a1"),
          (201, "claimed")),
    claim("reclaim of unknown when the tool dedupes",
          [request(), call(token=2, dedupes=True, lease=GONE)],
          claim_body(tool_dedupes=True), (201, "claimed")),
    claim("reclaim of unknown (dedupes) by its own claim_id",
          [request(), call(dedupes=True, lease=GONE)],
          claim_body(claim_id=HOLDER, tool_dedupes=True), (201, "claimed")),
]

COMPLETES = [
    complete("never claimed, no request", [], completion(), (404, "not_found")),
    complete("never claimed, under an existing request", [request()], completion(),
             (404, "not_found")),
    complete("a tombstone", [tombstone()], completion(), (410, "result_expired")),
    complete("stale: a token never issued", [request(), call()], completion(token=2),
             (409, "stale_token")),
    complete("stale: token 0", [request(), call()], completion(token=0), (409, "stale_token")),
    complete("stale: a token never issued, over a settled call",
             [request(), call("succeeded")], completion(token=5), (409, "stale_token")),
    complete("current holder succeeded", [request(), call()], completion(),
             (200, "completed"), fast="complete"),
    complete("current holder failed", [request(), call(token=3)],
             completion(token=3, outcome="failed", result='{"error":"bounced"}'),
             (200, "completed"), fast="complete"),
    complete("current holder failed retryably", [request(), call()],
             completion(outcome="failed", result="null", retryable=True), (200, "released")),
    complete("current holder, result kept byte for byte", [request(), call()],
             completion(result='{"b" :[1.50, 1e2, "\\u00e9\\n"],  "a":{}}'),
             (200, "completed"), fast="complete"),
    complete("current holder under the live attempt", live_attempt + [call(attempt_id="a1")],
             completion(), (200, "completed"), fast="complete"),
    complete("current holder under a fenced attempt: the effect happened",
             [request(attempts=1), attempt(state="cancel_requested"), call(attempt_id="a1")],
             completion(outcome="failed"), (200, "completed"), fast="complete"),
    complete("older holder, late success", [request(), call(token=2)], completion(token=1),
             (200, "completed")),
    complete("older holder, late failure", [request(), call(token=3, lease=GONE)],
             completion(token=2, outcome="failed"), (200, "completed")),
    complete("older holder, retryable failure", [request(), call(token=2)],
             completion(token=1, outcome="failed", retryable=True), (409, "stale_token")),
    complete("after the lease ran out: a final outcome is late", [request(), call(lease=GONE)],
             completion(), (200, "completed")),
    complete("after the lease ran out: retryable is stale", [request(), call(lease=GONE)],
             completion(outcome="failed", retryable=True), (409, "stale_token")),
    complete("no lease recorded: a final outcome is late", [request(), call(lease=None)],
             completion(), (200, "completed")),
    complete("after release: a final outcome is late", [request(), call("released")],
             completion(), (200, "completed")),
    complete("after release: the retryable failure again", [request(), call("released")],
             completion(outcome="failed", retryable=True), (200, "released")),
    complete("the same completion again", [request(), call("succeeded")], completion(),
             (200, "completed")),
    complete("the same late completion again",
             [request(), call("failed", token=2, completed_token=1, completed_by="late")],
             completion(token=1, outcome="failed"), (200, "completed")),
    complete("conflict: another result", [request(), call("succeeded")],
             completion(result='{"id":"msg-2"}'), (409, "already_completed")),
    complete("conflict: another outcome", [request(), call("succeeded")],
             completion(outcome="failed"), (409, "already_completed")),
    complete("conflict: another token",
             [request(), call("succeeded", token=2, completed_token=1, completed_by="late")],
             completion(token=2), (409, "already_completed")),
    complete("conflict: retryable after a final one", [request(), call("failed")],
             completion(outcome="failed", retryable=True), (409, "already_completed")),
    # results not kept: over --max-result-bytes, or sent as their digest
    complete("current holder, a result over the bound", [request(), call()],
             completion(result=BIG), (200, "completed"), fast="complete"),
    complete("current holder, result_not_kept", [request(), call()], completion_not_kept(),
             (200, "completed"), fast="complete"),
    complete("current holder failed, result_not_kept", [request(), call(token=2)],
             completion_not_kept(token=2, outcome="failed"), (200, "completed"),
             fast="complete"),
    complete("current holder under the live attempt, a result over the bound",
             live_attempt + [call(attempt_id="a1")], completion(result=BIG),
             (200, "completed"), fast="complete"),
    complete("older holder, late result_not_kept", [request(), call(token=2)],
             completion_not_kept(token=1), (200, "completed")),
    complete("the same not-kept completion again",
             [request(), call("succeeded", not_kept=digest(BIG))], completion_not_kept(),
             (200, "completed")),
    complete("the whole text of a not-kept result again",
             [request(), call("succeeded", not_kept=digest(BIG))], completion(result=BIG),
             (200, "completed")),
    complete("the digest of a result kept whole", [request(), call("succeeded")],
             completion_not_kept(of=RESULT), (200, "completed")),
    complete("conflict: another digest", [request(), call("succeeded", not_kept=digest(BIG))],
             completion_not_kept(of=BIG + " "), (409, "already_completed")),
    complete("conflict: another length", [request(), call("succeeded", not_kept=digest(BIG))],
             completion_not_kept(nbytes=len(BIG) + 1), (409, "already_completed")),
    complete("conflict: another text over the bound",
             [request(), call("succeeded", not_kept=digest(BIG))],
             completion(result=BIG.replace("r", "s")), (409, "already_completed")),
    complete("conflict: a digest of another text",
             [request(), call("succeeded")], completion_not_kept(of=RESULT + " "),
             (409, "already_completed")),
]

RENEWS = [
    renew("holder within its lease", [request(), call()], renewal(), (200, None)),
    renew("holder within its lease, token 4", [request(), call(token=4)], renewal(4),
          (200, None)),
    renew("holder under the live attempt", live_attempt + [call(attempt_id="a1")], renewal(),
          (200, None)),
    renew("holder outside the attempts of its request", live_attempt + [call()], renewal(),
          (200, None)),
    renew("stale: an older token", [request(), call(token=2)], renewal(1),
          (409, "stale_token")),
    renew("stale: a token never issued", [request(), call()], renewal(2),
          (409, "stale_token")),
    renew("stale: an older token under a fenced attempt",
          [request(attempts=1), attempt(state="cancelled"), call(token=2, attempt_id="a1")],
          renewal(1), (409, "stale_token")),
    renew("the lease ran out", [request(), call(lease=GONE)], renewal(),
          (409, "outcome_unknown")),
    renew("no lease recorded", [request(), call(lease=None)], renewal(),
          (409, "outcome_unknown")),
    renew("under a fenced attempt (cancel requested)",
          [request(attempts=1), attempt(state="cancel_requested"), call(attempt_id="a1")],
          renewal(), (409, "attempt_fenced")),
    renew("under an attempt whose lease ran out",
          [request(attempts=1), attempt(lease=GONE), call(attempt_id="a1")], renewal(),
          (409, "attempt_fenced")),
    renew("under a fenced attempt, its own lease run out too",
          [request(attempts=1), attempt(state="dead"), call(attempt_id="a1", lease=GONE)],
          renewal(), (409, "attempt_fenced")),
    renew("under an attempt that does not exist",
          [request(attempts=1), attempt(), call(attempt_id="a7")], renewal(),
          (409, "attempt_fenced")),
    renew("not found, no request", [], renewal(), (404, "not_found")),
    renew("not found, under an existing request", [request()], renewal(), (404, "not_found")),
    renew("a tombstone", [tombstone()], renewal(), (410, "result_expired")),
    renew("released", [request(), call("released")], renewal(), (409, "stale_token")),
    renew("settled", [request(), call("succeeded")], renewal(), (409, "stale_token")),
]


def deliver(name, seed, body, expect, aid="a1", **kw):
    return Case("deliver", name, seed, [("attempts/%s/deliver" % aid, body)], expect, **kw)


def finish(name, seed, body, expect, aid="a1", **kw):
    return Case("finish", name, seed, [("attempts/%s/finish" % aid, body)], expect, **kw)


SSE_B64 = "ZGF0YTogaGk="  # an answer's bytes: "data: hi"


def create(name, seed, body, expect, **kw):
    return Case("create", name, seed, [("attempts", body)], expect, **kw)


FIRST = {"attempt_id": "a1", "replica": "gpu-a/3", "model_revision": "m@1"}

CREATES = [
    create("the first attempt of a request nobody named", [], FIRST, (201, None),
           fast="create"),
    create("the first attempt, every field given", [],
           dict(FIRST, gateway="gw-1", lease_ms=45000, max_attempts=2,
                identity={"pod": "p-1", "n": 3}, input_sha256="ef" * 32),
           (201, None), fast="create"),
    create("the first attempt, no revision, no replica", [], {"attempt_id": "a1"},
           (201, None), fast="create"),
    create("the first attempt of a request whose calls are tombstones", [tombstone()],
           FIRST, (201, None), fast="create"),
    create("a request that exists, no attempts: the locked path's",
           [request(), call("succeeded")], FIRST, (201, None)),
    create("the same attempt again", [request(attempts=1), attempt(state="live")],
           {"attempt_id": "a1", "replica": "replica-1"}, (200, None)),
    create("another attempt past the request's budget",
           [request(attempts=1, max_attempts=1), attempt()], {"attempt_id": "a2"},
           (409, "retry_budget_exhausted")),
]

DELIVERS = [
    deliver("the first delta of the live attempt", live_attempt,
            {"delivered_output_tokens": 5}, (200, None), fast="deliver"),
    deliver("the first delta, no tokens given", live_attempt, {}, (200, None), fast="deliver"),
    deliver("a later delta: the counts only rise",
            [request(attempts=1), attempt(delivered=40), first_delta(40)], {"delivered_output_tokens": 12}, (200, None),
            fast="deliver"),
    deliver("a later delta, more tokens, request fields kept",
            [request(attempts=2, max_attempts=3, revision="m@1", input_sha="ab" * 32),
             attempt(state="superseded", lease=GONE), attempt("a2", 2, delivered=7),
             first_delta(40)],
            {"delivered_output_tokens": 90}, (200, None), aid="a2", fast="deliver"),
    deliver("fenced: the lease ran out", [request(attempts=1), attempt(lease=GONE)],
            {"delivered_output_tokens": 5}, (409, "attempt_fenced")),
    deliver("fenced: cancel requested", [request(attempts=1), attempt(state="cancel_requested")],
            {"delivered_output_tokens": 5}, (409, "attempt_fenced")),
    deliver("fenced: superseded",
            [request(attempts=2), attempt(state="superseded"), attempt("a2", 2)],
            {"delivered_output_tokens": 5}, (409, "attempt_fenced")),
    deliver("fenced: dead", [request(attempts=1), attempt(state="dead")],
            {"delivered_output_tokens": 5}, (409, "attempt_fenced")),
    deliver("fenced: the request is closed, its attempt stored live",
            [request("terminated", attempts=1), attempt()], {"delivered_output_tokens": 5},
            (409, "attempt_fenced")),
    deliver("fenced: the attempt finished",
            [request("completed", attempts=1), attempt(state="finished", outcome="completed")],
            {"delivered_output_tokens": 5}, (409, "attempt_fenced")),
    deliver("no such attempt", live_attempt, {"delivered_output_tokens": 5},
            (404, "attempt_not_found"), aid="a9"),
    deliver("no such request", [], {"delivered_output_tokens": 5}, (404, "attempt_not_found")),
]

FINISHES = [
    finish("completed by the live attempt", live_attempt,
           {"outcome": "completed", "delivered_output_tokens": 64}, (200, None),
           fast="finish"),
    finish("completed after the first delta, with a reason",
           [request(attempts=1), attempt(delivered=70), first_delta(70)],
           {"outcome": "completed", "delivered_output_tokens": 64, "reason": "stop"},
           (200, None), fast="finish"),
    finish("completed, no tokens given, request fields kept",
           [request(attempts=2, max_attempts=4, revision="m@2", input_sha="cd" * 32),
            attempt(state="superseded", lease=GONE), attempt("a2", 2, delivered=3)],
           {"outcome": "completed"}, (200, None), aid="a2", fast="finish"),
    finish("failed: the request stays open", live_attempt,
           {"outcome": "failed", "delivered_output_tokens": 2, "reason": "oom"}, (200, None),
           fast="finish"),
    finish("failed with a client error: the locked path's", live_attempt,
           {"outcome": "failed", "client_error": {"error": {"code": "bad_input"}}},
           (200, None)),
    finish("completed with an answer kept", live_attempt,
           {"outcome": "completed", "answer": {"status": 200, "content_type": "text/plain",
                                                "body_b64": SSE_B64}}, (200, None),
           fast="finish"),
    finish("completed with an answer, after the first delta",
           [request(attempts=1), attempt(delivered=5), first_delta(5)],
           {"outcome": "completed", "delivered_output_tokens": 9,
            "answer": {"status": 200, "content_type": "text/event-stream",
                       "body_b64": SSE_B64}}, (200, None), fast="finish"),
    finish("completed with an answer, fenced: nothing kept",
           [request(attempts=1), attempt(lease=GONE)],
           {"outcome": "completed", "answer": {"status": 200, "content_type": "text/plain",
                                                "body_b64": SSE_B64}}, (409, "attempt_fenced")),
    finish("the same finish again",
           [request("completed", attempts=1), attempt(state="finished", outcome="completed")],
           {"outcome": "completed"}, (200, None)),
    finish("failed after finished: fenced",
           [request("completed", attempts=1), attempt(state="finished", outcome="completed")],
           {"outcome": "failed"}, (409, "attempt_fenced")),
    finish("fenced: the lease ran out", [request(attempts=1), attempt(lease=GONE)],
           {"outcome": "completed"}, (409, "attempt_fenced")),
    finish("fenced: dead", [request(attempts=1), attempt(state="dead")],
           {"outcome": "completed"}, (409, "attempt_fenced")),
    finish("fenced: the request was abandoned",
           [request("abandoned", attempts=1), attempt()], {"outcome": "completed"},
           (409, "attempt_fenced")),
    finish("no such attempt", live_attempt, {"outcome": "completed"},
           (404, "attempt_not_found"), aid="a9"),
]

# Sequences through the API on one seeded state: the fast side's answers
# then come from what its fast paths (and its replay cache) wrote.
SEQUENCES = [
    Case("sequence", "complete, then the replay, then other args",
         [request(), call()],
         [("complete", completion()), ("claim", claim_body()),
          ("claim", claim_body(args={"to": "b@example.com"}))], (422, "args_mismatch")),
    Case("sequence", "complete twice, then differently",
         [request(), call()],
         [("complete", completion()), ("complete", completion()),
          ("complete", completion(outcome="failed"))], (409, "already_completed")),
    Case("sequence", "claim, the same claim again, another claim", [],
         [("claim", claim_body(claim_id=HOLDER)), ("claim", claim_body(claim_id=HOLDER)),
          ("claim", claim_body())], (409, "in_progress")),
    Case("sequence", "complete over the bound, then the claims (the replay cache)",
         [request(), call()],
         [("complete", completion(result=BIG)), ("claim", claim_body()),
          ("claim", claim_body(claim_id=None))], (409, "result_not_kept")),
    Case("sequence", "complete with result_not_kept, twice, then the whole text, then claim",
         [request(), call()],
         [("complete", completion_not_kept()), ("complete", completion_not_kept()),
          ("complete", completion(result=BIG)), ("claim", claim_body())],
         (409, "result_not_kept")),
    Case("sequence", "claim, renew, release by a retryable failure, reclaim, complete", [],
         [("claim", claim_body(claim_id=HOLDER)), ("renew", renewal()),
          ("complete", completion(outcome="failed", result="null", retryable=True)),
          ("claim", claim_body()), ("complete", completion(token=2)),
          ("claim", claim_body(claim_id=None))], (200, "completed")),
]

SEQUENCES += [
    Case("sequence", "deliver, deliver, finish, finish, deliver", live_attempt,
         [("attempts/a1/deliver", {"delivered_output_tokens": 1}),
          ("attempts/a1/deliver", {"delivered_output_tokens": 9}),
          ("attempts/a1/finish", {"outcome": "completed", "delivered_output_tokens": 8}),
          ("attempts/a1/finish", {"outcome": "completed"}),
          ("attempts/a1/deliver", {"delivered_output_tokens": 10})],
         (409, "attempt_fenced")),
    Case("sequence", "failed finish, again, then a deliver", live_attempt,
         [("attempts/a1/finish", {"outcome": "failed", "delivered_output_tokens": 2}),
          ("attempts/a1/finish", {"outcome": "failed"}),
          ("attempts/a1/deliver", {"delivered_output_tokens": 3})],
         (409, "attempt_fenced")),
]

SEQUENCES += [
    Case("sequence", "begin, deliver, finish: the whole cycle", [],
         [("attempts", FIRST),
          ("attempts/a1/deliver", {"delivered_output_tokens": 0}),
          ("attempts/a1/finish", {"outcome": "completed", "delivered_output_tokens": 64})],
         (200, None)),
    Case("sequence", "begin twice, then deliver", [],
         [("attempts", FIRST), ("attempts", FIRST),
          ("attempts/a1/deliver", {"delivered_output_tokens": 2})], (200, None)),
]

SINGLE_CASES = CLAIMS + COMPLETES + RENEWS + CREATES + DELIVERS + FINISHES + SEQUENCES
BATCH_CASES = CLAIMS + COMPLETES + RENEWS + CREATES + DELIVERS + FINISHES


def _unique(cases):
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "two cases share a name"
    return cases


_unique(SINGLE_CASES)


# --- the database, by psql ---

def psql(service, script, appname="test_fast_paths"):
    """Runs @script in one transaction; returns its output lines (tuples only)."""
    c = service.cluster
    argv = [str(PGBIN / "psql"), "-h", str(c.dir), "-p", str(c.port), "-U", c.user,
            "-d", "dbname=%s application_name=%s" % (service.dbname, appname),
            "-v", "ON_ERROR_STOP=1", "-qAtX", "-F", "\t", "-1", "-f", "-"]
    if c.as_root:
        argv = ["runuser", "-u", "postgres", "--"] + argv
    out = subprocess.run(argv, input=script, capture_output=True, text=True, cwd=c.dir,
                         timeout=60)
    assert out.returncode == 0, "psql failed: %s" % out.stderr
    return [line for line in out.stdout.splitlines() if line != ""]


def seed(service, rids_and_cases):
    """Seeds every case under its request ids in one transaction; returns its now() in ms."""
    stmts = []
    for rid, case in rids_and_cases:
        stmts += case.seed_sql(rid)
    script = ";\n".join(stmts + ["SELECT extract(epoch FROM now()) * 1000"]) + ";\n"
    return float(psql(service, script)[-1])


# A call's row may carry its claim's and its completion's events, and an
# attempt's row its own (the fast paths write them there, the general path
# as rows of event_log): they are compared as events, through the view
# that reads them all.
STATE_SQL = """
SELECT r.rid, json_build_object(
  'request', (SELECT to_jsonb(q) - 'tenant' FROM requests q
              WHERE q.tenant = '%(t)s' AND q.request_id = r.rid),
  'attempts', (SELECT json_agg(to_jsonb(a) - 'tenant' - 'created_seq' - 'created_detail'
                      - 'first_delta_seq' - 'first_delta_at' - 'first_delta_tokens'
                      - 'finished_seq' - 'finished_at' - 'finished_detail' - 'completed_seq'
                      ORDER BY a.epoch) FROM attempts a
               WHERE a.tenant = '%(t)s' AND a.request_id = r.rid),
  'calls', (SELECT json_object_agg(c.tool_call_id, to_jsonb(c) - 'tenant' - 'claimed_seq'
                   - 'claimed_detail' - 'completed_seq') FROM tool_calls c
            WHERE c.tenant = '%(t)s' AND c.request_id = r.rid),
  'tombstone', (SELECT to_jsonb(s) - 'tenant' FROM tool_call_tombstones s
                WHERE s.tenant = '%(t)s' AND s.request_id = r.rid),
  'answer', (SELECT to_jsonb(n) - 'tenant' - 'request_id' FROM answers n
             WHERE n.tenant = '%(t)s' AND n.request_id = r.rid),
  'events', (SELECT json_agg(json_build_object('type', e.type, 'attempt_id', e.attempt_id,
                    'tool_call_id', e.tool_call_id, 'detail', e.detail, 'at', e.at)
                    ORDER BY e.seq) FROM events e
             WHERE e.tenant = '%(t)s' AND e.request_id = r.rid))
FROM unnest(ARRAY[%(rids)s]::text[]) AS r(rid);
"""


def state(service, rids):
    """Everything stored under each of @rids, as JSON: {rid: {...}}."""
    out = {}
    for line in psql(service, STATE_SQL % {"t": TENANT,
                                           "rids": ", ".join(lit(r) for r in rids)}):
        rid, doc = line.split("\t", 1)
        out[rid] = doc
    return out


# --- normalising what each side saw ---

TIMESTAMPS = {"created_at", "lease_until", "renewed_at", "completed_at", "expires_at",
              "closed_at", "ended_at", "at"}
DURATIONS = {"lease_ms", "lease_ms_left", "retry_after_ms"}


def epoch_ms(text):
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text).timestamp() * 1000


class Near:
    """A time, in ms since the seeding transaction began, equal to another within @tol.

    Times that ledgerd wrote differ between the two sides by how far apart
    their calls ran; seeded times are exact and whole seconds apart."""

    def __init__(self, ms, tol, raw=None):
        self.ms, self.tol, self.raw = ms, tol, raw

    def __eq__(self, other):
        if not isinstance(other, Near):
            return False
        if self.raw is not None and self.raw == other.raw:
            return True
        return abs(self.ms - other.ms) <= max(self.tol, other.tol)

    def __repr__(self):
        if self.raw is not None:
            return "%r (deadline at %+.0f ms)" % (self.raw, self.ms)
        return "t%+.0f ms" % self.ms


def norm_body(text, rid, t_sent, s_ms, tol):
    """The body with the request id and times made comparable across the two sides."""
    try:
        doc = json.loads(text.replace(rid, "<rid>"))
    except ValueError:
        return text

    def walk(v, key=None):
        if isinstance(v, dict):
            return {k: walk(x, k) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if key in TIMESTAMPS and isinstance(v, str):
            return Near(epoch_ms(v) - s_ms, tol)
        if key in DURATIONS and isinstance(v, int):
            # A duration counts from the database's clock during the call.
            return Near(t_sent + v - s_ms, tol, raw=v)
        return v

    return walk(doc)


def norm_state(text, rid, before_text, before_rid, s_ms, tol):
    """The rows after the calls: unchanged times say so, written ones are Near."""
    doc = json.loads(text.replace(rid, "<rid>"))
    before = json.loads(before_text.replace(before_rid, "<rid>"))
    ats = [e.pop("at") for e in doc["events"] or []]

    def walk(v, b, key=None):
        if isinstance(v, dict):
            bd = b if isinstance(b, dict) else {}
            return {k: walk(x, bd.get(k), k) for k, x in v.items()}
        if isinstance(v, list):
            bl = b if isinstance(b, list) else []
            return [walk(x, bl[i] if i < len(bl) else None) for i, x in enumerate(v)]
        if key in TIMESTAMPS and isinstance(v, str):
            return "(as seeded)" if v == b else Near(epoch_ms(v) - s_ms, tol)
        return v

    return walk(doc, before), ats


def which_path(obs):
    """'one statement' when a claimed or completed event was written at exactly the
    time written into the row (one clock read: a fast statement), else 'general'.
    Of an attempt's finish: when attempt_finished was written at exactly its
    attempt's ended_at; of its creation: attempt_created at its created_at. (A deliver writes no time into a row: None.)"""
    st = obs["state"]
    ended = {a["attempt_id"]: a.get("ended_at") for a in obs["raw_attempts"]}
    created = {a["attempt_id"]: a.get("created_at") for a in obs["raw_attempts"]}
    for ev, at_ in zip(st["events"] or [], obs["event_at"]):
        if ev["type"] == "attempt_finished" and ev["attempt_id"] in ended:
            return "one statement" if at_ == ended[ev["attempt_id"]] else "general"
        if ev["type"] == "attempt_created" and ev["attempt_id"] in created:
            return "one statement" if at_ == created[ev["attempt_id"]] else "general"
    call_row = (st.get("calls") or {}).get(CID)
    for ev, at_ in zip(st["events"] or [], obs["event_at"]):
        if call_row is None:
            break
        if ev["type"] == "claimed" and isinstance(at_, str):
            return "one statement" if at_ == obs["raw_call"].get("created_at") else "general"
        if ev["type"] == "completed":
            return "one statement" if at_ == obs["raw_call"].get("completed_at") else "general"
    return None


# --- running the cases ---

def send(led, token, rid, step):
    op, body = step
    if op.startswith("attempts"):  # an attempt's own call, or POST attempts
        path = "/v1/requests/%s/%s" % (rid, op)
        token = token.router
    else:
        path = "/v1/requests/%s/tool-calls/%s/%s" % (rid, CID, op)
        token = token.agent
    kw = {"raw": body.encode()} if isinstance(body, str) else {"body": body}
    t_sent = time.time() * 1000
    r = led.post(path, token=token, **kw)
    return {"t_sent": t_sent, "status": r.status, "body": r.body,
            "Idempotent-Replayed": r.header("Idempotent-Replayed"),
            "Retry-After": r.header("Retry-After") is not None}


def observe(answers, rid, after, before, s_ms, tol):
    raw_after = json.loads(after)
    rows, event_at = norm_state(after, rid, before[0], before[1], s_ms, tol)
    obs = {
        "answers": [{"status": a["status"],
                     "body": norm_body(a["body"], rid, a["t_sent"], s_ms, tol),
                     "Idempotent-Replayed": a["Idempotent-Replayed"],
                     "Retry-After present": a["Retry-After"]} for a in answers],
        "state": rows,
        "event_at": event_at,
        "raw_call": (raw_after.get("calls") or {}).get(CID) or {},
        "raw_attempts": raw_after.get("attempts") or [],
    }
    return obs


def differences(a, b, path=""):
    """Where @a (fast) and @b (general) differ, one line each."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append("%s.%s: fast path %r, general path %r"
                           % (path, k, a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                out += differences(a[k], b[k], "%s.%s" % (path, k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, "%s[%d]" % (path, i))
        return out
    return [] if a == b else ["%s: fast path %r, general path %r" % (path or ".", a, b)]


class Run:
    """What both sides answered and stored for each case of one phase."""

    def __init__(self):
        self.fast, self.general = {}, {}
        self.error = None


def pair_ids(cases):
    return [(c, new_id("fast"), new_id("general")) for c in cases]


@pytest.fixture(scope="module")
def general(service, tmp_path_factory):
    """The same database through a ledgerd where every call decides in C, under the lock."""
    led = Ledgerd(service.database_url,
                  tmp_path_factory.mktemp("general") / "ledgerd.log",
                  extra_args=["--fast-paths", "off"] + list(KEEP))
    yield led
    led.stop()


class Tokens:
    """The agent's token for tool calls, the router's for attempts."""

    def __init__(self, service):
        self.agent = service.token("agent", TENANT)
        self.router = service.token("router", TENANT)


@pytest.fixture(scope="module")
def token(service):
    return Tokens(service)


def collect(service, ids, answers_fast, answers_general, before, s_ms, tol):
    run = Run()
    after = state(service, [r for _, f, g in ids for r in (f, g)])
    for case, f, g in ids:
        run.fast[case.name] = observe(answers_fast[case.name], f, after[f], (before[f], f),
                                      s_ms, tol)
        run.general[case.name] = observe(answers_general[case.name], g, after[g],
                                         (before[g], g), s_ms, tol)
    return run


@pytest.fixture(scope="module")
def single(service, general, token):
    """Every case alone: the fast ledgerd's calls each run their own statement."""
    ids = pair_ids(SINGLE_CASES)
    s_ms = seed(service, [(r, c) for c, f, g in ids for r in (f, g)])
    before = state(service, [r for _, f, g in ids for r in (f, g)])
    fast_answers, general_answers = {}, {}
    for case, f, g in ids:
        fast_answers[case.name] = [send(service.ledgerd, token, f, s) for s in case.steps]
        general_answers[case.name] = [send(general, token, g, s) for s in case.steps]
    return collect(service, ids, fast_answers, general_answers, before, s_ms, tol=1500)


def metric(led, name):
    for line in led.get("/metrics").body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric %s" % name)


def wait_for(what, cond, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for %s" % what)


class RowLock:
    """A session that holds a request's row lock until release()."""

    def __init__(self, service, rid):
        c = service.cluster
        argv = [str(PGBIN / "psql"), "-h", str(c.dir), "-p", str(c.port), "-U", c.user,
                "-d", "dbname=%s application_name=fastpath_lock" % service.dbname,
                "-v", "ON_ERROR_STOP=1", "-qAtX"]
        if c.as_root:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, cwd=c.dir)
        self.proc.stdin.write("BEGIN;\nSELECT 1 FROM requests WHERE tenant = %s AND "
                              "request_id = %s FOR UPDATE;\n" % (lit(TENANT), lit(rid)))
        self.proc.stdin.flush()
        try:
            wait_for("the row lock", lambda: psql(
                service, "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                "'fastpath_lock' AND state = 'idle in transaction'") == ["1"])
        except AssertionError:
            self.proc.kill()
            raise

    def release(self):
        self.proc.stdin.write("COMMIT;\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=15) == 0, self.proc.stderr.read()


def concurrently(led, token, ids, answers, side):
    """Sends every case's call at once to @led, under the request ids of @side
    (0: fast, 1: general), one connection each; returns the threads."""
    go = threading.Barrier(len(ids))

    def one(case, rid):
        go.wait()
        answers[case.name] = [send(led, token, rid, case.steps[0])]

    threads = [threading.Thread(target=one, args=(c, (f, g)[side])) for c, f, g in ids]
    for t in threads:
        t.start()
    return threads


def batchable(case):
    """Whether the call has a fast path to join a batch with (a claim under an attempt has none)."""
    body = case.steps[0][1]
    if case.op == "finish":  # a client error, or an answer that ends nothing: the locked path's
        return "client_error" not in body and (
            "answer" not in body or body["outcome"] == "completed")
    return not (case.op == "claim" and "attempt_id" in body)


@pytest.fixture(scope="module")
def batch(service, general, token):
    """Every single-call case at once on the fast ledgerd, committed in one batch."""
    led = service.ledgerd
    ids = pair_ids(BATCH_CASES)
    s_ms = seed(service, [(r, c) for c, f, g in ids for r in (f, g)])
    before = state(service, [r for _, f, g in ids for r in (f, g)])

    # Hold the only worker: a claim under a request this session has locked.
    blocker = new_id("blocker")
    assert send(led, token, blocker, ("claim", claim_body()))["status"] == 201
    lock = RowLock(service, blocker)
    held = threading.Thread(target=send, args=(led, token, blocker,
                                               ("claim", claim_body(tool="other"))))
    held.start()
    wait_for("the worker to wait on the lock", lambda: psql(
        service, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'") == ["1"])

    batches = metric(led, "ledger_store_batches_total")
    batched = metric(led, "ledger_store_batched_calls_total")
    fast_answers, general_answers = {}, {}
    threads = concurrently(led, token, ids, fast_answers, 0)
    try:
        wait_for("every call to queue", lambda: metric(
            led, "ledger_store_queue_depth") == len(ids))
        # The general side meanwhile, at once too, so that both write at about
        # the same time (it commits each call alone: no batches without fast paths).
        for t in concurrently(general, token, ids, general_answers, 1):
            t.join(timeout=30)
    finally:
        lock.release()
    for t in threads:
        t.join(timeout=30)
    held.join(timeout=30)
    run = collect(service, ids, fast_answers, general_answers, before, s_ms, tol=5000)
    run.batches = metric(led, "ledger_store_batches_total") - batches
    run.batched = metric(led, "ledger_store_batched_calls_total") - batched
    run.offered = [c for c, f, g in ids if batchable(c)]
    return run


# --- the tests ---

def check(case, run, phase):
    fast, gen = run.fast[case.name], run.general[case.name]
    diff = differences({"answers": fast["answers"], "state": fast["state"]},
                       {"answers": gen["answers"], "state": gen["state"]})
    assert not diff, "%s (%s): the fast path and the C decision disagree:\n  %s" % (
        case.name, phase, "\n  ".join(diff))
    # The general side is the C decision: it answers what API.md says.
    last = gen["answers"][-1]
    status, word = case.expect
    got = last["body"]
    got_word = None
    if isinstance(got, dict):
        got_word = got["error"]["code"] if "error" in got else got.get("status")
    assert (last["status"], got_word) == (status, word), (
        "%s (%s): the general path answered %s %s, API.md says %s %s"
        % (case.name, phase, last["status"], got_word, status, word))
    # And the fast side really took the statement under test, where one writes.
    assert which_path(gen) in (None, "general"), "%s: the general side used a fast path" % (
        case.name)
    if case.op == "deliver":
        pass  # a deliver leaves no time to tell the paths apart by
    elif case.op != "sequence":
        want = "one statement" if case.fast else which_path(gen)
        assert which_path(fast) == want, "%s (%s): answered by the %s path, not the %s" % (
            case.name, phase, which_path(fast), want)


def params(cases, phase):
    out = []
    for c in cases:
        reason = c.xfail_single if phase == "single" else c.xfail_batch
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(c, id=c.name, marks=marks))
    return out


@pytest.mark.parametrize("case", params(SINGLE_CASES, "single"))
def test_alone_the_fast_path_answers_as_the_c_decision(case, single):
    check(case, single, "alone")


@pytest.mark.parametrize("case", params(BATCH_CASES, "batch"))
def test_in_a_batch_the_fast_path_answers_as_the_c_decision(case, batch):
    check(case, batch, "batched")


def test_the_batch_really_went_over_arrays(batch):
    claims = [c for c in batch.offered if c.op == "claim"]
    completes = [c for c in batch.offered if c.op == "complete"]
    # BATCH_MANY_MIN is 4: from 4 calls of a kind on, claim_many / complete_many run.
    assert len(claims) >= 4 and len(completes) >= 4
    assert batch.batches == 1, "the cases went in %d batches, not one" % batch.batches
    assert batch.batched == len(batch.offered), (
        "%d calls committed together, %d offered" % (batch.batched, len(batch.offered)))
