"""ledgerd over https, and every client verifying it against a CA file.

tests/tlsutil.py makes a CA, two server certificates it signed for
127.0.0.1 and localhost, and another CA. The module's ledgerd serves the
first certificate; the clients (Python SDK, ledgerctl and the gateway on the
C SDK) are given the CA file, or another one, which they must refuse.

What this expects of ledgerd:

- `serve --tls-cert FILE --tls-key FILE` (or LEDGER_TLS_CERT and
  LEDGER_TLS_KEY; a flag wins over its variable) serves HTTPS, and only
  HTTPS, on --listen. Its "listening" line still carries the bound
  "address". Plain HTTP sent to that port is turned away at once (a closed
  connection or a 4xx), and ledgerd goes on serving.
- Both flags or neither. A file that cannot be read, or a key that is not
  the certificate's, stops start-up: exit status 2 and one line on stderr.
- SIGHUP reads both files again from the same paths: a new connection is
  served the new certificate; a connection opened before carries on with
  keep-alive. When the new pair cannot be used, the pair loaded before keeps
  serving, ledgerd keeps running, and it logs one line at level "error"
  that mentions TLS or the certificate. A later SIGHUP with a good pair
  takes it.
"""

import http.client
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time

import pytest

from conftest import LEDGERD, ROOT, Ledgerd, Service, claim_id, ledgerd_cmd, new_id
from gatewayproc import REPLY, Gateway, Replica
from integration_helpers import LEDGERCTL
from tlsutil import Pair, fingerprint, fingerprint_der, make_pki, served_fingerprint

sys.path.insert(0, str(ROOT / "sdk" / "python"))

from ledger_client import Ledger, TLSVerificationFailed  # noqa: E402

RELOAD_S = 15  # how long a SIGHUP may take to show on new connections, on a loaded machine


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("tls_pki"))


def tls_args(pair):
    return ["--tls-cert", str(pair.cert), "--tls-key", str(pair.key)]


@pytest.fixture(scope="module")
def service(cluster, pki, tmp_path_factory):
    """The module's database and a ledgerd serving pki.server over https."""
    svc = Service(cluster, "test_tls_%s" % secrets.token_hex(3),
                  tmp_path_factory.mktemp("test_tls"), extra_args=tls_args(pki.server))
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def database(cluster):
    """A migrated database of its own, for the tests that start their own ledgerd."""
    url = cluster.create_db("test_tls_settings_%s" % secrets.token_hex(3))
    ledgerd_cmd("migrate", "--database-url", url)
    return url


def https_url(led, host=None):
    return "https://%s:%d" % (host or led.host, led.port)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Https:
    """One keep-alive https connection to @led, verified against @ca."""

    def __init__(self, led, ca, token=None):
        self.conn = http.client.HTTPSConnection(
            led.host, led.port, timeout=30, context=ssl.create_default_context(cafile=str(ca)))
        self.token = token

    def call(self, method, path, body=None):
        headers = {"Accept": "application/json"}
        if self.token is not None:
            headers["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=data, headers=headers)
        r = self.conn.getresponse()
        text = r.read().decode("utf-8", "replace")
        return r.status, (json.loads(text) if text else None)

    @property
    def served(self):
        """The fingerprint of the certificate this connection was served."""
        return fingerprint_der(self.conn.sock.getpeercert(binary_form=True))

    def close(self):
        self.conn.close()


def log_entries(led, since=0):
    return [json.loads(line) for line in led.log_text()[since:].splitlines()
            if line.startswith("{")]


def tls_errors(led, since):
    """The log's lines at level error, after byte @since, that are about TLS."""
    return [e for e in log_entries(led, since)
            if e.get("level") == "error" and re.search(r"(?i)tls|certificate", json.dumps(e))]


def wait_served(led, ca, want, timeout=RELOAD_S):
    """Waits until a new connection to @led is served the certificate @want."""
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = served_fingerprint(led.host, led.port, ca)
        if got == want:
            return
        time.sleep(0.1)
    raise AssertionError("new connections are still served %s, not %s" % (got, want))


def install(pair, live):
    """Puts @pair's files in place of @live's, each replaced whole (a rename)."""
    for src, dst in ((pair.cert, live.cert), (pair.key, live.key)):
        tmp = dst.with_name(dst.name + ".new")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)


