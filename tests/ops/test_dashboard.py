"""The Grafana dashboard docs/operations.md ships (docs/grafana/): its JSON has
the shape Grafana imports (a datasource variable, unique panel ids, panels
that do not overlap, each with a title and a query), every query is PromQL
that Prometheus's own checker accepts, every alert of docs/alerts/ has a
panel that graphs what it watches, and every series a panel selects is one a
live ledgerd exports, so that renaming a metric or a label value in the C
breaks this test rather than silently a graph."""

import json
import re
import subprocess

import pytest
import yaml

from conftest import ROOT, Ledgerd
from pgcluster import wait_for

DASHBOARD = ROOT / "docs" / "grafana" / "ledgerd.json"
RULES = ROOT / "docs" / "alerts" / "ledgerd.rules.yml"
PROMTOOL = ROOT / "scripts" / "promtool.sh"
DATASOURCE = "${datasource}"
# Series Prometheus makes itself, and labels it attaches to every series it
# scrapes: ledgerd exports neither.
PROMETHEUS_SERIES = {"up"}
TARGET_LABELS = {"job", "instance"}
# What Grafana puts in a range in place of its interval variables, for promtool.
GRAFANA_INTERVALS = {"__rate_interval": "5m", "__interval": "1m", "__range": "6h"}


def dashboard():
    return json.loads(DASHBOARD.read_text())


def panels(dash=None):
    """Every panel, those inside a collapsed row's "panels" too; rows included."""
    out = []
    for panel in (dash or dashboard())["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def graphs(dash=None):
    return [p for p in panels(dash) if p["type"] != "row"]


def interpolate(expr, dash=None):
    """@expr as Grafana sends it: each variable replaced by its current value."""
    values = dict(GRAFANA_INTERVALS)
    for var in (dash or dashboard())["templating"]["list"]:
        if var["type"] != "datasource":
            values[var["name"]] = var["current"]["value"]

    def value(m):
        name = m.group(1) or m.group(2)
        assert name in values, "%s: no variable %s" % (expr, name)
        return values[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def expressions(dash=None):
    """(panel title, refId, PromQL) of every target, its variables interpolated."""
    dash = dash or dashboard()
    return [(p["title"], t["refId"], interpolate(t["expr"], dash))
            for p in graphs(dash) for t in p["targets"]]


# ---------------------------------------------------------------------------
# The shape Grafana imports


def test_the_dashboard_has_a_prometheus_datasource_variable_every_panel_uses():
    dash = dashboard()
    assert dash["schemaVersion"] >= 39 and dash["uid"] and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == {"type": "prometheus", "uid": DATASOURCE}, var["name"]
            assert var["current"]["value"], "%s has no default" % var["name"]
    for panel in graphs(dash):
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]


def test_panel_ids_are_unique_and_every_panel_has_a_title_and_a_query():
    all_panels = panels()
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), "panel ids used twice"
    assert all(isinstance(i, int) for i in ids)
    for panel in all_panels:
        assert panel["title"].strip(), panel["id"]
    for panel in graphs():
        assert panel["type"] in {"timeseries", "stat"}, panel["title"]
        assert panel["description"].strip(), panel["title"]
        targets = panel["targets"]
        assert targets, "%s has no query" % panel["title"]
        assert all(t["expr"].strip() for t in targets), panel["title"]
        refs = [t["refId"] for t in targets]
        assert len(refs) == len(set(refs)), panel["title"]


def test_panels_fit_the_grid_without_overlapping():
    taken = {}
    for panel in panels():
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in taken, "%s overlaps %s" % (panel["title"], taken[(x, y)])
                taken[(x, y)] = panel["title"]


def test_variables_are_interpolated_as_grafana_does():
    dash = {"templating": {"list": [
        {"name": "datasource", "type": "datasource"},
        {"name": "job", "type": "query", "current": {"value": "ledgerd"}}]}}
    assert (interpolate('rate(a{job="$job",x="${job}"}[$__rate_interval])', dash)
            == 'rate(a{job="ledgerd",x="ledgerd"}[5m])')
    with pytest.raises(AssertionError):
        interpolate('a{job="$nojob"}', dash)


