"""Fault injection: the gateway and ledgerd against replicas that die, freeze and crawl.

Each test plays one scenario of scenarios.py end to end: the recording
client (or the official openai npm client) streams a completion through
build/ledger-gateway from fake replicas (replica.py) that fail exactly where they
are told, and the verdict comes from what was recorded, not from status
codes: the chunks the client received and the attempt each came from, the
ledger's timeline of the request, the replicas' event logs and the fake
tool service's log (checks.py).

The module shares one PostgreSQL cluster and one ledgerd; every run gets a
tenant, a tool service, replicas and a gateway of its own, and records
itself in build/faults/<scenario>[-k<K>-<phase>]-<time>/. A failure names
that folder and the command that replays the run on its own stack.

    LEDGERD=build/ledgerd python3 -m pytest -q tests/faults
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

import scenarios  # noqa: E402
from clients import install_openai_client  # noqa: E402
from stack import Stack, run_folder  # noqa: E402


@pytest.fixture(scope="module")
def openai_client():
    """The pinned openai npm package, installed with `npm ci` unless it is there already."""
    install_openai_client()


@pytest.fixture(scope="module")
def stack():
    """PostgreSQL and ledgerd for the whole module; each run adds its own processes."""
    try:
        shared = Stack(run_folder("stack"))
    except RuntimeError as e:
        pytest.fail(str(e))
    yield shared
    shared.close()


def play(stack, name, kill_at=None, phase=None):
    """Runs the scenario; fails with its violations, its run folder and its replay command."""
    result = scenarios.run(stack, name, kill_at, phase)
    assert result.violations == [], "%s\nrun folder: %s\nreplay: %s" % (
        "\n".join(result.violations), result.folder, result.replay)


def test_prefill_kill(stack, openai_client):
    """Killed in prefill, before any byte: one whole answer from the rerun, two attempts.

    The openai client, too, gets the whole answer.
    """
    play(stack, "prefill_kill")


def test_computed_not_sent(stack):
    """Killed with token 0 computed but not sent: a rerun, and nothing of a1 reaches the client."""
    play(stack, "computed_not_sent")


def test_after_first_delta(stack, openai_client):
    """Killed right after the first delta: the error event counts what the client got; no rerun.

    The openai client raises an error whose code is upstream_decode_interrupted.
    """
    play(stack, "after_first_delta")


def test_partition(stack):
    """Frozen, not dead: fenced before any rerun, and refused when it wakes; no duplicate."""
    play(stack, "partition")


def test_after_tool_call(stack, openai_client):
    """Killed after its tool call ran: the rerun replays the stored result; one execution.

    The openai client gets the whole answer, the tool's result in it.
    """
    play(stack, "after_tool_call")


def test_client_disconnect(stack):
    """The client leaves mid-stream: the upstream is cancelled and acknowledges; no backup."""
    play(stack, "client_disconnect")


def test_slow_replica(stack):
    """Slower than the soft timeout is overloaded, not failed: keep waiting, one attempt."""
    play(stack, "slow_replica")


def test_mass_failure(stack):
    """All replicas but one die under load: retries within the pool budget, the rest a 503."""
    play(stack, "mass_failure")


@pytest.mark.parametrize("phase", scenarios.SWEEP_PHASES)
@pytest.mark.parametrize("kill_at", scenarios.SWEEP_TOKENS, ids="k{}".format)
def test_sweep(stack, kill_at, phase):
    """A kill at every point of every token's cycle: a rerun exactly when nothing was sent."""
    play(stack, "sweep", kill_at, phase)
