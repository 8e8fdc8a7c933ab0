"""ledgerd on a Patroni cluster: failovers under load, and what survives them.

One cluster for the module (patroni_cluster.py): etcd and two Patroni
nodes running PostgreSQL 15 with `synchronous_mode` and
`synchronous_mode_strict`, fsync on, Patroni's loop at 1 s and its leader
key's TTL at 5 s. ledgerd runs on a multi-host URL naming both nodes with
`target_session_attrs=read-write`, so it writes to whichever is the
primary, and with `--replay-cache 0`, so every replay is read from the
database. Each test starts from a healthy cluster (a primary streaming to
its synchronous standby; a test that left a node down has it started
again) and ends with one.

The four failure cases run the same load (ha_load.py): 16 agent threads,
in pairs racing for the same keys, claim, execute into a shared execution
log and complete tool calls, retrying a 503 with the same body after its
`retry_after_ms`. Some hundred completions are acknowledged, then:

1. `test_primary_postmaster_killed`: the primary's postmaster is SIGKILLed
   while ledgerd's commits wait for the standby (its WAL receiver stopped a
   moment). Patroni restarts it in place or fails over, whichever it
   decides; ledgerd follows.
2. `test_primary_node_lost`: the same, but Patroni and every PostgreSQL
   process of the primary are SIGKILLed together: the synchronous standby
   is promoted once the leader key's TTL runs out. Strict synchronous mode
   lets the promoted primary commit nothing until a standby streams
   again, so the lost node's Patroni is then started again on what the
   node left (a replacement): Patroni rewinds it and it rejoins as the
   standby.
3. `test_planned_switchover`: a switchover through Patroni's REST API.
4. `test_last_standby_lost`: the standby node is lost, so every commit on
   the primary waits. ledgerd runs with `--db-timeout 2s`: every call must
   be answered within a bound, `503 store_unavailable` with `Retry-After`
   and `retry_after_ms` once a database wait passed the timeout; no
   `201 claimed` may report more `lease_ms` than the lease left when it
   arrived (its lease_ms <= the requested lease minus the time from sending
   to receiving); `/healthz` answers 200 and `/readyz` answers at all within
   about a second throughout. Then the standby is started again, commits
   flow, and the load completes.

After each case the test proves, and prints (pytest -s) with a one-line
summary: no acknowledged completion was lost (every completion answered
200 is replayed, with its exact result, to a claim with a new claim_id,
and is stored on the primary of the end), no key was executed twice, and
every execution had fencing token 1; how long after the fault ledgerd,
the same process, served writes again; and what the clients were answered
meanwhile, by status and code.

`test_cancelled_sync_commit_is_not_durable`: with the standby lost, a
claim's COMMIT waits for it; cancelling that wait (`pg_cancel_backend`)
makes PostgreSQL report success with a WARNING although the commit exists
only on the primary. ledgerd must answer `503 store_unavailable`, not 201;
once the standby is back, the same claim retried answers `200 claimed` with
the same fencing token: nothing lost, nothing doubled.

Run: LEDGERD=build/ledgerd python3 -m pytest -q tests/ha   (-s for the figures)
"""

import os
import secrets
import signal
import threading
import time
from collections import Counter

import pytest

from conftest import LEDGERD, Ledgerd, claim_id, ledgerd_cmd
from ha_load import (LEASE_MS, NO_ANSWER, TENANT, Load, Outage, claim_body, executed_twice,
                     first, lost_acks, not_stored, stored_rows, summary_line, tool_call_path)
from patroni_cluster import TTL_S, PatroniCluster, wait_for

TRANSIT_MS = 250  # the client's connect, send and read on a loaded machine, not ledgerd's time
DBNAME = "ledger_ha"
LEDGERD_ARGS = ["--unavailable-retry", "100ms", "--replay-cache", "0"]

ACKS_BEFORE_FAULT = 150    # acknowledged completions before the fault
ACKS_AFTER_RECOVERY = 60   # ... and after the cluster is healthy again
CLIENT_TIMEOUT_S = 30      # no call of cases 1-3 may take longer
RECOVERY_TIMEOUT_S = 60