# ---------------------------------------------------------------------------
# promtool: every query parses as PromQL


def promtool_check(exprs, tmp_path):
    """Runs `promtool check rules` on a file with each of @exprs as a recording
    rule (promtool has no command that checks a lone expression); returns the
    CompletedProcess."""
    rules = [{"record": "dashboard:query_%d" % i, "expr": expr} for i, expr in enumerate(exprs)]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]},
                                   sort_keys=False))
    return subprocess.run([str(PROMTOOL), "check", "rules", str(path)],
                          capture_output=True, text=True, timeout=300)


def test_every_query_passes_promtool(tmp_path):
    found = expressions()
    for title, ref, expr in found:
        assert "$" not in expr, (title, ref, expr)
    r = promtool_check([expr for _, _, expr in found], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: %d rules found" % len(found) in r.stdout, r.stdout


def test_promtool_check_refuses_a_query_that_is_not_promql(tmp_path):
    good = 'sum by (job) (rate(ledger_store_shed_total[5m]))'
    assert promtool_check([good], tmp_path).returncode == 0
    for broken in ('sum by (job) (rate(ledger_store_shed_total[5m])',  # a parenthesis short
                   'rate(ledger_store_shed_total[5x])',                # no such unit
                   'ledger_store_shed_total{reason="expired"'):        # matchers left open
        r = promtool_check([good, broken], tmp_path)
        assert r.returncode != 0, broken
        assert "dashboard:query_1" in r.stdout + r.stderr, r.stdout + r.stderr


# ---------------------------------------------------------------------------
# The series each query selects

TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>0[xX][0-9a-fA-F]+
      |(?:\d+(?:ms|s|m|h|d|w|y))+
      |(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>==|!=|<=|>=|=~|!~|[-+*/%^<>=(),{}@])
""", re.X)
# Words that take a list of label names in parentheses after them.
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
# Words that are operators or literals, never a series.
OPERATOR_WORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}


def tokens(expr):
    out, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        assert m, "cannot read PromQL at %r" % expr[pos:]
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
        pos = m.end()
    return out


def matchers(toks, i):
    """The matchers of the braces opening at toks[i]: ([(label, op, value)], index after '}')."""
    found, i = [], i + 1
    while toks[i][1] != "}":
        if toks[i][1] == ",":
            i += 1
            continue
        (kind, label), (_, op), (skind, value) = toks[i], toks[i + 1], toks[i + 2]
        assert kind == "ident" and op in {"=", "!=", "=~", "!~"} and skind == "string", toks[i:i + 3]
        found.append((label, op, value[1:-1]))
        i += 3
    return found, i + 1


def selectors(expr):
    """(metric, [(label, op, value)]) for every series selector of a PromQL
    expression: not its functions, aggregations, keywords, label lists
    (`by (...)`, `on (...)`), ranges, strings or numbers."""
    toks, found, i = tokens(expr), [], 0
    while i < len(toks):
        kind, text = toks[i]
        after = toks[i + 1][1] if i + 1 < len(toks) else None
        if kind == "ident" and text.lower() in LABEL_LISTS:
            i += 1
            if after == "(":  # skip the label names
                while toks[i][1] != ")":
                    i += 1
                i += 1
        elif kind == "ident" and (text.lower() in OPERATOR_WORDS or after == "("
                                  or (after or "").lower() in {"by", "without"}):
            i += 1  # an operator, or a function or aggregation: its arguments follow
        elif kind == "ident":
            labels, i = matchers(toks, i + 1) if after == "{" else ([], i + 1)
            found.append((text, labels))
        elif text == "{":  # {__name__="..."} with no name in front
            labels, i = matchers(toks, i)
            names = [v for label, op, v in labels if label == "__name__" and op == "="]
            assert names, "a selector without a metric name: %s" % expr
            found.append((names[0], [m for m in labels if m[0] != "__name__"]))
        else:
            i += 1
    return found


def test_the_selector_parser_sees_every_series_and_nothing_else():
    expr = '''
        histogram_quantile(0.99, sum by (le, route) (
            rate(a_seconds_bucket{route=~"claim|complete", status!="500"}[5m:30s])))
        / on (job) group_left (instance)
        sum(rate(b_total{x="say \\"}\\" and by"}[1h30m] offset 1d)) without (rate)
        + label_replace(c, "dst", "$1", "src", "(.*)") unless {__name__="d", e="f"}
        or count_values("v", g) > bool 1e3 and max(h @ 1609746000) # i{j="k"}
        or vector(0) * inf
    '''
    assert selectors(expr) == [
        ("a_seconds_bucket", [("route", "=~", "claim|complete"), ("status", "!=", "500")]),
        ("b_total", [("x", "=", 'say \\"}\\" and by')]),
        ("c", []), ("d", [("e", "=", "f")]), ("g", []), ("h", [])]
    with pytest.raises(AssertionError):
        selectors("a{b=c}")
    with pytest.raises(AssertionError):
        selectors("a ; b")


def alert_signals():
    """{alert: the metrics its rule reads}."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: {name for name, _ in selectors(rule["expr"])}
            for group in groups for rule in group["rules"]}


