"""HTTP transport to ledgerd: keep-alive connections, timeouts and retries.

Every mutating call of ledgerd is idempotent under HTTP retry: the same
request sent again returns the same outcome and changes nothing more. So
when an answer is lost (a timeout, a broken connection) or ledgerd says
``503`` (its database is away), the transport sends the very same bytes
again, after a capped, jittered, exponential back-off, until an answer
comes or the call's retry budget is spent.

An https URL is always verified, its certificate chain and its host name,
against the CA file given (else the system's trust store). A certificate
that fails verification is not sent again: it would fail the same way.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._trace import trace_headers
from ._version import __version__
from .errors import LedgerError, LedgerUnavailable, TLSVerificationFailed, error_from_answer

# Answers that mean "not now" rather than "no": ledgerd's own 503, and the
# 502/504 a proxy in front of it gives while it is away.
_UNAVAILABLE = frozenset({502, 503, 504})


class Backoff:
    """Capped, jittered exponential delays: retries spread out and never herd.

    The n-th delay is drawn from [d/2, d] with d = min(cap, first * 2^n).
    """

    def __init__(self, first_s: float = 0.05, cap_s: float = 2.0) -> None:
        self._first_s = first_s
        self._cap_s = cap_s
        self._n = 0

    def next_delay(self) -> float:
        """The next delay in seconds; each call doubles the range up to the cap."""
        d = min(self._cap_s, self._first_s * 2.0 ** self._n)
        self._n = min(self._n + 1, 32)
        return d / 2 + random.uniform(0, d / 2)


@dataclass(frozen=True)
class Answer:
    """One HTTP answer of ledgerd: status, raw body text, and the body parsed."""

    status: int
    text: str
    body: Any


def json_body(fields: Mapping[str, Any], raw: Mapping[str, str] | None = None) -> bytes:
    """Encodes a request body; members in ``raw`` are JSON texts inserted verbatim.

    Verbatim members let a tool's result go out exactly as the text the
    client keeps, so what ledgerd stores is byte for byte that text.
    """
    text = json.dumps(dict(fields), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)
    if raw:
        members = ",".join(json.dumps(name) + ":" + value for name, value in raw.items())
        text = text[:-1] + ("," if fields else "") + members + "}"
    return text.encode("utf-8")


def quote_id(value: str) -> str:
    """An id for a path segment; one ledgerd would refuse stays a single segment."""
    return urllib.parse.quote(value, safe="")


class Transport:
    """Sends calls to one ledgerd with one token; safe to share between threads.

    Each thread keeps its own keep-alive connection (http.client connections
    are not thread-safe), opened on first use and dropped after any error.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float,
                 ca_file: str | os.PathLike[str] | None = None,
                 traceparent: str | None = None, tracestate: str | None = None) -> None:
        self._end = Endpoint.parse(url, token, ca_file)
        self._timeout_s = timeout_s
        self._local = threading.local()
        self.trace = (traceparent, tracestate)  # the client's own trace context, if any

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            end = self._end
            if end.https:
                conn = http.client.HTTPSConnection(end.host, end.port,
                                                   timeout=self._timeout_s, context=end.tls)
            else:
                conn = http.client.HTTPConnection(end.host, end.port, timeout=self._timeout_s)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _send_once(self, method: str, path: str, body: bytes | None,
                   trace: Mapping[str, str]) -> Answer:
        conn = self._connection()
        try:
            conn.request(method, self._end.prefix + path, body=body,
                         headers={**trace, **self._end.headers})
            response = conn.getresponse()
            text = response.read().decode("utf-8", "replace")
        except BaseException:
            # Whatever was half sent or half read, this connection is spent.
            self._drop_connection()
            raise
        return read_answer(response.status, text)

    def call(self, method: str, path: str, body: bytes | None = None, *,
             retry_s: float, trace: Mapping[str, str] | None = None) -> Answer:
        """Sends one call; returns ledgerd's answer, or raises.

        A lost answer or an unavailable ledgerd is retried with the same
        bytes for up to ``retry_s`` seconds (0: a single try). ``trace``:
        the call's trace headers (a tool call's); None: the client's trace
        context, else OpenTelemetry's current one (see _trace.py).

        Raises:
            TLSVerificationFailed: ledgerd's certificate failed verification
                (at once: never retried).
            LedgerUnavailable: still no answer, or still 503, at the end of
                the retry budget.
            LedgerError: any other error answer (status 400 and above).
        """
        deadline = time.monotonic() + retry_s
        backoff = Backoff()
        if trace is None:
            trace = trace_headers(self.trace)
        while True:
            try:
                answer = self._send_once(method, path, body, trace)
            except ssl.SSLCertVerificationError as e:
                raise tls_failure(e) from e
            except (OSError, http.client.HTTPException) as e:
                failure, hint_s = unreachable(e), 0.0
                cause: BaseException | None = e
            else:
                judged = judge(answer)
                if isinstance(judged, Answer):
                    return judged
                failure, hint_s = judged
                cause = None
            left = deadline - time.monotonic()
            if left <= 0:
                raise failure from cause
            time.sleep(min(left, max(hint_s, backoff.next_delay())))


