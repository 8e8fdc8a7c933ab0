"""A throwaway PostgreSQL 15 cluster, for every test that needs a real one.

The cluster lives in a directory of its own and is reached only through a
unix socket there. PostgreSQL refuses to run as root, so when the tests
run as root the cluster runs as the `postgres` user, in a directory it
owns, and every command is started from that directory (postgres may not
be allowed into ours). The HTTP tests' session cluster (conftest.py) and
the fault scenarios' stack (faults/stack.py) are this class; the HA tests
run Patroni instead (ha/patroni_cluster.py), which uses PGBIN and
free_port from here. tests/ops restores one from a base backup and its
WAL archive (basebackup(), Cluster.restore()).
"""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PGBIN = Path("/usr/lib/postgresql/15/bin")


def wait_for(probe, timeout, what, interval=0.05):
    """Polls @probe until it returns something true; returns that.

    On timeout fails with @what, which may be a callable returning the text
    (so the message can say what was seen last).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = what() if callable(what) else what
            raise AssertionError("after %.1f s still waiting for %s" % (timeout, text))
        time.sleep(interval)


def owned_tempdir(prefix):
    """A new temporary directory the clusters' user owns (postgres when run as root)."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    if os.getuid() == 0:
        shutil.chown(d, "postgres", "postgres")
        os.chmod(d, 0o755)
    return d


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A PostgreSQL cluster in @directory (made, or a new temporary one); not yet created."""

    def __init__(self, directory=None, prefix="ledgerd-test-pg-"):
        if directory is None:
            self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        else:
            self.dir = Path(directory)
            self.dir.mkdir()
        self.as_root = os.getuid() == 0
        self.user = "postgres" if self.as_root else pwd.getpwuid(os.getuid()).pw_name
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
            os.chmod(self.dir, 0o755)
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = free_port()

    @classmethod
    def new(cls, settings=None, **kw):
        """initdb, @settings over the socket-only defaults, start: a running cluster."""
        cluster = cls(**kw)
        cluster.initdb()
        cluster.configure(settings or {})
        cluster.start()
        return cluster

    def initdb(self):
        self.run([PGBIN / "initdb", "-D", self.data, "-U", self.user, "-A", "trust",
                  "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])

    def configure(self, settings):
        """Appends the socket-only defaults, then @settings, to postgresql.conf: later wins."""
        lines = dict({"listen_addresses": "", "unix_socket_directories": str(self.dir),
                      "port": self.port}, **settings)
        with open(self.data / "postgresql.conf", "a") as f:
            for name, value in lines.items():
                if isinstance(value, str):
                    value = "'%s'" % value.replace("'", "''")
                f.write("%s = %s\n" % (name, value))

    @classmethod
    def restore(cls, backup, settings, **kw):
        """A new cluster from the plain base backup in @backup: its data copied, @settings
        (restore_command, a recovery target) over the socket-only defaults, recovery.signal
        written, started; returned once recovery is over and it takes writes (a recovery
        target needs recovery_target_action = 'promote' for that)."""
        cluster = cls(**kw)
        cluster.run(["cp", "-a", backup, cluster.data])
        cluster.configure(settings)
        cluster.run(["touch", cluster.data / "recovery.signal"])
        cluster.start()
        # pg_ctl returns once the server accepts connections, which a standby does.
        wait_for(lambda: cluster.psql("SELECT pg_is_in_recovery()") == [["f"]], 60,
                 lambda: "the restored cluster to be promoted: %s"
                 % cluster.log.read_text()[-2000:])
        return cluster

    def _argv(self, argv):
        argv = [str(a) for a in argv]
        return ["runuser", "-u", "postgres", "--"] + argv if self.as_root else argv

    def run(self, argv, check=True, timeout=60):
        return subprocess.run(self._argv(argv), check=check, capture_output=True, text=True,
                              cwd=self.dir, timeout=timeout)

    def popen(self, argv, **kw):
        """Starts @argv as the cluster's user, from its directory; the caller ends it."""
        return subprocess.Popen(self._argv(argv), cwd=self.dir, **kw)

    def basebackup(self, target):
        """A plain base backup of the running cluster into @target, which must not exist
        (its parent must be the cluster user's), with the WAL it needs to be consistent."""
        self.run([PGBIN / "pg_basebackup", "-h", self.dir, "-p", self.port, "-U", self.user,
                  "-D", target, "-c", "fast", "-X", "stream", "--no-sync"], timeout=120)

    def reload(self):
        self.run([PGBIN / "pg_ctl", "-D", self.data, "-s", "reload"])

    def start(self):
        self.run([PGBIN / "pg_ctl", "-D", self.data, "-l", self.log, "-w", "-s", "start"])

    def stop(self, mode="fast"):
        self.run([PGBIN / "pg_ctl", "-D", self.data, "-m", mode, "-w", "-s", "stop"])

    def url(self, db):
        return "host=%s port=%d user=%s dbname=%s" % (self.dir, self.port, self.user, db)

    def psql(self, sql, db="postgres"):
        """Runs SQL; returns the rows as lists of strings."""
        out = self.run([PGBIN / "psql", "-h", self.dir, "-p", self.port, "-U", self.user,
                        "-d", db, "-v", "ON_ERROR_STOP=1", "-AtX", "-F", "\t", "-c", sql])
        return [line.split("\t") for line in out.stdout.splitlines() if line != ""]

    def create_db(self, name):
        """Creates a database; returns its libpq connection string."""
        self.psql('CREATE DATABASE "%s"' % name)
        return self.url(name)

    def destroy(self):
        """Stops the cluster whatever its state and removes its directory; never raises."""
        try:
            self.stop("immediate")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
