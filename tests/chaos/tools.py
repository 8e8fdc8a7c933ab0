#!/usr/bin/env python3
"""The chaos campaign's tool service: a fencing-aware side effect on record.

`POST /call/<tool>` with the headers `Idempotency-Key` (the ledger's
"request_id:tool_call_id") and `Fencing-Token` runs the tool once and
appends what it did to the log, one JSON line per call it received:

    {"seq", "at", "key", "tool", "token", "verdict", "answer"}

`verdict` is what the tool made of the call:
  executed   the side effect happened (answer 200, or 422 for a business
             refusal that happened all the same: "outcome": "rejected")
  refused    the token is lower than one already seen for the key: a
             zombie holder, fenced here (409 stale_token); nothing happened
  transient  a failure before anything happened (503); nothing happened
  deduped    a tool that honours the idempotency key saw the key again
             after a successful execution: the first answer, replayed (200);
             nothing happened

`send_email` and `notify` honour the key (the ledger's `tool_dedupes`);
`create_ticket` and `charge` do not: they run whatever they accept, as a careless API
would, so only fencing keeps a zombie out. Transient failures and business
refusals are drawn from a hash of (seed, key, token): a run replays them.

`GET /log` is the whole log; `GET /log?key=K` the entries of one key (the
operator reads it before resolving an unknown outcome).

    tools.py --port 0 --log PATH --seed N

The bound address is announced on stderr as `{"address": "127.0.0.1:PORT"}`.
"""

import argparse
import hashlib
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEDUPE_TOOLS = frozenset({"send_email", "notify"})
TOOLS = ("create_ticket", "send_email", "charge", "notify")
TRANSIENT_PER_MILLE = 70
REJECTED_PER_MILLE = 30


def draw(seed, key, token):
    """A number in 0..999 fixed by (seed, key, token): the tool's mood for this call."""
    digest = hashlib.sha256(("%s|%s|%s" % (seed, key, token)).encode()).digest()
    return int.from_bytes(digest[:4], "big") % 1000


class ToolLog:
    """The tool's state (highest token seen, first answers) and its append-only log."""

    def __init__(self, path, seed):
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")
        self._seed = seed
        self._entries = []
        self._highest = {}  # key -> highest fencing token seen
        self._answers = {}  # key -> the answer of its successful execution (deduping tools)
        self._executions = {}  # key -> number of executions

    def call(self, tool, key, token):
        """Runs @tool for @key under @token; returns (HTTP status, answer)."""
        with self._lock:
            entry = {"seq": len(self._entries) + 1, "at": time.time(), "key": key,
                     "tool": tool, "token": token}
            highest = self._highest.get(key, 0)
            mood = draw(self._seed, key, token)
            if token < highest:
                status, verdict = 409, "refused"
                answer = {"error": {"code": "stale_token", "highest_token": highest}}
            elif tool in DEDUPE_TOOLS and key in self._answers:
                self._highest[key] = token
                status, verdict, answer = 200, "deduped", self._answers[key]
            elif mood < TRANSIENT_PER_MILLE:
                self._highest[key] = token
                status, verdict = 503, "transient"
                answer = {"error": {"code": "transient", "message": "try again"}}
            else:
                self._highest[key] = token
                n = self._executions.get(key, 0) + 1
                self._executions[key] = n
                verdict = "executed"
                ref = hashlib.sha256(("%s|%s" % (key, token)).encode()).hexdigest()[:10]
                answer = {"tool": tool, "key": key, "token": token, "execution": n,
                          "ref": "%s-%s" % (tool[:2].upper(), ref)}
                if mood < TRANSIENT_PER_MILLE + REJECTED_PER_MILLE:
                    status = 422
                    answer["outcome"] = "rejected"
                    entry["outcome"] = "rejected"
                else:
                    status = 200
                    entry["outcome"] = "ok"
                    if tool in DEDUPE_TOOLS:
                        self._answers[key] = answer
            entry["verdict"] = verdict
            entry["status"] = status
            entry["answer"] = answer
            self._entries.append(entry)
            self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
            self._file.flush()
            return status, answer

    def entries(self, key=None):
        with self._lock:
            return [e for e in self._entries if key is None or e["key"] == key]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        """Quiet: the tool log is the record."""

    def reply(self, status, body):
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        parts = urllib.parse.urlsplit(self.path)
        if parts.path != "/log":
            self.reply(404, {"error": {"code": "not_found"}})
            return
        key = urllib.parse.parse_qs(parts.query).get("key", [None])[0]
        self.reply(200, self.server.tool_log.entries(key))

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        tool = self.path.removeprefix("/call/")
        if not self.path.startswith("/call/") or tool not in TOOLS:
            self.reply(404, {"error": {"code": "not_found", "message": self.path}})
            return
        key = self.headers.get("Idempotency-Key")
        try:
            token = int(self.headers.get("Fencing-Token", ""))
        except ValueError:
            token = None
        if not key or token is None or token < 1:
            self.reply(400, {"error": {"code": "bad_call",
                                       "message": "Idempotency-Key and Fencing-Token required"}})
            return
        self.reply(*self.server.tool_log.call(tool, key, token))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.tool_log = ToolLog(args.log, args.seed)
    print(json.dumps({"address": "%s:%d" % server.server_address[:2]}), file=sys.stderr,
          flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
