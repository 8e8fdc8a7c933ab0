#!/usr/bin/env python3
"""`make demo`: ledger-gateway in front of two real llama.cpp engines, each
killed once on purpose, and what ledgerd recorded of both requests.

It starts ledgerd over the embedded PostgreSQL (scripts/run.sh, with its
cluster under var/demo/ apart from `make run`'s), two engines serving the
tiny test model (tests/engines/llama: node-llama-cpp's llama.cpp on the
CPU, behind llama-server's HTTP API), and build/ledger-gateway in front of
them. Then it streams two requests:

1. the first engine kills itself while it reads the prompt, before any
   delta: the gateway reruns the request on the other engine, and the
   client gets one whole answer, all of it from that rerun;
2. the other engine kills itself right after its third delta was written:
   the client has text already, so nothing is rerun, and its stream ends
   with the error event upstream_decode_interrupted.

It prints both timelines (`ledgerctl show`) and the address of the
incident-review page, and keeps everything running until Ctrl-C or
SIGTERM, which stop the gateway, the engines, ledgerd and the cluster.
Logs: var/demo/*.log. LEDGER_RUN_DIR picks another folder than var/demo/,
LEDGER_LISTEN another address than a free port of 127.0.0.1.
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "engines" / "llama"))
sys.path.insert(0, str(ROOT / "tests" / "faults"))
from llama_engine import LlamaEngine, install, model  # noqa: E402
from stack import Process, clean_env, http_json, wait_until  # noqa: E402

BUILD = ROOT / "build"
RUN_DIR = Path(os.environ.get("LEDGER_RUN_DIR") or ROOT / "var" / "demo").resolve()
# A pause after each token, so that a stream is seen arriving.
DELAY_MS_PER_TOKEN = 60
MAX_TOKENS = 12
# The first engine dies in the first request's prefill; the second right
# after the third delta of the second request was written (token index 2).
DIES_AFTER_SEND = 2


def say(text=""):
    print(text, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stop(Exception):
    """SIGTERM, raised in the main thread as Ctrl-C raises KeyboardInterrupt."""


def on_sigterm(signum, frame):
    raise Stop()


class Ledgerd:
    """scripts/run.sh in a session of its own (Ctrl-C is the demo's to pass
    on): ledgerd over the embedded cluster, the cluster stopped after it."""

    def __init__(self):
        self.listen = os.environ.get("LEDGER_LISTEN") or "127.0.0.1:%d" % free_port()
        self.url = "http://" + self.listen
        self.log_path = RUN_DIR / "ledgerd.log"
        env = dict(clean_env(), LEDGERD=str(BUILD / "ledgerd"), LEDGER_LISTEN=self.listen,
                   LEDGER_RUN_DIR=str(RUN_DIR))
        if os.environ.get("LEDGER_DATABASE_URL"):
            env["LEDGER_DATABASE_URL"] = os.environ["LEDGER_DATABASE_URL"]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(ROOT / "scripts" / "run.sh")], env=env,
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=self._log, start_new_session=True)

    def wait_ready(self, timeout_s=120):
        def up():
            if self.proc.poll() is not None:
                raise RuntimeError("ledgerd did not start; see %s" % self.log_path)
            try:
                return http_json(self.url, path="/healthz", timeout_s=2)[0] == 200
            except OSError:
                return False
        if not wait_until(up, timeout_s, 0.1):
            raise RuntimeError("ledgerd did not answer within %ds; see %s"
                               % (timeout_s, self.log_path))
        self.admin_token = (RUN_DIR / "dev-token").read_text().strip()
        self.router_token = self.token("router")

    def token(self, role):
        """The demo's token of @role for the tenant dev, minted once and kept in
        RUN_DIR (stored again, as run.sh does, should the database be another)."""
        path = RUN_DIR / ("%s-token" % role)
        env = dict(clean_env(),
                   LEDGER_DATABASE_URL=(RUN_DIR / "database-url").read_text().strip())
        argv = [str(BUILD / "ledgerd"), "token", "create", "--tenant", "dev", "--role", role]
        if path.exists():
            kept = path.read_text().strip()
            done = subprocess.run(argv + ["--from-env", "KEPT"], env=dict(env, KEPT=kept),
                                  capture_output=True, text=True)
            if done.returncode == 0:
                return kept
        minted = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        path.write_text(minted.stdout)
        return minted.stdout.strip()

    def stop(self):
        """SIGINT as Ctrl-C would: ledgerd drains, then run.sh stops the cluster."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def stream(url, request):
    """Streams one completion through the gateway, printing each delta as it
    arrives; returns (request id, [texts], the last event's object, done)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    texts, last, done = [], None, False
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(request),
                     {"Content-Type": "application/json", "Accept": "text/event-stream"})
        response = conn.getresponse()
        rid = response.getheader("x-request-id")
        say("  client: HTTP %d, x-request-id: %s" % (response.status, rid))
        sys.stdout.write("  client: ")
        for raw in response:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            last = json.loads(data)
            for choice in last.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    texts.append(text)
                    sys.stdout.write(text)
                    sys.stdout.flush()
        sys.stdout.write("\n")
        return rid, texts, last, done
    finally:
        conn.close()


def show(ledgerd, rid):
    """ledgerctl show of @rid, indented."""
    done = subprocess.run([str(BUILD / "ledgerctl"), "--url", ledgerd.url, "show", rid],
                          env=dict(clean_env(), LEDGER_TOKEN=ledgerd.admin_token),
                          capture_output=True, text=True)
    say("  ledgerctl show %s:" % rid)
    for line in (done.stdout or done.stderr).splitlines():
        say("    " + line)


def settled(ledgerd, rid):
    """Waits until ledgerd's request is no longer open (the gateway's last
    write follows the client's last byte)."""
    def closed():
        status, page = http_json(ledgerd.url, path="/v1/requests/" + urllib.parse.quote(rid, safe=""),
                                 token=ledgerd.admin_token)
        return status == 200 and page["request"]["status"] != "open"
    wait_until(closed, 15, 0.05)


