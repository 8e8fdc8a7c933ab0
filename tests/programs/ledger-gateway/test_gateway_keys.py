"""One logical request however its client retries (GATEWAY.md, "Request ids
and the idempotency key", "A repeat of a key", "Events, holds and resuming").

Each test runs build/ledger-gateway in front of the fault replicas of
tests/faults/ (which run their tool through ledgerd, so every execution of
the side effect is on record in the tool service's log) on a ledgerd of its
module, and judges what the client got, what the replicas were asked, and
what ledgerd recorded.
"""

import json
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

FAULTS = Path(__file__).resolve().parents[2] / "faults"
sys.path.insert(0, str(FAULTS))

from clients import completion_body, stream_completion  # noqa: E402
from keyed import ENV, TIMING, executions, rid_of, upstream_requests  # noqa: E402
from stack import Run, Stack, read_json_lines, run_folder, wait_until  # noqa: E402


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("keys"), TIMING)
    yield s
    s.close()


@pytest.fixture
def run(stack, request):
    with Run(stack, run_folder("keys-" + request.node.name[:40])) as r:
        yield r


def url(gw):
    return gw.url


def post_raw(gw, head_lines, body=b"{}"):
    """Sends a request whose head is exactly @head_lines (repeated fields too); returns
    (status, lower-cased headers as a list of pairs, body)."""
    with socket.create_connection((gw.host, gw.port), timeout=20) as s:
        head = ["POST /v1/chat/completions HTTP/1.1", "Host: gw",
                "Content-Type: application/json", "Content-Length: %d" % len(body),
                "Connection: close", *head_lines]
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:]]
    return int(lines[0].split()[1]), [(k.lower(), v) for k, v in headers], rest


def ask(gw, seed=1, max_tokens=4, key=None, headers=None, **kw):
    h = dict(headers or {})
    if key is not None:
        h["Idempotency-Key"] = key
    return stream_completion(url(gw), seed, max_tokens, headers=h, **kw)


def leave_before_first_byte(gw, key, after_s, body=None, headers=None):
    """Sends a keyed completion and closes the connection after @after_s, before any
    answer: a client that timed out."""
    s = socket.create_connection((gw.host, gw.port))
    data = json.dumps(body or completion_body(1, 4)).encode()
    head = ["POST /v1/chat/completions HTTP/1.1", "Host: gw", "Content-Type: application/json",
            "Content-Length: %d" % len(data), "Idempotency-Key: " + key]
    head += ["%s: %s" % kv for kv in (headers or {}).items()]
    s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    time.sleep(after_s)
    s.close()


def event_types(run_, rid):
    return [e["type"] for e in run_.timeline(rid)["events"]]


def ids_in_order(stream):
    return [e.id for e in stream.events] == list(range(1, len(stream.events) + 1))


# --- the key and its scope ---


def test_a_key_names_the_request_by_the_contracts_derivation(run):
    gw = run.start_gateway(env=ENV, timing=TIMING)
    s = ask(gw, key="order-1", headers={"Authorization": "Bearer client-a"})
    assert s.status == 200 and s.done, s
    assert s.request_id == rid_of("order-1", "Bearer client-a")
    # A structured-field string is unquoted first: the same key.
    again = ask(gw, key='"order-1"', headers={"Authorization": "Bearer client-a"})
    assert again.request_id == s.request_id
    assert again.headers["idempotent-replayed"] == "true"
    assert len(upstream_requests(run)) == 1
    # Keys are secrets: never in the log, never sent upstream.
    assert "order-1" not in Path(gw.log_path).read_text()
    assert all("order-1" not in json.dumps(e) for e in upstream_requests(run))


@pytest.mark.parametrize("fields", [
    ["Idempotency-Key: "],
    ["Idempotency-Key: " + "k" * 256],
    ["Idempotency-Key: two words"],
    ["Idempotency-Key: caf\xe9"],
    ["Idempotency-Key: a", "Idempotency-Key: b"],
], ids=["empty", "256", "space", "latin1", "twice"])
def test_a_bad_key_is_refused_and_a_retry_will_not_help(run, fields):
    gw = run.start_gateway(env=ENV, timing=TIMING)
    status, headers, body = post_raw(gw, fields, json.dumps(completion_body(1, 2)).encode())
    assert status == 400, body
    assert json.loads(body)["error"]["code"] == "invalid_idempotency_key"
    assert ("x-should-retry", "false") in headers
    assert upstream_requests(run) == []
    # A refusal before any logical request still names itself, and the log names it too.
    rid = dict(headers)["x-request-id"]
    assert rid.startswith("req-") and json.loads(body)["error"]["request_id"] == rid
    assert wait_until(lambda: any(line.get("msg") == "refused" and line.get("request_id") == rid
                                  and line.get("code") == "invalid_idempotency_key"
                                  for line in read_json_lines(gw.log_path)), 5)


