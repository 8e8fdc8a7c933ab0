"""ledgerd across a failover of a synchronously replicated PostgreSQL.

Each test gets a primary and a synchronous standby of its own on this
machine (`pg_basebackup -R`, `synchronous_standby_names = 'FIRST 1
(standby1)'`, `synchronous_commit = on`) and one ledgerd whose database URL
names both hosts with `target_session_attrs=read-write`, so it writes to
whichever of them is the primary, and started with `--replay-cache 0`, so
every replay is read from the database rather than from ledgerd's memory.

`test_failover_under_load`: 16 agent threads, in pairs that race for the
same keys (each with its own `claim_id`), claim, execute (a shared log of
executions stands for the side effect) and complete tool calls, retrying a
503 with the same body after its `retry_after_ms`. After some hundreds of
acknowledged completions the standby's WAL receiver is stopped (SIGSTOP)
until ledgerd's commits wait for it, so that the crash finds transactions
committed on the primary alone; then the primary's postmaster and every
process it left are SIGKILLed and the WAL receiver resumes. A second later
(ledgerd has answered 503 by then) the standby is promoted, and the load
runs on until a hundred more completions are acknowledged. Then it proves
that
  1. every completion acknowledged with 200 is replayed, with its exact
     result, to a claim with a new `claim_id`;
  2. ledgerd answered `503 store_unavailable` during the switch, and
     nothing but 503 while only the standby was up, and served claims and
     completions after the promotion, as the same process;
  3. no key was executed twice, and every executed key has the fencing
     token its execution was granted (1: one holder ever);
  4. the promoted standby is out of recovery and holds what ledgerd wrote.

`test_cancelled_sync_commit_is_not_durable`: with the standby stopped, a
claim's COMMIT waits for it; cancelling that wait (`pg_cancel_backend`)
makes PostgreSQL report success with a WARNING although the commit exists
only on the primary. ledgerd must answer `503 store_unavailable`, not 201;
once the standby is back, the same claim retried answers `200 claimed` with
the same fencing token: nothing lost, nothing doubled.

Run: LEDGERD=build/ledgerd python3 -m pytest -q tests/ha
"""

import concurrent.futures
import hashlib
import http.client
import json
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass

import pytest

from conftest import LEDGERD, Ledgerd, claim_id, ledgerd_cmd
from ha_cluster import Node, wait_for

STANDBY_NAME = "standby1"
DBNAME = "ledger_ha"
TENANT = "t1"
CALL_ID = "call_01"
TOOL = "charge"
LEDGERD_ARGS = ["--unavailable-retry", "100ms", "--replay-cache", "0"]

AGENT_THREADS = 16             # 8 pairs, each pair racing for the same keys
ACKS_BEFORE_CRASH = 300        # acknowledged completions before the primary dies
ACKS_AFTER_PROMOTION = 100     # ... and after the standby was promoted
DETECTION_S = 1.0              # primary killed -> standby promoted
KEY_DEADLINE_S = 20            # an agent gives up on a key after this long
IN_PROGRESS_POLL_S = 0.05      # how often the loser of a race asks again
LEASE_MS = 60000               # longer than the test: no lease runs out
REQUEST_TIMEOUT_S = 30


# --- the stack ----------------------------------------------------------------


