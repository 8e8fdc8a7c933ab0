"""--ops-listen: /healthz, /readyz and /metrics on a listener of their own.

/metrics carries totals for every tenant, so where the API faces clients it
belongs on a private address: with --ops-listen set, the operations
endpoints answer there and the API listener has no /metrics (404, as any
path it does not serve); the API listener keeps /healthz and /readyz for a
load balancer. The ops listener serves nothing else."""

import http.client
import json
import socket
import subprocess
import time

from conftest import LEDGERD, Ledgerd, claim_id, new_id


def ops_address(led):
    deadline = time.time() + 10
    while time.time() < deadline:
        for line in led.log_text().splitlines():
            entry = json.loads(line)
            if entry.get("msg", "").startswith("operations ") and "address" in entry:
                host, port = entry["address"].rsplit(":", 1)
                return host, int(port)
        time.sleep(0.05)
    raise AssertionError("no operations listener in the log")


def get(addr, path, token=None):
    conn = http.client.HTTPConnection(*addr, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": "Bearer " + token} if token else {})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def test_operations_move_to_their_own_listener(service, tmp_path):
    led = Ledgerd(service.database_url, tmp_path / "ops.log",
                  extra_args=["--ops-listen", "127.0.0.1:0"])
    try:
        ops = ops_address(led)
        api = (led.host, led.port)
        assert ops != api
        status, body = get(ops, "/metrics")
        assert status == 200 and "ledger_http_requests_total" in body
        assert get(ops, "/healthz")[0] == 200
        assert get(ops, "/readyz")[0] == 200
        # The API listener: no /metrics; health and readiness stay.
        status, body = get(api, "/metrics")
        assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
        assert get(api, "/healthz")[0] == 200
        assert get(api, "/readyz")[0] == 200
        # The ops listener serves no API route, whatever the token.
        token = service.token("admin")
        for path in ("/v1/requests", "/v1/tool-calls?state=unknown",
                     "/v1/requests/%s" % new_id()):
            status, body = get(ops, path, token)
            assert status == 404 and json.loads(body)["error"]["code"] == "not_found", path
        r = led.post("/v1/requests/%s/tool-calls/call_01/claim" % new_id(),
                     {"claim_id": claim_id()}, token=service.token("agent"))
        assert r.status == 201, r
    finally:
        led.stop()


def test_without_ops_listen_metrics_stay_on_the_api(service):
    assert service.ledgerd.get("/metrics").status == 200


def test_a_bad_ops_listen_stops_start_up(service):
    for bad in ("nowhere", "127.0.0.1:", "unix:relative"):
        p = subprocess.run([str(LEDGERD), "serve", "--database-url", service.database_url,
                            "--listen", "127.0.0.1:0", "--ops-listen", bad],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, (bad, p.returncode, p.stderr)
        assert p.stderr.count("\n") == 1 and "--ops-listen" in p.stderr, p.stderr


def test_a_flood_on_the_api_port_leaves_the_ops_listener_answering(service, tmp_path):
    """The ops listener has a budget of its own: idle connections that fill
    --max-connections on the API port do not close the liveness probe's."""
    led = Ledgerd(service.database_url, tmp_path / "flood.log",
                  extra_args=["--ops-listen", "127.0.0.1:0", "--max-connections", "40",
                              "--max-connections-per-address", "0"])
    flood = []
    try:
        ops = ops_address(led)
        for _ in range(60):  # past the budget: the last ones are closed unanswered
            flood.append(socket.create_connection((led.host, led.port)))
        time.sleep(0.3)
        for path in ("/healthz", "/readyz", "/metrics"):
            assert get(ops, path)[0] == 200, path
        # The API listener did close the connections past its budget.
        status, body = get(ops, "/metrics")
        assert 'ledger_http_connections_refused_total{reason="total"}' in body, body[-2000:]
    finally:
        for s in flood:
            s.close()
        led.stop()


def test_a_connection_that_sends_nothing_is_closed_at_the_head_timeout(service, tmp_path):
    """A new connection that has sent no byte holds a slot until --head-timeout
    (here 1 s), not --idle-timeout (here 30 s); a keep-alive connection after a
    request stays open for its idle timeout."""
    led = Ledgerd(service.database_url, tmp_path / "silent.log",
                  extra_args=["--head-timeout", "1s", "--idle-timeout", "30s"])
    try:
        silent = socket.create_connection((led.host, led.port))
        used = socket.create_connection((led.host, led.port))
        used.sendall(b"GET /healthz HTTP/1.1\r\nHost: l\r\n\r\n")
        assert used.recv(4096).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        silent.settimeout(10)
        assert silent.recv(1) == b""  # closed by ledgerd
        closed_after = time.monotonic() - started
        assert closed_after < 4, closed_after
        used.settimeout(0.5)
        try:
            assert used.recv(1) != b"", "the used connection was closed too"
        except socket.timeout:
            pass  # still open: nothing to read, as it should be
        used.sendall(b"GET /healthz HTTP/1.1\r\nHost: l\r\n\r\n")
        used.settimeout(5)
        assert used.recv(4096).startswith(b"HTTP/1.1 200")
        silent.close()
        used.close()
    finally:
        led.stop()
