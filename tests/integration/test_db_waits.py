"""Every wait for the database is bounded (--db-timeout), whatever stalls it.

A database that stops answering must never hang a call: not a stopped
server (SIGSTOP, over its unix socket), not a TCP link that goes silent
mid-query, not a COMMIT that waits for a synchronous standby that is gone.
Each is answered `503 store_unavailable` with `Retry-After` within the
bound; the COMMIT is never cancelled (a cancelled synchronous wait is a
commit that is visible but not durable), so a retry of the same call later
learns how it stands. The queue is bounded, `/readyz` never waits behind
the calls, and no answer reports more lease than is left when it is sent.

Each test runs its own PostgreSQL cluster: they stop it, or change how it
commits.
"""

import concurrent.futures
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import TEST_SETTINGS, Cluster, Ledgerd, claim_id, hold_request_lock, ledgerd_cmd, new_id
from integration_helpers import metric

BOUND_MS = 1000
SLACK_S = 2.5  # a loaded 2-core machine (a sanitizer build, suites in parallel) answers this late
TRANSIT_MS = 250  # the client's connect, send and read on a loaded machine, not ledgerd's time


@pytest.fixture
def db(tmp_path):
    cluster = Cluster.new(dict(TEST_SETTINGS, max_connections=50))
    url = cluster.create_db("waits")
    ledgerd_cmd("migrate", "--database-url", url)
    token = ledgerd_cmd("token", "create", "--tenant", "t1", "--role", "agent",
                        "--database-url", url).stdout.strip()
    yield cluster, url, token
    resume(cluster)
    cluster.destroy()


def start(url, tmp_path, *args):
    return Ledgerd(url, tmp_path / ("ledgerd-%s.log" % new_id("l")),
                   extra_args=["--db-timeout", "%dms" % BOUND_MS] + list(args))


def pids(cluster):
    """The postmaster and every process it started."""
    main = int((cluster.data / "postmaster.pid").read_text().split()[0])
    out = subprocess.run(["pgrep", "-P", str(main)], capture_output=True, text=True).stdout
    return [main] + [int(p) for p in out.split()]


def pause(cluster):
    for pid in pids(cluster):
        os.kill(pid, signal.SIGSTOP)


def resume(cluster):
    try:
        for pid in pids(cluster):
            os.kill(pid, signal.SIGCONT)
    except (OSError, ValueError):
        pass


def claim(led, token, rid, cl, lease_ms=30000, timeout=20):
    path = "/v1/requests/%s/tool-calls/call_01/claim" % rid
    sent = time.monotonic()
    r = led.post(path, {"claim_id": cl, "lease_ms": lease_ms}, token=token, timeout=timeout)
    return r, time.monotonic() - sent


def assert_unavailable_in_time(r, took):
    assert r.status == 503 and r.code == "store_unavailable", r
    assert r.json["error"]["retry_after_ms"] > 0 and int(r.header("Retry-After")) >= 1, r
    assert took <= BOUND_MS / 1000 + SLACK_S, "answered after %.1f s" % took


def timed_get(led, path):
    sent = time.monotonic()
    r = led.get(path, timeout=20)
    return r, time.monotonic() - sent


def serves_again(led, token, within_s=20):
    deadline = time.monotonic() + within_s
    while True:
        r, _ = claim(led, token, new_id(), claim_id())
        if r.status == 201:
            return
        assert r.status == 503, r
        assert time.monotonic() < deadline, "ledgerd did not serve again"
        time.sleep(0.2)


def ready_again(led, within_s=10):
    """/readyz says 200 again once its own worker has settled what it waited on."""
    deadline = time.monotonic() + within_s
    while timed_get(led, "/readyz")[0].status != 200:
        assert time.monotonic() < deadline, "/readyz did not say ready again"
        time.sleep(0.1)


def retried_claims_agree(led, token, sent):
    """Each 503'd claim, retried with its claim_id, is claimed: once, by that holder."""
    for rid, cl in sent:
        r, _ = claim(led, token, rid, cl)
        assert r.status in (200, 201), r
        assert r.json["status"] == "claimed" and r.json["fencing_token"] == 1, r


