"""Backup and restore (docs/operations.md, "Backup and restore").

A primary archives its WAL (archive_command copying to a directory) and
streams it to pg_receivewal, its synchronous standby, so no commit is
acknowledged before its WAL is on the archive side. After a base backup,
ledgerd writes keys in every state and a batch of completions from a few
agents at once. Then the primary is lost, data directory and all.

- Restored to the latest point (the archive, then the stream's last
  partial segment), every acknowledged completion is replayed, and every
  held, unknown or released key is what it was: nothing is reopened.
- Restored from the archive alone, the tail that had not been archived is
  gone and its keys are claimable again: the danger the docs describe.
  Marked by the block of SQL the docs give (run as written there), those
  keys are refused instead.

About 10 s.
"""

import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, Ledgerd, claim_id, ledgerd_cmd, new_id
from ops_helpers import Keys, agents_complete, complete, path
from pgcluster import PGBIN, Cluster, owned_tempdir, wait_for

SLOT = "ledger_wal"


class Site:
    """A primary with its WAL archive, its WAL stream and a base backup."""

    def __init__(self):
        self.store = owned_tempdir("ledgerd-backup-")
        self.archive = self.store / "archive"
        self.stream = self.store / "stream"
        self.base = self.store / "base"
        self.primary = Cluster.new({
            "fsync": "off", "wal_level": "replica", "max_wal_senders": 4,
            "archive_mode": "on",
            "archive_command": "test ! -f %s/%%f && cp %%p %s/%%f" % (self.archive, self.archive),
        })
        for d in (self.archive, self.stream):
            self.primary.run(["mkdir", d])
        self.receiver = None

    def conn_args(self):
        return ["-h", self.primary.dir, "-p", self.primary.port, "-U", self.primary.user]

    def start_stream(self):
        """pg_receivewal on a slot, flushing each write, named as the synchronous standby."""
        self.primary.run([PGBIN / "pg_receivewal", "--create-slot", "--slot", SLOT]
                         + self.conn_args())
        self.receiver = self.primary.popen(
            [PGBIN / "pg_receivewal", "-D", self.stream, "--slot", SLOT, "--synchronous",
             "--no-loop"] + self.conn_args(),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.primary.configure({"synchronous_standby_names": "pg_receivewal"})
        self.primary.reload()
        wait_for(lambda: self.primary.psql(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = "
            "'pg_receivewal'") == [["sync"]], 20, "pg_receivewal to be the synchronous standby")

    def lose_primary(self):
        """The primary's machine is gone: no clean shutdown, no data directory."""
        self.primary.destroy()
        self.receiver.wait(timeout=30)  # it ends when its server does (--no-loop)

    def restore(self, from_stream, **settings):
        """A cluster restored from the base backup: the archive, then (@from_stream) the
        segments the stream holds, its partial last one renamed as the docs say."""
        command = "cp %s/%%f %%p" % self.archive
        if from_stream:
            for partial in self.stream.glob("*.partial"):
                whole = self.stream / partial.name[:-len(".partial")]
                if not whole.exists():
                    shutil.copy2(partial, whole)
                    if os.getuid() == 0:
                        shutil.chown(whole, "postgres", "postgres")
            command = "cp %s/%%f %%p 2>/dev/null || cp %s/%%f %%p" % (self.archive, self.stream)
        return Cluster.restore(self.base, dict({
            "fsync": "off", "restore_command": command, "archive_mode": "off",
            "synchronous_standby_names": ""}, **settings))

    def destroy(self):
        if self.receiver is not None and self.receiver.poll() is None:
            self.receiver.terminate()  # runuser passes SIGTERM on; SIGKILL would orphan it
            self.receiver.wait(timeout=10)
        self.primary.destroy()
        shutil.rmtree(self.store, ignore_errors=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The primary lost after a base backup and a load; what ledgerd acknowledged."""
    s = Site()
    tmp = tmp_path_factory.mktemp("backup")
    try:
        s.start_stream()
        url = s.primary.create_db("ledger")
        ledgerd_cmd("migrate", "--database-url", url)
        agent, router = (ledgerd_cmd("token", "create", "--tenant", "t1", "--role", role,
                                     "--database-url", url).stdout.strip()
                         for role in ("agent", "router"))
        s.primary.basebackup(s.base)

        led = Ledgerd(url, tmp / "primary.log")
        keys = Keys(agent, router)
        keys.fill(led)
        keys.completed += agents_complete(led, agent, 40)
        # Archived: everything up to here. Then a tail only the stream has.
        s.primary.psql("SELECT pg_switch_wal()")
        wait_for(lambda: s.primary.psql("SELECT archived_count FROM pg_stat_archiver")[0][0]
                 != "0", 20, "the WAL archive to receive a segment")
        s.tail = agents_complete(led, agent, 12)
        # And the key released before: claimed again and completed in the tail.
        rid, cid, tool = keys.released
        r = led.post(path(rid, cid, "claim"), keys.claim_body(tool, {"t": 1}), token=agent)
        assert r.status == 201, r
        c = complete(led, agent, rid, cid, r.json["fencing_token"], '{"sent": 1}')
        assert c.status == 200, c
        s.tail.append((rid, cid, tool, {"t": 1}, '{"sent": 1}', "succeeded"))
        keys.released = None
        keys.completed += s.tail
        s.keys, s.before = keys, keys.snapshot(led)
        led.kill()
        s.lose_primary()
        yield s
    finally:
        s.destroy()


def url_of(cluster):
    return cluster.url("ledger")


def test_restore_to_the_latest_point_reopens_nothing(site, tmp_path):
    assert list(site.stream.glob("*.partial")), "the stream holds the unarchived tail"
    restored = site.restore(from_stream=True)
    try:
        led = Ledgerd(url_of(restored), tmp_path / "restored.log")
        try:
            assert led.get("/readyz").status == 200
            # Every key and request as it was, events included; then every answer.
            assert site.keys.snapshot(led) == site.before
            site.keys.check(led)
            settled = restored.psql("SELECT count(*) FROM tool_calls WHERE state IN "
                                    "('succeeded', 'failed')", "ledger")[0][0]
            assert int(settled) == len(site.keys.acknowledged())
        finally:
            led.stop()
    finally:
        restored.destroy()


def test_restore_without_the_stream_reopens_the_tail(site, tmp_path):
    """The archive alone ends before the tail: those keys would run a second time."""
    restored = site.restore(from_stream=False)
    try:
        url = url_of(restored)
        led = Ledgerd(url, tmp_path / "archive-only.log")
        try:
            # Before the tail: replayed. The tail: unknown to the database.
            site.keys.check_replays(led, [k for k in site.keys.acknowledged()
                                             if k not in site.tail])
            state = {}
            for rid, cid, *_ in site.tail:
                g = led.get(path(rid, cid), token=site.keys.agent)
                state[rid, cid] = "absent" if g.status == 404 else g.json["state"]
            absent = [k for k in site.tail if state[k[0], k[1]] == "absent"]
            released = [k for k in site.tail if state[k[0], k[1]] == "released"]
            assert len(absent) == len(site.tail) - 1 and len(released) == 1, state
            rid, cid, tool, args, _, _ = absent[0]
            reopened = led.post(path(rid, cid, "claim"), {"claim_id": claim_id(), "tool": tool,
                                                          "args": args},
                                token=site.keys.agent)
            assert reopened.status == 201, reopened  # the second execution
            lost = absent[1:] + released

            # The docs' block marks the keys the tools' records name, before agents come back.
            said = mark_lost(restored, lost)
            assert said[-2:] == [str(len(lost)), "COMMIT"], said
            for k in lost:
                rid, cid, tool, args, _, _ = k
                as_sent = led.post(path(rid, cid, "claim"),
                                   {"claim_id": claim_id(), "tool": tool, "args": args},
                                   token=site.keys.agent)
                bare = led.post(path(rid, cid, "claim"), {"claim_id": claim_id()},
                                token=site.keys.agent)
                # Refused either way. A key that was absent has no fingerprint to match.
                unknown, mismatch = (as_sent, bare) if k in released else (bare, as_sent)
                assert unknown.status == 409, unknown
                assert unknown.json["error"]["code"] == "outcome_unknown", unknown
                assert mismatch.status == 422, mismatch
                assert mismatch.json["error"]["code"] == "args_mismatch", mismatch
                events = led.get("/v1/requests/%s" % rid, token=site.keys.router).json["events"]
                assert "marked_unknown" in [e["type"] for e in events], events
            listed = led.get("/v1/tool-calls?state=unknown&limit=1000", token=site.keys.router)
            ids = {(x["request_id"], x["tool_call_id"]) for x in listed.json["items"]}
            assert {(r, c) for r, c, *_ in lost} <= ids, listed
        finally:
            led.stop()
    finally:
        restored.destroy()


def docs_marking_script():
    """The SQL of docs/operations.md's block that marks the keys of a lost interval."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Backup and restore", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"<<'SQL'\n(.*?)\nSQL\n", section, re.S)
    assert len(found) == 1, "one marking block in docs/operations.md's backup section"
    return found[0] + "\n"


def mark_lost(cluster, keys):
    """Runs the docs' block, with lost-keys.csv holding @keys, as the docs say."""
    files = {"lost-keys.csv": "".join("t1,%s,%s\n" % (r, c) for r, c, *_ in keys),
             "mark.sql": docs_marking_script()}
    for name, body in files.items():
        (cluster.dir / name).write_text(body)
        if cluster.as_root:
            shutil.chown(cluster.dir / name, "postgres", "postgres")
    out = cluster.run([PGBIN / "psql", "-h", cluster.dir, "-p", cluster.port, "-U", cluster.user,
                       "-d", "ledger", "-v", "ON_ERROR_STOP=1", "-AtX", "-f", "mark.sql"])
    return out.stdout.splitlines()
