#!/usr/bin/env python3
"""make bench: what ledger-mcp and the TypeScript client add to a tool call.

ledger-mcp against the same call made directly:

One MCP stdio server (a minimal line server below, so that the figure is the
proxy's and ledgerd's, not the server's), spoken to in the same run:
directly, and through `ledger-mcp stdio` in front of a ledgerd on a
PostgreSQL with fsync on. Every call through the proxy is a new key (claim,
forward, complete: two durable commits) and then the same key again (a
replay, which never reaches the server). Calls go one at a time, each timed
from the line written to the answer read; medians and p99 of MCP_CALLS
calls (default 500) each, interleaved in rounds so the machine's noise
falls on all three alike. Prints a table and writes
build/bench/mcp_latency.json. Then, on the same ledgerd, the TypeScript
client's toolCall against the bare function (tests/bench/js_toolcall_latency.mjs,
sdk/js built first).
"""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "sdk" / "js"))
import js_build  # noqa: E402
from pgcluster import Cluster, free_port  # noqa: E402

LEDGERD = Path(os.environ.get("LEDGERD", ROOT / "build" / "ledgerd"))
PROXY = ROOT / "build" / "ledger-mcp"
OUT = ROOT / "build" / "bench"
CALLS = int(os.environ.get("MCP_CALLS", "500"))

SERVER = r'''
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" in m and "method" in m:
        r = {"content": [{"type": "text", "text": "ok"}]} if m["method"] == "tools/call" else {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n")
        sys.stdout.flush()
'''


class Peer:
    """A process spoken to one line at a time."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0

    def call(self, meta):
        self.next_id += 1
        params = {"name": "charge", "arguments": {"order": "o-%d" % self.next_id, "cents": 5}}
        if meta is not None:
            params["_meta"] = meta
            params["arguments"]["order"] = meta["io.ledgerd/tool_call_id"]
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                           "params": params}) + "\n"
        started = time.perf_counter()
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        elapsed = time.perf_counter() - started
        if "result" not in answer:
            raise RuntimeError("not a result: %s" % answer)
        return elapsed, answer

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def ms(values, q):
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    cluster = Cluster.new({"fsync": "on", "synchronous_commit": "on"})
    ledgerd = None
    try:
        db = cluster.create_db("mcp_bench")
        subprocess.run([LEDGERD, "migrate", "--database-url", db], check=True,
                       capture_output=True)
        token = subprocess.run([LEDGERD, "token", "create", "--tenant", "bench", "--role",
                                "agent", "--database-url", db], check=True,
                               capture_output=True, text=True).stdout.strip()
        port = free_port()
        ledgerd = subprocess.Popen([LEDGERD, "serve", "--database-url", db, "--listen",
                                    "127.0.0.1:%d" % port, "--log-level", "warn"],
                                   stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        server = [sys.executable, "-c", SERVER]
        env = dict(os.environ, LEDGER_URL="http://127.0.0.1:%d" % port, LEDGER_TOKEN=token,
                   LEDGER_MCP_LOG_LEVEL="warn")
        direct = Peer(server)
        proxied = Peer([str(PROXY), "stdio", "--"] + server, env=env)
        times = {"direct": [], "proxied_first": [], "proxied_replay": []}
        for i in range(CALLS):
            meta = {"io.ledgerd/request_id": "bench-%d" % os.getpid(),
                    "io.ledgerd/tool_call_id": "call_%05d" % i}
            times["direct"].append(direct.call(None)[0])
            elapsed, first = proxied.call(meta)
            times["proxied_first"].append(elapsed)
            elapsed, again = proxied.call(meta)
            times["proxied_replay"].append(elapsed)
            if not again["result"].get("_meta", {}).get("io.ledgerd/replayed"):
                raise RuntimeError("the repeat was not a replay: %s" % again)
        direct.close()
        proxied.close()
        with js_build.locked():
            js_build.build_core()
        js = subprocess.run(["node", str(ROOT / "tests" / "bench" / "js_toolcall_latency.mjs")],
                            env=dict(env, JS_CALLS=str(CALLS)), capture_output=True, text=True,
                            timeout=600)
        js_table = js.stdout if js.returncode == 0 else "js_toolcall_latency failed: " + js.stderr
    finally:
        if ledgerd is not None:
            ledgerd.terminate()
            ledgerd.wait(timeout=30)
        cluster.destroy()

    base = statistics.median(times["direct"])
    results = {"calls": CALLS}
    print("\n| %d calls, one at a time | p50 ms | p99 ms | p50 added ms |" % CALLS)
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        p50 = statistics.median(values)
        results[name] = {"p50_ms": round(1000 * p50, 3), "p99_ms": round(ms(values, 0.99), 3),
                         "added_p50_ms": round(1000 * (p50 - base), 3)}
        print("| %s | %.3f | %.3f | %.3f |" % (name, 1000 * p50, ms(values, 0.99),
                                               1000 * (p50 - base)))
    (OUT / "mcp_latency.json").write_text(json.dumps(results, indent=2) + "\n")
    print("\nThe TypeScript client's toolCall, on the same ledgerd:\n" + js_table)


if __name__ == "__main__":
    main()
