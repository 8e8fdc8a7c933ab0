#!/usr/bin/env python3
"""A randomized fault campaign against ledgerd, judged by checker.py.

The stack, all on loopback with ports chosen at run time:

  PostgreSQL n1 (primary) + n2 (synchronous standby)      pgpair.py
  proxy.py: pg-n1, pg-n2 (ledgerd -> PostgreSQL), L1, L2 (clients -> ledgerd)
  ledgerd-1, ledgerd-2: build/ledgerd serve on
      host=127.0.0.1,127.0.0.1 port=<pg-n1>,<pg-n2> target_session_attrs=read-write
  tools.py: the fencing-aware tool service
  agent-1..4: agent.py on the Python SDK (1, 2 careful: they fence themselves
      when their lease may have run out; 3, 4 careless), agent-5 on the C SDK
  router-1, router-2: router.py, 3 threads each: routed requests (attempts,
      heartbeats, deliver, finish, failover) and plain ones (no attempts,
      sometimes several workers racing for the same keys)
  resolver.py: an operator who settles some unknown outcomes

For CHAOS_SECONDS the load runs while the faults of schedule.plan(seed)
happen at their times (a fault that finds its target busy with another
waits for it). Then every fault is healed, the operator stops, the routers
are asked to finish what they started, the workers to finish their jobs
(zombies included), and checker.collect() reads the final state through
the API; checker.judge() decides. Everything lands in build/chaos/<time>-<seed>/.

    campaign.py [--seconds 60] [--seed N] [--folder DIR]
    CHAOS_LEDGERD_ARGS="--db-timeout 2s" campaign.py ...   (extra ledgerd flags)

Exit status 0 when the checker found nothing, 1 with anomalies, 2 when the
campaign itself could not run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import checker  # noqa: E402
import schedule  # noqa: E402
from pgpair import DBNAME, PgPair  # noqa: E402
from procs import Proc, rss_kb  # noqa: E402

LEDGERD = Path(os.environ.get("LEDGERD", ROOT / "build" / "ledgerd")).resolve()
C_AGENT = LEDGERD.parent / "tests" / "chaos_agent"
RUNS = ROOT / "build" / "chaos"
PY = sys.executable
TENANT = "chaos"
LEDGERDS = 2
PY_AGENTS = 4       # agent-1 .. agent-4
CAREFUL_AGENTS = 2  # of them, the first ones
ROUTERS = 2
ROUTER_THREADS = 3
CLAIM_LEASE_S = 3.0
LOCK_WAIT_S = 15        # a fault waits this long for its target, then is skipped
ROUTERS_QUIESCE_S = 75  # routers finish what they started within this
AGENTS_QUIESCE_S = 45   # ... and workers (zombies too) their jobs
DB_TIMEOUT_ARGS = ["--db-timeout", "2s"]  # every database wait of ledgerd's is bounded so
LEDGERD_ARGS = ["--unavailable-retry", "250ms"]


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}


def ledgerd_cmd(*args):
    return subprocess.run([str(LEDGERD)] + [str(a) for a in args], check=True,
                          capture_output=True, text=True, timeout=60,
                          env=clean_env()).stdout.strip()


def default_ledgerd_args():
    """ledgerd's extra flags: CHAOS_LEDGERD_ARGS, else --db-timeout 2s."""
    if "CHAOS_LEDGERD_ARGS" in os.environ:
        return shlex.split(os.environ["CHAOS_LEDGERD_ARGS"])
    return list(DB_TIMEOUT_ARGS)


def run_folder(seed):
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + "Z"
    for n in range(100):
        folder = RUNS / ("%s-%d%s" % (stamp, seed, "" if n == 0 else "-%d" % n))
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise RuntimeError("no free run folder")


def reproduce_command(seed, seconds):
    return "CHAOS_SEED=%d CHAOS_SECONDS=%d make chaos" % (seed, seconds)


class ProxyControl:
    """The control connection of proxy.py."""

    def __init__(self, address):
        self._sock = socket.create_connection(address, timeout=10)
        self._file = self._sock.makefile("rwb")
        self._lock = threading.Lock()

    def send(self, **cmd):
        with self._lock:
            self._file.write((json.dumps(cmd) + "\n").encode())
            self._file.flush()
            answer = json.loads(self._file.readline())
        if not answer.get("ok"):
            raise RuntimeError("proxy refused %s: %s" % (cmd, answer))
        return answer

    def close(self):
        self._sock.close()


