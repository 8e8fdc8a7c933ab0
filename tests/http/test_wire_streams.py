"""Replies written by a thread as they come (api/wire/stream.h), the way
ledger-gateway and ledger-mcp answer, seen through ledger-mcp in front of
an upstream that answers big, slowly, without a length, or not at all:
every byte crosses in order and framed, a slow reader costs the proxy a
bounded buffer, a client that leaves ends the upstream's transfer, and an
answer the upstream cuts short is cut short for the client, never ended
as if whole."""

import hashlib
import http.server
import socket
import threading
import time

import pytest

from wire import dechunk, parse, read_all, request
from wire_targets import McpProxy, ledger_url

BIG = 16 << 20  # bytes of the large answer
PIECE = 1 << 16


def payload(n):
    """@n bytes that are not all alike, so a reordering shows."""
    block = bytes(range(256)) * (PIECE // 256)
    return (block * (n // PIECE + 1))[:n]


class _Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/big":
            self.send_response(200)
            self.send_header("Content-Length", str(BIG))
            self.end_headers()
            body = payload(BIG)
            for i in range(0, BIG, PIECE):
                self.wfile.write(body[i:i + PIECE])
        elif self.path == "/unsized":
            # No length: HTTP/1.0 framing to the proxy, the body ends with the connection.
            self.close_connection = True
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload(4 << 20))
        elif self.path == "/events":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()
            try:
                for i in range(600):  # a minute of events, unless the reader leaves
                    self.wfile.write(b"data: %d\n\n" % i)
                    self.wfile.flush()
                    time.sleep(0.1)
            except (BrokenPipeError, ConnectionResetError):
                self.server.left.set()
        elif self.path == "/cut":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"x" * 500)
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def proxy(service, tmp_path_factory):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    server.daemon_threads = True
    server.left = threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    mcp = McpProxy("http://127.0.0.1:%d/mcp" % server.server_address[1], ledger_url(service),
                   service.token(), tmp_path_factory.mktemp("streams") / "ledger-mcp.log")
    mcp.upstream = server
    yield mcp
    mcp.close()
    server.shutdown()
    server.server_close()


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def connect(proxy):
    s = socket.create_connection((proxy.host, proxy.port), timeout=30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    return s


def test_a_large_answer_reaches_a_slow_reader_whole_and_the_proxy_holds_little(proxy):
    """16 MiB read at a few MiB/s: the proxy never holds more than its two
    stream buffers and the upstream's socket for it, not the answer."""
    before = rss_bytes(proxy.proc.pid)
    peak = before
    s = connect(proxy)
    got = b""
    try:
        s.sendall(request("GET", "/big", [("Connection", "close")]))
        while True:
            chunk = s.recv(PIECE)
            if not chunk:
                break
            got += chunk
            time.sleep(0.004)
            peak = max(peak, rss_bytes(proxy.proc.pid))
    finally:
        s.close()
    answers, rest = parse(got)
    assert len(answers) == 1 and rest == b"" and answers[0].status == 200
    assert answers[0].header("Content-Length") == str(BIG)
    body = got[got.index(b"\r\n\r\n") + 4:]
    assert hashlib.sha256(body).digest() == hashlib.sha256(payload(BIG)).digest()
    assert peak - before < 8 << 20, "ledger-mcp grew %.1f MiB for a slow reader" % (
        (peak - before) / 2**20)


def test_an_answer_without_a_length_is_sent_in_chunks_and_keeps_the_connection(proxy):
    s = connect(proxy)
    try:
        s.sendall(request("GET", "/unsized"))
        data, closed = read_all(s, timeout=30, until_answers=1)
        s.sendall(request("GET", "/nope", [("Connection", "close")]))  # the connection serves on
        more, _ = read_all(s, timeout=30)
    finally:
        s.close()
    answers, rest = parse(data)
    assert [a.status for a in answers] == [200] and rest == b"" and not closed
    assert answers[0].header("Transfer-Encoding") == "chunked"
    assert dechunk(data[data.index(b"\r\n\r\n") + 4:]) == (payload(4 << 20), b"")
    assert [a.status for a in parse(more)[0]] == [404]


def test_an_http10_client_gets_an_answer_without_a_length_until_the_close(proxy):
    s = connect(proxy)
    try:
        s.sendall(request("GET", "/unsized", version="HTTP/1.0"))
        data, closed = read_all(s, timeout=30)
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and closed
    assert b"Content-Length" not in head and b"Transfer-Encoding" not in head, head
    assert body == payload(4 << 20)


def test_a_client_that_leaves_mid_answer_ends_the_upstream_transfer(proxy):
    proxy.upstream.left.clear()
    s = connect(proxy)
    try:
        s.sendall(request("GET", "/events"))
        data = b""
        while b"data: 1\n\n" not in data:
            chunk = s.recv(4096)
            assert chunk, data
            data += chunk
    finally:
        s.close()
    # The upstream learns it within a few of its events, not after its minute.
    assert proxy.upstream.left.wait(10), "the upstream still streams to a client that left"


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
def test_an_answer_the_upstream_cuts_short_is_cut_short_for_the_client(proxy, version):
    """Half of a 1000-byte answer: the client gets that half and a closed
    connection, so it can tell; never a whole answer with a short body."""
    s = connect(proxy)
    try:
        s.sendall(request("GET", "/cut", version=version))
        data, closed = read_all(s, timeout=30)
    finally:
        s.close()
    answers, rest = parse(data)
    assert answers == [] and closed, (answers, rest[:200])
    assert rest.startswith(b"HTTP/1.1 200 ") and b"Content-Length: 1000\r\n" in rest
