"""Real clients and a real router in front of build/ledger-gateway: the
official `openai` npm client with its own retries, and Portkey's open-source
gateway (portkey_proc.py) with retries on 503. Each runs the scenario that
made one logical request run its tool several times, and shows it now runs
once.

The replicas are tests/faults/'s, which run their tool through ledgerd; the
tool service logs every execution.
"""

import json
import sys
import threading
import time
from pathlib import Path

import pytest

import portkey_proc
from keyed import ENV, TIMING, executions, rid_of, upstream_requests

FAULTS = Path(__file__).resolve().parents[2] / "faults"
sys.path.insert(0, str(FAULTS))

from clients import completion_body, install_openai_client, openai_completion  # noqa: E402
from stack import Run, Stack, run_folder, wait_until  # noqa: E402
from tokens import expected_tokens  # noqa: E402


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    install_openai_client()
    s = Stack(tmp_path_factory.mktemp("clients"), TIMING)
    yield s
    s.close()


@pytest.fixture
def run(stack, request):
    with Run(stack, run_folder("clients-" + request.node.name[:40])) as r:
        yield r


@pytest.fixture(scope="module")
def portkey(tmp_path_factory):
    pk = portkey_proc.Portkey(tmp_path_factory.mktemp("portkey") / "portkey.log")
    yield pk
    pk.stop()


# --- the official openai client ---


def test_openai_client_timeouts_and_retries_are_one_request_and_one_execution(run):
    """The replica runs its tool before its first token, which comes 4 s later;
    the client gives up after 2 s and retries (its default of 2), with the key in
    the create() call's headers. Each retry attaches to the same run."""
    for r in run.replicas:
        r.control(tool_at=0, token_delay_ms=4000)
    gw = run.start_gateway(env=ENV, timing=TIMING)
    got = openai_completion(gw.url, 11, 1, maxRetries=2, timeout=2000,
                            headers={"Idempotency-Key": "agent-run-7:step-1"})
    assert got["error"] is None, got
    rid = rid_of("agent-run-7:step-1", "Bearer unused")  # the client's api key scopes it
    assert got["request_id"] == rid
    assert got["text"] == "".join(expected_tokens(11, 1, rid, tool_at=0))
    assert got["http_requests"] >= 2  # it did time out and retry
    assert len(executions(run)) == 1
    assert len(upstream_requests(run)) == 1
    timeline = run.timeline(rid)
    assert timeline["request"]["status"] == "completed"
    assert timeline["request"]["attempts"] == 1
    # Each retry attached to the run (after its predecessor's disconnect), or, once the
    # run had ended, got its kept answer: a replay records no client event.
    types = [e["type"] for e in timeline["events"]]
    assert 1 <= types.count("client_resumed") <= got["http_requests"] - 1, types
    assert types.count("client_disconnected") == types.count("client_resumed"), types


def test_openai_client_without_a_key_runs_the_tool_once_per_retry(run):
    """The same client without a key: what the key is for. Each retry is another
    logical request, and its tool runs again."""
    for r in run.replicas:
        r.control(tool_at=0, token_delay_ms=4000)
    gw = run.start_gateway(env=ENV, timing=TIMING)
    got = openai_completion(gw.url, 12, 1, maxRetries=2, timeout=2000)
    assert got["error"] is not None and got["http_requests"] == 3
    assert wait_until(lambda: len(executions(run)) == 3, 10), executions(run)


# --- Portkey in front ---


def portkey_config(gw, forward=("idempotency-key", "authorization"), attempts=2):
    return portkey_proc.config(gw.url + "/v1", list(forward), retry_attempts=attempts,
                               retry_on=[503])


def test_portkey_retries_are_one_logical_request_within_its_budget(run, portkey):
    """Both replicas fail before the first token: the request spends its budget
    (max_attempts 2) and fails with 503. Portkey retries that 503 twice with the
    same key; each retry is answered from the request's record, and no attempt
    or tool execution is added."""
    for r in run.replicas:
        r.control(tool_at=0, fault={"kind": "die", "at": 0, "phase": "after_tool"})
    gw = run.start_gateway(env=ENV, timing=TIMING)
    status, headers, body = portkey.chat(
        completion_body(13, 2), portkey_config(gw),
        {"Idempotency-Key": "pk-budget", "Authorization": "Bearer team-a"})
    assert status == 503, body
    rid = rid_of("pk-budget", "Bearer team-a")
    timeline = run.timeline(rid)
    assert timeline["request"]["status"] == "failed"
    assert timeline["request"]["attempts"] == 2
    assert len(upstream_requests(run)) == 2
    assert len(executions(run)) == 1  # the rerun was handed the settled call
    # Portkey sent the request three times: the gateway replayed the refusal twice.
    replays = [json.loads(line) for line in Path(gw.log_path).read_text().splitlines()
               if '"replayed"' in line]
    assert len(replays) == 2 and all(r["request_id"] == rid for r in replays)
    # Portkey rewrote the error: ledgerd's request_id and retryable are gone.
    error = json.loads(body)["error"]
    assert "request_id" not in error and "retryable" not in error


