#!/usr/bin/env python3
"""make bench: ledgerd side by side with PostgreSQL's own limit, in one run.

Starts a PostgreSQL with fsync and synchronous_commit on, as in production,
and ledgerd on it; runs pgbench on the very SQL ledgerd issues (scripts made
by gen_pgbench.py from `ledgerd sql`), pgbench on the least SQL a durable
tool call, and a router's attempt, needs (tests/bench/minimal/, in a
database of its own on the same cluster), DBOS Transact doing the same job as a workflow of one step
(tests/bench/dbos/, its pinned npm package installed here on first use),
and wrk on ledgerd's HTTP API for the same work, last with ten million
settled calls and a million tombstones stored; ledger-gateway, nginx and
Portkey in front of one fast engine (gateway_point.py); repeats every
point and keeps medians; reads the WAL each tool call writes from
pg_stat_wal; prints a markdown table and the targets met or missed, writes
build/bench/results.json and draws build/bench/bench.png.
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
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gateway_point  # noqa: E402  (tests/bench/gateway_point.py: the gateway point)

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "bench"
OUT = ROOT / "build" / "bench"
LEDGERD = Path(os.environ.get("LEDGERD", ROOT / "build" / "ledgerd"))
PGBIN = Path("/usr/lib/postgresql/15/bin")
SECONDS = int(os.environ.get("BENCH_SECONDS", "5"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
CONCURRENCY = [int(c) for c in os.environ.get("BENCH_CONCURRENCY", "1,8,32,64").split(",")]
WORKLOADS = os.environ.get("BENCH_WORKLOADS",
                           "tool_call,tool_call_unbatched,replay,attempt_cycle,"
                           "minimal_attempt,dbos,tracing,gateway,large").split(",")
TRACING_CONCURRENCY = 32
REPLAY_CONCURRENCY = 64
BATCH = 16  # calls per transaction in tool_call_batch.sql (gen_pgbench.py)
MINIMAL = HERE / "minimal"
MINIMAL_BATCH_CLIENTS = 8  # where perfect batches of ten peak on 2 cores (minimal/README.md)
MINIMAL_VARS = {"ahash": "\\x9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                "result": '{"ok":true,"tool":"search_web","status":200}'}
REPLAY_KEYS = 20000
DBOS = HERE / "dbos"
# The large-table point: settled calls and tombstones stored before it runs.
LARGE_CALLS = int(os.environ.get("BENCH_LARGE_CALLS", "10000000"))
LARGE_TOMBSTONES = int(os.environ.get("BENCH_LARGE_TOMBSTONES", "1000000"))
LARGE_CHUNK = 1000000  # rows per INSERT, so that no transaction holds them all

SHA = None  # the fingerprint of the bench's args, computed below
ARGS = {"to": "ana@example.com", "subject": "Your refund"}
RESULT = ('{"message_id":"m-3f9c2a71","status":"sent","to":"ana@example.com",'
          '"provider":"smtp-relay-3","queued_at":"2026-11-30T01:29:43.123Z",'
          '"size_bytes":18234,"trace":"0123456789abcdef0123456789abcdef"}')


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fingerprint(obj):
    import hashlib
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class Postgres:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="ledgerd-bench-pg-"))
        self.root = os.getuid() == 0
        self.user = "postgres" if self.root else os.environ.get("USER", "postgres")
        if self.root:
            shutil.chown(self.dir, "postgres", "postgres")
        self.port = free_port()
        self.run(PGBIN / "initdb", "-D", self.dir / "data", "-U", self.user, "-A", "trust",
                 "-E", "UTF8", "--locale=C.UTF-8")
        with open(self.dir / "data" / "postgresql.conf", "a") as f:
            # Durable as in production: fsync and synchronous_commit stay on.
            f.write("listen_addresses = ''\nunix_socket_directories = '%s'\nport = %d\n"
                    "max_connections = 300\nshared_buffers = 256MB\n" % (self.dir, self.port))
        self.run(PGBIN / "pg_ctl", "-D", self.dir / "data", "-l", self.dir / "log", "-w", "-s",
                 "start")
        for db in ("ledger", "minimal"):
            self.run(PGBIN / "createdb", "-h", self.dir, "-p", self.port, "-U", self.user, db)
        self.url = "host=%s port=%d user=%s dbname=ledger" % (self.dir, self.port, self.user)
        self.sql((MINIMAL / "schema.sql").read_text(), db="minimal")

    def run(self, *argv, **kw):
        argv = [str(a) for a in argv]
        if self.root:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        r = subprocess.run(argv, capture_output=True, text=True, cwd=self.dir, **kw)
        if r.returncode != 0:
            sys.exit("bench: %s failed:\n%s" % (" ".join(argv[:6]), r.stderr.strip()[-2000:]))
        return r

    def sql(self, query, db="ledger"):
        return self.run(PGBIN / "psql", "-h", self.dir, "-p", self.port, "-U", self.user,
                        "-d", db, "-v", "ON_ERROR_STOP=1", "-qAtX", "-c", query).stdout

    def wal_bytes(self):
        """WAL the whole cluster has written (pg_stat_wal), to take differences of."""
        return int(self.sql("SELECT wal_bytes FROM pg_stat_wal"))

    def wal_fpi(self):
        """Full-page images written so far: the first change of a page after a checkpoint."""
        return int(self.sql("SELECT wal_fpi FROM pg_stat_wal"))

    def checkpoint(self):
        self.sql("CHECKPOINT")

    def cpu_seconds(self):
        """CPU time of the cluster's processes alive now (the postmaster's children)."""
        postmaster = int((self.dir / "data" / "postmaster.pid").read_text().split()[0])
        total = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                fields = Path("/proc/%s/stat" % pid).read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster or int(pid) == postmaster:
                total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def stop(self):
        try:
            self.run(PGBIN / "pg_ctl", "-D", self.dir / "data", "-m", "fast", "-w", "-s", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Ledgerd:
    def __init__(self, url, *extra, env=None):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [str(LEDGERD), "serve", "--database-url", url, "--listen",
             "127.0.0.1:%d" % self.port, "--log-level", "warn", "--gc-interval", "1d"]
            + list(extra), stderr=subprocess.DEVNULL, env=env)
        deadline = time.time() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("ledgerd did not start")
                time.sleep(0.05)
        self.url = "http://127.0.0.1:%d" % self.port

    def store_counters(self):
        """(commits of batches, calls they carried, round trips, batches per histogram
        bucket) so far, from ledgerd's /metrics."""
        import urllib.request
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        get = lambda name: int(re.search(r"^%s (\d+)$" % name, text, re.M).group(1))
        buckets = [(le, int(n)) for le, n in re.findall(
            r'^ledger_store_batch_calls_bucket\{le="([^"]+)"\} (\d+)$', text, re.M)]
        return (get("ledger_store_batches_total"), get("ledger_store_batched_calls_total"),
                get("ledger_store_round_trips_total"), buckets)

    def latency_buckets(self, route):
        """[(upper bound s, cumulative count)] of @route's request duration histogram."""
        import urllib.request
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        return [(float(le), int(n)) for le, n in re.findall(
            r'^ledger_http_request_duration_seconds_bucket\{route="%s",le="([^"]+)"\} (\d+)$'
            % route, text, re.M)]

    def cpu_seconds(self):
        fields = Path("/proc/%d/stat" % self.proc.pid).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def counter(self, name):
        """The value of the counter @name on /metrics (0 when it is not there)."""
        import urllib.request
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        m = re.search(r"^%s (\d+)$" % name, text, re.M)
        return int(m.group(1)) if m else 0

    def peak_rss_mib(self):
        for line in Path("/proc/%d/status" % self.proc.pid).read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def quantile(q, before, after):
    """The q-quantile in ms of what a histogram counted between two readings, interpolated
    within its bucket as Prometheus' histogram_quantile() does; None without samples."""
    counts = [(le, a - b) for (le, a), (_, b) in zip(after, before)]
    total = counts[-1][1] if counts else 0
    if total == 0:
        return None
    rank, lower, below = q * total, 0.0, 0
    for le, n in counts:
        if n >= rank:
            if le == float("inf"):
                return round(lower * 1000, 3)
            return round((lower + (le - lower) * (rank - below) / max(n - below, 1)) * 1000, 3)
        lower, below = le, n
    return None