# Case 4: the bound every call is answered within, with --db-timeout.
DB_TIMEOUT_S = 2
ANSWER_BOUND_S = DB_TIMEOUT_S + 1.5   # the timeout, then the 503 on a loaded machine
CASE4_CLIENT_TIMEOUT_S = DB_TIMEOUT_S + 4
STANDBY_DOWN_S = 3 * DB_TIMEOUT_S     # how long the primary has no standby
PROBE_BOUND_S = 1.2                   # /healthz and /readyz: "about a second"
PROBE_INTERVAL_S = 0.2


# --- the stack ----------------------------------------------------------------


class HaStack:
    """The Patroni cluster, ledgerd's database on it, a token, and one ledgerd."""

    def __init__(self, logs):
        self.logs = logs
        self.cluster = PatroniCluster()
        self.ledgerd = None
        self.token = None

    def start(self):
        self.cluster.start()
        primary, standby = self.cluster.healthy()
        primary.psql('CREATE DATABASE "%s"' % DBNAME)
        # libpq tries the next host of the URL when one refuses connections,
        # not when it answers that the database does not exist: the standby
        # must have replayed the CREATE DATABASE before ledgerd connects.
        wait_for(lambda: standby.try_psql("SELECT 1", db=DBNAME), 30,
                 "the standby to replay the CREATE DATABASE")
        self.database_url = self.cluster.database_url(DBNAME)
        for argv in (["migrate"], ["token", "create", "--tenant", TENANT, "--role", "agent"]):
            done = ledgerd_cmd(*argv, "--database-url", self.database_url, check=False)
            assert done.returncode == 0, "ledgerd %s exited %d: %s" % (
                " ".join(argv), done.returncode, done.stderr.strip())
        self.token = done.stdout.strip()
        self.ledgerd = self.start_ledgerd("ledgerd.log", LEDGERD_ARGS)
        return self

    def start_ledgerd(self, log_name, args):
        return Ledgerd(self.database_url, self.logs / log_name, extra_args=args)

    def close(self):
        try:
            if self.ledgerd is not None:
                stop_ledgerd(self.ledgerd)
        finally:
            self.cluster.close(self.logs)


def stop_ledgerd(led):
    """Stops @led; kills it if it does not drain (a commit that waits for ever)."""
    if led.proc is None:
        return
    try:
        led.stop(timeout=15)
    except BaseException:
        if led.proc is not None:
            led.proc.kill()
            led.proc.wait()
            led.proc = None
        raise


@pytest.fixture(scope="module")
def ha(tmp_path_factory):
    if not LEDGERD.exists():
        pytest.exit("build/ledgerd is missing: run make first", 2)
    stack = HaStack(tmp_path_factory.mktemp("ha"))
    try:
        yield stack.start()
    finally:
        stack.close()


def write_probe(led, token):
    """Whether a fresh claim through @led is answered 201 (ledgerd writes)."""
    rid = "ha-probe-%s" % secrets.token_hex(6)
    try:
        r = led.post(tool_call_path(rid) + "/claim", claim_body(rid, claim_id(), "probe"),
                     token=token, timeout=10)
    except OSError:
        return False
    return r.status == 201


@pytest.fixture
def healthy(ha):
    """(primary, standby) of a healthy cluster that ledgerd writes to."""
    primary, standby = ha.cluster.repair(RECOVERY_TIMEOUT_S)
    wait_for(lambda: write_probe(ha.ledgerd, ha.token), 30, "ledgerd to write again")
    return primary, standby


# --- helpers of the cases ---------------------------------------------------------


def syncrep_waiters(node):
    """Pids of ledgerd's sessions whose COMMIT waits for the synchronous standby."""
    rows = node.try_psql("SELECT pid FROM pg_stat_activity "
                         "WHERE wait_event = 'SyncRep' AND application_name = 'ledgerd'")
    return [int(r[0]) for r in rows or []]


def wait_acks(load, n, since, what):
    wait_for(lambda: load.ack_count(since=since) >= n or len(load.problems) > 20,
             RECOVERY_TIMEOUT_S,
             lambda: "%d acknowledged completions %s (got %d; problems %s)" % (
                 n, what, load.ack_count(since=since), first(load.problems)))
    assert len(load.problems) <= 20, "the agents saw answers no correct ledgerd gives: %s" % (
        first(load.problems))


