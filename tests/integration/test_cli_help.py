"""Asking ledgerd and the reference gateway for help: the usage on standard
output and exit status 0, whatever else the line holds, and a usage that
names every command ledgerd takes. (ledgerctl and ledger-mcp have theirs in
test_ledgerctl.py and tests/programs/ledger-mcp/test_mcp_cli.py.)"""

import os
import re
import subprocess

import pytest

from conftest import LEDGERD

GATEWAY = LEDGERD.parent / "ledger-gateway"


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("args", [["help"], ["--help"], ["-h"], ["serve", "--help"],
                                  ["migrate", "--workers", "0", "--help"]])
def test_ledgerd_help_is_the_usage_on_stdout_and_exit_0(args):
    r = run(LEDGERD, *args)
    assert r.returncode == 0, r
    assert r.stdout.startswith("usage: ledgerd ") and r.stderr == ""
    assert "--database-url" in r.stdout and "LEDGER_UI" in r.stdout


def test_ledgerd_help_names_every_command_it_takes():
    usage = run(LEDGERD, "help").stdout
    for command in ("serve", "migrate", "token create", "token list", "token revoke",
                    "token rotate", "gc", "sql [NAME]", "version", "help"):
        assert re.search(r"\n  %s[ ,]" % re.escape(command), usage), command
    # And each one it names is taken (sql and version need no database).
    names = run(LEDGERD, "sql")
    assert names.returncode == 0 and "list_requests" in names.stdout.split()
    assert run(LEDGERD, "sql", "list_requests").stdout.startswith("SELECT ")
    assert run(LEDGERD, "version").stdout.startswith("ledgerd ")
    # The token commands get as far as asking for the database (tests/integration/test_tokens.py
    # runs them against one).
    env = {k: v for k, v in os.environ.items() if k != "LEDGER_DATABASE_URL"}
    for args in (["token", "create", "--tenant", "t1", "--role", "agent"], ["token", "list"],
                 ["token", "revoke", "0123456789ab"], ["token", "rotate", "0123456789ab"]):
        r = subprocess.run([str(LEDGERD)] + args, capture_output=True, text=True, timeout=30,
                           env=env)
        assert r.returncode == 2 and "LEDGER_DATABASE_URL is required" in r.stderr, (args, r)


def test_ledgerd_without_help_still_refuses_what_it_does_not_know():
    r = run(LEDGERD, "--no-such-flag")
    assert r.returncode == 2 and r.stdout == "" and "no-such-flag" in r.stderr


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--listen", "127.0.0.1:1", "--help"]])
def test_gateway_help_is_the_usage_on_stdout_and_exit_0(args):
    r = run(GATEWAY, *args)
    assert r.returncode == 0, r
    assert r.stdout.startswith("usage: ledger-gateway ") and r.stderr == ""


def test_gateway_misuse_is_exit_2_with_the_usage_on_stderr():
    r = run(GATEWAY, "--no-such-flag", "x")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("ledger-gateway: unknown flag\nusage: ledger-gateway ")