def pgbench(pg, script, clients, variables, db="ledger"):
    """One pgbench run: (per second, p50 ms, p99 ms, WAL bytes, full-page images) of the
    script's transactions."""
    logdir = Path(tempfile.mkdtemp(prefix="ledgerd-bench-log-"))
    if pg.root:
        shutil.chown(logdir, "postgres", "postgres")
    argv = [PGBIN / "pgbench", "-n", "-M", "prepared", "-f", HERE / script, "-c", clients,
            "-j", min(clients, 2), "-T", SECONDS, "-h", pg.dir, "-p", pg.port, "-U", pg.user,
            "-l", "--log-prefix", logdir / "tx"]
    for k, v in variables.items():
        argv += ["-D", "%s=%s" % (k, v)]
    wal, fpi = pg.wal_bytes(), pg.wal_fpi()
    out = pg.run(*(argv + [db])).stdout
    wal, fpi = pg.wal_bytes() - wal, pg.wal_fpi() - fpi
    tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", out).group(1))
    lat = []
    for f in logdir.iterdir():
        for line in f.read_text().splitlines():
            lat.append(int(line.split()[2]) / 1000.0)  # microseconds
    shutil.rmtree(logdir, ignore_errors=True)
    lat.sort()
    return tps, lat[len(lat) // 2], lat[int(len(lat) * 0.99)], wal, fpi


def wrk(url, script, connections, env):
    """One wrk run: (responses per second, p50 ms, p99 ms, non-2xx count)."""
    full_env = dict(os.environ, BENCH_DIR=str(HERE), **env)
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", "%ds" % SECONDS,
                          "--latency", "-s", str(HERE / script), url],
                         capture_output=True, text=True, env=full_env, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def pct(p):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)\s*$" % p, out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, pct(50), pct(99), int(bad.group(1)) if bad else 0


def dbos_setup():
    """DBOS's pinned package (tests/bench/dbos/package-lock.json), installed once."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            sys.exit("bench: %s is missing (make bench installs it)" % tool)
    if not (DBOS / "node_modules" / "@dbos-inc" / "dbos-sdk" / "package.json").exists():
        log("installing DBOS Transact from tests/bench/dbos/package-lock.json")
        r = subprocess.run(["npm", "ci", "--prefix", str(DBOS), "--no-audit", "--no-fund"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("bench: npm ci in tests/bench/dbos failed:\n" + r.stderr[-2000:])


def dbos(pg, conc, run):
    """One DBOS run, a workflow of one step per tool call, in a database of its own on
    the bench's cluster: (workflows per second, p50 ms, p99 ms)."""
    db = "dbos_%d_%d" % (conc, run)
    pg.run(PGBIN / "createdb", "-h", pg.dir, "-p", pg.port, "-U", pg.user, db)
    url = "postgresql://%s@/%s?host=%s&port=%d" % (pg.user, db, pg.dir, pg.port)
    r = subprocess.run(["node", str(DBOS / "dbos_bench.mjs"), "--database-url", url,
                        "--seconds", str(SECONDS), "--concurrency", str(conc)],
                       capture_output=True, text=True, timeout=SECONDS * 10 + 120)
    if r.returncode != 0:
        sys.exit("bench: DBOS at %d failed:\n%s" % (conc, r.stderr[-2000:]))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["per_s"], out["p50_ms"], out["p99_ms"]


def fill_large(pg):
    """LARGE_CALLS settled calls (each with its request) and LARGE_TOMBSTONES tombstones
    of the bench's tenant, a day old, then VACUUM ANALYZE as autovacuum would have."""
    started = time.time()
    for lo in range(0, LARGE_CALLS, LARGE_CHUNK):
        hi = min(lo + LARGE_CHUNK, LARGE_CALLS)
        pg.sql("INSERT INTO requests (tenant, request_id, created_at) SELECT 'bench', "
               "'old-' || g, now() - interval '1 day' FROM generate_series(%d, %d) g"
               % (lo + 1, hi))
        pg.sql("INSERT INTO tool_calls (tenant, request_id, tool_call_id, tool, args_sha256, "
               "tool_dedupes, state, fencing_token, outcome, result, completed_token, "
               "completed_by, completed_at, created_at) SELECT 'bench', 'old-' || g, "
               "'call_01', 'send_email', '%s', false, 'succeeded', 1, 'succeeded', '%s', 1, "
               "'holder', now() - interval '1 day', now() - interval '1 day' "
               "FROM generate_series(%d, %d) g" % (SHA, RESULT, lo + 1, hi))
        log("large table: %d settled calls stored (%.0f s)" % (hi, time.time() - started))
    for lo in range(0, LARGE_TOMBSTONES, LARGE_CHUNK):
        hi = min(lo + LARGE_CHUNK, LARGE_TOMBSTONES)
        pg.sql("INSERT INTO tool_call_tombstones (tenant, request_id, tool_call_id, "
               "args_sha256, outcome, completed_at, expires_at) SELECT 'bench', "
               "'gone-' || g, 'call_01', '%s', 'succeeded', now() - interval '30 days', "
               "now() + interval '60 days' FROM generate_series(%d, %d) g"
               % (SHA, lo + 1, hi))
    pg.sql("VACUUM ANALYZE")
    pg.checkpoint()
    size = pg.sql("SELECT pg_size_pretty(pg_database_size('ledger'))").strip()
    log("large table: %d calls, %d tombstones, %s, in %.0f s"
        % (LARGE_CALLS, LARGE_TOMBSTONES, size, time.time() - started))
    return size


