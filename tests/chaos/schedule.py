"""The faults of a campaign, drawn from its seed before anything starts.

`plan(seed, seconds, ...)` is a pure function: the same seed gives the
same schedule, which the campaign prints and keeps in schedule.json. Each
fault is `{"n", "at", "kind", "target", ...parameters}`, `at` in seconds
from the start of the load. What a fault finds when its time comes (who
holds a claim, how long a rebuild takes) is not in the seed, so a rerun
with the same seed replays the schedule, not every interleaving.

Kinds (campaign.py carries them out):
  ledgerd_kill     SIGKILL of a ledgerd; restarted after down_s
  ledgerd_stop     SIGSTOP of a ledgerd for stop_s, then SIGCONT
  agent_stop       SIGSTOP of an agent worker that holds a claim (chosen
                   when the fault comes), past its claim's lease: it wakes
                   as a zombie
  router_stop      SIGSTOP of a router for stop_s (its attempts' heartbeats stop)
  pg_failover      SIGKILL of the PostgreSQL primary, promotion of the
                   standby after detect_s, the old primary rebuilt as the
                   new synchronous standby (at least one per 60 s)
  answer_drop      for window_s, the proxy in front of a ledgerd forwards
                   each request and throws its answer away with probability p
  answer_delay     ... holds every answer delay_ms
  conn_reset       ... resets the connection instead of forwarding, with probability p
  db_outage        both ledgerds lose PostgreSQL (their proxies to it reset
                   everything) for window_s; meanwhile one ledgerd is
                   SIGKILLed and restarted while the database is unreachable
  db_pause         the proxies to PostgreSQL move no byte for window_s
                   (connections stay open: calls hang, then go on)
"""

import random

WEIGHTS = {
    "ledgerd_kill": 3.0,
    "ledgerd_stop": 2.0,
    "agent_stop": 4.0,
    "router_stop": 1.5,
    "pg_failover": 1.0,
    "answer_drop": 2.0,
    "answer_delay": 1.5,
    "conn_reset": 1.5,
    "db_outage": 1.0,
    "db_pause": 0.8,
}
KINDS = tuple(WEIGHTS)
FIRST_AT_S = 3.0
GAP_S = (1.5, 4.5)
QUIET_END_S = 5.0   # no fault starts in the last seconds of the load
PROMOTION_EVERY_S = 60
PROMOTION_WINDOW_S = (6.0, 30.0)  # where in each minute a promotion is forced, if none was drawn


def draw(rng, kind, ledgerds, agents, routers, claim_lease_s):
    """The target and parameters of one fault of @kind."""
    if kind == "ledgerd_kill":
        return {"target": "ledgerd-%d" % rng.randint(1, ledgerds),
                "down_s": round(rng.uniform(0.3, 3.0), 2)}
    if kind == "ledgerd_stop":
        return {"target": "ledgerd-%d" % rng.randint(1, ledgerds),
                "stop_s": round(rng.uniform(1.0, 4.0), 2)}
    if kind == "agent_stop":
        return {"target": "holding-claim", "fallback": "agent-%d" % rng.randint(1, agents),
                "stop_s": round(claim_lease_s + rng.uniform(2.0, 8.0), 2)}
    if kind == "router_stop":
        return {"target": "router-%d" % rng.randint(1, routers),
                "stop_s": round(rng.uniform(1.0, 5.0), 2)}
    if kind == "pg_failover":
        return {"target": "primary", "detect_s": round(rng.uniform(0.3, 1.5), 2)}
    if kind == "answer_drop":
        return {"target": "proxy-L%d" % rng.randint(1, ledgerds),
                "window_s": round(rng.uniform(2.0, 6.0), 2), "p": round(rng.uniform(0.2, 0.6), 2),
                "seed": rng.randrange(1 << 30)}
    if kind == "answer_delay":
        return {"target": "proxy-L%d" % rng.randint(1, ledgerds),
                "window_s": round(rng.uniform(2.0, 6.0), 2),
                "delay_ms": rng.choice((500, 1500, 2500, 4000))}
    if kind == "conn_reset":
        return {"target": "proxy-L%d" % rng.randint(1, ledgerds),
                "window_s": round(rng.uniform(2.0, 6.0), 2), "p": round(rng.uniform(0.2, 0.5), 2),
                "seed": rng.randrange(1 << 30)}
    if kind == "db_outage":
        return {"target": "ledgerd-%d" % rng.randint(1, ledgerds),
                "window_s": round(rng.uniform(2.0, 6.0), 2),
                "kill_after_s": round(rng.uniform(0.2, 1.0), 2)}
    if kind == "db_pause":
        return {"target": "database", "window_s": round(rng.uniform(1.0, 3.0), 2)}
    raise ValueError(kind)


def plan(seed, seconds, *, ledgerds=2, agents=4, routers=2, claim_lease_s=3.0):
    """The faults of a campaign of @seconds with @seed, in time order."""
    rng = random.Random(seed)
    faults = []
    at = FIRST_AT_S + rng.uniform(0, 1)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    while at < seconds - QUIET_END_S:
        kind = rng.choices(kinds, weights)[0]
        faults.append(dict({"at": round(at, 2), "kind": kind},
                           **draw(rng, kind, ledgerds, agents, routers, claim_lease_s)))
        at += rng.uniform(*GAP_S)
    # At least one promotion in every started minute that has room for one.
    for start in range(0, int(seconds), PROMOTION_EVERY_S):
        end = min(start + PROMOTION_EVERY_S, seconds - QUIET_END_S)
        if any(f["kind"] == "pg_failover" and start <= f["at"] < end for f in faults):
            continue
        lo, hi = start + PROMOTION_WINDOW_S[0], min(start + PROMOTION_WINDOW_S[1], end)
        if hi <= lo:
            continue
        faults.append(dict({"at": round(rng.uniform(lo, hi), 2), "kind": "pg_failover"},
                           **draw(rng, "pg_failover", ledgerds, agents, routers,
                                  claim_lease_s)))
    faults.sort(key=lambda f: f["at"])
    for n, fault in enumerate(faults, 1):
        fault["n"] = n
    return faults
