#!/usr/bin/env python3
"""Writes the pgbench scripts of `make bench` from ledgerd's own statements.

The baseline of the benchmark is PostgreSQL running exactly the SQL ledgerd
sends: each statement's text comes from `ledgerd sql NAME`, and its
parameters become pgbench variables (or the NULL ledgerd sends). Run with
--check to verify that the scripts kept in tests/bench/ are current: a test
in `make test` does, so the baseline cannot drift from the store.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Each transaction: a list of pipelines (one round trip each, as ledgerd
# sends them), each a list of (statement, parameters $1..$n).
TOOL_CALL = [
    [("claim_fast", [":tenant", ":rid", ":cid", ":tool", ":sha", "NULL", ":dedupes", ":claim",
                     "NULL", ":lease", ":claimdetail"])],
    [("complete_fast", [":tenant", ":rid", ":cid", ":token", ":outcome", ":retryable",
                        ":result", ":completedetail", "NULL", "NULL"])],
]

# A full batch as a store worker sends it: BATCH claims and BATCH
# completions in one transaction and one round trip, each kind in one
# statement over arrays (in ledgerd the completions are of keys claimed in
# earlier batches; the work is the same).
BATCH = 16


def array(var, cast):
    """An array parameter: BATCH values of @var (one per call, or %d-numbered)."""
    items = [var % i if "%d" in var else var for i in range(BATCH)]
    return "ARRAY[%s]::%s" % (", ".join(items), cast)


RIDS = array(":rid%d", "text[]")
TENANTS = array(":tenant", "text[]")
CIDS = array(":cid", "text[]")
TOOL_CALL_BATCH = [
    [("BEGIN", []),
     ("batch_settings", []),
     ("batch_lock", [TENANTS, RIDS]),
     ("claim_many", [TENANTS, RIDS, CIDS, array(":tool", "text[]"), array(":sha", "text[]"),
                     "NULL", array(":dedupes", "boolean[]"), array(":claim%d", "text[]"),
                     "NULL", array(":lease", "bigint[]"), array(":claimdetail", "text[]")]),
     ("complete_many", [TENANTS, RIDS, CIDS, array(":token", "bigint[]"),
                        array(":outcome", "text[]"), array(":retryable", "boolean[]"),
                        array(":result", "text[]"), array(":completedetail", "text[]"),
                        array("NULL", "bigint[]"), array("NULL", "text[]")]),
     ("COMMIT", [])],
]

REPLAY = [
    [("claim_fast", [":rtenant", ":rkey", ":cid", ":tool", ":sha", "NULL", ":dedupes", ":claim",
                     "NULL", ":lease", ":claimdetail"])],
]

LOOK = [":tenant", ":rid", ":aid", "NULL", "NULL"]
ATTEMPT_CYCLE = [
    # POST attempts: lock and read, then write and commit.
    [("BEGIN", []), ("lock_request", [":tenant", ":rid"]), ("read_request", [":tenant", ":rid"]),
     ("read_attempts", LOOK), ("calls_summary", [":tenant", ":rid"]),
     ("settled_calls", [":tenant", ":rid"])],
    [("attempt_insert", [":tenant", ":rid", ":aid", ":one", ":replica", "NULL", ":false",
                         ":lease", ":false", "NULL"]),
     ("event_insert", [":tenant", ":rid", ":createdtype", ":aid", "NULL", ":createddetail"]),
     ("request_set", [":tenant", ":rid", ":open", ":false", ":zero", ":one", ":two", "NULL",
                      "NULL", "NULL"]),
     ("COMMIT", [])],
    # deliver
    [("BEGIN", []), ("lock_existing", [":tenant", ":rid"]), ("read_request", [":tenant", ":rid"]),
     ("read_attempts", LOOK)],
    [("event_insert", [":tenant", ":rid", ":deltatype", ":aid", "NULL", ":deltadetail"]),
     ("attempt_set", [":tenant", ":rid", ":aid", ":live", ":zero", ":zero", "NULL"]),
     ("request_set", [":tenant", ":rid", ":open", ":true", ":zero", ":one", ":two", "NULL",
                      "NULL", "NULL"]),
     ("COMMIT", [])],
    # finish
    [("BEGIN", []), ("lock_existing", [":tenant", ":rid"]), ("read_request", [":tenant", ":rid"]),
     ("read_attempts", LOOK)],
    [("attempt_set", [":tenant", ":rid", ":aid", ":finished", ":zero", ":tokens", ":completed"]),
     ("event_insert", [":tenant", ":rid", ":finishedtype", ":aid", "NULL", ":finisheddetail"]),
     ("event_insert", [":tenant", ":rid", ":statustype", ":aid", "NULL", ":statusdetail"]),
     ("request_set", [":tenant", ":rid", ":completed", ":true", ":tokens", ":one", ":two",
                      "NULL", "NULL", "NULL"]),
     ("COMMIT", [])],
]

SCRIPTS = {
    "tool_call.sql": (TOOL_CALL, ["\\set rid random(1, 4000000000000000)",
                                  "\\set claim random(1000000000000000, 9000000000000000)"]),
    "tool_call_batch.sql": (TOOL_CALL_BATCH,
                            ["\\set rid%d random(1, 4000000000000000)" % i for i in range(BATCH)]
                            + ["\\set claim%d random(1000000000000000, 9000000000000000)" % i
                               for i in range(BATCH)]),
    "replay.sql": (REPLAY, ["\\set rkey random(1, :replaykeys)",
                            "\\set claim random(1000000000000000, 9000000000000000)"]),
    "attempt_cycle.sql": (ATTEMPT_CYCLE, ["\\set rid random(1, 4000000000000000)"]),
}


def statement(ledgerd, name, params):
    if name in ("BEGIN", "COMMIT") or name.startswith("SET "):
        return name + ";"
    sql = subprocess.run([ledgerd, "sql", name], check=True, capture_output=True,
                         text=True).stdout.strip()
    count = max((int(n) for n in re.findall(r"\$(\d+)", sql)), default=0)
    if count != len(params):
        sys.exit("gen_pgbench: %s takes %d parameters, the script gives %d"
                 % (name, count, len(params)))
    return re.sub(r"\$(\d+)", lambda m: params[int(m.group(1)) - 1], sql) + ";"


def render(ledgerd, transaction, preamble):
    lines = ["-- Generated by tests/bench/gen_pgbench.py from `ledgerd sql`: do not edit."]
    lines += preamble
    for pipeline in transaction:
        if len(pipeline) > 1:
            lines.append("\\startpipeline")
        lines += [statement(ledgerd, name, params) for name, params in pipeline]
        if len(pipeline) > 1:
            lines.append("\\endpipeline")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ledgerd", required=True)
    ap.add_argument("--check", action="store_true", help="fail if a kept script is stale")
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args()
    stale = []
    for name, (transaction, preamble) in SCRIPTS.items():
        text = render(args.ledgerd, transaction, preamble)
        path = Path(args.out) / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        sys.exit("gen_pgbench: stale (run tests/bench/gen_pgbench.py): " + ", ".join(stale))


if __name__ == "__main__":
    main()
