"""What every Python client of the campaign shares: its log, and the SDK's transport.

The checker may only believe what the outside world saw, so every client
process writes everything it was told to a JSON-lines file of its own
(`ClientLog`): each HTTP exchange with ledgerd as sent and as answered (or
how no answer came), and what the SDK made of it.

`LoggedTransport` is the SDK's transport (ledger_client._http.Transport)
with two changes, both outside the SDK's logic: each exchange is logged,
and the client knows both ledgerds (through their proxies) and moves to
the other one when one gives no answer or a 503, as a load balancer in
front of stateless ledgerds would. Retries, back-off and bodies are the
SDK's own: the same bytes go out again, so a retried claim keeps its
claim_id.

It also keeps, per tool call held, the earliest moment its lease can end
as this client can prove it (the send time of the claim or renewal that
was answered, plus its lease), which the careful agents check before they
call a tool.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sdk" / "python"))

from ledger_client import Ledger  # noqa: E402
from ledger_client._http import Answer, Transport  # noqa: E402

# One HTTP exchange: past this without an answer the outcome is unknown to the client.
HTTP_TIMEOUT_S = 3.0


class ClientLog:
    """An append-only JSON-lines file: what one client process was told."""

    def __init__(self, path, proc):
        self.proc = proc
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8", buffering=1)

    def write(self, kind, **fields):
        entry = {"t": time.time(), "proc": self.proc, "pid": os.getpid(), "kind": kind}
        entry.update(fields)
        line = json.dumps(entry, separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


def split_url(url):
    parts = urllib.parse.urlsplit(url)
    return parts.hostname, parts.port


class LoggedTransport(Transport):
    """The SDK's transport over several ledgerd URLs, logging every exchange."""

    def __init__(self, urls, token, log, *, timeout_s=HTTP_TIMEOUT_S, rng=None):
        super().__init__(urls[0], token, timeout_s=timeout_s)
        self._targets = [split_url(u) for u in urls]
        self._rng = rng or random.Random()
        self._pref = self._rng.randrange(len(self._targets))
        self._log = log
        self._tl = threading.local()
        self._leases_lock = threading.Lock()
        self._lease_until = {}  # (path of the call, fencing token) -> monotonic deadline
        self._claim_since = {}  # (path, claim_id) -> monotonic send time of the pending try

    def _conn(self, i):
        conns = getattr(self._tl, "conns", None)
        if conns is None:
            conns = self._tl.conns = {}
        conn = conns.get(i)
        if conn is None:
            host, port = self._targets[i]
            conn = conns[i] = http.client.HTTPConnection(host, port, timeout=self._timeout_s)
        return conn

    def _drop(self, i):
        conn = getattr(self._tl, "conns", {}).pop(i, None)
        if conn is not None:
            conn.close()

    def _rotate(self, i):
        if len(self._targets) > 1 and self._pref == i:
            self._pref = (i + 1) % len(self._targets)

    def _send_once(self, method, path, body, trace):
        i = self._pref
        conn = self._conn(i)
        sent = time.time()
        sent_mono = time.monotonic()
        text = body.decode("utf-8") if body else None
        try:
            conn.request(method, self._end.prefix + path, body=body,
                         headers={**trace, **self._end.headers})
            response = conn.getresponse()
            answer = response.read().decode("utf-8", "replace")
        except BaseException as e:
            self._drop(i)
            self._rotate(i)
            self._log.write("http", t0=sent, t1=time.time(), via=i, method=method, path=path,
                            body=text, status=None,
                            error="%s: %s" % (type(e).__name__, e))
            self._note_no_answer(path, text, sent_mono)
            raise
        self._log.write("http", t0=sent, t1=time.time(), via=i, method=method, path=path,
                        body=text, status=response.status, answer=answer)
        if response.status in (502, 503, 504):
            self._rotate(i)
        try:
            parsed = json.loads(answer) if answer else None
        except ValueError:
            parsed = None
        self._note_answer(path, text, sent_mono, response.status, parsed)
        return Answer(response.status, answer, parsed)

    # --- what this client can prove about its leases ------------------------

    def _note_no_answer(self, path, text, sent_mono):
        if path.endswith("/claim"):
            cid = _claim_id(text)
            with self._leases_lock:
                # The first try since the last definite answer may be the one
                # that made this client the holder: its lease started no earlier.
                self._claim_since.setdefault((path, cid), sent_mono)

    def _note_answer(self, path, text, sent_mono, status, body):
        if "/tool-calls/" not in path:
            return
        call = path.rsplit("/", 1)[0]
        body = body if isinstance(body, dict) else {}
        with self._leases_lock:
            if path.endswith("/claim"):
                cid = _claim_id(text)
                if status in (502, 503, 504):
                    # A 503 may follow a COMMIT whose outcome ledgerd could not
                    # learn: as good as no answer.
                    self._claim_since.setdefault((path, cid), sent_mono)
                    return
                since = self._claim_since.pop((path, cid), sent_mono)
                if status in (200, 201) and body.get("status") == "claimed":
                    start = sent_mono if status == 201 else since
                    self._lease_until[(call, body["fencing_token"])] = (
                        start + body["lease_ms"] / 1000)
            elif path.endswith("/renew") and status == 200:
                token = json.loads(text).get("fencing_token")
                key = (call, token)
                until = sent_mono + body.get("lease_ms", 0) / 1000
                self._lease_until[key] = max(self._lease_until.get(key, 0), until)

    def lease_left_s(self, request_path_prefix, token):
        """Seconds of the lease on the call at @request_path_prefix under @token this
        client can prove are left (negative: it may have run out); None if unknown."""
        with self._leases_lock:
            until = self._lease_until.get((request_path_prefix, token))
        return None if until is None else until - time.monotonic()


def _claim_id(text):
    try:
        return json.loads(text or "{}").get("claim_id")
    except ValueError:
        return None


def make_ledger(urls, token, log, *, retry_s, complete_retry_s, rng=None):
    """A ledger_client.Ledger whose transport is a LoggedTransport over @urls."""
    ledger = Ledger(urls[0], token, timeout_s=HTTP_TIMEOUT_S, retry_s=retry_s,
                    complete_retry_s=complete_retry_s)
    ledger._transport = LoggedTransport(urls, token, log, rng=rng)
    return ledger
