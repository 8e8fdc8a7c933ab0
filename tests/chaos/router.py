#!/usr/bin/env python3
"""A router of the chaos campaign: it makes logical requests and sees them through.

Each of its threads makes one logical request after another, with 2 to 4
tool calls (`call_00`...; the tool and arguments of each fixed when the
request is made, so every rerun makes the same calls), and drives it one
of two ways:

routed (most): the life of an attempt through the SDK's router API.
  `begin_attempt`, a heartbeat (`Attempt.start_heartbeat`), the job handed
  to an agent worker with the attempt's id (its claims are fenced by the
  attempt), then `deliver` before the answer "reaches the client" and
  `finish`. Some requests deliver a first delta before the tool calls (so
  a later failure must end the stream), some ask `failover` with
  `overloaded` first (keep_waiting), a few lose their client
  (`client_disconnected`, then sometimes the client's own retry reopens
  the request), a few replicas "exit" after some calls. When the worker
  answers late, not at all, or with a failure, the router asks
  `failover` and does what it says: `retry_prefill` on another worker,
  `wait_for_fence` (asking the worker whether it stopped, acknowledging
  the cancel if it did, asking again), or the end of the request.
plain: no attempts; the job goes to one worker, or to two or three at
  once that race for the same keys (as a failover rerun does).

Every exchange with ledgerd is logged (sdkwrap), and so is every step
(`kind: "router"`). SIGTERM: start no new request, finish those in flight,
exit.

    router.py --name R1 --ledger URL --ledger URL --token T
              --agent NAME=URL ... --log PATH --seed N [--threads 3]
"""

import argparse
import http.client
import json
import random
import signal
import sys
import threading
import time
import traceback
import urllib.parse

from sdkwrap import ClientLog, make_ledger, split_url

from ledger_client import (AttemptFenced, LedgerError, LedgerUnavailable,  # noqa: I100
                           RequestClosed, stable_tool_call_id)

TOOLS = (("create_ticket", False), ("send_email", True), ("charge", False), ("notify", True))
ATTEMPT_LEASE_MS = 3000
CLAIM_LEASE_MS = 3000
JOB_TIMEOUT_S = 4.5       # no answer from the worker in this long: liveness uncertain
PLAIN_TIMEOUT_S = 60.0
WAIT_S = 8.0              # a worker waits this long for another holder of a key
MAX_ATTEMPTS = 3
FENCE_WAIT_CAP_S = 30.0   # wait_for_fence is asked again for at most this long
RETRY_S = 15.0

P_PLAIN = 0.3
P_RACE = 0.4             # of plain requests: two or three workers at once
P_EARLY_DELIVER = 0.2
P_OVERLOADED = 0.05
P_DISCONNECT = 0.04
P_REOPEN = 0.6
P_CRASH = 0.15


