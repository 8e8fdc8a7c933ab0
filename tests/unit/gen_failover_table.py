#!/usr/bin/env python3
"""Generates the cross-product table of tests/unit/test_failover.c.

The expected values come from an oracle written from docs/api.md's failover table
(rows 2..10, in order) and the decisions the test's brief states, never from
ledger/core/failover.c. The rows are checked in as C between the BEGIN/END markers
of test_failover.c, so the test needs no Python at run time.

    python3 tests/unit/gen_failover_table.py           # print the rows
    python3 tests/unit/gen_failover_table.py --write   # rewrite them in place
    python3 tests/unit/gen_failover_table.py --check   # exit 1 if stale
"""
import itertools
import os
import sys

# Dimensions, in the order of the C enums of test_failover.c.
SIGNALS = ["replica_exited", "pod_lost", "upstream_closed", "network_error",
           "heartbeat_timeout", "overloaded", "client_disconnected"]
SIG_C = ["SIG_EXITED", "SIG_POD_LOST", "SIG_CLOSED", "SIG_NETWORK", "SIG_HEARTBEAT",
         "SIG_OVERLOADED", "SIG_CLIENT_GONE"]
CERTAIN = {"replica_exited", "pod_lost", "upstream_closed"}
UNCERTAIN = {"network_error", "heartbeat_timeout"}

# Source kinds: (C name, stored state, lease_ms_left, request status).
# Every state but EXPIRED keeps 5000 ms of a stored lease: only LIVE and
# CANCEL_REQUESTED may be held back by it.
SOURCES = [
    ("K_LIVE", "live", 5000, "open"),
    ("K_EXPIRED", "expired", 0, "open"),
    ("K_CANCEL_REQ", "cancel_requested", 5000, "open"),
    ("K_CANCELLED", "cancelled", 5000, "open"),
    ("K_DEAD", "dead", 5000, "open"),
    ("K_SUPERSEDED", "superseded", 5000, "open"),
    ("K_FINISHED", "finished", 5000, "completed"),
    ("K_FAILED", "failed", 5000, "open"),
]
# Budget kinds: (C name, attempt_count, max_attempts, window attempts, window retries)
BUDGETS = [
    ("B_LEFT", 1, 2, 100, 0),
    ("B_MAX", 2, 2, 100, 0),
    ("B_POOL", 1, 2, 100, 20),
]
# Retry cost kinds: (C name, retry_prefill_tokens)
COSTS = [("C_WITHIN", 4096), ("C_OVER", 40000)]

POLICY = dict(max_retry_prefill_tokens=32768, budget_percent=20, budget_min_retries=3)

STATE_C = {"live": "S_LIVE", "expired": "S_EXPIRED", "cancel_requested": "S_CANCEL_REQ",
           "cancelled": "S_CANCELLED", "dead": "S_DEAD", "superseded": "S_SUPERSEDED",
           "finished": "S_FINISHED", "failed": "S_FAILED"}
STATUS_C = {"open": "R_OPEN", "completed": "R_COMPLETED", "failed": "R_FAILED",
            "terminated": "R_TERMINATED", "abandoned": "R_ABANDONED"}
ACTION_C = {"attempt_fenced": "A_FENCED", "request_closed": "A_CLOSED",
            "keep_waiting": "A_KEEP_WAITING", "cancel_upstream": "A_CANCEL",
            "terminate_stream": "A_TERMINATE", "reject": "A_REJECT",
            "wait_for_fence": "A_WAIT", "retry_prefill": "A_RETRY"}
ERROR_C = {None: "NULL", "upstream_decode_interrupted": "E_DECODE",
           "retry_budget_exhausted": "E_BUDGET", "retry_cost_exceeded": "E_COST",
           "tool_outcome_unknown": "E_UNKNOWN"}

RIGHTLESS = {"cancelled", "dead", "superseded", "finished", "failed"}


def pool_allows(attempts, retries):
    """A retry is refused while retries >= max(min_retries, percent% of attempts)."""
    # retries < max(m, p*a/100)  <=>  retries < m  or  100*retries < p*a
    return (retries < POLICY["budget_min_retries"]
            or 100 * retries < POLICY["budget_percent"] * attempts)