@pytest.fixture
def reloadable(service, pki, tmp_path):
    """A ledgerd of its own serving, from paths of its own, a copy of pki.server."""
    live = Pair(tmp_path / "live" / "tls.crt", tmp_path / "live" / "tls.key")
    live.cert.parent.mkdir()
    install(pki.server, live)
    led = Ledgerd(service.database_url, tmp_path / "reload.log", extra_args=tls_args(live))
    assert served_fingerprint(led.host, led.port, pki.ca) == fingerprint(pki.server.cert)
    yield led, live
    if led.proc is not None:
        led.stop()


def tool(calls):
    """A tool that records its runs and returns which run it was."""
    def run(idempotency_key, fencing_token):
        calls.append(idempotency_key)
        return {"run": len(calls), "key": idempotency_key}
    return run


# --- the Python SDK -------------------------------------------------------------

def test_python_sdk_claims_completes_and_replays_over_https(service, pki):
    led = service.ledgerd
    token = service.token("agent")
    calls = []
    rid = new_id()
    ledger = Ledger(https_url(led), token, ca_file=pki.ca)
    first = ledger.tool_call(rid, "call_00", tool(calls), tool="send", args={"to": "ada"})
    assert first.executed and first.outcome == "succeeded" and first.recorded, first
    again = ledger.tool_call(rid, "call_00", tool(calls), tool="send", args={"to": "ada"})
    assert again.replayed and again.result_json == first.result_json, again
    # By the certificate's DNS name as well, and from a client of its own.
    by_name = Ledger(https_url(led, "localhost"), token, ca_file=str(pki.ca))
    third = by_name.tool_call(rid, "call_00", tool(calls), tool="send", args={"to": "ada"})
    assert third.replayed and third.result == {"run": 1, "key": "%s:call_00" % rid}, third
    assert calls == ["%s:call_00" % rid]
    assert ledger.get_tool_call(rid, "call_00")["state"] == "succeeded"


# --- the C SDK: ledgerctl and the gateway ----------------------------------------

def ctl(*args, **env):
    p = subprocess.run([str(LEDGERCTL)] + [str(a) for a in args], env=clean_env(**env),
                       capture_output=True, text=True, timeout=30)
    p.lines = p.stderr.splitlines()
    return p


def a_settled_request(service, pki):
    rid = new_id()
    Ledger(https_url(service.ledgerd), service.token("agent"), ca_file=pki.ca).tool_call(
        rid, "call_00", tool([]), tool="send", args={"n": 1})
    return rid


def test_ledgerctl_reads_an_https_ledgerd_with_its_ca_file(service, pki):
    led = service.ledgerd
    rid = a_settled_request(service, pki)
    token = service.token("reviewer")
    shown = ctl("--ca-file", pki.ca, "show", rid, LEDGER_URL=https_url(led), LEDGER_TOKEN=token)
    assert shown.returncode == 0 and shown.stderr == "", shown
    assert rid in shown.stdout and "call_00" in shown.stdout, shown.stdout
    raw = ctl("--json", "show", rid, LEDGER_URL=https_url(led, "localhost"), LEDGER_TOKEN=token,
              LEDGER_CA_FILE=pki.ca)
    assert raw.returncode == 0, raw
    assert json.loads(raw.stdout)["request"]["request_id"] == rid
    unknown = ctl("--url", https_url(led), "--ca-file", pki.ca, "unknown", LEDGER_TOKEN=token,
                  LEDGER_CA_FILE=pki.other_ca)  # the flag wins
    assert unknown.returncode == 0 and unknown.stderr == "", unknown


def test_the_gateway_streams_through_an_https_ledgerd(service, pki):
    led = service.ledgerd
    replica = Replica()
    gw = Gateway(https_url(led), service.token("router"), replica.url,
                 ["--ledger-ca-file", pki.ca], clean_env())
    try:
        status, headers, text = gw.complete()
    finally:
        gw.close()
        replica.close()
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), text
    assert REPLY in text and text.rstrip().endswith("data: [DONE]"), text
    rid = headers["x-request-id"]
    assert replica.served == [(rid, "a1")]
    # begin, deliver and finish all reached ledgerd over https
    seen = Ledger(https_url(led), service.token("reviewer"), ca_file=pki.ca).get_request(rid)
    assert seen["request"]["status"] == "completed", seen
    assert seen["request"]["first_delta_sent"] is True, seen
    assert [a["state"] for a in seen["attempts"]] == ["finished"], seen


class Endpoint:
    """A listener's host and port, for served_fingerprint() and wait_served()."""

    def __init__(self, host, port):
        self.host, self.port = host, port