def test_a_stopped_database_is_answered_503_within_the_bound(db, tmp_path):
    cluster, url, token = db
    led = start(url, tmp_path, "--workers", "2")
    try:
        assert claim(led, token, new_id(), claim_id())[0].status == 201
        pause(cluster)
        sent = [(new_id(), claim_id()) for _ in range(12)]
        with concurrent.futures.ThreadPoolExecutor(len(sent)) as pool:
            answers = list(pool.map(lambda k: claim(led, token, *k), sent))
        for r, took in answers:
            assert_unavailable_in_time(r, took)
        r, took = timed_get(led, "/readyz")
        assert r.status == 503 and took <= BOUND_MS / 1000 + SLACK_S, (r, took)
        r, took = timed_get(led, "/healthz")
        assert r.status == 200 and took < 0.5, (r, took)
        assert metric(led, "ledger_store_timeouts_total") >= 1
        resume(cluster)
        serves_again(led, token)
        ready_again(led)
        retried_claims_agree(led, token, sent)
        assert led.proc.poll() is None
    finally:
        resume(cluster)
        led.stop()


class SilentLink:
    """A TCP link to the cluster's unix socket that can go silent: nothing
    passes either way and nothing is closed, as when a network drops."""

    def __init__(self, cluster):
        self.target = str(cluster.dir / (".s.PGSQL.%d" % cluster.port))
        self.silent = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX)
            server.connect(self.target)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while self.silent.is_set():
                    time.sleep(0.05)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.listener.close()


def test_a_silent_tcp_link_is_answered_503_within_the_bound(db, tmp_path):
    cluster, url, token = db
    link = SilentLink(cluster)
    tcp_url = "host=127.0.0.1 port=%d user=%s dbname=waits" % (link.port, cluster.user)
    led = start(tcp_url, tmp_path, "--workers", "2")
    try:
        assert claim(led, token, new_id(), claim_id())[0].status == 201
        link.silent.set()
        sent = [(new_id(), claim_id()) for _ in range(6)]
        with concurrent.futures.ThreadPoolExecutor(len(sent)) as pool:
            answers = list(pool.map(lambda k: claim(led, token, *k), sent))
        for r, took in answers:
            assert_unavailable_in_time(r, took)
        r, took = timed_get(led, "/readyz")
        assert r.status == 503 and took <= BOUND_MS / 1000 + SLACK_S, (r, took)
        link.silent.clear()
        serves_again(led, token)
        retried_claims_agree(led, token, sent)
    finally:
        link.silent.clear()
        led.stop()
        link.close()


class CuttableLink(SilentLink):
    """A SilentLink whose connections can also be cut at once, as when the
    machine on the other side is gone and its connections reset."""

    def __init__(self, cluster):
        self.socks = []
        super().__init__(cluster)

    def _pipe(self, src, dst):
        self.socks += [src, dst]
        super()._pipe(src, dst)

    def cut(self):
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.socks = []


def test_a_reconnect_to_silent_hosts_ends_at_the_calls_deadline(db, tmp_path):
    """A worker whose connection broke reconnects before its call, to a
    multi-host URL whose three hosts accept and then say nothing. libpq's
    connect_timeout (2 s at least, per host) made that 6 s; the call is
    answered 503 within --db-timeout, and once the hosts answer again
    ledgerd serves again."""
    cluster, url, token = db
    links = [CuttableLink(cluster) for _ in range(3)]
    multi = "host=127.0.0.1,127.0.0.1,127.0.0.1 port=%s user=%s dbname=waits" % (
        ",".join(str(link.port) for link in links), cluster.user)
    led = start(multi, tmp_path, "--workers", "1", "--unavailable-retry", "100ms")
    try:
        assert claim(led, token, new_id(), claim_id())[0].status == 201
        for link in links:
            link.silent.set()
        for link in links:
            link.cut()
        time.sleep(0.5)  # past the pause between two attempts to connect
        took = []
        for _ in range(3):
            r, t = claim(led, token, new_id(), claim_id())
            assert_unavailable_in_time(r, t)
            took.append(t)
            time.sleep(0.3)
        print("answered after", ["%.2f s" % t for t in took])
        assert max(took) <= BOUND_MS / 1000 + 1.0, took
        for link in links:
            link.silent.clear()
        serves_again(led, token)
    finally:
        for link in links:
            link.silent.clear()
        led.stop()
        for link in links:
            link.close()