def stall_replication_then(primary, standby, fault):
    """Runs @fault while ledgerd's commits wait for @standby: the walsender is stopped.

    The primary's walsender to the standby is SIGSTOPped, so the WAL of
    the commits waiting stays on the primary (a stopped WAL receiver would
    not do: what was sent waits in its socket and reaches the standby
    after all). The fault finds transactions committed on the primary
    alone; their clients must not have been told yes. Returns (fault_at,
    how many sessions waited).
    """
    walsender = wait_for(lambda: primary.walsender_pid(standby.name), 10,
                         "the primary's walsender to %s" % standby.name)
    os.kill(walsender, signal.SIGSTOP)
    try:
        waiting = wait_for(lambda: syncrep_waiters(primary), 10,
                           "ledgerd's commits to wait for the stalled standby")
        fault_at = time.monotonic()
        fault()
    finally:
        try:
            os.kill(walsender, signal.SIGCONT)
        except ProcessLookupError:
            pass  # died with its node
    return fault_at, len(waiting)


def check_case(ha, led, load, fault_at, pid, name, notes, problems=None):
    """The checks every case ends with; prints its figures and summary line.

    Fails on the first of @problems (case-specific, already gathered) or of
    the common checks, but only after printing what was measured.
    """
    seen = load.responses()
    outage = Outage(seen, fault_at)
    primary, _ = ha.cluster.wait_healthy(RECOVERY_TIMEOUT_S)
    twice = executed_twice(load)
    lost = lost_acks(led, ha.token, load)
    rows = stored_rows(primary, DBNAME, load)
    unstored = not_stored(rows, load)
    bad_tokens = ["%s: agent %d got token %d" % (e.rid, e.agent, e.fencing_token)
                  for e in load.executions if e.fencing_token != 1]
    no_answer = [s for s in seen if s.status == NO_ANSWER]
    no_header = [s for s in seen if s.status == 503 and not s.retry_after]

    print("\n%s: %d agents, %d HTTP answers %s; %d keys executed, %d completions "
          "acknowledged (%d after the fault); first failed call %.2f s after the fault, "
          "writes served again after %.2f s, longest gap between writes %.2f s; "
          "answered meanwhile %s; %s"
          % (name, load.nthreads, len(seen), dict(Counter(s.status for s in seen)),
             len({e.rid for e in load.executions}), len(load.acks),
             load.ack_count(since=fault_at), outage.seconds(outage.first_failure),
             outage.recovery_s, outage.longest_write_gap, dict(sorted(outage.meanwhile.items())),
             "; ".join(notes)))
    print(summary_line(name, load, outage, lost, twice))

    if problems:
        pytest.fail("\n".join(problems))
    assert load.problems == [], "the agents saw answers no correct ledgerd gives: %s" % (
        first(load.problems))
    assert no_answer == [], "%d calls got no answer within %.0f s: %s" % (
        len(no_answer), load.timeout, first(no_answer))
    assert no_header == [], "503s without Retry-After: %s" % first(no_header)
    assert outage.back_at is not None, "ledgerd served no write after the fault"
    assert led.proc is not None and led.proc.poll() is None and led.proc.pid == pid, (
        "ledgerd was restarted or died (pid %d, now %s)" % (
            pid, None if led.proc is None else led.proc.pid))
    assert twice == [], "keys executed more than once: %s" % first(twice)
    assert bad_tokens == [], "executions with another fencing token than 1: %s" % (
        first(bad_tokens))
    assert lost == [], "%d of %d acknowledged completions not replayed: %s" % (
        len(lost), len(load.acks), first(lost))
    assert unstored == [], "acknowledged completions not stored on the primary %s, as " \
        "(state, result, fencing_token, claim_id): %s" % (primary.name, first(unstored))
    assert len(rows) == len({e.rid for e in load.executions}), (
        "the primary has %d calls of this run, the agents executed %d keys"
        % (len(rows), len({e.rid for e in load.executions})))
    return outage