def test_a_key_of_255_characters_is_one(run):
    gw = run.start_gateway(env=ENV, timing=TIMING)
    key = "".join(chr(0x21 + i % 94) for i in range(255))
    s = ask(gw, key=key)
    assert s.status == 200 and s.request_id == rid_of(key)


def test_the_same_key_in_another_scope_is_another_request(run):
    gw = run.start_gateway(env=ENV, timing=TIMING)
    a = ask(gw, key="shared", headers={"Authorization": "Bearer alice"})
    b = ask(gw, key="shared", headers={"Authorization": "Bearer bob"})
    assert a.done and b.done
    assert a.request_id != b.request_id
    assert "idempotent-replayed" not in b.headers  # never a view of alice's request
    assert len(upstream_requests(run)) == 2


def test_the_scope_header_and_the_key_header_are_settings(run):
    gw = run.start_gateway("--client-scope-header", "X-Tenant",
                           "--idempotency-header", "X-Request-Key", env=ENV, timing=TIMING)
    a = ask(gw, headers={"X-Request-Key": "k1", "X-Tenant": "t1", "Authorization": "A"})
    b = ask(gw, headers={"X-Request-Key": "k1", "X-Tenant": "t1", "Authorization": "B"})
    assert a.request_id == rid_of("k1", "t1") == b.request_id
    assert b.headers["idempotent-replayed"] == "true"
    # The header is replaced, not added: Idempotency-Key is now an ordinary header.
    c = ask(gw, key="k1", headers={"X-Tenant": "t1"})
    assert c.request_id.startswith("req-")
    assert len(upstream_requests(run)) == 2


def test_no_scope_header_is_one_scope_and_says_so_at_start(run):
    gw = run.start_gateway("--client-scope-header", "", env=ENV, timing=TIMING)
    a = ask(gw, key="k", headers={"Authorization": "A"})
    b = ask(gw, key="k", headers={"Authorization": "B"})
    assert a.request_id == b.request_id == rid_of("k")
    log = Path(gw.log_path).read_text()
    assert '"level":"warn"' in log and "one scope" in log


def test_a_required_key_refuses_a_request_without_one(run):
    gw = run.start_gateway("--require-idempotency-key", env=ENV, timing=TIMING)
    s = ask(gw)
    assert s.status == 400 and s.error_body["error"]["code"] == "idempotency_key_required"
    assert s.headers["x-should-retry"] == "false"
    assert ask(gw, key="present").done
    assert len(upstream_requests(run)) == 1


def test_a_key_without_the_secret_is_refused(run):
    gw = run.start_gateway(timing=TIMING)
    s = ask(gw, key="k")
    assert s.status == 500 and s.error_body["error"]["code"] == "key_secret_missing"
    assert s.headers["x-should-retry"] == "false"
    assert ask(gw).done  # a keyless request is served
    assert "GATEWAY_KEY_SECRET" in Path(gw.log_path).read_text()


# --- rows 1 to 9 ---


def test_row1_the_same_key_with_another_body(run):
    gw = run.start_gateway(env=ENV, timing=TIMING)
    assert ask(gw, seed=1, key="k").done
    other = ask(gw, seed=2, key="k")
    assert other.status == 422
    assert other.error_body["error"]["code"] == "idempotency_key_reused"
    assert other.headers["x-should-retry"] == "false"
    assert other.request_id == rid_of("k")
    # The canonical form decides: the same body re-serialized is the same request.
    body = completion_body(1, 4)
    reordered = json.dumps(dict(reversed(list(body.items()))), indent=2).encode()
    same = ask(gw, key="k", body=reordered)
    assert same.status == 200 and same.headers["idempotent-replayed"] == "true"
    assert len(upstream_requests(run)) == 1


