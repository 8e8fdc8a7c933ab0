"""Raw HTTP/1.1 on a socket, for tests of what a server on the project's
HTTP layer (ledgerd, ledger-gateway, ledger-mcp) does with bytes no
well-behaved client sends: every reply in a stream is parsed back out,
whether its body has a Content-Length or comes in chunks, so a test sees
how many answers came, each one's head and body, and whether the
connection was closed after them."""

import json
import socket
import time


class Answer:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value), as sent
        self.body = body

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def error(self):
        """The envelope's error object; fails unless the body is one."""
        assert self.header("Content-Type") == "application/json", self
        doc = json.loads(self.body)
        assert set(doc) == {"error"} and doc["error"]["message"], doc
        return doc["error"]

    def __repr__(self):
        return "<%d %r %r>" % (self.status, self.headers, self.body[:200])


def address(svc):
    """(host, port) of a test's service (its ledgerd) or of a wire target."""
    server = getattr(svc, "ledgerd", svc)
    return server.host, server.port


def connect(svc, source=None, timeout=10):
    s = socket.create_connection(address(svc), timeout=timeout,
                                 source_address=(source, 0) if source else None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(sock, timeout=10.0, until_answers=None):
    """Reads until the peer closes (or @timeout passes, or @until_answers
    answers are whole). Returns (bytes, closed)."""
    data = b""
    deadline = time.time() + timeout
    closed = False
    while time.time() < deadline:
        if until_answers is not None and len(parse(data)[0]) >= until_answers:
            break
        sock.settimeout(max(0.01, deadline - time.time()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    return data, closed


def dechunk(data):
    """A chunked body at the start of @data: (body bytes, bytes after it), or None if cut short."""
    body = b""
    while True:
        eol = data.find(b"\r\n")
        if eol < 0:
            return None
        size = int(data[:eol].split(b";")[0], 16)
        data = data[eol + 2:]
        if size == 0:  # then the trailer's lines, if any, and an empty line
            if data.startswith(b"\r\n"):
                return body, data[2:]
            end = data.find(b"\r\n\r\n")
            return None if end < 0 else (body, data[end + 4:])
        if len(data) < size + 2:
            return None
        assert data[size:size + 2] == b"\r\n", data[:size + 2]
        body += data[:size]
        data = data[size + 2:]


def parse(data):
    """Splits @data into answers, each framed by its Content-Length or its chunks.
    Returns (answers, leftover bytes)."""
    answers = []
    while data:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            break
        head = data[:end].decode("latin-1").split("\r\n")
        version, status, reason = (head[0].split(" ", 2) + [""])[:3]
        assert version == "HTTP/1.1", head[0]
        headers = [tuple(x.strip() for x in line.split(":", 1)) for line in head[1:]]
        length = [int(v) for k, v in headers if k.lower() == "content-length"]
        chunked = [v for k, v in headers if k.lower() == "transfer-encoding"]
        assert len(length) + len(chunked) == 1 and chunked in ([], ["chunked"]), headers
        if chunked:
            whole = dechunk(data[end + 4:])
            if whole is None:
                break
            body, data = whole
        else:
            if len(data) < end + 4 + length[0]:
                break
            body = data[end + 4:end + 4 + length[0]]
            data = data[end + 4 + length[0]:]
        answers.append(Answer(int(status), reason, headers, body.decode("utf-8", "replace")))
    return answers, data


def exchange(svc, raw, timeout=10.0, source=None):
    """Sends @raw on a new connection and reads until it closes.
    Returns (answers, leftover, closed)."""
    s = connect(svc, source=source)
    try:
        s.sendall(raw)
        data, closed = read_all(s, timeout)
    finally:
        s.close()
    answers, rest = parse(data)
    return answers, rest, closed


def request(method, target, headers=(), body=b"", host=True, version="HTTP/1.1"):
    """The bytes of one request; Content-Length is added for a body."""
    lines = ["%s %s %s" % (method, target, version)]
    if host:
        lines.append("Host: ledgerd")
    lines += ["%s: %s" % h for h in headers]
    if body and not any(h[0].lower() in ("content-length", "transfer-encoding")
                        for h in headers):
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
