"""make bench's gateway point: what ledger-gateway costs a streamed completion,
beside a plain reverse proxy (Debian's nginx) and a router a user would pick
instead (Portkey's open-source gateway, pinned in
tests/programs/ledger-gateway/portkey/), all in front of the same fast
engine (fast_engine.c), driven by the same load generator (streams.c).

At each concurrency of CONCURRENCY, one run of each configuration in turn
per repeat (the engine directly, ledger-gateway, nginx, Portkey), so that the
machine's drift falls on all alike; then, at KEPT_CONCURRENCY, ledger-gateway
in front of an engine whose answers are about 4 KiB, without and with an
Idempotency-Key on every request (a keyed request keeps its answer in
ledgerd). Medians of the repeats.

The time the gateway adds before the first byte is, per repeat, the
client's time to first byte through ledger-gateway minus its time to first
byte from the engine directly (streams.c defines it), p50 and p99 each;
beside it, the gateway's own histogram (ledger_gateway_added_first_byte_seconds,
from the engine's first byte to the client's).
"""

import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "bench"
OUT = ROOT / "build" / "bench"
PORTKEY = ROOT / "tests" / "programs" / "ledger-gateway" / "portkey"
CONCURRENCY = (1, 64)
KEPT_CONCURRENCY = 64
# The engine's tokens: 20 of 4 bytes (an answer of about 3.6 KiB of SSE), and
# for the kept-answer point 20 of 28 bytes (about 4 KiB of SSE, what is kept).
TOKEN_BYTES = 4
KEPT_TOKEN_BYTES = 28
CONFIGS = ("engine", "gateway", "nginx", "portkey")
KEY_SECRET = "bench-gateway-key-secret-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=30, proc=None, want=200):
    """Waits until GET @url answers @want; raises after @timeout s or if @proc exits."""
    deadline = time.time() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("%s: the process exited %s" % (url, proc.returncode))
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == want:
                    return
        except OSError:
            pass
        if time.time() > deadline:
            raise RuntimeError("%s did not answer %d within %d s" % (url, want, timeout))
        time.sleep(0.1)


def build_tools():
    """fast_engine and streams, compiled into build/bench/ when older than their source."""
    OUT.mkdir(parents=True, exist_ok=True)
    for name in ("fast_engine", "streams"):
        src, exe = HERE / (name + ".c"), OUT / name
        if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
            subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-pthread", "-o", str(exe),
                            str(src)], check=True)
    return OUT / "fast_engine", OUT / "streams"