class Router:
    def __init__(self, args):
        self.name = args.name
        self.log = ClientLog(args.log, self.name)
        self.ledger = make_ledger(args.ledger, args.token, self.log, retry_s=RETRY_S,
                                  complete_retry_s=RETRY_S, rng=random.Random(args.seed + 1))
        self.agents = []
        for spec in args.agent:
            name, _, url = spec.partition("=")
            self.agents.append((name, split_url(url)))
        self.seed = args.seed
        self.stopping = threading.Event()
        self.counter = 0
        self.lock = threading.Lock()

    def note(self, event, rid, **fields):
        self.log.write("router", event=event, rid=rid, **fields)

    def next_rid(self):
        with self.lock:
            self.counter += 1
            return "%s-%04d" % (self.name, self.counter)

    # --- the workers ------------------------------------------------------------

    def post_job(self, agent, job, timeout_s):
        """The worker's answer to the job, or None when none came in time."""
        name, (host, port) = agent
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            conn.request("POST", "/run", body=json.dumps(job),
                         headers={"Content-Type": "application/json"})
            return json.loads(conn.getresponse().read())
        except (OSError, http.client.HTTPException, ValueError):
            return None
        finally:
            conn.close()

    def job_state(self, agent, rid, attempt_id):
        name, (host, port) = agent
        conn = http.client.HTTPConnection(host, port, timeout=0.5)
        try:
            conn.request("GET", "/job?" + urllib.parse.urlencode(
                {"rid": rid, "attempt": attempt_id}))
            return json.loads(conn.getresponse().read()).get("state")
        except (OSError, http.client.HTTPException, ValueError):
            return None
        finally:
            conn.close()

    # --- one logical request --------------------------------------------------------

    def make_calls(self, rng, rid):
        calls = []
        for k in range(rng.randint(2, 4)):
            tool, dedupe = rng.choice(TOOLS)
            calls.append({"cid": stable_tool_call_id(k), "tool": tool, "dedupe": dedupe,
                          "args": {"rid": rid, "k": k, "amount": rng.randint(1, 999)}})
        return calls

    def job(self, rid, attempt_id, calls, owner, crash_after=None):
        return {"rid": rid, "attempt_id": attempt_id, "calls": calls,
                "lease_ms": CLAIM_LEASE_MS, "wait_s": WAIT_S, "crash_after": crash_after,
                "owner": owner}

    def plain(self, rng, rid, calls):
        n = rng.choice((2, 2, 3)) if rng.random() < P_RACE else 1
        agents = rng.sample(self.agents, min(n, len(self.agents)))
        self.note("plain", rid, agents=[a[0] for a in agents], calls=len(calls))
        answers = [None] * len(agents)

        def go(i):
            answers[i] = self.post_job(agents[i], self.job(rid, None, calls, agents[i][0]),
                                       PLAIN_TIMEOUT_S)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(len(agents))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.note("plain_done", rid, stopped=[a and a.get("stopped") for a in answers])

    def routed(self, rng, rid, calls):
        n = 1
        agent = rng.choice(self.agents)
        try:
            attempt = self.ledger.begin_attempt(rid, "a1", replica=agent[0],
                                                lease_ms=ATTEMPT_LEASE_MS,
                                                max_attempts=MAX_ATTEMPTS)
        except LedgerError as e:
            self.note("begin_refused", rid, code=e.code)
            return
        self.note("attempt", rid, attempt_id=attempt.attempt_id, agent=agent[0])
        delivered = 0
        crash_after = rng.randrange(len(calls)) if rng.random() < P_CRASH else None
        while True:
            self.heartbeat(rid, attempt)
            try:
                if delivered == 0 and rng.random() < P_EARLY_DELIVER:
                    attempt.deliver(1)
                    delivered = 1
                    self.note("delivered", rid, attempt_id=attempt.attempt_id, tokens=1)
                if rng.random() < P_OVERLOADED:
                    d = self.ledger.failover(rid, attempt.attempt_id, "overloaded")
                    self.note("decision", rid, attempt_id=attempt.attempt_id,
                              signal="overloaded", action=d.action)
                if rng.random() < P_DISCONNECT:
                    attempt.stop_heartbeat()
                    d = self.ledger.failover(rid, attempt.attempt_id, "client_disconnected")
                    self.note("decision", rid, attempt_id=attempt.attempt_id,
                              signal="client_disconnected", action=d.action)
                    if delivered or rng.random() >= P_REOPEN:
                        return
                    # No worker had the attempt yet: the router knows it stopped.
                    attempt.cancel_ack()
                    self.note("cancel_ack", rid, attempt_id=attempt.attempt_id)
                    n += 1
                    agent = rng.choice(self.agents)
                    attempt = self.ledger.begin_attempt(rid, "a%d" % n, replica=agent[0],
                                                        lease_ms=ATTEMPT_LEASE_MS)
                    self.note("reopened", rid, attempt_id=attempt.attempt_id)
                    continue
            except (AttemptFenced, RequestClosed) as e:
                self.note("refused", rid, attempt_id=attempt.attempt_id, code=e.code)
                attempt.stop_heartbeat()
                return
            except LedgerError as e:
                self.note("refused", rid, attempt_id=attempt.attempt_id, code=e.code)
                attempt.stop_heartbeat()
                return

            answer = self.post_job(agent, self.job(rid, attempt.attempt_id, calls, agent[0],
                                                   crash_after), JOB_TIMEOUT_S)
            crash_after = None
            self.note("answer", rid, attempt_id=attempt.attempt_id, agent=agent[0],
                      stopped=None if answer is None else answer.get("stopped"),
                      timeout=answer is None)
            signal_name = None
            if answer is None:
                signal_name = "heartbeat_timeout"
            elif answer.get("stopped") == "exited":
                signal_name = "replica_exited"
            elif answer.get("stopped") in ("fenced", "unavailable", "error"):
                signal_name = "network_error"
            elif answer.get("stopped"):
                signal_name = "upstream_closed"
            else:
                try:
                    tokens = delivered + 10 + rng.randint(0, 50)
                    attempt.deliver(tokens)
                    self.note("delivered", rid, attempt_id=attempt.attempt_id, tokens=tokens)
                    attempt.finish("completed", tokens)
                    self.note("finished", rid, attempt_id=attempt.attempt_id)
                    return
                except LedgerError as e:
                    self.note("publish_refused", rid, attempt_id=attempt.attempt_id,
                              code=e.code)
                    signal_name = "network_error"
            attempt.stop_heartbeat()
            nxt = self.failover(rng, rid, attempt, agent, signal_name, n + 1)
            if nxt is None:
                return
            attempt, agent = nxt
            n += 1

    def heartbeat(self, rid, attempt):
        """Starts the attempt's heartbeat with the lease the router asked for.

        A begin_attempt whose first answer was lost is answered, when the SDK
        sends it again, with the lease *left* (0 once it ran out), and the
        SDK's Attempt takes that as its lease: start_heartbeat() would then
        raise, or renew too short a lease. The router keeps its own.
        """
        if attempt.lease_ms != ATTEMPT_LEASE_MS:
            self.note("short_lease", rid, attempt_id=attempt.attempt_id,
                      lease_ms=attempt.lease_ms)
            attempt.lease_ms = ATTEMPT_LEASE_MS
        attempt.start_heartbeat()

    def failover(self, rng, rid, attempt, agent, signal_name, number):
        """Asks failover until it answers something final; the next (attempt, agent) or None."""
        others = [a for a in self.agents if a[0] != agent[0]] or self.agents
        nxt_agent = rng.choice(others)
        deadline = time.monotonic() + FENCE_WAIT_CAP_S
        while True:
            try:
                d = self.ledger.failover(rid, attempt.attempt_id, signal_name, next_attempt={
                    "attempt_id": "a%d" % number, "replica": nxt_agent[0],
                    "lease_ms": ATTEMPT_LEASE_MS})
            except LedgerError as e:
                self.note("failover_refused", rid, attempt_id=attempt.attempt_id,
                          signal=signal_name, code=e.code)
                return None
            self.note("decision", rid, attempt_id=attempt.attempt_id, signal=signal_name,
                      action=d.action, retry_after_ms=d.retry_after_ms)
            if d.action == "retry_prefill":
                return d.attempt, nxt_agent
            if d.action != "wait_for_fence" or time.monotonic() > deadline:
                return None
            # The source may still run: if its worker says the job is over, the
            # router acknowledges the cancel for it; else it waits and asks again.
            if self.job_state(agent, rid, attempt.attempt_id) == "done":
                try:
                    attempt.cancel_ack()
                    self.note("cancel_ack", rid, attempt_id=attempt.attempt_id)
                    continue
                except LedgerError as e:
                    self.note("cancel_ack_refused", rid, attempt_id=attempt.attempt_id,
                              code=e.code)
            time.sleep(min(1.0, (d.retry_after_ms or 200) / 1000))

    def loop(self, index):
        rng = random.Random("%s/%s/%d" % (self.seed, self.name, index))
        while not self.stopping.is_set():
            rid = self.next_rid()
            calls = self.make_calls(rng, rid)
            try:
                if rng.random() < P_PLAIN:
                    self.plain(rng, rid, calls)
                else:
                    self.routed(rng, rid, calls)
            except LedgerUnavailable as e:
                self.note("unavailable", rid, code=e.code)
            except Exception as e:  # noqa: BLE001 (a router thread must not die silently)
                self.note("crashed", rid, error="%s: %s" % (type(e).__name__, e),
                          trace=traceback.format_exc())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--ledger", action="append", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--agent", action="append", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=3)
    args = parser.parse_args()
    router = Router(args)
    signal.signal(signal.SIGTERM, lambda *_: router.stopping.set())
    threads = [threading.Thread(target=router.loop, args=(i,), daemon=True)
               for i in range(args.threads)]
    for t in threads:
        t.start()
    print(json.dumps({"address": "router %s" % args.name}), file=sys.stderr, flush=True)
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    router.log.write("router", event="exit", rid=None)


if __name__ == "__main__":
    main()
