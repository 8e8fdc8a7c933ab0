"""The agents of the HA tests, and what their answers prove.

Agents claim a tool call, execute it (an entry in one shared execution log
stands for the side effect), and complete it, retrying a 503 with the same
body after its `retry_after_ms`, as an SDK would. Agents 2p and 2p+1 walk
through the same keys with claim_ids of their own: at most one of them may
execute each key, the other waits for its replay. Every answer is recorded
with the monotonic times it was sent and received, so a test can tell what
clients were answered while a fault lasted and when writes came back.
"""

import concurrent.futures
import hashlib
import http.client
import json
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass

from conftest import claim_id

TENANT = "t1"
CALL_ID = "call_01"
TOOL = "charge"

AGENT_THREADS = 16         # 8 pairs, each pair racing for the same keys
KEY_DEADLINE_S = 40        # an agent gives up on a key after this long
IN_PROGRESS_POLL_S = 0.05  # how often the loser of a race asks again
NO_ANSWER_PAUSE_S = 0.1    # before the same call again, after no HTTP answer
LEASE_MS = 60000           # longer than a test: no lease runs out
NO_ANSWER = 0              # the status of a call that got no HTTP answer in time


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
    """One HTTP call the load made, and what answered it."""
    op: str
    rid: str
    agent: int
    status: int          # NO_ANSWER when none came within the client timeout
    code: str            # of an error; else the answer's "status" ("claimed", ...)
    sent: float          # time.monotonic() before the request
    received: float      # ... and after its answer (or the timeout)
    retry: bool = False        # the same call made again (after a 503 or no answer)
    lease_ms: int = None       # of a claim answered 201
    retry_after: str = None    # the Retry-After header of a 503

    @property
    def answer(self):
        return "%d %s" % (self.status, self.code)

    @property
    def wrote(self):
        """Whether this answer reports a write that committed just now.

        A 201 always does. A completion answered 200 does when it was not
        a retry: a retried one may find its first try committed, and answer
        without writing anything.
        """
        return (self.op == "claim" and self.status == 201) or (
            self.op == "complete" and self.status == 200 and self.code == "completed"
            and not self.retry)


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
    """Agent threads claiming, executing and completing tool calls."""

    def __init__(self, led, token, timeout, threads=AGENT_THREADS):
        self.led = led
        self.token = token
        self.timeout = timeout  # the client timeout of every call
        self.run_id = secrets.token_hex(4)
        self.nthreads = threads
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.seen = []        # [Seen]
        self.executions = []  # [Execution]: the shared execution log
        self.acks = {}        # rid -> Ack
        self.problems = []    # what no correct ledgerd would do, as text
        self.threads = []

    def _problem(self, text):
        with self.lock:
            self.problems.append(text)

    def ack_count(self, since=float("-inf")):
        with self.lock:
            return sum(1 for a in self.acks.values() if a.sent > since)

    def responses(self):
        with self.lock:
            return list(self.seen)

    def start(self):
        for agent in range(self.nthreads):
            t = threading.Thread(target=self._agent, args=(agent,), daemon=True,
                                 name="agent-%d" % agent)
            t.start()
            self.threads.append(t)
        return self

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

        A call that got no answer within the client timeout is recorded as
        NO_ANSWER and made again (every call is idempotent). Returns the
        first answer that is not 503, or None once @deadline would pass.
        """
        retry = False
        while True:
            sent = time.monotonic()
            try:
                r = self.led.post(path, body=body, raw=raw, token=self.token,
                                  timeout=self.timeout)
            except TimeoutError:
                with self.lock:
                    self.seen.append(Seen(op, rid, agent, NO_ANSWER, "no_answer", sent,
                                          time.monotonic(), retry))
                retry = True
                if time.monotonic() + NO_ANSWER_PAUSE_S > deadline:
                    self._problem("%s: %s: no answer until the key's deadline" % (rid, op))
                    return None
                time.sleep(NO_ANSWER_PAUSE_S)
                continue
            except (OSError, http.client.HTTPException) as e:
                self._problem("%s: %s: no HTTP answer: %r" % (rid, op, e))
                return None
            received = time.monotonic()
            code = r.code if r.status >= 400 else r.json.get("status", "")
            seen = Seen(op, rid, agent, r.status, code, sent, received, retry)
            retry = True
            if r.status == 201:
                seen.lease_ms = r.json.get("lease_ms")
            if r.status == 503:
                seen.retry_after = r.header("Retry-After")
            with self.lock:
                self.seen.append(seen)
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


def in_parallel(fn, items, workers=8):
    """fn(item) for every item on a few threads; returns the non-None results."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return [x for x in pool.map(fn, items) if x is not None]


