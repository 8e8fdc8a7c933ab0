"""What the operations suites share: a set of keys in every state, written
through a ledgerd, and the answers each must still get after the database
was upgraded, restored or reached through a pooler.

The module is imported by name (tests/ops is on sys.path for its test
files), so its name must differ from every other helper module of tests/.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

from conftest import claim_id, new_id
from pgcluster import free_port, owned_tempdir, wait_for

LONG_LEASE = 600000


def path(rid, cid, action=None):
    p = "/v1/requests/%s/tool-calls/%s" % (rid, cid)
    return p + "/" + action if action else p


def result_text_of(body):
    """The raw text after "result": in a reply body (no re-serialisation)."""
    m = re.search(r'"result"\s*:\s*', body)
    assert m, body
    return body[m.end():]


# Members API 1.1 added to the objects of the review API (an attempt's gateway, a
# request's input_sha256): null on every row an older release wrote, and absent
# from the answers of the releases before 1.1. A release serves the other's rows
# alike when the one differs from the other by these, null, alone.
ADDED_IN_1_1 = ("gateway", "input_sha256")


def without_leases(obj):
    """@obj with every lease_ms_left removed (the one thing that moves on its own),
    and API 1.1's members where they are null."""
    if isinstance(obj, dict):
        return {k: without_leases(v) for k, v in obj.items()
                if k != "lease_ms_left" and not (k in ADDED_IN_1_1 and v is None)}
    if isinstance(obj, list):
        return [without_leases(v) for v in obj]
    return obj


def complete(led, token, rid, cid, fencing_token, raw_result, outcome="succeeded"):
    """Completes with @raw_result sent as it is; returns the answer."""
    body = '{"fencing_token": %d, "outcome": "%s", "result": %s}' % (
        fencing_token, outcome, raw_result)
    return led.post(path(rid, cid, "complete"), raw=body.encode(), token=token)


def agents_complete(led, token, n, threads=4):
    """@n completions from @threads agents at once; returns what each was acknowledged."""
    done, lock = [], threading.Lock()

    def one(i):
        rid, cid = new_id("r"), "call_00"
        args = {"ticket": i}
        r = led.post(path(rid, cid, "claim"), {"claim_id": claim_id(), "tool": "ticket",
                                                "args": args}, token=token)
        assert r.status == 201, r
        raw = '{"ticket_id": "T-%d",   "ok": true}' % i
        c = complete(led, token, rid, cid, r.json["fencing_token"], raw)
        assert c.status == 200, c
        with lock:
            done.append((rid, cid, "ticket", args, raw, "succeeded"))

    def worker(k):
        for i in range(k, n, threads):
            one(i)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(done) == n
    return done


