"""A stand-in model server behind ledger-gateway (docs/guide-router.md, docs/guide-agent.md).

    LEDGER_URL=... LEDGER_TOKEN=... PYTHONPATH=sdk/python python3 docs/guides/model.py HOST:PORT

OpenAI-compatible as far as the gateway and the openai clients need:
GET /v1/replica/info (what the gateway names the model revision by),
GET /v1/models, and a streamed POST /v1/chat/completions. The "model" is a
rule, so that a conversation is answered alike every time:

- the request offers the tool send_email and its last message is the
  user's, naming an e-mail address: a call of send_email to that address.
  The client runs the tool (agents as clients of the router);
- its last message is a tool's result: the text "Sent: " and that result;
- the request offers no tools and the user's message names an e-mail
  address: this server runs send_email itself before its first token,
  claimed in ledgerd under the X-Ledger-Request-Id and X-Ledger-Attempt-Id
  the gateway sent (agents behind the router), then says what it sent;
- otherwise: "Your refund is on its way."

The tool's side effect is a line in var/outbox.txt (OUTBOX names another
file). Each event follows the one before by TOKEN_DELAY_MS (default 200).
Every completion is logged on stderr as one JSON line: {"request_id",
"attempt_id", "answer"}.
"""

import json
import os
import re
import secrets
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ledger_client import Ledger, LedgerError

MODEL = "stand-in"
OUTBOX = os.environ.get("OUTBOX", "var/outbox.txt")
TOKEN_DELAY_S = int(os.environ.get("TOKEN_DELAY_MS", "200")) / 1000
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# What the gateway hashes into the model revision: replicas that answer the same are
# interchangeable, so a request may rerun on any of them before its first byte.
INFO = {"weights_revision": "stand-in-1", "tokenizer": "words", "chat_template": "none"}


def send_email(to, subject, idempotency_key):
    """The side effect. A real mail API would take idempotency_key as its own key."""
    with open(OUTBOX, "a") as f:
        f.write("%s %s %s\n" % (idempotency_key, to, subject))
    return {"message_id": "m-" + idempotency_key}


def offers_send_email(body):
    return any((t.get("function") or {}).get("name") == "send_email"
               for t in body.get("tools") or [])


def address_in(message):
    content = message.get("content") if message.get("role") == "user" else None
    found = EMAIL.search(content) if isinstance(content, str) else None
    return found.group(0) if found else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/v1/replica/info":
            self.reply_json(200, INFO)
        elif self.path == "/v1/models":
            self.reply_json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": "ledgerd-guides"}]})
        else:
            self.reply_json(404, {"error": {"message": "no such path", "type": "not_found"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length))
            messages = body["messages"]
            last = messages[-1] if messages else {}
        except (ValueError, KeyError, TypeError, AttributeError):
            self.reply_json(400, {"error": {"message": "not a chat completion request",
                                            "type": "invalid_request_error"}})
            return
        if self.path != "/v1/chat/completions" or body.get("stream") is not True:
            self.reply_json(400, {"error": {"message": "only streamed chat completions",
                                            "type": "invalid_request_error"}})
            return
        request_id = self.headers.get("X-Ledger-Request-Id")
        attempt_id = self.headers.get("X-Ledger-Attempt-Id")
        to = address_in(last)
        if to is not None and offers_send_email(body):
            answer, deltas = "tool_call", self.tool_call_deltas(to)
        elif last.get("role") == "tool":
            answer, deltas = "text", self.text_deltas("Sent: " + str(last.get("content")))
        elif to is not None:
            try:
                call = Ledger(os.environ["LEDGER_URL"], os.environ["LEDGER_TOKEN"]).tool_call(
                    request_id, "call_00",
                    lambda key, fencing_token: send_email(to, "Your refund", key),
                    tool="send_email", args={"to": to, "subject": "Your refund"},
                    attempt_id=attempt_id, wait_s=10)
            except LedgerError as e:
                # attempt_fenced (this attempt was replaced), outcome_unknown...: start
                # nothing, publish nothing. The cut stream tells the gateway it failed.
                self.log_json(request_id, attempt_id, "refused: " + e.code)
                self.close_connection = True
                return
            answer = "ran send_email (%s)" % ("replayed" if call.replayed else "executed")
            deltas = self.text_deltas("Sent to %s: %s" % (to, call.result_json))
        else:
            answer, deltas = "text", self.text_deltas("Your refund is on its way.")
        self.log_json(request_id, attempt_id, answer)
        self.stream(deltas)

    def tool_call_deltas(self, to):
        # An engine names each call with a random id, new at every decode: an agent
        # numbers its calls itself (docs/guide-agent.md, "Number the tool calls").
        call = {"index": 0, "id": "call_" + secrets.token_hex(12), "type": "function",
                "function": {"name": "send_email",
                             "arguments": json.dumps({"to": to, "subject": "Your refund"})}}
        return [({"role": "assistant", "content": None, "tool_calls": [call]}, None),
                ({}, "tool_calls")]

    def text_deltas(self, text):
        words = re.findall(r"\s*\S+", text)
        deltas = [({"content": w} if i else {"role": "assistant", "content": w}, None)
                  for i, w in enumerate(words)]
        return deltas + [({}, "stop")]

    def stream(self, deltas):
        completion, created = "chatcmpl-" + secrets.token_hex(8), int(time.time())
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for delta, finish_reason in deltas:
                time.sleep(TOKEN_DELAY_S)
                chunk = {"id": completion, "object": "chat.completion.chunk",
                         "created": created, "model": MODEL,
                         "choices": [{"index": 0, "delta": delta,
                                      "finish_reason": finish_reason}]}
                self.wfile.write(b"data: %s\n\n" % json.dumps(chunk).encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway closed the stream: its client left, past any hold

    def reply_json(self, status, doc):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_json(self, request_id, attempt_id, answer):
        print(json.dumps({"request_id": request_id, "attempt_id": attempt_id,
                          "answer": answer}), file=sys.stderr, flush=True)

    def log_message(self, format, *args):
        pass  # one line per completion (log_json), not one per HTTP exchange


def main():
    host, _, port = sys.argv[1].rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
