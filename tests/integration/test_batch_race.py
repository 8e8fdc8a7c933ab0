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
import threading
import time
from collections import Counter

from conftest import claim_id, new_id

CLIENTS = 64
REQUESTS = 4
CALLS = 16


def metric(led, name):
    for line in led.get("/metrics").body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric %s" % name)


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
