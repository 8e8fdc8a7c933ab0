"""Schema upgrades across releases (docs/operations.md, "Upgrading the schema").

The previous release (the commit in tests/ops/previous_release) is built from
git history into build/previous-release/<commit>/ once and reused. Its
ledgerd migrates a database and fills it with keys in every state; this
tree's ledgerd migrates that database in place and must answer every key
as before. Migration 8 (results not kept) is not additive: the previous
ledgerd refuses the database this one migrated, at start, by /readyz (while
it runs) and by migrate, and never serves it. Last, the rule for schemas
that differ, on this tree's ledgerd: a newer schema whose migrations are
additive is served, one that names a newer oldest binary is refused at
start, by /readyz and by migrate.

A first run builds the previous release's ledgerd (5 to 10 s on 2 cores)
and takes about 20 s; later runs take about 10 s.
"""

import fcntl
import os
import shutil
import subprocess

import pytest

from conftest import LEDGERD, ROOT, Ledgerd, ledgerd_cmd, new_id
from ops_helpers import Keys
from pgcluster import wait_for

RELEASE_FILE = ROOT / "tests" / "ops" / "previous_release"
CACHE = ROOT / "build" / "previous-release"


def releases():
    """The commits the file names, newest first: one per line that is not a comment."""
    lines = [line.split("#")[0].strip() for line in RELEASE_FILE.read_text().splitlines()]
    commits = [line for line in lines if line]
    assert commits, "%s must name at least one commit" % RELEASE_FILE
    return commits


def previous_commit():
    """The previous release: the file's first commit."""
    return releases()[0]


def git(*args, check=True, timeout=60):
    return subprocess.run(["git", "-C", str(ROOT)] + list(args), capture_output=True, text=True,
                          check=check, timeout=timeout)


def resolve(commit):
    """The full hash of @commit, fetching the whole history of a shallow clone if needed."""
    found = git("rev-parse", "--verify", "--quiet", commit + "^{commit}", check=False)
    if found.returncode == 0:
        return found.stdout.strip()
    shallow = git("rev-parse", "--is-shallow-repository", check=False).stdout.strip()
    tried = "the clone is not shallow, so nothing more can be fetched"
    if shallow == "true":
        fetched = git("fetch", "--unshallow", check=False, timeout=300)
        tried = "git fetch --unshallow said: %s" % (fetched.stderr.strip() or "nothing")
        found = git("rev-parse", "--verify", "--quiet", commit + "^{commit}", check=False)
        if found.returncode == 0:
            return found.stdout.strip()
    pytest.fail("the previous release %s (tests/ops/previous_release) is not in this "
                "repository's history; %s. Clone the repository with its history to run "
                "the upgrade test." % (commit, tried), pytrace=False)


def build_previous(commit):
    """build/previous-release/<commit>/ledgerd, built from git history on first use."""
    out = CACHE / commit / "ledgerd"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run building it: wait for that one
        if out.exists():
            return out
        src = CACHE / commit / "src"
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", commit],
                                   stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(src)], stdin=archive.stdout, check=True)
        archive.stdout.close()
        assert archive.wait() == 0, "git archive %s failed" % commit
        # The release's own build settings, not the ones this run was given.
        env = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "SANITIZE", "CFLAGS",
                            "CPPFLAGS", "LDFLAGS")}
        made = subprocess.run(["make", "-C", str(src), "-j%d" % (os.cpu_count() or 2),
                               "build/ledgerd"], capture_output=True, text=True, env=env,
                              timeout=900)
        assert made.returncode == 0, "building %s failed:\n%s" % (commit, made.stderr[-3000:])
        tmp = out.with_suffix(".tmp")
        shutil.copy2(src / "build" / "ledgerd", tmp)
        os.replace(tmp, out)
        shutil.rmtree(src, ignore_errors=True)
        return out


@pytest.fixture(scope="module")
def previous():
    return build_previous(resolve(previous_commit()))


@pytest.fixture(scope="module", params=releases()[1:])
def older(request):
    """An older release, upgraded in place but not served again on the new schema."""
    return build_previous(resolve(request.param))


def run(binary, *args, check=True):
    return subprocess.run([str(binary)] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=60, check=check)