class HaStack:
    """A primary, its synchronous standby, and one ledgerd that knows both."""

    def __init__(self, logs):
        self.logs = logs
        self.root = tempfile.mkdtemp(prefix="ledgerd-ha-")
        os.chmod(self.root, 0o755)
        self.primary = self.standby = self.ledgerd = None
        self.token = None

    def start(self):
        self.primary = Node.primary(self.root, "primary", sync_standby=STANDBY_NAME)
        self.standby = Node.standby_of(self.primary, self.root, "standby",
                                       application_name=STANDBY_NAME)
        self.primary.wait_sync_standby(STANDBY_NAME)
        self.primary.psql('CREATE DATABASE "%s"' % DBNAME)
        primary_url = self.primary.url(DBNAME)
        ledgerd_cmd("migrate", "--database-url", primary_url)
        self.token = ledgerd_cmd("token", "create", "--tenant", TENANT, "--role", "agent",
                                 "--database-url", primary_url).stdout.strip()
        nodes = (self.primary, self.standby)
        self.database_url = (
            "host=%s port=%s user=%s dbname=%s target_session_attrs=read-write" % (
                ",".join(str(n.dir) for n in nodes), ",".join(str(n.port) for n in nodes),
                self.primary.user, DBNAME))
        self.ledgerd = Ledgerd(self.database_url, self.logs / "ledgerd.log",
                               extra_args=LEDGERD_ARGS)
        return self

    def close(self):
        try:
            if self.ledgerd is not None and self.ledgerd.proc is not None:
                try:
                    self.ledgerd.stop()
                except BaseException:
                    # Stuck (a commit waiting for a standby that is gone):
                    # no process may outlive the test.
                    if self.ledgerd.proc is not None:
                        self.ledgerd.proc.kill()
                        self.ledgerd.proc.wait()
                    raise
        finally:
            for node in (self.standby, self.primary):
                if node is not None:
                    node.destroy()
                    if node.log.exists():
                        shutil.copy(node.log, self.logs / ("%s.log" % node.name))
            shutil.rmtree(self.root, ignore_errors=True)


def ha_stack(tmp_path_factory, name):
    if not LEDGERD.exists():
        pytest.exit("build/ledgerd is missing: run make first", 2)
    stack = HaStack(tmp_path_factory.mktemp(name))
    try:
        yield stack.start()
    finally:
        stack.close()


@pytest.fixture(scope="module")
def failover_stack(tmp_path_factory):
    yield from ha_stack(tmp_path_factory, "ha_failover")


@pytest.fixture(scope="module")
def syncrep_stack(tmp_path_factory):
    yield from ha_stack(tmp_path_factory, "ha_syncrep")


# --- the load -------------------------------------------------------------------


def tool_call_path(rid):
    return "/v1/requests/%s/tool-calls/%s" % (rid, CALL_ID)


def claim_body(rid, holder, owner):
    """The claim every agent sends for @rid; only @holder (claim_id) differs."""
    return {"claim_id": holder, "tool": TOOL, "args": {"charge": rid},
            "lease_ms": LEASE_MS, "owner": owner}


def result_text(rid):
    """The exact JSON text of @rid's result: unique to the key."""
    return '{"charge": "%s", "receipt": "%s"}' % (
        rid, hashlib.sha256(rid.encode()).hexdigest()[:24])


@dataclass
class Seen:
    """One HTTP answer the load received."""
    op: str
    rid: str
    agent: int
    status: int
    code: str         # of an error; else the answer's "status" ("claimed", ...)
    sent: float       # time.monotonic() before the request
    received: float   # ... and after its answer


@dataclass
class Execution:
    """One run of a side effect: the agent got the key and executed."""
    rid: str
    agent: int
    holder: str
    fencing_token: int
    at: float


@dataclass
class Ack:
    """A completion ledgerd acknowledged with 200."""
    rid: str
    result: str
    sent: float
    received: float


