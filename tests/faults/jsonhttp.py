"""The JSON side of the fakes' HTTP servers (replica.py, tools.py): quiet,
keep-alive, a JSON body in and a JSON body out."""

import json
from http.server import BaseHTTPRequestHandler


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        """Quiet: each fake's own event log is the record that matters."""

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        """The request's body, as sent."""
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def read_json(self):
        return json.loads(self.read_body() or b"{}")