def median_of(runs):
    """Medians, field by field, of repeated runs."""
    return tuple(statistics.median(r[i] for r in runs) for i in range(len(runs[0])))


def main():
    global SHA
    SHA = fingerprint(ARGS)
    for tool in ("wrk", "gnuplot"):
        if shutil.which(tool) is None:
            sys.exit("bench: %s is missing (make bench installs it)" % tool)
    OUT.mkdir(parents=True, exist_ok=True)
    if "gateway" in WORKLOADS:
        for tool in ("cc", "node", "npm"):
            if shutil.which(tool) is None:
                sys.exit("bench: %s is missing (make bench installs it)" % tool)
    if "dbos" in WORKLOADS:
        dbos_setup()
    subprocess.run([sys.executable, str(HERE / "gen_pgbench.py"), "--ledgerd", str(LEDGERD),
                    "--check"], check=True)
    cores = os.cpu_count()
    log("%d cores; %d s per point, %d repeats, medians" % (cores, SECONDS, REPEATS))
    pg = Postgres()
    rows, meta, minimal, dbos_points = [], {}, {}, {}
    minimal_attempt = meta["minimal_attempt"] = {}
    try:
        subprocess.run([str(LEDGERD), "migrate", "--database-url", pg.url], check=True,
                       capture_output=True)
        tokens = {}
        for role in ("agent", "router"):
            tokens[role] = subprocess.run(
                [str(LEDGERD), "token", "create", "--tenant", "bench", "--role", role,
                 "--database-url", pg.url], check=True, capture_output=True,
                text=True).stdout.strip()
        # Completed calls for the replay workload, as ledgerd would have stored them.
        pg.sql("INSERT INTO requests (tenant, request_id) SELECT 'bench', g::text "
               "FROM generate_series(1, %d) g" % REPLAY_KEYS)
        pg.sql("INSERT INTO tool_calls (tenant, request_id, tool_call_id, tool, args_sha256, "
               "tool_dedupes, state, fencing_token, outcome, result, completed_token, "
               "completed_by, completed_at) SELECT 'bench', g::text, 'call_01', 'send_email', "
               "'%s', false, 'succeeded', 1, 'succeeded', '%s', 1, 'holder', now() "
               "FROM generate_series(1, %d) g" % (SHA, RESULT, REPLAY_KEYS))
        variables = {
            "tenant": "bench", "rtenant": "bench", "cid": "call_01", "tool": "send_email",
            "sha": SHA, "dedupes": "false", "lease": "30000", "token": "1",
            "outcome": "succeeded", "retryable": "false", "result": RESULT,
            "claimdetail": json.dumps({"lease_ms": 30000}),  # what the row keeps of it
            "completedetail": json.dumps({"outcome": "succeeded", "fencing_token": 1}),
            "replaykeys": str(REPLAY_KEYS), "aid": "a1", "replica": "gpu-a/3", "one": "1",
            "two": "2", "zero": "0", "tokens": "64", "false": "false", "true": "true",
            "open": "open", "live": "live", "finished": "finished", "completed": "completed",
            "createdtype": "attempt_created", "deltatype": "first_delta",
            "finishedtype": "attempt_finished", "statustype": "request_status",
            "createddetail": json.dumps({"epoch": 1, "replica": "gpu-a/3", "lease_ms": 30000}),
            "deltadetail": json.dumps({"delivered_output_tokens": 0}),
            "finisheddetail": json.dumps({"outcome": "completed",
                                          "delivered_output_tokens": 64}),
            "statusdetail": json.dumps({"status": "completed"}),
        }

        def point(workload, conc, base_script, wrk_script, token, per_op, extra=()):
            """Measures one row: the pgbench baseline, then ledgerd; medians of each."""
            base = median_of([pgbench(pg, base_script, conc, variables)
                              for _ in range(REPEATS)])
            pg.checkpoint()
            led = Ledgerd(pg.url, *extra)
            runs, calls, cpu, db_cpu, wal, fpi = [], 0, 0.0, 0.0, [], []
            counters_before = led.store_counters()
            routes = ("tool_call_claim", "tool_call_complete")
            hist_before = {r: led.latency_buckets(r) for r in routes}
            try:
                for i in range(REPEATS):
                    before, wal_before, fpi_before = led.cpu_seconds(), pg.wal_bytes(), pg.wal_fpi()
                    db_before = pg.cpu_seconds()
                    r = wrk(led.url, wrk_script, conc,
                            {"LEDGER_TOKEN": token, "BENCH_RUN": "%s-%d-%d-%d" % (
                                workload, conc, i, time.time()),
                             "BENCH_REPLAY_KEYS": str(REPLAY_KEYS)})
                    cpu += led.cpu_seconds() - before
                    db_cpu += pg.cpu_seconds() - db_before
                    # Per repeat: the first after the checkpoint writes most of the
                    # full-page images; the median is the steady state.
                    done = max(r[0] / per_op * SECONDS, 1)
                    wal.append((pg.wal_bytes() - wal_before) / done)
                    fpi.append((pg.wal_fpi() - fpi_before) / done)
                    calls += r[0] / per_op * SECONDS
                    if r[3]:
                        log("%s at %d: %d answers were not 2xx" % (workload, conc, r[3]))
                    runs.append(r)
                rss = led.peak_rss_mib()
                after = led.store_counters()
                hist_after = {r: led.latency_buckets(r) for r in routes}
                batches = [a - b for a, b in zip(after[:3], counters_before[:3])]
                # Batches per bucket of calls committed, not cumulative.
                cum = [(le, n - m) for (le, n), (_, m) in zip(after[3], counters_before[3])]
                sizes = {le: n - (cum[k - 1][1] if k else 0) for k, (le, n) in enumerate(cum)}
            finally:
                led.stop()
            pg.checkpoint()
            rps, p50, p99, _ = median_of(runs)
            extra_fields = {}
            if workload == "tool_call" and "batch_ceiling_per_s" in meta:
                extra_fields["batch_ceiling_per_s"] = meta["batch_ceiling_per_s"]
            row = {"workload": workload, "concurrency": conc,
                   "ledgerd_per_s": round(rps / per_op, 1), "baseline_per_s": round(base[0], 1),
                   "ratio": round(rps / per_op / base[0], 3), "p50_ms": round(p50, 3),
                   "p99_ms": round(p99, 3), "rss_mib": round(rss, 1),
                   "baseline_p50_ms": round(base[1], 3), "baseline_p99_ms": round(base[2], 3),
                   "cpu_s_per_1000": round(cpu / max(calls, 1) * 1000, 3),
                   "db_cpu_s_per_1000": round(db_cpu / max(calls, 1) * 1000, 3),
                   "round_trips_per_op": round(batches[2] / max(calls, 1), 3),
                   "batches_by_calls": sizes,
                   # In ledgerd, from a request's first byte to its reply queued.
                   "claim_p99_ms": quantile(0.99, hist_before[routes[0]], hist_after[routes[0]]),
                   "complete_p99_ms": quantile(0.99, hist_before[routes[1]],
                                               hist_after[routes[1]]),
                   "batched_share": round(batches[1] / max(calls * (per_op if
                                          workload.startswith("tool_call") else 1), 1), 3),
                   "wal_bytes_per_op": round(statistics.median(wal)),
                   "wal_fpi_per_op": round(statistics.median(fpi), 3),
                   "calls_per_batch": round(batches[1] / batches[0], 2) if batches[0] else None,
                   **extra_fields}
            if workload.startswith("tool_call") and conc in dbos_points:
                row["dbos_per_s"] = dbos_points[conc]["per_s"]
                row["ratio_dbos"] = round(row["ledgerd_per_s"] / dbos_points[conc]["per_s"], 2)
            if workload == "attempt_cycle" and conc in minimal_attempt:
                row["minimal_attempt_3tx_per_s"] = minimal_attempt[conc]["per_s"]
                row["ratio_minimal_attempt"] = round(
                    row["ledgerd_per_s"] / minimal_attempt[conc]["per_s"], 3)
                row["minimal_attempt_p50_ms"] = minimal_attempt[conc]["p50_ms"]
            if workload.startswith("tool_call") and conc in minimal:
                row["minimal_2tx_per_s"] = minimal[conc]["per_s"]
                row["ratio_minimal_2tx"] = round(row["ledgerd_per_s"] / minimal[conc]["per_s"], 3)
                row["minimal_p50_ms"] = minimal[conc]["p50_ms"]
                row["minimal_wal_bytes_per_call"] = minimal[conc]["wal_bytes_per_call"]
            log("%-20s %3d  ledgerd %8.1f/s  pgbench %8.1f/s  x%.2f  p99 %.2f ms"
                % (workload, conc, row["ledgerd_per_s"], row["baseline_per_s"], row["ratio"],
                   row["p99_ms"]))
            rows.append(row)

        if "tool_call" in WORKLOADS:
            # The least SQL a durable tool call needs, at the same points.
            for conc in CONCURRENCY:
                runs = [pgbench(pg, MINIMAL / "minimal_2tx.sql", conc, MINIMAL_VARS, "minimal")
                        for _ in range(REPEATS)]
                tps, p50, p99 = median_of(runs)[:3]
                wal = statistics.median(r[3] / max(r[0] * SECONDS, 1) for r in runs)
                minimal[conc] = {"per_s": round(tps, 1), "p50_ms": round(p50, 3),
                                 "p99_ms": round(p99, 3), "wal_bytes_per_call": round(wal)}
                log("minimal 2tx          %3d  %8.1f tool calls/s  p50 %.2f ms  p99 %.2f ms  "
                    "%d WAL bytes/call" % (conc, tps, p50, p99, wal))
            runs = [pgbench(pg, MINIMAL / "minimal_batch10.sql", MINIMAL_BATCH_CLIENTS,
                            MINIMAL_VARS, "minimal") for _ in range(REPEATS)]
            meta["minimal_batch10_per_s"] = round(median_of(runs)[0] * 10, 1)
            log("minimal batch10 at %d clients: %.1f tool calls/s"
                % (MINIMAL_BATCH_CLIENTS, meta["minimal_batch10_per_s"]))
            pg.checkpoint()
            # What batching can give at most here: the same SQL, 16 calls per
            # commit in one round trip, from as many clients as ledgerd has
            # store workers.
            usage = subprocess.run([str(LEDGERD), "help"], capture_output=True, text=True)
            workers = int(re.search(r"--workers .*\(default (\d+)\)", usage.stdout).group(1))
            ceiling = median_of([pgbench(pg, "tool_call_batch.sql", workers, variables)
                                 for _ in range(REPEATS)])[0] * BATCH
            log("batched SQL ceiling: %.1f tool calls/s (%d per commit, %d clients)"
                % (ceiling, BATCH, workers))
            meta["batch_ceiling_per_s"] = round(ceiling, 1)
            meta["batch_ceiling_clients"] = workers
        if "attempt_cycle" in WORKLOADS or "minimal_attempt" in WORKLOADS:
            # The least SQL a router's attempt needs: three commits per attempt.
            for conc in CONCURRENCY:
                runs = [pgbench(pg, MINIMAL / "minimal_attempt_3tx.sql", conc, {}, "minimal")
                        for _ in range(REPEATS)]
                tps, p50, p99 = median_of(runs)[:3]
                wal = statistics.median(r[3] / max(r[0] * SECONDS, 1) for r in runs)
                minimal_attempt[conc] = {"per_s": round(tps, 1), "p50_ms": round(p50, 3),
                                         "p99_ms": round(p99, 3),
                                         "wal_bytes_per_attempt": round(wal)}
                log("minimal attempt 3tx  %3d  %8.1f attempts/s  p50 %.2f ms  p99 %.2f ms  "
                    "%d WAL bytes/attempt" % (conc, tps, p50, p99, wal))
            pg.checkpoint()
        for conc in CONCURRENCY if "dbos" in WORKLOADS else ():
            # What a user would pick instead: a DBOS workflow of one step.
            runs = [dbos(pg, conc, i) for i in range(REPEATS)]
            tps, p50, p99 = median_of(runs)
            dbos_points[conc] = {"per_s": round(tps, 1), "p50_ms": round(p50, 3),
                                 "p99_ms": round(p99, 3)}
            log("DBOS one-step workflow %3d  %8.1f/s  p50 %.2f ms  p99 %.2f ms"
                % (conc, tps, p50, p99))
        if dbos_points:
            pg.checkpoint()
        for conc in CONCURRENCY if "tool_call" in WORKLOADS else ():
            point("tool_call", conc, "tool_call.sql", "tool_call.lua", tokens["agent"], 2)
        for conc in CONCURRENCY if "tool_call_unbatched" in WORKLOADS else ():
            point("tool_call_unbatched", conc, "tool_call.sql", "tool_call.lua", tokens["agent"],
                  2, ("--batch-max", "1"))
        if "replay" in WORKLOADS:
            point("replay", REPLAY_CONCURRENCY, "replay.sql", "replay.lua", tokens["agent"], 1)
        for conc in CONCURRENCY if "attempt_cycle" in WORKLOADS else ():
            point("attempt_cycle", conc, "attempt_cycle.sql", "attempt_cycle.lua",
                  tokens["router"], 3)
        if "tracing" in WORKLOADS:
            meta["tracing"] = tracing_point(pg, tokens["agent"])
        if "gateway" in WORKLOADS:
            # ledger-gateway, nginx and Portkey in front of the same fast engine.
            meta["gateway_rows"] = gateway_point.measure(pg, Ledgerd, tokens["router"], SECONDS,
                                                         REPEATS, quantile, log)
        if "large" in WORKLOADS and 32 in CONCURRENCY:
            # Last: the same tool call point over a store that is no longer small.
            meta["large_size"] = fill_large(pg)
            point("tool_call_large", 32, "tool_call.sql", "tool_call.lua", tokens["agent"], 2)
            small, large = find(rows, "tool_call", 32), find(rows, "tool_call_large", 32)
            if small and large:
                large["ratio_empty"] = round(large["ledgerd_per_s"] / small["ledgerd_per_s"], 3)
    finally:
        pg.stop()
    report(rows, cores, meta, minimal, dbos_points)