def retried_claims(seen):
    """How the claims that met a 503 or no answer ended, when retried with the same body.

    "200 claimed": the commit had survived; "201 claimed": it had not, or
    had never happened; "200 completed": the other agent of the pair won.
    """
    ends = Counter()
    doubted = {(s.rid, s.agent) for s in seen
               if s.op == "claim" and s.status in (503, NO_ANSWER)}
    for rid, agent in doubted:
        answers = [s for s in seen if (s.rid, s.agent, s.op) == (rid, agent, "claim")]
        ends[answers[-1].answer] += 1
    return dict(ends)


# --- 1. the primary's postmaster killed ---------------------------------------------


def test_primary_postmaster_killed(ha, healthy):
    primary, standby = healthy
    led = ha.ledgerd
    pid = led.proc.pid
    load = Load(led, ha.token, CLIENT_TIMEOUT_S).start()
    try:
        wait_acks(load, ACKS_BEFORE_FAULT, float("-inf"), "before the fault")
        before = set(primary.pg_processes())
        fault_at, waiting = stall_replication_then(primary, standby, primary.kill_postmaster)
        # Its children notice and exit by themselves.
        wait_for(lambda: not before & set(primary.pg_processes()), 10,
                 "the killed postmaster's children to exit")
        primary_after, _ = ha.cluster.wait_healthy(RECOVERY_TIMEOUT_S)
        healthy_at = time.monotonic()
        wait_acks(load, ACKS_AFTER_RECOVERY, healthy_at, "after the recovery")
    finally:
        load.stop()

    what = ("Patroni restarted %s in place" % primary.name if primary_after is primary
            else "Patroni failed over to %s" % primary_after.name)
    check_case(ha, led, load, fault_at, pid, "postmaster killed", [
        what, "%d sessions waited for the standby at the kill" % waiting,
        "cluster healthy %.2f s after the fault" % (healthy_at - fault_at),
        "claims retried after a failure ended as %s" % retried_claims(load.responses())])


# --- 2. the primary node lost ------------------------------------------------------


def test_primary_node_lost(ha, healthy):
    primary, standby = healthy
    led = ha.ledgerd
    pid = led.proc.pid
    load = Load(led, ha.token, CLIENT_TIMEOUT_S).start()
    try:
        wait_acks(load, ACKS_BEFORE_FAULT, float("-inf"), "before the fault")
        fault_at, waiting = stall_replication_then(primary, standby, primary.lose)

        # Patroni promotes the synchronous standby once the leader key expires.
        wait_for(lambda: standby.is_primary(), TTL_S + 30, "the standby's promotion",
                 interval=0.05)
        promoted_at = time.monotonic()
        # Strict synchronous mode: the promoted node commits nothing until a
        # standby streams. The lost node's replacement: its Patroni, on the
        # data it left (rewound by Patroni to the new timeline).
        primary.start()
        new_primary, _ = ha.cluster.wait_healthy(RECOVERY_TIMEOUT_S)
        healthy_at = time.monotonic()
        wait_acks(load, ACKS_AFTER_RECOVERY, healthy_at, "after the recovery")
    finally:
        load.stop()

    assert new_primary is standby, "Patroni made %s the primary" % new_primary.name
    check_case(ha, led, load, fault_at, pid, "primary node lost", [
        "%d sessions waited for the standby at the loss" % waiting,
        "%s promoted %.2f s after the fault (leader key TTL %d s)" % (
            standby.name, promoted_at - fault_at, TTL_S),
        "%s rejoined as the synchronous standby %.2f s after the fault" % (
            primary.name, healthy_at - fault_at),
        "claims retried after a failure ended as %s" % retried_claims(load.responses())])


# --- 3. a planned switchover -------------------------------------------------------


