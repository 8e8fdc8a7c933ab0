"""make bench's gateway tools work (tests/bench/fast_engine.c, streams.c): the
fast engine answers a stream in OpenAI's format and looks like llama.cpp to
the gateway's probes; the load generator counts each stream's events, times
them, and counts a broken stream as an error. make bench itself is no test
(its figures depend on the machine): this only checks that what it measures
with is sound, in a few seconds.
"""

import http.client
import http.server
import json
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "tests" / "bench"
sys.path.insert(0, str(ROOT / "tests" / "faults"))

from stack import GATEWAY, Process, clean_env, wait_until  # noqa: E402

TOKEN_BYTES = 7


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    """fast_engine and streams, compiled as make bench compiles them."""
    d = tmp_path_factory.mktemp("bench-tools")
    out = {}
    for name in ("fast_engine", "streams"):
        out[name] = d / name
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o",
                        str(out[name]), str(BENCH / (name + ".c"))], check=True, timeout=60)
    return out


@pytest.fixture(scope="module")
def engine(tools):
    p = subprocess.Popen([str(tools["fast_engine"]), "--listen", "127.0.0.1:0",
                          "--token-bytes", str(TOKEN_BYTES)], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("listening 127.0.0.1:"), line
    yield "http://" + line.split()[1]
    p.terminate()
    p.wait(timeout=10)


def streams(tools, url, *args):
    r = subprocess.run([str(tools["streams"]), "--url", url, "--seconds", "0.5", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def events_of(body):
    return [e[len("data: "):] for e in body.split("\n\n") if e.startswith("data: ")]


def test_the_engine_streams_twenty_tokens_in_openai_format_on_one_connection(engine):
    host, port = engine.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for _ in range(2):  # the second on the same connection: keep-alive
            conn.request("POST", "/v1/chat/completions", headers={
                "Content-Type": "application/json"}, body=json.dumps(
                    {"model": "any", "messages": [{"role": "user", "content": "hi"}],
                     "stream": True}))
            r = conn.getresponse()
            assert r.status == 200
            assert r.getheader("Content-Type") == "text/event-stream"
            assert r.getheader("Transfer-Encoding") == "chunked"
            events = events_of(r.read().decode())
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            assert len(chunks) == 21
            assert all(c["object"] == "chat.completion.chunk" for c in chunks)
            assert [c["choices"][0]["delta"]["content"] for c in chunks[:20]] == \
                ["x" * TOKEN_BYTES] * 20
            assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
            assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 20 + ["stop"]
        conn.request("POST", "/v1/chat/completions", body=b'{"model":"any","messages":[]}',
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        whole = json.loads(r.read())
        assert r.status == 200 and whole["object"] == "chat.completion"
        assert whole["choices"][0]["message"]["content"] == "x" * TOKEN_BYTES * 20
    finally:
        conn.close()


def test_streams_counts_each_streams_events_and_times_them(tools, engine):
    out = streams(tools, engine, "--concurrency", "4")
    assert out["errors"] == 0, out
    assert out["streams"] > 10 and out["streams_per_s"] == out["streams"] * 2, out
    assert out["events_min"] == out["events_max"] == 21, out  # 20 tokens and the finish
    assert 0 <= out["ttfb_p50_us"] <= out["total_p50_us"] <= out["total_p99_us"], out


class _Broken(http.server.BaseHTTPRequestHandler):
    """Streams two events and ends the stream without [DONE]."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'data: {"choices":[]}\n\ndata: {"choices":[]}\n\n'
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_streams_counts_a_stream_without_done_as_an_error(tools):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = streams(tools, "http://127.0.0.1:%d" % server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    assert out["streams"] == 0 and out["errors"] > 0, out


def test_the_gateway_takes_the_engine_as_llama_cpp_and_streams_keyed_requests(
        tools, engine, service, tmp_path):
    gateway = None
    try:
        env = clean_env()
        env["GATEWAY_KEY_SECRET"] = "bench-tools-secret-0123456789"
        gateway = Process([GATEWAY, "--listen", "127.0.0.1:0", "--ledger-url",
                           "http://%s:%d" % (service.ledgerd.host, service.ledgerd.port),
                           "--ledger-token", service.token("router"), "--replica",
                           "e1=" + engine, "--probe-interval-ms", "200"],
                          tmp_path / "gateway.log", env=env).wait_ready()

        def ready():
            try:
                with urllib.request.urlopen(gateway.url + "/readyz", timeout=2) as r:
                    return json.loads(r.read())
            except OSError:
                return None
        readiness = wait_until(ready, 10)
        assert readiness is not None, "the gateway never took the engine as a replica"
        assert "llama" in json.dumps(readiness["replicas"]), readiness
        out = streams(tools, gateway.url, "--concurrency", "2", "--key-header",
                      "Idempotency-Key")
        assert out["errors"] == 0, out
        assert out["streams"] > 0 and out["events_min"] == out["events_max"] == 21, out
        text = urllib.request.urlopen(gateway.url + "/metrics", timeout=5).read().decode()
        counted = int(next(line.split()[1] for line in text.splitlines() if line.startswith(
            "ledger_gateway_added_first_byte_seconds_count")))
        assert counted >= out["streams"], (counted, out)
        # Every key was new: none of the requests was a repeat the gateway answered
        # from an earlier one (which would measure replays, not kept answers).
        replays = sum(int(line.split()[1]) for line in text.splitlines()
                      if line.startswith("ledger_gateway_replays_total{"))
        assert replays == 0, text
    finally:
        if gateway is not None:
            gateway.stop()