class SpanSink:
    """A collector that takes OTLP/HTTP exports and keeps only their count and
    bytes: what a collector that keeps up costs ledgerd, and no more."""

    def __init__(self):
        import http.server
        import threading
        sink = self
        self.posts, self.bytes = 0, 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(n)
                sink.posts += 1
                sink.bytes += n
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def tracing_point(pg, token):
    """tool_call at TRACING_CONCURRENCY with tracing off, on (every span sampled, sent to
    a sink that keeps up) and on with its collector down (nothing listens), one run of
    each in turn so that the machine's drift falls on all three alike; medians."""
    sink = SpanSink()
    down = free_port()
    base = dict(os.environ)
    for k in list(base):
        if k.startswith("OTEL_"):
            del base[k]
    configs = {
        "off": base,
        "on": dict(base, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:%d/v1/traces"
                   % sink.port, OTEL_TRACES_SAMPLER="always_on"),
        "down": dict(base, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:%d/v1/traces"
                     % down, OTEL_TRACES_SAMPLER="always_on"),
    }
    per_s = {name: [] for name in configs}
    spans = {name: {"exported": 0, "dropped": 0, "failed": 0} for name in configs}
    try:
        for i in range(REPEATS):
            for name, env in configs.items():
                led = Ledgerd(pg.url, env=env)
                try:
                    r = wrk(led.url, "tool_call.lua", TRACING_CONCURRENCY,
                            {"LEDGER_TOKEN": token, "BENCH_RUN": "tracing-%s-%d-%d" % (
                                name, i, time.time()),
                             "BENCH_REPLAY_KEYS": str(REPLAY_KEYS)})
                    per_s[name].append(r[0] / 2)
                    for k in spans[name]:
                        spans[name][k] += led.counter("ledger_trace_spans_%s_total" % k)
                finally:
                    led.stop()
                pg.checkpoint()
    finally:
        sink.stop()
    out = {name + "_per_s": round(statistics.median(v), 1) for name, v in per_s.items()}
    out["on_ratio"] = round(out["on_per_s"] / out["off_per_s"], 3)
    out["down_ratio"] = round(out["down_per_s"] / out["off_per_s"], 3)
    out["spans"] = spans
    out["sink_posts"], out["sink_bytes"] = sink.posts, sink.bytes
    log("tracing at %d: off %.1f/s, on %.1f/s (x%.3f), collector down %.1f/s (x%.3f); "
        "spans exported %d, dropped %d" % (
            TRACING_CONCURRENCY, out["off_per_s"], out["on_per_s"], out["on_ratio"],
            out["down_per_s"], out["down_ratio"], spans["on"]["exported"],
            spans["on"]["dropped"]))
    return out


