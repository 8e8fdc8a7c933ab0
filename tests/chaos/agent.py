#!/usr/bin/env python3
"""An agent worker of the chaos campaign: a replica that runs tool calls.

A router (router.py) hands it one logical request at a time over HTTP,
`POST /run` with the job

    {"rid", "attempt_id" (or null), "calls": [{"cid", "tool", "args", "dedupe"}],
     "lease_ms", "wait_s", "crash_after" (or null), "owner"}

and it runs the calls in order, each through the ledger, and answers what
became of each one. `GET /status` says how many claims it holds right now
(the campaign freezes a worker that holds one); `GET /job?rid=&attempt=`
whether a job it was given is still running (a router asks before it
acknowledges a cancel on the worker's behalf).

Two kinds:
  --kind py  every call through the Python SDK (Ledger.tool_call), each of
             its HTTP exchanges logged (sdkwrap.LoggedTransport). With
             --careful it checks, before it calls the tool, that the lease
             it can prove is still running: woken from a freeze past its
             lease it fences itself. Without, only the tool's fencing stops it.
  --kind c   every call through the C SDK: each job runs build/tests/chaos_agent
             (tests/chaos/c_agent.c, built against build/libledger_client.a),
             whose JSON lines (one per tool call: what
             ledger_client_tool_call() returned) are logged here. The C SDK
             shows outcomes, not single exchanges.

The tool is tools.py: `POST /call/<tool>` with the idempotency key and the
fencing token. Its answer becomes the call's result; 409 (fenced by the
tool) means not executed (release), 503 retryable, 422 a failure that is
recorded and replayed.

    agent.py --name A1 --kind py --ledger URL --ledger URL --token T --tools URL
             --log PATH --seed N [--careful] [--c-agent PATH]
"""

import argparse
import http.client
import json
import random
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sdkwrap import ClientLog, make_ledger, split_url

from ledger_client import (ArgsMismatch, AttemptFenced, InProgress, LedgerError,  # noqa: I100
                           LedgerUnavailable, NotExecuted, OutcomeUnknown, Retryable)
from ledger_client._http import quote_id

RETRY_S = 15.0           # a claim (or any call) is retried this long without an answer
COMPLETE_RETRY_S = 30.0  # an outcome is recorded for this long: the effect happened
CAREFUL_MARGIN_S = 0.5   # a careful agent calls the tool only with this much lease left
RELEASED_TRIES = 3       # a call the tool failed transiently is claimed again this often


class ToolRejected(Exception):
    """The tool ran and refused for business reasons: a final, recorded failure."""


