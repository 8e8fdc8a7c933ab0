"""ledgerctl, the operator's client, against a real ledgerd.

An incident is driven through the HTTP API (an attempt, a claim and its
completion, a failover that waits for the fence and then reruns, a claim
by the fenced attempt, an outcome left unknown by a short lease); then
`show` must tell it in order, `unknown` must list the call and `resolve`
must settle it. Exit statuses, line widths and the secrecy of the token
are checked on every run. A few answers ledgerd never gives (503, huge or
broken bodies, silence) come from a stand-in server.
"""

import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import claim_id, free_port, new_id

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from integration_helpers import LEDGERCTL, find_in_order  # noqa: E402

WIDTH = 100
STAMP = r"\d\d:\d\d:\d\d\.\d{3}"

# Every token handed to ledgerctl: none may ever appear in what it prints.
SECRETS = set()


@pytest.fixture(scope="module", autouse=True)
def built():
    if not LEDGERCTL.exists():
        pytest.fail("%s is missing: run make first" % LEDGERCTL)


def url_of(service):
    return "http://%s:%d" % (service.ledgerd.host, service.ledgerd.port)


def ctl(*args, url, token=None, flag_token=None, timeout=30):
    """Runs ledgerctl with LEDGER_URL=url and, unless None, LEDGER_TOKEN=token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env["LEDGER_URL"] = url
    if token is not None:
        env["LEDGER_TOKEN"] = token
        SECRETS.add(token)
    argv = [str(LEDGERCTL)]
    if flag_token is not None:
        argv += ["--token", flag_token]
        SECRETS.add(flag_token)
    r = subprocess.run(argv + [str(a) for a in args], env=env, capture_output=True,
                       timeout=timeout)
    r.out = r.stdout.decode("utf-8")
    r.err = r.stderr.decode("utf-8")
    for secret in SECRETS:
        assert secret not in r.out and secret not in r.err, "ledgerctl printed a token"
    # text is for a terminal; --json is the API's own bytes, and errors one line each
    text = r.out if "--json" not in args else ""
    for line in text.splitlines():
        assert len(line) <= WIDTH, line
    return r


def one_error_line(r):
    lines = r.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerctl: "), r.err
    return lines[0]


def rows(text):
    """The output's lines, a row's continuation lines joined to it."""
    out = []
    for line in text.splitlines():
        if line.startswith(" ") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


class Incident:
    """One request driven through a failover, in a tenant of its own.

    Its own tenant, because the pool-wide retry budget counts every rerun of
    a tenant: a module of incidents in one tenant would run out of it.
    """

    def __init__(self, service):
        self.service = service
        self.tenant = new_id("t")
        self.router = service.token("router", self.tenant)
        self.admin = service.token("admin", self.tenant)
        self.reviewer = service.token("reviewer", self.tenant)
        self.rid = new_id("req")
        self.path = "/v1/requests/" + self.rid
        self.url = url_of(service)
        led = service.ledgerd
        tok = self.router

        def post(path, body, status):
            r = led.post(self.path + path, body, token=tok)
            assert r.status == status, (path, r)
            return r

        post("/attempts", {"attempt_id": "att-1", "replica": "gpu-a/3",
                           "model_revision": "rev-1", "lease_ms": 30000}, 201)
        post("/tool-calls/call_01/claim",
             {"claim_id": claim_id(), "tool": "send_email", "attempt_id": "att-1",
              "args": {"to": "ana@example.com"}, "owner": "mailer@pod-7"}, 201)
        post("/tool-calls/call_01/complete",
             {"fencing_token": 1, "outcome": "succeeded", "result": {"message_id": "m-1"}},
             200)
        failover = {"attempt_id": "att-1", "signal": "heartbeat_timeout",
                    "retry_prefill_tokens": 1843,
                    "next_attempt": {"attempt_id": "att-2", "replica": "gpu-b/1"}}
        assert post("/failover", failover, 200).json["action"] == "wait_for_fence"
        post("/attempts/att-1/cancel-ack", {}, 200)
        assert post("/failover", failover, 200).json["action"] == "retry_prefill"
        r = post("/tool-calls/call_02/claim",
                 {"claim_id": claim_id(), "tool": "charge_card", "attempt_id": "att-1"}, 409)
        assert r.code == "attempt_fenced"
        post("/tool-calls/call_03/claim",
             {"claim_id": claim_id(), "tool": "refund", "attempt_id": "att-2",
              "owner": "billing@pod-9", "lease_ms": 200}, 201)
        time.sleep(0.5)  # the lease runs out with no completion: unknown
        call = led.get(self.path + "/tool-calls/call_03", token=tok)
        assert call.json["state"] == "unknown", call

    def get(self):
        r = self.service.ledgerd.get(self.path, token=self.admin)
        assert r.status == 200, r
        return r.json

    def ctl(self, *args, token=None, **kw):
        return ctl(*args, url=self.url, token=token or self.admin, **kw)


@pytest.fixture(scope="module")
def incident(service):
    return Incident(service)


# --- show ---


def test_show_tells_the_incident_in_order(incident):
    r = incident.ctl("show", incident.rid)
    assert r.returncode == 0, r.err
    assert r.err == ""
    lines = rows(r.out)
    find_in_order(lines, [
        r"^request  %s  open  phase prefill, no delta sent$" % incident.rid,
        r"^revision rev-1 +attempts 2 of 2 +created \d{4}-\d\d-\d\d %sZ$" % STAMP,
        r"^ATTEMPT +EPOCH +REPLICA +STATE +CREATED +ENDED$",
        r"^att-1 +1 +gpu-a/3 +cancelled +%s +%s$" % (STAMP, STAMP),
        r"^att-2 +2 +gpu-b/1 +live \(\d+ ms left\) +%s +-$" % STAMP,
        r"^TOOL CALL +TOOL +STATE +TOKEN +HOLDER/ATTEMPT +COMPLETED$",
        r"^call_01 +send_email +succeeded +1 +- +%s$" % STAMP,
        r"^call_03 +refund +unknown +1 +att-2 \(billing@pod-9\) +-$",
        r"^TIME +ATTEMPT +REPLICA +EVENT +DETAIL$",
        r"^-- \d{4}-\d\d-\d\d --$",
        r"^%s  att-1 +gpu-a/3 +attempt_created +epoch 1, lease 30000 ms$" % STAMP,
        r"^%s  att-1 +gpu-a/3 +claimed +call_01 send_email, token 1\b" % STAMP,
        r"^%s  att-1 +gpu-a/3 +completed +call_01 succeeded, token 1$" % STAMP,
        r"^%s  att-1 +gpu-a/3 +attempt_revoked +-> cancel_requested \(heartbeat_timeout\)$"
        % STAMP,
        r"^%s  att-1 +gpu-a/3 +failover_decision +heartbeat_timeout -> wait_for_fence: "
        r"source cancel_requested, retry in \d+ ms" % STAMP,
        r"^%s  att-1 +gpu-a/3 +attempt_cancelled +" % STAMP,
        r"^%s  att-2 +gpu-b/1 +attempt_created +epoch 2, lease 30000 ms, retry$" % STAMP,
        r"^%s  att-1 +gpu-a/3 +failover_decision +heartbeat_timeout -> retry_prefill: "
        r"source cancelled, next att-2" % STAMP,
        r"^%s  att-1 +gpu-a/3 +refused +claim call_02 refused: attempt_fenced$" % STAMP,
        r"^%s  att-2 +gpu-b/1 +claimed +call_03 refund, token 1, lease 200 ms" % STAMP,
    ])


def test_show_prints_every_event_at_its_time(incident):
    events = incident.get()["events"]
    r = incident.ctl("show", incident.rid)
    assert r.returncode == 0, r.err
    lines = r.out.splitlines()
    timeline = lines[lines.index(next(l for l in lines if l.startswith("TIME "))) + 1:]
    event_rows = [l for l in timeline if re.match(STAMP + "  ", l)]
    assert len(event_rows) == len(events)
    for row, event in zip(event_rows, events):
        assert row.startswith(event["at"][11:23] + "  ")
        assert event["type"] in row.split()


def test_show_json_is_the_api_answer(incident):
    # --token and --url, once: the flags win over the environment
    closed = "http://127.0.0.1:%d" % free_port()
    r = ctl("--url", incident.url, "--json", "show", incident.rid, url=closed,
            token="ldg_" + "w" * 40, flag_token=incident.admin)
    assert r.returncode == 0, r.err
    got, want = json.loads(r.out), incident.get()

    # lease_ms_left counts down between the two reads
    for answer in (got, want):
        for row in answer["attempts"] + answer["tool_calls"]:
            row.pop("lease_ms_left")
    assert got == want


def test_show_of_a_missing_request_exits_3(incident):
    for args in (["show"], ["--json", "show"]):
        r = incident.ctl(*args, new_id("nope"))
        assert r.returncode == 3
        assert r.out == ""
        line = one_error_line(r)
        assert "not_found" in line and "no such request" in line


def test_a_request_of_another_tenant_is_not_found(incident, service):
    stranger = service.token("admin", new_id("t"))
    r = ctl("show", incident.rid, url=incident.url, token=stranger)
    assert r.returncode == 3, r.err


def test_show_follows_every_page_of_a_long_history(service):
    inc = Incident(service)
    # 1,100 events past the page size of 1,000, crossing midnight, of a type
    # ledgerctl has no words for.
    inc.service.sql(
        "INSERT INTO events (tenant, request_id, at, type, detail) "
        "SELECT '%s', '%s', timestamptz '2030-01-01 23:59:59.500+00' + g * interval '1 ms', "
        "'operator_note', jsonb_build_object('n', g, 'note', 'x y') "
        "FROM generate_series(1, 1100) g" % (inc.tenant, inc.rid))
    first = inc.get()
    assert "next_events_cursor" in first

    r = inc.ctl("show", inc.rid)
    assert r.returncode == 0, r.err
    lines = r.out.splitlines()
    notes = [l for l in lines if " operator_note " in l]
    assert len(notes) == 1100
    assert re.search(r' operator_note +\{"n":1,"note":"x y"\}$', notes[0]), notes[0]
    assert notes[-1].endswith('{"n":1100,"note":"x y"}')
    find_in_order(lines, [r"^-- 2030-01-01 --$", r'"n":499,', r"^-- 2030-01-02 --$",
                          r"^00:00:00\.000 .*\"n\":500,"])

    r = inc.ctl("--json", "show", inc.rid)
    assert r.returncode == 0, r.err
    merged = json.loads(r.out)
    assert "next_events_cursor" not in merged
    assert len(merged["events"]) == len(first["events"]) + len(
        inc.service.ledgerd.get(inc.path + "?events_cursor=" + first["next_events_cursor"],
                                token=inc.admin).json["events"])
    assert [e["seq"] for e in merged["events"]] == sorted(e["seq"] for e in merged["events"])
    assert merged["events"][:len(first["events"])] == first["events"]
    assert merged["request"] == first["request"]


def test_long_and_hostile_text_stays_on_its_line(service):
    inc = Incident(service)
    note = "ü" * 110 + "\n\x1b[31mred\u202e"
    r = inc.ctl("resolve", inc.rid, "call_03", "--as", "not_executed", "--note", note)
    assert r.returncode == 0, r.err
    r = inc.ctl("show", inc.rid)
    assert r.returncode == 0, r.err
    assert "\x1b" not in r.out and "\u202e" not in r.out
    lines = r.out.splitlines()
    assert all(len(l) <= WIDTH for l in lines)
    cut = [l for l in lines if "üü" in l]
    assert cut and cut[0].endswith("…")
    assert len(cut[0].encode()) > WIDTH  # characters are counted, not bytes

    long_rid = "r" * 128
    led = service.ledgerd
    assert led.post("/v1/requests/%s/tool-calls/%s/claim" % (long_rid, "c" * 128),
                    {"claim_id": claim_id(), "tool": "t" * 200, "owner": "o" * 256},
                    token=inc.router).status == 201
    r = inc.ctl("show", long_rid)
    assert r.returncode == 0, r.err
    assert all(len(l) <= WIDTH for l in r.out.splitlines())
    assert r.out.startswith("request  " + "r" * 59 + "…  open")

    # ".." is a valid id, and a dot segment ledgerctl must not let anything resolve
    assert led.post("/v1/requests/%2E%2E/tool-calls/c1/claim", {"tool": "t"},
                    token=inc.router).status == 201
    r = inc.ctl("show", "..")
    assert r.returncode == 0, r.err
    assert r.out.startswith("request  ..  open")


# --- unknown and resolve ---


def test_unknown_lists_the_call_and_resolve_settles_it(service):
    inc = Incident(service)
    r = inc.ctl("unknown")
    assert r.returncode == 0, r.err
    lines = r.out.splitlines()
    assert re.match(r"^REQUEST +TOOL CALL +TOOL +TOKEN +HOLDER +CREATED$", lines[0])
    assert len(lines) == 2
    assert re.match(r"^%s +call_03 +refund +1 +att-2 \(billing@pod-9\) +\d{4}-\d\d-\d\d %sZ$"
                    % (inc.rid, STAMP), lines[1]), lines[1]

    r = inc.ctl("--json", "unknown")
    assert r.returncode == 0, r.err
    listed = json.loads(r.out)
    assert [(c["request_id"], c["tool_call_id"]) for c in listed["items"]] == [
        (inc.rid, "call_03")]

    # a person looked at the refund system: nothing happened
    r = inc.ctl("resolve", inc.rid, "call_03", "--as", "not_executed",
                "--note", "no refund in the payment log")
    assert r.returncode == 0, r.err
    assert r.out == ("%s/call_03 resolved: not executed, claimable again (fencing token 2)\n"
                     % inc.rid)
    call = service.ledgerd.get(inc.path + "/tool-calls/call_03", token=inc.admin).json
    assert call["state"] == "released" and call["fencing_token"] == 2

    r = inc.ctl("unknown")
    assert r.returncode == 0, r.err
    assert r.out == "no tool call has an unknown outcome\n"

    r = inc.ctl("show", inc.rid)
    find_in_order(rows(r.out), [
        r"^call_03 +refund +released +2 +- +-$",
        r"^%s  - +- +resolved +call_03 -> not_executed by an operator \(was unknown\): "
        r"no refund in the payment log$" % STAMP,
    ])


def test_show_names_the_gateway_and_what_it_saw_of_its_client(service):
    """API 1.1: an attempt's gateway and the replica's model in its creation, the
    client events a gateway reports, and a request that ended on the client's own
    error. Requests without a gateway keep the table of before (the test above)."""
    tenant = new_id("t")
    router, admin = service.token("router", tenant), service.token("admin", tenant)
    led, rid = service.ledgerd, new_id("req")

    def post(path, body):
        r = led.post("/v1/requests/%s%s" % (rid, path), body, token=router)
        assert r.status in (200, 201), (path, r)

    post("/attempts", {"attempt_id": "att-1", "replica": "gpu-a/3", "gateway": "gw-7",
                       "identity": {"model": "llama-3.1-8b", "quantization": "fp8"}})
    post("/attempts/att-1/deliver", {"delivered_output_tokens": 3})
    post("/attempts/att-1/client", {"event": "disconnected", "n": 1, "hold_ms": 10000})
    post("/attempts/att-1/client", {"event": "resumed", "n": 2, "last_event_id": 4})
    post("/attempts/att-1/client", {"event": "disconnected", "n": 3})
    post("/attempts/att-1/client", {"event": "hold_ended", "n": 4})
    post("/attempts/att-1/finish", {"outcome": "failed", "client_error": {
        "error": {"code": "context_length_exceeded", "message": "the prompt is too long"},
        "http_status": 400}})
    r = ctl("show", rid, url=url_of(service), token=admin)
    assert r.returncode == 0, r.err
    find_in_order(rows(r.out), [
        r"^request  %s  failed  phase decode, first delta sent \(3 tokens\)$" % rid,
        r"^error    context_length_exceeded: the prompt is too long$",
        r"^ATTEMPT +EPOCH +REPLICA +STATE +CREATED +ENDED +GATEWAY$",
        r"^att-1 +1 +gpu-a/3 +failed +%s +%s +gw-7$" % (STAMP, STAMP),
        # the model is said while there is room on the line
        r"^%s  att-1 +gpu-a/3 +attempt_created +epoch 1, lease 30000 ms, gateway gw-7"
        % STAMP,
        r"^%s  att-1 +gpu-a/3 +client_disconnected +client disconnected, held 10000 ms "
        r"\(n 1\)$" % STAMP,
        r"^%s  att-1 +gpu-a/3 +client_resumed +client resumed after event 4 \(n 2\)$" % STAMP,
        r"^%s  att-1 +gpu-a/3 +client_disconnected +client disconnected \(n 3\)$" % STAMP,
        r"^%s  att-1 +gpu-a/3 +client_hold_ended +hold ended: no client came back \(n 4\)$"
        % STAMP,
        r"^%s  att-1 +gpu-a/3 +request_status +request failed \(context_length_exceeded\)$"
        % STAMP,
    ])


def test_show_marks_a_duplicate_execution(service):
    """Resolved not_executed, claimed again, then the first holder says it ran."""
    inc = Incident(service)
    r = inc.ctl("resolve", inc.rid, "call_03", "--as", "not_executed")
    assert r.returncode == 0, r.err
    led, path = service.ledgerd, inc.path + "/tool-calls/call_03"
    again = led.post(path + "/claim", {"claim_id": claim_id(), "tool": "refund",
                                       "attempt_id": "att-2", "lease_ms": 30000},
                     token=inc.router)
    assert again.status == 201 and again.json["fencing_token"] == 3, again
    late = led.post(path + "/complete", {"fencing_token": 1, "outcome": "succeeded",
                                         "result": {"refund": "R-1"}}, token=inc.router)
    assert late.status == 200, late
    r = inc.ctl("show", inc.rid)
    assert r.returncode == 0, r.err
    find_in_order(rows(r.out), [
        r"resolved +call_03 -> not_executed",
        r"late_completion +call_03 succeeded from token 1",
        r"duplicate_execution +DUPLICATE EXECUTION call_03: token 1 reports",
    ])
    r = inc.ctl("--json", "show", inc.rid)
    dup = [e for e in json.loads(r.out)["events"] if e["type"] == "duplicate_execution"]
    assert len(dup) == 1 and dup[0]["detail"]["resolved_token"] == 2, dup


def test_show_says_when_a_result_was_not_kept(service):
    """A completion kept as its digest only: the timeline says so, and its calls table
    and --json read as the API's, with no result to print."""
    inc = Incident(service)
    led, path = service.ledgerd, inc.path + "/tool-calls/call_04"
    assert led.post(path + "/claim", {"claim_id": claim_id(), "tool": "export",
                                      "attempt_id": "att-2"}, token=inc.router).status == 201
    done = led.post(path + "/complete",
                    {"fencing_token": 1, "outcome": "succeeded",
                     "result_not_kept": {"bytes": 2097152, "sha256": "ab" * 32}},
                    token=inc.router)
    assert done.status == 200 and done.json["result_kept"] is False, done
    r = inc.ctl("show", inc.rid)
    assert r.returncode == 0, r.err
    find_in_order(rows(r.out), [
        r"completed +call_04 succeeded, token 1, result not kept \(2097152 bytes\)$",
    ])
    assert re.search(r"^call_04 +export +succeeded ", r.out, re.M), r.out
    r = inc.ctl("--json", "show", inc.rid)
    call = [c for c in json.loads(r.out)["tool_calls"] if c["tool_call_id"] == "call_04"]
    assert call[0]["result_kept"] is False and call[0]["result_bytes"] == 2097152, call


