"""What the HTTP suites share: paths, a claim, the checks of the error
envelope, fingerprints, and a router with the calls it makes.

A helper lives here as soon as two test files need it; one only a single
file needs stays in that file. The module is imported by name (tests/http is
on sys.path for its test files, as tests/ is for conftest), so its name must
differ from every other helper module of tests/.
"""

import hashlib
import json
import math
import re

from conftest import claim_id, new_id

TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

# What every 200 answer of a failover holds.
ANSWER_KEYS = {"action", "request_id", "attempt_id", "signal", "source_state", "request_status"}


# --- paths and calls ----------------------------------------------------------


def path(rid, cid, action=None):
    """The path of tool call @cid of request @rid, or of one of its actions."""
    p = "/v1/requests/%s/tool-calls/%s" % (rid, cid)
    return p + "/" + action if action else p


def key():
    """A fresh (request id, tool call id)."""
    return new_id("r"), new_id("c")


def claim(service, rid, cid, body=None, token=None, raw=None):
    """POSTs a claim with @body (or the bytes @raw) as an agent unless @token is given."""
    return service.ledgerd.post(path(rid, cid, "claim"), {} if body is None else body,
                                token=token or service.token("agent"), raw=raw)


def fingerprint(obj):
    """SHA-256 of the canonical form, for ASCII strings and integers of at most
    21 digits only (whose canonical form is their json.dumps text)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def result_text_of(body):
    """The raw text after "result": in a reply body (no re-serialisation)."""
    m = re.search(r'"result"\s*:\s*', body)
    assert m, body
    return body[m.end():]


# --- the error envelope -------------------------------------------------------


def leases_as_asked(got, asked):
    """A lease in an answer is what is left of the one asked for as the answer
    went out: never more, and short of it only by the time the call took."""
    return asked - 2000 < got <= asked


def assert_error(r, status, code, field=None):
    """@r is the envelope {"error": {"code", "message", ...}} with @status and
    @code (and, unless @field is None, "field": @field); returns the error object."""
    assert r.status == status, r
    err = r.json["error"]
    assert err["code"] == code, r
    assert isinstance(err["message"], str) and err["message"], r
    if field is not None:
        assert err.get("field") == field, r
    return err


def assert_only_error(r, status, code, field=None):
    """assert_error(), and the body holds nothing beside "error"."""
    assert r.status == status, r
    assert set(r.json) == {"error"}, r
    return assert_error(r, status, code, field)


def assert_retry_after(r, err, most_ms):
    """@err's retry_after_ms is within (0, @most_ms] and Retry-After is its whole seconds."""
    assert 0 < err["retry_after_ms"] <= most_ms, err
    assert r.header("Retry-After") == str(math.ceil(err["retry_after_ms"] / 1000)), r.headers


# --- failover answers ---------------------------------------------------------


def answer(r, action):
    """The 200 answer of a failover with @action; returns its body."""
    assert r.status == 200, r
    b = r.json
    assert b["action"] == action, b
    assert ANSWER_KEYS <= set(b), b
    return b


# --- a router -----------------------------------------------------------------


