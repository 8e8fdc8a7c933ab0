"""The clients of the gateway: a recording one, and the official openai one.

`stream_completion` reads the raw HTTP stream with http.client and records
every server-sent event with the time it arrived, so the checks judge what
actually reached a client, byte for byte, rather than what any SDK made of
it. `openai_completion` runs the official `openai` npm package
(openai_client/client.mjs) against the same gateway, to show that a real
client gets the whole answer after a hidden failover and raises
`upstream_decode_interrupted` after a visible one.
"""

import functools
import http.client
import json
import socket
import subprocess
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

OPENAI_CLIENT = Path(__file__).resolve().parent / "openai_client"
PROMPT = "Open a ticket for the fault drill."


@dataclass
class Event:
    """One server-sent event: its `data` payload and when it arrived."""

    at_s: float  # seconds from sending the request to the event's blank line
    data: str
    id: int | None = None  # its `id:` field, if it had one

    @functools.cached_property
    def json(self):
        try:
            return json.loads(self.data)
        except ValueError:
            return None


@dataclass
class Stream:
    """Everything one client saw of one request."""

    status: int | None = None
    headers: dict = field(default_factory=dict)  # lower-cased names
    events: list = field(default_factory=list)
    body: str = ""  # the answer's body when it is not an event stream
    transport_error: str | None = None  # how reading failed, if it did
    closed_by_client: bool = False
    elapsed_s: float = 0.0
    head_at: float | None = None  # wall-clock time (time.time()) the response head arrived

    @property
    def request_id(self):
        return self.headers.get("x-request-id")

    @property
    def done(self):
        return any(e.data == "[DONE]" for e in self.events)

    @property
    def chunk_events(self):
        return [e.json for e in self.events
                if isinstance(e.json, dict) and isinstance(e.json.get("choices"), list)]

    @property
    def chunks(self):
        """`{"attempt_id", "text"}` of every chunk received, in order."""
        return [{"attempt_id": c.get("system_fingerprint"),
                 "text": ((c["choices"] or [{}])[0].get("delta") or {}).get("content") or ""}
                for c in self.chunk_events]

    @property
    def contents(self):
        """The non-empty `delta.content` strings received: the delivered output tokens."""
        return [c["text"] for c in self.chunks if c["text"]]

    @property
    def final_event(self):
        """The last event's JSON; None after [DONE] or when no event came."""
        if not self.events or self.done:
            return None
        return self.events[-1].json

    @property
    def error_body(self):
        """The parsed body of a non-stream answer (an error), else None."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None


def completion_body(seed, max_tokens):
    return {"model": "fake", "messages": [{"role": "user", "content": PROMPT}],
            "stream": True, "seed": seed, "max_tokens": max_tokens}


def stream_completion(gateway_url, seed, max_tokens, close_after=None, timeout_s=20.0,
                      headers=None, body=None):
    """Streams one completion; returns the Stream recorded.

    With @close_after, the client goes away (closes its socket) once it has
    received that many chunks. A client timeout is recorded as the
    transport error "timeout". @headers are sent beside the usual ones, and
    @body (bytes or an object) instead of the seed's.
    """
    parts = urllib.parse.urlsplit(gateway_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    stream = Stream()
    response = None
    started = time.monotonic()
    try:
        conn.connect()
        sock = conn.sock
        if body is None:
            body = completion_body(seed, max_tokens)
        conn.request("POST", "/v1/chat/completions",
                     body=body if isinstance(body, bytes) else json.dumps(body),
                     headers={"Content-Type": "application/json",
                              "Accept": "text/event-stream", **(headers or {})})
        response = conn.getresponse()
        stream.head_at = time.time()
        stream.status = response.status
        stream.headers = {k.lower(): v for k, v in response.getheaders()}
        if not stream.headers.get("content-type", "").startswith("text/event-stream"):
            stream.body = response.read().decode("utf-8", "replace")
            return stream
        data = []
        event_id = None
        chunks = 0
        while True:
            line = response.readline()
            if not line:
                break
            line = line.decode("utf-8").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif line.startswith("id:"):
                event_id = int(line[3:].strip())
            elif line == "" and data:
                event = Event(time.monotonic() - started, "\n".join(data), event_id)
                stream.events.append(event)
                data = []
                event_id = None
                chunks += isinstance(event.json, dict) and "choices" in event.json
                if close_after is not None and chunks >= close_after:
                    stream.closed_by_client = True
                    sock.shutdown(socket.SHUT_RDWR)
                    break
        if data:
            stream.transport_error = "the stream ended inside an event"
    except TimeoutError:
        stream.transport_error = "timeout"
    except (OSError, http.client.HTTPException) as e:
        stream.transport_error = "%s: %s" % (type(e).__name__, e)
    finally:
        if response is not None:
            response.close()
        conn.close()
        stream.elapsed_s = time.monotonic() - started
    return stream


def install_openai_client():
    """`npm ci` the pinned openai package into openai_client/node_modules, unless it is there."""
    lock = json.loads((OPENAI_CLIENT / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/openai"]["version"]
    installed = OPENAI_CLIENT / "node_modules" / "openai" / "package.json"
    if installed.exists() and json.loads(installed.read_text())["version"] == pinned:
        return
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                   cwd=OPENAI_CLIENT, check=True, capture_output=True, text=True, timeout=300)


def openai_completion(gateway_url, seed, max_tokens, timeout_s=60, **options):
    """Runs client.mjs with @options (maxRetries, timeout, headers); returns its JSON
    line: request_id, text, attempt_ids, error, http_requests."""
    done = subprocess.run(["node", "client.mjs", gateway_url, str(seed), str(max_tokens),
                           json.dumps(options)],
                          cwd=OPENAI_CLIENT, capture_output=True, text=True, timeout=timeout_s)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError("client.mjs failed (%d): %s" % (done.returncode, done.stderr[-2000:]))
    return json.loads(lines[-1])