def test_resolve_sends_the_result_byte_for_byte(service):
    inc = Incident(service)
    result = '{"refund_id": "rf-9",  "amount": 12.50, "tags": ["a" ,"b"]}'
    r = inc.ctl("resolve", inc.rid, "call_03", "--as", "succeeded", "--result", result)
    assert r.returncode == 0, r.err
    assert r.out == "%s/call_03 resolved: succeeded\n" % inc.rid
    call = service.ledgerd.get(inc.path + "/tool-calls/call_03", token=inc.admin)
    assert '"result":' + result in call.body.replace('"result": ', '"result":')

    # the same resolution again answers the same; another one is a conflict
    r = inc.ctl("--json", "resolve", inc.rid, "call_03", "--as", "succeeded",
                "--result", result)
    assert r.returncode == 0, r.err
    assert json.loads(r.out)["status"] == "completed"


def test_resolve_of_a_completed_call_exits_1(incident):
    r = incident.ctl("resolve", incident.rid, "call_01", "--as", "failed",
                     "--result", '{"error": "x"}')
    assert r.returncode == 1
    assert r.out == ""
    line = one_error_line(r)
    assert "already_completed" in line and "HTTP 409" in line


def test_resolve_needs_an_admin(incident):
    r = incident.ctl("resolve", incident.rid, "call_03", "--as", "not_executed",
                     token=incident.reviewer)
    assert r.returncode == 4
    assert "forbidden" in one_error_line(r)
    r = incident.ctl("resolve", incident.rid, "call_99", "--as", "not_executed")
    assert r.returncode == 3
    assert "not_found" in one_error_line(r)