def test_readyz_follows_the_database_past_a_host_that_vanished(db, tmp_path):
    """The first host of a two-host URL goes silent for good (a machine
    gone: no reset), while the second still answers. A readiness check
    stuck on the first owes nothing (a read): its connection is closed at
    once and the next check connects to the second, rather than waiting up
    to 30 s to settle what a call may owe."""
    cluster, url, token = db
    gone, live = CuttableLink(cluster), CuttableLink(cluster)
    multi = "host=127.0.0.1,127.0.0.1 port=%d,%d user=%s dbname=waits" % (
        gone.port, live.port, cluster.user)
    led = start(multi, tmp_path, "--workers", "2")
    try:
        assert claim(led, token, new_id(), claim_id())[0].status == 201
        assert timed_get(led, "/readyz")[0].status == 200
        time.sleep(1.1)  # past the second in which a ready check answers the probes
        gone.silent.set()
        r, took = timed_get(led, "/readyz")
        assert r.status == 503 and took <= BOUND_MS / 1000 + SLACK_S, (r, took)
        t0 = time.monotonic()
        ready_again(led, within_s=20)
        print("ready again after %.2f s" % (time.monotonic() - t0))
        assert time.monotonic() - t0 <= 3 * BOUND_MS / 1000 + SLACK_S
    finally:
        gone.silent.clear()
        led.stop()
        gone.close()
        live.close()


def set_standby(cluster, names):
    cluster.psql("ALTER SYSTEM SET synchronous_standby_names = '%s'" % names)
    cluster.psql("SELECT pg_reload_conf()")
    time.sleep(0.3)  # the backends take the new setting at their next command


def sync_waiters(cluster):
    return int(cluster.psql("SELECT count(*) FROM pg_stat_activity WHERE "
                            "application_name = 'ledgerd' AND wait_event = 'SyncRep'")[0][0])


def test_a_commit_waiting_for_a_lost_standby_is_503_and_never_cancelled(db, tmp_path):
    """synchronous_mode_strict with no standby left: every COMMIT waits."""
    cluster, url, token = db
    led = start(url, tmp_path, "--workers", "1")
    try:
        assert claim(led, token, new_id(), claim_id())[0].status == 201
        set_standby(cluster, "ghost")
        rid, cl = new_id(), claim_id()
        r, took = claim(led, token, rid, cl)
        first_answered = time.monotonic()
        assert_unavailable_in_time(r, took)
        # Still waiting in the server, uncancelled: it becomes durable or nothing.
        assert sync_waiters(cluster) == 1
        # The only worker waits on it: ledgerd says so at once, and is not ready.
        r, took = claim(led, token, new_id(), claim_id())
        assert r.status == 503 and took < 0.5, (r, took)
        r, took = timed_get(led, "/readyz")
        assert r.status == 503 and took <= BOUND_MS / 1000 + SLACK_S, (r, took)
        assert metric(led, 'ledger_store_shed_total{reason="stalled"}') >= 1
        assert metric(led, "ledger_store_stalled_workers") == 1
        set_standby(cluster, "")
        serves_again(led, token)
        # The commit went through when the standby requirement went away: the
        # holder's retry is its claim, with what is left of its lease.
        retried = time.monotonic()
        r, _ = claim(led, token, rid, cl)
        assert r.status == 200 and r.json["fencing_token"] == 1, r
        assert r.json["lease_ms"] <= 30000 - (retried - first_answered) * 1000, r
        assert sync_waiters(cluster) == 0
    finally:
        led.stop()