class Proc:
    """A process of the point's, its output in build/bench/<name>.log; stop() ends it."""

    def __init__(self, name, argv, env=None, cwd=None):
        self.name = name
        self.log = open(OUT / (name + ".log"), "wb")
        self.proc = subprocess.Popen([str(a) for a in argv], env=env, cwd=cwd,
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def peak_rss_mib(self):
        for line in Path("/proc/%d/status" % self.proc.pid).read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_engine(exe, name, token_bytes):
    port = free_port()
    p = Proc(name, [exe, "--listen", "127.0.0.1:%d" % port, "--token-bytes", token_bytes])
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/health", proc=p.proc)
    return p, url


def start_gateway(name, ledger_url, token, engine_url):
    port = free_port()
    env = dict(os.environ, LEDGER_TOKEN=token, GATEWAY_KEY_SECRET=KEY_SECRET)
    for k in list(env):
        if k.startswith("OTEL_"):
            del env[k]
    gateway = Path(os.environ.get("LEDGERD", ROOT / "build" / "ledgerd")).parent / \
        "ledger-gateway"
    p = Proc(name, [gateway, "--listen", "127.0.0.1:%d" % port, "--ledger-url", ledger_url,
                    "--replica", "e1=" + engine_url], env=env)
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/readyz", proc=p.proc)
    return p, url


def start_nginx(engine_url):
    """Debian's nginx as a plain reverse proxy: its own prefix, config, pid and temp
    paths under build/bench/nginx/, in the foreground."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        sys.exit("bench: nginx is missing (make bench installs it)")
    d = OUT / "nginx"
    shutil.rmtree(d, ignore_errors=True)
    (d / "tmp").mkdir(parents=True)
    os.chmod(d / "tmp", 0o777)  # for the workers, who run as nobody when started by root
    port = free_port()
    upstream = engine_url.split("//", 1)[1]
    (d / "nginx.conf").write_text("""\
worker_processes auto;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %(d)s/tmp/body;
    proxy_temp_path %(d)s/tmp/proxy;
    fastcgi_temp_path %(d)s/tmp/fastcgi;
    uwsgi_temp_path %(d)s/tmp/uwsgi;
    scgi_temp_path %(d)s/tmp/scgi;
    upstream engine {
        server %(upstream)s;
        keepalive 128;
    }
    server {
        listen 127.0.0.1:%(port)d;
        location / {
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
""" % {"d": d, "upstream": upstream, "port": port})
    p = Proc("nginx", [nginx, "-p", "%s/" % d, "-e", d / "error.log", "-c", d / "nginx.conf",
                       "-g", "daemon off;"])
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/health", proc=p.proc)
    return p, url


def start_portkey():
    """Portkey's gateway from its pinned install (npm ci, once), on 127.0.0.1."""
    sys.path.insert(0, str(ROOT / "tests" / "sdk" / "js"))
    import js_build  # tests/sdk/js: the npm lock every install of the project's takes

    pinned = ("@portkey-ai/gateway", "hono", "@hono/node-server", "@hono/node-ws")
    with js_build.locked():
        if js_build.needs_install(PORTKEY, pinned):
            # --ignore-scripts: its postinstall, patch-package, has no patches to apply.
            js_build.run(js_build.NPM_CI + ["--ignore-scripts"], PORTKEY, 300)
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": str(OUT)}
    p = Proc("portkey", ["node", PORTKEY / "serve.mjs", port], env=env, cwd=PORTKEY)
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/", proc=p.proc)
    return p, url


def portkey_config(engine_url):
    """Portkey's config: the engine as an OpenAI-compatible provider, with retries."""
    return json.dumps({"provider": "openai", "api_key": "bench", "custom_host": engine_url + "/v1",
                       "retry": {"attempts": 2, "on_status_codes": [429, 500, 502, 503, 504]}})


def streams(exe, url, conc, seconds, headers=(), key_header=None):
    argv = [str(exe), "--url", url, "--concurrency", str(conc), "--seconds", str(seconds)]
    for h in headers:
        argv += ["--header", h]
    if key_header:
        argv += ["--key-header", key_header]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
    if r.returncode != 0:
        sys.exit("bench: streams against %s failed:\n%s" % (url, r.stderr[-2000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def ttfb_buckets(url):
    """[(upper bound s, cumulative count)] of the gateway's added-first-byte histogram."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return [(float(le), int(n)) for le, n in re.findall(
        r'^ledger_gateway_added_first_byte_seconds_bucket\{le="([^"]+)"\} (\d+)$', text, re.M)]


def measure(pg, ledgerd_cls, token, seconds, repeats, quantile, log):
    """The rows {"workload": "gateway", "concurrency": c, ...} of every c in CONCURRENCY."""
    engine_exe, streams_exe = build_tools()
    procs = []
    led = ledgerd_cls(pg.url)
    try:
        engine, engine_url = start_engine(engine_exe, "fast_engine", TOKEN_BYTES)
        procs.append(engine)
        big, big_url = start_engine(engine_exe, "fast_engine_4k", KEPT_TOKEN_BYTES)
        procs.append(big)
        gw, gw_url = start_gateway("ledger-gateway", led.url, token, engine_url)
        procs.append(gw)
        gw_big, gw_big_url = start_gateway("ledger-gateway-4k", led.url, token, big_url)
        procs.append(gw_big)
        ngx, ngx_url = start_nginx(engine_url)
        procs.append(ngx)
        pk, pk_url = start_portkey()
        procs.append(pk)
        targets = {
            "engine": (engine_url, ()),
            "gateway": (gw_url, ()),
            "nginx": (ngx_url, ()),
            "portkey": (pk_url, ("x-portkey-config: " + portkey_config(engine_url),)),
        }
        runs = {(c, name): [] for c in CONCURRENCY for name in CONFIGS}
        kept = {"keyless": [], "keyed": []}
        hist = {c: None for c in CONCURRENCY}
        # Each configuration once before the runs: connections, JIT and caches warm.
        for name in CONFIGS:
            url, headers = targets[name]
            streams(streams_exe, url, 8, 1, headers)
        streams(streams_exe, gw_big_url, 8, 1, (), "Idempotency-Key")
        pg.checkpoint()
        for i in range(repeats):
            for c in CONCURRENCY:
                for name in CONFIGS:
                    url, headers = targets[name]
                    before = ttfb_buckets(gw_url) if name == "gateway" else None
                    r = streams(streams_exe, url, c, seconds, headers)
                    if name == "gateway":
                        after = ttfb_buckets(gw_url)
                        delta = [(le, a - b) for (le, a), (_, b) in zip(after, before)]
                        hist[c] = delta if hist[c] is None else [
                            (le, n + m) for (le, n), (_, m) in zip(hist[c], delta)]
                        pg.checkpoint()
                    runs[(c, name)].append(r)
                    log("gateway point %d/%d at %2d: %-8s %8.1f streams/s  ttfb p50 %.3f ms "
                        "p99 %.3f ms  %d errors" % (i + 1, repeats, c, name, r["streams_per_s"],
                                                    r["ttfb_p50_us"] / 1000,
                                                    r["ttfb_p99_us"] / 1000, r["errors"]))
            for name, key in (("keyless", None), ("keyed", "Idempotency-Key")):
                r = streams(streams_exe, gw_big_url, KEPT_CONCURRENCY, seconds, (), key)
                kept[name].append(r)
                pg.checkpoint()
                log("gateway point %d/%d at %2d: 4 KiB answers, %-7s %8.1f streams/s  "
                    "%d errors, %d body bytes" % (i + 1, repeats, KEPT_CONCURRENCY, name,
                                                  r["streams_per_s"], r["errors"],
                                                  r["body_bytes_per_stream"]))
        rss = gw.peak_rss_mib()
    finally:
        for p in reversed(procs):
            p.stop()
        led.stop()
    med = lambda xs: round(statistics.median(xs), 3)  # noqa: E731
    rows = []
    for c in CONCURRENCY:
        row = {"workload": "gateway", "concurrency": c}
        for name in CONFIGS:
            rs = runs[(c, name)]
            row[name + "_streams_per_s"] = round(statistics.median(
                r["streams_per_s"] for r in rs), 1)
            row[name + "_ttfb_p50_ms"] = med([r["ttfb_p50_us"] / 1000 for r in rs])
            row[name + "_ttfb_p99_ms"] = med([r["ttfb_p99_us"] / 1000 for r in rs])
            row[name + "_total_p50_ms"] = med([r["total_p50_us"] / 1000 for r in rs])
            row[name + "_errors"] = sum(r["errors"] for r in rs)
            row[name + "_events_per_stream"] = min((r["events_min"] for r in rs), default=0)
            if name != "engine":
                # Per repeat, against the engine's run of the same repeat.
                for q in ("p50", "p99"):
                    row["%s_ttfb_added_%s_ms" % (name, q)] = med([
                        (r["ttfb_%s_us" % q] - e["ttfb_%s_us" % q]) / 1000
                        for r, e in zip(rs, runs[(c, "engine")])])
        zeros = [(le, 0) for le, _ in hist[c] or []]
        row["gateway_histogram_added_p50_ms"] = quantile(0.5, zeros, hist[c] or [])
        row["gateway_histogram_added_p99_ms"] = quantile(0.99, zeros, hist[c] or [])
        for name in ("nginx", "portkey", "engine"):
            row["gateway_x_" + name] = round(row["gateway_streams_per_s"] /
                                             max(row[name + "_streams_per_s"], 0.1), 3)
        row["gateway_rss_mib"] = round(rss, 1)
        if c == KEPT_CONCURRENCY:
            keyless = statistics.median(r["streams_per_s"] for r in kept["keyless"])
            keyed = statistics.median(r["streams_per_s"] for r in kept["keyed"])
            row["kept_answer_keyless_streams_per_s"] = round(keyless, 1)
            row["kept_answer_streams_per_s"] = round(keyed, 1)
            row["kept_answer_cost"] = round(1 - keyed / max(keyless, 0.1), 3)
            row["kept_answer_bytes"] = statistics.median(
                r["body_bytes_per_stream"] for r in kept["keyed"])
            row["kept_answer_errors"] = sum(r["errors"] for r in kept["keyed"] + kept["keyless"])
        log("gateway at %2d: gateway %.1f, nginx %.1f, Portkey %.1f, engine %.1f streams/s; "
            "ttfb added p50 %.3f ms, p99 %.3f ms (its histogram: %s, %s)" % (
                c, row["gateway_streams_per_s"], row["nginx_streams_per_s"],
                row["portkey_streams_per_s"], row["engine_streams_per_s"],
                row["gateway_ttfb_added_p50_ms"], row["gateway_ttfb_added_p99_ms"],
                row["gateway_histogram_added_p50_ms"], row["gateway_histogram_added_p99_ms"]))
        rows.append(row)
    return rows
