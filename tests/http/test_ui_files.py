"""The incident-review page's files as ledgerd serves them at /ui/: built
into the binary, public (the data comes from the API with the user's token),
and every answer under /ui carries the headers that keep the browser from
running anything else. What the page does is tested in a browser (tests/ui/).
"""

from pathlib import Path

import pytest

from conftest import Ledgerd

ROOT = Path(__file__).resolve().parents[2]
SERVED = sorted(p.name for p in (ROOT / "ui").iterdir() if p.name != "README.md")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def assert_guarded(r):
    assert r.header("Content-Security-Policy") == CSP, r.headers
    assert r.header("X-Content-Type-Options") == "nosniff"
    assert r.header("Referrer-Policy") == "no-referrer"
    assert r.header("X-Frame-Options") == "DENY"
    assert r.header("Cache-Control") == "no-cache"


def test_every_file_of_ui_is_served_as_it_is_in_the_tree(service):
    assert "index.html" in SERVED
    types = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
             ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
    for name in SERVED:
        r = service.ledgerd.request("GET", "/ui/" + name)
        assert r.status == 200, (name, r)
        assert r.body == (ROOT / "ui" / name).read_text(), name
        assert r.header("Content-Type") == types[Path(name).suffix], name
        assert_guarded(r)
    index = service.ledgerd.get("/ui/")
    assert index.status == 200 and index.body == (ROOT / "ui" / "index.html").read_text()
    assert_guarded(index)


def test_ui_without_its_slash_is_redirected_and_the_query_is_ignored(service):
    r = service.ledgerd.get("/ui")
    assert r.status == 308 and r.header("Location") == "/ui/", r
    assert_guarded(r)
    assert service.ledgerd.get("/ui/?x=<script>").status == 200


@pytest.mark.parametrize("path", ["/ui/README.md", "/ui/nope.js", "/ui/../ui/index.html",
                                  "/ui/%2e%2e/index.html", "/ui/sub/index.html", "/ui//",
                                  "/ui/index.html/"])
def test_anything_else_under_ui_is_404_with_the_same_headers(service, path):
    r = service.ledgerd.get(path)
    assert r.status == 404 and r.code == "not_found", (path, r)
    assert_guarded(r)


def test_ui_takes_get_and_head_only(service):
    head = service.ledgerd.request("HEAD", "/ui/")
    assert head.status == 200 and head.body == "", head
    assert int(head.header("Content-Length")) == len((ROOT / "ui" / "index.html").read_bytes())
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        r = service.ledgerd.request(method, "/ui/app.js")
        assert r.status == 405 and r.code == "method_not_allowed", (method, r)
        assert r.header("Allow") == "GET, HEAD"
        assert_guarded(r)


def test_the_api_is_not_under_the_page_headers(service):
    r = service.ledgerd.get("/healthz")
    assert r.status == 200 and r.header("Content-Security-Policy") is None
    assert service.ledgerd.get("/uix").code == "not_found"


def test_ui_off_leaves_no_page(service, tmp_path):
    led = Ledgerd(service.database_url, tmp_path / "off.log", extra_args=["--ui", "off"])
    try:
        for path in ("/ui/", "/ui", "/ui/index.html"):
            r = led.get(path)
            assert r.status == 404 and r.code == "not_found", (path, r)
            assert r.header("Content-Security-Policy") is None
        assert led.get("/healthz").status == 200
    finally:
        led.stop()
    led = Ledgerd(service.database_url, tmp_path / "env.log", extra_env={"LEDGER_UI": "off"})
    try:
        assert led.get("/ui/").status == 404
    finally:
        led.stop()


def test_the_ops_listener_has_no_page(service, tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    led = Ledgerd(service.database_url, tmp_path / "ops.log",
                  extra_args=["--ops-listen", "127.0.0.1:%d" % port])
    try:
        assert led.get("/ui/").status == 200
        led.port, api_port = port, led.port
        assert led.get("/ui/").status == 404
        led.port = api_port
    finally:
        led.stop()
