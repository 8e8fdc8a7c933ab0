"""The alert rules docs/operations.md ships (docs/alerts/): Prometheus's own
checker accepts them, their unit tests make each alert fire and stay quiet
when it should, each has a severity and a runbook section, and every series
a rule selects is one a live ledgerd exports, down to its label values, so
that renaming a metric (or a label value) in the C breaks this test rather
than silently an alert."""

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import Ledgerd, claim_id, new_id
from pgcluster import wait_for

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "alerts" / "ledgerd.rules.yml"
RULE_TESTS = ROOT / "docs" / "alerts" / "ledgerd.rules.test.yml"
OPERATIONS = ROOT / "docs" / "operations.md"
PROMTOOL = ROOT / "scripts" / "promtool.sh"
SEVERITIES = {"critical", "warning"}
# Series Prometheus makes itself, not ledgerd.
PROMETHEUS_SERIES = {"up"}
KEYWORDS = {"and", "or", "unless", "bool", "offset"}


def promtool(*args):
    r = subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def rules():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_rules_pass_promtool_check_and_their_unit_tests():
    assert "SUCCESS: %d rules found" % len(rules()) in promtool("check", "rules", str(RULES))
    assert "SUCCESS" in promtool("test", "rules", str(RULE_TESTS))


def test_every_alert_has_a_test_that_fires_it_and_one_that_does_not():
    firing, quiet = set(), set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in rules()}
    assert names - firing == set(), "alerts no test makes fire"
    assert names - quiet == set(), "alerts no test keeps quiet"


def runbook_anchors():
    """GitHub's anchors of the headings under "## Runbooks"."""
    text = OPERATIONS.read_text()
    section = text.split("\n## Runbooks\n", 1)[1].split("\n## ", 1)[0]
    return {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^### (.+)$", section, re.M)}


def test_every_alert_has_a_severity_a_summary_and_its_runbook_section():
    anchors = runbook_anchors()
    for rule in rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        url = rule["annotations"]["runbook_url"]
        assert url == "docs/operations.md#" + name.lower(), name
        assert name.lower() in anchors, "no runbook section ### %s in docs/operations.md" % name


def selectors(expr):
    """(metric, [(label, op, value)]) for every series selector of a PromQL expression."""
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges
    found = []
    for m in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?", expr):
        name, braces = m.group(1), m.group(2) or ""
        if name in KEYWORDS or expr[m.end():].lstrip().startswith("("):
            continue  # a function or an operator
        matchers = re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', braces)
        found.append((name, matchers))
    return found


def test_the_selector_parser_sees_every_series():
    expr = ('(sum by (job, instance) (rate(a_total{route="r",status="5"}[2m])) > 0 unless '
            'b{x=~"p|q"} + max without (i) (c)) unless on (job) d == 0')
    assert selectors(expr) == [("a_total", [("route", "=", "r"), ("status", "=", "5")]),
                               ("b", [("x", "=~", "p|q")]), ("c", []), ("d", [])]


def exposition(led):
    """{metric name: [labels of each sample]} of one /metrics."""
    text = led.get("/metrics").body
    samples = {}
    for name in re.findall(r"^# TYPE (\S+) ", text, re.M):
        samples.setdefault(name, [])
    for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? \S+$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        samples.setdefault(m.group(1), []).append(labels)
    return samples


def metric_value(led, key):
    for line in led.get("/metrics").body.splitlines():
        if line.startswith(key + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("%s not in /metrics" % key)


@pytest.fixture(scope="module")
def down(service, tmp_path_factory):
    """A ledgerd whose database is nowhere: what it exports while it is down."""
    tmp = tmp_path_factory.mktemp("alerts_down")
    led = Ledgerd("host=%s port=1 user=nobody dbname=nothing" % tmp, tmp / "ledgerd.log")
    yield led
    led.stop()


def test_every_series_a_rule_selects_is_exported(service, down):
    up = service.ledgerd
    assert up.get("/readyz").status == 200
    wait_for(lambda: down.get("/readyz").status == 503, 10, "/readyz 503 without a database")
    wait_for(lambda: "ledger_unknown_outcomes" in exposition(up), 20,
             "the first count of unknown outcomes")
    exported = {}
    for led in (up, down):
        for name, labels in exposition(led).items():
            exported.setdefault(name, []).extend(labels)
    missing = []
    for rule in rules():
        for name, matchers in selectors(rule["expr"]):
            if name in PROMETHEUS_SERIES:
                continue
            if name not in exported:
                missing.append((rule["alert"], name))
                continue
            for label, op, value in matchers:
                values = {s.get(label) for s in exported[name]} - {None}
                wanted = value.split("|") if op == "=~" else [value] if op == "=" else []
                for v in wanted:
                    if v not in values:
                        missing.append((rule["alert"], '%s{%s="%s"}' % (name, label, v)))
    assert missing == [], "series the rules select that ledgerd does not export"


def test_database_up_is_one_with_a_database_and_zero_without(service, down):
    assert metric_value(service.ledgerd, "ledger_database_up") == 1
    wait_for(lambda: metric_value(down, "ledger_database_up") == 0, 10,
             "ledger_database_up 0 without a database")


def test_stale_token_refusals_are_counted_by_operation(service):
    led = service.ledgerd
    token = service.token("agent")
    path = "/v1/requests/%s/tool-calls/call_01" % new_id()
    assert led.post(path + "/claim", {"claim_id": claim_id()}, token=token).status == 201
    calls = {
        "claim_renew": ("/renew", {"fencing_token": 7, "lease_ms": 1000}),
        "complete": ("/complete", {"fencing_token": 7, "outcome": "failed",
                                   "retryable": True}),
        "release": ("/release", {"fencing_token": 7}),
    }
    for operation, (tail, body) in calls.items():
        before = {op: metric_value(led, 'ledger_stale_token_refusals_total{operation="%s"}' % op)
                  for op in calls}
        r = led.post(path + tail, body, token=token)
        assert r.status == 409 and r.code == "stale_token", r
        for op in calls:
            after = metric_value(led, 'ledger_stale_token_refusals_total{operation="%s"}' % op)
            assert after - before[op] == (1 if op == operation else 0), (operation, op)