def tokens(binary, url):
    return [run(binary, "token", "create", "--tenant", "t1", "--role", role,
                "--database-url", url).stdout.strip() for role in ("agent", "router")]


def test_previous_release_is_older(previous):
    """The file names a release this tree descends from, and it is built as such."""
    commit = resolve(previous_commit())
    assert git("merge-base", "--is-ancestor", commit, "HEAD", check=False).returncode == 0
    assert run(previous, "version").stdout.startswith("ledgerd ")


def upgrade_in_place(cluster, release, tmp_path):
    """A database filled by @release, migrated in place by this tree's ledgerd, which
    answers every key as before and writes to it. @return (url, keys, snapshot after)."""
    url = cluster.create_db("upgrade_" + new_id("u").replace("-", "_"))
    migrated = run(release, "migrate", "--database-url", url)
    assert "migrations applied" in migrated.stdout, migrated
    agent, router = tokens(release, url)

    old = Ledgerd(url, tmp_path / "previous.log", binary=release)
    try:
        keys = Keys(agent, router)
        keys.fill(old)
        before = keys.snapshot(old)
    finally:
        old.stop()

    # The new binary migrates in place; what the old one wrote reads the same.
    up = ledgerd_cmd("migrate", "--database-url", url)
    assert up.returncode == 0, up
    new = Ledgerd(url, tmp_path / "new.log")
    try:
        r = new.get("/readyz")
        assert r.status == 200 and r.json["status"] == "ready", r
        assert keys.snapshot(new) == before
        keys.check(new)
        # The new binary writes: a released key claimed again and completed,
        # and a new key claimed and completed.
        rid, cid, tool = keys.released
        c = new.post("/v1/requests/%s/tool-calls/%s/claim" % (rid, cid),
                     keys.claim_body(tool, {"t": 1}), token=agent)
        assert c.status == 201 and c.json["fencing_token"] == 2, c
        done = new.post("/v1/requests/%s/tool-calls/%s/complete" % (rid, cid),
                        raw=b'{"fencing_token": 2, "outcome": "succeeded", "result": {"id":  9}}',
                        token=agent)
        assert done.status == 200, done
        keys.completed.append((rid, cid, tool, {"t": 1}, '{"id":  9}', "succeeded"))
        keys.released = None
        rid, cid = new_id("r"), "call_new"
        c = new.post("/v1/requests/%s/tool-calls/%s/claim" % (rid, cid),
                     keys.claim_body("mail", {"t": 2}), token=agent)
        assert c.status == 201, c
        done = new.post("/v1/requests/%s/tool-calls/%s/complete" % (rid, cid),
                        raw=b'{"fencing_token": 1, "outcome": "succeeded", "result": {"id": 10}}',
                        token=agent)
        assert done.status == 200, done
        keys.completed.append((rid, cid, "mail", {"t": 2}, '{"id": 10}', "succeeded"))
        # And a result kept as its digest only: what no older ledgerd may read.
        rid, cid = new_id("r"), "call_digest"
        c = new.post("/v1/requests/%s/tool-calls/%s/claim" % (rid, cid),
                     keys.claim_body("mail", {"t": 3}), token=agent)
        assert c.status == 201, c
        digest = {"bytes": 2 << 20, "sha256": "cd" * 32}
        done = new.post("/v1/requests/%s/tool-calls/%s/complete" % (rid, cid),
                        {"fencing_token": 1, "outcome": "succeeded", "result_not_kept": digest},
                        token=agent)
        assert done.status == 200 and done.json["result_kept"] is False, done
        again = new.post("/v1/requests/%s/tool-calls/%s/claim" % (rid, cid),
                         keys.claim_body("mail", {"t": 3}), token=agent)
        assert again.status == 409 and again.json["error"]["code"] == "result_not_kept", again
        after = keys.snapshot(new)
    finally:
        new.stop()
    return url, keys, after