class LedgerdSlot:
    """ledgerd-N: one process after another behind the proxy route LN."""

    def __init__(self, n, campaign):
        self.n = n
        self.name = "ledgerd-%d" % n
        self.campaign = campaign
        self.proc = None
        self.pids = []
        self.lock = threading.Lock()

    def start(self):
        c = self.campaign
        argv = [LEDGERD, "serve", "--database-url", c.database_url, "--listen", "127.0.0.1:0"]
        argv += LEDGERD_ARGS + c.ledgerd_args
        proc = Proc(argv, c.folder / ("%s.log" % self.name), env=clean_env())
        proc.wait_ready()
        self.proc = proc
        self.pids.append(proc.pid)
        c.proxy.send(route="L%d" % self.n, target="tcp:%s:%d" % proc.address)
        return proc

    def kill(self):
        if self.proc is not None:
            self.proc.kill()

    @property
    def direct_url(self):
        return self.proc.url


class Campaign:
    def __init__(self, seed, seconds, folder, ledgerd_args, out=print):
        self.seed = seed
        self.seconds = seconds
        self.folder = Path(folder)
        self.ledgerd_args = ledgerd_args
        self.out = out
        self.root = None
        self.pg = None
        self.proxy_proc = None
        self.proxy = None
        self.ledgerds = []
        self.tools = None
        self.agents = []   # (name, Proc)
        self.routers = []  # (name, Proc)
        self.resolver = None
        self.locks = {}
        self.faults = []
        self.fault_log = open(self.folder / "faults.jsonl", "a", buffering=1)
        self.fault_lock = threading.Lock()
        self.rss = []
        self.t0 = None
        self.stop_faults = threading.Event()
        self.stop_sampling = threading.Event()
        self.notes = []

    def note(self, text):
        self.notes.append(text)
        self.out("  [%s] %s" % (self.rel(), text))

    def rel(self):
        return "%7.2f" % (time.monotonic() - self.t0) if self.t0 else "  setup"

    # --- the stack -------------------------------------------------------------------

    def setup(self):
        if not LEDGERD.exists():
            raise RuntimeError("%s is missing: run make all first" % LEDGERD)
        if not C_AGENT.exists():
            subprocess.run(["make", "--no-print-directory", "-C", str(ROOT),
                            str(C_AGENT.relative_to(ROOT))], check=True, capture_output=True,
                           timeout=300)
        (self.folder / "clients").mkdir(exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="ledgerd-chaos-"))
        os.chmod(self.root, 0o755)
        self.pg = PgPair(self.root, log=self.note).start()
        primary_url = self.pg.primary.url(DBNAME)
        ledgerd_cmd("migrate", "--database-url", primary_url)
        self.tokens = {role: ledgerd_cmd("token", "create", "--tenant", TENANT, "--role", role,
                                         "--database-url", primary_url)
                       for role in ("agent", "router", "admin")}
        routes = ["pg-n1=unix:%s" % self.pg.socket(self.pg.primary),
                  "pg-n2=unix:%s" % self.pg.socket(self.pg.standby)]
        routes += ["L%d=none" % (i + 1) for i in range(LEDGERDS)]
        self.proxy_proc = Proc([PY, HERE / "proxy.py"] + ["--route=" + r for r in routes],
                               self.folder / "proxy.log")
        announce = self.proxy_proc.wait_ready()
        self.proxy = ProxyControl(self.proxy_proc.address)
        self.routes = announce["routes"]
        self.database_url = (
            "host=127.0.0.1,127.0.0.1 port=%d,%d user=%s dbname=%s "
            "target_session_attrs=read-write connect_timeout=2"
            % (self.routes["pg-n1"], self.routes["pg-n2"], self.pg.primary.user, DBNAME))
        for n in range(1, LEDGERDS + 1):
            slot = LedgerdSlot(n, self)
            slot.start()
            self.ledgerds.append(slot)
        self.ledger_urls = ["http://127.0.0.1:%d" % self.routes["L%d" % n]
                            for n in range(1, LEDGERDS + 1)]
        self.tools = Proc([PY, HERE / "tools.py", "--port", 0, "--log",
                           self.folder / "tools.jsonl", "--seed", self.seed],
                          self.folder / "tools.stderr")
        self.tools.wait_ready()
        ledger_flags = []
        for url in self.ledger_urls:
            ledger_flags += ["--ledger", url]
        for i in range(PY_AGENTS + 1):
            name = "agent-%d" % (i + 1)
            argv = [PY, HERE / "agent.py", "--name", name, "--token", self.tokens["agent"],
                    "--tools", self.tools.url, "--log", self.folder / "clients" /
                    ("%s.jsonl" % name), "--seed", self.seed * 100 + i] + ledger_flags
            if i == PY_AGENTS:
                argv += ["--kind", "c", "--c-agent", C_AGENT]
            elif i < CAREFUL_AGENTS:
                argv += ["--careful"]
            self.agents.append((name, Proc(argv, self.folder / ("%s.stderr" % name))))
        for _, proc in self.agents:
            proc.wait_ready()
        self.ledger_flags = ledger_flags

    def start_load(self):
        """The routers (the load begins as they start) and the operator."""
        ledger_flags = self.ledger_flags
        agent_flags = []
        for name, proc in self.agents:
            agent_flags += ["--agent", "%s=%s" % (name, proc.url)]
        for i in range(ROUTERS):
            name = "router-%d" % (i + 1)
            self.routers.append((name, Proc(
                [PY, HERE / "router.py", "--name", name, "--token", self.tokens["router"],
                 "--log", self.folder / "clients" / ("%s.jsonl" % name), "--seed", self.seed,
                 "--threads", ROUTER_THREADS] + ledger_flags + agent_flags,
                self.folder / ("%s.stderr" % name))))
        self.resolver = Proc([PY, HERE / "resolver.py", "--token", self.tokens["admin"],
                              "--tools", self.tools.url, "--log",
                              self.folder / "clients" / "operator.jsonl",
                              "--seed", self.seed] + ledger_flags,
                             self.folder / "resolver.stderr")
        for _, proc in self.routers:
            proc.wait_ready()
        self.resolver.wait_ready()

    def teardown(self):
        for proc in [self.resolver] + [p for _, p in self.routers] + \
                [p for _, p in self.agents] + [self.tools]:
            if proc is not None:
                try:
                    proc.stop(timeout_s=5)
                except Exception:  # noqa: BLE001 (teardown goes on)
                    pass
        for slot in self.ledgerds:
            if slot.proc is not None:
                try:
                    slot.proc.stop(timeout_s=10)
                except Exception:  # noqa: BLE001
                    pass
        if self.proxy is not None:
            self.proxy.close()
        if self.proxy_proc is not None:
            self.proxy_proc.stop(timeout_s=5)
        if self.pg is not None:
            self.pg.destroy()
            for node in self.pg.nodes:
                if node.log.exists():
                    shutil.copy(node.log, self.folder / ("pg-%s.log" % node.name))
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- faults ---------------------------------------------------------------------

    def lock(self, *names):
        """Takes the locks of @names (sorted, so two faults never deadlock); False on timeout."""
        taken = []
        deadline = time.monotonic() + LOCK_WAIT_S
        for name in sorted(names):
            lock = self.locks.setdefault(name, threading.Lock())
            if not lock.acquire(timeout=max(0, deadline - time.monotonic())):
                for t in taken:
                    t.release()
                return None
            taken.append(lock)
        return taken

    def record(self, fault):
        with self.fault_lock:
            self.fault_log.write(json.dumps(fault) + "\n")
            self.faults.append(fault)

    def agent(self, name):
        return dict(self.agents)[name]

    def router(self, name):
        return dict(self.routers)[name]

    def slot(self, name):
        return self.ledgerds[int(name.rsplit("-", 1)[1]) - 1]

    def holding_agent(self, rng, fallback):
        """An agent worker that holds a claim right now (and is not frozen already)."""
        deadline = time.monotonic() + 3
        names = [n for n, _ in self.agents]
        while time.monotonic() < deadline and not self.stop_faults.is_set():
            rng.shuffle(names)
            for name in names:
                if self.locks.get("agent:" + name, threading.Lock()).locked():
                    continue
                try:
                    host, port = self.agent(name).address
                    conn = http.client.HTTPConnection(host, port, timeout=0.3)
                    conn.request("GET", "/status")
                    status = json.loads(conn.getresponse().read())
                    conn.close()
                except (OSError, ValueError):
                    continue
                if status.get("holding", 0) > 0:
                    return name, True
            time.sleep(0.05)
        return fallback, False

    def run_fault(self, f):
        wait = self.t0 + f["at"] - time.monotonic()
        if wait > 0 and self.stop_faults.wait(wait):
            return
        rec = dict(f, steps=[])

        def step(what, **detail):
            rec["steps"].append(dict({"t": round(time.monotonic() - self.t0, 3), "step": what},
                                     **detail))

        try:
            self.do_fault(f, rec, step)
        except Exception as e:  # noqa: BLE001 (a failed fault is recorded, the run goes on)
            rec["error"] = "%s: %s" % (type(e).__name__, e)
            self.note("fault %d %s failed: %s\n%s" % (f["n"], f["kind"], rec["error"],
                                                       traceback.format_exc()))
        self.record(rec)
        self.out("  [%s] fault %d %s %s: %s" % (
            self.rel(), f["n"], f["kind"], rec.get("target"),
            rec.get("skipped") or rec.get("error") or "%.1f-%.1f s" % (
                rec.get("started", 0), rec.get("ended", 0))))

    def do_fault(self, f, rec, step):
        kind = f["kind"]
        locks = None
        try:
            if kind == "agent_stop":
                name, holding = self.holding_agent(random.Random(f["n"] * 7919 + self.seed),
                                                   f["fallback"])
                rec.update(target=name, holding=holding)
                locks = self.lock("agent:" + name)
            elif kind in ("ledgerd_kill", "ledgerd_stop"):
                locks = self.lock(f["target"])
            elif kind == "router_stop":
                locks = self.lock(f["target"])
            elif kind in ("answer_drop", "answer_delay", "conn_reset"):
                locks = self.lock(f["target"])
            elif kind == "pg_failover":
                locks = self.lock("database")
            elif kind == "db_outage":
                locks = self.lock("database", f["target"])
            elif kind == "db_pause":
                locks = self.lock("database")
            if locks is None:
                rec["skipped"] = "its target stayed busy for %d s" % LOCK_WAIT_S
                return
            if self.stop_faults.is_set():
                rec["skipped"] = "the load was over"
                return
            rec["started"] = round(time.monotonic() - self.t0, 3)
            getattr(self, "fault_" + kind)(f, rec, step)
            rec["ended"] = round(time.monotonic() - self.t0, 3)
        finally:
            for lock in locks or ():
                lock.release()

    def freeze(self, proc, seconds, step):
        proc.signal_group(signal.SIGSTOP)
        step("SIGSTOP", pid=proc.pid)
        self.stop_faults.wait(seconds)
        proc.signal_group(signal.SIGCONT)
        step("SIGCONT", pid=proc.pid)

    def fault_ledgerd_kill(self, f, rec, step):
        slot = self.slot(f["target"])
        pid = slot.proc.pid
        slot.kill()
        step("SIGKILL", pid=pid)
        time.sleep(f["down_s"])
        slot.start()
        step("restarted", pid=slot.proc.pid)

    def fault_ledgerd_stop(self, f, rec, step):
        self.freeze(self.slot(f["target"]).proc, f["stop_s"], step)

    def fault_agent_stop(self, f, rec, step):
        self.freeze(self.agent(rec["target"]), f["stop_s"], step)

    def fault_router_stop(self, f, rec, step):
        self.freeze(self.router(f["target"]), f["stop_s"], step)

    def fault_pg_failover(self, f, rec, step):
        if not self.pg.healthy:
            rec["skipped"] = "no synchronous standby to promote"
            return
        rec["target"] = self.pg.primary.name
        self.pg.failover(f["detect_s"], step)

    def proxy_window(self, route, fault, seconds, step):
        self.proxy.send(route=route, fault=fault)
        step("fault_on", route=route, fault=fault)
        self.stop_faults.wait(seconds)
        self.proxy.send(route=route, fault={})
        step("healed", route=route)

    def fault_answer_drop(self, f, rec, step):
        self.proxy_window(f["target"].split("-", 1)[1], {"drop_p": f["p"], "seed": f["seed"]},
                          f["window_s"], step)

    def fault_answer_delay(self, f, rec, step):
        self.proxy_window(f["target"].split("-", 1)[1], {"delay_ms": f["delay_ms"]},
                          f["window_s"], step)

    def fault_conn_reset(self, f, rec, step):
        self.proxy_window(f["target"].split("-", 1)[1], {"reset_p": f["p"], "seed": f["seed"]},
                          f["window_s"], step)

    def pg_routes(self, fault, step):
        for route in ("pg-n1", "pg-n2"):
            self.proxy.send(route=route, fault=fault)
        step("database_routes", fault=fault)

    def fault_db_outage(self, f, rec, step):
        started = time.monotonic()
        self.pg_routes({"cut": True}, step)
        try:
            time.sleep(f["kill_after_s"])
            slot = self.slot(f["target"])
            pid = slot.proc.pid
            slot.kill()
            step("SIGKILL", pid=pid)
            time.sleep(0.3)
            slot.start()
            step("restarted_without_database", pid=slot.proc.pid)
            self.stop_faults.wait(max(0, f["window_s"] - (time.monotonic() - started)))
        finally:
            self.pg_routes({}, step)

    def fault_db_pause(self, f, rec, step):
        self.pg_routes({"pause": True}, step)
        try:
            self.stop_faults.wait(f["window_s"])
        finally:
            self.pg_routes({}, step)

    def heal(self):
        """Every fault undone: nothing frozen, every ledgerd up, every route clean."""
        for route in self.routes:
            self.proxy.send(route=route, fault={})
        for _, proc in self.agents + self.routers:
            proc.signal_group(signal.SIGCONT)
        for slot in self.ledgerds:
            if slot.proc is None or not slot.proc.alive():
                slot.start()
                self.note("%s was down at the end: restarted" % slot.name)
            else:
                slot.proc.signal_group(signal.SIGCONT)

    # --- the run ------------------------------------------------------------------------

    def sample_rss(self):
        while not self.stop_sampling.wait(1.0):
            for slot in self.ledgerds:
                proc = slot.proc
                if proc is None:
                    continue
                kb = rss_kb(proc.pid)
                if kb is not None:
                    self.rss.append({"t": round(time.monotonic() - self.t0, 1),
                                     "ledgerd": slot.name, "pid": proc.pid, "kb": kb})

    def wait_agents_idle(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            busy = 0
            for name, proc in self.agents:
                try:
                    conn = http.client.HTTPConnection(*proc.address, timeout=1)
                    conn.request("GET", "/status")
                    busy += json.loads(conn.getresponse().read()).get("running", 0)
                    conn.close()
                except (OSError, ValueError):
                    busy += 1
            if busy == 0:
                return True
            time.sleep(0.25)
        return False

    def run(self):
        plan = schedule.plan(self.seed, self.seconds, ledgerds=LEDGERDS,
                             agents=PY_AGENTS + 1, routers=ROUTERS,
                             claim_lease_s=CLAIM_LEASE_S)
        (self.folder / "schedule.json").write_text(json.dumps(plan, indent=1))
        started = time.monotonic()
        self.setup()
        setup_s = time.monotonic() - started
        self.t0 = time.monotonic()
        sampler = threading.Thread(target=self.sample_rss, daemon=True)
        sampler.start()
        self.start_load()
        threads = [threading.Thread(target=self.run_fault, args=(f,), daemon=True)
                   for f in plan]
        for t in threads:
            t.start()
        time.sleep(max(0, self.t0 + self.seconds - time.monotonic()))
        self.stop_faults.set()
        load_s = time.monotonic() - self.t0
        for t in threads:
            t.join(timeout=120)
        self.heal()
        if not self.pg.healthy:
            self.note("the database pair is degraded at the end (a rebuild failed)")
        self.resolver.stop(timeout_s=10)
        quiesce_started = time.monotonic()
        for _, proc in self.routers:
            proc.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + ROUTERS_QUIESCE_S
        for name, proc in self.routers:
            try:
                proc.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.note("%s did not finish its requests within %d s: killed"
                          % (name, ROUTERS_QUIESCE_S))
            proc.stop(timeout_s=1)
        if not self.wait_agents_idle(AGENTS_QUIESCE_S):
            self.note("agent workers still busy after %d s" % AGENTS_QUIESCE_S)
        quiesce_s = time.monotonic() - quiesce_started
        self.stop_sampling.set()
        sampler.join(timeout=5)
        for _, proc in self.agents:
            proc.stop(timeout_s=5)
        self.tools.stop(timeout_s=5)
        checked = time.monotonic()
        final = checker.collect(self.folder, [s.direct_url for s in self.ledgerds],
                                self.tokens["router"])
        run = checker.load_run(self.folder)
        anomalies = checker.judge(run)
        check_s = time.monotonic() - checked
        (self.folder / "rss.jsonl").write_text("".join(json.dumps(r) + "\n" for r in self.rss))
        report = Report(self, plan, run, final, anomalies,
                        {"setup_s": setup_s, "load_s": load_s, "quiesce_s": quiesce_s,
                         "check_s": check_s})
        return report


class Report:
    def __init__(self, campaign, plan, run, final, anomalies, timings):
        self.seed = campaign.seed
        self.seconds = campaign.seconds
        self.folder = campaign.folder
        self.plan = plan
        self.faults = sorted(campaign.faults, key=lambda f: f["n"])
        self.anomalies = anomalies
        self.timings = timings
        self.ops = checker.operation_counts(run["clients"])
        self.tool = Counter(e["verdict"] for e in run["tool_log"])
        self.requests = Counter(v["request"]["status"] for v in final["requests"].values())
        self.calls = Counter(c.get("state") for c in final["tool_calls"].values())
        self.rss = campaign.rss
        self.notes = campaign.notes
        self.ledgerd_args = campaign.ledgerd_args
        self.failovers = campaign.pg.failovers if campaign.pg else 0
        self.acknowledged = len(final["replays"])
        self.walked = (len(final["requests"]), len(final["tool_calls"]),
                       sum(len(v.get("events", [])) for v in final["requests"].values()))
        self.router_events = Counter(e.get("event") for e in run["clients"]
                                     if e.get("kind") == "router")
        # Exchanges ledgerd answered, by client process (those on sdkwrap's transport).
        self.answered = Counter(e.get("proc") for e in run["clients"]
                                if e.get("kind") == "http" and e.get("status") is not None)
        self.final_errors = final.get("errors", [])

    def rss_lines(self):
        lines = []
        for name in sorted({r["ledgerd"] for r in self.rss}):
            series = [r for r in self.rss if r["ledgerd"] == name]
            kb = [r["kb"] for r in series]
            pids = list(dict.fromkeys(r["pid"] for r in series))
            lines.append("  %s: %d samples, %d process(es); RSS MiB min %.1f median %.1f max %.1f, "
                         "first %.1f last %.1f" % (
                             name, len(kb), len(pids), min(kb) / 1024,
                             statistics.median(kb) / 1024, max(kb) / 1024, kb[0] / 1024,
                             kb[-1] / 1024))
            if len(pids) > 1:
                # A restart starts small again: a leak shows within one process.
                longest = max(pids, key=lambda p: sum(r["pid"] == p for r in series))
                one = [r["kb"] for r in series if r["pid"] == longest]
                lines.append("    its longest-lived process (pid %d, %d s): first %.1f last %.1f "
                             "max %.1f" % (longest, len(one), one[0] / 1024, one[-1] / 1024,
                                           max(one) / 1024))
        return lines

    def text(self):
        out = []
        w = out.append
        w("chaos campaign: seed %d, %d s, ledgerd %s" % (
            self.seed, self.seconds, " ".join(self.ledgerd_args) or "(no extra flags)"))
        w("run folder: %s" % self.folder)
        w("timings: setup %.1f s, load %.1f s, quiesce %.1f s, check %.1f s" % (
            self.timings["setup_s"], self.timings["load_s"], self.timings["quiesce_s"],
            self.timings["check_s"]))
        w("faults (%d planned; kind, time, target):" % len(self.plan))
        for f in self.faults:
            params = {k: v for k, v in f.items() if k not in (
                "n", "at", "kind", "target", "steps", "started", "ended", "seed", "fallback",
                "skipped", "error")}
            status = ("skipped: " + f["skipped"]) if f.get("skipped") else \
                ("ERROR " + f["error"]) if f.get("error") else \
                "%.1f-%.1f s" % (f.get("started", 0), f.get("ended", 0))
            w("  %2d %6.1f s %-13s %-14s %s %s" % (f["n"], f["at"], f["kind"], f.get("target"),
                                                   status, json.dumps(params)))
        by_kind = Counter(f["kind"] for f in self.faults if not f.get("skipped")
                          and not f.get("error"))
        w("faults done by kind: %s; promotions: %d" % (
            ", ".join("%s %d" % kv for kv in sorted(by_kind.items())), self.failovers))
        w("operations (op: outcome count):")
        by_op = {}
        for (op, label), n in self.ops.items():
            by_op.setdefault(op, []).append((label, n))
        for op in sorted(by_op):
            total = sum(n for _, n in by_op[op])
            w("  %-16s %6d  %s" % (op, total, ", ".join(
                "%s %d" % (label, n) for label, n in sorted(by_op[op], key=lambda x: -x[1]))))
        w("tool service: %s" % ", ".join("%s %d" % kv for kv in sorted(self.tool.items())))
        w("final requests: %s" % ", ".join("%s %d" % kv for kv in sorted(self.requests.items())))
        w("final tool calls: %s" % ", ".join("%s %d" % kv for kv in sorted(self.calls.items())))
        w("routers: %s" % ", ".join("%s %d" % kv for kv in sorted(self.router_events.items())))
        w("checked: %d requests, %d tool calls, %d events walked; %d acknowledged completions "
          "claimed again through each ledgerd; %d tool executions against the histories" % (
              self.walked + (self.acknowledged, self.tool.get("executed", 0))))
        if self.final_errors:
            w("final state: %d requests could not be read: %s" % (
                len(self.final_errors), self.final_errors[:3]))
        w("ledgerd RSS, sampled every second:")
        out += self.rss_lines()
        for note in self.notes:
            w("note: %s" % note.splitlines()[0])
        kinds = Counter(a["kind"] for a in self.anomalies)
        w("anomalies: %d %s" % (len(self.anomalies), dict(kinds) if kinds else ""))
        for a in self.anomalies[:50]:
            w("  %s: %s" % (a["kind"], a["text"]))
        if len(self.anomalies) > 50:
            w("  ... %d more in report.json" % (len(self.anomalies) - 50))
        if self.anomalies:
            w("reproduce: %s" % reproduce_command(self.seed, self.seconds))
        return "\n".join(out)

    def save(self):
        (self.folder / "report.txt").write_text(self.text() + "\n")
        (self.folder / "report.json").write_text(json.dumps({
            "seed": self.seed, "seconds": self.seconds, "timings": self.timings,
            "faults": self.faults, "anomalies": self.anomalies,
            "operations": [{"op": op, "outcome": label, "count": n}
                           for (op, label), n in sorted(self.ops.items())],
            "tool": dict(self.tool), "requests": dict(self.requests),
            "tool_calls": dict(self.calls), "promotions": self.failovers,
            "acknowledged": self.acknowledged, "routers": dict(self.router_events),
        }, indent=1))


def run_campaign(seed, seconds, folder=None, ledgerd_args=None, out=print):
    """Runs one campaign; returns its Report (anomalies in .anomalies)."""
    folder = Path(folder) if folder else run_folder(seed)
    folder.mkdir(parents=True, exist_ok=True)
    ledgerd_args = default_ledgerd_args() if ledgerd_args is None else ledgerd_args
    (folder / "input.json").write_text(json.dumps({
        "seed": seed, "seconds": seconds, "ledgerd": str(LEDGERD), "ledgerd_args": ledgerd_args,
        "reproduce": reproduce_command(seed, seconds)}, indent=1))
    out("chaos: seed %d, %d s, run folder %s" % (seed, seconds, folder))
    campaign = Campaign(seed, seconds, folder, ledgerd_args, out=out)
    try:
        report = campaign.run()
    finally:
        campaign.teardown()
    report.save()
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int,
                        default=int(os.environ.get("CHAOS_SECONDS") or 300))
    parser.add_argument("--seed", type=int,
                        default=int(os.environ["CHAOS_SEED"]) if os.environ.get("CHAOS_SEED")
                        else random.SystemRandom().randrange(1, 1 << 31))
    parser.add_argument("--folder")
    args = parser.parse_args()
    # Stopped from outside (make interrupted, a CI timeout): the teardown
    # still runs, so no PostgreSQL, ledgerd or agent is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    try:
        report = run_campaign(args.seed, args.seconds, args.folder)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        print("the campaign could not run; reproduce: %s"
              % reproduce_command(args.seed, args.seconds))
        return 2
    print(report.text())
    return 1 if report.anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