def request(n):
    return {"model": "tiny-llama", "max_tokens": MAX_TOKENS, "stream": True,
            "messages": [{"role": "user", "content": "Open ticket %d for the fault drill." % n}]}


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    ledgerd, engines, gateway = None, [], None
    try:
        say("demo: installing the engine (node-llama-cpp, pinned) on first use, "
            "writing the model")
        install()
        path, sha256 = model()
        ledgerd = Ledgerd()
        for i in (1, 2):
            engines.append(LlamaEngine(RUN_DIR / ("llama-%d.log" % i), "--seed", str(100 + i),
                                       "--delay-ms-per-token", str(DELAY_MS_PER_TOKEN)))
        ledgerd.wait_ready()
        say("demo: ledgerd on %s, its PostgreSQL under %s/pg (log: %s)"
            % (ledgerd.url, RUN_DIR, ledgerd.log_path))
        for i, e in enumerate(engines, 1):
            say("demo: llama-%d on %s, pid %d: llama.cpp serving %s (sha256 %s...)"
                % (i, e.url, e.pid, path.name, sha256[:12]))
        argv = [BUILD / "ledger-gateway", "--listen", "127.0.0.1:0",
                "--ledger-url", ledgerd.url, "--probe-interval-ms", 500]
        for i, e in enumerate(engines, 1):
            argv += ["--replica", "llama-%d=%s" % (i, e.url)]
        gateway = Process(argv, RUN_DIR / "gateway.log",
                          env=dict(clean_env(), LEDGER_TOKEN=ledgerd.router_token)).wait_ready()

        def ready():
            status, page = http_json(gateway.url, path="/readyz")
            return status == 200 and all(r["state"] == "healthy" for r in page["replicas"])
        if not wait_until(ready, 30, 0.1):
            raise RuntimeError("the gateway did not see both engines healthy: %s"
                               % (http_json(gateway.url, path="/readyz"),))
        say("demo: ledger-gateway on %s in front of llama-1 and llama-2, both healthy"
            % gateway.url)

        # A fresh gateway's first request goes to the first replica (ties go
        # round robin from it); the rerun, to the other.
        say("\n1. llama-1 dies reading the prompt, before the first delta")
        engines[0].set_fault("prefill")
        rid1, texts, last, done = stream(gateway.url, request(1))
        say("  client: %d deltas and [DONE]: one whole answer%s"
            % (len(texts), "" if done else " (NOT: the stream did not end well)"))
        settled(ledgerd, rid1)
        show(ledgerd, rid1)

        say("\n2. llama-2 dies right after its third delta was written")
        engines[1].set_fault("after_send", DIES_AFTER_SEND)
        rid2, texts, last, done = stream(gateway.url, request(2))
        error = (last or {}).get("error") or {}
        say("  client: %d deltas, then the error event %s: %s"
            % (len(texts), error.get("code"), error.get("message")))
        settled(ledgerd, rid2)
        show(ledgerd, rid2)

        say("\ndemo: the incident-review page: %s/ui/ (its token: %s, in %s)"
            % (ledgerd.url, ledgerd.admin_token, RUN_DIR / "dev-token"))
        say("demo: running until Ctrl-C")
        while True:
            time.sleep(3600)
    except (KeyboardInterrupt, Stop):
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        say("\ndemo: stopping")
        if gateway is not None:
            gateway.stop()
        for e in engines:
            e.stop()
        if ledgerd is not None:
            ledgerd.stop()
        say("demo: stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