class Worker:
    def __init__(self, args):
        self.name = args.name
        self.kind = args.kind
        self.urls = args.ledger
        self.token = args.token
        self.tools = split_url(args.tools)
        self.careful = args.careful
        self.c_agent = args.c_agent
        self.rng = random.Random(args.seed)
        self.rng_lock = threading.Lock()
        self.log = ClientLog(args.log, self.name)
        self.ledger = make_ledger(self.urls, self.token, self.log, retry_s=RETRY_S,
                                  complete_retry_s=COMPLETE_RETRY_S,
                                  rng=random.Random(args.seed + 1))
        self.lock = threading.Lock()
        self.holding = 0
        self.jobs = {}  # (rid, attempt_id) -> "running" | "done"
        self.c_url = 0

    def uniform(self, a, b):
        with self.rng_lock:
            return self.rng.uniform(a, b)

    # --- the tool -------------------------------------------------------------

    def call_tool(self, tool, key, token):
        """One call of the tool service; returns (status, parsed answer)."""
        conn = http.client.HTTPConnection(*self.tools, timeout=10)
        try:
            conn.request("POST", "/call/" + tool, body=b"{}",
                         headers={"Idempotency-Key": key, "Fencing-Token": str(token),
                                  "Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            conn.close()

    def tool_fn(self, job, call):
        rid, cid = job["rid"], call["cid"]
        call_path = "/v1/requests/%s/tool-calls/%s" % (quote_id(rid), quote_id(cid))

        def fn(key, token):
            with self.lock:
                self.holding += 1
            try:
                time.sleep(self.uniform(0.02, 0.25))  # the work before the side effect
                if self.careful:
                    left = self.ledger._transport.lease_left_s(call_path, token)
                    if left is None or left < CAREFUL_MARGIN_S:
                        self.log.write("self_fenced", rid=rid, cid=cid, token=token,
                                       lease_left_s=left)
                        raise NotExecuted("the lease may have run out: not calling the tool")
                status, answer = self.call_tool(call["tool"], key, token)
                self.log.write("tool", rid=rid, cid=cid, token=token, status=status,
                               answer=answer)
                time.sleep(self.uniform(0.0, 0.1))  # the work after it
                if status == 200:
                    return answer
                if status == 409:
                    raise NotExecuted("the tool refused token %d as stale" % token)
                if status == 503:
                    raise Retryable("the tool failed before it acted")
                raise ToolRejected(json.dumps(answer, sort_keys=True))
            finally:
                with self.lock:
                    self.holding -= 1
        return fn

    # --- one call through the Python SDK ------------------------------------------

    def one_call_py(self, job, call):
        rid, cid = job["rid"], call["cid"]
        out = {"cid": cid}
        try:
            res = self.ledger.tool_call(
                rid, cid, self.tool_fn(job, call), args=call["args"], tool=call["tool"],
                attempt_id=job.get("attempt_id"), owner=job.get("owner"),
                lease_ms=job["lease_ms"], tool_dedupes=call["dedupe"], wait_s=job["wait_s"])
        except ToolRejected:
            out["kind"] = "executed_failed"
        except Retryable:
            out["kind"] = "released"
        except NotExecuted as e:
            out.update(kind="not_executed", reason=str(e))
        except InProgress:
            out["kind"] = "in_progress"
        except OutcomeUnknown:
            out["kind"] = "unknown"
        except AttemptFenced:
            out["kind"] = "fenced"
        except ArgsMismatch:
            out["kind"] = "mismatch"
        except LedgerUnavailable as e:
            out.update(kind="unavailable", code=e.code)
        except LedgerError as e:
            out.update(kind="refused", code=e.code)
        else:
            out.update(kind="unrecorded" if not res.recorded else
                       "executed" if res.executed else "replayed",
                       outcome=res.outcome, result_json=res.result_json,
                       token=res.fencing_token)
        self.log.write("outcome", sdk="python", rid=rid, attempt_id=job.get("attempt_id"),
                       **{("call_kind" if k == "kind" else k): v for k, v in out.items()})
        return out

    # --- a job through the C SDK -------------------------------------------------

    def run_c(self, job):
        with self.lock:
            url = self.urls[self.c_url % len(self.urls)]
            self.c_url += 1
        argv = [self.c_agent, "--url", url, "--token", self.token,
                "--tools", "http://%s:%d" % self.tools, "--rid", job["rid"],
                "--lease-ms", str(job["lease_ms"]), "--wait-ms", str(int(job["wait_s"] * 1000)),
                "--owner", job.get("owner") or self.name,
                "--seed", str(int(self.uniform(0, 1 << 30)))]
        if job.get("attempt_id"):
            argv += ["--attempt", job["attempt_id"]]
        if job.get("crash_after") is not None:
            argv += ["--crash-after", str(job["crash_after"])]
        for call in job["calls"]:
            argv += ["--call", "%s:%s:%d:%s" % (call["cid"], call["tool"], int(call["dedupe"]),
                                                json.dumps(call["args"], sort_keys=True,
                                                           separators=(",", ":")))]
        with self.lock:
            self.holding += 1
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        finally:
            with self.lock:
                self.holding -= 1
        results, stopped = [], None
        for line in done.stdout.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("stopped"):
                stopped = entry["stopped"]
                continue
            kind = entry.get("kind")
            if kind == "executed" and entry.get("call") == "failed":
                entry["kind"] = "executed_failed"
            self.log.write("outcome", sdk="c", rid=job["rid"], attempt_id=job.get("attempt_id"),
                           via=url, **{("call_kind" if k == "kind" else k): v
                                       for k, v in entry.items()})
            results.append(entry)
        if done.returncode not in (0, 3):
            self.log.write("c_agent_exit", rid=job["rid"], rc=done.returncode,
                           stderr=done.stderr[-2000:])
            stopped = stopped or "c_agent_failed"
        return {"calls": results, "stopped": stopped}

    # --- a job ------------------------------------------------------------------

    def run(self, job):
        jid = (job["rid"], job.get("attempt_id"))
        with self.lock:
            self.jobs[jid] = "running"
        self.log.write("job", event="start", rid=job["rid"], attempt_id=job.get("attempt_id"),
                       calls=len(job["calls"]), crash_after=job.get("crash_after"))
        try:
            if self.kind == "c":
                answer = self.run_c(job)
            else:
                answer = self.run_py(job)
        finally:
            with self.lock:
                self.jobs[jid] = "done"
        self.log.write("job", event="end", rid=job["rid"], attempt_id=job.get("attempt_id"),
                       stopped=answer["stopped"], kinds=[c.get("kind") for c in answer["calls"]])
        return answer

    def run_py(self, job):
        results = []
        for i, call in enumerate(job["calls"]):
            if job.get("crash_after") == i:
                return {"calls": results, "stopped": "exited"}
            for _ in range(RELEASED_TRIES):
                out = self.one_call_py(job, call)
                if out["kind"] != "released":
                    break
            results.append(out)
            if out["kind"] not in ("executed", "replayed", "executed_failed"):
                return {"calls": results, "stopped": out["kind"]}
        return {"calls": results, "stopped": None}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002
        """Quiet: the client log is the record."""

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            pass  # the router gave up waiting: the job's record is in the log

    def do_GET(self):
        worker = self.server.worker
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == "/status":
            with worker.lock:
                self.reply(200, {"holding": worker.holding,
                                 "running": sum(v == "running" for v in worker.jobs.values())})
        elif parts.path == "/job":
            q = urllib.parse.parse_qs(parts.query)
            jid = (q.get("rid", [""])[0], q.get("attempt", [None])[0])
            with worker.lock:
                self.reply(200, {"state": worker.jobs.get(jid, "unknown")})
        else:
            self.reply(404, {"error": "not_found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/run":
            self.reply(404, {"error": "not_found"})
            return
        self.reply(200, self.server.worker.run(json.loads(body)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--kind", choices=("py", "c"), default="py")
    parser.add_argument("--ledger", action="append", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--tools", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--careful", action="store_true")
    parser.add_argument("--c-agent")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.worker = Worker(args)
    print(json.dumps({"address": "%s:%d" % server.server_address[:2]}), file=sys.stderr,
          flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