def test_planned_switchover(ha, healthy):
    primary, standby = healthy
    led = ha.ledgerd
    pid = led.proc.pid
    load = Load(led, ha.token, CLIENT_TIMEOUT_S).start()
    try:
        wait_acks(load, ACKS_BEFORE_FAULT, float("-inf"), "before the switchover")
        fault_at = time.monotonic()
        status, body = ha.cluster.switchover(primary, standby)
        answered_at = time.monotonic()
        assert status == 200, "Patroni refused the switchover: %s %s" % (status, body)
        new_primary, _ = ha.cluster.wait_healthy(RECOVERY_TIMEOUT_S)
        healthy_at = time.monotonic()
        wait_acks(load, ACKS_AFTER_RECOVERY, healthy_at, "after the switchover")
    finally:
        load.stop()

    assert new_primary is standby, "the switchover made %s the primary" % new_primary.name
    check_case(ha, led, load, fault_at, pid, "planned switchover", [
        "Patroni answered %.2f s after the request: %s" % (answered_at - fault_at, body),
        "%s the standby again %.2f s after the request" % (
            primary.name, healthy_at - fault_at),
        "claims retried after a failure ended as %s" % retried_claims(load.responses())])


# --- 4. the last standby lost ------------------------------------------------------


class Probes:
    """GET /healthz and /readyz over and over; records (path, status, seconds)."""

    def __init__(self, led):
        self.led = led
        self.results = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="probes")

    def _run(self):
        while not self.stopping.is_set():
            for path in ("/healthz", "/readyz"):
                sent = time.monotonic()
                try:
                    status = self.led.get(path, timeout=PROBE_BOUND_S + 2).status
                except TimeoutError:
                    status = NO_ANSWER
                except OSError as e:
                    status = repr(e)
                self.results.append((path, status, sent, time.monotonic() - sent))
            self.stopping.wait(PROBE_INTERVAL_S)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join(PROBE_BOUND_S + 5)


def test_last_standby_lost(ha, healthy):
    primary, standby = healthy
    try:
        led = ha.start_ledgerd("ledgerd-db-timeout.log",
                               LEDGERD_ARGS + ["--db-timeout", "%ds" % DB_TIMEOUT_S])
    except (RuntimeError, ValueError) as e:  # it exited, or wrote a line that is not JSON
        log = (ha.logs / "ledgerd-db-timeout.log").read_text(errors="replace").strip()
        pytest.fail("ledgerd does not start with --db-timeout %ds: %s" % (
            DB_TIMEOUT_S, log.splitlines()[-1] if log else repr(e)))
    pid = led.proc.pid
    problems = []
    try:
        load = Load(led, ha.token, CASE4_CLIENT_TIMEOUT_S)
        with Probes(led) as probes:
            load.start()
            try:
                wait_acks(load, ACKS_BEFORE_FAULT, float("-inf"), "before the fault")
                fault_at = time.monotonic()
                standby.lose()
                time.sleep(STANDBY_DOWN_S)
                restart_at = time.monotonic()
                standby.start()
                ha.cluster.wait_healthy(RECOVERY_TIMEOUT_S)
                healthy_at = time.monotonic()
                wait_acks(load, ACKS_AFTER_RECOVERY, healthy_at, "after the standby's return")
            finally:
                load.stop()

        seen = load.responses()
        slow = [s for s in seen if s.status == NO_ANSWER or s.received - s.sent > ANSWER_BOUND_S]
        if slow:
            problems.append(
                "%d calls were not answered within %.1f s (--db-timeout %ds): %s" % (
                    len(slow), ANSWER_BOUND_S, DB_TIMEOUT_S, first(
                        ["%s %s sent %.2f s after the fault: %s after %.2f s" % (
                            s.op, s.rid, s.sent - fault_at, s.answer, s.received - s.sent)
                         for s in slow])))
        down = [s for s in seen if fault_at <= s.sent < restart_at]
        if not any(s.status == 503 and s.code == "store_unavailable" for s in down):
            problems.append("no call made while the primary had no standby was answered "
                            "503 store_unavailable; answers %s" % dict(
                                Counter(s.answer for s in down)))
        # A client counts a lease from when it sent the claim (API.md): when
        # the 201 arrives, it can count on the lease asked for less the
        # round trip, and ledgerd must not report more.
        # ledgerd counts from when the call reached it to when its answer goes
        # out; the client's own connect, send and read (TRANSIT_MS at most on
        # loopback) lie outside what it can see.
        granted = [s for s in seen if s.op == "claim" and s.status == 201]
        overleased = ["%s: lease_ms %s, but %d ms had passed since it was sent" % (
            s.rid, s.lease_ms, (s.received - s.sent) * 1000)
            for s in sorted(granted, key=lambda s: s.sent - s.received)
            if not isinstance(s.lease_ms, int)
            or s.lease_ms > LEASE_MS - (s.received - s.sent) * 1000 + TRANSIT_MS]
        if overleased:
            problems.append("%d of %d 201 claims report more lease than was left when they "
                            "arrived, the worst first: %s" % (len(overleased), len(granted),
                                                             first(overleased)))
        bad_probes = [(path, status, round(t, 2)) for path, status, _, t in probes.results
                      if t > PROBE_BOUND_S or status == NO_ANSWER or
                      (path == "/healthz" and status != 200) or not isinstance(status, int)]
        if bad_probes:
            problems.append("%d of %d /healthz and /readyz probes were not answered within "
                            "%.1f s (/healthz with 200): %s" % (
                                len(bad_probes), len(probes.results), PROBE_BOUND_S,
                                first(bad_probes)))
        probe_answers = Counter("%s %s" % (path, status) for path, status, _, _ in probes.results)
        check_case(ha, led, load, fault_at, pid, "last standby lost", [
            "standby %s down for %.2f s, cluster healthy %.2f s after the fault" % (
                standby.name, restart_at - fault_at, healthy_at - fault_at),
            "slowest answer %.2f s" % max(s.received - s.sent for s in seen),
            "probes %s, slowest %.2f s" % (dict(probe_answers),
                                          max(t for _, _, _, t in probes.results)),
            "claims retried after a failure ended as %s" % retried_claims(seen)],
            problems)
    finally:
        stop_ledgerd(led)