class Load:
    """Agent threads claiming, executing and completing tool calls.

    Agents 2p and 2p+1 walk through the same keys: at most one of them may
    execute each key; the other waits for its replay.
    """

    def __init__(self, led, token, threads=AGENT_THREADS):
        self.led = led
        self.token = token
        self.run_id = secrets.token_hex(4)
        self.nthreads = threads
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.seen = []        # [Seen]
        self.executions = []  # [Execution]
        self.acks = {}        # rid -> Ack
        self.problems = []    # what no correct ledgerd would do, as text
        self.threads = []

    # What the agents record; every list is appended to under the lock.

    def _problem(self, text):
        with self.lock:
            self.problems.append(text)

    def ack_count(self, since=float("-inf")):
        with self.lock:
            return sum(1 for a in self.acks.values() if a.sent > since)

    def responses(self):
        with self.lock:
            return list(self.seen)

    # The agents.

    def start(self):
        for agent in range(self.nthreads):
            t = threading.Thread(target=self._agent, args=(agent,), daemon=True,
                                 name="agent-%d" % agent)
            t.start()
            self.threads.append(t)

    def stop(self, timeout=KEY_DEADLINE_S + 10):
        """Lets every agent finish its key, then waits for them."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        assert alive == [], "agents still running %.0f s after the stop: %s" % (timeout, alive)

    def _agent(self, agent):
        n = 0
        while not self.stopping.is_set():
            rid = "ha-%s-p%d-k%05d" % (self.run_id, agent // 2, n)
            try:
                self._run_key(agent, rid)
            except Exception as e:  # a bug of the test or a malformed answer
                self._problem("%s: agent %d: %r" % (rid, agent, e))
            n += 1

    def _post(self, op, rid, agent, path, deadline, body=None, raw=None):
        """POSTs; retries a 503 with the same body after its retry_after_ms.

        Returns the first answer that is not 503, or None once @deadline
        would pass.
        """
        while True:
            sent = time.monotonic()
            try:
                r = self.led.post(path, body=body, raw=raw, token=self.token,
                                  timeout=REQUEST_TIMEOUT_S)
            except (OSError, http.client.HTTPException) as e:
                self._problem("%s: %s: no HTTP answer: %r" % (rid, op, e))
                return None
            code = r.code if r.status >= 400 else r.json.get("status", "")
            with self.lock:
                self.seen.append(Seen(op, rid, agent, r.status, code, sent, time.monotonic()))
            if r.status != 503:
                return r
            if code != "store_unavailable" or r.json["error"].get("retry_after_ms", 0) <= 0:
                self._problem("%s: %s: 503 without store_unavailable and retry_after_ms: %r"
                              % (rid, op, r))
                return None
            wait = r.json["error"]["retry_after_ms"] / 1000.0
            if time.monotonic() + wait > deadline:
                self._problem("%s: %s: still 503 after %d s" % (rid, op, KEY_DEADLINE_S))
                return None
            time.sleep(wait)

    def _run_key(self, agent, rid):
        path = tool_call_path(rid)
        holder = claim_id()
        body = claim_body(rid, holder, "agent-%d" % agent)
        deadline = time.monotonic() + KEY_DEADLINE_S
        while True:
            r = self._post("claim", rid, agent, path + "/claim", deadline, body=body)
            if r is None:
                return
            status = r.json.get("status") if r.status == 200 else None
            if r.status == 201 or status == "claimed":
                break
            if status == "completed":
                if r.json["result"] != json.loads(result_text(rid)):
                    self._problem("%s: replayed another result: %r" % (rid, r))
                return
            if r.status == 409 and r.code == "in_progress" and time.monotonic() < deadline:
                time.sleep(IN_PROGRESS_POLL_S)  # the other agent of the pair holds it
                continue
            self._problem("%s: claim answered %r" % (rid, r))
            return

        # The key is ours: execute, exactly where a real agent would.
        token = r.json["fencing_token"]
        with self.lock:
            self.executions.append(Execution(rid, agent, holder, token, time.monotonic()))

        result = result_text(rid)
        raw = ('{"fencing_token": %d, "outcome": "succeeded", "result": %s}'
               % (token, result)).encode()
        sent = time.monotonic()
        r = self._post("complete", rid, agent, path + "/complete", deadline, raw=raw)
        if r is None:
            return
        if r.status != 200 or r.json.get("status") != "completed":
            self._problem("%s: the claim was granted (fencing token %d), then its complete "
                          "answered %r%s" % (rid, token, r, " (the claim was lost)"
                                             if r.status == 404 else ""))
            return
        with self.lock:
            self.acks[rid] = Ack(rid, result, sent, time.monotonic())


def syncrep_waiters(node):
    """Pids of ledgerd's sessions waiting for the synchronous standby."""
    rows = node.psql("SELECT pid FROM pg_stat_activity "
                     "WHERE wait_event = 'SyncRep' AND application_name = 'ledgerd'")
    return [int(r[0]) for r in rows]


