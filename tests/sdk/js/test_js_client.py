"""The TypeScript client (sdk/js, package "ledgerd") against a live ledgerd.

Installs the package's pinned devDependencies (`npm ci`), builds it with
tsc --strict, starts a ledgerd with the `service` fixture and runs each
node test file (node's own test runner) against it; then checks that
`npm pack` ships only the built files, the types and the README.

A node test cannot stop ledgerd, read its tokens or write SQL, so this
module serves it a control channel on loopback (LEDGER_CONTROL_URL, see
Control): tokens, stopping and starting ledgerd on its port, a tombstone as
retention leaves it, and the answer thief of tests/sdk in front of ledgerd.
"""

import json
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "sdk" / "js"
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "faults"))

from answer_thief import AnswerThief  # noqa: E402
from jsonhttp import JsonHandler  # noqa: E402

import js_build  # noqa: E402

NODE_TESTS = sorted(p.name for p in HERE.glob("test_*.mjs"))


def install_and_build():
    """sdk/js at its pinned devDependencies and built, once for every worker."""
    with js_build.locked():
        js_build.build_core()


def run(cmd, timeout, cwd=PACKAGE, env=None):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, "%s failed (%d):\n%s\n%s" % (
        " ".join(cmd), done.returncode, done.stdout[-20000:], done.stderr[-20000:])
    return done


class Control(ThreadingHTTPServer):
    """POST /ACTION?PARAMS for the node tests; answers JSON.

    token?role&tenant   {"token"}: a token of that role in that tenant
    stop, start         ledgerd stopped (SIGTERM) / started again on its port
    tombstone?rid&cid   a settled call's tombstone, as retention leaves it
    thief?actions=a,b   {"id", "url"}: an AnswerThief losing those answers
    stolen?id           {"stolen": [[action, status line], ...]}
    """

    def __init__(self, service):
        super().__init__(("127.0.0.1", 0), Handler)
        self.service = service
        self.port = service.ledgerd.port
        self.thieves = []
        self.lock = threading.Lock()  # one stop or start at a time
        self.url = "http://127.0.0.1:%d" % self.server_address[1]

    def act(self, action, params):
        svc = self.service
        if action == "token":
            return {"token": svc.token(params["role"], params.get("tenant", "t1"))}
        if action == "stop":
            with self.lock:
                svc.ledgerd.stop()
            return {}
        if action == "start":
            with self.lock:
                if svc.ledgerd.proc is None:
                    svc.ledgerd.start("127.0.0.1:%d" % self.port)
            return {}
        if action == "tombstone":
            svc.sql("INSERT INTO tool_call_tombstones (tenant, request_id, tool_call_id,"
                    " args_sha256, outcome, completed_at, expires_at) VALUES"
                    " ('t1', '%s', '%s', NULL, 'succeeded', now() - interval '30 days',"
                    " now() + interval '60 days')" % (params["rid"], params["cid"]))
            return {}
        if action == "thief":
            thief = AnswerThief(svc, params["actions"].split(","))
            self.thieves.append(thief)
            return {"id": len(self.thieves) - 1, "url": thief.url}
        if action == "stolen":
            return {"stolen": self.thieves[int(params["id"])].stolen}
        raise KeyError(action)

    def close(self):
        self.shutdown()
        self.server_close()
        for thief in self.thieves:
            thief.close()


class Handler(JsonHandler):
    def do_POST(self):
        parts = urlsplit(self.path)
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.read_body()  # a keep-alive connection: nothing of it may be left unread
        try:
            status, body = 200, self.server.act(parts.path.strip("/"), params)
        except Exception as e:  # the node test shows it: the assertion is there
            status, body = 500, {"error": "%s: %s" % (type(e).__name__, e)}
        self.reply(status, body)


@pytest.fixture(scope="module")
def built():
    install_and_build()


@pytest.fixture(scope="module")
def control(service):
    server = Control(service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.close()


def node_env(service, control):
    """What a node test file needs: the live ledgerd, a token, the control channel."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(service.tmp),
            "LEDGER_URL": "http://%s:%d" % (service.ledgerd.host, service.ledgerd.port),
            "LEDGER_TOKEN": service.token("agent"),
            "LEDGER_CONTROL_URL": control.url}


def run_node_test(name, env, node="node"):
    """Runs tests/sdk/js/@name with node's own test runner (the binary @node)."""
    return run([str(node), "--test", "--test-reporter=spec", str(HERE / name)],
               timeout=300, cwd=ROOT, env=env)


@pytest.mark.parametrize("name", NODE_TESTS)
def test_node(built, service, control, name):
    run_node_test(name, node_env(service, control))


def test_npm_pack_ships_only_the_build_the_types_and_the_readme(built):
    done = run(["npm", "pack", "--dry-run", "--json", "--ignore-scripts"], timeout=120)
    files = sorted(f["path"] for f in json.loads(done.stdout)[0]["files"])
    assert "README.md" in files and "package.json" in files
    assert "dist/index.js" in files and "dist/index.d.ts" in files
    assert [f for f in files if not f.startswith("dist/")] == ["README.md", "package.json"]
    assert all(f.endswith((".js", ".d.ts")) for f in files if f.startswith("dist/"))
