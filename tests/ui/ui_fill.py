"""The incident the browser tests review, written through ledgerd's API.

Every scenario is made by real calls, as a router and its agents make them:
attempts with leases, claims with fencing tokens, failovers, a zombie's
refused claim, leases that run out. The leases are short (a few hundred
milliseconds) and the waits are shared, so the whole fill takes about a
second. fill() returns what the node tests are told: each scenario's
request id, its tool calls and what the page must show of it.
"""

import time

from conftest import claim_id, new_id

# What a hostile router or agent may put in the free-text fields: markup
# that runs if the page ever parses data as HTML. Ids cannot carry it
# ([A-Za-z0-9._~-] only), so each free-text field gets its own copy,
# prefixed with the field's name so the tests can tell where it went.
HOSTILE = '<script>window.__xss=1</script><img src=x onerror="window.__xss=1">'

# The stalled replica's lease and its call's, the longest the fill waits for.
ZOMBIE_LEASE_MS = 700

# More requests than one page of the list (the API's default limit is 50).
EXTRA_REQUESTS = 55


def hostile(field):
    return "%s:%s" % (field, HOSTILE)


class Fill:
    def __init__(self, service):
        self.led = service.ledgerd
        self.router = service.token("router")
        self.agent = service.token("agent")

    def ok(self, response, *statuses):
        assert response.status in statuses, response
        return response.json

    def attempt(self, rid, aid, replica, lease_ms, **extra):
        body = {"attempt_id": aid, "replica": replica, "lease_ms": lease_ms}
        body.update(extra)
        return self.ok(self.led.post("/v1/requests/%s/attempts" % rid, body, token=self.router),
                       201)

    def claim(self, rid, cid, aid, tool, lease_ms, owner=None, status=201):
        body = {"claim_id": claim_id(), "tool": tool, "args": {"call": cid},
                "owner": owner or "worker@%s" % (aid or "none"), "lease_ms": lease_ms}
        if aid is not None:
            body["attempt_id"] = aid
        r = self.led.post("/v1/requests/%s/tool-calls/%s/claim" % (rid, cid), body,
                          token=self.agent)
        assert r.status == status, r
        return r

    def complete(self, rid, cid, token, outcome="succeeded", late=False):
        answer = self.ok(self.led.post(
            "/v1/requests/%s/tool-calls/%s/complete" % (rid, cid),
            {"fencing_token": token, "outcome": outcome, "result": {"done": cid}},
            token=self.agent), 200)
        assert answer.get("late_completion", False) is late, answer
        return answer

    def attempt_call(self, rid, aid, call, body, status=200):
        r = self.led.post("/v1/requests/%s/attempts/%s/%s" % (rid, aid, call), body,
                          token=self.router)
        assert r.status == status, r
        return r.json

    def failover(self, rid, aid, signal, action, next_attempt=None):
        body = {"attempt_id": aid, "signal": signal}
        if next_attempt is not None:
            body["next_attempt"] = next_attempt
        answer = self.ok(self.led.post("/v1/requests/%s/failover" % rid, body,
                                       token=self.router), 200)
        assert answer["action"] == action, answer
        return answer


