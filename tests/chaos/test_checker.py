"""The chaos checker on made-up traces: each kind of damage is caught.

The campaign passes when checker.judge() finds nothing, so a check that
could never fail would make every campaign worthless. Each test here
starts from a clean trace of a routed request (an attempt, two tool calls
executed once each, a delivery, a finish), which must pass, and damages it
the way a broken ledger would: a second execution, a lost or altered
completion, tokens out of order, a zombie's execution under a superseded
token, two live attempts, an attempt after the first delta, an event that
is no edge of the state machines. No process is started.
"""

import copy
import json
from datetime import datetime, timezone

import pytest

import checker

RID = "r-1"
T0 = 1_800_000_000.0


def at(s):
    """The API's timestamp of T0 + @s seconds."""
    return datetime.fromtimestamp(T0 + s, timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


class Trace:
    """A run's three records, built by hand: tool log, client entries, final state."""

    def __init__(self):
        self.events = []
        self.tool_log = []
        self.clients = []
        self.calls = {}
        self.attempts = {}
        self.request = {"request_id": RID, "status": "open", "first_delta_sent": False}

    def ev(self, s, type_, detail=None, attempt_id=None, cid=None):
        e = {"seq": len(self.events) + 1, "at": at(s), "type": type_, "detail": detail or {}}
        if attempt_id:
            e["attempt_id"] = attempt_id
        if cid:
            e["tool_call_id"] = cid
        self.events.append(e)
        return e

    def http(self, s, op_path, status, answer, body=None, proc="agent-1", took=0.01):
        self.clients.append({"kind": "http", "proc": proc, "t": T0 + s + took, "t0": T0 + s,
                             "t1": T0 + s + took, "method": "POST",
                             "path": "/v1/requests/%s/%s" % (RID, op_path),
                             "body": json.dumps(body or {}), "status": status,
                             "answer": answer if isinstance(answer, str) else json.dumps(answer)})

    def tool(self, s, cid, token, verdict="executed", answer=None):
        key = "%s:%s" % (RID, cid)
        self.tool_log.append({"seq": len(self.tool_log) + 1, "at": T0 + s, "key": key,
                              "tool": "create_ticket", "token": token, "verdict": verdict,
                              "answer": answer or {"key": key, "token": token}})

    def run(self, replays=None):
        tool_calls = {}
        for cid, call in self.calls.items():
            tool_calls["%s:%s" % (RID, cid)] = dict(
                {"request_id": RID, "tool_call_id": cid, "tool": "create_ticket",
                 "tool_dedupes": False}, **call)
        if replays is None:
            replays = {}
            for key, got in tool_calls.items():
                if got["state"] in ("succeeded", "failed"):
                    text = '{"status":"completed","outcome":"%s","result":%s,' \
                        '"idempotency_key":"%s","replayed":true}' % (
                            got["state"], json.dumps(got["result"], separators=(",", ":")), key)
                    replays[key] = [{"via": "L1", "status": 200, "text": text},
                                    {"via": "L2", "status": 200, "text": text}]
        # The history in time order, whatever order the test wrote it in.
        events = sorted(self.events, key=lambda e: e["at"])
        events = [dict(e, seq=i + 1) for i, e in enumerate(events)]
        view = {"request": self.request,
                "attempts": [{"attempt_id": a, "state": s} for a, s in self.attempts.items()],
                "tool_calls": list(tool_calls.values()), "events": events}
        return {"tool_log": self.tool_log, "clients": self.clients,
                "final": {"requests": {RID: view}, "tool_calls": tool_calls, "replays": replays}}


def result(cid, token):
    return {"key": "%s:%s" % (RID, cid), "token": token}


def result_text(cid, token):
    return json.dumps(result(cid, token), separators=(",", ":"))


def clean():
    """A routed request: a1 claims and completes call_00 and call_01, delivers, finishes."""
    t = Trace()
    t.http(0.0, "attempts", 201, {"attempt_id": "a1", "epoch": 1, "lease_ms": 3000},
           {"attempt_id": "a1"}, proc="router-1")
    t.ev(0.01, "attempt_created", {"epoch": 1, "lease_ms": 3000}, "a1")
    for i, cid in enumerate(("call_00", "call_01")):
        s = 0.1 + i
        t.http(s, "tool-calls/%s/claim" % cid, 201,
               {"status": "claimed", "idempotency_key": "%s:%s" % (RID, cid),
                "fencing_token": 1, "lease_ms": 3000}, {"claim_id": "c" * 32})
        t.ev(s + 0.005, "claimed", {"fencing_token": 1, "lease_ms": 3000}, "a1", cid)
        t.tool(s + 0.1, cid, 1, answer=result(cid, 1))
        t.http(s + 0.2, "tool-calls/%s/complete" % cid, 200,
               '{"status":"completed","outcome":"succeeded","result":%s,"idempotency_key":"%s:%s"}'
               % (result_text(cid, 1), RID, cid),
               {"fencing_token": 1, "outcome": "succeeded"})
        t.ev(s + 0.205, "completed", {"outcome": "succeeded", "fencing_token": 1}, "a1", cid)
        t.calls[cid] = {"state": "succeeded", "fencing_token": 1, "outcome": "succeeded",
                        "result": result(cid, 1)}
    t.http(2.5, "attempts/a1/deliver", 200, {"first_delta_sent": True}, proc="router-1")
    t.ev(2.505, "first_delta", {"delivered_output_tokens": 12}, "a1")
    t.ev(2.6, "attempt_finished", {"outcome": "completed"}, "a1")
    t.ev(2.6, "request_status", {"status": "completed"}, "a1")
    t.attempts["a1"] = "finished"
    t.request.update(status="completed", first_delta_sent=True)
    return t


def kinds(run):
    return sorted({a["kind"] for a in checker.judge(run)})


def found(run, kind):
    anomalies = checker.judge(run)
    assert any(a["kind"] == kind for a in anomalies), anomalies
    return anomalies


def test_a_clean_trace_passes():
    assert checker.judge(clean().run()) == []


def released_and_reclaimed(t, how="claimed", detail=None):
    """call_02 under a1: token 1 executed, then the key moves on to token 2 by @how."""
    cid = "call_02"
    t.ev(1.9, "claimed", {"fencing_token": 1, "lease_ms": 3000}, "a1", cid)
    t.tool(1.95, cid, 1, answer=result(cid, 1))
    if how == "claimed":  # the holder said it did not run: released, claimed again
        t.ev(1.96, "released", {"fencing_token": 1}, "a1", cid)
        t.ev(1.97, "claimed", {"fencing_token": 2, "lease_ms": 3000,
                               "previous_state": "released"}, "a1", cid)
    else:
        t.ev(1.97, how, detail, "a1" if how == "claimed" else None, cid)
    return cid


def test_a_second_execution_is_caught():
    t = clean()
    cid = released_and_reclaimed(t)
    t.tool(2.0, cid, 2, answer=result(cid, 2))
    t.ev(2.1, "completed", {"outcome": "succeeded", "fencing_token": 2}, "a1", cid)
    t.calls[cid] = {"state": "succeeded", "fencing_token": 2, "result": result(cid, 2)}
    anomalies = found(t.run(), "double_execution")
    assert any("call_02" in a["text"] for a in anomalies)


def test_a_second_execution_after_a_dedupe_safe_reclaim_is_excused():
    t = clean()
    cid = "call_02"
    t.ev(1.0, "claimed", {"fencing_token": 1, "lease_ms": 300, "tool_dedupes": True}, "a1", cid)
    t.tool(1.05, cid, 1, answer=result(cid, 1))  # the holder, frozen after it, loses its lease
    t.ev(1.5, "claimed", {"fencing_token": 2, "lease_ms": 3000, "tool_dedupes": True,
                          "previous_state": "unknown"}, "a1", cid)
    t.tool(1.6, cid, 2, answer=result(cid, 2))
    t.ev(1.7, "completed", {"outcome": "succeeded", "fencing_token": 2}, "a1", cid)
    t.calls[cid] = {"state": "succeeded", "fencing_token": 2, "result": result(cid, 2),
                    "tool_dedupes": True}
    assert checker.judge(t.run()) == []


def test_a_second_execution_after_a_not_executed_resolution_is_excused():
    t = clean()
    cid = "call_02"
    t.ev(1.0, "claimed", {"fencing_token": 1, "lease_ms": 300}, "a1", cid)
    t.tool(1.5, cid, 1, answer=result(cid, 1))
    t.ev(1.4, "resolved", {"resolution": "not_executed", "fencing_token": 2,
                           "previous_state": "unknown"}, None, cid)
    t.ev(1.6, "claimed", {"fencing_token": 3, "lease_ms": 3000, "previous_state": "released"},
         "a1", cid)
    t.tool(1.7, cid, 3, answer=result(cid, 3))
    t.ev(1.8, "completed", {"outcome": "succeeded", "fencing_token": 3}, "a1", cid)
    t.calls[cid] = {"state": "succeeded", "fencing_token": 3, "result": result(cid, 3)}
    assert checker.judge(t.run()) == []


def contradicted(resolved_token):
    """call_02: token 1 frozen, resolved not_executed, then it reports it ran."""
    t = clean()
    cid = "call_02"
    t.ev(1.0, "claimed", {"fencing_token": 1, "lease_ms": 300}, "a1", cid)
    t.ev(1.4, "resolved", {"resolution": "not_executed", "fencing_token": 2,
                           "previous_state": "unknown"}, None, cid)
    t.tool(1.5, cid, 1, answer=result(cid, 1))
    t.ev(1.6, "late_completion", {"outcome": "succeeded", "fencing_token": 1}, "a1", cid)
    t.ev(1.6, "resolve_contradicted", {"fencing_token": 1, "outcome": "succeeded",
                                       "resolved_token": resolved_token, "current_token": 2,
                                       "newer_holder": False}, "a1", cid)
    t.calls[cid] = {"state": "succeeded", "fencing_token": 2, "result": result(cid, 1)}
    return t


def test_a_resolution_proved_wrong_is_a_note_not_a_move():
    assert checker.judge(contradicted(2).run()) == []


def test_a_contradiction_naming_no_resolution_is_caught():
    assert found(contradicted(3).run(), "bad_transition")


def test_an_execution_under_a_superseded_token_is_caught():
    t = clean()
    cid = "call_02"
    t.ev(1.0, "claimed", {"fencing_token": 1, "lease_ms": 3000}, "a1", cid)
    t.ev(1.1, "released", {"fencing_token": 1}, "a1", cid)
    t.ev(1.2, "claimed", {"fencing_token": 2, "lease_ms": 3000, "previous_state": "released"},
         "a1", cid)
    t.tool(1.5, cid, 1, answer=result(cid, 1))  # the old holder acts after it let go
    t.tool(1.6, cid, 2, answer=result(cid, 2))
    t.ev(1.7, "completed", {"outcome": "succeeded", "fencing_token": 2}, "a1", cid)
    t.calls[cid] = {"state": "succeeded", "fencing_token": 2, "result": result(cid, 2)}
    found(t.run(), "superseded_execution")


def test_executions_out_of_token_order_are_caught():
    t = clean()
    cid = "call_02"
    t.ev(1.0, "claimed", {"fencing_token": 1, "lease_ms": 300, "tool_dedupes": True}, "a1", cid)
    t.ev(1.5, "claimed", {"fencing_token": 2, "lease_ms": 3000, "tool_dedupes": True,
                          "previous_state": "unknown"}, "a1", cid)
    t.tool(1.6, cid, 2, answer=result(cid, 2))
    t.tool(1.7, cid, 1, answer=result(cid, 1))  # a tool that let a zombie through
    t.ev(1.8, "completed", {"outcome": "succeeded", "fencing_token": 2}, "a1", cid)
    t.calls[cid] = {"state": "succeeded", "fencing_token": 2, "result": result(cid, 2),
                    "tool_dedupes": True}
    found(t.run(), "tool_token_order")


def test_history_tokens_that_do_not_grow_are_caught():
    t = clean()
    cid = "call_02"
    t.ev(1.0, "claimed", {"fencing_token": 1, "lease_ms": 3000}, "a1", cid)
    t.ev(1.1, "released", {"fencing_token": 1}, "a1", cid)
    t.ev(1.2, "claimed", {"fencing_token": 1, "lease_ms": 3000, "previous_state": "released"},
         "a1", cid)
    t.calls[cid] = {"state": "in_progress", "fencing_token": 1}
    found(t.run(), "history_token_order")


def test_an_execution_under_a_token_never_issued_is_caught():
    t = clean()
    t.tool(1.9, "call_00", 5, answer=result("call_00", 5))
    found(t.run(), "token_never_issued")


def test_a_claim_the_history_lost_is_caught():
    t = clean()
    t.http(1.9, "tool-calls/call_05/claim", 201,
           {"status": "claimed", "fencing_token": 1, "lease_ms": 3000}, {"claim_id": "d" * 32})
    found(t.run(), "lost_claim")


def test_a_completion_replayed_with_other_bytes_is_caught():
    t = clean()
    run = t.run()
    key = "%s:call_00" % RID
    text = run["final"]["replays"][key][1]["text"]
    # The same JSON value, spelled differently: not byte for byte.
    run["final"]["replays"][key][1]["text"] = text.replace('"token":1', '"token": 1')
    anomalies = found(run, "lost_completion")
    assert any("L2" in a["text"] for a in anomalies)


def test_an_acknowledged_completion_lost_by_the_final_state_is_caught():
    t = clean()
    t.calls["call_01"] = {"state": "released", "fencing_token": 1}
    run = t.run(replays={})
    assert "lost_completion" in kinds(run)


def test_different_results_told_for_one_key_are_caught():
    t = clean()
    t.http(2.2, "tool-calls/call_00/claim", 200,
           '{"status":"completed","outcome":"succeeded","result":%s}' % result_text("call_00", 9),
           {"claim_id": "e" * 32})
    found(t.run(), "conflicting_acks")


def test_a_key_handed_over_while_its_holder_renewed_is_caught():
    t = clean()
    cid = "call_02"
    t.ev(1.0, "claimed", {"fencing_token": 1, "lease_ms": 1000, "tool_dedupes": True}, "a1", cid)
    # The holder's renewal at 1.5 s was acknowledged: its lease runs to 2.5 s at least.
    t.http(1.5, "tool-calls/%s/renew" % cid, 200, {"lease_ms": 1000}, {"fencing_token": 1})
    t.ev(2.1, "claimed", {"fencing_token": 2, "lease_ms": 3000, "tool_dedupes": True,
                          "previous_state": "unknown"}, "a1", cid)
    t.calls[cid] = {"state": "in_progress", "fencing_token": 2, "tool_dedupes": True}
    found(t.run(), "claim_while_held")


def test_a_reclaim_from_unknown_of_a_tool_that_does_not_dedupe_is_caught():
    t = clean()
    cid = "call_02"
    t.ev(1.0, "claimed", {"fencing_token": 1, "lease_ms": 300}, "a1", cid)
    t.ev(1.5, "claimed", {"fencing_token": 2, "lease_ms": 3000, "previous_state": "unknown"},
         "a1", cid)
    t.calls[cid] = {"state": "in_progress", "fencing_token": 2}
    anomalies = found(t.run(), "bad_transition")
    assert any("tool_dedupes" in a["text"] for a in anomalies)


def with_second_attempt(t, created_at, revoke=None):
    """a2 of the request, created at @created_at, after the revocation @revoke of a1."""
    t.events = [e for e in t.events if e["type"] not in ("first_delta", "attempt_finished",
                                                         "request_status")]
    t.clients = [c for c in t.clients if "deliver" not in c["path"]]
    if revoke:
        t.ev(created_at, "attempt_revoked", {"state": revoke[0], "cause": revoke[1]}, "a1")
    t.ev(created_at, "attempt_created", {"epoch": 2, "lease_ms": 3000, "retry": True}, "a2")
    t.attempts.update(a1=revoke[0] if revoke else "live", a2="live")
    t.request.update(status="open", first_delta_sent=False)


def test_a_second_live_attempt_is_caught():
    t = clean()
    with_second_attempt(t, 2.0)
    found(t.run(), "two_live_attempts")


def test_a_rerun_over_a_dead_replica_passes():
    t = clean()
    with_second_attempt(t, 2.0, revoke=("dead", "replica_exited"))
    assert checker.judge(t.run()) == []


def test_superseding_an_attempt_whose_renewed_lease_runs_is_caught():
    t = clean()
    t.http(1.8, "attempts/a1/renew", 200, {"lease_ms": 3000}, {"lease_ms": 3000},
           proc="router-1")
    with_second_attempt(t, 2.0, revoke=("superseded", "heartbeat_timeout"))
    anomalies = found(t.run(), "two_live_attempts")
    assert any("acknowledged lease" in a["text"] for a in anomalies)


def test_an_attempt_created_while_a_cancelled_one_still_blocks_is_caught():
    t = clean()
    t.events = [e for e in t.events if e["type"] not in ("first_delta", "attempt_finished",
                                                         "request_status")]
    t.clients = [c for c in t.clients if "deliver" not in c["path"]]
    t.ev(2.0, "attempt_revoked", {"state": "cancel_requested", "cause": "heartbeat_timeout"},
         "a1")
    t.ev(2.1, "attempt_created", {"epoch": 2, "lease_ms": 3000, "retry": True}, "a2")
    t.attempts.update(a1="cancel_requested", a2="live")
    t.request.update(status="open", first_delta_sent=False)
    found(t.run(), "two_live_attempts")


def test_an_attempt_after_the_first_delta_is_caught():
    t = clean()
    t.events = [e for e in t.events if e["type"] not in ("attempt_finished", "request_status")]
    t.ev(3.0, "attempt_revoked", {"state": "dead", "cause": "replica_exited"}, "a1")
    t.ev(3.0, "attempt_created", {"epoch": 2, "lease_ms": 3000, "retry": True}, "a2")
    t.attempts.update(a1="dead", a2="live")
    t.request.update(status="open")
    anomalies = found(t.run(), "attempt_after_first_delta")
    # Both records say so: the history's order and the router's acknowledged deliver.
    assert len([a for a in anomalies if a["kind"] == "attempt_after_first_delta"]) == 2


def test_an_attempt_after_an_acknowledged_deliver_the_history_lost_is_caught():
    t = clean()
    t.events = [e for e in t.events if e["type"] not in ("first_delta", "attempt_finished",
                                                         "request_status")]
    t.ev(3.0, "attempt_revoked", {"state": "dead", "cause": "replica_exited"}, "a1")
    t.ev(3.0, "attempt_created", {"epoch": 2, "lease_ms": 3000, "retry": True}, "a2")
    t.attempts.update(a1="dead", a2="live")
    t.request.update(status="open", first_delta_sent=False)
    assert {"attempt_after_first_delta", "lost_delta"} <= set(kinds(t.run()))


@pytest.mark.parametrize("damage", [
    "completed after succeeded", "released after succeeded", "claimed from absent twice",
    "finished after superseded", "request completed then open", "resolved not_executed final",
])
def test_an_event_off_the_state_machines_is_caught(damage):
    t = clean()
    if damage == "completed after succeeded":
        t.ev(2.7, "completed", {"outcome": "failed", "fencing_token": 1}, "a1", "call_00")
    elif damage == "released after succeeded":
        t.ev(2.7, "released", {"fencing_token": 1}, "a1", "call_01")
    elif damage == "claimed from absent twice":
        t.ev(2.0, "claimed", {"fencing_token": 1, "lease_ms": 3000}, "a1", "call_00")
    elif damage == "finished after superseded":
        t.events.insert(-2, dict(t.events[0], seq=99, type="attempt_revoked",
                                 detail={"state": "superseded", "cause": "next_attempt"}))
    elif damage == "request completed then open":
        t.ev(2.7, "request_status", {"status": "open"}, "a1")
    elif damage == "resolved not_executed final":
        t.ev(2.7, "resolved", {"resolution": "not_executed", "fencing_token": 2,
                               "previous_state": "succeeded"}, None, "call_00")
    found(t.run(), "bad_transition")


def test_a_claim_by_a_superseded_attempt_is_caught():
    t = clean()
    with_second_attempt(t, 2.0, revoke=("dead", "replica_exited"))
    t.ev(2.2, "claimed", {"fencing_token": 1, "lease_ms": 3000}, "a1", "call_03")
    t.calls["call_03"] = {"state": "in_progress", "fencing_token": 1}
    found(t.run(), "no_rights")


def test_a_final_state_off_the_walk_is_caught():
    t = clean()
    run = t.run()
    run["final"]["tool_calls"]["%s:call_01" % RID]["fencing_token"] = 2
    found(run, "final_state_mismatch")
    t = clean()
    t.attempts["a1"] = "live"
    found(t.run(), "final_state_mismatch")


def test_a_result_the_tool_never_gave_is_caught():
    t = clean()
    t.calls["call_01"]["result"] = {"key": "%s:call_00" % RID, "token": 1}  # another key's
    run = t.run()
    found(run, "foreign_result")


def test_a_finish_or_a_decision_the_final_state_forgot_is_caught():
    t = clean()
    t.http(2.6, "attempts/a1/finish", 200, {"state": "finished",
                                            "request": {"status": "completed"}}, proc="router-1")
    assert checker.judge(t.run()) == []
    t.request["status"] = "open"
    t.events = [e for e in t.events if e["type"] != "request_status"]
    found(t.run(), "lost_close")
    t = clean()
    t.http(2.7, "failover", 200, {"action": "reject", "client_error": {}}, proc="router-1")
    found(t.run(), "lost_close")


def test_a_lost_attempt_is_caught():
    t = clean()
    t.http(2.8, "attempts", 201, {"attempt_id": "a9", "epoch": 2, "lease_ms": 3000},
           {"attempt_id": "a9"}, proc="router-1")
    found(t.run(), "lost_attempt")


def test_the_c_sdk_acknowledgements_count_too():
    t = clean()
    t.clients.append({"kind": "outcome", "sdk": "c", "proc": "agent-5", "t": T0 + 3,
                      "rid": RID, "cid": "call_01", "call_kind": "replayed",
                      "call": "succeeded", "result_json": result_text("call_01", 7)})
    found(t.run(), "conflicting_acks")


def test_raw_member_keeps_the_bytes():
    text = '{"status":"completed","result":{"b": 1,  "a":[1.50]},"x":null}'
    assert checker.raw_member(text, "result") == '{"b": 1,  "a":[1.50]}'
    assert checker.raw_member(text, "x") == "null"
    assert checker.raw_member('{"a":1}', "result") is None


def test_the_tables_name_only_states_of_the_design():
    tool_states = {"absent", "in_progress", "released", "succeeded", "failed"}
    assert {s for s, _ in checker.TOOL_CALL_EDGES} | set(checker.TOOL_CALL_EDGES.values()) \
        <= tool_states
    assert set(checker.TOOL_CALL_TOKEN_RULE) == {e for _, e in checker.TOOL_CALL_EDGES}
    attempt_states = {"absent", "live", "cancel_requested", "cancelled", "dead", "superseded",
                      "finished", "failed"}
    assert {s for s, _ in checker.ATTEMPT_EDGES} | set(checker.ATTEMPT_EDGES.values()) \
        <= attempt_states
    assert not any(s in ("succeeded", "failed") for s, _ in checker.TOOL_CALL_EDGES)
    assert copy.deepcopy(checker.REQUEST_EDGES) == checker.REQUEST_EDGES