def test_row1_while_the_request_runs(run):
    run.replica("gpu-1").control(token_delay_ms=300)
    run.replica("gpu-2").control(token_delay_ms=300)
    gw = run.start_gateway(env=ENV, timing=TIMING)
    t = threading.Thread(target=ask, args=(gw,), kwargs={"seed": 1, "max_tokens": 6,
                                                         "key": "busy"})
    t.start()
    wait_until(lambda: upstream_requests(run), 5)
    other = ask(gw, seed=9, key="busy")
    t.join()
    assert other.status == 422 and other.error_body["error"]["code"] == "idempotency_key_reused"


def test_row2_a_completed_repeat_is_the_same_bytes_even_through_a_restart(run):
    gw = run.start_gateway(env=ENV, timing=TIMING)
    first = ask(gw, seed=3, max_tokens=5, key="done")
    assert first.done and ids_in_order(first)
    assert [e.data for e in first.events][-1] == "[DONE]"
    again = ask(gw, seed=3, max_tokens=5, key="done")
    assert again.headers["idempotent-replayed"] == "true"
    assert [(e.id, e.data) for e in again.events] == [(e.id, e.data) for e in first.events]
    # From the event after Last-Event-ID.
    tail = ask(gw, seed=3, max_tokens=5, key="done", headers={"Last-Event-ID": "4"})
    assert [e.id for e in tail.events] == [e.id for e in first.events][4:]
    # An id the request never had: the whole answer.
    whole = ask(gw, seed=3, max_tokens=5, key="done", headers={"Last-Event-ID": "999"})
    assert [e.data for e in whole.events] == [e.data for e in first.events]
    # A restarted gateway (the same secret) answers from what ledgerd kept.
    assert gw.stop() == 0
    run.gateways.remove(gw)
    gw2 = run.start_gateway(env=ENV, timing=TIMING)
    after = ask(gw2, seed=3, max_tokens=5, key="done")
    assert [(e.id, e.data) for e in after.events] == [(e.id, e.data) for e in first.events]
    assert after.headers["idempotent-replayed"] == "true"
    assert len(upstream_requests(run)) == 1


def test_row3_an_answer_over_the_bound_is_not_kept_and_never_rerun(run):
    gw = run.start_gateway("--max-kept-answer-bytes", "200", env=ENV, timing=TIMING)
    assert ask(gw, max_tokens=6, key="big").done
    again = ask(gw, max_tokens=6, key="big")
    assert again.status == 409
    assert again.error_body["error"]["code"] == "answer_not_kept"
    assert again.headers["x-should-retry"] == "false"
    assert len(upstream_requests(run)) == 1


def test_row4_a_resume_goes_on_with_the_same_attempt(run):
    for r in run.replicas:
        r.control(token_delay_ms=250)
    gw = run.start_gateway("--resume-hold-ms", "5000", env=ENV, timing=TIMING)
    first = ask(gw, seed=5, max_tokens=10, key="resume", close_after=3)
    assert first.closed_by_client and [e.id for e in first.events] == [1, 2, 3]
    rest = ask(gw, seed=5, max_tokens=10, key="resume", headers={"Last-Event-ID": "3"})
    assert rest.status == 200 and rest.done
    assert [e.id for e in rest.events] == list(range(4, 4 + len(rest.events)))
    text = first.contents + rest.contents
    whole = ask(gw, seed=5, max_tokens=10, key="resume")  # now a replay
    assert text == whole.contents and len(text) == 10
    # Never a new generation: one upstream request, one attempt.
    assert len(upstream_requests(run)) == 1
    assert {c["attempt_id"] for c in first.chunks + rest.chunks} == {"a1"}
    timeline = run.timeline(rid_of("resume"))
    types = [e["type"] for e in timeline["events"]]
    assert "client_disconnected" in types and "client_resumed" in types
    resumed = next(e for e in timeline["events"] if e["type"] == "client_resumed")
    assert resumed["detail"]["last_event_id"] == 3