def fill(service):
    """Writes every scenario; returns {name: {"rid", ...}} for the node tests."""
    f = Fill(service)
    s = {name: new_id("ui-" + name) for name in
         ("plain", "failover", "terminated", "zombie", "unknown", "resolve", "hostile",
          "gateway")}

    # Enough plain requests for a second page, made first so that the
    # scenarios, newest, head the first one. A claim creates its request.
    extra = []
    for i in range(EXTRA_REQUESTS):
        rid = new_id("ui-bulk%02d" % i)
        tok = f.claim(rid, "call_01", None, "noop", 30000).json["fencing_token"]
        f.complete(rid, "call_01", tok)
        extra.append(rid)

    # (a) plain: one attempt runs one tool call and answers.
    rid = s["plain"]
    f.attempt(rid, "att-1", "gpu-a/1", 30000, model_revision="m@1")
    tok = f.claim(rid, "call_01", "att-1", "search_docs", 30000).json["fencing_token"]
    f.complete(rid, "call_01", tok)
    f.attempt_call(rid, "att-1", "deliver", {"delivered_output_tokens": 3})
    f.attempt_call(rid, "att-1", "finish", {"outcome": "completed", "delivered_output_tokens": 40})

    # (b) failover before the first delta: gpu-a exits after one call, the
    # rerun on gpu-b gets that call's result back and runs the next one.
    rid = s["failover"]
    f.attempt(rid, "att-1", "gpu-a/2", 30000, model_revision="m@1")
    tok = f.claim(rid, "call_01", "att-1", "lookup_order", 30000).json["fencing_token"]
    f.complete(rid, "call_01", tok)
    f.failover(rid, "att-1", "replica_exited", "retry_prefill",
               {"attempt_id": "att-2", "replica": "gpu-b/1", "lease_ms": 30000})
    assert f.claim(rid, "call_01", "att-2", "lookup_order", 30000, status=200).json["replayed"]
    tok = f.claim(rid, "call_02", "att-2", "refund", 30000).json["fencing_token"]
    f.complete(rid, "call_02", tok)
    f.attempt_call(rid, "att-2", "deliver", {"delivered_output_tokens": 4})
    f.attempt_call(rid, "att-2", "finish", {"outcome": "completed", "delivered_output_tokens": 25})

    # (c) the replica dies after the first delta: the stream is terminated.
    rid = s["terminated"]
    f.attempt(rid, "att-1", "gpu-c/1", 30000, model_revision="m@1")
    tok = f.claim(rid, "call_01", "att-1", "search_docs", 30000).json["fencing_token"]
    f.complete(rid, "call_01", tok)
    f.attempt_call(rid, "att-1", "deliver", {"delivered_output_tokens": 7})
    f.attempt_call(rid, "att-1", "deliver", {"delivered_output_tokens": 19})
    f.failover(rid, "att-1", "pod_lost", "terminate_stream")

    # (e) and the resolve flow's call: claims whose leases run out with no
    # completion. (unknown runs under an attempt; resolve under none.)
    rid = s["unknown"]
    f.attempt(rid, "att-1", "gpu-d/1", 60000, model_revision="m@1")
    f.claim(rid, "call_01", "att-1", "charge_card", 150)
    f.claim(s["resolve"], "call_01", None, "send_email", 150, owner="mailer@pod-7")

    # (f) hostile text in every free-text field a router or agent writes.
    rid = s["hostile"]
    f.attempt(rid, "att-1", hostile("replica"), 60000, model_revision=hostile("model_revision"))
    tok = f.claim(rid, "call_01", "att-1", hostile("tool"), 30000,
                  owner=hostile("owner")).json["fencing_token"]
    f.ok(f.led.post("/v1/requests/%s/tool-calls/call_01/release" % rid,
                    {"fencing_token": tok, "reason": hostile("reason")}, token=f.agent), 200)
    f.claim(rid, "call_02", "att-1", hostile("tool"), 150, owner=hostile("owner"))

    # (d) a partition: gpu-e stalls holding a call; the router fences it and
    # waits for its lease. (The lease must outlast the two calls before the
    # failover even on a loaded machine: wait_for_fence needs it running.)
    rid = s["zombie"]
    f.attempt(rid, "att-1", "gpu-e/1", ZOMBIE_LEASE_MS, model_revision="m@1")
    f.claim(rid, "call_01", "att-1", "send_email", ZOMBIE_LEASE_MS)
    f.failover(rid, "att-1", "heartbeat_timeout", "wait_for_fence",
               {"attempt_id": "att-2", "replica": "gpu-f/1", "lease_ms": 30000})

    # One wait for every lease above.
    time.sleep(ZOMBIE_LEASE_MS / 1000 + 0.05)

    # (d) continued: the stalled replica reports its email, late; the rerun
    # starts; the zombie then tries another side effect and is refused.
    f.complete(rid, "call_01", 1, late=True)
    f.failover(rid, "att-1", "heartbeat_timeout", "retry_prefill",
               {"attempt_id": "att-2", "replica": "gpu-f/1", "lease_ms": 30000})
    refused = f.claim(rid, "call_02", "att-1", "refund", 30000, status=409)
    assert refused.code == "attempt_fenced", refused
    assert f.claim(rid, "call_01", "att-2", "send_email", 30000, status=200).json["replayed"]
    tok = f.claim(rid, "call_02", "att-2", "refund", 30000).json["fencing_token"]
    f.complete(rid, "call_02", tok)
    f.attempt_call(rid, "att-2", "deliver", {"delivered_output_tokens": 2})
    f.attempt_call(rid, "att-2", "finish", {"outcome": "completed", "delivered_output_tokens": 12})

    # (f) continued: the attempt is cancelled with a hostile reason.
    f.attempt_call(s["hostile"], "att-1", "cancel", {"reason": hostile("reason")})

    # (g) a gateway's request (API 1.1): its client drops and comes back while
    # the first replica runs, that replica dies, the rerun's client is given
    # up on, and its engine refuses the prompt: failed with the client's own error.
    rid = s["gateway"]
    f.attempt(rid, "att-1", "gpu-g/1", 30000, model_revision="m@1", gateway="gw-7",
              identity={"model": "llama-3.1-8b", "quantization": "fp8"})
    f.attempt_call(rid, "att-1", "client", {"event": "disconnected", "n": 1, "hold_ms": 10000})
    f.attempt_call(rid, "att-1", "client", {"event": "resumed", "n": 2, "last_event_id": 0})
    f.failover(rid, "att-1", "replica_exited", "retry_prefill",
               {"attempt_id": "att-2", "replica": "gpu-h/1", "lease_ms": 30000,
                "gateway": "gw-8"})
    f.attempt_call(rid, "att-2", "client", {"event": "disconnected", "n": 1})
    f.attempt_call(rid, "att-2", "client", {"event": "hold_ended", "n": 2})
    f.attempt_call(rid, "att-2", "finish", {"outcome": "failed", "client_error": {
        "error": {"code": "context_length_exceeded", "message": "the prompt is too long"},
        "http_status": 400}})

    return {
        "plain": {"rid": s["plain"], "status": "completed", "attention": [],
                  "lanes": ["att-1"], "first_delta": "att-1", "fenced": [],
                  "calls": {"call_01": "att-1"}},
        "failover": {"rid": s["failover"], "status": "completed", "attention": [],
                     "lanes": ["att-1", "att-2"], "first_delta": "att-2", "fenced": ["att-1"],
                     "calls": {"call_01": "att-1", "call_02": "att-2"},
                     "failovers": [["replica_exited", "retry_prefill"]]},
        "terminated": {"rid": s["terminated"], "status": "terminated",
                       "attention": ["terminated"], "lanes": ["att-1"], "first_delta": "att-1",
                       "first_delta_tokens": 7, "fenced": ["att-1"],
                       "client_error": "upstream_decode_interrupted",
                       "calls": {"call_01": "att-1"},
                       "failovers": [["pod_lost", "terminate_stream"]]},
        "zombie": {"rid": s["zombie"], "status": "completed", "attention": ["zombie_refused"],
                   "lanes": ["att-1", "att-2"], "first_delta": "att-2", "fenced": ["att-1"],
                   "calls": {"call_01": "att-1", "call_02": "att-2"},
                   "refused": [["att-1", "claim", "attempt_fenced"]],
                   "late": ["call_01"],
                   "failovers": [["heartbeat_timeout", "wait_for_fence"],
                                 ["heartbeat_timeout", "retry_prefill"]]},
        "unknown": {"rid": s["unknown"], "status": "open", "attention": ["outcome_unknown"],
                    "lanes": ["att-1"], "first_delta": None, "fenced": [],
                    "calls": {"call_01": "att-1"}, "unknown": ["call_01"]},
        "resolve": {"rid": s["resolve"], "status": "open", "attention": ["outcome_unknown"],
                    "lanes": [""], "first_delta": None, "fenced": [],
                    "calls": {"call_01": ""}, "unknown": ["call_01"]},
        "hostile": {"rid": s["hostile"], "status": "open", "attention": ["outcome_unknown"],
                    "lanes": ["att-1"], "first_delta": None, "fenced": None,
                    "calls": {"call_01": "att-1", "call_02": "att-1"}, "unknown": ["call_02"],
                    "hostile": HOSTILE},
        "gateway": {"rid": s["gateway"], "status": "failed", "attention": [],
                    "lanes": ["att-1", "att-2"], "first_delta": None, "fenced": ["att-1"],
                    "calls": {}, "client_error": "context_length_exceeded",
                    "failovers": [["replica_exited", "retry_prefill"]],
                    "gateways": {"att-1": "gw-7", "att-2": "gw-8"},
                    "client": [["att-1", "client_disconnected"], ["att-1", "client_resumed"],
                               ["att-2", "client_disconnected"],
                               ["att-2", "client_hold_ended"]]},
        "extra": extra,
    }
