"""ledgerd as a process: settings, migrations, readiness, shutdown, logs."""

import json
import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import LEDGERD, Ledgerd, claim_id, hold_request_lock, ledgerd_cmd, new_id


def run(*args, env=None):
    full = dict(os.environ)
    for k in list(full):
        if k.startswith("LEDGER_"):
            del full[k]
    full.update(env or {})
    return subprocess.run([str(LEDGERD)] + list(args), env=full, capture_output=True,
                          text=True, timeout=30)


@pytest.mark.parametrize("args,env,needle", [
    (["serve"], {}, "LEDGER_DATABASE_URL is required"),
    (["serve", "--workers", "abc", "--database-url", "x"], {}, "--workers"),
    (["serve", "--database-url", "x"], {"LEDGER_WORKERS": "0"}, "LEDGER_WORKERS"),
    (["serve", "--database-url", "x", "--retention", "7x"], {}, "--retention"),
    (["serve", "--database-url", "x", "--log-level", "loud"], {}, "--log-level"),
    (["serve", "--database-url", "x", "--max-body", "1GiB"], {}, "--max-body"),
    (["serve", "--database-url", "x", "--min-lease", "2s", "--max-lease", "1s"], {},
     "--min-lease"),
    (["serve", "--database-url", "x", "--listen", "nonsense"], {}, "--listen"),
    (["serve", "--database-url", "x", "--listen", "unix:relative.sock"], {}, "--listen"),
    (["serve", "--frobnicate"], {}, "unknown flag --frobnicate"),
    (["serve", "--database-url"], {}, "needs a value"),
    (["launch"], {}, "unknown command"),
    (["token", "create", "--database-url", "x", "--tenant", "a:b", "--role", "admin"], {},
     "--tenant"),
    (["token", "create", "--database-url", "x", "--tenant", "t", "--role", "root"], {},
     "--role"),
])
def test_bad_setting_exits_2_with_one_line(args, env, needle):
    r = run(*args, env=env)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert needle in lines[0]


@pytest.mark.parametrize("text,needle", [
    ("on_upstream_failure:\n  after_first_delta:\n    automatic_retry: true\n",
     "line 3: on_upstream_failure.after_first_delta.automatic_retry"),
    ("pool_retry_budget:\n  window_s: 0\n", "line 2: pool_retry_budget.window_s"),
    ("max_attempts_limit: 5\nmax_attemps_limit: 6\n", "line 2: max_attemps_limit"),
    ("default_lease_ms: [1\n", "line"),
])
def test_bad_policy_file_exits_2_naming_file_line_and_reason(tmp_path, text, needle):
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    r = run("serve", "--database-url", "x", "--policy", str(policy))
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(policy) in lines[0] and needle in lines[0], lines[0]


def test_missing_policy_file_exits_2(tmp_path):
    r = run("serve", "--database-url", "x", "--policy", str(tmp_path / "none.yaml"))
    assert r.returncode == 2 and "none.yaml" in r.stderr


def test_flag_wins_over_environment(cluster, tmp_path):
    url = cluster.create_db("flag_wins_" + secrets.token_hex(3))
    ledgerd_cmd("migrate", "--database-url", url)
    # The variable is bad, the flag good: ledgerd starts on the flag.
    led = Ledgerd(url, tmp_path / "l.log", extra_args=["--workers", "2"],
                  extra_env={"LEDGER_WORKERS": "0"})
    try:
        assert led.get("/readyz").status == 200
    finally:
        led.stop()


def test_version():
    r = run("version")
    assert r.returncode == 0
    assert r.stdout.startswith("ledgerd ") and "(schema " in r.stdout


