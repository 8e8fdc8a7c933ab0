#!/usr/bin/env python3
"""The operator of the chaos campaign: it settles some unknown outcomes, as a person would.

Every few seconds it lists the tool calls whose outcome is unknown
(`GET /v1/tool-calls?state=unknown`), and for some of them (drawn from
the seed) reads the tool's own record of the key (`GET /log?key=` of the
tool service) and resolves the call by it: `succeeded` or `failed` with
the tool's answer when the tool executed it, `not_executed` when it did
not. A frozen holder may still wake and run the tool after that look: the
operator's mistake, which the checker excuses for a key resolved
`not_executed`, as the design does.

Its exchanges with ledgerd are logged like every client's (sdkwrap).

    resolver.py --ledger URL --ledger URL --token ADMIN --tools URL --log PATH --seed N
"""

import argparse
import http.client
import json
import random
import signal
import sys
import threading
import urllib.parse

from sdkwrap import ClientLog, LoggedTransport, split_url

from ledger_client import LedgerError  # noqa: I100
from ledger_client._http import json_body, quote_id

INTERVAL_S = 2.0
P_RESOLVE = 0.5


def tool_record(tools, key):
    conn = http.client.HTTPConnection(*tools, timeout=5)
    try:
        conn.request("GET", "/log?" + urllib.parse.urlencode({"key": key}))
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ledger", action="append", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--tools", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    log = ClientLog(args.log, "operator")
    transport = LoggedTransport(args.ledger, args.token, log, rng=random.Random(args.seed))
    tools = split_url(args.tools)
    rng = random.Random(args.seed)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    seen = set()
    print(json.dumps({"address": "operator"}), file=sys.stderr, flush=True)
    while not stopping.wait(INTERVAL_S):
        try:
            listed = transport.call("GET", "/v1/tool-calls?state=unknown&limit=100",
                                    retry_s=0).body
        except LedgerError:
            continue
        for item in listed.get("items", []):
            key = item["idempotency_key"]
            if key in seen or stopping.is_set():
                continue
            seen.add(key)
            if rng.random() >= P_RESOLVE:
                log.write("operator", event="left_unknown", key=key)
                continue
            executed = [e for e in tool_record(tools, key) if e["verdict"] == "executed"]
            if executed:
                last = executed[-1]
                resolution = "failed" if last.get("outcome") == "rejected" else "succeeded"
                body = json_body({"resolution": resolution, "note": "per the tool's record"},
                                 raw={"result": json.dumps(last["answer"],
                                                           separators=(",", ":"))})
            else:
                resolution = "not_executed"
                body = json_body({"resolution": resolution,
                                  "note": "the tool has no execution of it"})
            path = "/v1/requests/%s/tool-calls/%s/resolve" % (
                quote_id(item["request_id"]), quote_id(item["tool_call_id"]))
            try:
                transport.call("POST", path, body, retry_s=10)
                log.write("operator", event="resolved", key=key, resolution=resolution)
            except LedgerError as e:
                log.write("operator", event="resolve_refused", key=key, code=e.code)
    log.write("operator", event="exit")


if __name__ == "__main__":
    main()