def test_row4_the_connection_replaced_ends_with_an_error_event(run):
    for r in run.replicas:
        r.control(token_delay_ms=300)
    gw = run.start_gateway(env=ENV, timing=TIMING)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault(
        "a", ask(gw, seed=6, max_tokens=12, key="twice")))
    t.start()
    assert wait_until(lambda: len([e for r in run.replicas for e in r.events()
                                   if e["event"] == "published"]) >= 2, 10)
    b = ask(gw, seed=6, max_tokens=12, key="twice")
    t.join()
    a = got["a"]
    assert not a.done and a.final_event["error"]["code"] == "stream_resumed_elsewhere"
    # The final event repeats the id of the last one it got: resuming from it misses none.
    assert [e.id for e in a.events] == list(range(1, len(a.events))) + [len(a.events) - 1]
    assert b.done and [e.id for e in b.events][0] == 1  # no Last-Event-ID: from the first
    assert len(upstream_requests(run)) == 1


def test_row5_a_request_live_in_another_gateway(run):
    for r in run.replicas:
        r.control(token_delay_ms=300)
    gw1 = run.start_gateway(env=ENV, timing=TIMING)
    gw2 = run.start_gateway(env=ENV, timing=TIMING)
    t = threading.Thread(target=ask, args=(gw1,), kwargs={"max_tokens": 8, "key": "pool"})
    t.start()
    assert wait_until(lambda: upstream_requests(run), 5)
    s = ask(gw2, key="pool", max_tokens=8)
    t.join()
    assert s.status == 409 and s.error_body["error"]["code"] == "request_in_progress"
    assert s.headers["retry-after"] == "1" and s.headers["x-should-retry"] == "true"
    assert s.request_id == rid_of("pool")


def test_row6_a_dead_gateways_request_is_taken_over(run):
    run.replica("gpu-1").control(prefill_ms=5000)
    run.replica("gpu-2").control(prefill_ms=5000)
    gw1 = run.start_gateway(env=ENV, timing=TIMING)
    threading.Thread(target=ask, args=(gw1,), kwargs={"key": "orphan"}, daemon=True).start()
    assert wait_until(lambda: upstream_requests(run), 5)
    gw1.signal(9)  # SIGKILL: its lease runs out, no failover is reported
    for r in run.replicas:
        r.control(prefill_ms=0)
    time.sleep(TIMING.lease_ms / 1000 + 0.5)
    gw2 = run.start_gateway(env=ENV, timing=TIMING)
    s = ask(gw2, key="orphan")
    assert s.status == 200 and s.done
    assert {c["attempt_id"] for c in s.chunks} == {"a2"}
    events = run.timeline(rid_of("orphan"))["events"]
    decision = next(e for e in events if e["type"] == "failover_decision")
    assert decision["detail"]["signal"] == "heartbeat_timeout"


def test_row7_a_terminated_stream_is_replayed_with_no_engine_run(run):
    run.replica("gpu-1").control(fault={"kind": "die", "at": 2, "phase": "after_send"})
    run.replica("gpu-2").control(fault={"kind": "die", "at": 2, "phase": "after_send"})
    gw = run.start_gateway(env=ENV, timing=TIMING)
    first = ask(gw, seed=7, max_tokens=6, key="cut")
    assert not first.done and first.final_event["error"]["retryable"] is False
    assert ids_in_order(first)
    assert run.settled_timeline(rid_of("cut"))["request"]["status"] == "terminated"
    again = ask(gw, seed=7, max_tokens=6, key="cut")
    assert again.headers["idempotent-replayed"] == "true"
    assert [(e.id, e.data) for e in again.events] == [(e.id, e.data) for e in first.events]
    tail = ask(gw, seed=7, max_tokens=6, key="cut", headers={"Last-Event-ID": "2"})
    assert [e.id for e in tail.events] == [e.id for e in first.events][2:]
    assert tail.final_event == first.final_event
    assert len(upstream_requests(run)) == 1


def test_row7_after_a_gateway_crash_only_the_error_is_kept(run):
    for r in run.replicas:
        r.control(token_delay_ms=400)
    gw1 = run.start_gateway(env=ENV, timing=TIMING)
    threading.Thread(target=ask, args=(gw1,), kwargs={"max_tokens": 20, "key": "crash"},
                     daemon=True).start()
    assert wait_until(lambda: any(e["event"] == "published" for r in run.replicas
                                  for e in r.events()), 10)
    gw1.signal(9)
    time.sleep(TIMING.lease_ms / 1000 + 0.5)
    gw2 = run.start_gateway(env=ENV, timing=TIMING)
    s = ask(gw2, max_tokens=20, key="crash")
    assert s.status == 200 and len(s.events) == 1
    assert s.final_event["error"]["code"] == "upstream_decode_interrupted"
    assert run.timeline(rid_of("crash"))["request"]["status"] == "terminated"
    assert len(upstream_requests(run)) == 1