def first(items, n=5):
    return items[:n] + (["... %d more" % (len(items) - n)] if len(items) > n else [])


# --- what the answers prove ----------------------------------------------------


def executed_twice(load):
    """Keys the shared execution log has more than once, with who ran them."""
    runs = Counter(e.rid for e in load.executions)
    return ["%s by %s" % (rid, [(e.agent, e.fencing_token) for e in load.executions
                                if e.rid == rid])
            for rid, n in sorted(runs.items()) if n > 1]


def lost_acks(led, token, load):
    """Acknowledged completions that a claim with a new claim_id does not replay exactly."""
    def not_replayed(ack):
        r = led.post(tool_call_path(ack.rid) + "/claim",
                     claim_body(ack.rid, claim_id(), "auditor"), token=token, timeout=30)
        if (r.status != 200 or r.json.get("status") != "completed"
                or r.json.get("replayed") is not True
                or ('"result":%s,' % ack.result) not in r.body):
            return "%s: %r" % (ack.rid, r)
        return None

    return in_parallel(not_replayed, list(load.acks.values()))


def stored_rows(node, db, load):
    """{request_id: (state, result, fencing_token, claim_id)} of the run, on @node."""
    rows = node.psql("SELECT request_id, state, result, fencing_token, claim_id "
                     "FROM tool_calls WHERE tenant = '%s' AND request_id LIKE 'ha-%s-%%'"
                     % (TENANT, load.run_id), db=db)
    return {rid: tuple(rest) for rid, *rest in rows}


def not_stored(rows, load):
    """Acknowledged completions that @rows (stored_rows) lack, or hold otherwise."""
    executor = {e.rid: e.holder for e in load.executions}
    return ["%s: %s" % (a.rid, rows.get(a.rid)) for a in load.acks.values()
            if rows.get(a.rid) != ("succeeded", a.result, "1", executor.get(a.rid))]


class Outage:
    """What the load saw from a fault at @fault_at on.

    `back_at`: the first write (201 claim, 200 completion) answered to a
    call sent after ledgerd had failed a call of the fault (a 503, or no
    answer), or, if it failed none, the first write answered after the
    fault. `meanwhile`: the answers to the calls sent from the fault until
    then, by status and code.
    """

    def __init__(self, seen, fault_at):
        after = sorted((s for s in seen if s.received >= fault_at), key=lambda s: s.received)
        failed = [s for s in after if s.status in (503, NO_ANSWER) and s.sent >= fault_at]
        self.first_failure = failed[0].received if failed else None
        start = self.first_failure if failed else fault_at
        writes = [s for s in after if s.wrote and s.sent >= start]
        self.back_at = writes[0].received if writes else None
        end = self.back_at if self.back_at is not None else float("inf")
        self.during = [s for s in seen if fault_at <= s.sent < end]
        self.meanwhile = Counter(s.answer for s in self.during)
        self.failures = failed
        self.fault_at = fault_at
        # From the last write answered before the fault to the last one of all.
        written = sorted((s.received for s in seen if s.wrote), reverse=False)
        last_before = [t for t in written if t < fault_at][-1:]
        written = last_before + [t for t in written if t >= fault_at]
        self.longest_write_gap = max((b - a for a, b in zip(written, written[1:])),
                                     default=float("nan"))

    def seconds(self, t):
        return float("nan") if t is None else t - self.fault_at

    @property
    def recovery_s(self):
        return self.seconds(self.back_at)


def summary_line(case, load, outage, lost, twice, extra=""):
    """One line a reader of `pytest -s` can compare across runs."""
    return ("HA %s: writes served again %.2f s after the fault (longest gap between "
            "writes %.2f s); %d of %d acknowledged completions lost; %d keys executed "
            "twice (of %d); answered meanwhile %s%s"
            % (case, outage.recovery_s, outage.longest_write_gap, len(lost), len(load.acks),
               len(twice), len({e.rid for e in load.executions}),
               dict(sorted(outage.meanwhile.items())), extra))
