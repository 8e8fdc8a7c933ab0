"""Portkey's open-source AI gateway (@portkey-ai/gateway, pinned in
portkey/package.json) as a test's process, for the tests that put it in
front of ledger-gateway: the pinned install, the process on a free loopback
port, and the per-request config that points it at an upstream.

The install is `npm ci` from portkey/package-lock.json, once, under
js_build's lock (build/js.lock), since several pytest workers start at once.
Portkey itself listens on every interface and has no option to change it;
portkey/serve.mjs starts it on 127.0.0.1 only.
"""

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PACKAGE = HERE / "portkey"
SERVE = PACKAGE / "serve.mjs"

sys.path.insert(0, str(ROOT / "tests" / "sdk" / "js"))
import js_build  # noqa: E402  (tests/sdk/js: locked(), npm ci, the lock file's pins)

# What must be installed at the lock file's versions: Portkey, and the hono
# packages package.json overrides (a newer hono breaks every stream).
PINNED = ("@portkey-ai/gateway", "hono", "@hono/node-server", "@hono/node-ws")

# The key Portkey sends upstream as "Authorization: Bearer ..." unless the
# client's Authorization is forwarded (a config without one sends "Bearer undefined").
CONFIG_API_KEY = "portkey-config-key"

_installed = False


def install():
    """The pinned packages in portkey/node_modules; once per process.

    --ignore-scripts: the only install script is Portkey's own postinstall,
    `patch-package`, whose patches the published package does not ship.
    """
    global _installed
    if _installed:
        return
    with js_build.locked():
        if js_build.needs_install(PACKAGE, PINNED):
            js_build.run(js_build.NPM_CI + ["--ignore-scripts"], PACKAGE, 300)
    _installed = True


def config(upstream, forward_headers=None, retry_attempts=None, retry_on=(503,),
           api_key=CONFIG_API_KEY):
    """The value of an x-portkey-config header sending a request to @upstream.

    @upstream is the OpenAI-compatible API's base URL, ending in /v1 (Portkey
    appends /chat/completions). @forward_headers: the client's headers Portkey
    passes on as they are (any case); every other one is dropped, and
    Authorization becomes "Bearer @api_key" unless "authorization" is in the
    list. A request's x-portkey-forward-headers (comma-separated) replaces the
    list. @retry_attempts: retries after the first request, on the statuses
    @retry_on, waiting 1 s, 2 s, 4 s, ... before each (no setting changes it).
    """
    cfg = {"provider": "openai", "api_key": api_key, "custom_host": upstream}
    if forward_headers is not None:
        cfg["forward_headers"] = list(forward_headers)
    if retry_attempts is not None:
        cfg["retry"] = {"attempts": retry_attempts, "on_status_codes": list(retry_on)}
    return json.dumps(cfg)


class Portkey:
    """Portkey on a free loopback port, started by the constructor; .url; stop().

    Its output (a start-up banner, then its errors) goes to @log_path.
    """

    def __init__(self, log_path, start_timeout=30):
        install()
        self.host = "127.0.0.1"
        self.port = free_port()
        self.url = "http://%s:%d" % (self.host, self.port)
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "ab")
        # Only PATH and HOME: Portkey reads HTTP_PROXY, TRUSTED_CUSTOM_HOSTS,
        # REDIS_CONNECTION_STRING and cloud credentials from its environment.
        env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
               "HOME": str(self.log_path.parent)}
        self.proc = subprocess.Popen(["node", str(SERVE), str(self.port)], cwd=PACKAGE, env=env,
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        try:
            self._wait_until_it_answers(start_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_until_it_answers(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("Portkey exited (%s) before answering:\n%s"
                                   % (self.proc.returncode, self.log_tail()))
            try:
                status, _, body = self.request("GET", "/", timeout=2)
                if status == 200 and body == b"AI Gateway says hey!":
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise RuntimeError("Portkey did not answer on %s within %d s:\n%s"
                                   % (self.url, timeout, self.log_tail()))
            time.sleep(0.05)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """One request on a new connection; returns (status, headers, body bytes).

        A chunked body is read to its last chunk: http.client raises
        IncompleteRead if the connection ends before it.
        """
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=dict(headers or {}))
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def chat(self, body, config_json, headers=None, timeout=60):
        """POST /v1/chat/completions with @body (a dict) and x-portkey-config @config_json."""
        h = {"Content-Type": "application/json", "x-portkey-config": config_json}
        h.update(headers or {})
        return self.request("POST", "/v1/chat/completions", json.dumps(body).encode(), h, timeout)

    def log_tail(self, chars=4000):
        """The last @chars characters of Portkey's output (None: all of it)."""
        try:
            text = self.log_path.read_text(errors="replace")
            return text if chars is None else text[-chars:]
        except OSError:
            return ""

    def stop(self, timeout=10):
        """SIGTERM, which ends node (Portkey sets no handler); returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        rc = self.proc.returncode
        self.proc = None
        self._log.close()
        return rc