def revoke(state, signal, retrying):
    """The source's state once revoked by an action other than keep_waiting."""
    if state in RIGHTLESS:
        return state
    after = "dead" if signal in CERTAIN else "cancel_requested"
    if retrying and after == "cancel_requested":
        after = "superseded"  # fenced for good: a newer attempt takes over
    return after


def decide(req, src, signal, tokens, newest, held, unknown, win):
    """docs/api.md's failover table, rows 2..10. Returns the expected decision."""
    status, delta, count, max_attempts = req
    state, lease = src
    nothing = dict(source_after=state, request_after=status, client_error=None,
                   retry_after=0)
    if not newest:
        return dict(nothing, action="attempt_fenced", final=False)
    if status != "open":
        return dict(nothing, action="request_closed", final=False)
    if signal == "overloaded":
        return dict(nothing, action="keep_waiting", final=False)
    if signal == "client_disconnected":
        return dict(action="cancel_upstream", source_after=revoke(state, signal, False),
                    request_after="terminated" if delta else "abandoned",
                    client_error=None, retry_after=0, final=True)
    if delta:
        return dict(action="terminate_stream", source_after=revoke(state, signal, False),
                    request_after="terminated", client_error="upstream_decode_interrupted",
                    retry_after=0, final=True)
    reject = dict(action="reject", source_after=revoke(state, signal, False),
                  request_after="failed", retry_after=0, final=True)
    if count >= max_attempts or not pool_allows(*win):
        return dict(reject, client_error="retry_budget_exhausted")
    if tokens > POLICY["max_retry_prefill_tokens"]:
        return dict(reject, client_error="retry_cost_exceeded")
    if unknown > 0:
        return dict(reject, client_error="tool_outcome_unknown")
    uncertain = (signal in UNCERTAIN and state in ("live", "cancel_requested") and lease > 0)
    if uncertain or held > 0:
        # docs/api.md row 9: the source waits revoked as cancel_requested, whatever the signal.
        waiting = state if state in RIGHTLESS else "cancel_requested"
        return dict(action="wait_for_fence", source_after=waiting,
                    request_after="open", client_error=None,
                    retry_after=max(lease if uncertain else 0, held), final=False)
    return dict(action="retry_prefill", source_after=revoke(state, signal, True),
                request_after="open", client_error=None, retry_after=0, final=True)


def out_comments(out):
    return sum(1 for line in out if line.startswith("\t/*"))


def rows():
    out = []
    for (si, sig), delta, src, bud, cost in itertools.product(
            enumerate(SIGNALS), (False, True), SOURCES, BUDGETS, COSTS):
        if src is SOURCES[0] and bud is BUDGETS[0] and cost is COSTS[0]:
            out.append("\t/* %s, %s: rows %d.. */" % (
                sig, "delta sent" if delta else "no delta", len(out) - out_comments(out)))
        kname, state, lease, status = src
        bname, count, max_attempts, wa, wr = bud
        cname, tokens = cost
        d = decide((status, delta, count, max_attempts), (state, lease), sig, tokens,
                   True, 0, 0, (wa, wr))
        given = "%s, %d, %s, %s, %s," % (SIG_C[si], int(delta), kname, bname, cname)
        want = "%s, %s, %s, %s, %d, %d}," % (
            ACTION_C[d["action"]], STATE_C[d["source_after"]], STATUS_C[d["request_after"]],
            ERROR_C[d["client_error"]], d["retry_after"], int(d["final"]))
        line = "\t{%s %s" % (given, want)
        if len(line) + 7 > 100:  # the tab is 8 columns wide
            line = "\t{%s\n\t %s" % (given, want)
        out.append(line)
    return out


BEGIN = "/* BEGIN GENERATED by tests/unit/gen_failover_table.py: do not edit */"
END = "/* END GENERATED */"


def main():
    text = "\n".join(rows()) + "\n"
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_failover.c")
    if len(sys.argv) == 1:
        sys.stdout.write(text)
        return 0
    with open(path, encoding="utf-8") as f:
        src = f.read()
    head, rest = src.split(BEGIN + "\n", 1)
    old, tail = rest.split(END, 1)
    if sys.argv[1] == "--check":
        if old != text:
            sys.stderr.write("test_failover.c: the generated table is stale\n")
            return 1
        return 0
    if sys.argv[1] == "--write":
        with open(path, "w", encoding="utf-8") as f:
            f.write(head + BEGIN + "\n" + text + END + tail)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
