"""ledger-mcp's command line: bad settings exit 2 with one line on stderr
starting "ledger-mcp: ", before any server is started; help and version
exit 0; settings come from flags, else the environment; the stdio proxy
exits with its server's status.
"""

import json
import subprocess

import pytest

pytest.register_assert_rewrite("mcp_helpers")
import mcp_helpers as mcp  # noqa: E402
from mcp_helpers import call  # noqa: E402


@pytest.fixture(scope="module")
def env(service, tmp_path_factory):
    return mcp.Env(service, tmp_path_factory.mktemp("mcp_cli"))


def run(args, env_vars=None, timeout=20):
    e = mcp.clean_env()
    e.update(env_vars or {})
    return subprocess.run([str(mcp.LEDGER_MCP)] + [str(a) for a in args], env=e,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def bad_settings(env, tmp):
    """(name, argv, extra environment) of settings that must be refused."""
    token_file = tmp / "token"
    token_file.write_text(env.agent + "\n")
    server = ["--", "node", str(mcp.SERVER), "stdio"]
    tok = ["--token", env.agent]
    up = ["--upstream", "http://127.0.0.1:9/mcp"]
    return [
        ("no token", ["stdio"] + server, {}),
        ("no token, http", ["http", "--listen", "127.0.0.1:0"] + up, {}),
        ("--lease-ms 5", ["stdio", "--lease-ms", "5"] + tok + server, {}),
        ("--lease-ms 99", ["stdio", "--lease-ms", "99"] + tok + server, {}),
        ("--lease-ms 3600001", ["stdio", "--lease-ms", "3600001"] + tok + server, {}),
        ("--lease-ms x", ["stdio", "--lease-ms", "x"] + tok + server, {}),
        ("--lease-ms without a value", ["stdio"] + tok + ["--lease-ms"], {}),
        ("--wait-ms -1", ["stdio", "--wait-ms", "-1"] + tok + server, {}),
        ("--call-timeout-ms 86400001", ["stdio", "--call-timeout-ms", "86400001"] + tok + server,
         {}),
        ("LEDGER_MCP_LEASE_MS=5", ["stdio"] + tok + server, {"LEDGER_MCP_LEASE_MS": "5"}),
        ("--max-result-bytes 0", ["stdio", "--max-result-bytes", "0"] + tok + server, {}),
        ("--max-result-bytes 65MiB", ["stdio", "--max-result-bytes", "65MiB"] + tok + server,
         {}),
        ("--max-result-bytes 1GiB", ["stdio", "--max-result-bytes", "1GiB"] + tok + server, {}),
        ("--max-result-bytes -1", ["stdio", "--max-result-bytes", "-1"] + tok + server, {}),
        ("--max-result-bytes 1 MiB", ["stdio", "--max-result-bytes", "1 MiB"] + tok + server,
         {}),
        ("LEDGER_MCP_MAX_RESULT_BYTES=x", ["stdio"] + tok + server,
         {"LEDGER_MCP_MAX_RESULT_BYTES": "x"}),
        ("--log-level loud", ["stdio", "--log-level", "loud"] + tok + server, {}),
        ("http without --upstream", ["http", "--listen", "127.0.0.1:0"] + tok, {}),
        ("http without --listen", ["http"] + tok + up, {}),
        ("http --listen without a port", ["http", "--listen", "127.0.0.1"] + tok + up, {}),
        ("unknown flag", ["stdio", "--no-such-flag"] + tok + server, {}),
        ("unknown flag, http", ["http", "--listen", "127.0.0.1:0", "--frobnicate", "1"] + tok + up,
         {}),
        ("unknown mode", ["serve"] + tok, {}),
        ("no mode", [], {}),
        ("stdio without a server", ["stdio"] + tok, {}),
        ("stdio with -- and nothing after", ["stdio"] + tok + ["--"], {}),
        ("--token and --token-file", ["stdio", "--token-file", str(token_file)] + tok + server, {}),
        ("unreadable --token-file", ["stdio", "--token-file", str(tmp / "absent")] + server, {}),
    ]


def test_bad_settings_exit_2_with_one_line(env):
    for name, argv, extra in bad_settings(env, env.tmp):
        r = run(argv, extra)
        assert r.returncode == 2, (name, r.returncode, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1, (name, r.stderr)
        assert lines[0].startswith("ledger-mcp: "), (name, r.stderr)
        assert r.stdout == "", (name, r.stdout)
        assert env.agent not in r.stderr, name  # a token is never printed


def test_bad_settings_start_no_server(env):
    marker = env.tmp / "server-started"
    r = run(["stdio", "--lease-ms", "5", "--token", env.agent, "--",
             "sh", "-c", "touch %s; cat" % marker])
    assert r.returncode == 2, r.stderr
    assert not marker.exists()


@pytest.mark.parametrize("flag", ["help", "--help", "-h"])
def test_help_exits_0_with_usage_on_stdout(flag):
    r = run([flag])
    assert r.returncode == 0, r.stderr
    assert "ledger-mcp stdio" in r.stdout and "ledger-mcp http" in r.stdout, r.stdout
    assert "--lease-ms" in r.stdout
    assert "--max-result-bytes BYTES" in r.stdout and "default 1MiB" in r.stdout


def test_version_exits_0():
    r = run(["version"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), r


def test_settings_from_the_environment_and_a_token_file(env):
    """LEDGER_URL and LEDGER_TOKEN_FILE instead of flags: a keyed call is claimed."""
    token_file = env.tmp / "agent-token"
    token_file.write_text(env.agent + "\nsecond line is not the token\n")
    counts = env.counts()
    meta = mcp.keys()
    argv = [str(mcp.LEDGER_MCP), "stdio", "--", "node", str(mcp.SERVER), "stdio"]
    transport = {"type": "stdio", "command": argv[0], "args": argv[1:],
                 "env": {"LEDGER_URL": env.url, "LEDGER_TOKEN_FILE": str(token_file),
                         "LEDGER_MCP_OWNER": "env-owner", "MCP_TEST_COUNT_FILE": str(counts.path)}}
    result = mcp.run_client({"transport": transport,
                             "steps": [call("charge", {"order": "o-env", "cents": 3}, meta,
                                            repeat=2)]})
    first, second = result.calls()
    assert first["ok"] and second["ok"], result
    assert second["raw"]["result"] == mcp.with_replayed(first["raw"]["result"])
    doc = env.led.get("/v1/requests/%s" % mcp.rid_of(meta), token=env.router).json
    (claim,) = [e for e in doc["events"] if e["type"] == "claimed"]
    assert claim["detail"]["owner"] == "env-owner"


def test_a_wrong_token_is_refused_by_ledgerd_not_by_the_proxy(env):
    """A token ledgerd does not know: -32015 unauthorized, and the tool does not run."""
    counts = env.counts()
    meta = mcp.keys()
    argv = env.stdio_proxy_argv(token="x" * 40)
    transport = {"type": "stdio", "command": argv[0], "args": argv[1:],
                 "env": {"MCP_TEST_COUNT_FILE": str(counts.path)}}
    result = mcp.run_client({"transport": transport,
                             "steps": [call("charge", {"order": "o-tok", "cents": 3}, meta)]})
    data = mcp.assert_proxy_error(result.calls()[0], mcp.REFUSED, "unauthorized", meta)
    assert data["ledgerd"]["code"] == "unauthorized"
    assert counts.started() == 0


def test_stdio_exits_with_the_servers_status(env):
    argv = env.stdio_proxy_argv(server=["sh", "-c", "read line; exit 7"])
    p = subprocess.run(argv, input='{"jsonrpc":"2.0","id":1,"method":"ping"}\n', text=True,
                       capture_output=True, timeout=20, env=env.proxy_env())
    assert p.returncode == 7, p.stderr
    assert p.stdout == ""


def test_stdio_answers_calls_in_flight_when_the_server_exits(env):
    """The server exits while a keyed call runs: -32019 for it, then the proxy ends."""
    meta = mcp.keys()
    argv = env.stdio_proxy_argv("--lease-ms", "1000", server=["sh", "-c", "read line; exit 5"])
    request = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
               "params": {"name": "charge", "arguments": {"order": "o-sh"}, "_meta": meta}}
    p = subprocess.run(argv, input=json.dumps(request) + "\n", text=True, capture_output=True,
                       timeout=20, env=env.proxy_env())
    assert p.returncode == 5, p.stderr
    (line,) = p.stdout.splitlines()
    answer = json.loads(line)
    assert answer["id"] == 9 and answer["error"]["code"] == mcp.LEFT_UNKNOWN, answer
    assert answer["error"]["data"]["server_called"] is True
    assert env.state(meta) in ("in_progress", "unknown")


def test_http_sigterm_exits_0(env):
    counts = env.counts()
    server = env.http_server(counts)
    try:
        proxy = env.http_proxy(server.url)
        result = mcp.run_client({"transport": {"type": "http", "url": proxy.url},
                                 "steps": [{"op": "ping"}]})
        assert result.steps[0]["ok"], result
        assert proxy.stop() == 0
    finally:
        server.stop()
