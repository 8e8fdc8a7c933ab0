"""PostgreSQL primaries and synchronous streaming standbys, by hand, for the
fault campaign (pgpair.py swaps their roles again and again).

Every node is a cluster of its own in a directory under one temporary root,
reachable only through a unix socket in that directory, and run as the
`postgres` user when the tests run as root (PostgreSQL refuses root). A
node can be stopped, crashed (SIGKILL of every one of its processes, as a
lost machine would leave it) and promoted.
"""

import os
import signal
import subprocess
from pathlib import Path

from pgcluster import PGBIN, Cluster, wait_for  # noqa: F401 (pgpair takes it from here)


class Node(Cluster):
    """One PostgreSQL 15 cluster: a primary, or a standby of one."""

    def __init__(self, root, name):
        super().__init__(Path(root) / name)
        self.name = name

    # --- making nodes ---------------------------------------------------

    @staticmethod
    def _settings():
        return {
            "max_connections": 100,
            "shared_buffers": "32MB",
            # Only processes die in these tests, never the machine: what a
            # process wrote is in the page cache either way.
            "fsync": "off",
            "wal_level": "replica",
            "max_wal_senders": 4,
            "hot_standby": "on",
            "synchronous_commit": "on",
            "wal_retrieve_retry_interval": "200ms",
        }

    @classmethod
    def primary(cls, root, name, sync_standby):
        """A new primary whose commits wait for the standby @sync_standby."""
        node = cls(root, name)
        node.initdb()
        settings = node._settings()
        settings["synchronous_standby_names"] = "FIRST 1 (%s)" % sync_standby
        node.configure(settings)
        node.start()
        return node

    @classmethod
    def standby_of(cls, primary, root, name, application_name):
        """A new streaming standby of @primary, known to it as @application_name."""
        node = cls(root, name)
        conninfo = "host=%s port=%d user=%s application_name=%s" % (
            primary.dir, primary.port, primary.user, application_name)
        # -R writes standby.signal and a primary_conninfo that keeps the
        # application_name the primary's synchronous_standby_names names.
        node.run([PGBIN / "pg_basebackup", "-D", node.data, "-d", conninfo, "-R",
                  "-X", "stream", "-c", "fast", "--no-sync"])
        settings = node._settings()
        # Promoted, it is alone: its own commits must not wait for a standby
        # that does not exist (the copied configuration names one).
        settings["synchronous_standby_names"] = ""
        node.configure(settings)
        node.start()
        return node

    # --- running --------------------------------------------------------

    def promote(self):
        """Ends recovery; returns once the node accepts writes."""
        self.run([PGBIN / "pg_ctl", "-D", self.data, "-w", "-t", "30", "-s", "promote"])

    def in_recovery(self):
        return self.psql("SELECT pg_is_in_recovery()") == [["t"]]

    def replication(self, application_name):
        """(state, sync_state) of the walsender serving @application_name, or None."""
        rows = self.psql("SELECT state, sync_state FROM pg_stat_replication "
                         "WHERE application_name = '%s'" % application_name)
        return tuple(rows[0]) if rows else None

    def wait_sync_standby(self, application_name, timeout=30):
        """Waits until @application_name streams and is the synchronous standby."""
        seen = []

        def probe():
            seen[:] = [self.replication(application_name)]
            return seen[0] == ("streaming", "sync")

        wait_for(probe, timeout, lambda: "%s to stream as the synchronous standby (seen %s)"
                 % (application_name, seen))

    def walreceiver_pid(self):
        """Pid of a standby's WAL receiver, the process that confirms commits."""
        for pid in self.processes():
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if b"walreceiver" in f.read():
                        return pid
            except OSError:
                continue
        return None

    # --- dying ----------------------------------------------------------

    def postmaster_pid(self):
        with open(self.data / "postmaster.pid") as f:
            return int(f.readline())

    def processes(self):
        """Pids of this node's processes: every one runs in its data directory."""
        data = os.path.realpath(self.data)
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.readlink("/proc/%s/cwd" % entry) == data:
                    pids.append(int(entry))
            except OSError:
                continue  # gone, or not ours to look at
        return pids

    def crash(self, timeout=10):
        """SIGKILLs the postmaster, then every process it left behind.

        Nothing gets to shut down: no walsender sends what it has not sent
        yet, no backend answers what it has not answered yet.
        """
        os.kill(self.postmaster_pid(), signal.SIGKILL)
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: not self.processes(), timeout,
                 lambda: "the processes of %s to die (left: %s)" % (self.name, self.processes()))

    def destroy(self):
        """Stops the node whatever its state; never raises."""
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGCONT)  # a stopped process would hold up pg_ctl
            except OSError:
                pass
        try:
            self.stop("immediate")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
            pass
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