class Keys:
    """Keys in every state a tool call can be in, with an attempt or two.

    fill() writes them through @led; check() asserts what each answers now;
    snapshot() reads every key and request as the review API shows them.
    """

    def __init__(self, agent, router, completed=4):
        self.agent = agent
        self.router = router
        self.n_completed = completed
        self.completed = []  # (rid, cid, tool, args, raw result, outcome)
        self.released = None  # (rid, cid, tool); None once a test settled it
        self.held = None  # (rid, cid, claim_id, fencing_token)
        self.unknown = None  # (rid, cid)
        self.live = None  # (rid, attempt_id, cid of its completed call)
        self.finished = None  # rid of a request its attempt completed

    def claim_body(self, tool, args, cid_claim=None, **extra):
        body = {"claim_id": cid_claim or claim_id(), "tool": tool, "args": args}
        body.update(extra)
        return body

    def fill(self, led):
        a = self.agent
        for i in range(self.n_completed):
            rid, cid = new_id("r"), "call_%02d" % i
            tool, args = "refund", {"order": "o-%d" % i, "cents": 1250 + i}
            # Spacing and key order a re-serialisation would change.
            raw = '{"receipt": "rcpt-%d",  "amount": 12.50, "lines": [1, 2 ,3], "n": %d}' % (i, i)
            r = led.post(path(rid, cid, "claim"), self.claim_body(tool, args), token=a)
            assert r.status == 201, r
            outcome = "failed" if i == self.n_completed - 1 else "succeeded"
            done = complete(led, a, rid, cid, r.json["fencing_token"], raw, outcome)
            assert done.status == 200 and done.json["status"] == "completed", done
            self.completed.append((rid, cid, tool, args, raw, outcome))

        rid, cid = new_id("r"), "call_00"
        r = led.post(path(rid, cid, "claim"), self.claim_body("ticket", {"t": 1}), token=a)
        assert r.status == 201, r
        rel = led.post(path(rid, cid, "release"),
                       {"fencing_token": r.json["fencing_token"], "reason": "not sent"}, token=a)
        assert rel.status == 200, rel
        self.released = (rid, cid, "ticket")

        rid, cid, me = new_id("r"), "call_00", claim_id()
        r = led.post(path(rid, cid, "claim"),
                     self.claim_body("email", {"to": "a@b"}, me, lease_ms=LONG_LEASE), token=a)
        assert r.status == 201, r
        self.held = (rid, cid, me, r.json["fencing_token"])

        rid, cid = new_id("r"), "call_00"
        r = led.post(path(rid, cid, "claim"),
                     self.claim_body("payment", {"eur": 5}, lease_ms=100), token=a)
        assert r.status == 201, r
        self.unknown = (rid, cid)

        # A live attempt with a completed tool call and a first delta sent.
        rid, aid = new_id("r"), new_id("a")
        r = led.post("/v1/requests/%s/attempts" % rid,
                     {"attempt_id": aid, "replica": "gpu-1", "lease_ms": LONG_LEASE},
                     token=self.router)
        assert r.status == 201, r
        c = led.post(path(rid, "call_00", "claim"),
                     self.claim_body("search", {"q": "x"}, attempt_id=aid), token=a)
        assert c.status == 201, c
        done = complete(led, a, rid, "call_00", c.json["fencing_token"], '{"hits": 3}')
        assert done.status == 200, done
        d = led.post("/v1/requests/%s/attempts/%s/deliver" % (rid, aid),
                     {"delivered_output_tokens": 7}, token=self.router)
        assert d.status == 200, d
        self.live = (rid, aid, "call_00")

        rid, aid = new_id("r"), new_id("a")
        r = led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": aid, "replica": "gpu-2"},
                     token=self.router)
        assert r.status == 201, r
        f = led.post("/v1/requests/%s/attempts/%s/finish" % (rid, aid),
                     {"outcome": "completed", "delivered_output_tokens": 11}, token=self.router)
        assert f.status == 200, f
        self.finished = rid

        # The short lease runs out: that call's outcome is unknown from now on.
        time.sleep(0.3)

    def acknowledged(self):
        """The keys whose completion was acknowledged: (rid, cid, tool, args, raw, outcome)."""
        rid, aid, cid = self.live
        return self.completed + [(rid, cid, "search", {"q": "x"}, '{"hits": 3}', "succeeded")]

    def check_replays(self, led, keys=None):
        """Every acknowledged completion (or those of @keys) is replayed byte for byte."""
        rid_live, aid, _ = self.live
        for rid, cid, tool, args, raw, outcome in (self.acknowledged() if keys is None else keys):
            extra = {"attempt_id": aid} if rid == rid_live else {}
            r = led.post(path(rid, cid, "claim"), self.claim_body(tool, args, **extra),
                         token=self.agent)
            assert r.status == 200, (rid, cid, r)
            assert r.json["status"] == "completed" and r.json["outcome"] == outcome, r
            assert r.header("Idempotent-Replayed") == "true", r
            assert result_text_of(r.body).startswith(raw + ","), (raw, r.body)

    def check(self, led):
        """What every key answers: replays, held, unknown, released, attempts."""
        a = self.agent
        self.check_replays(led)

        rid, cid, me, token = self.held
        other = led.post(path(rid, cid, "claim"), self.claim_body("email", {"to": "a@b"}),
                         token=a)
        assert other.status == 409 and other.json["error"]["code"] == "in_progress", other
        mine = led.post(path(rid, cid, "claim"),
                        self.claim_body("email", {"to": "a@b"}, me, lease_ms=LONG_LEASE),
                        token=a)
        assert mine.status == 200 and mine.json["fencing_token"] == token, mine

        rid, cid = self.unknown
        r = led.post(path(rid, cid, "claim"), self.claim_body("payment", {"eur": 5}), token=a)
        assert r.status == 409 and r.json["error"]["code"] == "outcome_unknown", r

        if self.released is not None:
            rid, cid, _ = self.released
            g = led.get(path(rid, cid), token=a)
            assert g.status == 200 and g.json["state"] == "released", g

        rid, aid, _ = self.live
        v = led.get("/v1/requests/%s" % rid, token=self.router)
        assert v.status == 200, v
        assert v.json["request"]["first_delta_sent"] is True, v
        assert [x["state"] for x in v.json["attempts"]] == ["live"], v
        renew = led.post("/v1/requests/%s/attempts/%s/renew" % (rid, aid),
                         {"lease_ms": LONG_LEASE}, token=self.router)
        assert renew.status == 200, renew
        # No attempt after the first delta, whatever binary answers.
        again = led.post("/v1/requests/%s/attempts" % rid, {"attempt_id": new_id("a")},
                         token=self.router)
        assert again.status == 409 and again.json["error"]["code"] == "first_delta_sent", again

        v = led.get("/v1/requests/%s" % self.finished, token=self.router)
        assert v.status == 200 and v.json["request"]["status"] == "completed", v

    def snapshot(self, led):
        """Every key and request as the review API shows it, leases left aside."""
        out = {}
        keys = [(r, c) for r, c, *_ in self.completed]
        keys += [self.held[:2], self.unknown, (self.live[0], self.live[2])]
        if self.released is not None:
            keys.append(self.released[:2])
        for rid, cid in keys:
            g = led.get(path(rid, cid), token=self.router)
            assert g.status == 200, g
            out[path(rid, cid)] = without_leases(json.loads(g.body))
        for rid in sorted({r for r, _ in keys} | {self.finished}):
            g = led.get("/v1/requests/%s" % rid, token=self.router)
            assert g.status == 200, g
            out[rid] = without_leases(json.loads(g.body))
        return out