def test_older_release_upgrades_in_place(cluster, older, tmp_path):
    url, keys, _ = upgrade_in_place(cluster, older, tmp_path)
    # The attempt the older release began and delivered ends on this one: its
    # last events go in its row (sql/009), after those event_log holds.
    new = Ledgerd(url, tmp_path / "finish.log")
    try:
        rid, aid, _ = keys.live
        f = new.post("/v1/requests/%s/attempts/%s/finish" % (rid, aid),
                     {"outcome": "completed", "delivered_output_tokens": 3}, token=keys.router)
        assert f.status == 200, f
        v = new.get("/v1/requests/%s" % rid, token=keys.router)
        types = [e["type"] for e in v.json["events"] if e.get("attempt_id") == aid]
        assert types[0] == "attempt_created" and "first_delta" in types, types
        assert types[-2:] == ["attempt_finished", "request_status"], types
        assert v.json["request"]["status"] == "completed", v
    finally:
        new.stop()


def refused(binary, url):
    """@binary (a release before migration 8) refuses the database at @url, at
    start and on migrate, naming the schema it needs."""
    line = ("the database is at schema %d, which a ledgerd of schema 8 or newer must serve"
            % mine())
    started = subprocess.run([str(binary), "serve", "--database-url", url, "--listen",
                              "127.0.0.1:0"], capture_output=True, text=True, timeout=30)
    assert started.returncode == 1 and line in started.stderr, started
    assert "listening" not in started.stderr
    again = run(binary, "migrate", "--database-url", url, check=False)
    assert again.returncode == 1 and line in again.stderr, again


def test_upgrade_in_place_then_the_previous_release_refuses_it(cluster, previous, tmp_path):
    """Migration 8 is not additive: a rollback of the binaries alone is not
    possible past it, and the previous release says so instead of serving
    rows it would misread (a final call with no result)."""
    url, keys, after = upgrade_in_place(cluster, previous, tmp_path)
    refused(previous, url)
    # Nothing of the database changed by being refused.
    new = Ledgerd(url, tmp_path / "new-again.log")
    try:
        assert keys.snapshot(new) == after
    finally:
        new.stop()


def test_a_previous_release_still_running_is_unready_once_migrated(cluster, previous,
                                                                   tmp_path):
    """The previous release, left running while this tree migrates (which the
    release notes of migration 8 say not to do), leaves readiness at the next
    probe, so that its load balancer stops sending it calls; started again,
    it exits."""
    url = cluster.create_db("running_" + new_id("u").replace("-", "_"))
    run(previous, "migrate", "--database-url", url)
    old = Ledgerd(url, tmp_path / "previous.log", binary=previous)
    try:
        assert old.get("/readyz").status == 200
        assert ledgerd_cmd("migrate", "--database-url", url).returncode == 0
        r = wait_for(lambda: (lambda x: x if x.status == 503 else None)(old.get("/readyz")),
                     5, "/readyz to see schema 8")
        err = r.json["error"]
        assert (err["code"], err["schema_version"], err["oldest_binary_schema"]) == (
            "schema_mismatch", mine(), 8), r
    finally:
        old.stop()
    refused(previous, url)


def test_token_made_by_one_release_works_in_the_other(cluster, previous, tmp_path):
    url = cluster.create_db("tokens_" + new_id("t").replace("-", "_"))
    ledgerd_cmd("migrate", "--database-url", url)
    agent, _ = tokens(previous, url)
    new = Ledgerd(url, tmp_path / "new.log")
    try:
        r = new.post("/v1/requests/%s/tool-calls/call_00/claim" % new_id(), {}, token=agent)
        assert r.status == 201, r
    finally:
        new.stop()


# --- the rule when the schemas differ, held by this tree's ledgerd ----------------

def future_migration(cluster, db, version, oldest=None, sql=""):
    """What `ledgerd migrate` of a later release would do: its SQL and its record."""
    cluster.psql("BEGIN; %s INSERT INTO ledger_schema (version, name, oldest_binary_schema) "
                 "VALUES (%d, '%03d_future.sql', %s); COMMIT"
                 % (sql, version, version, "NULL" if oldest is None else oldest), db)


def mine():
    out = run(LEDGERD, "version").stdout  # "ledgerd 0.1.0 (schema 3)"
    return int(out.split("(schema ")[1].rstrip(")\n"))