def test_every_alert_has_panels_that_graph_what_it_watches():
    signals = alert_signals()
    graphed = {alert: set() for alert in signals}
    for panel in graphs():
        named = set(re.findall(r"\bLedgerd[A-Z]\w+", panel["description"]))
        assert named <= set(signals), "%s names no alert of the rules" % panel["title"]
        for alert in named:
            for target in panel["targets"]:
                graphed[alert] |= {name for name, _ in selectors(interpolate(target["expr"]))}
    for alert, metrics in signals.items():
        assert graphed[alert], "no panel names %s" % alert
        assert metrics <= graphed[alert], (alert, metrics - graphed[alert])


def exposition(led):
    """{series name: [labels of each sample]} of one /metrics. A counter or
    gauge with no sample yet (counted once it is first used) is there with
    no labels; a histogram is there as its _bucket, _sum and _count series,
    never by its bare name, which Prometheus stores nothing under."""
    text = led.get("/metrics").body
    samples = {}
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
        for suffix in suffixes:
            samples.setdefault(name + suffix, [])
    for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? \S+$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        samples.setdefault(m.group(1), []).append(labels)
    return samples


@pytest.fixture(scope="module")
def down(service, tmp_path_factory):
    """A ledgerd whose database is nowhere: /readyz answers it 503."""
    tmp = tmp_path_factory.mktemp("dashboard_down")
    led = Ledgerd("host=%s port=1 user=nobody dbname=nothing" % tmp, tmp / "ledgerd.log")
    yield led
    led.stop()


def test_every_series_a_panel_selects_is_exported(service, down):
    up = service.ledgerd
    assert up.get("/readyz").status == 200
    wait_for(lambda: down.get("/readyz").status == 503, 10, "/readyz 503 without a database")
    wait_for(lambda: "ledger_unknown_outcomes" in exposition(up), 20,
             "the first count of unknown outcomes")
    exported = {}
    for led in (up, down):
        for name, labels in exposition(led).items():
            exported.setdefault(name, []).extend(labels)
    dash = dashboard()
    queries = [(title, expr) for title, _, expr in expressions(dash)]
    queries += [("variable " + v["name"], interpolate(v["definition"], dash))
                for v in dash["templating"]["list"] if v["type"] == "query"]
    missing, checked = [], 0
    for title, expr in queries:
        # label_values(metric, label) of a query variable selects metric.
        expr = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", expr)
        for name, labels in selectors(expr):
            checked += 1
            if name in PROMETHEUS_SERIES:
                continue
            if name not in exported:
                missing.append((title, name))
                continue
            for label, op, value in labels:
                if label in TARGET_LABELS or op not in {"=", "=~"}:
                    continue
                values = {s.get(label) for s in exported[name]} - {None}
                for v in value.split("|") if op == "=~" else [value]:
                    if v not in values:
                        missing.append((title, '%s{%s="%s"}' % (name, label, v)))
    assert checked > len(queries), "the panels select no series"
    assert missing == [], "series the dashboard selects that ledgerd does not export"
