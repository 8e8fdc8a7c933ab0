"""A Patroni cluster on this machine, for the HA tests: etcd and two nodes.

One etcd member and two Patroni nodes, each running PostgreSQL 15, every
one on loopback ports chosen at run time and in a directory of its own
under one temporary root, so several suites can run side by side. Patroni
and PostgreSQL run as the `postgres` user when the tests run as root
(PostgreSQL refuses root); etcd runs as whoever runs the tests.

Replication is synchronous and strict (`synchronous_mode`,
`synchronous_mode_strict`): a commit returns only once the synchronous
standby has it, and with no standby at all the primary's commits wait.
The timings are the shortest Patroni's rule `loop_wait + 2 * retry_timeout
<= ttl` allows that stayed stable under the tests' load on two cores (see
TTL_S), so a failover takes seconds, not the half minute of the defaults.

A node can be crashed in two ways: its postmaster alone SIGKILLed (Patroni
lives on and restarts or fails over), or the whole node lost (Patroni and
every PostgreSQL process SIGKILLed together, as a lost machine leaves
them). A lost node comes back by starting its Patroni again on the data
directory it left: Patroni rewinds it (`use_pg_rewind`, data checksums)
or copies it anew, and it rejoins as a standby.
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from pgcluster import PGBIN, free_port, wait_for  # noqa: F401 (test_ha takes it from here)

PATRONI = shutil.which("patroni") or "/usr/bin/patroni"
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
AS_ROOT = os.getuid() == 0
PG_USER = "postgres" if AS_ROOT else None

# Patroni's timings, in seconds. Its documentation asks for loop_wait +
# 2 * retry_timeout <= ttl; 3.0 (Debian 12's) accepts any integers, later
# versions refuse ttl < 20 and retry_timeout < 3. loop_wait 1 is the
# documented minimum. retry_timeout 1 (so ttl 3) made the leader demote
# itself under load: one etcd write delayed past a second by the machine's
# fsyncs costs the leader its key. These held through every run.
LOOP_WAIT_S = 1
RETRY_TIMEOUT_S = 2
TTL_S = LOOP_WAIT_S + 2 * RETRY_TIMEOUT_S


def own(path):
    """Gives @path to the user PostgreSQL runs as (when we are root)."""
    if AS_ROOT:
        shutil.chown(path, PG_USER, PG_USER)


def http_json(method, url, body=None, timeout=5):
    """(status, parsed JSON or None) of one HTTP call; (None, error) if none answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    except (OSError, urllib.error.URLError) as e:
        return None, repr(e)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def processes_in(directory):
    """Pids of the processes whose working directory is @directory.

    A postmaster and all its children work in their data directory, so
    this finds every process of a PostgreSQL node, orphans included.
    """
    target = os.path.realpath(directory)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/cwd" % entry) == target:
                pids.append(int(entry))
        except OSError:
            continue  # gone, or not ours to look at
    return pids


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Etcd:
    """One etcd member: the cluster's configuration store, on loopback."""

    def __init__(self, root):
        self.dir = Path(root) / "etcd"
        self.dir.mkdir()
        self.client_port = free_port()
        self.peer_port = free_port()
        self.log = self.dir / "etcd.log"
        self.proc = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.client_port

    def start(self):
        peer = "http://127.0.0.1:%d" % self.peer_port
        argv = [ETCD, "--name", "e1", "--data-dir", str(self.dir / "data"),
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", "e1=" + peer, "--initial-cluster-state", "new",
                "--initial-cluster-token", "ledgerd-ha-" + secrets.token_hex(4),
                "--log-level", "warn"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.dir)
        wait_for(lambda: self.proc.poll() is not None or
                 http_json("GET", self.url + "/health", timeout=1)[1] == {"health": "true"},
                 20, "etcd to answer on %s" % self.url)
        assert self.proc.poll() is None, "etcd exited %s: %s" % (
            self.proc.returncode, self.log.read_text()[-2000:])

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class PatroniNode:
    """One Patroni process and the PostgreSQL it runs."""

    def __init__(self, root, name, scope, etcd):
        self.name = name
        self.dir = Path(root) / name
        self.dir.mkdir()
        os.chmod(self.dir, 0o755)
        own(self.dir)
        self.data = self.dir / "data"
        self.config = self.dir / "patroni.yml"
        self.log = self.dir / "patroni.log"
        self.pg_log = self.dir / "pglog"
        self.port = free_port()
        self.api_port = free_port()
        self.scope = scope
        self.etcd = etcd
        self.proc = None
        self._write_config()

    @property
    def api(self):
        return "http://127.0.0.1:%d" % self.api_port

    def _write_config(self):
        # JSON is YAML: Patroni reads this file with yaml.safe_load.
        address = "127.0.0.1:%d" % self.port
        user = {"username": PG_USER or os.environ.get("USER", "postgres")}
        config = {
            "scope": self.scope,
            "namespace": "/ledgerd-ha/",
            "name": self.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": "127.0.0.1:%d" % self.api_port,
                        "connect_address": "127.0.0.1:%d" % self.api_port},
            "etcd3": {"hosts": ["127.0.0.1:%d" % self.etcd.client_port]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL_S,
                    "loop_wait": LOOP_WAIT_S,
                    "retry_timeout": RETRY_TIMEOUT_S,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "synchronous_mode_strict": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "remove_data_directory_on_rewind_failure": True,
                        "remove_data_directory_on_diverged_timelines": True,
                        "parameters": {
                            "max_connections": 100,
                            "shared_buffers": "32MB",
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "max_wal_senders": 5,
                            "max_replication_slots": 5,
                            "wal_keep_size": "128MB",
                            # A standby asks for WAL again this soon after
                            # it failed (the default 5 s would stall the new
                            # primary's first standby connection).
                            "wal_retrieve_retry_interval": "100ms",
                            # Durability is what these tests are about.
                            "fsync": "on",
                            "synchronous_commit": "on",
                            "full_page_writes": "on",
                        },
                    },
                },
                # Checksums let pg_rewind bring a lost primary back as a standby.
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, "data-checksums"],
            },
            "postgresql": {
                "listen": address,
                "connect_address": address,
                "data_dir": str(self.data),
                "bin_dir": str(PGBIN),
                "pgpass": str(self.dir / "pgpass"),
                "authentication": {"superuser": user, "replication": user, "rewind": user},
                "parameters": {
                    "unix_socket_directories": str(self.dir),
                    "logging_collector": "on",
                    "log_directory": str(self.pg_log),
                    "log_filename": "postgresql.log",
                    "log_line_prefix": "%m [%p] %a ",
                    "lc_messages": "C",
                },
                "pg_hba": ["local all all trust",
                           "local replication all trust",
                           "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
            },
            "watchdog": {"mode": "off"},
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False,
                     "nosync": False},
        }
        self.config.write_text(json.dumps(config, indent=2))
        own(self.config)

    # --- running --------------------------------------------------------

    def start(self):
        """Starts Patroni: it bootstraps, copies or rejoins on its own."""
        assert self.proc is None or self.proc.poll() is not None, "%s runs already" % self.name
        env = dict(os.environ)
        kw = {}
        if AS_ROOT:
            env.update(HOME=str(self.dir), USER=PG_USER, LOGNAME=PG_USER)
            kw = {"user": PG_USER, "group": PG_USER, "extra_groups": []}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([PATRONI, str(self.config)], stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.dir, env=env,
                                         start_new_session=True, **kw)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def status(self):
        """Patroni's own view of this node (GET /patroni), or None."""
        if not self.alive():
            return None
        code, body = http_json("GET", self.api + "/patroni", timeout=2)
        return body if code in (200, 503) and isinstance(body, dict) else None

    def url(self, db):
        return "host=127.0.0.1 port=%d user=%s dbname=%s" % (self.port, PG_USER or "postgres", db)

    def psql(self, sql, db="postgres", timeout=20):
        """Runs SQL over TCP; returns the rows as lists of strings."""
        out = subprocess.run([str(PGBIN / "psql"), "-h", "127.0.0.1", "-p", str(self.port),
                              "-U", PG_USER or "postgres", "-d", db, "-v", "ON_ERROR_STOP=1",
                              "-AtX", "-F", "\t", "-c", sql],
                             capture_output=True, text=True, timeout=timeout, check=True,
                             env=dict(os.environ, PGCONNECT_TIMEOUT="2"))
        return [line.split("\t") for line in out.stdout.splitlines() if line != ""]

    def try_psql(self, sql, db="postgres"):
        """As psql(), or None when the server does not answer."""
        try:
            return self.psql(sql, db, timeout=5)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return None

    def is_primary(self):
        return self.try_psql("SELECT pg_is_in_recovery()") == [["f"]]

    def replication(self):
        """{application_name: (state, sync_state)} of this node's walsenders."""
        rows = self.try_psql("SELECT application_name, state, sync_state "
                             "FROM pg_stat_replication") or []
        return {r[0]: (r[1], r[2]) for r in rows}

    def walsender_pid(self, standby_name):
        """Pid of the walsender streaming to @standby_name, or None."""
        rows = self.try_psql("SELECT pid FROM pg_stat_replication WHERE application_name = "
                             "'%s' AND state = 'streaming'" % standby_name)
        return int(rows[0][0]) if rows else None

    # --- dying ----------------------------------------------------------

    def postmaster_pid(self):
        try:
            with open(self.data / "postmaster.pid") as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def pg_processes(self):
        return processes_in(self.data)

    def kill_postmaster(self):
        """SIGKILLs the postmaster alone; its children notice and exit by themselves."""
        pid = self.postmaster_pid()
        assert pid is not None, "%s has no postmaster" % self.name
        os.kill(pid, signal.SIGKILL)
        return pid

    def lose(self, timeout=10):
        """SIGKILLs Patroni and every process of its PostgreSQL: the machine is gone."""
        if self.alive():
            self.proc.kill()
        kill_all(self.pg_processes())
        if self.proc is not None:
            self.proc.wait()
        # pg_ctl, pg_rewind or pg_basebackup a dead Patroni started may still
        # spawn a process or two: sweep until nothing is left.
        wait_for(lambda: (kill_all(self.pg_processes()), not self.pg_processes())[1], timeout,
                 lambda: "the processes of %s to die (left: %s)" % (
                     self.name, self.pg_processes()))


