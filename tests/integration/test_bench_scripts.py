"""The benchmark's pgbench scripts run ledgerd's own SQL: a change to a
statement that is not carried into tests/bench/ fails here, not silently
in a benchmark that measures something else."""

import subprocess
import sys
from pathlib import Path

from conftest import LEDGERD

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_pgbench_scripts_match_the_statements():
    r = subprocess.run([sys.executable, str(BENCH / "gen_pgbench.py"), "--ledgerd", str(LEDGERD),
                        "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_an_unknown_statement_is_an_error():
    r = subprocess.run([str(LEDGERD), "sql", "no_such_statement"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 1
    assert "no statement called no_such_statement" in r.stderr


def test_the_bench_scripts_find_what_they_import():
    """make bench is no test, so a helper it imports from a folder that moved
    would first fail at the end of a bench run: each script is loaded here, its
    imports resolved, nothing run (its main() is not called)."""
    for script in ("bench.py", "mcp_latency.py"):
        r = subprocess.run([sys.executable, "-c",
                            "import runpy; runpy.run_path(%r, run_name='bench_import')"
                            % str(BENCH / script)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (script, r.stderr)