def test_a_bad_token_exits_4_and_is_never_printed(incident):
    bad = "ldg_" + "x" * 40
    for args in (["show", incident.rid], ["unknown"], ["--json", "unknown"],
                 ["resolve", incident.rid, "call_03", "--as", "failed"]):
        r = incident.ctl(*args, token=bad)
        assert r.returncode == 4, (args, r.err)
        assert "unauthorized" in one_error_line(r)
    r = ctl("unknown", url=incident.url)
    assert r.returncode == 4
    assert "LEDGER_TOKEN" in one_error_line(r)


# --- exit statuses without ledgerd ---


def test_a_closed_port_exits_5():
    r = ctl("show", "req-1", url="http://127.0.0.1:%d" % free_port(), token="ldg_secret1")
    assert r.returncode == 5
    assert r.out == ""
    assert "cannot reach ledgerd" in one_error_line(r)


@pytest.mark.parametrize("args", [
    [],
    ["frob"],
    ["show"],
    ["show", "a", "b"],
    ["show", ""],
    ["--bogus", "unknown"],
    ["unknown", "--as", "failed"],
    ["show", "r", "--token"],
    ["resolve", "r"],
    ["resolve", "r", "c"],
    ["resolve", "r", "c", "--as", "maybe"],
    ["resolve", "r", "c", "--as", "succeeded", "--result", "{bad"],
    ["resolve", "r", "c", "--as", "succeeded", "--result", '{"a": 1, "a": 2}'],
    ["resolve", "r", "c", "--as", "not_executed", "--result", "1"],
    ["--url", "ftp://127.0.0.1/", "unknown"],
])
def test_bad_usage_exits_2_before_any_call(args):
    # the port is closed: reaching for it would exit 5, not 2
    r = ctl(*args, url="http://127.0.0.1:%d" % free_port(), token="ldg_secret2")
    assert r.returncode == 2, (args, r.err)
    assert r.out == ""
    assert "--help" in one_error_line(r)