def in_parallel(fn, items, workers=8):
    """fn(item) for every item on a few threads; returns the non-None results."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return [x for x in pool.map(fn, items) if x is not None]


def first(items, n=5):
    return items[:n] + (["... %d more" % (len(items) - n)] if len(items) > n else [])


# --- failover under load ------------------------------------------------------


def test_failover_under_load(failover_stack):
    stack = failover_stack
    led = stack.ledgerd
    pid = led.proc.pid
    load = Load(led, stack.token)

    load.start()
    try:
        wait_for(lambda: load.ack_count() >= ACKS_BEFORE_CRASH, 60,
                 lambda: "%d acknowledged completions before the crash (got %d; problems %s)"
                 % (ACKS_BEFORE_CRASH, load.ack_count(), first(load.problems)))

        # The standby falls behind for a moment (its WAL receiver stopped):
        # the commits in flight wait for it, committed on the primary alone,
        # when the primary dies. Their clients must not have been told yes.
        walreceiver = wait_for(stack.standby.walreceiver_pid, 5, "the standby's WAL receiver")
        os.kill(walreceiver, signal.SIGSTOP)
        try:
            waiting = wait_for(lambda: syncrep_waiters(stack.primary), 5,
                               "ledgerd's commits to wait for the stalled standby")
            crashed_at = time.monotonic()
            stack.primary.crash()
            dead_at = time.monotonic()  # no process of the old primary is left
        finally:
            os.kill(walreceiver, signal.SIGCONT)

        # The failure detector: it sees the primary gone, waits out its
        # grace period, then promotes. Meanwhile only a standby is up.
        wait_for(lambda: any(s.status == 503 and s.received > crashed_at
                             for s in load.responses()), 15,
                 "ledgerd to answer 503 after the primary died")
        time.sleep(max(0.0, crashed_at + DETECTION_S - time.monotonic()))
        promoting_at = time.monotonic()
        stack.standby.promote()
        promoted_at = time.monotonic()

        wait_for(lambda: load.ack_count(since=promoted_at) >= ACKS_AFTER_PROMOTION, 30,
                 lambda: "%d acknowledged completions after the promotion (got %d; "
                 "problems %s)" % (ACKS_AFTER_PROMOTION, load.ack_count(since=promoted_at),
                                   first(load.problems)))
    finally:
        load.stop()

    seen = load.responses()
    assert load.problems == [], "the agents saw answers no correct ledgerd gives: %s" % (
        first(load.problems))

    # 2. 503 during the switch, nothing else while no primary existed, and
    #    served again by the same process once the standby was promoted.
    unavailable = [s for s in seen if s.received > crashed_at and s.status == 503]
    assert unavailable, "no 503 after the primary was killed"
    assert {s.code for s in unavailable} == {"store_unavailable"}, (
        "503s with other codes: %s" % Counter(s.code for s in unavailable))
    headless = [s for s in seen if s.sent > dead_at and s.received < promoting_at]
    assert headless and {s.status for s in headless} == {503}, (
        "answers to calls made while only the standby was up: %s"
        % Counter((s.op, s.status, s.code) for s in headless))
    after = [s for s in seen if s.sent > promoted_at]
    claimed_after = sum(1 for s in after if s.op == "claim" and s.status == 201)
    completed_after = sum(1 for s in after if s.op == "complete" and s.status == 200)
    assert claimed_after > 0 and completed_after > 0, (
        "after the promotion: %d claims answered 201, %d completions answered 200; "
        "statuses %s" % (claimed_after, completed_after, Counter(s.status for s in after)))
    assert led.proc.poll() is None and led.proc.pid == pid, (
        "ledgerd was restarted or died (pid %d, now %s, exit %s)"
        % (pid, led.proc.pid, led.proc.poll()))

    # 3. No key executed twice; each holds the token its one execution got.
    runs = Counter(e.rid for e in load.executions)
    twice = sorted(rid for rid, n in runs.items() if n > 1)
    assert twice == [], "keys executed more than once: %s" % first(
        ["%s by %s" % (rid, [(e.agent, e.fencing_token) for e in load.executions
                             if e.rid == rid]) for rid in twice])

    def wrong_token(execution):
        r = led.get(tool_call_path(execution.rid), token=stack.token)
        if r.status != 200:
            return "%s: GET answered %r" % (execution.rid, r)
        call = r.json
        # A settled call has no holder any more; one in progress names it.
        expected_state = "succeeded" if execution.rid in load.acks else "in_progress"
        if (call["fencing_token"] != 1 or execution.fencing_token != 1
                or call["state"] != expected_state):
            return "%s: executed by agent %d with token %d, ledger has token %s, state %s, " \
                "holder %s" % (execution.rid, execution.agent, execution.fencing_token,
                               call["fencing_token"], call["state"], call["holder"])
        return None

    bad_tokens = in_parallel(wrong_token, load.executions)
    assert bad_tokens == [], "fencing tokens inconsistent with the executions: %s" % (
        first(bad_tokens))

    # 1. Every acknowledged completion is replayed with its exact result.
    def not_replayed(ack):
        r = led.post(tool_call_path(ack.rid) + "/claim",
                     claim_body(ack.rid, claim_id(), "auditor"), token=stack.token)
        if (r.status != 200 or r.json.get("status") != "completed"
                or r.json.get("replayed") is not True
                or ('"result":%s,' % ack.result) not in r.body):
            return "%s (acknowledged %.2f s %s the crash): %r" % (
                ack.rid, abs(ack.received - crashed_at),
                "before" if ack.received < crashed_at else "after", r)
        return None

    acks = list(load.acks.values())
    acked_before_crash = sum(1 for a in acks if a.received < crashed_at)
    assert acked_before_crash >= ACKS_BEFORE_CRASH, (
        "only %d completions acknowledged before the crash" % acked_before_crash)
    lost = in_parallel(not_replayed, acks)
    assert lost == [], "%d of %d acknowledged completions not replayed: %s" % (
        len(lost), len(acks), first(lost))

    # 4. The standby is the primary now, and ledgerd's writes are there.
    new_primary = stack.standby
    assert not new_primary.in_recovery(), "the promoted standby is still in recovery"
    rows = new_primary.psql("SELECT request_id, state, result, fencing_token, claim_id "
                            "FROM tool_calls WHERE tenant = '%s' AND request_id LIKE 'ha-%s-%%'"
                            % (TENANT, load.run_id), db=DBNAME)
    stored = {rid: tuple(rest) for rid, *rest in rows}
    executor = {e.rid: e.holder for e in load.executions}
    missing = [a.rid for a in acks
               if stored.get(a.rid) != ("succeeded", a.result, "1", executor[a.rid])]
    assert missing == [], "acknowledged completions not stored on the new primary, as " \
        "(state, result, fencing_token, claim_id): %s" % (
            first(["%s: %s" % (rid, stored.get(rid)) for rid in missing]))
    assert len(stored) == len(runs), (
        "the new primary has %d calls of this run, the agents executed %d keys"
        % (len(stored), len(runs)))
    sessions = new_primary.psql("SELECT count(*) FROM pg_stat_activity "
                                "WHERE application_name = 'ledgerd'")
    assert int(sessions[0][0]) > 0, "ledgerd has no session on the new primary"

    print_failover_summary(load, seen, len(waiting), crashed_at, promoting_at, promoted_at)


def print_failover_summary(load, seen, waiting, crashed_at, promoting_at, promoted_at):
    """What the load went through, for whoever reads the output (pytest -s)."""
    unavailable = [s for s in seen if s.status == 503]
    back = min((s.received for s in seen if s.received > promoting_at and s.status < 300),
               default=float("nan"))
    # A claim that met a 503 is in doubt until retried. "200 claimed": its
    # commit had reached the standby; "201 claimed": it had not, or it never
    # committed; "200 completed": the other agent of the pair had the key.
    retried = Counter()
    for rid, agent in {(s.rid, s.agent) for s in unavailable if s.op == "claim"}:
        answers = [s for s in seen if (s.rid, s.agent, s.op) == (rid, agent, "claim")]
        last = answers[-1]
        retried["%d %s" % (last.status, last.code)] += 1
    print("\nfailover load: %d agents, %d keys executed once each, %d completions "
          "acknowledged (%d before the crash), %d HTTP answers %s; %d sessions waiting "
          "for the standby at the crash; %d answered 503 "
          "(%d claims, %d completions); primary killed -> promotion started %.2f s, "
          "-> promoted %.2f s, -> first success %.2f s, last 503 at %.2f s; claims retried "
          "after a 503 ended as %s"
          % (load.nthreads, len(load.executions), len(load.acks),
             sum(1 for a in load.acks.values() if a.received < crashed_at), len(seen),
             dict(Counter(s.status for s in seen)), waiting, len(unavailable),
             sum(1 for s in unavailable if s.op == "claim"),
             sum(1 for s in unavailable if s.op == "complete"),
             promoting_at - crashed_at, promoted_at - crashed_at, back - crashed_at,
             max(s.received for s in unavailable) - crashed_at, dict(retried)))


# --- a COMMIT whose synchronous replication wait was cancelled -----------------


def test_cancelled_sync_commit_is_not_durable(syncrep_stack):
    stack = syncrep_stack
    led = stack.ledgerd
    token = stack.token
    warm = "ha-warm-%s" % secrets.token_hex(4)
    r = led.post(tool_call_path(warm) + "/claim", claim_body(warm, claim_id(), "agent"),
                 token=token)
    assert r.status == 201, "a claim with the standby in sync: %r" % r

    stack.standby.stop("fast")
    wait_for(lambda: stack.primary.replication(STANDBY_NAME) is None, 10,
             "the primary to lose its standby")

    rid = "ha-cancel-%s" % secrets.token_hex(4)
    body = claim_body(rid, claim_id(), "agent")
    answer = []
    claimer = threading.Thread(
        target=lambda: answer.append(led.post(tool_call_path(rid) + "/claim", body,
                                              token=token, timeout=REQUEST_TIMEOUT_S)),
        daemon=True)
    claimer.start()

    waiters = wait_for(lambda: syncrep_waiters(stack.primary), 10,
                       "ledgerd's COMMIT to wait for the synchronous standby")
    assert answer == [], "the claim was answered while its COMMIT waited: %r" % answer
    for pid in waiters:
        stack.primary.psql("SELECT pg_cancel_backend(%d)" % pid)
    claimer.join(10)
    assert answer, "the claim got no answer within 10 s of the cancel"
    r = answer[0]

    # PostgreSQL told ledgerd the COMMIT succeeded (with a WARNING): the row
    # is committed on the primary, and on no standby.
    local = stack.primary.psql("SELECT claim_id, fencing_token FROM tool_calls "
                               "WHERE request_id = '%s'" % rid, db=DBNAME)
    assert local == [[body["claim_id"], "1"]], "on the primary: %s" % local
    assert r.status == 503 and r.code == "store_unavailable", (
        "a claim whose synchronous replication wait was cancelled must answer "
        "503 store_unavailable, not %r" % r)
    assert r.json["error"]["retry_after_ms"] > 0, r

    stack.standby.start()
    stack.primary.wait_sync_standby(STANDBY_NAME)

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
    assert view.status == 200, view
    assert view.json["fencing_token"] == 1 and body["claim_id"] not in view.body, view
