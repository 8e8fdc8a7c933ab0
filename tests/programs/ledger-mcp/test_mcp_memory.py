"""The problem and its fix, with a server nobody wrote for ledgerd: the
official @modelcontextprotocol/server-memory over stdio.

A retried `create_entities` (the same tool call, run again after a
failover) answers `[]` the second time when it reaches the server: the
entities exist already, so the retried run tells the agent that it created
nothing. Through ledger-mcp the retry never reaches the server and gets the
first answer back, marked as a replay.
"""

import json

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402

ENTITIES = {"entities": [
    {"name": "Ana", "entityType": "person", "observations": ["pays by card"]},
    {"name": "order-829", "entityType": "order", "observations": ["refund requested"]},
]}


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_memory"))


def memory_transport(env, memory_file, proxy):
    server = ["node", str(mcp.MEMORY_SERVER)]
    argv = env.stdio_proxy_argv(server=server) if proxy else server
    return {"type": "stdio", "command": argv[0], "args": argv[1:],
            "env": {"MEMORY_FILE_PATH": str(memory_file)}}


def graph(memory_file):
    return [json.loads(line) for line in memory_file.read_text().splitlines() if line.strip()]


def test_without_the_proxy_a_retry_answers_nothing_created(env):
    memory_file = env.tmp / "memory-direct.jsonl"
    run = mcp.run_client({"transport": memory_transport(env, memory_file, proxy=False), "steps": [
        mcp.call("create_entities", ENTITIES, mcp.keys(), repeat=2)]})
    first, second = run.calls()
    assert first["ok"] and second["ok"], run
    assert [e["name"] for e in first["result"]["structuredContent"]["entities"]] == \
        ["Ana", "order-829"]
    # The demonstration of the problem: the retry ran, and says it created nothing.
    assert second["result"]["structuredContent"] == {"entities": []}
    assert json.loads(second["result"]["content"][0]["text"]) == []


def test_through_the_proxy_the_retry_gets_the_first_answer(env):
    memory_file = env.tmp / "memory-proxied.jsonl"
    meta = mcp.keys()
    run = mcp.run_client({"transport": memory_transport(env, memory_file, proxy=True), "steps": [
        {"op": "list_tools"},
        mcp.call("create_entities", ENTITIES, meta, repeat=2)]})
    first, second = run.calls()
    assert first["ok"] and second["ok"], run
    assert not mcp.is_replay(first["result"])
    assert [e["name"] for e in first["result"]["structuredContent"]["entities"]] == \
        ["Ana", "order-829"]
    # Equal to the first answer, but for the replay marker; raw and parsed alike.
    assert second["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
    assert second["result"] == mcp.with_replayed(first["result"])
    assert second["raw"]["id"] == second["id"] != first["id"]
    # The server ran once: the graph holds each entity once.
    assert sorted(e["name"] for e in graph(memory_file) if e.get("type") == "entity") == \
        ["Ana", "order-829"]
    call = env.tool_call(meta)
    assert call.status == 200, call
    assert call.json["state"] == "succeeded"
    assert call.json["tool"] == "create_entities"
    # Recorded as the server sent it: the replay is the stored result plus the marker.
    assert mcp.with_replayed(call.json["result"]) == second["raw"]["result"]


def test_a_retry_in_a_new_session_gets_the_first_answer(env):
    """The retry of a failed-over agent comes on a new connection, through a new proxy."""
    memory_file = env.tmp / "memory-sessions.jsonl"
    meta = mcp.keys()
    runs = [mcp.run_client({"transport": memory_transport(env, memory_file, proxy=True),
                            "steps": [mcp.call("create_entities", ENTITIES, meta)]})
            for _ in range(2)]
    (first,), (second,) = (r.calls() for r in runs)
    assert first["ok"] and second["ok"], runs
    assert second["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
    assert len([e for e in graph(memory_file) if e.get("type") == "entity"]) == 2
