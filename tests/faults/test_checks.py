"""The invariant checks themselves, on made-up traces: each kind of damage is caught.

The fault tests pass when checks.py finds nothing wrong, so a check that
could never fail would make every one of them worthless. Here a clean
trace passes, and a gap, a repeat, a chunk of another attempt, a wrong
delivered count, a [DONE] after the error, an unexpected decision, a
misread failure signal, a second execution of a tool call and an unknown
generation are each reported. No process is started.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

from checks import (Expect, check_replicas, check_stream, check_tool_log,  # noqa: E402
                    model_revision, retry_allowance)
from clients import Event, Stream  # noqa: E402
from tokens import expected_tokens  # noqa: E402

RID = "req-test"
SEED = 3
TOKENS = 4
RERUN = Expect(seed=SEED, max_tokens=TOKENS, outcome="complete", attempts=2, attempt_id="a2",
               final_actions=("retry_prefill",), signal="upstream_closed")
CUT = Expect(seed=SEED, max_tokens=TOKENS, outcome="terminated", attempts=1, attempt_id="a1",
             final_actions=("terminate_stream",), signal="upstream_closed")


def chunk(attempt_id, content=None, finish_reason=None):
    delta = {} if content is None else {"content": content}
    return {"id": "chatcmpl-" + RID, "object": "chat.completion.chunk", "model": "fake",
            "system_fingerprint": attempt_id,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def stream(payloads):
    """A Stream that received these events (dicts are JSON, strings verbatim)."""
    events = [Event(i * 0.01, p if isinstance(p, str) else json.dumps(p))
              for i, p in enumerate(payloads)]
    return Stream(status=200, headers={"x-request-id": RID}, events=events)


def timeline(status, attempts, actions, delivered):
    return {
        "request": {"request_id": RID, "status": status, "first_delta_sent": True,
                    "delivered_output_tokens": delivered},
        "attempts": [{"attempt_id": "a%d" % (i + 1), "state": "dead" if i + 1 < attempts
                      else "finished", "model_revision": model_revision()}
                     for i in range(attempts)],
        "events": [{"seq": i, "type": "failover_decision", "attempt_id": "a1",
                    "detail": {"action": a, "signal": "overloaded" if a == "keep_waiting"
                               else "upstream_closed"}} for i, a in enumerate(actions)],
    }


def rerun(contents):
    return stream([chunk("a2", c) for c in contents] + [chunk("a2", None, "stop"), "[DONE]"])


def cut(contents, delivered, done=False):
    error = {"error": {"code": "upstream_decode_interrupted", "request_id": RID,
                       "partial_output": True, "delivered_output_tokens": delivered,
                       "retryable": False}}
    return stream([chunk("a1", c) for c in contents] + [error] + (["[DONE]"] if done else []))


ANSWER = expected_tokens(SEED, TOKENS)
COMPLETED = timeline("completed", 2, ["keep_waiting", "retry_prefill"], TOKENS)
TERMINATED = timeline("terminated", 1, ["terminate_stream"], 2)


def test_clean_traces_pass():
    assert check_stream(rerun(ANSWER), COMPLETED, RERUN) == []
    assert check_stream(cut(ANSWER[:2], 2), TERMINATED, CUT) == []


def test_a_gap_is_caught():
    found = check_stream(rerun([ANSWER[0]] + ANSWER[2:]), COMPLETED, RERUN)
    assert any("not the answer's prefix" in f for f in found), found


def test_a_repeat_is_caught():
    found = check_stream(rerun(ANSWER[:2] + ANSWER[1:]), COMPLETED, RERUN)
    assert any("not the answer's prefix" in f for f in found), found


def test_a_chunk_of_another_attempt_is_caught():
    mixed = stream([chunk("a1", ANSWER[0])] + [chunk("a2", c) for c in ANSWER]
                   + [chunk("a2", None, "stop"), "[DONE]"])
    found = check_stream(mixed, COMPLETED, RERUN)
    assert any("several attempts" in f for f in found), found


def test_a_wrong_delivered_count_is_caught():
    found = check_stream(cut(ANSWER[:2], 3), TERMINATED, CUT)
    assert any("delivered_output_tokens=3" in f for f in found), found


def test_done_after_the_error_is_caught():
    found = check_stream(cut(ANSWER[:2], 2, done=True), TERMINATED, CUT)
    assert any("[DONE]" in f for f in found), found


def test_an_unexpected_decision_is_caught():
    found = check_stream(rerun(ANSWER), timeline("completed", 2, ["reject"], TOKENS), RERUN)
    assert any("failover decisions" in f for f in found), found


def test_a_misread_failure_is_caught():
    misread = timeline("completed", 2, ["retry_prefill"], TOKENS)
    misread["events"][0]["detail"]["signal"] = "heartbeat_timeout"
    found = check_stream(rerun(ANSWER), misread, RERUN)
    assert any("signal heartbeat_timeout" in f for f in found), found


def test_a_rerun_that_found_its_replica_dead_may_say_so_and_only_a_rerun():
    """mass_failure kills two replicas in turn: a rerun sent to the second
    before it died finds its port closed (replica_exited). The first
    attempt's failure must still be the stream cut it was."""
    mass = Expect(seed=SEED, max_tokens=TOKENS, outcome="rejected", attempts=2,
                  attempt_id=None, final_actions=("retry_prefill", "reject"),
                  signal="upstream_closed", rerun_signal="replica_exited")
    tl = timeline("failed", 2, ["retry_prefill", "reject"], 0)
    tl["events"][1].update(attempt_id="a2")
    tl["events"][1]["detail"]["signal"] = "replica_exited"
    assert not any("signal" in f for f in check_stream(rerun([]), tl, mass))
    tl["events"][0]["detail"]["signal"] = "replica_exited"  # the first attempt's: misread
    found = check_stream(rerun([]), tl, mass)
    assert any("signal replica_exited, expected upstream_closed" in f for f in found), found


def test_a_second_execution_is_caught():
    log = [{"idempotency_key": RID + ":call_00", "executed_at": "t1"},
           {"idempotency_key": RID + ":call_00", "executed_at": "t2"}]
    assert any("executed 2 times" in f for f in check_tool_log(log, RID, 1))
    deduped = [log[0], dict(log[1], deduped=True)]
    assert check_tool_log(deduped, RID, 1) == []


def test_a_generation_unknown_to_the_ledger_is_caught():
    events = [{"event": "request", "attempt_id": "a1"}, {"event": "request", "attempt_id": "a3"}]
    found = check_replicas(events, COMPLETED)
    assert any("a3" in f for f in found), found


def test_the_retry_allowance_follows_the_pool_budget():
    policy = {"percent_of_attempts": 20, "min_retries": 3}
    assert [retry_allowance(n, policy) for n in (1, 12, 15, 16, 20, 21)] == [3, 3, 3, 4, 4, 5]
