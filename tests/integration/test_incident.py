"""A scripted incident, read back the way an operator who was not there reads it.

A replica stalls in the middle of two tool calls. The router fails over,
waits for the fence, the stalled replica comes back and completes one call
late, an operator settles the other (unknown) one, the rerun takes over on
another replica, and the zombie's next claim is refused. Both the history
(GET /v1/requests/{rid}) and `ledgerctl show` must tell every step, in order.
"""

import os
import re
import subprocess
import time

from conftest import claim_id, new_id
from integration_helpers import LEDGERCTL, find_in_order


def ledgerctl(service, *args, token):
    env = dict(os.environ, LEDGER_URL="http://%s:%d" % (service.ledgerd.host,
                                                          service.ledgerd.port),
               LEDGER_TOKEN=token)
    return subprocess.run([str(LEDGERCTL)] + list(args), env=env, capture_output=True,
                          text=True, timeout=30)


def test_scripted_incident_reads_in_order(service):
    led = service.ledgerd
    router = service.token("router")
    agent = service.token("agent")
    admin = service.token("admin")
    rid = new_id("incident")
    base = "/v1/requests/%s" % rid

    def claim(cid, aid, **extra):
        body = {"claim_id": claim_id(), "attempt_id": aid, "owner": "worker@%s" % aid}
        body.update(extra)
        return led.post("%s/tool-calls/%s/claim" % (base, cid), body, token=agent)

    # 1. The first attempt runs on gpu-a and starts two side effects.
    assert led.post(base + "/attempts", {"attempt_id": "att-1", "replica": "gpu-a/3",
                                         "model_revision": "m@1", "lease_ms": 1200,
                                         "max_attempts": 3}, token=router).status == 201
    mail = claim("call_01", "att-1", tool="send_email", args={"to": "ana@example.com"},
                 lease_ms=300)
    refund = claim("call_02", "att-1", tool="refund", args={"amount": 40}, lease_ms=300)
    assert mail.status == 201 and refund.status == 201

    # 2. gpu-a stops answering: fence it and wait.
    wait = led.post(base + "/failover", {"attempt_id": "att-1", "signal": "heartbeat_timeout",
                                         "next_attempt": {"attempt_id": "att-2",
                                                          "replica": "gpu-b/1"}},
                    token=router)
    assert wait.json["action"] == "wait_for_fence"

    # 3. Both calls' leases run out: their outcome is unknown.
    time.sleep(0.4)
    assert led.get(base + "/tool-calls/call_02", token=agent).json["state"] == "unknown"

    # 4. The stalled replica wakes up and reports the email it did send: late, accepted.
    late = led.post(base + "/tool-calls/call_01/complete",
                    {"fencing_token": 1, "outcome": "succeeded", "result": {"id": "m-1"}},
                    token=agent)
    assert late.status == 200 and late.json["late_completion"] is True

    # 5. An operator finds no refund in the payment log and settles the unknown call.
    unknown = ledgerctl(service, "unknown", token=admin)
    assert unknown.returncode == 0 and "call_02" in unknown.stdout, unknown
    settled = ledgerctl(service, "resolve", rid, "call_02", "--as", "not_executed",
                        "--note", "no refund in the payment log", token=admin)
    assert settled.returncode == 0, settled

    # 6. gpu-a's lease runs out: the rerun starts on gpu-b.
    time.sleep(0.9)
    rerun = led.post(base + "/failover", {"attempt_id": "att-1", "signal": "heartbeat_timeout",
                                          "next_attempt": {"attempt_id": "att-2",
                                                           "replica": "gpu-b/1"}},
                     token=router)
    assert rerun.json["action"] == "retry_prefill", rerun
    assert [c["tool_call_id"] for c in rerun.json["settled_tool_calls"]] == ["call_01"]

    # 7. The zombie tries another side effect: refused.
    zombie = claim("call_03", "att-1", tool="send_email")
    assert zombie.status == 409 and zombie.code == "attempt_fenced"

    # 8. The rerun gets the email's result back, runs the refund once, and answers.
    assert claim("call_01", "att-2", tool="send_email",
                 args={"to": "ana@example.com"}).json["replayed"] is True
    again = claim("call_02", "att-2", tool="refund", args={"amount": 40})
    assert again.status == 201 and again.json["fencing_token"] == 3
    assert led.post(base + "/tool-calls/call_02/complete",
                    {"fencing_token": 3, "outcome": "succeeded", "result": {"refund": "r-9"}},
                    token=agent).status == 200
    assert led.post(base + "/attempts/att-2/deliver", {"delivered_output_tokens": 0},
                    token=router).status == 200
    assert led.post(base + "/attempts/att-2/finish",
                    {"outcome": "completed", "delivered_output_tokens": 52},
                    token=router).status == 200

    # The history tells each step, in order.
    events = led.get(base, token=admin).json["events"]
    steps = [(e["type"], e.get("attempt_id"), e.get("tool_call_id"),
              e["detail"].get("action") or e["detail"].get("code")) for e in events]
    expected = [
        ("attempt_created", "att-1", None, None),
        ("claimed", "att-1", "call_01", None),
        ("claimed", "att-1", "call_02", None),
        ("attempt_revoked", "att-1", None, None),
        ("failover_decision", "att-1", None, "wait_for_fence"),
        ("late_completion", "att-1", "call_01", None),
        ("resolved", None, "call_02", None),
        ("attempt_revoked", "att-1", None, None),
        ("attempt_created", "att-2", None, None),
        ("failover_decision", "att-1", None, "retry_prefill"),
        ("refused", "att-1", "call_03", "attempt_fenced"),
        ("claimed", "att-2", "call_02", None),
        ("completed", "att-2", "call_02", None),
        ("first_delta", "att-2", None, None),
        ("attempt_finished", "att-2", None, None),
        ("request_status", "att-2", None, None),
    ]
    assert steps == expected

    # And so does ledgerctl show, within 100 columns.
    show = ledgerctl(service, "show", rid, token=admin)
    assert show.returncode == 0, show
    lines = show.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert re.search(r"request\s+%s\s+completed" % re.escape(rid), show.stdout)
    assert re.search(r"att-1\s+1\s+gpu-a/3\s+superseded", show.stdout)
    assert re.search(r"att-2\s+2\s+gpu-b/1\s+finished", show.stdout)
    find_in_order(lines, [
        r"att-1\s+gpu-a/3\s+attempt_created",
        r"att-1\s+gpu-a/3\s+claimed\s+call_01 send_email",
        r"att-1\s+gpu-a/3\s+claimed\s+call_02 refund",
        r"att-1\s+gpu-a/3\s+attempt_revoked\s+-> cancel_requested",
        r"failover_decision\s+heartbeat_timeout -> wait_for_fence",
        r"late_completion\s+call_01 succeeded from token 1",
        r"resolved\s+call_02 -> not_executed",
        r"attempt_revoked\s+-> superseded",
        r"att-2\s+gpu-b/1\s+attempt_created\s+epoch 2",
        r"failover_decision\s+heartbeat_timeout -> retry_prefill",
        r"att-1\s+gpu-a/3\s+refused\s+claim call_03 refused: attempt_fenced",
        r"att-2\s+gpu-b/1\s+claimed\s+call_02 refund, token 3",
        r"att-2\s+gpu-b/1\s+completed\s+call_02 succeeded",
        r"att-2\s+gpu-b/1\s+first_delta",
        r"att-2\s+gpu-b/1\s+attempt_finished\s+completed",
        r"request_status\s+request completed",
    ])
