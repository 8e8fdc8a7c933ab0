"""The incident-review page (ui/) in a real browser, against a live ledgerd.

The module's ledgerd gets an incident written through the API (ui_fill.py:
a plain request, a failover before the first delta, a stream terminated
after it, a zombie's refused claim, unknown outcomes, hostile text, a
gateway's request with its client events, and more requests than one page). Then each node test file (tests/ui/test_*.mjs,
node's own test runner) drives Debian's chromium through playwright-core,
pinned in tests/ui/node, and reads the page by the hooks ui/README.md
names. What needs no browser (the headers of every /ui answer, the
redirect, the files served as they are in ui/, `--ui off`) is checked over
plain HTTP in tests/http/test_ui_files.py.

The node files run one after another (one pytest test each): the resolve
flow settles a call the others would otherwise see change under them.
"""

import json
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NODE = HERE / "node"
SHOTS = ROOT / "build" / "ui"
sys.path.insert(0, str(ROOT / "tests" / "sdk" / "js"))

import js_build  # noqa: E402  (tests/sdk/js: the install lock and npm ci)
import ui_fill  # noqa: E402

NODE_TESTS = sorted(p.name for p in HERE.glob("test_*.mjs"))

@pytest.fixture(scope="module")
def installed():
    """playwright-core at its pin, once for every worker (build/js.lock)."""
    with js_build.locked():
        if js_build.needs_install(NODE):
            js_build.run(js_build.NPM_CI, NODE, 300)


@pytest.fixture(scope="module")
def scenarios(service):
    return ui_fill.fill(service)


@pytest.fixture(scope="module")
def config(service, scenarios):
    """The JSON file the node tests read: where ledgerd is, tokens, scenarios."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = service.tmp / "ui-tests.json"
    path.write_text(json.dumps({
        "url": "http://%s:%d" % (service.ledgerd.host, service.ledgerd.port),
        "tokens": {role: service.token(role) for role in ("admin", "reviewer", "router")},
        "tenant": "t1",
        "scenarios": scenarios,
        "screenshots": str(SHOTS),
    }, indent=1))
    return path


def listed(service):
    """Every request of the tenant, newest first, from GET /v1/requests."""
    items, cursor = [], None
    while True:
        path = "/v1/requests?limit=1000" + ("&cursor=" + cursor if cursor else "")
        page = service.ledgerd.get(path, token=service.token("reviewer")).json
        items += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            return items


def test_the_fill_reads_back_through_the_api(service, scenarios):
    """The node tests take these as given: check them where they come from."""
    reviewer = service.token("reviewer")
    by_id = {r["request_id"]: r for r in listed(service)}
    for name, want in scenarios.items():
        if name == "extra":
            continue
        got = service.ledgerd.get("/v1/requests/" + want["rid"], token=reviewer).json
        assert got["request"]["status"] == want["status"], (name, got["request"])
        assert [a["attempt_id"] for a in got["attempts"]] == [a for a in want["lanes"] if a]
        assert sorted(c["tool_call_id"] for c in got["tool_calls"]) == sorted(want["calls"])
        unknown = sorted(c["tool_call_id"] for c in got["tool_calls"] if c["state"] == "unknown")
        assert unknown == want.get("unknown", []), name
        assert by_id[want["rid"]]["attention"] == want["attention"], name
        types = [e["type"] for e in got["events"]]
        assert ("first_delta" in types) == (want["first_delta"] is not None), name
        assert types.count("failover_decision") == len(want.get("failovers", [])), name
        assert types.count("late_completion") == len(want.get("late", [])), name
    zombie = service.ledgerd.get("/v1/requests/" + scenarios["zombie"]["rid"],
                                 token=reviewer).json
    refused = [e for e in zombie["events"] if e["type"] == "refused"]
    assert [(e["attempt_id"], e["detail"]["operation"], e["detail"]["code"])
            for e in refused] == [("att-1", "claim", "attempt_fenced")]
    terminated = by_id[scenarios["terminated"]["rid"]]
    assert terminated["client_error"]["error"]["code"] == "upstream_decode_interrupted"
    gw = service.ledgerd.get("/v1/requests/" + scenarios["gateway"]["rid"], token=reviewer).json
    assert {a["attempt_id"]: a["gateway"] for a in gw["attempts"]} == \
        scenarios["gateway"]["gateways"]
    assert [[e["attempt_id"], e["type"]] for e in gw["events"]
            if e["type"].startswith("client_")] == scenarios["gateway"]["client"]
    assert gw["request"]["client_error"]["error"]["code"] == "context_length_exceeded"
    assert all(by_id[rid]["attention"] == [] for rid in scenarios["extra"])
    assert len(by_id) == len(scenarios) - 1 + len(scenarios["extra"])


@pytest.mark.parametrize("name", NODE_TESTS)
def test_node(installed, service, config, name):
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
           "HOME": str(service.tmp), "LEDGER_UI_TESTS": str(config)}
    js_build.run(["node", "--test", "--test-reporter=spec", str(HERE / name)], ROOT, 300,
                 env=env)