# --- a COMMIT whose synchronous replication wait was cancelled -----------------


def test_cancelled_sync_commit_is_not_durable(ha, healthy):
    primary, standby = healthy
    led = ha.ledgerd
    token = ha.token

    standby.lose()
    wait_for(lambda: standby.name not in primary.replication(), 10,
             "the primary to lose its standby")

    rid = "ha-cancel-%s" % secrets.token_hex(4)
    body = claim_body(rid, claim_id(), "agent")
    answer = []
    claimer = threading.Thread(
        target=lambda: answer.append(led.post(tool_call_path(rid) + "/claim", body,
                                              token=token, timeout=CLIENT_TIMEOUT_S)),
        daemon=True)
    claimer.start()

    waiters = wait_for(lambda: syncrep_waiters(primary), 10,
                       "ledgerd's COMMIT to wait for the synchronous standby")
    assert answer == [], "the claim was answered while its COMMIT waited: %r" % answer
    for pid in waiters:
        primary.psql("SELECT pg_cancel_backend(%d)" % pid)
    claimer.join(10)
    assert answer, "the claim got no answer within 10 s of the cancel"
    r = answer[0]

    # PostgreSQL told ledgerd the COMMIT succeeded (with a WARNING): the row
    # is committed on the primary, and on no standby.
    local = primary.psql("SELECT claim_id, fencing_token FROM tool_calls "
                         "WHERE request_id = '%s'" % rid, db=DBNAME)
    assert local == [[body["claim_id"], "1"]], "on the primary: %s" % local
    assert r.status == 503 and r.code == "store_unavailable", (
        "a claim whose synchronous replication wait was cancelled must answer "
        "503 store_unavailable, not %r" % r)
    assert r.json["error"]["retry_after_ms"] > 0, r

    standby.start()
    ha.cluster.wait_healthy(RECOVERY_TIMEOUT_S)

    # The client retries the very same call: it is the holder of what was
    # committed locally; nobody else may claim the key.
    again = led.post(tool_call_path(rid) + "/claim", body, token=token)
    assert again.status == 200 and again.json["status"] == "claimed", (
        "the same claim retried once the standby is back: %r" % again)
    assert again.json["fencing_token"] == 1, again
    other = led.post(tool_call_path(rid) + "/claim", claim_body(rid, claim_id(), "other"),
                     token=token)
    assert other.status == 409 and other.code == "in_progress", (
        "another holder's claim: %r" % other)
    view = led.get(tool_call_path(rid), token=token)
    assert view.status == 200 and view.json["fencing_token"] == 1, view