class PatroniCluster:
    """etcd and two Patroni nodes, synchronous and strict."""

    NAMES = ("pg1", "pg2")

    def __init__(self, root=None):
        self.root = Path(root or tempfile.mkdtemp(prefix="ledgerd-patroni-"))
        os.chmod(self.root, 0o755)
        self.scope = "ledgerd-" + secrets.token_hex(4)
        self.etcd = Etcd(self.root)
        self.nodes = [PatroniNode(self.root, n, self.scope, self.etcd) for n in self.NAMES]

    def start(self, timeout=90):
        """Starts etcd and both nodes: one bootstraps, the other copies it."""
        self.etcd.start()
        for node in self.nodes:
            node.start()
        self.wait_healthy(timeout)
        return self

    def _fail_if_exited(self):
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is not None:
                raise AssertionError("Patroni of %s exited %s:\n%s" % (
                    node.name, node.proc.returncode, node.log.read_text()[-3000:]))
        return False

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)

    def other(self, node):
        return next(n for n in self.nodes if n is not node)

    def members(self):
        """{name: (role, state)} as Patroni sees the cluster, from any node that answers."""
        for node in self.nodes:
            if not node.alive():
                continue
            code, body = http_json("GET", node.api + "/cluster", timeout=2)
            if code == 200 and isinstance(body, dict):
                return {m["name"]: (m["role"], m.get("state")) for m in body["members"]}
        return {}

    def leader(self):
        """The node Patroni holds as the leader, or None."""
        for name, (role, _) in self.members().items():
            if role == "leader":
                return self.node(name)
        return None

    def healthy(self):
        """(primary, standby) while a primary streams to a synchronous standby, else None.

        Healthy means all of: Patroni names a leader and a sync_standby, both
        running; the leader is out of recovery; its walsender to the standby
        is `streaming` and `sync`.
        """
        members = self.members()
        roles = {role: name for name, (role, state) in members.items()
                 if state in ("running", "streaming")}
        if "leader" not in roles or "sync_standby" not in roles:
            return None
        primary, standby = self.node(roles["leader"]), self.node(roles["sync_standby"])
        if not primary.is_primary():
            return None
        if primary.replication().get(standby.name) != ("streaming", "sync"):
            return None
        return primary, standby

    def wait_healthy(self, timeout=60):
        return wait_for(lambda: self._fail_if_exited() or self.healthy(), timeout,
                        lambda: "a primary with a streaming synchronous standby "
                        "(Patroni sees %s)" % self.members(), interval=0.1)

    def repair(self, timeout=60):
        """Starts every node whose Patroni is down; returns (primary, standby) once healthy."""
        for node in self.nodes:
            if not node.alive():
                node.lose()  # whatever it left
                node.start()
        return self.wait_healthy(timeout)

    def switchover(self, leader, candidate, timeout=30):
        """Asks Patroni for a planned switchover; returns (status, body) of its answer."""
        return http_json("POST", leader.api + "/switchover",
                         {"leader": leader.name, "candidate": candidate.name}, timeout=timeout)

    def database_url(self, db):
        """A multi-host URL naming both nodes: libpq picks whichever is the primary."""
        return "host=%s port=%s user=%s dbname=%s target_session_attrs=read-write" % (
            ",".join("127.0.0.1" for _ in self.nodes), ",".join(str(n.port) for n in self.nodes),
            PG_USER or "postgres", db)

    def close(self, logs=None):
        """Stops everything whatever its state; copies the logs to @logs; never raises."""
        for node in self.nodes:
            try:
                node.lose()
            except Exception:  # a teardown must not mask the test's own failure
                pass
        self.etcd.stop()
        if logs is not None:
            for src, dst in [(self.etcd.log, "etcd.log")] + [
                    (p, "%s-%s" % (n.name, p.name)) for n in self.nodes
                    for p in (n.log, n.pg_log / "postgresql.log")]:
                try:
                    shutil.copy(src, Path(logs) / dst)
                except OSError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)