def test_portkey_without_forwarded_headers_makes_each_retry_a_new_request(run, portkey):
    """Without forward_headers Portkey drops the key, so its retries are new logical
    requests, and each one runs the tool again: the setting is required."""
    for r in run.replicas:
        r.control(tool_at=0, fault={"kind": "die", "at": 0, "phase": "after_tool"})
    gw = run.start_gateway(env=ENV, timing=TIMING)
    status, _, _ = portkey.chat(completion_body(14, 2), portkey_config(gw, forward=()),
                                {"Idempotency-Key": "pk-lost", "Authorization": "Bearer t"})
    assert status == 503
    # Three requests reached the gateway, each a logical request of its own. The
    # last one's lines may reach the log just after Portkey answered.
    def rids():
        return {json.loads(line).get("request_id")
                for line in Path(gw.log_path).read_text().splitlines() if '"request_id"' in line}
    wait_until(lambda: len(rids()) >= 3, 5)
    assert len(rids()) == 3 and all(rid.startswith("req-") for rid in rids()), rids()
    assert len(executions(run)) == 1  # only because both replicas died with the first


def test_portkey_replaces_the_scope_header_unless_it_is_forwarded(run, portkey):
    """Portkey sends its config's api_key as Authorization: two clients with the same
    key then share a scope, and the second gets the first's answer. Forwarding
    authorization keeps each client's own scope."""
    gw = run.start_gateway(env=ENV, timing=TIMING)
    replaced = portkey_config(gw, forward=("idempotency-key",))
    _, h1, b1 = portkey.chat(completion_body(15, 2), replaced,
                             {"Idempotency-Key": "same", "Authorization": "Bearer alice"})
    _, h2, b2 = portkey.chat(completion_body(15, 2), replaced,
                             {"Idempotency-Key": "same", "Authorization": "Bearer bob"})
    scope = "Bearer " + portkey_proc.CONFIG_API_KEY
    assert h1["x-request-id"] == h2["x-request-id"] == rid_of("same", scope)
    assert h2.get("idempotent-replayed") == "true" and b1 == b2
    kept = portkey_config(gw)
    _, h3, _ = portkey.chat(completion_body(15, 2), kept,
                            {"Idempotency-Key": "same", "Authorization": "Bearer alice"})
    _, h4, _ = portkey.chat(completion_body(15, 2), kept,
                            {"Idempotency-Key": "same", "Authorization": "Bearer bob"})
    assert h3["x-request-id"] == rid_of("same", "Bearer alice")
    assert h4["x-request-id"] == rid_of("same", "Bearer bob")


def test_portkey_passes_the_final_error_event_of_a_cut_stream(run, portkey):
    """A replica dies after two tokens: ledger-gateway ends the stream with its
    error event, and Portkey's client gets it, not a clean end."""
    for r in run.replicas:
        r.control(fault={"kind": "die", "at": 1, "phase": "after_send"})
    gw = run.start_gateway(env=ENV, timing=TIMING)
    status, _, body = portkey.chat(completion_body(16, 6), portkey_config(gw),
                                   {"Idempotency-Key": "pk-cut", "Authorization": "Bearer a"})
    assert status == 200
    events = [e for e in body.decode().split("\n\n") if e.strip()]
    final = json.loads(events[-1].split("data: ", 1)[1])
    assert final["error"]["code"] == "upstream_decode_interrupted"
    assert final["error"]["partial_output"] is True
    assert "[DONE]" not in body.decode()
    assert events[-1].startswith("id: ")


def test_portkey_hides_a_gateway_crash_as_a_clean_end(run, portkey):
    """What no gateway can mend: when ledger-gateway itself dies mid-stream, Portkey
    ends its client's stream as if it were whole (no error, no [DONE]). The repeat
    with the key then answers the truth: the request was terminated."""
    for r in run.replicas:
        r.control(token_delay_ms=300)
    gw = run.start_gateway(env=ENV, timing=TIMING)
    got = {}

    def client():
        got["answer"] = portkey.chat(completion_body(17, 20), portkey_config(gw),
                                     {"Idempotency-Key": "pk-crash",
                                      "Authorization": "Bearer a"})

    t = threading.Thread(target=client)
    t.start()
    assert wait_until(lambda: any(e["event"] == "published" for r in run.replicas
                                  for e in r.events()), 10)
    time.sleep(0.5)
    gw.signal(9)
    t.join(timeout=30)
    status, _, body = got["answer"]
    assert status == 200 and b'"error"' not in body and b"[DONE]" not in body
    time.sleep(TIMING.lease_ms / 1000 + 0.5)
    gw2 = run.start_gateway(env=ENV, timing=TIMING)
    status, headers, body = portkey.chat(completion_body(17, 20), portkey_config(gw2),
                                         {"Idempotency-Key": "pk-crash",
                                          "Authorization": "Bearer a"})
    assert status == 200
    final = json.loads([e for e in body.decode().split("\n\n") if e.strip()][-1]
                       .split("data: ", 1)[1])
    assert final["error"]["code"] == "upstream_decode_interrupted"
