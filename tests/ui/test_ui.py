"""The incident-review page (ui/) in a real browser, against a live ledgerd.

The module's ledgerd gets an incident written through the API (ui_fill.py:
a plain request, a failover before the first delta, a stream terminated
after it, a zombie's refused claim, unknown outcomes, hostile text, and
more requests than one page). Then each node test file (tests/ui/test_*.mjs,
node's own test runner) drives Debian's chromium through playwright-core,
pinned in tests/ui/node, and reads the page by the hooks ui/README.md
names. What needs no browser (the headers of every /ui answer, the
redirect, the files served as they are in ui/, `--ui off`) is checked
here over plain HTTP.

The node files run one after another (one pytest test each): the resolve
flow settles a call the others would otherwise see change under them.
"""

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import Ledgerd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NODE = HERE / "node"
UI = ROOT / "ui"
SHOTS = ROOT / "build" / "ui"
sys.path.insert(0, str(ROOT / "tests" / "js"))

import js_build  # noqa: E402  (tests/js: the install lock and npm ci)
import ui_fill  # noqa: E402

NODE_TESTS = sorted(p.name for p in HERE.glob("test_*.mjs"))

# The headers ledgerd sends with every /ui answer (ui/README.md).
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
UI_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
              "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
              "Cache-Control": "no-cache"}
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css",
                 ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/"}


def ui_files():
    return sorted(p for p in UI.iterdir() if p.is_file() and p.name != "README.md")


def assert_ui_headers(r):
    for name, value in UI_HEADERS.items():
        assert r.header(name) == value, (name, r.header(name), r)


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
    assert all(by_id[rid]["attention"] == [] for rid in scenarios["extra"])
    assert len(by_id) == len(scenarios) - 1 + len(scenarios["extra"])


def test_every_ui_answer_carries_the_headers(service):
    led = service.ledgerd
    files = ui_files()
    assert [p.name for p in files if p.name == "index.html"] == ["index.html"]
    for path in ["/ui/"] + ["/ui/" + p.name for p in files]:
        r = led.get(path)
        assert r.status == 200, (path, r)
        assert_ui_headers(r)
    for method, path, status in (("GET", "/ui/no-such-file.js", 404),
                                 ("GET", "/ui/../v1/requests", 404),
                                 ("POST", "/ui/", 405), ("DELETE", "/ui/app.js", 405)):
        r = led.request(method, path)
        assert r.status == status, (method, path, r)
        assert_ui_headers(r)
    head = led.request("HEAD", "/ui/")
    assert head.status == 200 and head.body == ""
    assert_ui_headers(head)


def test_ui_redirects_to_ui_slash(service):
    r = service.ledgerd.get("/ui")
    assert r.status in (301, 308), r
    assert r.header("Location") == "/ui/"
    assert_ui_headers(r)


def test_the_files_are_served_as_they_are_in_ui(service):
    """Byte for byte, with their types, and no token needed to load the page."""
    for path in ui_files():
        r = service.ledgerd.request("GET", "/ui/" + path.name)
        assert r.status == 200
        assert r.body.encode() == path.read_bytes(), path.name
        want = CONTENT_TYPES.get(path.suffix)
        assert want is not None and r.header("Content-Type").startswith(want), (
            path.name, r.header("Content-Type"))
    index = service.ledgerd.get("/ui/")
    assert index.body.encode() == (UI / "index.html").read_bytes()


def test_ui_off_answers_404(service, tmp_path):
    off = Ledgerd(service.database_url, tmp_path / "ledgerd-ui-off.log",
                  extra_args=["--ui", "off"])
    try:
        for path in ("/ui/", "/ui", "/ui/index.html", "/ui/app.js"):
            r = off.get(path)
            assert r.status == 404, (path, r)
            assert r.code == "not_found"
        # The API itself is untouched.
        assert off.get("/healthz").status == 200
        assert off.get("/v1/whoami", token=service.token("reviewer")).json == {
            "tenant": "t1", "role": "reviewer"}
    finally:
        off.stop()


@pytest.mark.parametrize("name", NODE_TESTS)
def test_node(installed, service, config, name):
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
           "HOME": str(service.tmp), "LEDGER_UI_TESTS": str(config)}
    js_build.run(["node", "--test", "--test-reporter=spec", str(HERE / name)], ROOT, 300,
                 env=env)
