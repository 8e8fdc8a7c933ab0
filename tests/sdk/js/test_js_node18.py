"""The TypeScript client on Node 18, the oldest Node its package.json claims.

The node tests of the client (every tests/sdk/js/test_*.mjs, the ones
test_js_client.py runs on the machine's node; the adapters' tests are not
among them: their frameworks need Node 20 or later) run again, against a
live ledgerd, on Debian 12's Node 18 (tests/sdk/js/node18.py fetches and
unpacks it, never installs it). A client that used an API Node 18 lacks
fails here though it passes on Node 20 and tsc lets it by (@types/node is
20's): crypto.hash, say, which Node 20.12 added.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import node18  # noqa: E402
# The same ledgerd, build and control channel as on the machine's node.
from test_js_client import NODE_TESTS, built, control, node_env, run_node_test  # noqa: E402,F401


@pytest.fixture(scope="module")
def node():
    return node18.node()


def test_it_is_node_18(node):
    done = subprocess.run([str(node), "-p", "process.versions.node"], env=node18.env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("18."), done.stdout


def test_the_client_touches_no_adapter():
    """The client's tests on Node 18 are the ones that need no framework."""
    for name in NODE_TESTS:
        text = (HERE / name).read_text()
        for framework in ("\"ai\"", "@openai/agents", "langchain", "/adapters/ai.js",
                          "/adapters/openai-agents.js", "/adapters/langchain.js"):
            assert framework not in text, (name, framework)


@pytest.mark.parametrize("name", NODE_TESTS)
def test_node18(built, service, control, node, name):
    done = run_node_test(name, node18.env(node_env(service, control)), node=node)
    # The spec reporter's summary: "ℹ pass N", "ℹ fail N".
    counts = dict(re.findall(r"^\S+ (pass|fail|skipped) (\d+)$", done.stdout, re.M))
    assert counts.get("fail") == "0" and int(counts.get("pass", 0)) > 0, done.stdout[-4000:]