@pytest.mark.parametrize("args", [["--help"], ["help"], ["show", "-h"]])
def test_help_documents_the_exit_statuses(args):
    r = ctl(*args, url="http://127.0.0.1:1")
    assert r.returncode == 0
    for status in ("0  success", "2  usage", "3  not found", "4  not allowed",
                   "5  unreachable"):
        assert status in r.out
    assert "--json" in r.out and "merged" in r.out
    assert all(len(l) <= WIDTH for l in r.out.splitlines())


def test_ids_after_double_dash_are_not_flags():
    with StandIn(404, b'{"error": {"code": "not_found", "message": "no such request"}}') as s:
        r = ctl("show", "--", "-abc", url=s.url, token="ldg_secret3")
    assert r.returncode == 3, r.err
    assert s.requests[0]["path"] == "/v1/requests/-abc"


# --- a stand-in server for answers ledgerd does not give on demand ---


class StandIn:
    """An HTTP server answering every request with one fixed status and body."""

    def __init__(self, status, body, content_type="application/json"):
        self.requests = []
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                stand_in.requests.append({
                    "method": self.command, "path": self.path,
                    "headers": dict(self.headers), "body": self.rfile.read(n)})
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = answer

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_store_unavailable_exits_5():
    body = b'{"error": {"code": "store_unavailable", "message": "the database cannot be ' \
           b'reached", "retry_after_ms": 1000}}'
    with StandIn(503, body) as s:
        r = ctl("unknown", url=s.url, token="ldg_secret4")
    assert r.returncode == 5
    assert "store_unavailable" in one_error_line(r)


