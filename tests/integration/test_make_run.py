"""scripts/run.sh, the script behind `make run`, against a database of its
own (LEDGER_DATABASE_URL, as a user with a PostgreSQL of their own runs
it): it names the database URL that ledgerd's own commands need and how
to pick another address, and a restart keeps the development token instead
of minting another while the old one stays valid."""

import json
import os
import re
import signal
import subprocess
import time

from conftest import LEDGERD, ROOT, free_port


def start(service, run_dir):
    """run.sh until ledgerd listens; returns (process, what it said, address)."""
    port = free_port()
    env = dict(os.environ, LEDGERD=str(LEDGERD), LEDGER_DATABASE_URL=service.database_url,
               LEDGER_LISTEN="127.0.0.1:%d" % port, LEDGER_RUN_DIR=str(run_dir))
    proc = subprocess.Popen([str(ROOT / "scripts" / "run.sh")], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    said, deadline = [], time.time() + 30
    while time.time() < deadline:
        line = proc.stderr.readline()
        assert line, "run.sh ended: %s" % "".join(said)
        said.append(line)
        if line.startswith("{") and "address" in json.loads(line):
            return proc, "".join(said), port
    raise AssertionError("ledgerd did not start: %s" % "".join(said))


def stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def token_of(said):
    return re.search(r"^    (ldg_\S+)$", said, re.M).group(1)


def test_make_run_names_the_database_and_keeps_its_token(service, tmp_path):
    proc, said, port = start(service, tmp_path)
    try:
        token = token_of(said)
        assert 'LEDGER_DATABASE_URL="%s"' % service.database_url in said
        assert (tmp_path / "database-url").read_text().strip() == service.database_url
        assert "LEDGER_LISTEN=" in said and "http://127.0.0.1:%d/ui/" % port in said
        who = service.ledgerd.get("/v1/whoami", token=token)
        assert who.json == {"tenant": "dev", "role": "admin"}, who
    finally:
        stop(proc)

    proc, said, _ = start(service, tmp_path)
    try:
        assert token_of(said) == token
    finally:
        stop(proc)
    count = service.sql("SELECT count(*) FROM api_tokens WHERE tenant = 'dev'")
    assert count == [["1"]], count
