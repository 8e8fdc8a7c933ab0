"""Incident review over HTTP: one request with everything under it, and the
lists, whose cursors neither repeat nor skip a row while others insert."""

import base64
import threading
import time

import pytest

from conftest import claim_id, new_id


def attempt(led, token, rid, aid, **body):
    body.update(attempt_id=aid)
    return led.post("/v1/requests/%s/attempts" % rid, body, token=token)


def test_request_view_has_request_attempts_calls_and_ordered_history(service):
    led = service.ledgerd
    router = service.token("router")
    reviewer = service.token("reviewer")
    rid = new_id()
    assert attempt(led, router, rid, "a1", replica="gpu-1", model_revision="m@1",
                   max_attempts=3).status == 201
    r = led.post("/v1/requests/%s/tool-calls/call_01/claim" % rid,
                 {"claim_id": claim_id(), "attempt_id": "a1", "tool": "mail"}, token=router)
    assert r.status == 201
    led.post("/v1/requests/%s/tool-calls/call_01/complete" % rid,
             {"fencing_token": 1, "outcome": "succeeded", "result": {"id": 7}}, token=router)
    fo = led.post("/v1/requests/%s/failover" % rid,
                  {"attempt_id": "a1", "signal": "pod_lost",
                   "next_attempt": {"attempt_id": "a2", "replica": "gpu-2"}}, token=router)
    assert fo.json["action"] == "retry_prefill"
    assert led.post("/v1/requests/%s/attempts/a2/deliver" % rid,
                    {"delivered_output_tokens": 3}, token=router).status == 200

    view = led.get("/v1/requests/%s" % rid, token=reviewer)
    assert view.status == 200, view
    v = view.json
    assert v["request"]["request_id"] == rid
    assert v["request"]["status"] == "open" and v["request"]["phase"] == "decode"
    assert v["request"]["first_delta_sent"] is True
    assert v["request"]["attempts"] == 2 and v["request"]["max_attempts"] == 3
    assert [(a["attempt_id"], a["epoch"], a["replica"], a["state"]) for a in v["attempts"]] == \
        [("a1", 1, "gpu-1", "dead"), ("a2", 2, "gpu-2", "live")]
    assert v["attempts"][1]["lease_ms_left"] > 0 and v["attempts"][0]["lease_ms_left"] == 0
    assert all(k in v["attempts"][0] for k in ("model_revision", "created_at"))
    assert [(c["tool_call_id"], c["state"]) for c in v["tool_calls"]] == \
        [("call_01", "succeeded")]
    types = [e["type"] for e in v["events"]]
    assert types == ["attempt_created", "claimed", "completed", "attempt_revoked",
                     "attempt_created", "failover_decision", "first_delta"]
    seqs = [e["seq"] for e in v["events"]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert v["events"][1]["tool_call_id"] == "call_01"
    assert v["events"][1]["attempt_id"] == "a1"
    assert v["events"][5]["detail"]["action"] == "retry_prefill"
    assert v["events"][5]["detail"]["inputs"]["source_state"] == "live"
    assert "next_events_cursor" not in v


def test_request_view_pages_its_history(service):
    led = service.ledgerd
    router = service.token("router", tenant="pager")
    rid = new_id()
    assert attempt(led, router, rid, "a1").status == 201
    service.sql("INSERT INTO events (tenant, request_id, type, detail) SELECT 'pager', '%s', "
                "'probe', jsonb_build_object('n', n) FROM generate_series(1, 1500) n" % rid)
    seen = []
    path = "/v1/requests/%s" % rid
    pages = 0
    while True:
        r = led.get(path, token=router)
        assert r.status == 200, r
        pages += 1
        seen.extend(e["seq"] for e in r.json["events"])
        assert len(r.json["events"]) <= 1000
        cursor = r.json.get("next_events_cursor")
        if cursor is None:
            break
        path = "/v1/requests/%s?events_cursor=%s" % (rid, cursor)
    assert pages == 2
    assert len(seen) == 1501 and seen == sorted(set(seen))
    bad = led.get("/v1/requests/%s?events_cursor=%%%%" % rid, token=router)
    assert bad.status == 400 and bad.code == "invalid_field"
    assert bad.json["error"]["field"] == "events_cursor"


def test_request_view_roles_and_tenants(service):
    led = service.ledgerd
    rid = new_id()
    assert attempt(led, service.token("router"), rid, "a1").status == 201
    assert led.get("/v1/requests/%s" % rid, token=service.token("admin")).status == 200
    agent = led.get("/v1/requests/%s" % rid, token=service.token("agent"))
    assert agent.status == 403 and agent.code == "forbidden"
    other = led.get("/v1/requests/%s" % rid, token=service.token("reviewer", tenant="t2"))
    assert other.status == 404 and other.code == "not_found"
    missing = led.get("/v1/requests/%s" % new_id(), token=service.token("reviewer"))
    assert missing.status == 404 and missing.code == "not_found"


def test_request_list_filters_and_pages_newest_first(service):
    led = service.ledgerd
    tenant = new_id("tenant")
    router = service.token("router", tenant=tenant)
    rids = []
    for i in range(9):
        rid = "req-%02d-%s" % (i, new_id())
        assert attempt(led, router, rid, "a1").status == 201
        rids.append(rid)
        if i == 4:
            time.sleep(0.05)
            since = led.get("/v1/requests/%s" % rid, token=router).json["request"]["created_at"]
    for rid in rids[:3]:
        assert led.post("/v1/requests/%s/attempts/a1/finish" % rid, {"outcome": "completed"},
                        token=router).status == 200

    listed, cursor = [], None
    while True:
        r = led.get("/v1/requests?limit=4" + ("&cursor=" + cursor if cursor else ""),
                    token=router)
        assert r.status == 200, r
        assert len(r.json["items"]) <= 4
        listed.extend(i["request_id"] for i in r.json["items"])
        cursor = r.json["next_cursor"]
        if cursor is None:
            break
    assert listed == list(reversed(rids))

    done = led.get("/v1/requests?status=completed", token=router).json["items"]
    assert sorted(i["request_id"] for i in done) == sorted(rids[:3])
    assert all(i["status"] == "completed" for i in done)
    recent = led.get("/v1/requests?since=%s" % since, token=router).json["items"]
    assert [i["request_id"] for i in recent] == list(reversed(rids[4:]))

    for query, field in (("status=done", "status"), ("since=yesterday", "since"),
                         ("limit=0", "limit"), ("limit=1001", "limit"), ("cursor=%25", "cursor"),
                         ("cursor=bm90LWEtY3Vyc29y", "cursor")):
        bad = led.get("/v1/requests?" + query, token=router)
        assert bad.status == 400 and bad.code == "invalid_field", (query, bad)
        assert bad.json["error"]["field"] == field


def page_all(led, token, path, limit):
    items, cursor = [], None
    while True:
        sep = "&" if "?" in path else "?"
        r = led.get(path + sep + "limit=%d" % limit + ("&cursor=" + cursor if cursor else ""),
                    token=token)
        assert r.status == 200, r
        items.extend(r.json["items"])
        cursor = r.json["next_cursor"]
        if cursor is None:
            return items


def test_paging_under_concurrent_inserts_never_repeats_or_skips(service):
    """Pages read while others create requests and calls: every row that existed
    before paging started is listed exactly once."""
    led = service.ledgerd
    tenant = new_id("busy")
    router = service.token("router", tenant=tenant)
    before = []
    for i in range(40):
        rid = "%s-%02d" % (new_id("r"), i)
        assert led.post("/v1/requests/%s/tool-calls/call_01/claim" % rid,
                        {"claim_id": claim_id()}, token=router).status == 201
        before.append(rid)
    stop = threading.Event()

    def insert():
        while not stop.is_set():
            led.post("/v1/requests/%s/tool-calls/call_01/claim" % new_id("late"),
                     {"claim_id": claim_id()}, token=router)

    writers = [threading.Thread(target=insert) for _ in range(3)]
    for t in writers:
        t.start()
    try:
        requests = [i["request_id"] for i in page_all(led, router, "/v1/requests", 3)]
        calls = [i["request_id"] for i in page_all(led, router, "/v1/tool-calls", 3)]
    finally:
        stop.set()
        for t in writers:
            t.join()
    for listed in (requests, calls):
        assert len(listed) == len(set(listed)), "a row was listed twice"
        assert set(before) <= set(listed), "a row that existed throughout was skipped"


@pytest.mark.parametrize("since", [
    "2026-13-45T99:99:99Z", "2026-02-30T00:00:00Z", "2025-02-29T00:00:00Z",
    "2026-04-31T00:00:00Z", "2026-00-10T00:00:00Z", "2026-01-00T00:00:00Z",
    "2026-01-01T24:00:00Z", "2026-01-01T00:60:00Z", "2026-01-01T00:00:61Z",
    "0000-01-01T00:00:00Z", "2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00+01:60",
    "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00.1234567890Z", "2026-01-01",
])
def test_since_out_of_range_is_400_not_500(service, since):
    r = service.ledgerd.get("/v1/requests?since=" + since, token=service.token("reviewer"))
    assert r.status == 400 and r.code == "invalid_field", r
    assert r.json["error"]["field"] == "since"


@pytest.mark.parametrize("since", ["2024-02-29T00:00:00Z", "2026-12-31T23:59:60Z",
                                   "2026-01-01T00:00:00.123456789+05:30",
                                   "2026-01-01t00:00:00z"])
def test_since_at_the_edges_of_its_ranges_is_served(service, since):
    r = service.ledgerd.get("/v1/requests?since=" + since.replace("+", "%2B"),
                            token=service.token("reviewer"))
    assert r.status == 200, r


@pytest.mark.parametrize("raw", [b"9223372036854775807:abc", b"99999999999999999999:abc",
                                 b"253402300800000000:abc", b"-1:abc", b"1:", b":abc",
                                 b"1:a/b"])
def test_a_crafted_cursor_is_400_not_500(service, raw):
    cursor = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    r = service.ledgerd.get("/v1/requests?cursor=" + cursor, token=service.token("reviewer"))
    assert r.status == 400 and r.code == "invalid_field", r
    assert r.json["error"]["field"] == "cursor"
    r = service.ledgerd.get("/v1/requests/%s?events_cursor=%s" % (new_id(), cursor),
                            token=service.token("reviewer"))
    assert r.status in (400, 404), r
    assert '"level":"error"' not in service.ledgerd.log_text()


def attention_scenarios(led, router):
    """One request per reason a request needs a person, and one that needs none.
    @return {name: request_id}, created in this order"""
    ids = {}

    def claim(rid, cid, **body):
        body.setdefault("claim_id", claim_id())
        return led.post("/v1/requests/%s/tool-calls/%s/claim" % (rid, cid), body, token=router)

    def complete(rid, cid, token, **body):
        body.update(fencing_token=token)
        body.setdefault("outcome", "succeeded")
        return led.post("/v1/requests/%s/tool-calls/%s/complete" % (rid, cid), body,
                        token=router)

    ids["plain"] = rid = new_id("plain")
    assert claim(rid, "c1").status == 201
    assert complete(rid, "c1", 1).status == 200

    # A holder that vanished: its lease runs out below.
    ids["unknown"] = rid = new_id("unknown")
    assert claim(rid, "c1", lease_ms=100).status == 201

    # A failed-over attempt that wakes up and claims: refused.
    ids["zombie"] = rid = new_id("zombie")
    assert attempt(led, router, rid, "a1").status == 201
    fo = led.post("/v1/requests/%s/failover" % rid,
                  {"attempt_id": "a1", "signal": "pod_lost",
                   "next_attempt": {"attempt_id": "a2"}}, token=router)
    assert fo.json["action"] == "retry_prefill", fo
    assert claim(rid, "c1", attempt_id="a1").code == "attempt_fenced"

    ids["terminated"] = rid = new_id("terminated")
    assert attempt(led, router, rid, "a1").status == 201
    assert led.post("/v1/requests/%s/attempts/a1/deliver" % rid,
                    {"delivered_output_tokens": 3}, token=router).status == 200
    fo = led.post("/v1/requests/%s/failover" % rid,
                  {"attempt_id": "a1", "signal": "client_disconnected"}, token=router)
    assert fo.json["request_status"] == "terminated", fo

    # The rerun asks for another call under the same ordinal.
    ids["divergence"] = rid = new_id("divergence")
    assert attempt(led, router, rid, "a1", max_attempts=3).status == 201
    assert claim(rid, "c1", attempt_id="a1", args={"to": "ana"}).status == 201
    assert complete(rid, "c1", 1).status == 200
    fo = led.post("/v1/requests/%s/failover" % rid,
                  {"attempt_id": "a1", "signal": "pod_lost",
                   "next_attempt": {"attempt_id": "a2"}}, token=router)
    assert fo.json["action"] == "retry_prefill", fo
    assert claim(rid, "c1", attempt_id="a2", args={"to": "bob"}).code == "args_mismatch"

    # Resolved as not executed, run again, and then the first holder says it did run.
    ids["duplicate"] = rid = new_id("duplicate")
    assert claim(rid, "c1", lease_ms=100).status == 201
    time.sleep(0.15)
    return ids


def test_request_list_says_why_a_request_needs_attention(service):
    led = service.ledgerd
    tenant = new_id("tenant")
    router = service.token("router", tenant=tenant)
    admin = service.token("admin", tenant=tenant)
    ids = attention_scenarios(led, router)
    dup = ids["duplicate"]
    assert led.post("/v1/requests/%s/tool-calls/c1/resolve" % dup,
                    {"resolution": "not_executed"}, token=admin).status == 200
    again = led.post("/v1/requests/%s/tool-calls/c1/claim" % dup, {"claim_id": claim_id()},
                     token=router)
    assert again.status == 201, again
    assert led.post("/v1/requests/%s/tool-calls/c1/complete" % dup,
                    {"fencing_token": 1, "outcome": "succeeded"}, token=router).status == 200
    expected = {"plain": [], "unknown": ["outcome_unknown"], "zombie": ["zombie_refused"],
                "terminated": ["terminated"], "divergence": ["divergence"],
                "duplicate": ["duplicate_execution"]}

    listed = {i["request_id"]: i["attention"]
              for i in led.get("/v1/requests", token=router).json["items"]}
    assert listed == {ids[k]: v for k, v in expected.items()}

    # Only those needing a person, still newest first, paged like any list.
    needing = [ids[k] for k in reversed(list(expected)) if expected[k]]
    assert [i["request_id"] for i in page_all(led, router, "/v1/requests?attention=true", 2)] \
        == needing
    assert [i["request_id"] for i in page_all(led, router, "/v1/requests?attention=false", 2)] \
        == [ids[k] for k in reversed(list(expected))]
    both = led.get("/v1/requests?status=terminated&attention=true", token=router).json["items"]
    assert [i["request_id"] for i in both] == [ids["terminated"]]

    # Settling the unknown call takes its request off the list.
    assert led.post("/v1/requests/%s/tool-calls/c1/resolve" % ids["unknown"],
                    {"resolution": "failed", "note": "bounced"}, token=admin).status == 200
    assert ids["unknown"] not in [
        i["request_id"] for i in led.get("/v1/requests?attention=true", token=router).json["items"]]

    for value in ("yes", "1", "TRUE", ""):
        bad = led.get("/v1/requests?attention=" + value, token=router)
        assert bad.status == 400 and bad.code == "invalid_field", (value, bad)
        assert bad.json["error"]["field"] == "attention"
