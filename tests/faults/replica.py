#!/usr/bin/env python3
"""A fake inference replica that fails on command, exactly where it is told.

It answers `POST /v1/chat/completions` (stream: true) like an OpenAI-compatible
engine, in server-sent events, with the deterministic tokens of
tokens.py for the request's `seed`. Every token goes through the same cycle,
and a fault can fire at each named point of it:

    before_compute -> [tool call -> after_tool] -> compute -> after_compute
                   -> lease check -> send -> after_send

A fault is `die` (SIGKILL of the whole process), `stall` (SIGSTOP: the
process lives but answers nothing until the harness sends SIGCONT) or
`slow` (a longer compute per token). Before it publishes any chunk the
replica asks ledgerd whether its attempt is still live within its lease,
and a tool call goes through the Python SDK under the attempt, so a replica
woken from a stall can neither publish nor start a side effect: that is
what the fault tests prove.

    replica.py [--host 127.0.0.1] --port 0 --name gpu-1 --ledger-url URL --ledger-token TOKEN \
               --tools-url URL --log PATH

`GET /v1/replica/info` answers tokens.REPLICA_INFO, from which the router
derives the model revision. The bound address is announced on stderr as
`{"address": "127.0.0.1:PORT"}`. Every step is a JSON line in --log: `{"t", "event", "request_id",
"attempt_id", "token", ...}` with `event` one of request, published,
publish_refused, claim_refused, tool_called, tool_replayed, cancelled
(and cancel_ack_refused, should ledgerd refuse the acknowledgement),
upstream_closed_by_router, fault.

`POST /control` sets how the replica behaves:
`{"fault": {"kind": "die"|"stall", "at": K, "phase": P, "attempt_id"?} |
{"kind": "slow", "token_delay_ms": N, "attempt_id"?} | null, "tool_at": K|null,
"prefill_ms": N, "token_delay_ms": N}`. `fault` is one-shot: it is armed for
the next completion request (with `attempt_id`: the next one of that
attempt, wherever the router sends it) and disarmed once taken. The other
keys are the defaults of every later request; keys left out keep theirs.
"""

import argparse
import http.client
import json
import signal
import sys
import threading
import time
import urllib.parse
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

from ledger_client import Ledger, LedgerError, stable_tool_call_id  # noqa: E402
from jsonhttp import JsonHandler  # noqa: E402
from tokens import REPLICA_INFO, TOOL, token_text, tool_args  # noqa: E402

PHASES = ("before_compute", "after_compute", "after_send", "after_tool")
DEFAULT_MAX_TOKENS = 12
SIGNAL_OF = {"die": signal.SIGKILL, "stall": signal.SIGSTOP}


class ControlError(ValueError):
    """A /control body the replica cannot obey."""


def parse_fault(fault):
    """Validates a fault instruction; returns it, or None for "no fault"."""
    if fault is None:
        return None
    if not isinstance(fault, dict):
        raise ControlError("fault must be an object or null")
    kind = fault.get("kind")
    if kind in SIGNAL_OF:
        if not isinstance(fault.get("at"), int) or fault["at"] < 0:
            raise ControlError("fault.at must be a token index >= 0")
        if fault.get("phase") not in PHASES:
            raise ControlError("fault.phase must be one of %s" % ", ".join(PHASES))
    elif kind == "slow":
        if not isinstance(fault.get("token_delay_ms"), int) or fault["token_delay_ms"] < 0:
            raise ControlError("a slow fault needs token_delay_ms >= 0")
    else:
        raise ControlError("fault.kind must be die, stall or slow")
    return dict(fault)


class Behaviour:
    """What the next requests will meet: the defaults and the armed one-shot fault."""

    def __init__(self):
        self._lock = threading.Lock()
        self.defaults = {"tool_at": None, "prefill_ms": 0, "token_delay_ms": 0}
        self.fault = None

    def update(self, control):
        """Applies a /control body; returns the resulting behaviour."""
        if not isinstance(control, dict):
            raise ControlError("the body must be an object")
        changes = {}
        for name in ("prefill_ms", "token_delay_ms"):
            if name in control:
                if not isinstance(control[name], int) or control[name] < 0:
                    raise ControlError("%s must be an integer >= 0" % name)
                changes[name] = control[name]
        if "tool_at" in control:
            if control["tool_at"] is not None and (not isinstance(control["tool_at"], int)
                                                   or control["tool_at"] < 0):
                raise ControlError("tool_at must be a token index >= 0 or null")
            changes["tool_at"] = control["tool_at"]
        fault = parse_fault(control.get("fault"))
        with self._lock:
            self.defaults.update(changes)
            if "fault" in control:
                self.fault = fault
            return {"fault": self.fault, **self.defaults}

    def take(self, attempt_id):
        """The plan of one request: the defaults, and the armed fault if it is for this attempt."""
        with self._lock:
            plan = dict(self.defaults, fault=None)
            if self.fault is not None and self.fault.get("attempt_id", attempt_id) == attempt_id:
                plan["fault"], self.fault = self.fault, None
            return plan