def test_newer_additive_schema_is_served_while_running(cluster, tmp_path):
    db = "additive_" + new_id("a").replace("-", "_")
    url = cluster.create_db(db)
    ledgerd_cmd("migrate", "--database-url", url)
    agent, router = tokens(LEDGERD, url)
    led = Ledgerd(url, tmp_path / "l.log")
    try:
        keys = Keys(agent, router, completed=2)
        keys.fill(led)
        # Migrate first, binaries after: the running ledgerd keeps serving.
        future_migration(cluster, db, mine() + 1,
                         sql="ALTER TABLE tool_calls ADD COLUMN future_note text; "
                             "CREATE TABLE future_things (id bigint PRIMARY KEY);")
        r = wait_for(lambda: (lambda x: x if x.json.get("schema_version") == mine() + 1
                                         else None)(led.get("/readyz")),
                     5, "/readyz to see the new schema")
        assert r.status == 200, r
        keys.check(led)
        fresh = Keys(agent, router, completed=2)
        fresh.fill(led)
        fresh.check(led)
        led.restart()
        assert "newer than this ledgerd's %d; its migrations since are additive" % mine() \
            in led.log_text()
        keys.check(led)
    finally:
        led.stop()
    # A rollback's migrate step: nothing to apply, and it succeeds.
    m = ledgerd_cmd("migrate", "--database-url", url)
    assert m.stdout.startswith("schema at version %d (0 migrations applied)" % (mine() + 1)), m


def test_newer_schema_for_newer_binaries_is_refused(cluster, tmp_path):
    db = "breaking_" + new_id("b").replace("-", "_")
    url = cluster.create_db(db)
    ledgerd_cmd("migrate", "--database-url", url)
    led = Ledgerd(url, tmp_path / "l.log")
    try:
        assert led.get("/readyz").status == 200
        # An additive migration, then one that older binaries must not serve.
        future_migration(cluster, db, mine() + 1)
        future_migration(cluster, db, mine() + 2, oldest=mine() + 2,
                         sql="ALTER TABLE tool_calls RENAME COLUMN owner TO holder_label;")
        # A probe within a second of a ready check gets that check's answer.
        r = wait_for(lambda: (lambda x: x if x.status == 503 else None)(led.get("/readyz")),
                     5, "/readyz to see the new schema")
        assert r.json["error"]["code"] == "schema_mismatch", r
        err = r.json["error"]
        assert (err["schema_version"], err["expected_schema_version"],
                err["oldest_binary_schema"]) == (mine() + 2, mine(), mine() + 2), r
        assert "newer than this ledgerd may serve" in err["message"], r
    finally:
        led.stop()

    started = subprocess.run([str(LEDGERD), "serve", "--database-url", url, "--listen",
                              "127.0.0.1:0"], capture_output=True, text=True, timeout=30)
    assert started.returncode == 1, started
    assert ("ledgerd: the database is at schema %d, which a ledgerd of schema %d or newer "
            "must serve; this one knows schema %d" % (mine() + 2, mine() + 2, mine())
            in started.stderr), started.stderr
    assert "listening" not in started.stderr

    m = ledgerd_cmd("migrate", "--database-url", url, check=False)
    assert m.returncode == 1 and "a ledgerd of schema %d or newer must serve" % (mine() + 2) \
        in m.stderr, m


def test_older_schema_is_not_ready_until_migrated(cluster, tmp_path):
    """A new binary started before the migration waits, unready, and answers nothing wrong."""
    url = cluster.create_db("older_" + new_id("o").replace("-", "_"))
    led = Ledgerd(url, tmp_path / "l.log")
    try:
        assert "the database is at schema 0, older than this ledgerd's %d" % mine() \
            in led.log_text()
        r = led.get("/readyz")
        assert r.status == 503 and r.json["error"]["code"] == "schema_mismatch", r
        assert "run ledgerd migrate" in r.json["error"]["message"], r
        r = led.post("/v1/requests/%s/tool-calls/call_00/claim" % new_id(), {},
                     token="x" * 43)
        assert r.status == 503, r
        ledgerd_cmd("migrate", "--database-url", url)
        assert led.get("/readyz").status == 200
        agent, _ = tokens(LEDGERD, url)
        r = led.post("/v1/requests/%s/tool-calls/call_00/claim" % new_id(), {}, token=agent)
        assert r.status == 201, r
    finally:
        led.stop()
