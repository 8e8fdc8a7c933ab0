"""The framework adapters of the TypeScript client (sdk/js/src/adapters)
with the frameworks themselves, against a live ledgerd.

Builds the core package (npm ci + tsc in sdk/js), installs the test
package tests/js/adapters (the Vercel AI SDK, the OpenAI Agents SDK and
LangChain.js at exact pins, and "ledgerd" from sdk/js) with `npm ci`, starts
a ledgerd with the `service` fixture and runs each adapter's node test file
(node's own test runner) with LEDGER_URL and LEDGER_TOKEN. Each file drives
its framework with the framework's scripted test model, so no network is
needed: a failed-over rerun replays and runs no side effect twice; a
diverged rerun gets ArgsMismatch and runs nothing.

Several pytest workers, and the core's own tests (tests/js/test_js_client.py),
build sdk/js: the builds and installs run under an exclusive lock on
build/js.lock.
"""

import fcntl
import json
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "sdk" / "js"
ADAPTERS = Path(__file__).resolve().parent / "adapters"
LOCK = ROOT / "build" / "js.lock"
PINNED = ("ai", "@openai/agents", "langchain", "@langchain/core", "zod")
NODE_TESTS = sorted(p.name for p in ADAPTERS.glob("*.test.mjs"))
NPM_CI = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts"]


@contextmanager
def locked(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run(cmd, cwd, timeout, env=None):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, "%s failed (%d):\n%s\n%s" % (
        " ".join(map(str, cmd)), done.returncode, done.stdout[-6000:], done.stderr[-6000:])
    return done


def installed_version(package_dir, name):
    try:
        return json.loads((package_dir / "node_modules" / name / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def locked_versions(package_dir, names=None):
    lock = json.loads((package_dir / "package-lock.json").read_text())
    return {path[len("node_modules/"):]: entry["version"]
            for path, entry in lock["packages"].items()
            if path.startswith("node_modules/") and "version" in entry
            and "/node_modules/" not in path[len("node_modules/"):]
            and (names is None or path[len("node_modules/"):] in names)}


def install_and_build():
    # build/js.lock is the lock both wrappers agree on; the core's own
    # sdk/js/.install.lock is taken too (after it, so never a deadlock)
    # while sdk/js is installed and built.
    with locked(LOCK), locked(CORE / ".install.lock"):
        if any(installed_version(CORE, n) != v for n, v in locked_versions(CORE).items()):
            run(NPM_CI, CORE, 300)
        run([str(CORE / "node_modules" / ".bin" / "tsc"), "-p", "."], CORE, 300)
        if (any(installed_version(ADAPTERS, n) != v for n, v in locked_versions(ADAPTERS, PINNED).items())
                or not (ADAPTERS / "node_modules" / "ledgerd").exists()):
            run(NPM_CI, ADAPTERS, 600)


@pytest.fixture(scope="module")
def built():
    install_and_build()


def test_the_adapters_are_built_with_the_core(built):
    for name in ("ai", "openai-agents", "langchain"):
        for ext in (".js", ".d.ts"):
            assert (CORE / "dist" / "adapters" / (name + ext)).exists(), name + ext


def test_no_framework_is_imported_at_run_time(built):
    """The package depends on no framework: the adapters' built code imports only the core."""
    for path in (CORE / "dist" / "adapters").glob("*.js"):
        text = path.read_text()
        for framework in PINNED:
            assert '"%s"' % framework not in text and "'%s'" % framework not in text, (path, framework)


@pytest.mark.parametrize("name", NODE_TESTS)
def test_node(built, service, name):
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": str(service.tmp),
           "LEDGER_URL": "http://%s:%d" % (service.ledgerd.host, service.ledgerd.port),
           "LEDGER_TOKEN": service.token("agent")}
    run(["node", "--test", "--test-reporter=spec", str(ADAPTERS / name)], ADAPTERS, 300, env=env)