def test_row8_a_refusal_before_any_delta_is_answered_again(run):
    # Both replicas die before their first token: the second failure spends the
    # request's budget (max_attempts 2), and the request fails before any delta.
    for r in run.replicas:
        r.control(fault={"kind": "die", "at": 0, "phase": "before_compute"})
    gw = run.start_gateway(env=ENV, timing=TIMING)
    first = ask(gw, key="fails")
    assert first.status == 503
    assert first.error_body["error"]["code"] == "retry_budget_exhausted"
    assert run.timeline(rid_of("fails"))["request"]["status"] == "failed"
    again = ask(gw, key="fails")
    assert again.status == first.status
    assert again.error_body == first.error_body
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["x-should-retry"] == "false"
    assert len(upstream_requests(run)) == 2


def test_row9_an_abandoned_request_reopens_with_its_settled_tool_calls(run):
    # The replica runs the tool before its first token, then takes its time.
    for r in run.replicas:
        r.control(tool_at=0, token_delay_ms=3000)
    gw = run.start_gateway("--first-byte-hold-ms", "300", env=ENV, timing=TIMING)
    leave_before_first_byte(gw, "reopen", 1.0)
    rid = rid_of("reopen")
    assert wait_until(lambda: run.timeline(rid) and
                      run.timeline(rid)["request"]["status"] == "abandoned", 10)
    types = event_types(run, rid)
    assert "client_disconnected" in types and "client_hold_ended" in types
    for r in run.replicas:
        r.control(token_delay_ms=0)
    s = ask(gw, key="reopen")
    assert s.status == 200 and s.done
    assert {c["attempt_id"] for c in s.chunks} == {"a2"}
    second = [e for e in upstream_requests(run, rid) if e["attempt_id"] == "a2"]
    assert second and second[0]["settled_tool_calls"], second
    assert len(executions(run)) == 1


def test_row9_a_spent_budget_is_a_503_that_a_retry_cannot_mend(run):
    for r in run.replicas:
        r.control(prefill_ms=3000)
    gw = run.start_gateway("--first-byte-hold-ms", "100", env=ENV, timing=TIMING)
    rid = rid_of("spent")
    for n in (1, 2):  # the policy's max_attempts is 2
        leave_before_first_byte(gw, "spent", 0.5)
        assert wait_until(lambda: run.timeline(rid) and
                          run.timeline(rid)["request"]["status"] == "abandoned" and
                          run.timeline(rid)["request"]["attempts"] == n, 10)
    s = ask(gw, key="spent")
    assert s.status == 503
    assert s.error_body["error"]["code"] == "retry_budget_exhausted"
    assert s.headers["x-should-retry"] == "false" and "retry-after" not in s.headers
    assert run.timeline(rid)["request"]["status"] == "abandoned"


def test_a_repeat_as_the_hold_ends_is_served_never_meets_an_ending_run(tmp_path_factory):
    """A repeat that comes while its run is ending (the hold just ran out, the
    run reporting client_disconnected) must not attach to that run: it waits
    for the run's end and is answered from the record (row 9: a new attempt).
    Repeats at 15 offsets around the end of the hold, each of its own key:
    every one gets a whole answer. The pool's retry budget is widened for
    them: most are row 9's reruns, all at once."""
    stack = Stack(tmp_path_factory.mktemp("keys-ending"), TIMING,
                  policy={"percent_of_attempts": 100, "min_retries": 100})
    try:
        with Run(stack, run_folder("keys-ending")) as run:
            repeats_around_the_end_of_the_hold(run)
    finally:
        stack.close()


