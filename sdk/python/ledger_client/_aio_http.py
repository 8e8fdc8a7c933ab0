"""HTTP transport to ledgerd for asyncio: the rules of _http.py on asyncio streams.

The same timeouts, the same re-send of the very same bytes when an answer
is lost or ledgerd says ``503``, the same errors, the same TLS checks; what
differs is the I/O. HTTP/1.1 is written and read here (the standard
library has no asyncio HTTP client), over a small pool of keep-alive
connections, since many coroutines may call at once.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Mapping

from ._http import Answer, Backoff, Endpoint, judge, read_answer, tls_failure, unreachable
from ._trace import trace_headers
from .errors import LedgerError

# The longest head and body ledgerd's answers may have; longer is a broken answer.
_MAX_HEAD_BYTES = 64 * 1024
_MAX_BODY_BYTES = 256 * 1024 * 1024


class _BrokenAnswer(OSError):
    """An answer that is not HTTP/1.1 as ledgerd writes it: the connection is spent."""


class _Connection:
    """One keep-alive connection: a reader and a writer, one exchange at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


class AsyncTransport:
    """Sends calls to one ledgerd with one token from coroutines of one event loop.

    Each call takes an idle connection from the pool (or opens one), makes
    one exchange, and gives it back if the answer leaves it usable; at most
    ``max_idle`` idle connections are kept. Any error drops the connection.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float,
                 ca_file: str | os.PathLike[str] | None = None, max_idle: int = 8,
                 traceparent: str | None = None, tracestate: str | None = None) -> None:
        self._end = Endpoint.parse(url, token, ca_file)
        self.trace = (traceparent, tracestate)  # the client's own trace context, if any
        self._timeout_s = timeout_s
        self._max_idle = max_idle
        self._idle: list[_Connection] = []
        end = self._end
        host = end.host if ":" not in end.host else "[%s]" % end.host
        self._host_header = host if end.port is None else "%s:%d" % (host, end.port)
        self._fixed_headers = "".join("%s: %s\r\n" % kv for kv in end.headers.items())

    async def aclose(self) -> None:
        """Closes the idle connections; a call made afterwards opens new ones."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            try:
                await conn.writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass

    async def _open(self) -> _Connection:
        end = self._end
        port = end.port if end.port is not None else (443 if end.https else 80)
        if end.https:
            reader, writer = await asyncio.open_connection(end.host, port, ssl=end.tls,
                                                           server_hostname=end.host)
        else:
            reader, writer = await asyncio.open_connection(end.host, port)
        return _Connection(reader, writer)

    def _request(self, method: str, path: str, body: bytes | None,
                 trace: Mapping[str, str]) -> bytes:
        # The trace headers were checked to be single header lines (_trace.py).
        head = "%s %s HTTP/1.1\r\nHost: %s\r\n%s%s" % (
            method, self._end.prefix + path, self._host_header, self._fixed_headers,
            "".join("%s: %s\r\n" % kv for kv in trace.items()))
        if body is not None or method in ("POST", "PUT"):
            head += "Content-Length: %d\r\n" % len(body or b"")
        return (head + "\r\n").encode("latin-1") + (body or b"")

    async def _exchange(self, conn: _Connection, request: bytes) -> tuple[Answer, bool]:
        """Writes one request and reads its answer; returns it and whether to keep ``conn``."""
        conn.writer.write(request)
        await conn.writer.drain()
        head = await conn.reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_HEAD_BYTES:
            raise _BrokenAnswer("the answer's head is too long")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise _BrokenAnswer("not an HTTP/1.1 status line: %r" % lines[0][:80])
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        keep = (parts[0] == "HTTP/1.1"
                and "close" not in headers.get("connection", "").lower())
        if "chunked" in headers.get("transfer-encoding", "").lower():
            data = await self._read_chunked(conn.reader)
        elif "content-length" in headers:
            length = headers["content-length"]
            if not length.isdigit() or int(length) > _MAX_BODY_BYTES:
                raise _BrokenAnswer("bad Content-Length: %r" % length[:40])
            data = await conn.reader.readexactly(int(length))
        elif status in (204, 304) or 100 <= status < 200:
            data = b""
        else:
            data = await conn.reader.read(_MAX_BODY_BYTES)
            keep = False
        return read_answer(status, data.decode("utf-8", "replace")), keep

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        data = bytearray()
        while True:
            size_line = (await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise _BrokenAnswer("bad chunk size: %r" % size_line[:40]) from None
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return bytes(data)
            if len(data) + size > _MAX_BODY_BYTES:
                raise _BrokenAnswer("the answer's body is too long")
            data += await reader.readexactly(size)
            if await reader.readexactly(2) != b"\r\n":
                raise _BrokenAnswer("a chunk does not end with CRLF")

    async def _send_once(self, method: str, path: str, body: bytes | None,
                         trace: Mapping[str, str]) -> Answer:
        """One exchange within ``timeout_s``.

        An idle connection the server has closed meanwhile fails at once,
        before any answer: the same request goes out once more on a new
        connection, as http.client does on a connection it finds closed.
        """
        request = self._request(method, path, body, trace)
        while True:
            reused = bool(self._idle)
            conn: _Connection | None = None
            try:
                async with asyncio.timeout(self._timeout_s):
                    conn = self._idle.pop() if reused else await self._open()
                    answer, keep = await self._exchange(conn, request)
            except BaseException as e:
                # Whatever was half sent or half read, this connection is spent.
                if conn is not None:
                    conn.close()
                if reused and isinstance(e, (ConnectionError, asyncio.IncompleteReadError)):
                    continue
                raise
            if keep and len(self._idle) < self._max_idle:
                self._idle.append(conn)
            else:
                conn.close()
            return answer

    async def call(self, method: str, path: str, body: bytes | None = None, *,
                   retry_s: float, trace: Mapping[str, str] | None = None) -> Answer:
        """Sends one call; returns ledgerd's answer, or raises, as Transport.call does
        (``trace`` too: None takes the current context of the calling task).

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
                answer = await self._send_once(method, path, body, trace)
            except ssl.SSLCertVerificationError as e:
                raise tls_failure(e) from e
            except (OSError, EOFError, asyncio.LimitOverrunError) as e:
                # OSError covers timeouts and refused or reset connections;
                # EOFError an answer cut short (IncompleteReadError), the
                # overrun a head longer than a stream's buffer.
                failure: LedgerError = unreachable(e)
                hint_s = 0.0
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
            await asyncio.sleep(min(left, max(hint_s, backoff.next_delay())))