class PgBouncer:
    """Debian's PgBouncer in front of @cluster, with an ini of its own, on a free
    loopback port, run as the cluster's user (it refuses root) in a directory of
    its own. No unix socket, no system service: nothing another test could meet."""

    def __init__(self, cluster, pool_mode, pool_size=20):
        self.cluster = cluster
        self.dir = owned_tempdir("ledgerd-pgbouncer-")
        self.port = free_port()
        self.ini = self.dir / "pgbouncer.ini"
        self.log = self.dir / "pgbouncer.log"
        self.pidfile = self.dir / "pgbouncer.pid"
        self.proc = None
        users = self.dir / "userlist.txt"
        users.write_text('"%s" ""\n' % cluster.user)
        self.ini.write_text(PGBOUNCER_INI % {
            "host": cluster.dir, "pg_port": cluster.port, "port": self.port, "mode": pool_mode,
            "pool": pool_size, "users": users, "log": self.log, "pid": self.pidfile,
            "user": cluster.user})
        if cluster.as_root:
            for f in (users, self.ini):
                shutil.chown(f, "postgres", "postgres")
        self.start()

    def url(self, db):
        return "host=127.0.0.1 port=%d user=%s dbname=%s" % (self.port, self.cluster.user, db)

    def start(self):
        self.proc = self.cluster.popen(["pgbouncer", self.ini], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)

        def answers():
            if self.proc.poll() is not None:
                raise AssertionError("pgbouncer exited: %s" % self.log_text()[-2000:])
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(answers, 10, "pgbouncer to listen")

    def stop(self):
        """SIGTERM: PgBouncer closes every connection at once (SIGINT would wait for them)."""
        if self.proc is None:
            return
        if self.pidfile.exists():
            os.kill(int(self.pidfile.read_text()), signal.SIGTERM)
        else:
            self.proc.terminate()  # runuser passes it on
        self.proc.wait(timeout=20)
        self.proc = None

    def log_text(self):
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def destroy(self):
        try:
            self.stop()
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.terminate()  # runuser passes SIGTERM on; SIGKILL would orphan it
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


# The settings docs/operations.md shows, with the test's paths and port, and trust on loopback.
PGBOUNCER_INI = """\
[databases]
* = host=%(host)s port=%(pg_port)s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %(port)s
unix_socket_dir =
auth_type = trust
auth_file = %(users)s
pool_mode = %(mode)s
default_pool_size = %(pool)s
max_client_conn = 200
logfile = %(log)s
pidfile = %(pid)s
admin_users = %(user)s
"""