def repeats_around_the_end_of_the_hold(run):
    for r in run.replicas:
        r.control(prefill_ms=1200)
    gw = run.start_gateway("--first-byte-hold-ms", "100", env=ENV, timing=TIMING)
    keys = ["ending-%d" % n for n in range(15)]
    got = {}

    def client(n, key):
        leave_before_first_byte(gw, key, 0.2)
        time.sleep(0.02 + 0.02 * n)  # 20 to 300 ms after it left
        got[key] = ask(gw, key=key)

    threads = [threading.Thread(target=client, args=(n, k)) for n, k in enumerate(keys)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for key in keys:
        s = got[key]
        assert s.status == 200 and s.done, (key, s.status, s.body, s.final_event)
        assert run.timeline(rid_of(key))["request"]["status"] == "completed", key


# --- holds, watching the client, event ids ---


def test_a_client_that_times_out_before_the_first_token_gets_the_same_run(run):
    for r in run.replicas:
        r.control(tool_at=0, token_delay_ms=2500)
    gw = run.start_gateway(env=ENV, timing=TIMING)
    leave_before_first_byte(gw, "timeout", 0.5)
    leave_before_first_byte(gw, "timeout", 0.5)
    s = ask(gw, key="timeout")
    assert s.status == 200 and s.done
    assert len(upstream_requests(run)) == 1 and len(executions(run)) == 1
    assert [e.id for e in s.events][0] == 1


def test_a_keyless_client_gone_before_the_first_byte_stops_the_attempt(run):
    for r in run.replicas:
        r.control(prefill_ms=6000)
    gw = run.start_gateway(env=ENV, timing=TIMING)
    s = socket.create_connection((gw.host, gw.port))
    data = json.dumps(completion_body(1, 2)).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    assert wait_until(lambda: upstream_requests(run), 5)
    rid = upstream_requests(run)[0]["request_id"]
    s.close()
    started = time.monotonic()
    assert wait_until(lambda: run.timeline(rid)["request"]["status"] == "abandoned", 5)
    assert time.monotonic() - started < 3  # watched, not found out after the prefill
    assert "client_hold_ended" not in event_types(run, rid)  # no hold without a key


def test_every_event_has_an_id_the_done_and_the_final_error_too(run):
    run.replica("gpu-1").control(fault={"kind": "die", "at": 1, "phase": "after_send"})
    run.replica("gpu-2").control(fault={"kind": "die", "at": 1, "phase": "after_send"})
    gw = run.start_gateway(env=ENV, timing=TIMING)
    cut = ask(gw, max_tokens=4)
    assert cut.final_event["error"]["code"] == "upstream_decode_interrupted"
    assert ids_in_order(cut)
    # The one that died is gone (its socket closes before the process is
    # reaped: wait for that); the other's fault is disarmed.
    assert wait_until(lambda: sum(not r.alive() for r in run.replicas) == 1, 10)
    for r in run.replicas:
        if r.alive():
            r.control(fault=None)
    whole = ask(gw, max_tokens=4)
    assert whole.done and ids_in_order(whole)
    # Without a key, Last-Event-ID means nothing.
    again = ask(gw, max_tokens=4, headers={"Last-Event-ID": "2"})
    assert again.done and again.events[0].id == 1 and again.request_id != whole.request_id


# --- honest retryability ---


def test_keyless_refusal_after_a_settled_tool_call_says_do_not_retry(stack, tmp_path):
    with Run(stack, run_folder("keys-keyless-settled"), replicas=1) as run_:
        run_.replica("gpu-1").control(tool_at=0, fault={"kind": "die", "at": 0,
                                                         "phase": "after_tool"})
        gw = run_.start_gateway(env=ENV, timing=TIMING)
        s = ask(gw)
        assert s.status == 503, s
        e = s.error_body["error"]
        assert e["retryable"] is False and s.headers["x-should-retry"] == "false", s.headers
        assert len(executions(run_)) == 1


def test_keyed_the_same_failure_is_worth_a_retry_with_the_key(stack, tmp_path):
    with Run(stack, run_folder("keys-keyed-settled"), replicas=1) as run_:
        run_.replica("gpu-1").control(tool_at=0, fault={"kind": "die", "at": 0,
                                                         "phase": "after_tool"})
        gw = run_.start_gateway(env=ENV, timing=TIMING)
        s = ask(gw, key="settled")
        assert s.status == 503 and s.headers["x-should-retry"] == "true", s
        assert s.error_body["error"]["retryable"] is True
        # The request stays open for the repeat, which reruns with the settled call.
        assert run_.timeline(rid_of("settled"))["request"]["status"] == "open"