def test_no_answer_reports_more_lease_than_is_left(db, tmp_path):
    cluster, url, token = db
    led = start(url, tmp_path, "--workers", "1", "--db-timeout", "6s")
    try:
        assert claim(led, token, new_id(), claim_id())[0].status == 201
        for lease_ms in (4000, 1000):
            set_standby(cluster, "ghost")
            rid, cl = new_id(), claim_id()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pending = pool.submit(claim, led, token, rid, cl, lease_ms)
                time.sleep(1.5)  # the COMMIT waits this long for its standby
                set_standby(cluster, "")
                r, took = pending.result()
            if lease_ms > took * 1000:
                assert r.status == 201, r
                # What was left as the answer went out: the client's own
                # sending and reading (TRANSIT_MS at most here) is its margin.
                assert r.json["lease_ms"] <= lease_ms - took * 1000 + TRANSIT_MS, (r, took)
            else:
                # Claimed, but its lease ran out before the answer could go:
                # never a 201 with no time to act.
                assert r.status == 503 and r.code == "store_unavailable", (r, took)
                again, _ = claim(led, token, rid, cl, lease_ms)
                assert again.status == 409 and again.code == "outcome_unknown", again
    finally:
        led.stop()


def wait_for(cluster, sql, what, within_s=10):
    deadline = time.monotonic() + within_s
    while int(cluster.psql(sql, "waits")[0][0]) == 0:
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def worker_waits_on_the_lock(cluster):
    wait_for(cluster, "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
             "'ledgerd' AND wait_event_type = 'Lock'", "ledgerd's worker never waited")


def hold_the_only_worker(cluster, led, token, pool, seconds):
    """A claim under a request another session locks for @seconds: ledgerd's
    one worker waits on it. Returns (the locking thread, the claim's future)."""
    blocker = new_id()
    assert claim(led, token, blocker, claim_id())[0].status == 201
    lock = hold_request_lock(lambda q: cluster.psql(q, "waits"), blocker, seconds)
    held = pool.submit(lambda: led.post("/v1/requests/%s/tool-calls/call_02/claim" % blocker,
                                        {"claim_id": claim_id()}, token=token, timeout=20))
    worker_waits_on_the_lock(cluster)
    return lock, held


def test_the_queue_is_bounded(db, tmp_path):
    cluster, url, token = db
    led = start(url, tmp_path, "--workers", "1", "--queue-max", "3", "--batch-max", "1",
                "--db-timeout", "5s")
    try:
        # The only worker waits on a lock; then three calls fill the queue.
        with concurrent.futures.ThreadPoolExecutor(13) as pool:
            lock, held = hold_the_only_worker(cluster, led, token, pool, 2)
            sent = [(new_id(), claim_id()) for _ in range(12)]
            answers = list(pool.map(lambda k: claim(led, token, *k), sent))
            assert held.result().status == 201
        lock.join()
        shed = [(r, took) for r, took in answers if r.status == 503]
        served = [r for r, _ in answers if r.status == 201]
        assert len(shed) >= 12 - 3 - 1 and len(served) + len(shed) == 12, answers
        for r, took in shed:
            assert r.code == "store_unavailable" and took < 1.0, (r, took)
        assert metric(led, 'ledger_store_shed_total{reason="queue_full"}') >= len(shed) - 1
        retried_claims_agree(led, token, sent)
    finally:
        led.stop()


def test_readyz_never_waits_behind_the_calls(db, tmp_path):
    cluster, url, token = db
    led = start(url, tmp_path, "--workers", "1", "--db-timeout", "5s")
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            lock, held = hold_the_only_worker(cluster, led, token, pool, 2.5)
            assert metric(led, "ledger_store_queue_depth") == 0  # the worker has it
            r, took = timed_get(led, "/readyz")
            assert r.status == 200 and took < 0.5, (r, took)
            assert not held.done()
            assert held.result().status == 201
        lock.join()
    finally:
        led.stop()