def https_get(host, port, ca, path, method="GET", body=None):
    conn = http.client.HTTPSConnection(host, port, timeout=30,
                                       context=ssl.create_default_context(cafile=str(ca)))
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read().decode()
    finally:
        conn.close()


def test_the_gateway_serves_https_and_reloads_its_certificate_on_sighup(service, pki, tmp_path):
    """ledger-gateway's listener is the wire ledgerd serves on: --tls-cert and
    --tls-key serve HTTPS, and SIGHUP reads both files again."""
    live = Pair(tmp_path / "live" / "tls.crt", tmp_path / "live" / "tls.key")
    live.cert.parent.mkdir()
    install(pki.server, live)
    replica = Replica()
    gw = Gateway(https_url(service.ledgerd), service.token("router"), replica.url,
                 ["--ledger-ca-file", pki.ca] + tls_args(live), clean_env())
    try:
        # the probe thread may log after the listening line: read that line itself
        assert gw.listening["tls"] is True, gw.lines
        status, headers, text = https_get(*gw.address, pki.ca, "/v1/chat/completions", "POST",
                                          json.dumps({"model": "m", "messages": [],
                                                      "stream": True}))
        assert status == 200 and REPLY in text and text.rstrip().endswith("data: [DONE]"), text
        assert served_fingerprint(*gw.address, pki.ca) == fingerprint(pki.server.cert)
        install(pki.server2, live)
        gw.proc.send_signal(signal.SIGHUP)
        wait_served(Endpoint(*gw.address), pki.ca, fingerprint(pki.server2.cert))
        assert https_get(*gw.address, pki.ca, "/healthz")[0] == 200
    finally:
        gw.close()
        replica.close()


