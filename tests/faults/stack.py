"""The throwaway stack the fault scenarios run on, and its processes.

A `Stack` is a PostgreSQL cluster in a temporary directory and one ledgerd
on it, shared by many runs. A `Run` adds what one scenario run needs fresh,
because the scenario kills or freezes it: a tenant of its own (so runs never
spend each other's retry budget), the fake tool service, the fake replicas
and the gateway in front of them. Every process announces its address as a
JSON line with an "address" key on stderr; the rest of its stderr goes to a
log file in the run's folder.

Standard library only, so the `scenario` command runs with any Python 3.11.
"""

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the shared PostgreSQL cluster

from pgcluster import Cluster  # noqa: E402
LEDGERD = Path(os.environ.get("LEDGERD", ROOT / "build" / "ledgerd")).resolve()
GATEWAY = Path(os.environ.get("GATEWAY", LEDGERD.parent / "ledger-gateway")).resolve()
RUNS = ROOT / "build" / "faults"

# The pool-wide retry budget and per-request attempts the stack's ledgerd
# runs with (its --policy file); checks.py derives the allowance from it.
POLICY = {"max_attempts": 2, "percent_of_attempts": 20, "window_s": 10, "min_retries": 3}
POLICY_YAML = """\
on_upstream_failure:
  before_first_delta:
    max_attempts: {max_attempts}
pool_retry_budget:
  percent_of_attempts: {percent_of_attempts}
  window_s: {window_s}
  min_retries: {min_retries}
"""

START_TIMEOUT_S = 15


@dataclass(frozen=True)
class Timing:
    """The gateway's clocks: short, so a scenario that waits for one stays short, yet
    with room for a loaded machine: a prefill between the two timeouts must not
    look stalled, and a heartbeat must not miss a lease."""

    lease_ms: int = 3000
    soft_timeout_ms: int = 400
    stall_timeout_ms: int = 2500


def wait_until(predicate, timeout_s, interval_s=0.02):
    """Polls @predicate until it returns something true; returns that, or None at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval_s)


def run_folder(name):
    """A new folder build/faults/<name>-<timestamp>/ for one run's record."""
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + "%03dZ" % (now % 1 * 1000)
    for n in range(100):
        folder = RUNS / ("%s-%s%s" % (name, stamp, "" if n == 0 else "-%d" % n))
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise RuntimeError("no free run folder for %s" % name)


def read_json_lines(path):
    """The JSON lines of a log file written by another process (a torn last line is left out)."""
    entries = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return entries
    for line in text.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


class Process:
    """A child process that announces where it listens on stderr, as ledgerd does."""

    def __init__(self, argv, log_path, env=None):
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.host = None
        self.port = None
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        self._pump = None

    @property
    def pid(self):
        return self.proc.pid

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    def wait_ready(self):
        """Reads stderr until the line with "address"; then copies the rest to the log."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("%s exited (%s) before it listened; see %s"
                                   % (self.argv[0], self.proc.wait(), self.log_path))
            self._log.write(line)
            self._log.flush()
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "address" in entry:
                self.host, port = entry["address"].rsplit(":", 1)
                self.port = int(port)
                break
        else:
            raise RuntimeError("%s did not listen within %ds" % (self.argv[0], START_TIMEOUT_S))
        self._pump = threading.Thread(target=self._copy_log, daemon=True)
        self._pump.start()
        return self

    def _copy_log(self):
        for line in self.proc.stderr:
            self._log.write(line)
            self._log.flush()

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)

    def state(self):
        """The kernel's one-letter state of the process (T: stopped), None once it is gone."""
        try:
            stat = Path("/proc/%d/stat" % self.pid).read_text()
        except FileNotFoundError:
            return None
        return stat.rsplit(")", 1)[1].split()[0]

    def stop(self, timeout_s=10):
        """Ends the process (SIGCONT first, in case it was frozen); returns its exit status."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            self.proc.send_signal(signal.SIGCONT)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        rc = self.proc.wait()
        if self._pump is not None:
            self._pump.join(timeout=5)
        self.proc.stderr.close()
        self._log.close()
        return rc


def http_json(url, method="GET", path="/", body=None, token=None, timeout_s=10):
    """One JSON exchange; returns (status, parsed body or None)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = "Bearer " + token
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=headers)
        response = conn.getresponse()
        text = response.read()
        try:
            return response.status, json.loads(text) if text else None
        except ValueError:
            return response.status, None
    finally:
        conn.close()