class EventLog:
    """The replica's JSON-lines log; each line reaches the kernel before a fault fires."""

    def __init__(self, path):
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")

    def write(self, event, request_id, attempt_id, token=None, **detail):
        line = {"t": time.time(), "event": event, "request_id": request_id,
                "attempt_id": attempt_id, "token": token, **detail}
        with self._lock:
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()


class Generation:
    """One completion request: the token cycle, with its fault points and fences."""

    def __init__(self, handler, request_id, attempt_id, seed, max_tokens, plan):
        self.handler = handler
        self.replica = handler.server
        self.request_id = request_id
        self.attempt_id = attempt_id
        self.seed = seed
        self.max_tokens = max_tokens
        self.plan = plan
        self.fault = plan["fault"] or {}
        self.headers_sent = False

    def log(self, event, token=None, **detail):
        self.replica.events.write(event, self.request_id, self.attempt_id, token, **detail)

    def fault_point(self, token, phase):
        """Fires the armed die/stall fault if it names this point of the cycle.

        SIGKILL and SIGSTOP take the whole process, but the signal is aimed
        at this thread: sent to the process, SIGSTOP may be taken by another
        thread, and this one would run on for a moment (far enough to send
        a tool call's claim) before the stop reaches it.
        """
        kind = self.fault.get("kind")
        if kind in SIGNAL_OF and self.fault["at"] == token and self.fault["phase"] == phase:
            self.log("fault", token, kind=kind, phase=phase)
            signal.pthread_kill(threading.get_ident(), SIGNAL_OF[kind])
            # Only a stall comes back here, when the harness sends SIGCONT.

    def run(self):
        token_delay_ms = self.plan["token_delay_ms"]
        if self.fault.get("kind") == "slow":
            token_delay_ms = self.fault["token_delay_ms"]
        time.sleep(self.plan["prefill_ms"] / 1000)
        ticket = None
        for k in range(self.max_tokens):
            self.fault_point(k, "before_compute")
            if self.plan["tool_at"] == k:
                ticket = self.call_tool(k)
                if ticket is None:
                    return
                self.fault_point(k, "after_tool")
            time.sleep(token_delay_ms / 1000)
            text = token_text(self.seed, k, ticket if k == self.plan["tool_at"] else None)
            self.fault_point(k, "after_compute")
            delta = {"role": "assistant", "content": text} if k == 0 else {"content": text}
            if not self.publish(k, self.chunk(delta, None)):
                return
            self.fault_point(k, "after_send")
        if self.publish(self.max_tokens, self.chunk({}, "stop")):
            self.send(b"data: [DONE]\n\n", self.max_tokens)

    def chunk(self, delta, finish_reason):
        return {"id": "chatcmpl-" + self.request_id, "object": "chat.completion.chunk",
                "created": int(time.time()), "model": "fake",
                "system_fingerprint": self.attempt_id,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    def publish(self, token, chunk):
        """Sends one chunk if the attempt is still live within its lease; False: stop."""
        if not self.lease_allows(token):
            return False
        if not self.send(b"data: " + json.dumps(chunk).encode() + b"\n\n", token):
            return False
        self.log("published", token)
        return True

    def send(self, data, token):
        """Writes to the router (the status line goes with the first event); False: it is gone."""
        handler = self.handler
        try:
            if not self.headers_sent:
                handler.send_response(200)
                handler.send_header("Content-Type", "text/event-stream")
                handler.send_header("Cache-Control", "no-cache")
                handler.send_header("Connection", "close")
                handler.end_headers()
                self.headers_sent = True
            handler.wfile.write(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            self.log("upstream_closed_by_router", token)
            attempt = self.ledger_attempt()
            self.acknowledge_if_cancelled(token, attempt and attempt["state"])
            return False

    def ledger_attempt(self):
        """The attempt as ledgerd shows it (None if it is not there or ledgerd did not answer)."""
        try:
            timeline = self.replica.ledger.get_request(self.request_id)
        except LedgerError:
            return None
        for attempt in timeline["attempts"]:
            if attempt["attempt_id"] == self.attempt_id:
                return attempt
        return None

    def lease_allows(self, token):
        attempt = self.ledger_attempt()
        if attempt is not None and attempt["state"] == "live" and attempt["lease_ms_left"] > 0:
            return True
        state = None if attempt is None else attempt["state"]
        self.log("publish_refused", token, state=state)
        self.acknowledge_if_cancelled(token, state)
        return False

    def acknowledge_if_cancelled(self, token, state):
        """Once the router asked this attempt to stop, tells ledgerd it did.

        The acknowledgement ends the fence at once: the next attempt need
        not wait for this one's lease to run out. The SDK's Attempt objects
        belong to the router that made them, so this is a plain POST.
        """
        if state != "cancel_requested":
            return
        status, body = self.replica.ledger_post(
            "/v1/requests/%s/attempts/%s/cancel-ack" % (
                urllib.parse.quote(self.request_id, safe=""),
                urllib.parse.quote(self.attempt_id, safe="")), {})
        if status == 200:
            self.log("cancelled", token)
        else:
            self.log("cancel_ack_refused", token, status=status, answer=body)

    def call_tool(self, token):
        """Runs the answer's tool call through the SDK; returns the ticket, None if refused."""
        tools_url = self.replica.tools_url

        def create_ticket(idempotency_key, fencing_token):
            conn = http.client.HTTPConnection(tools_url.hostname, tools_url.port, timeout=10)
            try:
                conn.request("POST", "/tools/create_ticket",
                             body=json.dumps(tool_args(self.seed)),
                             headers={"Content-Type": "application/json",
                                      "Idempotency-Key": idempotency_key})
                response = conn.getresponse()
                answer = json.loads(response.read())
                if response.status != 200:
                    raise RuntimeError("the tool answered %d: %s" % (response.status, answer))
                return answer
            finally:
                conn.close()

        try:
            call = self.replica.ledger.tool_call(
                self.request_id, stable_tool_call_id(0), create_ticket,
                attempt_id=self.attempt_id, tool=TOOL, args=tool_args(self.seed),
                owner=self.replica.name)
        except LedgerError as e:
            # attempt_fenced above all: a zombie must not start the side effect.
            self.log("claim_refused", token, code=e.code)
            return None
        self.log("tool_replayed" if call.replayed else "tool_called", token,
                 idempotency_key=call.idempotency_key)
        return call.result["ticket"]


class Handler(JsonHandler):
    def do_GET(self):
        if self.path == "/v1/replica/info":
            self.reply(200, REPLICA_INFO)
        else:
            self.reply(404, {"error": {"code": "not_found", "message": self.path}})

    def do_POST(self):
        try:
            body = self.read_json()
        except ValueError:
            self.reply(400, {"error": {"code": "invalid_json", "message": "body is not JSON"}})
            return
        if self.path == "/control":
            try:
                self.reply(200, self.server.behaviour.update(body))
            except ControlError as e:
                self.reply(400, {"error": {"code": "invalid_field", "message": str(e)}})
        elif self.path == "/v1/chat/completions":
            self.complete(body)
        else:
            self.reply(404, {"error": {"code": "not_found", "message": self.path}})

    def complete(self, body):
        request_id = self.headers.get("X-Ledger-Request-Id")
        attempt_id = self.headers.get("X-Ledger-Attempt-Id")
        if not request_id or not attempt_id:
            self.reply(400, {"error": {"code": "invalid_request",
                                       "message": "X-Ledger-Request-Id and "
                                                  "X-Ledger-Attempt-Id are required"}})
            return
        try:
            settled = json.loads(self.headers.get("X-Ledger-Settled-Tool-Calls") or "[]")
        except ValueError:
            settled = None
        seed = body.get("seed") or 0
        max_tokens = body.get("max_tokens") or DEFAULT_MAX_TOKENS
        plan = self.server.behaviour.take(attempt_id)
        self.server.events.write("request", request_id, attempt_id, seed=seed,
                                 max_tokens=max_tokens, settled_tool_calls=settled,
                                 fault=plan["fault"])
        self.close_connection = True
        Generation(self, request_id, attempt_id, seed, max_tokens, plan).run()


class Replica(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host, port, name, ledger_url, ledger_token, tools_url, log_path):
        super().__init__((host, port), Handler)
        self.name = name
        self.ledger = Ledger(ledger_url, ledger_token, retry_s=10)
        self.ledger_url = urllib.parse.urlsplit(ledger_url)
        self.ledger_token = ledger_token
        self.tools_url = urllib.parse.urlsplit(tools_url)
        self.behaviour = Behaviour()
        self.events = EventLog(log_path)

    def ledger_post(self, path, body):
        """One POST to ledgerd with the replica's token; returns (status, parsed body)."""
        conn = http.client.HTTPConnection(self.ledger_url.hostname, self.ledger_url.port,
                                          timeout=10)
        try:
            conn.request("POST", path, body=json.dumps(body),
                         headers={"Authorization": "Bearer " + self.ledger_token,
                                  "Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to bind (0.0.0.0 in a container)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", required=True)
    parser.add_argument("--ledger-url", required=True)
    parser.add_argument("--ledger-token", required=True)
    parser.add_argument("--tools-url", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    server = Replica(args.host, args.port, args.name, args.ledger_url, args.ledger_token,
                     args.tools_url, args.log)
    print(json.dumps({"address": "%s:%d" % server.server_address[:2],
                      "name": args.name}), file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