def test_ledger_mcp_serves_https_on_the_same_layer(service, pki, tmp_path):
    """ledger-mcp http --tls-cert --tls-key: the client's side is HTTPS, the
    upstream's whatever its URL says."""
    sys.path.insert(0, str(ROOT / "tests" / "http"))
    from wire_targets import LEDGER_MCP, Upstream

    upstream = Upstream()
    proc = subprocess.Popen(
        [str(LEDGER_MCP), "http", "--listen", "127.0.0.1:0",
         "--upstream", "http://127.0.0.1:%d/mcp" % upstream.port,
         "--ledger-url", https_url(service.ledgerd), "--ca-file", str(pki.ca),
         "--token", service.token()] + tls_args(pki.server),
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        for line in proc.stderr:
            entry = json.loads(line)
            if entry.get("msg") == "listening":
                break
        else:
            raise AssertionError("ledger-mcp exited %s" % proc.wait())
        assert entry["tls"] is True, entry
        host, port = entry["address"].rsplit(":", 1)
        status, _, text = https_get(host, int(port), pki.ca, "/healthz")
        assert status == 200 and json.loads(text) == {"ok": True}
        assert served_fingerprint(host, int(port), pki.ca) == fingerprint(pki.server.cert)
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0
        upstream.close()


# --- refusals ------------------------------------------------------------------------

def test_every_client_refuses_ledgerd_when_its_ca_is_another(service, pki):
    led = service.ledgerd
    url = https_url(led)
    calls = []
    # Python SDK: not retried, not run, and it says verification.
    ledger = Ledger(url, service.token("agent"), ca_file=pki.other_ca, retry_s=60)
    t0 = time.monotonic()
    with pytest.raises(TLSVerificationFailed) as e:
        ledger.tool_call(new_id(), "call_00", tool(calls), tool="send")
    assert time.monotonic() - t0 < 30 and calls == []
    assert "certificate failed verification" in e.value.message, e.value
    # Python's ssl by itself
    with pytest.raises(ssl.SSLCertVerificationError):
        served_fingerprint(led.host, led.port, pki.other_ca)
    # ledgerd's certificate is for 127.0.0.1 and localhost, and no other name
    with pytest.raises(ssl.SSLCertVerificationError):
        served_fingerprint(led.host, led.port, pki.ca, server_hostname="ledgerd.example")
    # ledgerctl (the C SDK): with another CA, and with the system's store
    token = service.token("reviewer")
    for args, env in ((["--ca-file", pki.other_ca], {}), ([], {})):
        p = ctl(*args, "unknown", LEDGER_URL=url, LEDGER_TOKEN=token, **env)
        assert p.returncode == 1 and p.stdout == "", p
        assert len(p.lines) == 1 and "TLS: ledgerd's certificate failed verification" in \
            p.lines[0], p.stderr
    # the gateway (the C SDK): its client hears ledger_unavailable, its log why
    replica = Replica()
    gw = Gateway(url, service.token("router"), replica.url,
                 ["--ledger-ca-file", pki.other_ca], clean_env())
    try:
        status, _, text = gw.complete()
    finally:
        gw.close()
        replica.close()
    assert status == 503 and json.loads(text)["error"]["code"] == "ledger_unavailable", text
    said = [e for e in gw.lines if e.get("msg") == "attempt not begun"]
    assert len(said) == 1 and said[0]["tls"] is True, gw.lines
    assert "certificate failed verification" in said[0]["error"], said
    assert replica.served == []


def test_plain_http_to_the_tls_port_fails_cleanly(service, pki):
    led = service.ledgerd
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(led.host, led.port, timeout=10)
    status = None
    try:
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        status = r.status
        r.read()
    except TimeoutError:
        pytest.fail("plain http to the TLS port hung instead of being turned away")
    except (http.client.HTTPException, ConnectionError):
        pass  # a closed connection, or bytes that are not HTTP: turned away
    finally:
        conn.close()
    assert status is None or 400 <= status < 500, "plain http was answered %s" % status
    assert time.monotonic() - t0 < 10
    # ledgerctl with an http URL: one line, an error exit, no hang
    p = ctl("unknown", LEDGER_URL="http://%s:%d" % (led.host, led.port),
            LEDGER_TOKEN=service.token("reviewer"))
    assert p.returncode in (1, 5) and p.stdout == "" and len(p.lines) == 1, p
    # and ledgerd goes on serving https
    conn = Https(led, pki.ca)
    try:
        assert conn.call("GET", "/healthz")[0] == 200
    finally:
        conn.close()
    assert led.proc.poll() is None


# --- settings ----------------------------------------------------------------------

def test_the_tls_files_come_from_the_environment_and_a_flag_wins(database, pki, tmp_path):
    env_only = Ledgerd(database, tmp_path / "env.log",
                       extra_env={"LEDGER_TLS_CERT": str(pki.server.cert),
                                  "LEDGER_TLS_KEY": str(pki.server.key)})
    try:
        assert served_fingerprint(env_only.host, env_only.port, pki.ca) == \
            fingerprint(pki.server.cert)
    finally:
        env_only.stop()
    # the variables name a pair of another CA, the flags pki.server2: the flags win
    both = Ledgerd(database, tmp_path / "both.log", extra_args=tls_args(pki.server2),
                   extra_env={"LEDGER_TLS_CERT": str(pki.foreign.cert),
                              "LEDGER_TLS_KEY": str(pki.foreign.key)})
    try:
        assert served_fingerprint(both.host, both.port, pki.ca) == fingerprint(pki.server2.cert)
    finally:
        both.stop()


@pytest.mark.parametrize("case", ["cert without key", "key without cert",
                                  "variable cert without key", "missing cert", "garbage key",
                                  "key of another certificate"])
def test_bad_tls_settings_stop_start_up_with_one_line(database, pki, tmp_path, case):
    missing = tmp_path / "missing.pem"
    garbage = tmp_path / "garbage.key"
    garbage.write_text("not a key\n")
    args, env, needle = {
        "cert without key": (["--tls-cert", pki.server.cert], {}, r"(?i)tls.key"),
        "key without cert": (["--tls-key", pki.server.key], {}, r"(?i)tls.cert"),
        "variable cert without key": ([], {"LEDGER_TLS_CERT": pki.server.cert},
                                      r"(?i)tls.key"),
        "missing cert": (["--tls-cert", missing, "--tls-key", pki.server.key], {},
                         re.escape(str(missing))),
        "garbage key": (["--tls-cert", pki.server.cert, "--tls-key", garbage], {},
                        re.escape(str(garbage))),
        "key of another certificate": (["--tls-cert", pki.server.cert,
                                        "--tls-key", pki.server2.key], {}, r"(?i)key"),
    }[case]
    try:
        p = subprocess.run([str(LEDGERD), "serve", "--database-url", database,
                            "--listen", "127.0.0.1:0"] + [str(a) for a in args],
                           env=clean_env(**env), capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("ledgerd started with %s" % case)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, p
    assert len(lines) == 1 and re.search(needle, lines[0]), p.stderr


# --- reloading on SIGHUP -----------------------------------------------------------

def test_sighup_serves_the_new_certificate_and_open_connections_carry_on(service, pki,
                                                                         reloadable):
    led, live = reloadable
    token = service.token("agent")
    rid, cid = new_id(), "call_00"
    old = Https(led, pki.ca, token)
    since = len(led.log_text())
    try:
        # A claim on a connection opened before the reload ...
        status, claim = old.call("POST", "/v1/requests/%s/tool-calls/%s/claim" % (rid, cid),
                                 {"claim_id": claim_id(), "tool": "send"})
        assert status == 201, claim
        sock = old.conn.sock
        assert old.served == fingerprint(pki.server.cert)
        install(pki.server2, live)
        led.proc.send_signal(signal.SIGHUP)
        # ... new connections get the new certificate ...
        wait_served(led, pki.ca, fingerprint(pki.server2.cert))
        # ... and the old connection carries on, with the certificate it had.
        status, done = old.call("POST", "/v1/requests/%s/tool-calls/%s/complete" % (rid, cid),
                                {"fencing_token": claim["fencing_token"],
                                 "outcome": "succeeded", "result": {"sent": True}})
        assert status == 200, done
        assert old.conn.sock is sock, "the connection opened before the reload was closed"
        assert old.served == fingerprint(pki.server.cert)
        assert old.call("GET", "/healthz")[0] == 200 and old.conn.sock is sock
    finally:
        old.close()
    assert led.proc.poll() is None, "ledgerd exited on SIGHUP"
    assert tls_errors(led, since) == []
    # A client of the new certificate replays what the old connection recorded.
    replay = Ledger(https_url(led), token, ca_file=pki.ca).tool_call(
        rid, cid, tool([]), tool="send")
    assert replay.replayed and replay.result == {"sent": True}, replay


@pytest.mark.parametrize("breakage", ["garbage certificate", "key of another certificate",
                                      "key removed"])
def test_sighup_with_a_bad_pair_keeps_the_old_one_and_logs_an_error(service, pki, reloadable,
                                                                    breakage):
    led, live = reloadable
    old_fp = fingerprint(pki.server.cert)
    since = len(led.log_text())
    if breakage == "garbage certificate":
        live.cert.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n"
                             "-----END CERTIFICATE-----\n")
    elif breakage == "key of another certificate":
        shutil.copyfile(pki.server2.cert, live.cert)  # the key stays pki.server's
    else:
        live.key.unlink()
    led.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + RELOAD_S
    while not tls_errors(led, since) and time.monotonic() < deadline:
        time.sleep(0.1)
    errors = tls_errors(led, since)
    assert len(errors) == 1, "no single error line about the TLS reload:\n%s" % \
        led.log_text()[since:]
    assert led.proc.poll() is None, "ledgerd exited on a SIGHUP with a bad pair"
    # The pair loaded before still serves new connections, and calls are answered.
    for _ in range(3):
        assert served_fingerprint(led.host, led.port, pki.ca) == old_fp
    conn = Https(led, pki.ca, service.token("agent"))
    try:
        status, body = conn.call("POST", "/v1/requests/%s/tool-calls/call_00/claim" % new_id(),
                                 {"claim_id": claim_id(), "tool": "send"})
        assert status == 201, body
        assert conn.served == old_fp
    finally:
        conn.close()
    # Once a good pair is in place, the next SIGHUP takes it.
    install(pki.server2, live)
    led.proc.send_signal(signal.SIGHUP)
    wait_served(led, pki.ca, fingerprint(pki.server2.cert))
    assert len(tls_errors(led, since)) == 1


def test_plaintext_on_an_address_other_than_loopback_is_warned_of(service, database):
    """ledgerd says at start-up that tokens would cross the network in the
    clear. The address (192.0.2.1, a documentation address) is put on the
    loopback interface of a network namespace of the test's own, so
    nothing listens outside it."""
    script = (
        "ip link set lo up && ip addr add 192.0.2.1/32 dev lo && "
        "exec %s serve --database-url '%s' --listen 192.0.2.1:0 --log-level info"
        % (LEDGERD, database))
    proc = subprocess.Popen(["unshare", "--net", "sh", "-c", script],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        deadline = time.time() + 15
        while time.time() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "plaintext" in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    warned = [json.loads(x) for x in lines if "plaintext" in x]
    assert warned and warned[0]["level"] == "warn", lines
    assert "192.0.2.1" in warned[0]["msg"] and "--tls-cert" in warned[0]["msg"]
    # On loopback, and over TLS, there is nothing to warn of.
    assert "plaintext" not in service.ledgerd.log_text()
