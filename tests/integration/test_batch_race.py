"""64 clients race through claims, completions and replays of the same keys
while the store commits calls in batches: every side effect happens once.

Each client keeps one keep-alive connection and walks every key of four
requests in its own random order, as an agent runtime would: claim; when
claimed, run the tool (counted here, like its side effect) and complete;
when told `in_progress`, wait and claim again; when the call is completed,
take the replayed result. The first run of every fourth key fails
retryably, so that key is released and claimed again by someone else.
"""

import http.client
import json
import random
import re
import threading
import time
from collections import Counter

from conftest import Ledgerd, claim_id, hold_request_lock, new_id
from integration_helpers import metric

CLIENTS = 64
REQUESTS = 4
CALLS = 16


class Client:
    """One keep-alive connection, as a runtime's HTTP client holds."""

    def __init__(self, led, token):
        self.conn = http.client.HTTPConnection(led.host, led.port, timeout=30)
        self.headers = {"Authorization": "Bearer " + token,
                        "Content-Type": "application/json"}

    def post(self, path, body):
        self.conn.request("POST", path, body=json.dumps(body), headers=self.headers)
        r = self.conn.getresponse()
        return r.status, json.loads(r.read()), r.getheader("Idempotent-Replayed")

    def close(self):
        self.conn.close()


