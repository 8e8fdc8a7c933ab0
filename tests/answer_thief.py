"""Proxies in front of ledgerd for the tests: LoopbackProxy, the listener they
share, and AnswerThief, which lets chosen calls through and loses their answers.

Both SDKs' tests use it to prove that a call whose answer was lost is
sent again unchanged, and that ledgerd recognises it: one execution.
"""

import socket
import threading


class LoopbackProxy:
    """A listener on a loopback port whose connections _serve() takes, each on a
    thread of its own, relaying to @upstream (host, port): what each proxy of
    the tests does with the messages is its _serve()."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.listener.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    @staticmethod
    def _read_message(sock, buffered):
        """One HTTP message (head and Content-Length body) from @sock."""
        while b"\r\n\r\n" not in buffered:
            chunk = sock.recv(65536)
            if not chunk:
                return None, b""
            buffered += chunk
        head, _, rest = buffered.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += sock.recv(65536)
        return head + b"\r\n\r\n" + rest[:length], rest[length:]

    def _serve(self, client):
        raise NotImplementedError


class AnswerThief(LoopbackProxy):
    """A proxy in front of ledgerd that lets a call through but loses its answer.

    The first call whose path ends with each of @actions reaches ledgerd,
    which acts on it; its answer is dropped and the connection closed, as
    a network cut would. Everything else passes.
    """

    def __init__(self, service, actions):
        self.pending = set(actions)
        self.stolen = []
        super().__init__((service.ledgerd.host, service.ledgerd.port))

    def _serve(self, client):
        with client, socket.create_connection(self.upstream) as upstream:
            buffered = b""
            while True:
                request, buffered = self._read_message(client, buffered)
                if request is None:
                    return
                upstream.sendall(request)
                answer, _ = self._read_message(upstream, b"")
                action = request.split(b" ", 2)[1].rsplit(b"/", 1)[-1].decode()
                if action in self.pending:
                    self.pending.discard(action)
                    self.stolen.append((action, answer.split(b"\r\n", 1)[0].decode()))
                    return
                client.sendall(answer)