@pytest.mark.parametrize("status,body,needle", [
    (200, b"<html>oops</html>", "not a JSON object"),
    (200, b"[1, 2]", "not a JSON object"),
    (500, b"internal", "HTTP 500"),
    (400, b'{"error": {"code": "invalid_id", "message": "ids are ..."}}', "invalid_id"),
    (200, None, "larger than 16 MiB"),
], ids=["html", "array", "500", "400", "17MiB"])
def test_other_failures_exit_1(status, body, needle):
    if body is None:
        body = b"[" + b"0," * (17 << 19) + b"0]"  # 17 MiB: more than ledgerctl reads
    with StandIn(status, body) as s:
        r = ctl("show", "req-1", url=s.url, token="ldg_secret5")
    assert r.returncode == 1, r.err
    assert needle in one_error_line(r)


def test_requests_carry_the_token_escaped_ids_and_the_body_as_written():
    answer = b'{"status": "completed", "outcome": "failed", "result": {"e": 1}, ' \
             b'"completed_at": "2026-11-30T01:29:43.123Z", "idempotency_key": "a b:c"}'
    result = '{"e" : 1,\n "why": "d\\u00e9j\\u00e0 vu"}'
    with StandIn(200, answer) as s:
        r = ctl("resolve", "a b/..", "c?d#", "--as", "failed", "--result", result,
                "--note", "ça", url=s.url + "/", token="ldg_secret6")
        g = ctl("show", "x%2Fy", url=s.url, token="ldg_secret6")
        dots = ctl("show", "..", url=s.url, token="ldg_secret6")
    assert r.returncode == 0, r.err
    assert r.out == "a b/../c?d# resolved: failed\n"
    post = s.requests[0]
    assert post["method"] == "POST"
    assert post["path"] == "/v1/requests/a%20b%2F../tool-calls/c%3Fd%23/resolve"
    assert post["headers"]["Authorization"] == "Bearer ldg_secret6"
    assert post["headers"]["Content-Type"] == "application/json"
    sent = post["body"].decode()
    assert json.loads(sent) == {"resolution": "failed", "result": json.loads(result),
                                "note": "ça"}
    assert '"result":' + result in sent
    assert g.returncode == 1  # the stand-in's answer has no request object
    assert s.requests[1]["method"] == "GET"
    assert s.requests[1]["path"] == "/v1/requests/x%252Fy"
    assert s.requests[1]["headers"]["Authorization"] == "Bearer ldg_secret6"
    assert dots.returncode == 1
    assert s.requests[2]["path"] == "/v1/requests/%2E%2E"


def test_resolve_of_long_ids_keeps_to_the_width():
    answer = b'{"status": "released", "idempotency_key": "x", "fencing_token": 3}'
    with StandIn(200, answer) as s:
        r = ctl("resolve", "r" * 128, "c" * 128, "--as", "not_executed", url=s.url,
                token="ldg_secret8")
    assert r.returncode == 0, r.err
    line = r.out.rstrip("\n")
    assert line.startswith("r" * 30)
    assert line.endswith("… resolved: not executed, claimable again (fencing token 3)")
    assert len(line) == WIDTH


def test_a_silent_server_times_out_and_exits_5():
    with socket.socket() as listener:
        # the kernel completes the handshake; nobody ever answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        started = time.monotonic()
        r = ctl("unknown", url="http://127.0.0.1:%d" % listener.getsockname()[1],
                token="ldg_secret7")
        took = time.monotonic() - started
    assert r.returncode == 5, r.err
    assert 9 <= took < 20, took
    assert "cannot reach ledgerd" in one_error_line(r)
