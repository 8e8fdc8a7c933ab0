"""The reference gateway's answers that need no replica: bad requests, bad
settings, and no replica answering. The token-cycle faults are in tests/faults/."""

import http.client
import json
import socket
import subprocess

import pytest

from conftest import LEDGERD, free_port

GATEWAY = LEDGERD.parent / "ledger-gateway"


def closed_port():
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gateway(service):
    led = service.ledgerd
    proc = subprocess.Popen(
        [str(GATEWAY), "--listen", "127.0.0.1:0",
         "--ledger-url", "http://%s:%d" % (led.host, led.port),
         "--ledger-token", service.token("router"),
         "--replica", "gone=http://127.0.0.1:%d" % closed_port()],
        stderr=subprocess.PIPE, text=True)
    address = None
    for line in proc.stderr:
        entry = json.loads(line)
        if "address" in entry:
            address = entry["address"]
            break
    assert address is not None, "the gateway did not say where it listens"
    host, port = address.rsplit(":", 1)
    yield host, int(port)
    proc.terminate()
    assert proc.wait(timeout=10) == 0


def call(gw, method, path, body=None, raw=None):
    conn = http.client.HTTPConnection(*gw, timeout=30)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), json.loads(text)


def openai_error(body):
    assert set(body) == {"error"}, body
    assert set(body["error"]) >= {"message", "type", "param", "code"}, body
    return body["error"]


def test_healthz(gateway):
    assert call(gateway, "GET", "/healthz")[0] == 200


@pytest.mark.parametrize("body,raw,code,why", [
    ({"model": "m", "messages": [], "stream": "yes"}, None, "invalid_field", "stream"),
    ({"model": 5, "messages": [], "stream": True}, None, "invalid_field", "model"),
    (None, b"{not json", "invalid_json", "not a JSON object"),
    (None, b"[]", "invalid_json", "not a JSON object"),
    (None, b"", "invalid_json", "not a JSON object"),
])
def test_a_body_is_a_json_object_with_a_model_and_stream_of_their_types(gateway, body, raw, code, why):
    status, _, b = call(gateway, "POST", "/v1/chat/completions", body, raw)
    assert status == 400
    e = openai_error(b)
    assert e["type"] == "invalid_request_error" and why in e["message"], e
    assert e["code"] == code, e


def test_unknown_path_and_method(gateway):
    status, _, b = call(gateway, "GET", "/v1/embeddings")
    assert status == 404 and openai_error(b)["code"] == "not_found"
    status, headers, b = call(gateway, "GET", "/v1/chat/completions")
    assert status == 405 and openai_error(b)["code"] == "method_not_allowed"
    assert headers["allow"] == "POST"


def test_body_over_a_mebibyte_is_refused(gateway):
    big = {"stream": True, "messages": [{"role": "user", "content": "x" * (1 << 20)}]}
    status, _, b = call(gateway, "POST", "/v1/chat/completions", big)
    assert status == 413 and openai_error(b)["code"] == "body_too_large"


def test_no_replica_answering_is_a_retryable_503_with_the_request_id(gateway):
    status, headers, b = call(gateway, "POST", "/v1/chat/completions",
                              {"model": "m", "messages": [], "stream": True})
    assert status == 503
    e = b["error"]
    assert e["code"] == "no_replica_available" and e["retryable"] is True
    assert e["request_id"] == headers["x-request-id"]
    assert e["partial_output"] is False and e["delivered_output_tokens"] == 0
    assert headers["x-should-retry"] == "true"  # the client may try again
    assert headers["retry-after"] == "1"


@pytest.mark.parametrize("argv,why", [
    ([], "required"),
    (["--ledger-url", "http://127.0.0.1:1", "--ledger-token", "t"], "replica"),
    (["--ledger-url", "http://127.0.0.1:1", "--ledger-token", "t", "--replica", "noequals"],
     "NAME=http"),
    (["--ledger-url", "http://127.0.0.1:1", "--ledger-token", "t", "--replica", "a=http://h",
      "--soft-timeout-ms", "5000", "--stall-timeout-ms", "100"], "shorter"),
    (["--bogus", "1"], "unknown flag"),
    (["--listen"], "without its value"),
])
def test_bad_settings_stop_start_up_with_one_reason(argv, why):
    env = {"PATH": "/usr/bin:/bin"}
    p = subprocess.run([str(GATEWAY)] + argv, capture_output=True, text=True, env=env,
                       timeout=10)
    assert p.returncode == 2, p
    assert why in p.stderr.splitlines()[0], p.stderr


def test_port_in_use_is_an_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run([str(GATEWAY), "--listen", "127.0.0.1:%d" % port,
                            "--ledger-url", "http://127.0.0.1:1", "--ledger-token", "t",
                            "--replica", "a=http://127.0.0.1:%d" % free_port()],
                           capture_output=True, text=True, timeout=10)
    assert p.returncode == 1 and "cannot listen" in p.stderr, p