class Router:
    """A router of a tenant of its own, with the calls it makes."""

    def __init__(self, service, role="router", tenant=None):
        self.service = service
        self.tenant = tenant or new_id("t")
        self.tok = service.token(role, self.tenant)

    def post(self, path, body=None, token=None, raw=None):
        return self.service.ledgerd.post(path, {} if body is None else body,
                                         token=token or self.tok, raw=raw)

    # attempts
    def create(self, rid, aid, token=None, **fields):
        body = {"attempt_id": aid}
        body.update(fields)
        return self.post("/v1/requests/%s/attempts" % rid, body, token)

    def act(self, rid, aid, action, body=None, token=None):
        return self.post("/v1/requests/%s/attempts/%s/%s" % (rid, aid, action), body, token)

    def renew(self, rid, aid, lease_ms=None):
        return self.act(rid, aid, "renew", {} if lease_ms is None else {"lease_ms": lease_ms})

    def deliver(self, rid, aid, n=0):
        return self.act(rid, aid, "deliver", {"delivered_output_tokens": n})

    def cancel(self, rid, aid, reason="test"):
        return self.act(rid, aid, "cancel", {"reason": reason})

    def ack(self, rid, aid):
        return self.act(rid, aid, "cancel-ack", {})

    def finish(self, rid, aid, outcome="completed", **kw):
        body = {"outcome": outcome}
        body.update(kw)
        return self.act(rid, aid, "finish", body)

    def failover(self, rid, aid, signal, next_aid=None, raw=None, **kw):
        body = {"attempt_id": aid, "signal": signal}
        if next_aid is not None:
            body["next_attempt"] = {"attempt_id": next_aid, "replica": "gpu-next"}
        body.update(kw)
        return self.post("/v1/requests/%s/failover" % rid, body, raw=raw)

    # tool calls
    def claim(self, rid, cid, **body):
        body.setdefault("claim_id", claim_id())
        return self.post("/v1/requests/%s/tool-calls/%s/claim" % (rid, cid), body)

    def call(self, rid, cid, action, body=None, raw=None):
        return self.post("/v1/requests/%s/tool-calls/%s/%s" % (rid, cid, action), body, raw=raw)

    def complete(self, rid, cid, tok, outcome="succeeded", result=None, retryable=False):
        return self.call(rid, cid, "complete", {"fencing_token": tok, "outcome": outcome,
                                                "result": result, "retryable": retryable})

    # the database
    def sql(self, query):
        return self.service.sql(query)

    def attempts(self, rid):
        """{attempt_id: (epoch, stored state)} of the request."""
        rows = self.sql("SELECT attempt_id, epoch, state FROM attempts WHERE tenant = '%s'"
                        " AND request_id = '%s' ORDER BY epoch" % (self.tenant, rid))
        return {a: (int(e), s) for a, e, s in rows}

    def live_count(self, rid):
        return int(self.sql("SELECT count(*) FROM attempts WHERE tenant = '%s' AND"
                            " request_id = '%s' AND state = 'live'" % (self.tenant, rid))[0][0])

    def request(self, rid):
        """The request's stored row as a dict, or None."""
        rows = self.sql("SELECT status, phase, first_delta_sent, delivered_output_tokens,"
                        " attempt_count, max_attempts, coalesce(model_revision, ''),"
                        " coalesce(client_error, '') FROM requests WHERE tenant = '%s'"
                        " AND request_id = '%s'" % (self.tenant, rid))
        if not rows:
            return None
        s, ph, fd, d, n, m, rev, ce = rows[0]
        return {"status": s, "phase": ph, "first_delta_sent": fd == "t",
                "delivered_output_tokens": int(d), "attempts": int(n),
                "max_attempts": int(m) if m else None, "model_revision": rev or None,
                "client_error": json.loads(ce) if ce else None}

    def events(self, rid):
        """[(type, attempt_id, tool_call_id, detail)] in order."""
        rows = self.sql("SELECT type, coalesce(attempt_id, ''), coalesce(tool_call_id, ''),"
                        " detail::text FROM events WHERE tenant = '%s' AND request_id = '%s'"
                        " ORDER BY seq" % (self.tenant, rid))
        return [(t, a, c, json.loads(d)) for t, a, c, d in rows]

    def decisions(self, rid):
        """Failover decision events: [(attempt_id, detail)]."""
        return [(a, d) for t, a, _, d in self.events(rid) if t == "failover_decision"]

    def recorded(self, rid):
        """The failover decisions stored for the request."""
        return int(self.sql("SELECT count(*) FROM failover_decisions WHERE tenant = '%s' AND"
                            " request_id = '%s'" % (self.tenant, rid))[0][0])

    def count(self, table, rid):
        return int(self.sql("SELECT count(*) FROM %s WHERE tenant = '%s' AND request_id = '%s'"
                            % (table, self.tenant, rid))[0][0])

    # shortcuts
    def started_with_body(self, **fields):
        """A fresh request with a live first attempt: (rid, aid, 201 body)."""
        rid, aid = new_id("r"), new_id("a")
        r = self.create(rid, aid, **fields)
        assert r.status == 201, r
        return rid, aid, r.json

    def started(self, **fields):
        """A fresh request with a live first attempt: (rid, aid)."""
        rid, aid, _ = self.started_with_body(**fields)
        return rid, aid

    def claimed(self, rid, aid, cid=None, **fields):
        """A claim under @aid: (cid, fencing_token)."""
        cid = cid or new_id("c")
        r = self.claim(rid, cid, attempt_id=aid, **fields)
        assert r.status == 201, r
        return cid, r.json["fencing_token"]

    def failed(self, rid, aid):
        """Ends @aid with finish failed: it no longer blocks, the request stays open."""
        r = self.finish(rid, aid, "failed")
        assert r.status == 200 and r.json["state"] == "failed", r
        assert r.json["request"]["status"] == "open", r

    def failed_over(self, rid, aid, **next_fields):
        """retry_prefill from @aid (replica_exited) to a new attempt; returns its id."""
        nxt = new_id("a")
        body = {"attempt_id": nxt}
        body.update(next_fields)
        answer(self.failover(rid, aid, "replica_exited", next_attempt=body), "retry_prefill")
        return nxt
