"""Every client's CA-file option, against a stand-in https server.

ledgerd itself serves https in tests/integration/test_tls.py; here a small
server of the test's own presents the certificates of tests/tlsutil.py, so
each client is checked on its own: it talks to a server whose certificate
its CA file vouches for, refuses one of another CA or for another name
(saying "verification"), does not fall back to anything when no CA file is
given but the system's trust store, and refuses a CA file it cannot use
before it sends anything.
"""

import http.server
import json
import os
import shutil
import ssl
import subprocess
import threading

import pytest

from conftest import LEDGERD
from tlsutil import make_pki

BUILD = LEDGERD.parent
CLIENT_TEST = BUILD / "tests" / "test_c_client"


class StandIn(http.server.ThreadingHTTPServer):
    """An https server with one certificate; every GET is answered with an
    empty list. It records what reached it, handshakes that failed included."""

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


def clean_env(**extra):
    """The environment without any LEDGER_ variable of the caller's, plus @extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


# --- the C SDK ---------------------------------------------------------------

def test_c_sdk_verifies_https_against_its_ca_file(pki, good, wrong_name):
    if not CLIENT_TEST.exists():
        pytest.fail("%s is missing: make %s" % (CLIENT_TEST, CLIENT_TEST.relative_to(BUILD.parent)))
    env = clean_env(LEDGER_URL=good.url, LEDGER_WRONG_NAME_URL=wrong_name.url,
                    LEDGER_CA_FILE=pki.ca, LEDGER_OTHER_CA_FILE=pki.other_ca)
    before = len(good.requests)
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
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "[  PASSED  ] 5 test(s)." in out, out
    # Only the two verified calls reached the server, with the token, over one connection
    # of their own; the refused ones were never sent.
    got = good.requests[before:]
    assert [(m, path.split("?")[0], auth) for m, path, auth in got] == \
        [("GET", "/v1/tool-calls", "Bearer stand-in-token")] * 2, got