def test_every_key_runs_once_under_batched_commits(service):
    led = service.ledgerd
    token = service.token("agent")
    rids = [new_id() for _ in range(REQUESTS)]
    keys = [(rid, "call_%02d" % i) for rid in rids for i in range(CALLS)]
    flaky = {k for n, k in enumerate(keys) if n % 4 == 0}
    effects, runs, failed_once = Counter(), Counter(), set()
    results = {}
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS)
    errors = []
    batched_before = metric(led, "ledger_store_batched_calls_total")
    hits_before = metric(led, "ledger_replay_cache_hits_total")

    def execute(client, me, key):
        rid, cid = key
        path = "/v1/requests/%s/tool-calls/%s/" % (rid, cid)
        body = {"claim_id": claim_id(), "tool": "charge", "args": {"key": cid, "rid": rid},
                "owner": "client-%d" % me}
        deadline = time.time() + 60
        while time.time() < deadline:
            status, doc, replayed = client.post(path + "claim", body)
            if status == 201:
                token = doc["fencing_token"]
                with lock:
                    runs[key] += 1
                    fail = key in flaky and key not in failed_once
                    failed_once.add(key)
                    if not fail:
                        effects[key] += 1
                if fail:
                    status, doc, _ = client.post(path + "complete", {
                        "fencing_token": token, "outcome": "failed", "retryable": True,
                        "result": None})
                    assert status == 200 and doc["status"] == "released", doc
                    continue
                status, doc, _ = client.post(path + "complete", {
                    "fencing_token": token, "outcome": "succeeded",
                    "result": {"by": me, "token": token}})
                assert status == 200 and doc["status"] == "completed", doc
                return doc["result"]
            if status == 200 and doc["status"] == "completed":
                assert replayed == "true"
                return doc["result"]
            assert status == 409 and doc["error"]["code"] == "in_progress", doc
            time.sleep(min(doc["error"]["retry_after_ms"], 10) / 1000)
        raise AssertionError("no outcome for %s:%s within 60 s" % key)

    def client_main(me):
        client = Client(led, token)
        order = keys[:]
        random.Random(me).shuffle(order)
        try:
            start.wait()
            for key in order:
                got = execute(client, me, key)
                with lock:
                    results.setdefault(key, []).append(got)
            # And once more, after everything settled: replays only.
            for key in order[:8]:
                got = execute(client, me, key)
                with lock:
                    results[key].append(got)
        except Exception as e:  # reported below, with the client
            errors.append("client %d: %r" % (me, e))
        finally:
            client.close()

    threads = [threading.Thread(target=client_main, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert effects == Counter({k: 1 for k in keys})
    assert runs == Counter({k: 2 if k in flaky else 1 for k in keys})
    for key in keys:
        assert len(results[key]) >= CLIENTS
        assert all(r == results[key][0] for r in results[key]), (key, results[key])
    # The ledger agrees: every call succeeded, the released ones under token 2.
    rows = service.sql("SELECT request_id, tool_call_id, state, fencing_token FROM tool_calls "
                       "WHERE request_id IN (%s) ORDER BY 1, 2"
                       % ",".join("'%s'" % r for r in rids))
    assert rows == sorted([[rid, cid, "succeeded", "2" if (rid, cid) in flaky else "1"]
                           for rid, cid in keys])
    claimed = service.sql("SELECT count(*) FROM events WHERE request_id IN (%s) "
                          "AND type = 'claimed'" % ",".join("'%s'" % r for r in rids))
    assert claimed == [[str(len(keys) + len(flaky))]]
    # It was the batching store that served them, and the replay cache helped.
    assert metric(led, "ledger_store_batched_calls_total") > batched_before
    assert metric(led, "ledger_replay_cache_hits_total") > hits_before
    # How many calls each batch carried: a histogram whose count and sum are
    # the batch counters, whose buckets only grow; and the round trips they
    # took, fewer than the calls.
    text = led.get("/metrics").body
    buckets = [float(v) for v in re.findall(r'^ledger_store_batch_calls_bucket\{le="[^"]+"\} (\S+)$',
                                             text, re.M)]
    assert len(buckets) == 7 and buckets == sorted(buckets) and buckets[-1] > 0, buckets
    assert metric(led, "ledger_store_batch_calls_count") == buckets[-1] \
        == metric(led, "ledger_store_batches_total")
    assert metric(led, "ledger_store_batch_calls_sum") \
        == metric(led, "ledger_store_batched_calls_total")
    assert buckets[-1] < metric(led, "ledger_store_batched_calls_total")
    assert 0 < metric(led, "ledger_store_round_trips_total")


def test_each_call_of_a_batch_gets_the_answer_it_would_get_alone(service, tmp_path):
    """Calls of every kind and outcome arrive together, so that they share
    transactions; each must still get exactly its own answer.

    The one store worker of the ledgerd under test is held on a row lock
    while they arrive, so that they queue and go as full batches (over
    arrays, for claims and completions), not one by one."""
    led = Ledgerd(service.database_url, tmp_path / "batched.log", extra_args=["--workers", "1"])
    token = service.token("agent")
    router = service.token("router")
    # Calls settled through a ledgerd without a replay cache, so that their
    # replays here go to the store, in batches, not to memory.
    other = Ledgerd(service.database_url, tmp_path / "other.log",
                    extra_args=["--replay-cache", "0"])
    args = {"to": "a@example.com"}

    def claim_body(**extra):
        return dict({"claim_id": claim_id(), "tool": "mail", "args": args}, **extra)

    def settle(rid):
        path = "/v1/requests/%s/tool-calls/call_01/" % rid
        assert other.post(path + "claim", claim_body(), token=token).status == 201
        assert other.post(path + "complete", {"fencing_token": 1, "outcome": "succeeded",
                                              "result": {"rid": rid}}, token=token).status == 200

    def held(rid, lease_ms=60000):
        r = other.post("/v1/requests/%s/tool-calls/call_01/claim" % rid,
                       claim_body(lease_ms=lease_ms), token=token)
        assert r.status == 201, r
        return r.json["fencing_token"]

    cases = []  # (path, body, expected status, expected code or status word)
    for _ in range(6):
        rid = new_id()
        cases.append(("%s/tool-calls/call_01/claim" % rid, claim_body(), 201, "claimed"))
        rid = new_id()
        settle(rid)
        cases.append(("%s/tool-calls/call_01/claim" % rid, claim_body(), 200, "completed"))
        rid = new_id()
        settle(rid)
        cases.append(("%s/tool-calls/call_01/claim" % rid,
                      claim_body(args={"to": "b@example.com"}), 422, "args_mismatch"))
        rid = new_id()
        held(rid)
        cases.append(("%s/tool-calls/call_01/claim" % rid, claim_body(), 409, "in_progress"))
        rid = new_id()
        assert other.post("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1"},
                          token=router).status == 201
        cases.append(("%s/tool-calls/call_01/claim" % rid, claim_body(), 409,
                      "attempt_required"))
        rid = new_id()
        tok = held(rid)
        cases.append(("%s/tool-calls/call_01/complete" % rid,
                      {"fencing_token": tok, "outcome": "succeeded", "result": [rid]}, 200,
                      "completed"))
        rid = new_id()
        tok = held(rid)
        cases.append(("%s/tool-calls/call_01/complete" % rid,
                      {"fencing_token": tok + 1, "outcome": "succeeded", "result": 1}, 409,
                      "stale_token"))
        rid = new_id()
        tok = held(rid)
        cases.append(("%s/tool-calls/call_01/complete" % rid,
                      {"fencing_token": tok, "outcome": "failed", "retryable": True}, 200,
                      "released"))
        rid = new_id()
        tok = held(rid)
        cases.append(("%s/tool-calls/call_01/renew" % rid,
                      {"fencing_token": tok, "lease_ms": 5000}, 200, None))
        # Two claims of one new key, together: one is claimed, one waits.
        rid = new_id()
        cases.append(("%s/tool-calls/call_01/claim" % rid, claim_body(), "pair", rid))
        cases.append(("%s/tool-calls/call_01/claim" % rid, claim_body(), "pair", rid))
    other.stop()

    # Hold the worker: a claim under a request another session has locked.
    blocker = new_id()
    assert led.post("/v1/requests/%s/tool-calls/call_01/claim" % blocker, claim_body(),
                    token=token).status == 201
    lock = hold_request_lock(service.sql, blocker, 1.5)
    held_call = threading.Thread(target=led.post, args=(
        "/v1/requests/%s/tool-calls/call_02/claim" % blocker, claim_body()),
        kwargs={"token": token})
    held_call.start()
    time.sleep(0.2)

    batched_before = metric(led, "ledger_store_batched_calls_total")
    answers = [None] * len(cases)
    clients = [Client(led, token) for _ in cases]
    start = threading.Barrier(len(cases))

    def send(i):
        start.wait()
        path, body = cases[i][0], cases[i][1]
        answers[i] = clients[i].post("/v1/requests/" + path, body)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    lock.join()
    held_call.join()
    batches = metric(led, "ledger_store_batched_calls_total") - batched_before
    led.stop()

    pairs = Counter()
    for (path, body, status, what), (got, doc, replayed) in zip(cases, answers):
        if status == "pair":
            pairs[(what, got)] += 1
            continue
        assert got == status, (path, body, got, doc)
        if what is None:  # a renewal: what is left of 5000 ms as the answer went out
            assert 0 < doc["lease_ms"] <= 5000, (path, doc)
        elif status < 300:
            assert doc["status"] == what, (path, doc)
        else:
            assert doc["error"]["code"] == what, (path, doc)
        if what == "completed" and path.endswith("/claim"):
            assert replayed == "true"
            assert doc["result"] == {"rid": path.split("/")[0]}
    for rid in {what for (_, _, status, what) in cases if status == "pair"}:
        assert pairs[(rid, 201)] == 1 and pairs[(rid, 409)] == 1, pairs
    assert batches >= len(cases) / 2, batches  # most went in batches
