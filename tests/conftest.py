"""Shared fixtures of ledgerd's HTTP and integration tests.

The session starts one throwaway PostgreSQL 15 cluster in a temporary
directory (as the postgres user when run as root); every test module gets a
fresh database, migrated by `ledgerd migrate`, and its own ledgerd process
listening on a free loopback port.
"""

import http.client
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from pgcluster import PGBIN, Cluster, free_port  # noqa: F401 (re-exported to the tests)

# The suites' helper modules assert too: rewritten like the tests, their
# failures show the values compared. (Registered before any test imports them.)
pytest.register_assert_rewrite("http_helpers", "integration_helpers")

ROOT = Path(__file__).resolve().parent.parent
LEDGERD = Path(os.environ.get("LEDGERD", ROOT / "build" / "ledgerd")).resolve()


# The cluster of the session: tests kill ledgerd, never PostgreSQL uncleanly,
# so durability buys nothing here.
TEST_SETTINGS = {"fsync": "off", "full_page_writes": "off", "max_connections": 300}


def ledgerd_cmd(*args, env=None, check=True, timeout=30):
    """Runs a ledgerd command (not serve); returns the CompletedProcess."""
    return subprocess.run([str(LEDGERD)] + [str(a) for a in args], env=env, check=check,
                          capture_output=True, text=True, timeout=timeout)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self):
        return json.loads(self.body)

    @property
    def code(self):
        """The error code of an error envelope."""
        return self.json["error"]["code"]

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def __repr__(self):
        return "<%d %s>" % (self.status, self.body[:300])


class Ledgerd:
    """A ledgerd serve process on a free loopback port (@binary: another build's)."""

    def __init__(self, database_url, log_path, extra_args=(), extra_env=None, binary=None):
        self.binary = Path(binary) if binary is not None else LEDGERD
        self.database_url = database_url
        self.log_path = Path(log_path)
        self.extra_args = list(extra_args)
        self.extra_env = dict(extra_env or {})
        self.proc = None
        self.host = "127.0.0.1"
        self.port = None
        self.start()

    def start(self, listen="127.0.0.1:0"):
        env = dict(os.environ)
        env.pop("LEDGER_DATABASE_URL", None)
        env.update(self.extra_env)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(self.binary), "serve", "--database-url", self.database_url, "--listen", listen,
             "--log-level", "debug"] + self.extra_args,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        # The first line that says "listening" carries the bound address.
        deadline = time.time() + 15
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("ledgerd exited: %s" % self.proc.wait())
            self.log.write(line)
            self.log.flush()
            entry = json.loads(line)
            if "address" in entry:
                self.host, port = entry["address"].rsplit(":", 1)
                self.port = int(port)
                break
        else:
            raise RuntimeError("ledgerd did not start")
        self._pump = threading.Thread(target=self._copy_log, args=(self.proc, self.log),
                                      daemon=True)
        self._pump.start()

    @staticmethod
    def _copy_log(proc, log):
        for line in proc.stderr:
            log.write(line)
            log.flush()

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Stops the process; returns its exit status.

        A SIGTERM must end in a clean exit (0), and no run may leave a
        sanitizer report (make SANITIZE=address,undefined test).
        """
        if self.proc is None:
            return None
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        self._pump.join(timeout=5)
        self.log.close()
        self.proc = None
        reports = [line for line in self.log_text().splitlines()
                   if "Sanitizer" in line or "runtime error:" in line]
        assert reports == [], "sanitizer reports in %s" % self.log_path
        assert sig != signal.SIGTERM or rc == 0, "ledgerd exited %s on SIGTERM" % rc
        return rc

    def kill(self):
        return self.stop(signal.SIGKILL)

    def restart(self):
        self.stop()
        self.start("127.0.0.1:%d" % self.port)

    def request(self, method, path, body=None, token=None, headers=None, raw=None,
                timeout=30):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            h = dict(headers or {})
            if token is not None:
                h["Authorization"] = "Bearer " + token
            data = raw
            if data is None and body is not None:
                data = json.dumps(body).encode()
            if data is not None:
                h.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            return Response(r.status, r.getheaders(), r.read().decode("utf-8", "replace"))
        finally:
            conn.close()

    def post(self, path, body=None, token=None, **kw):
        return self.request("POST", path, body=body, token=token, **kw)

    def get(self, path, token=None, **kw):
        return self.request("GET", path, token=token, **kw)

    def log_text(self):
        return self.log_path.read_text(errors="replace")


class Service:
    """What a test module works with: its database, its tokens, its ledgerd."""

    def __init__(self, cluster, name, tmp, extra_args=()):
        self.cluster = cluster
        self.dbname = name
        self.database_url = cluster.create_db(name)
        ledgerd_cmd("migrate", "--database-url", self.database_url)
        self.tmp = tmp
        self._tokens = {}
        self.ledgerd = Ledgerd(self.database_url, tmp / "ledgerd.log", extra_args=extra_args)

    def token(self, role="agent", tenant="t1"):
        """A token of @role in @tenant (created once, then reused)."""
        key = (tenant, role)
        if key not in self._tokens:
            out = ledgerd_cmd("token", "create", "--tenant", tenant, "--role", role,
                              "--database-url", self.database_url)
            self._tokens[key] = out.stdout.strip()
        return self._tokens[key]

    def sql(self, query):
        return self.cluster.psql(query, self.dbname)

    def close(self):
        if self.ledgerd.proc is not None:
            self.ledgerd.stop()


@pytest.fixture(scope="session")
def cluster():
    if not LEDGERD.exists():
        pytest.exit("build/ledgerd is missing: run make first", 2)
    c = Cluster.new(TEST_SETTINGS)
    yield c
    c.destroy()


@pytest.fixture(scope="module")
def service(cluster, request, tmp_path_factory):
    name = re.sub(r"[^a-z0-9_]", "_", request.module.__name__.split(".")[-1].lower())
    # A module may start its ledgerd with flags of its own: LEDGERD_ARGS.
    svc = Service(cluster, "%s_%s" % (name, secrets.token_hex(3)),
                  tmp_path_factory.mktemp(name),
                  extra_args=getattr(request.module, "LEDGERD_ARGS", ()))
    yield svc
    svc.close()
    # A tool call's request is held by the statements that write the call
    # (sql/005): whatever the module did, no call is left without it.
    orphans = svc.sql("SELECT count(*) FROM tool_calls c WHERE NOT EXISTS (SELECT 1 FROM"
                      " requests r WHERE r.tenant = c.tenant AND r.request_id = c.request_id)")
    assert orphans == [["0"]], "tool calls without their request: %s" % orphans


def hold_request_lock(sql, rid, seconds):
    """Another session holds request @rid's row lock for @seconds, in a
    thread, from the moment this returns (@sql runs a query, as
    Service.sql does). Join the thread returned."""
    t = threading.Thread(target=sql, args=(
        "BEGIN; SELECT 1 FROM requests WHERE request_id = '%s' FOR UPDATE; "
        "SELECT pg_sleep(%s); COMMIT;" % (rid, seconds),))
    t.start()
    deadline = time.monotonic() + 10
    while int(sql("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
                  "query LIKE 'BEGIN; SELECT 1 FROM requests%%'")[0][0]) == 0:
        assert time.monotonic() < deadline, "the lock was never taken"
        time.sleep(0.02)
    return t


def new_id(prefix="r"):
    """A fresh id, unique within the session."""
    return "%s-%s" % (prefix, secrets.token_hex(8))


def claim_id():
    """A claim_id as the SDKs make it: 128 random bits in hex."""
    return secrets.token_hex(16)
