"""Every client's CA-file option, against a stand-in https server.

ledgerd itself serves https in tests/integration/test_tls.py; here a small
server of the test's own presents the certificates of tests/tlsutil.py, so
each client is checked on its own: it talks to a server whose certificate
its CA file vouches for, refuses one of another CA or for another name
(saying "verification"), does not fall back to anything when no CA file is
given but the system's trust store, and refuses a CA file it cannot use
before it sends anything.
"""

import asyncio
import http.server
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time

import pytest

from conftest import LEDGERD
from gatewayproc import GATEWAY, Gateway, Replica
from tlsutil import make_pki

BUILD = LEDGERD.parent
CLIENT_TEST = BUILD / "tests" / "test_c_client"


class StandIn(http.server.ThreadingHTTPServer):
    """An https server with one certificate: every GET is answered with an
    empty list, every POST with 409 retry_budget_exhausted for the pool,
    which the gateway passes on as its own 503. It records what reached it and counts handshakes."""

    daemon_threads = True

    def __init__(self, pair):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(pair.cert), str(pair.key))
        self.lock = threading.Lock()
        self.requests = []            # (method, path, Authorization header)
        self.connections = 0          # handshakes that succeeded
        self.refused = 0              # handshakes the client broke off
        self.url = "https://127.0.0.1:%d" % self.server_address[1]
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def get_request(self):
        sock, addr = super().get_request()
        return self.context.wrap_socket(sock, server_side=True,
                                        do_handshake_on_connect=False), addr

    @property
    def handshakes(self):
        """Every handshake begun: a client may check the host name after its own
        side of a handshake is done, and then hang up."""
        with self.lock:
            return self.connections + self.refused

    def handle_error(self, request, client_address):
        pass  # a client that refused the certificate: counted in the handler

    def close(self):
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError):
            with self.server.lock:
                self.server.refused += 1
            raise
        with self.server.lock:
            self.server.connections += 1
        super().setup()

    def _record(self):
        with self.server.lock:
            self.server.requests.append((self.command, self.path,
                                         self.headers.get("Authorization")))

    def do_GET(self):
        self._record()
        body = json.dumps({"items": [], "next_cursor": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._record()
        body = json.dumps({"error": {
            "code": "retry_budget_exhausted", "message": "the stand-in refuses every attempt",
            "budget": "pool", "retry_after_ms": 3000}}).encode()
        self.send_response(409)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def good(pki):
    server = StandIn(pki.server)
    yield server
    server.close()


@pytest.fixture(scope="module")
def wrong_name(pki):
    server = StandIn(pki.wrong_name)
    yield server
    server.close()


@pytest.fixture(scope="module")
def replica():
    """A plain-HTTP server: a replica for the gateway, and no TLS for the clients."""
    r = Replica()
    yield r
    r.close()


def settled(count, want, timeout=10):
    """@count() once it reached @want (or the time ran out), and a moment after:
    a handshake the client broke off is counted by the server's thread, later."""
    deadline = time.monotonic() + timeout
    while count() < want and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    return count()


def clean_env(**extra):
    """The environment without any LEDGER_ variable of the caller's, plus @extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


# --- the C SDK ---------------------------------------------------------------

def test_c_sdk_verifies_https_against_its_ca_file(pki, good, wrong_name):
    system = StandIn(pki.server)
    if not CLIENT_TEST.exists():
        pytest.fail("%s is missing: make %s" % (CLIENT_TEST, CLIENT_TEST.relative_to(BUILD.parent)))
    env = clean_env(LEDGER_URL=good.url, LEDGER_WRONG_NAME_URL=wrong_name.url,
                    LEDGER_SYSTEM_URL=system.url, LEDGER_CA_FILE=pki.ca,
                    LEDGER_OTHER_CA_FILE=pki.other_ca)
    before = len(good.requests)
    shakes = (good.handshakes, wrong_name.handshakes)
    # Under valgrind, as the live group: the CA file's reader and the failures' paths
    # must not leak either. (A sanitized build finds leaks itself.)
    argv = [str(CLIENT_TEST), "tls"]
    if "libasan" not in subprocess.run(["ldd", str(CLIENT_TEST)], capture_output=True,
                                       text=True).stdout:
        if shutil.which("valgrind") is None:
            pytest.fail("valgrind is missing: scripts/deps.sh test installs it")
        argv = ["valgrind", "--quiet", "--leak-check=full",
                "--show-leak-kinds=definite,indirect",
                "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99"] + argv
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    finally:
        system.close()
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "[  PASSED  ] 6 test(s)." in out, out
    # Only the verified calls reached the server, with the token (two over one connection,
    # and one after the CA file was replaced); the refused ones were never sent.
    got = good.requests[before:]
    assert [(m, path.split("?")[0], auth) for m, path, auth in got] == \
        [("GET", "/v1/tool-calls", "Bearer stand-in-token")] * 3, got
    # A connection for each verified client, and one handshake for each refused call
    # (another CA: a list and a tool call; the CA file before it was replaced: a list;
    # another name: a list), so none was sent again.
    assert settled(lambda: good.handshakes - shakes[0], 5) == 5
    assert settled(lambda: wrong_name.handshakes - shakes[1], 1) == 1


# --- ledgerctl -----------------------------------------------------------------

LEDGERCTL = BUILD / "ledgerctl"


def ledgerctl(*args, **env):
    p = subprocess.run([str(LEDGERCTL)] + [str(a) for a in args], env=clean_env(**env),
                       capture_output=True, text=True, timeout=30)
    p.lines = p.stderr.splitlines()
    return p


def test_ledgerctl_usage_names_the_ca_file():
    p = ledgerctl("--help")
    assert p.returncode == 0
    assert "[--ca-file FILE]" in p.stdout.splitlines()[0]
    assert "--ca-file FILE" in p.stdout and "$LEDGER_CA_FILE" in p.stdout, p.stdout


def test_ledgerctl_verifies_against_the_ca_file_of_its_flag_or_variable(pki, good):
    before = len(good.requests)
    flag = ledgerctl("--ca-file", pki.ca, "unknown", LEDGER_URL=good.url, LEDGER_TOKEN="t-1")
    assert flag.returncode == 0 and flag.stderr == "", flag
    var = ledgerctl("unknown", LEDGER_URL=good.url, LEDGER_TOKEN="t-1", LEDGER_CA_FILE=pki.ca)
    assert var.returncode == 0 and var.stderr == "", var
    # the flag wins over the variable
    wins = ledgerctl("--ca-file=%s" % pki.ca, "unknown", LEDGER_URL=good.url,
                     LEDGER_TOKEN="t-1", LEDGER_CA_FILE=pki.other_ca)
    assert wins.returncode == 0, wins
    assert [r[2] for r in good.requests[before:]] == ["Bearer t-1"] * 3


@pytest.mark.parametrize("how", ["flag", "variable", "flag over variable", "system store"])
def test_ledgerctl_refuses_a_certificate_its_ca_does_not_vouch_for(pki, good, how):
    args, env = {
        "flag": (["--ca-file", pki.other_ca], {}),
        "variable": ([], {"LEDGER_CA_FILE": pki.other_ca}),
        "flag over variable": (["--ca-file", pki.other_ca], {"LEDGER_CA_FILE": pki.ca}),
        "system store": ([], {}),
    }[how]
    before = len(good.requests)
    p = ledgerctl(*args, "unknown", LEDGER_URL=good.url, LEDGER_TOKEN="t-2", **env)
    assert p.returncode == 1 and p.stdout == "", p
    assert len(p.lines) == 1 and p.lines[0].startswith("ledgerctl: unknown: TLS: "), p.stderr
    assert "certificate failed verification" in p.lines[0], p.stderr
    assert good.requests[before:] == []


def test_ledgerctl_says_tls_when_the_server_speaks_no_tls(pki, replica):
    url = replica.url.replace("http://", "https://")  # a plain-HTTP server
    p = ledgerctl("--ca-file", pki.ca, "unknown", LEDGER_URL=url, LEDGER_TOKEN="t")
    assert p.returncode == 1 and p.stdout == "", p
    assert len(p.lines) == 1 and "TLS: the TLS handshake failed: " in p.lines[0], p.stderr


def test_ledgerctl_checks_the_host_name(pki, wrong_name):
    p = ledgerctl("--ca-file", pki.ca, "unknown", LEDGER_URL=wrong_name.url, LEDGER_TOKEN="t")
    assert p.returncode == 1 and "certificate failed verification" in p.stderr, p
    assert wrong_name.requests == []


@pytest.mark.parametrize("source", ["--ca-file", "LEDGER_CA_FILE"])
def test_ledgerctl_refuses_a_ca_file_it_cannot_read_before_any_call(tmp_path, source):
    missing = tmp_path / "missing.pem"
    args = ["--ca-file", missing] if source == "--ca-file" else []
    env = {"LEDGER_CA_FILE": missing} if source == "LEDGER_CA_FILE" else {}
    # a closed port: a call would exit 5
    p = ledgerctl(*args, "unknown", LEDGER_URL="https://127.0.0.1:9", **env)
    assert p.returncode == 2 and p.stdout == "", p
    assert p.lines == ["ledgerctl: %s: cannot read the CA file %s: No such file or directory"
                       % (source, missing)], p.stderr
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    p = ledgerctl("--ca-file", garbage, "unknown", LEDGER_URL="https://127.0.0.1:9")
    assert p.returncode == 2 and "holds no PEM certificate" in p.stderr, p


# --- the reference gateway ----------------------------------------------------

def test_gateway_usage_names_the_ledger_ca_file():
    p = subprocess.run([str(GATEWAY)], capture_output=True, text=True, env=clean_env(),
                       timeout=10)
    assert p.returncode == 2
    assert "--ledger-ca-file FILE" in p.stderr and "($LEDGER_CA_FILE)" in p.stderr, p.stderr


@pytest.mark.parametrize("source", ["--ledger-ca-file", "LEDGER_CA_FILE"])
def test_gateway_refuses_a_ca_file_it_cannot_read_at_start_up(tmp_path, source):
    missing = tmp_path / "missing.pem"
    argv = [str(GATEWAY), "--ledger-url", "https://127.0.0.1:9", "--ledger-token", "t",
            "--replica", "a=http://127.0.0.1:9"]
    env = clean_env()
    if source == "--ledger-ca-file":
        argv += [source, str(missing)]
    else:
        env[source] = str(missing)
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=10)
    assert p.returncode == 2, p
    assert p.stderr.splitlines()[0] == (
        "ledger-gateway: %s: cannot read the CA file %s: No such file or directory"
        % (source, missing)), p.stderr


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_gateway_asks_an_https_ledger_it_verified(pki, good, replica, how):
    args, env = ((["--ledger-ca-file", pki.ca], {"LEDGER_CA_FILE": pki.other_ca})
                 if how == "flag" else ([], {"LEDGER_CA_FILE": pki.ca}))
    gw = Gateway(good.url, "router-token", replica.url, args, clean_env(**env))
    try:
        before = len(good.requests)
        status, _, text = gw.complete()
    finally:
        gw.close()
    body = json.loads(text)
    # The stand-in's refusal came back over TLS: the attempt was asked for, and the
    # pool's budget it named reached the client.
    assert status == 503 and body["error"]["code"] == "retry_budget_exhausted", body
    got = good.requests[before:]
    assert len(got) == 1 and got[0][0] == "POST" and got[0][1].endswith("/attempts"), got
    assert got[0][2] == "Bearer router-token"


def test_gateway_refuses_a_ledger_its_ca_does_not_vouch_for(pki, good, replica):
    gw = Gateway(good.url, "router-token", replica.url, ["--ledger-ca-file", pki.other_ca],
                 clean_env())
    try:
        before = len(good.requests)
        status, _, text = gw.complete()
    finally:
        gw.close()
    body = json.loads(text)
    assert status == 503 and body["error"]["code"] == "ledger_unavailable", body
    assert good.requests[before:] == []
    said = [e for e in gw.lines if e.get("msg") == "attempt not begun"]
    assert len(said) == 1 and said[0]["tls"] is True, gw.lines
    assert "certificate failed verification" in said[0]["error"], said


# --- the Python SDK ------------------------------------------------------------

sys.path.insert(0, str(BUILD.parent / "sdk" / "python"))

from ledger_client import Ledger, LedgerUnavailable, TLSVerificationFailed  # noqa: E402


def test_python_sdk_verifies_https_against_its_ca_file(pki, good):
    before = len(good.requests)
    for ca in (str(pki.ca), pki.ca):  # a str or a path
        ledger = Ledger(good.url, "py-token", ca_file=ca)
        assert ledger.get_request("r-1") == {"items": [], "next_cursor": None}
        assert ledger.get_request("r-2") == {"items": [], "next_cursor": None}
    got = good.requests[before:]
    assert [(m, path, auth) for m, path, auth in got] == [
        ("GET", "/v1/requests/r-1", "Bearer py-token"),
        ("GET", "/v1/requests/r-2", "Bearer py-token")] * 2, got


@pytest.mark.parametrize("how", ["another CA", "another name", "system store"])
def test_python_sdk_refuses_a_certificate_its_ca_does_not_vouch_for(pki, good, wrong_name, how):
    server, ca, words = {
        "another CA": (good, pki.other_ca, "unable to get local issuer certificate"),
        "another name": (wrong_name, pki.ca, "not valid for '127.0.0.1'"),
        "system store": (good, None, "unable to get local issuer certificate"),
    }[how]
    ledger = Ledger(server.url, "py-token", ca_file=ca, retry_s=60)
    ran = []
    before, shakes = len(server.requests), server.handshakes
    t0 = time.monotonic()
    with pytest.raises(TLSVerificationFailed) as e:
        ledger.tool_call("r-tls", "call_00", lambda key, token: ran.append(key))
    assert time.monotonic() - t0 < 30
    assert settled(lambda: server.handshakes - shakes, 1) == 1, "tried again"
    assert isinstance(e.value, LedgerUnavailable) and e.value.status is None
    assert e.value.code == "tls_verification_failed"
    assert e.value.message.startswith("ledgerd's certificate failed verification: "), e.value
    assert words in e.value.message, e.value
    assert ran == [] and server.requests[before:] == []


@pytest.mark.parametrize("url", ["https://127.0.0.1:9", "http://127.0.0.1:9"])
def test_python_sdk_refuses_a_ca_file_it_cannot_use(tmp_path, url):
    missing = tmp_path / "missing.pem"
    with pytest.raises(ValueError, match="^cannot read the CA file %s: No such file"
                       % re.escape(str(missing))):
        Ledger(url, "t", ca_file=missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ValueError, match="holds no usable PEM certificate"):
        Ledger(url, "t", ca_file=garbage)
    with pytest.raises(ValueError, match="empty"):
        Ledger(url, "t", ca_file="")


# --- the Python SDK's asyncio client -------------------------------------------

from ledger_client.aio import AsyncLedger  # noqa: E402


def test_python_async_sdk_verifies_https_against_its_ca_file(pki, good):
    async def two_reads(ca):
        async with AsyncLedger(good.url, "py-token", ca_file=ca) as ledger:
            return [await ledger.get_request("r-1"), await ledger.get_request("r-2")]

    before = len(good.requests)
    for ca in (str(pki.ca), pki.ca):  # a str or a path
        assert asyncio.run(two_reads(ca)) == [{"items": [], "next_cursor": None}] * 2
    got = good.requests[before:]
    assert [(m, path, auth) for m, path, auth in got] == [
        ("GET", "/v1/requests/r-1", "Bearer py-token"),
        ("GET", "/v1/requests/r-2", "Bearer py-token")] * 2, got


@pytest.mark.parametrize("how", ["another CA", "another name", "system store"])
def test_python_async_sdk_refuses_a_certificate_its_ca_does_not_vouch_for(
        pki, good, wrong_name, how):
    server, ca, words = {
        "another CA": (good, pki.other_ca, "unable to get local issuer certificate"),
        "another name": (wrong_name, pki.ca, "not valid for '127.0.0.1'"),
        "system store": (good, None, "unable to get local issuer certificate"),
    }[how]
    ledger = AsyncLedger(server.url, "py-token", ca_file=ca, retry_s=60)
    ran = []

    async def tool(key, token):
        ran.append(key)

    before, shakes = len(server.requests), server.handshakes
    t0 = time.monotonic()
    with pytest.raises(TLSVerificationFailed) as e:
        asyncio.run(ledger.tool_call("r-tls", "call_00", tool))
    assert time.monotonic() - t0 < 30
    assert settled(lambda: server.handshakes - shakes, 1) == 1, "tried again"
    assert isinstance(e.value, LedgerUnavailable) and e.value.status is None
    assert e.value.code == "tls_verification_failed"
    assert e.value.message.startswith("ledgerd's certificate failed verification: "), e.value
    assert words in e.value.message, e.value
    assert ran == [] and server.requests[before:] == []


def test_python_async_sdk_refuses_a_ca_file_it_cannot_use(tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ValueError, match="holds no usable PEM certificate"):
        AsyncLedger("https://127.0.0.1:9", "t", ca_file=garbage)
    with pytest.raises(ValueError, match="^cannot read the CA file"):
        AsyncLedger("http://127.0.0.1:9", "t", ca_file=tmp_path / "missing.pem")
