"""ledgerd behind Debian's PgBouncer (docs/operations.md, "Poolers (PgBouncer)").

Session mode: every call of the tool-call cycle, replays and attempts, from
several agents at once; PgBouncer restarted under a running ledgerd, which
answers 503 while it is gone and reconnects by itself.

Transaction mode, which ledgerd does not support: its named prepared
statements meet sessions that are not theirs. ledgerd recognises that,
logs one line that says what is wrong, and answers the calls it hits
503, never 500 and never a wrong answer.

About 5 s.
"""

import re
import threading

import pytest

from conftest import Ledgerd, claim_id, ledgerd_cmd, new_id
from ops_helpers import Keys, PgBouncer, agents_complete, complete, path
from pgcluster import wait_for

WORKERS = 4


@pytest.fixture(scope="module")
def db(cluster):
    name = "pgbouncer_" + new_id("p").replace("-", "_")
    url = cluster.create_db(name)
    ledgerd_cmd("migrate", "--database-url", url)
    agent, router = (ledgerd_cmd("token", "create", "--tenant", "t1", "--role", role,
                                 "--database-url", url).stdout.strip()
                     for role in ("agent", "router"))
    return name, agent, router


@pytest.fixture
def session_pool(cluster):
    # Room for every connection of one ledgerd: its workers, /readyz's, retention's and
    # the token watch's.
    bouncer = PgBouncer(cluster, "session", pool_size=WORKERS + 3)
    yield bouncer
    bouncer.destroy()


def test_session_mode_serves_every_call(db, session_pool, tmp_path):
    name, agent, router = db
    led = Ledgerd(session_pool.url(name), tmp_path / "l.log",
                  extra_args=["--workers", str(WORKERS)])
    try:
        assert led.get("/readyz").status == 200
        keys = Keys(agent, router)
        keys.fill(led)
        keys.completed += agents_complete(led, agent, 40, threads=8)
        keys.check(led)
    finally:
        led.stop()
    errors = [line for line in led.log_text().splitlines() if '"level":"error"' in line]
    assert errors == [], errors


def test_pgbouncer_restart_ledgerd_reconnects(db, session_pool, tmp_path):
    name, agent, router = db
    led = Ledgerd(session_pool.url(name), tmp_path / "l.log",
                  extra_args=["--workers", str(WORKERS)])
    try:
        keys = Keys(agent, router, completed=2)
        keys.fill(led)
        session_pool.stop()
        gone = led.post(path(new_id(), "call_00", "claim"), {"claim_id": claim_id()},
                        token=agent)
        assert gone.status == 503 and gone.json["error"]["code"] == "store_unavailable", gone
        assert led.get("/readyz").status == 503

        session_pool.start()
        rid = new_id()

        def claimed():
            r = led.post(path(rid, "call_00", "claim"), {"claim_id": claim_id(), "tool": "t"},
                         token=agent)
            assert r.status in (201, 503), r
            return r if r.status == 201 else None

        r = wait_for(claimed, 15, "ledgerd to reconnect through pgbouncer", interval=0.2)
        done = complete(led, agent, rid, "call_00", r.json["fencing_token"], '{"ok": 1}')
        assert done.status == 200, done
        assert led.get("/readyz").status == 200
        keys.check(led)
        assert led.proc.poll() is None  # the same process throughout
    finally:
        led.stop()


def test_transaction_mode_is_refused_with_a_clear_error(cluster, db, tmp_path):
    name, agent, _ = db
    # One server session for all of ledgerd's connections: they must meet.
    bouncer = PgBouncer(cluster, "transaction", pool_size=1)
    led = Ledgerd(bouncer.url(name), tmp_path / "l.log",
                  extra_args=["--workers", str(WORKERS)])
    answers, lock = [], threading.Lock()

    def agent_run(k):
        for i in range(6):
            rid, n = new_id(), "%d-%d" % (k, i)
            r = led.post(path(rid, "call_00", "claim"), {"claim_id": claim_id(), "tool": "t"},
                         token=agent)
            got = [r]
            if r.status == 201:
                raw = '{"n": "%s"}' % n
                got.append(complete(led, agent, rid, "call_00", r.json["fencing_token"], raw))
                got.append(led.post(path(rid, "call_00", "claim"),
                                    {"claim_id": claim_id(), "tool": "t"}, token=agent))
            with lock:
                answers.append((n, got))

    try:
        ts = [threading.Thread(target=agent_run, args=(k,)) for k in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        led.stop()
        bouncer.destroy()

    statuses = [r.status for _, got in answers for r in got]
    # Never a 500, never a wrong answer: a replay is the call's own result.
    assert set(statuses) <= {200, 201, 409, 503}, statuses
    for n, got in answers:
        if len(got) == 3 and got[2].status == 200:
            assert got[2].json["result"] == {"n": n}, got
        for r in got:
            if r.status == 503:
                assert r.json["error"]["code"] == "store_unavailable", r
    assert 503 in statuses, "one pooled session for four connections must be met"
    said = [line for line in led.log_text().splitlines()
            if "a pooler in transaction or statement mode" in line]
    assert len(said) == 1, said
    assert re.search(r'"level":"error".*prepared statement \\"\w+\\" (already exists|does not '
                     r'exist).*needs a pooler in session mode', said[0]), said[0]
