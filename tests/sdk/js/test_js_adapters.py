"""The framework adapters of the TypeScript client (sdk/js/src/adapters)
with the frameworks themselves, against a live ledgerd.

Builds the core package (npm ci + tsc in sdk/js), installs the test
package tests/sdk/js/adapters (the Vercel AI SDK, the OpenAI Agents SDK and
LangChain.js at exact pins, and "ledgerd" from sdk/js) with `npm ci`, starts
a ledgerd with the `service` fixture and runs each adapter's node test file
(node's own test runner) with LEDGER_URL and LEDGER_TOKEN. Each file drives
its framework with the framework's scripted test model, so no network is
needed: a failed-over rerun replays and runs no side effect twice; a
diverged rerun gets ArgsMismatch and runs nothing.

openai-agents-mcp.test.mjs also launches build/ledger-mcp (LEDGER_MCP) in
front of the MCP test server of tests/programs/ledger-mcp (MCP_TEST_SERVER), whose pinned
packages tests/programs/ledger-mcp's own installer puts in place.

Several pytest workers, and the core's own tests (tests/sdk/js/test_js_client.py),
build sdk/js: js_build.py does it once, under one lock.
"""

import os
import sys
from pathlib import Path

import pytest

import js_build

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "programs" / "ledger-mcp"))
import mcp_helpers  # noqa: E402  (tests/programs/ledger-mcp: the proxy's path and the test server's install)

ROOT = Path(__file__).resolve().parents[3]
CORE = ROOT / "sdk" / "js"
ADAPTERS = Path(__file__).resolve().parent / "adapters"
PINNED = ("ai", "@openai/agents", "langchain", "@langchain/core", "zod")
NODE_TESTS = sorted(p.name for p in ADAPTERS.glob("*.test.mjs"))


def install_and_build():
    with js_build.locked():
        js_build.build_core()
        if (js_build.needs_install(ADAPTERS, PINNED)
                or not (ADAPTERS / "node_modules" / "ledgerd").exists()):
            js_build.run(js_build.NPM_CI + ["--ignore-scripts"], ADAPTERS, 600)
    mcp_helpers.install_node_packages()


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
           "LEDGER_TOKEN": service.token("agent"),
           "LEDGER_MCP": str(mcp_helpers.LEDGER_MCP), "MCP_TEST_SERVER": str(mcp_helpers.SERVER)}
    if name == "openai-agents-mcp.test.mjs":
        mcp_helpers.require_built()
    js_build.run(["node", "--test", "--test-reporter=spec", str(ADAPTERS / name)], ADAPTERS, 300,
                 env=env)
