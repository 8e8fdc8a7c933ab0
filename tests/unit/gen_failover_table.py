#!/usr/bin/env python3
"""Generates the cross-product rows of tests/unit/test_failover.c.

The expected values come from an oracle written from docs/api.md's failover table
(rows 2..10, in order) and the decisions the test's brief states, never from
ledger/core/failover.c. The rows are checked in as tests/data/failover_rows.tsv,
which test_failover reads at run time, so the test needs no Python; `make unit`
runs --check first, so a file that is not what this script writes fails there.

    python3 tests/unit/gen_failover_table.py           # print the rows
    python3 tests/unit/gen_failover_table.py --write   # rewrite the data file
    python3 tests/unit/gen_failover_table.py --check   # exit 1 if it is stale

The file: '#' lines, then a header naming the columns, then one row per line,
tab-separated, every name as the API spells it (the kinds of source, budget
and cost are the test's own, defined in test_failover.c and below).
"""
import itertools
import os
import sys

# Dimensions, in the order of the C enums of test_failover.c.
SIGNALS = ["replica_exited", "pod_lost", "upstream_closed", "network_error",
           "heartbeat_timeout", "overloaded", "client_disconnected"]
CERTAIN = {"replica_exited", "pod_lost", "upstream_closed"}
UNCERTAIN = {"network_error", "heartbeat_timeout"}

# Source kinds: (name, stored state, lease_ms_left, request status).
# Every state but expired keeps 5000 ms of a stored lease: only live and
# cancel_requested may be held back by it.
SOURCES = [
    ("live", "live", 5000, "open"),
    ("expired", "expired", 0, "open"),
    ("cancel_requested", "cancel_requested", 5000, "open"),
    ("cancelled", "cancelled", 5000, "open"),
    ("dead", "dead", 5000, "open"),
    ("superseded", "superseded", 5000, "open"),
    ("finished", "finished", 5000, "completed"),
    ("failed", "failed", 5000, "open"),
]
# Budget kinds: (name, attempt_count, max_attempts, window attempts, window retries)
BUDGETS = [
    ("left", 1, 2, 100, 0),
    ("max", 2, 2, 100, 0),
    ("pool", 1, 2, 100, 20),
]
# Retry cost kinds: (name, retry_prefill_tokens)
COSTS = [("within", 4096), ("over", 40000)]

POLICY = dict(max_retry_prefill_tokens=32768, budget_percent=20, budget_min_retries=3)

COLUMNS = ["signal", "delta", "source", "budget", "cost",
           "action", "source_after", "request_after", "client_error", "retry_after_ms", "final"]
NO_ERROR = "-"  # the client_error column of a decision without one

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
        # After a delta the stream is cut: the client error says so (API.md row 5).
        return dict(action="cancel_upstream", source_after=revoke(state, signal, False),
                    request_after="terminated" if delta else "abandoned",
                    client_error="client_disconnected" if delta else None, retry_after=0,
                    final=True)
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


def rows():
    """The data rows, as lists of column texts, in the file's order."""
    out = []
    for sig, delta, src, bud, cost in itertools.product(
            SIGNALS, (False, True), SOURCES, BUDGETS, COSTS):
        kname, state, lease, status = src
        bname, count, max_attempts, wa, wr = bud
        cname, tokens = cost
        d = decide((status, delta, count, max_attempts), (state, lease), sig, tokens,
                   True, 0, 0, (wa, wr))
        out.append([sig, str(int(delta)), kname, bname, cname,
                    d["action"], d["source_after"], d["request_after"],
                    d["client_error"] or NO_ERROR, str(d["retry_after"]), str(int(d["final"]))])
    return out


def text():
    head = ["# Generated by tests/unit/gen_failover_table.py from API.md's failover table:",
            "# do not edit; change the script and run it with --write.",
            "# Read by tests/unit/test_failover.c (its cross table), one decision a row:",
            "# the inputs (signal, delta sent, and the kinds of source, budget and cost),",
            "# then what the decision must be; a client_error of \"%s\" means none." % NO_ERROR,
            "\t".join(COLUMNS)]
    return "\n".join(head + ["\t".join(r) for r in rows()]) + "\n"


PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data",
                    "failover_rows.tsv")
SHOWN = "tests/data/failover_rows.tsv"


def main():
    want = text()
    if len(sys.argv) == 1:
        sys.stdout.write(want)
        return 0
    if sys.argv[1] == "--check":
        try:
            with open(PATH, encoding="utf-8", newline="") as f:
                have = f.read()
        except OSError as e:
            sys.stderr.write("%s: %s\n" % (SHOWN, e.strerror))
            return 1
        if have != want:
            sys.stderr.write("%s is not what tests/unit/gen_failover_table.py writes: "
                             "run it with --write (and change the script, not the file)\n"
                             % SHOWN)
            return 1
        return 0
    if sys.argv[1] == "--write":
        with open(PATH, "w", encoding="utf-8", newline="") as f:
            f.write(want)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
