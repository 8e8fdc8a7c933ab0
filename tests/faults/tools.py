#!/usr/bin/env python3
"""The fake tool service: a side effect whose every execution is on record.

`POST /tools/create_ticket` with an `Idempotency-Key` header "creates a
ticket": it appends `{"idempotency_key", "executed_at", "args"}` to the log
and answers `{"ticket": "T-<6 hex of sha256(key)>"}`. Without `--dedupe` it
executes every call it gets, as a careless downstream API would, so a
second execution caused by a failover shows up in the log. With `--dedupe`
it honours the key the way Stripe does: a repeated key gets the first
answer back and is logged as `{"deduped": true, ...}`, which is not an
execution. `GET /log` returns the log as a JSON array.

    tools.py --port 0 --log PATH [--dedupe]

The bound address is announced on stderr as `{"address": "127.0.0.1:PORT"}`.
"""

import argparse
import json
import sys
import threading
import time
from http.server import ThreadingHTTPServer

from jsonhttp import JsonHandler
from tokens import ticket_for


def utc_now():
    """RFC 3339 UTC with milliseconds, as ledgerd writes its timestamps."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ" % (now % 1 * 1000)


class ToolLog:
    """The append-only record of what the tool did, in memory and as JSON lines."""

    def __init__(self, path):
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")
        self._entries = []
        self._answers = {}

    def execute(self, key, args, dedupe):
        """Runs the side effect for @key (or, with @dedupe, replays it); returns the answer."""
        with self._lock:
            entry = {"idempotency_key": key, "executed_at": utc_now(), "args": args}
            if dedupe and key in self._answers:
                entry["deduped"] = True
            else:
                self._answers.setdefault(key, {"ticket": ticket_for(key)})
            self._entries.append(entry)
            self._file.write(json.dumps(entry) + "\n")
            self._file.flush()
            return self._answers[key]

    def entries(self):
        with self._lock:
            return list(self._entries)


class Handler(JsonHandler):
    def do_GET(self):
        if self.path == "/log":
            self.reply(200, self.server.tool_log.entries())
        else:
            self.reply(404, {"error": {"code": "not_found", "message": self.path}})

    def do_POST(self):
        raw = self.read_body()
        if self.path != "/tools/create_ticket":
            self.reply(404, {"error": {"code": "not_found", "message": self.path}})
            return
        key = self.headers.get("Idempotency-Key")
        if not key:
            self.reply(400, {"error": {"code": "idempotency_key_required",
                                       "message": "Idempotency-Key header missing"}})
            return
        try:
            args = json.loads(raw or b"null")
        except ValueError:
            self.reply(400, {"error": {"code": "invalid_json", "message": "body is not JSON"}})
            return
        self.reply(200, self.server.tool_log.execute(key, args, self.server.dedupe))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to bind (0.0.0.0 in a container)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True, help="JSON lines, one per execution")
    parser.add_argument("--dedupe", action="store_true",
                        help="honour the Idempotency-Key: a repeated key is not executed again")
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.tool_log = ToolLog(args.log)
    server.dedupe = args.dedupe
    print(json.dumps({"address": "%s:%d" % server.server_address[:2]}), file=sys.stderr,
          flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