# --- what the blocking and the asyncio transports share (no I/O here) ---------


@dataclass(frozen=True)
class Endpoint:
    """Where calls go and what every one of them carries: parsed once per client."""

    https: bool
    host: str
    port: int | None
    prefix: str
    tls: ssl.SSLContext | None
    headers: dict[str, str]

    @classmethod
    def parse(cls, url: str, token: str,
              ca_file: str | os.PathLike[str] | None) -> "Endpoint":
        """Raises ValueError for a URL that is not http(s) or an unusable ``ca_file``."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("ledgerd URL must be http(s)://host[:port][/prefix]: %r" % url)
        https = parts.scheme == "https"
        # A CA file is read now even for http, so a wrong one is found at once.
        tls = tls_context(ca_file) if https or ca_file is not None else None
        return cls(https=https, host=parts.hostname, port=parts.port,
                   prefix=parts.path.rstrip("/"), tls=tls, headers={
                       "Authorization": "Bearer " + token,
                       "Accept": "application/json",
                       "Content-Type": "application/json",
                       "User-Agent": "ledger-client-python/" + __version__,
                   })


def read_answer(status: int, text: str) -> Answer:
    """An answer with its body parsed (None when it is empty or not JSON)."""
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = None
    return Answer(status, text, parsed)


def judge(answer: Answer) -> Answer | tuple[LedgerError, float]:
    """The answer itself if it is a success; (the failure, a hint in s) if it is
    worth sending again; raises the error of any other refusal."""
    if answer.status < 400:
        return answer
    envelope = _envelope(answer)
    if answer.status not in _UNAVAILABLE:
        raise error_from_answer(answer.status, envelope)
    failure = LedgerUnavailable(answer.status, envelope)
    return failure, (failure.retry_after_ms or 0) / 1000


def unreachable(e: BaseException) -> LedgerUnavailable:
    """The error of an exchange that brought no answer."""
    return LedgerUnavailable(None, {"error": {
        "code": "unreachable",
        "message": "no answer from ledgerd: %s" % (str(e) or type(e).__name__)}})


def tls_failure(e: ssl.SSLCertVerificationError) -> TLSVerificationFailed:
    """The error of a certificate that failed verification (never sent again)."""
    return TLSVerificationFailed(None, {"error": {
        "code": "tls_verification_failed",
        "message": "ledgerd's certificate failed verification: %s"
                   % (e.verify_message or str(e))}})


def tls_context(ca_file: str | os.PathLike[str] | None) -> ssl.SSLContext:
    """A client context that verifies the chain and the host name, always.

    With ``ca_file`` it trusts the CAs of that PEM file and only those; with
    None, the system's trust store.

    Raises:
        ValueError: the file cannot be read or holds no PEM certificate.
    """
    if ca_file is not None and not os.fspath(ca_file):
        raise ValueError("ca_file is empty")
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as e:
        raise ValueError("the CA file %s holds no usable PEM certificate (%s)"
                         % (os.fspath(ca_file or ""), e.reason or e)) from e
    except OSError as e:
        raise ValueError("cannot read the CA file %s: %s"
                         % (os.fspath(ca_file or ""), e.strerror or e)) from e
    # create_default_context() sets both; they are the point, so say so here.
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = True
    return context


def _envelope(answer: Answer) -> dict[str, Any]:
    """The error envelope of an error answer; one is made up for a body that has none."""
    body = answer.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body
    return {"error": {"code": "http_%d" % answer.status, "message": answer.text[:200]}}