def test_migrate_is_idempotent_and_safe_concurrently(cluster):
    url = cluster.create_db("migrate_" + secrets.token_hex(3))
    procs = [subprocess.Popen([str(LEDGERD), "migrate", "--database-url", url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, outs
    applied = sum(int(o.split("(")[1].split()[0]) for o, _ in outs)
    versions = cluster.psql("SELECT version FROM ledger_schema ORDER BY 1", url.split("=")[-1])
    assert applied == len(versions)  # each migration applied by exactly one process
    again = ledgerd_cmd("migrate", "--database-url", url)
    assert "(0 migrations applied)" in again.stdout


def test_readyz_reports_an_unmigrated_database(cluster, tmp_path):
    url = cluster.create_db("unmigrated_" + secrets.token_hex(3))
    led = Ledgerd(url, tmp_path / "l.log")
    try:
        r = led.get("/readyz")
        assert r.status == 503 and r.code == "schema_mismatch"
        assert r.json["error"]["schema_version"] == 0
        assert led.get("/healthz").status == 200
        ledgerd_cmd("migrate", "--database-url", url)
        assert led.get("/readyz").status == 200
    finally:
        led.stop()


def test_sigterm_drains_calls_in_flight(service):
    """A claim waiting on a lock when SIGTERM arrives still gets its answer; exit 0."""
    led = service.ledgerd
    token = service.token("agent")
    rid = new_id()
    first = led.post("/v1/requests/%s/tool-calls/call_00/claim" % rid, {}, token=token)
    assert first.status == 201
    # Hold the request's row lock for a while, as a long transaction would.
    locker = hold_request_lock(service.sql, rid, 3)
    got = {}

    def slow_claim():
        got["r"] = led.post("/v1/requests/%s/tool-calls/call_01/claim" % rid,
                            {"claim_id": claim_id()}, token=token)

    t = threading.Thread(target=slow_claim)
    t.start()
    # In flight for sure: ledgerd's worker waits on the lock.
    deadline = time.time() + 10
    while int(service.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                          "'ledgerd' AND wait_event_type = 'Lock' AND datname = "
                          "current_database()")[0][0]) == 0:
        assert time.time() < deadline, "the claim never reached the lock"
        time.sleep(0.05)
    led.proc.send_signal(signal.SIGTERM)
    t.join(timeout=10)
    locker.join()
    assert got["r"].status == 201, got["r"]
    assert led.stop() == 0
    assert "draining 1 calls in flight" in led.log_text()
    led.start()


def refused_as_append_only(service, statements):
    """Each of @statements fails, and says that events are append-only."""
    for sql in statements:
        with pytest.raises(subprocess.CalledProcessError) as e:
            service.sql(sql)
        assert "append-only" in e.value.stderr, sql


def test_events_are_append_only(service):
    led = service.ledgerd
    token = service.token("agent")
    rid = new_id()
    path = "/v1/requests/%s/tool-calls/call_01" % rid
    r = led.post(path + "/claim", {"claim_id": claim_id()}, token=token)
    assert r.status == 201, r
    # A refusal is a row of event_log; the claim and the holder's completion
    # are kept in the tool call's row: each is append-only.
    assert led.post(path + "/complete", {"fencing_token": 99, "outcome": "succeeded",
                                         "result": {}}, token=token).status == 409
    assert led.post(path + "/complete", {"fencing_token": 1, "outcome": "succeeded",
                                         "result": {}}, token=token).status == 200
    history = "SELECT seq, type, detail::text FROM events WHERE request_id = '%s' ORDER BY seq" % rid
    before = service.sql(history)
    assert [row[1] for row in before] == ["claimed", "refused", "completed"], before
    assert service.sql("SELECT count(*) FROM event_log WHERE request_id = '%s'" % rid) == [["1"]]
    where = "WHERE request_id = '%s'" % rid
    refused_as_append_only(service, (
                "UPDATE events SET type = 'x' " + where,
                "DELETE FROM events " + where,
                "UPDATE event_log SET type = 'x' " + where,
                "DELETE FROM event_log " + where,
                "TRUNCATE event_log",
                "UPDATE tool_calls SET claimed_detail = '{}' " + where,
                "UPDATE tool_calls SET completed_seq = completed_seq + 1 " + where,
                "UPDATE tool_calls SET attempt_id = 'a-forged' " + where,
                "DELETE FROM tool_calls " + where,
                "DELETE FROM requests " + where,
                "TRUNCATE tool_calls CASCADE"))
    assert service.sql(history) == before


def test_an_attempts_history_in_its_row_is_append_only(service):
    """The one-statement paths keep a whole cycle's events in the attempt's row
    (sql/009): the history reads them in order, and nothing rewrites them."""
    led = service.ledgerd
    token = service.token("router")
    rid = new_id()
    url = "/v1/requests/%s/attempts" % rid
    assert led.post(url, {"attempt_id": "a-1", "replica": "gpu-1"}, token=token).status == 201
    assert led.post(url + "/a-1/deliver", {"delivered_output_tokens": 1},
                    token=token).status == 200
    assert led.post(url + "/a-1/deliver", {"delivered_output_tokens": 5},
                    token=token).status == 200
    assert led.post(url + "/a-1/finish", {"outcome": "completed", "delivered_output_tokens": 9,
                                          "reason": "stop"}, token=token).status == 200
    history = ("SELECT seq, type, attempt_id, detail::text, at FROM events"
               " WHERE request_id = '%s' ORDER BY seq" % rid)
    before = service.sql(history)
    assert [row[1] for row in before] == ["attempt_created", "first_delta", "attempt_finished",
                                          "request_status"], before
    assert json.loads(before[1][3]) == {"delivered_output_tokens": 1}
    assert json.loads(before[2][3]) == {"outcome": "completed", "delivered_output_tokens": 9,
                                        "reason": "stop"}
    assert before[2][4] == before[3][4]  # the request completed as its attempt finished
    assert service.sql("SELECT count(*) FROM event_log WHERE request_id = '%s'" % rid) == [["0"]]
    where = "WHERE request_id = '%s'" % rid
    refused_as_append_only(service, (
                "UPDATE attempts SET created_detail = '{}' " + where,
                "UPDATE attempts SET first_delta_tokens = 2 " + where,
                "UPDATE attempts SET finished_seq = finished_seq + 1 " + where,
                "UPDATE attempts SET completed_seq = NULL " + where,
                "UPDATE attempts SET finished_at = now() " + where,
                "UPDATE attempts SET attempt_id = 'a-forged' " + where,
                "DELETE FROM attempts " + where,
                "DELETE FROM requests " + where,
                "TRUNCATE attempts CASCADE"))
    # The row's own columns go on as the locked path decides: only its events are fixed.
    service.sql("UPDATE attempts SET lease_until = lease_until " + where)
    assert service.sql(history) == before


def test_logs_never_carry_tokens_arguments_or_results(service):
    led = service.ledgerd
    token = service.token("agent")
    secret_args = "ARGSECRET-" + secrets.token_hex(8)
    secret_result = "RESULTSECRET-" + secrets.token_hex(8)
    path = "/v1/requests/%s/tool-calls/call_01" % new_id()
    r = led.post(path + "/claim", {"claim_id": claim_id(), "args": {"card": secret_args},
                                   "store_args": True}, token=token)
    led.post(path + "/complete", {"fencing_token": r.json["fencing_token"],
                                  "outcome": "succeeded", "result": {"x": secret_result}},
             token=token)
    led.post(path + "/claim", {"args": {"card": secret_args}}, token=token)
    led.post(path + "/claim", {"args": {"card": "other" + secret_args}}, token=token)
    led.post(path + "/complete", {"fencing_token": 1, "outcome": "failed",
                                  "result": {"x": secret_result}}, token=token)
    led.get("/metrics")
    # The calls were logged, without their content (the log is copied from
    # ledgerd's stderr by a thread: read it once the last line is in).
    deadline = time.time() + 10
    while '"status":409' not in led.log_text():
        assert time.time() < deadline, "the calls were not logged"
        time.sleep(0.05)
    log = led.log_text()
    assert token not in log and token[4:] not in log
    assert secret_args not in log and secret_result not in log


def test_metrics_count_claims_and_statuses(service):
    led = service.ledgerd
    token = service.token("agent")
    path = "/v1/requests/%s/tool-calls/call_01" % new_id()
    led.post(path + "/claim", {}, token=token)
    led.post(path + "/claim", {}, token=token)
    text = led.get("/metrics").body
    assert 'ledger_claim_outcomes_total{outcome="claimed"}' in text
    assert 'ledger_claim_outcomes_total{outcome="in_progress"}' in text
    assert 'ledger_http_requests_total{route="tool_call_claim",status="201"}' in text
    assert 'ledger_http_requests_total{route="tool_call_claim",status="409"}' in text
    assert "ledger_store_queue_depth " in text


def metric_values(text):
    """The samples of a Prometheus text exposition, by name and labels."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            values[key] = float(value)
    return values


def test_metrics_pass_promtool_and_count_what_operators_watch(service):
    """After a failover, a fenced claim, a late and a conflicting completion, /metrics
    counts each one and passes Prometheus's own checker."""
    led = service.ledgerd
    router = service.token("router")
    before = metric_values(led.get("/metrics").body)
    rid = new_id()
    assert led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": "a1", "max_attempts": 3},
                    token=router).status == 201
    path = "/v1/requests/%s/tool-calls/call_01" % rid
    first = led.post(path + "/claim", {"claim_id": claim_id(), "attempt_id": "a1",
                                       "lease_ms": 150}, token=router)
    assert first.status == 201
    time.sleep(0.2)
    assert led.post(path + "/complete", {"fencing_token": 1, "outcome": "succeeded",
                                         "result": 1}, token=router).json["late_completion"]
    assert led.post(path + "/complete", {"fencing_token": 1, "outcome": "failed", "result": 2},
                    token=router).code == "already_completed"
    assert led.post("/v1/requests/%s/failover" % rid,
                    {"attempt_id": "a1", "signal": "pod_lost",
                     "next_attempt": {"attempt_id": "a2"}},
                    token=router).json["action"] == "retry_prefill"
    fenced = led.post("/v1/requests/%s/tool-calls/call_02/claim" % rid,
                      {"claim_id": claim_id(), "attempt_id": "a1"}, token=router)
    assert fenced.status == 409 and fenced.code == "attempt_fenced"

    text = led.get("/metrics").body
    promtool = Path(__file__).resolve().parents[2] / "scripts" / "promtool.sh"
    check = subprocess.run([str(promtool), "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    after = metric_values(text)
    for key in ('ledger_failover_actions_total{action="retry_prefill"}',
                'ledger_fenced_refusals_total{operation="claim"}',
                'ledger_late_completions_total',
                'ledger_conflicting_completions_total',
                'ledger_http_request_duration_seconds_count{route="failover"}',
                'ledger_http_request_duration_seconds_bucket{route="failover",le="+Inf"}'):
        assert after[key] - before.get(key, 0) == 1, key
    for key in ('ledger_database_errors_total{kind="unavailable"}',
                'ledger_store_queue_depth', 'ledger_http_in_flight'):
        assert key in after, key