def find(rows, workload, conc):
    return next((r for r in rows if r["workload"] == workload and r["concurrency"] == conc), None)


def targets(rows, meta, minimal, dbos_points):
    """The performance targets ledgerd is held to, each with its figure: (name, goal, value, met)."""
    out = []

    def target(name, goal, value, met):
        out.append({"target": name, "goal": goal, "value": value,
                    "met": None if value is None else bool(met)})

    tc32, un32, tc1 = find(rows, "tool_call", 32), find(rows, "tool_call_unbatched", 32), \
        find(rows, "tool_call", 1)
    replay = find(rows, "replay", REPLAY_CONCURRENCY)
    m32, m1 = minimal.get(32), minimal.get(1)
    r = tc32["ledgerd_per_s"] / m32["per_s"] if tc32 and m32 else None
    target("tool_call at 32, x minimal 2tx at 32", ">= 2.0", r and round(r, 2), r and r >= 2.0)
    r = un32["ledgerd_per_s"] / m32["per_s"] if un32 and m32 else None
    target("tool_call --batch-max 1 at 32, x minimal 2tx", ">= 0.6", r and round(r, 2),
           r and r >= 0.6)
    # One tool call is two requests to ledgerd (claim, complete) and one script
    # of two commits to the minimal SQL.
    r = 2 * tc1["p50_ms"] / m1["p50_ms"] if tc1 and m1 else None
    target("tool_call p50 at 1 (2 x a request's), x minimal 2tx p50", "<= 1.3",
           r and round(r, 2), r and r <= 1.3)
    v = tc32["p99_ms"] if tc32 else None
    target("tool_call request p99 at 32 (claims and completions together, wrk), ms", "< 10",
           v, v is not None and v < 10)
    v = tc32.get("claim_p99_ms") if tc32 else None
    target("claim p99 at 32 (in ledgerd, from its histogram), ms", "< 10", v,
           v is not None and v < 10)
    v = replay["ledgerd_per_s"] if replay else None
    target("replay at 64, per s", ">= 50000", v, v is not None and v >= 50000)
    v = replay["p99_ms"] if replay else None
    target("replay p99 at 64, ms", "< 5", v, v is not None and v < 5)
    v = max((row["rss_mib"] for row in rows), default=None)
    target("peak RSS of ledgerd, MiB", "< 64", v, v is not None and v < 64)
    d32 = dbos_points.get(32)
    r = tc32["ledgerd_per_s"] / d32["per_s"] if tc32 and d32 else None
    target("tool_call at 32, x DBOS Transact one-step workflow at 32", ">= 25",
           r and round(r, 1), r and r >= 25)
    tr = meta.get("tracing", {})
    r = tr.get("on_ratio")
    target("tool_call at %d with tracing on (every span sampled and exported), x off"
           % TRACING_CONCURRENCY, ">= 0.95", r, r is not None and r >= 0.95)
    r = tr.get("down_ratio")
    target("tool_call at %d with tracing on and its collector down, x off"
           % TRACING_CONCURRENCY, ">= 0.95", r, r is not None and r >= 0.95)
    ac32, ma32 = find(rows, "attempt_cycle", 32), meta.get("minimal_attempt", {}).get(32)
    r = ac32["ledgerd_per_s"] / ma32["per_s"] if ac32 and ma32 else None
    target("attempt_cycle at 32, x minimal 3-commit attempt SQL", ">= 1.0", r and round(r, 2),
           r and r >= 1.0)
    gws = {g["concurrency"]: g for g in meta.get("gateway_rows", [])}
    g1, g64 = gws.get(1), gws.get(64)
    v = g64["gateway_ttfb_added_p50_ms"] if g64 else None
    target("time ledger-gateway adds before the first byte, p50 at 64, ms", "<= 1.5", v,
           v is not None and v <= 1.5)
    v = g1["gateway_ttfb_added_p50_ms"] if g1 else None
    target("time ledger-gateway adds before the first byte, p50 at 1, ms", "<= 1.5", v,
           v is not None and v <= 1.5)
    v = g64["gateway_ttfb_added_p99_ms"] if g64 else None
    target("time ledger-gateway adds before the first byte, p99 at 64, ms", "<= 10", v,
           v is not None and v <= 10)
    v = g64["gateway_x_nginx"] if g64 else None
    target("streams/s through ledger-gateway at 64, x nginx (plain reverse proxy)", ">= 0.5",
           v, v is not None and v >= 0.5)
    v = g64["gateway_x_portkey"] if g64 else None
    target("streams/s through ledger-gateway at 64, x Portkey (with its retries)", ">= 2.0",
           v, v is not None and v >= 2.0)
    v = g64.get("kept_answer_cost") if g64 else None
    target("kept answers (about 4 KiB, a key on every request) at 64, share of streams/s "
           "lost", "<= 0.10", v, v is not None and v <= 0.10)
    large = find(rows, "tool_call_large", 32)
    r = large.get("ratio_empty") if large else None
    target("tool_call at 32 with %dM settled calls and %dM tombstones stored, x empty"
           % (LARGE_CALLS // 1000000, LARGE_TOMBSTONES // 1000000), ">= 0.8", r,
           r is not None and r >= 0.8)
    return out


def report(rows, cores, meta, minimal, dbos_points):
    goals = targets(rows, meta, minimal, dbos_points)
    summary = {"minimal_2tx_per_s": minimal.get(32, {}).get("per_s"),
               "minimal_batch10_per_s": meta.get("minimal_batch10_per_s"),
               "dbos_per_s": dbos_points.get(32, {}).get("per_s"),
               "minimal_attempt_3tx_per_s": meta.get("minimal_attempt", {}).get(32, {}).get(
                   "per_s")}
    (OUT / "results.json").write_text(json.dumps(
        {"cores": cores, "seconds": SECONDS, "repeats": REPEATS, **summary,
         "minimal_2tx": {str(c): m for c, m in minimal.items()},
         "dbos": {str(c): d for c, d in dbos_points.items()},
         "minimal_attempt_3tx": {str(c): m for c, m in meta.get("minimal_attempt", {}).items()},
         "large_calls": LARGE_CALLS, "large_tombstones": LARGE_TOMBSTONES,
         "large_size": meta.get("large_size"),
         "batch_ceiling_per_s": meta.get("batch_ceiling_per_s"),
         "tracing": meta.get("tracing"),
         "rows": rows + meta.get("gateway_rows", []), "targets": goals}, indent=2) + "\n")
    lines = ["## make bench: %d cores, %d s per point, median of %d" % (cores, SECONDS, REPEATS),
             "",
             "| workload | conc. | ledgerd /s | pgbench /s | ratio | p50 ms | p99 ms "
             "| pgbench p99 ms | CPU s / 1000 | peak RSS MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %s | %d | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %.3f | %.1f |" % (
            r["workload"], r["concurrency"], r["ledgerd_per_s"], r["baseline_per_s"],
            r["ratio"], r["p50_ms"], r["p99_ms"], r["baseline_p99_ms"], r["cpu_s_per_1000"],
            r["rss_mib"]))
    if "batch_ceiling_per_s" in meta:
        lines += ["", "Ceiling of batching here: pgbench running the same statements %d "
                  "claims and %d completions per commit, %d clients (ledgerd's store "
                  "workers): %.0f tool calls/s, %.2fx the per-call pgbench at 32."
                  % (BATCH, BATCH, meta["batch_ceiling_clients"], meta["batch_ceiling_per_s"],
                     meta["batch_ceiling_per_s"] / next(
                         (r["baseline_per_s"] for r in rows
                          if r["workload"] == "tool_call" and r["concurrency"] == 32),
                         meta["batch_ceiling_per_s"]))]
    lines += ["", "| per call | conc. | WAL bytes | DB CPU ms | ledgerd CPU ms "
              "| round trips | claim p99 ms | complete p99 ms | share batched "
              "| batches by calls committed |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append("| %s | %d | %d | %.3f | %.3f | %.2f | %s | %s | %.2f | %s |" % (
            r["workload"], r["concurrency"], r["wal_bytes_per_op"], r["db_cpu_s_per_1000"],
            r["cpu_s_per_1000"], r["round_trips_per_op"],
            "-" if r["claim_p99_ms"] is None else "%.2f" % r["claim_p99_ms"],
            "-" if r["complete_p99_ms"] is None else "%.2f" % r["complete_p99_ms"],
            r["batched_share"],
            " ".join("<=%s:%d" % (le, n) for le, n in r["batches_by_calls"].items() if n)
            or "-"))
    if dbos_points:
        lines += ["", "| DBOS one-step workflow | conc. | per s | p50 ms | p99 ms "
                  "| ledgerd tool_call /s | ledgerd x DBOS |", "|---|---:|---:|---:|---:|---:|---:|"]
        for c, d in sorted(dbos_points.items()):
            tc = find(rows, "tool_call", c)
            lines.append("| DBOS | %d | %.0f | %.2f | %.2f | %s | %s |" % (
                c, d["per_s"], d["p50_ms"], d["p99_ms"],
                "%.0f" % tc["ledgerd_per_s"] if tc else "-",
                "%.1f" % tc["ratio_dbos"] if tc and "ratio_dbos" in tc else "-"))
    if minimal:
        lines += ["", "| tool calls | conc. | ledgerd /s | minimal 2tx /s | ratio "
                  "| ledgerd p50 ms (a request) | minimal p50 ms (a call) "
                  "| WAL bytes/call ledgerd | minimal | calls per multi-call commit |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            if "minimal_2tx_per_s" in r:
                lines.append("| %s | %d | %.0f | %.0f | %.2f | %.2f | %.2f | %d (%.2f FPI) | %d | %s |" % (
                    r["workload"], r["concurrency"], r["ledgerd_per_s"], r["minimal_2tx_per_s"],
                    r["ratio_minimal_2tx"], r["p50_ms"], r["minimal_p50_ms"],
                    r["wal_bytes_per_op"], r["wal_fpi_per_op"], r["minimal_wal_bytes_per_call"],
                    "-" if r["calls_per_batch"] is None else "%.2f" % r["calls_per_batch"]))
        lines += ["", "Minimal SQL in perfect batches of ten, %d clients: %.0f tool calls/s."
                  % (MINIMAL_BATCH_CLIENTS, meta["minimal_batch10_per_s"])]
    if meta.get("minimal_attempt"):
        lines += ["", "| attempts | conc. | minimal 3-commit attempt SQL /s | p50 ms "
                  "| WAL bytes/attempt | ledgerd attempt_cycle /s | ledgerd x minimal |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for c, m in sorted(meta["minimal_attempt"].items()):
            ac = find(rows, "attempt_cycle", c)
            lines.append("| minimal_attempt_3tx | %d | %.0f | %.2f | %d | %s | %s |" % (
                c, m["per_s"], m["p50_ms"], m["wal_bytes_per_attempt"],
                "%.0f" % ac["ledgerd_per_s"] if ac else "-",
                "%.2f" % ac["ratio_minimal_attempt"] if ac else "-"))
    if meta.get("gateway_rows"):
        lines += ["", "| streams (20 tokens) | conc. | engine /s | ledger-gateway /s | nginx /s "
                  "| Portkey /s | gw x nginx | gw x Portkey | TTFB added p50 ms | p99 ms "
                  "| its histogram p50 ms | p99 ms | nginx added p50 ms | Portkey added p50 ms "
                  "| errors |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        fmt = lambda v: "-" if v is None else "%.3f" % v  # noqa: E731
        for g in meta["gateway_rows"]:
            lines.append("| gateway | %d | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %s | %s "
                         "| %s | %s | %s | %s | %d |" % (
                             g["concurrency"], g["engine_streams_per_s"],
                             g["gateway_streams_per_s"], g["nginx_streams_per_s"],
                             g["portkey_streams_per_s"], g["gateway_x_nginx"],
                             g["gateway_x_portkey"], fmt(g["gateway_ttfb_added_p50_ms"]),
                             fmt(g["gateway_ttfb_added_p99_ms"]),
                             fmt(g["gateway_histogram_added_p50_ms"]),
                             fmt(g["gateway_histogram_added_p99_ms"]),
                             fmt(g["nginx_ttfb_added_p50_ms"]),
                             fmt(g["portkey_ttfb_added_p50_ms"]),
                             sum(g[n + "_errors"] for n in gateway_point.CONFIGS)))
        for g in meta["gateway_rows"]:
            if "kept_answer_cost" in g:
                lines += ["", "Kept answers at %d (answers of %d bytes of SSE): ledger-gateway "
                          "%.0f streams/s without a key, %.0f with an Idempotency-Key on every "
                          "request (each keeps its answer in ledgerd): %.1f%% lost."
                          % (g["concurrency"], g["kept_answer_bytes"],
                             g["kept_answer_keyless_streams_per_s"],
                             g["kept_answer_streams_per_s"], 100 * g["kept_answer_cost"])]
    if meta.get("tracing"):
        tr = meta["tracing"]
        lines += ["", "| tracing, tool_call at %d | per s | x off | spans exported "
                  "| dropped | failed |" % TRACING_CONCURRENCY, "|---|---:|---:|---:|---:|---:|"]
        for name in ("off", "on", "down"):
            s = tr["spans"][name]
            lines.append("| %s | %.0f | %.3f | %d | %d | %d |" % (
                {"off": "off", "on": "on, a sink that keeps up",
                 "down": "on, collector down"}[name], tr[name + "_per_s"],
                tr[name + "_per_s"] / tr["off_per_s"], s["exported"], s["dropped"],
                s["failed"]))
    lines += ["", "| target | goal | figure | met |", "|---|---|---:|---|"]
    for g in goals:
        lines.append("| %s | %s | %s | %s |" % (
            g["target"], g["goal"], "not measured" if g["value"] is None else g["value"],
            "-" if g["met"] is None else "yes" if g["met"] else "NO"))
    table = "\n".join(lines) + "\n"
    (OUT / "results.md").write_text(table)
    print(table)
    plot(rows, dbos_points, meta.get("gateway_rows", []), meta.get("minimal_attempt"))
    print("results: %s, %s, %s" % (OUT / "results.json", OUT / "results.md",
                                   OUT / "bench.png"))


def plot(rows, dbos_points, gateway_rows=(), minimal_attempt=None):
    data = OUT / "plot.dat"
    series = []
    with open(data, "w") as f:
        for workload in ("tool_call", "tool_call_unbatched", "attempt_cycle"):
            pts = [r for r in rows if r["workload"] == workload]
            if not pts:
                continue
            f.write("# %s\n" % workload)
            for r in pts:
                f.write("%d %f %f %f %f\n" % (r["concurrency"], r["ledgerd_per_s"],
                                              r["baseline_per_s"], r["p99_ms"],
                                              r["baseline_p99_ms"]))
            f.write("\n\n")
            series.append(workload)
        pts = [r for r in rows if r["workload"] == "tool_call" and "minimal_2tx_per_s" in r]
        if pts:
            f.write("# minimal SQL, 2 commits per call\n")
            for r in pts:
                f.write("%d %f %f %f %f\n" % (r["concurrency"], r["minimal_2tx_per_s"],
                                              r["minimal_2tx_per_s"], r["minimal_p50_ms"],
                                              r["minimal_p50_ms"]))
            f.write("\n\n")
        if dbos_points:
            f.write("# DBOS Transact, a workflow of one step per call\n")
            for c, d in sorted(dbos_points.items()):
                f.write("%d %f %f %f %f\n" % (c, d["per_s"], d["per_s"], d["p99_ms"],
                                              d["p99_ms"]))
            f.write("\n\n")
        if minimal_attempt and "attempt_cycle" in series:
            f.write("# minimal SQL, an attempt in 3 commits\n")
            for c, m in sorted(minimal_attempt.items()):
                f.write("%d %f %f %f %f\n" % (c, m["per_s"], m["per_s"], m["p99_ms"],
                                              m["p99_ms"]))
            f.write("\n\n")
    panels = []
    if series:
        panels += ledgerd_panels(rows, dbos_points, data, series,
                                 minimal_attempt and "attempt_cycle" in series)
    if gateway_rows:
        panels += gateway_panels(gateway_rows)
    if not panels:
        return
    script = """
set terminal pngcairo size 1200,%d font ',10' noenhanced
set output '%s'
set multiplot layout %d,2
%s
unset multiplot
""" % (500 * ((len(panels) + 1) // 2), OUT / "bench.png", (len(panels) + 1) // 2,
       "\n".join(panels))
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def gateway_panels(gateway_rows):
    """Two panels: streams/s by proxy in front of the fast engine at each concurrency,
    and the time each adds before the first byte."""
    data = OUT / "plot_gateway.dat"
    with open(data, "w") as f:
        f.write("# conc engine gateway nginx portkey gw_p50 gw_p99 nginx_p50 portkey_p50\n")
        for g in gateway_rows:
            f.write("%d %f %f %f %f %f %f %f %f\n" % (
                g["concurrency"], g["engine_streams_per_s"], g["gateway_streams_per_s"],
                g["nginx_streams_per_s"], g["portkey_streams_per_s"],
                g["gateway_ttfb_added_p50_ms"], g["gateway_ttfb_added_p99_ms"],
                g["nginx_ttfb_added_p50_ms"], g["portkey_ttfb_added_p50_ms"]))
    common = ("unset logscale\nset style data histograms\nset style histogram clustered "
              "gap 1\nset style fill solid 0.8 border -1\nset xlabel 'concurrent streams'\n"
              "set key below\nset yrange [0:*]\n")
    tput = (common + "set title 'streams/s in front of the same fast engine (20 tokens)'\n"
            "set ylabel 'streams per second (log)'\nset logscale y\nset yrange [1:*]\n"
            "plot '%s' using 2:xtic(1) title 'engine directly', "
            "'' using 3 title 'ledger-gateway', '' using 4 title 'nginx', "
            "'' using 5 title 'Portkey'" % data)
    ttfb = (common + "set title 'time added before the first byte (minus the engine directly)'\n"
            "set ylabel 'ms'\nunset logscale\nset yrange [*:*]\nplot '%s' using 6:xtic(1) "
            "title 'ledger-gateway p50', '' using 7 title 'ledger-gateway p99', "
            "'' using 8 title 'nginx p50', '' using 9 title 'Portkey p50'" % data)
    return [tput, ttfb]


def ledgerd_panels(rows, dbos_points, data, series, has_minimal_attempt):
    """Throughput and p99 latency of ledgerd's workloads by concurrency."""
    tput = ", ".join(
        "'%s' index %d using 1:2 with linespoints title '%s (ledgerd)', "
        "'%s' index %d using 1:3 with linespoints dashtype 2 title '%s (pgbench)'"
        % (data, i, s, data, i, s) for i, s in enumerate(series))
    if any(r["workload"] == "tool_call" and "minimal_2tx_per_s" in r for r in rows):
        tput += (", '%s' index %d using 1:2 with linespoints dashtype 3 lw 2 "
                 "title 'minimal SQL tool call (2 commits)'" % (data, len(series)))
    minimal_index = len(series)
    has_minimal = any(r["workload"] == "tool_call" and "minimal_2tx_per_s" in r for r in rows)
    if dbos_points:
        dbos_index = minimal_index + (1 if has_minimal else 0)
        tput += (", '%s' index %d using 1:2 with linespoints dashtype 4 lw 2 "
                 "title 'DBOS Transact (one-step workflow)'" % (data, dbos_index))
    if has_minimal_attempt:
        tput += (", '%s' index %d using 1:2 with linespoints dashtype 5 lw 2 "
                 "title 'minimal SQL attempt (3 commits)'"
                 % (data, minimal_index + has_minimal + (1 if dbos_points else 0)))
    lat = ", ".join(
        "'%s' index %d using 1:4 with linespoints title '%s (ledgerd)', "
        "'%s' index %d using 1:5 with linespoints dashtype 2 title '%s (pgbench)'"
        % (data, i, s, data, i, s) for i, s in enumerate(series))
    if dbos_points:
        lat += (", '%s' index %d using 1:4 with linespoints dashtype 4 lw 2 "
                "title 'DBOS Transact (one-step workflow)'" % (data, dbos_index))
    return ["""set logscale x 2
set xlabel 'concurrent clients'
set key left top
set title 'throughput (tool calls or attempt cycles per second)'
set ylabel 'per second'
plot %s""" % tput, """set title 'p99 latency of a call'
set ylabel 'ms'
set logscale y
plot %s""" % lat]


if __name__ == "__main__":
    main()