def ledgerd(*args):
    """Runs a one-shot ledgerd command (migrate, token create); returns its stdout."""
    done = subprocess.run([str(LEDGERD)] + [str(a) for a in args], check=True,
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip()


def clean_env():
    """Our environment without the settings ledgerd and the gateway would read from it."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("LEDGER_", "GATEWAY_"))}


class Stack:
    """PostgreSQL and one ledgerd (with POLICY, or with @policy's values in its
    place), shared by the runs made on it.

    @folder receives ledgerd's log and the policy file.
    """

    def __init__(self, folder, timing=Timing(), policy=None):
        for binary in (LEDGERD, GATEWAY):
            if not binary.exists():
                raise RuntimeError("%s is missing: run make all first" % binary)
        self.folder = Path(folder)
        self.timing = timing
        # Nothing here survives the run: durability buys nothing.
        self.postgres = Cluster.new({"fsync": "off", "synchronous_commit": "off",
                                     "full_page_writes": "off"}, prefix="ledgerd-faults-pg-")
        self.ledgerd = None
        try:
            self.database_url = self.postgres.create_db("ledger")
            ledgerd("migrate", "--database-url", self.database_url)
            given, policy = policy, self.folder / "policy.yaml"
            policy.write_text(POLICY_YAML.format(**dict(POLICY, **(given or {}))))
            self.ledgerd = Process(
                [LEDGERD, "serve", "--database-url", self.database_url, "--listen",
                 "127.0.0.1:0", "--policy", policy], self.folder / "ledgerd.log",
                env=clean_env()).wait_ready()
        except BaseException:
            self.close()
            raise
        self._tenants = 0

    @property
    def ledger_url(self):
        return self.ledgerd.url

    def new_tenant_token(self, role="router"):
        """A token of a tenant no earlier run used."""
        self._tenants += 1
        tenant = "faults-%d-%d" % (os.getpid(), self._tenants)
        return ledgerd("token", "create", "--tenant", tenant, "--role", role,
                       "--database-url", self.database_url)

    def close(self):
        if self.ledgerd is not None:
            self.ledgerd.stop()
            self.ledgerd = None
        self.postgres.destroy()


class Replica(Process):
    """A fake replica (replica.py) and its event log."""

    def __init__(self, name, folder, ledger_url, token, tools_url):
        self.name = name
        self.events_path = Path(folder) / ("replica-%s.jsonl" % name)
        super().__init__(
            [sys.executable, HERE / "replica.py", "--port", 0, "--name", name,
             "--ledger-url", ledger_url, "--ledger-token", token, "--tools-url", tools_url,
             "--log", self.events_path], Path(folder) / ("replica-%s.stderr" % name))

    def control(self, **behaviour):
        """POST /control; see replica.py for the keys."""
        status, body = http_json(self.url, "POST", "/control", behaviour)
        if status != 200:
            raise RuntimeError("replica %s refused %s: %s" % (self.name, behaviour, body))
        return body

    def events(self, request_id=None):
        return [e for e in read_json_lines(self.events_path)
                if request_id is None or e["request_id"] == request_id]


class Run:
    """One scenario run: a fresh tenant, tool service, replicas and gateway on a Stack."""

    def __init__(self, stack, folder, replicas=2):
        self.stack = stack
        self.folder = Path(folder)
        self.token = stack.new_tenant_token()
        self.tool_log_path = self.folder / "tools.jsonl"
        self.tools = None
        self.replicas = []
        self.gateways = []
        self.gateway = None
        try:
            self.tools = Process([sys.executable, HERE / "tools.py", "--port", 0, "--log",
                                  self.tool_log_path], self.folder / "tools.stderr").wait_ready()
            self.replicas = [Replica("gpu-%d" % (i + 1), self.folder, stack.ledger_url,
                                     self.token, self.tools.url) for i in range(replicas)]
            for replica in self.replicas:
                replica.wait_ready()
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start_gateway(self, *extra, env=None, timing=None):
        """Starts a gateway in front of the replicas (configure them first), with the
        flags @extra and the variables @env beside the run's; several may run."""
        timing = timing or self.stack.timing
        argv = [GATEWAY, "--listen", "127.0.0.1:0", "--ledger-url", self.stack.ledger_url,
                "--ledger-token", self.token]
        for replica in self.replicas:
            argv += ["--replica", "%s=%s" % (replica.name, replica.url)]
        argv += ["--lease-ms", timing.lease_ms, "--soft-timeout-ms", timing.soft_timeout_ms,
                 "--stall-timeout-ms", timing.stall_timeout_ms, *extra]
        variables = clean_env()
        variables.update(env or {})
        self.gateways.append(Process(argv, self.folder / ("gateway-%d.log" % len(self.gateways)
                                                           if self.gateways else "gateway.log"),
                                     env=variables).wait_ready())
        self.gateway = self.gateways[-1]
        return self.gateway

    def replica(self, name):
        return next(r for r in self.replicas if r.name == name)

    def timeline(self, request_id):
        """GET /v1/requests/{rid}, every event page joined; None if ledgerd has no such request."""
        path = "/v1/requests/" + urllib.parse.quote(request_id, safe="")
        status, body = http_json(self.stack.ledger_url, path=path, token=self.token)
        if status != 200:
            return None
        while body.get("next_events_cursor"):
            status, page = http_json(self.stack.ledger_url, token=self.token,
                                     path=path + "?events_cursor=" + body["next_events_cursor"])
            body["events"] += page["events"]
            body["next_events_cursor"] = page.get("next_events_cursor")
        return body

    def settled_timeline(self, request_id, timeout_s=10):
        """The timeline once the request is no longer open (None if it is still open by then)."""
        def settled():
            timeline = self.timeline(request_id)
            return timeline if timeline and timeline["request"]["status"] != "open" else None
        return wait_until(settled, timeout_s)

    def tool_log(self):
        return read_json_lines(self.tool_log_path)

    def close(self):
        for process in [*self.gateways, *self.replicas, self.tools]:
            if process is not None:
                process.stop()
