"""Two PostgreSQL nodes, a primary and its synchronous standby, that swap roles on demand.

The nodes are pg_node.py's (unix sockets only, run as `postgres`
when the campaign runs as root), with durability on: fsync,
synchronous_commit, a synchronous standby named in
synchronous_standby_names. `failover()` does what a lost machine and a
watchdog would: SIGKILL of every process of the primary, a pause (the
detection delay), promotion of the standby, and then the old primary made
the new standby again, with pg_rewind (or, if that fails, a fresh
pg_basebackup), so that the next failover finds a synchronous standby
again. Until the rebuilt standby streams the new primary commits alone
(synchronous_standby_names is empty), and the campaign kills no primary
in that window: an acknowledged commit must always be on two nodes when a
primary dies.

Each node's own settings are appended to postgresql.conf after every
rebuild (the copy brings the other node's port and socket directory), and
postgresql.auto.conf is written whole (the copy brings the other node's
primary_conninfo), so a node never points at itself.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: pgcluster
sys.path.insert(0, str(HERE))         # pg_node

from pg_node import Node, wait_for  # noqa: E402
from pgcluster import PGBIN  # noqa: E402

DBNAME = "ledger_chaos"


class PgNode(Node):
    """A node of the pair, durable: fsync and synchronous commit on."""

    @staticmethod
    def _settings():
        settings = Node._settings()
        settings.update({
            "fsync": "on",
            "synchronous_commit": "on",
            "full_page_writes": "on",
            "wal_log_hints": "on",      # pg_rewind needs it
            "wal_keep_size": "256MB",   # ... and the WAL since the fork
            "max_connections": 60,
            "shared_buffers": "32MB",
        })
        return settings

    def own_settings(self):
        """What makes this node itself, appended last to postgresql.conf."""
        settings = self._settings()
        settings["synchronous_standby_names"] = ""
        return settings

    def set_sync_standby(self, name):
        """Names @name as the synchronous standby ('' for none), at once."""
        value = "FIRST 1 (%s)" % name if name else ""
        self.psql("ALTER SYSTEM SET synchronous_standby_names = '%s'" % value)
        self.psql("SELECT pg_reload_conf()")

    def crash_and_clear(self):
        """SIGKILLs every process of the node and removes the locks they leave.

        The dead postmaster may stay an unreaped zombie for a while (the
        container's init reaps late), and a zombie still owns its pid: its
        lock files would keep the node from ever starting again.
        """
        pid = self.postmaster_pid()
        self.crash()
        deadline = time.monotonic() + 3
        while os.path.exists("/proc/%d" % pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        for path in (self.data / "postmaster.pid",
                     self.dir / (".s.PGSQL.%d.lock" % self.port),
                     self.dir / (".s.PGSQL.%d" % self.port)):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def write_file(self, name, text):
        path = self.data / name
        path.write_text(text)
        if self.as_root:
            shutil.chown(path, "postgres", "postgres")
        os.chmod(path, 0o600)


class PgPair:
    """n1 and n2 under @root; start() makes n1 the primary, n2 its synchronous standby."""

    def __init__(self, root, log=print):
        self.root = Path(root)
        self.log = log
        self.primary = None
        self.standby = None
        self.healthy = False
        self.failovers = 0

    @property
    def nodes(self):
        return sorted([n for n in (self.primary, self.standby) if n is not None],
                      key=lambda n: n.name)

    def start(self):
        self.primary = PgNode.primary(self.root, "n1", sync_standby="n2")
        self.standby = PgNode.standby_of(self.primary, self.root, "n2", application_name="n2")
        self.primary.wait_sync_standby("n2")
        self.primary.psql('CREATE DATABASE "%s"' % DBNAME)
        self.healthy = True
        return self

    def socket(self, node):
        return str(node.dir / (".s.PGSQL.%d" % node.port))

    def failover(self, detect_s, note):
        """Crashes the primary, promotes the standby after @detect_s, rebuilds the old one.

        @note(step, **detail) is called at each step with the time it happened.
        Returns once the pair is healthy again (or raises, leaving it degraded).
        """
        old, new = self.primary, self.standby
        self.healthy = False
        old.crash_and_clear()
        note("primary_killed", node=old.name)
        time.sleep(detect_s)
        new.promote()
        new.set_sync_standby("")
        self.primary, self.standby = new, None
        self.failovers += 1
        note("standby_promoted", node=new.name)
        how = self.rebuild(old, new)
        self.standby = old
        note("standby_rebuilt", node=old.name, how=how)
        new.set_sync_standby(old.name)
        new.wait_sync_standby(old.name, timeout=60)
        self.healthy = True
        note("synchronous_again", primary=new.name, standby=old.name)

    def rebuild(self, old, new):
        """Makes @old a streaming standby of @new; returns "pg_rewind" or "pg_basebackup"."""
        source = "host=%s port=%d user=%s dbname=postgres" % (new.dir, new.port, new.user)
        how = "pg_rewind"
        # Until the promoted node's first checkpoint its control file still
        # shows the old timeline, and pg_rewind would see nothing to rewind.
        new.psql("CHECKPOINT")
        try:
            old.run([PGBIN / "pg_rewind", "-D", old.data, "--source-server", source],
                    timeout=120)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            self.log("pg_rewind of %s failed (%s); a fresh pg_basebackup instead"
                     % (old.name, getattr(e, "stderr", "") or e))
            how = "pg_basebackup"
            old.run(["rm", "-rf", old.data])
            old.run([PGBIN / "pg_basebackup", "-D", old.data, "-d", source, "-X", "stream",
                     "-c", "fast"], timeout=120)
        old.write_file("postgresql.auto.conf",
                       "primary_conninfo = 'host=%s port=%d user=%s application_name=%s'\n"
                       % (new.dir, new.port, new.user, old.name))
        old.write_file("standby.signal", "")
        old.configure(old.own_settings())
        try:
            old.start()
        except subprocess.CalledProcessError:
            self.log("%s did not start; the end of its log:\n%s"
                     % (old.name, old.log.read_text(errors="replace")[-3000:]))
            raise
        wait_for(lambda: (new.replication(old.name) or ("",))[0] == "streaming", 60,
                 "%s to stream from %s" % (old.name, new.name))
        return how

    def destroy(self):
        for node in self.nodes:
            node.destroy()
