"""Every statement the store prepares touches one (tenant, request_id), or is
listed in docs/scaling.md with what it does on a distributed cluster.

The tables distribute on request_id, co-located (docs/scaling.md): that is
only true while the per-request statements name the key. A statement added
without it, and without a line in the document, fails here.
"""

import re
import subprocess

from conftest import LEDGERD, ROOT

DOC = ROOT / "docs" / "scaling.md"
KEYED = (re.compile(r"\btenant\s*=\s*\$\d+"), re.compile(r"\brequest_id\s*=\s*\$\d+"))
# An insert of one request's row: its first two columns, from parameters.
KEYED_INSERT = re.compile(r"INSERT INTO \w+\s*\(\s*tenant\s*,\s*request_id\s*,[^)]*\)\s*"
                          r"VALUES\s*\(\s*\$\d+\s*,\s*\$\d+\s*,")


def statements():
    names = subprocess.run([str(LEDGERD), "sql"], capture_output=True, text=True,
                           check=True).stdout.split()
    return {n: subprocess.run([str(LEDGERD), "sql", n], capture_output=True, text=True,
                              check=True).stdout for n in names}


def touches_one_request(sql):
    return all(p.search(sql) for p in KEYED) or KEYED_INSERT.search(sql) is not None


def documented_exceptions():
    """The statement names in the first column of the document's exceptions table."""
    text = DOC.read_text()
    table = text[text.index("### The statements that do not touch one request"):]
    names = set()
    for line in table.splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("| `"):
            names.update(re.findall(r"`(\w+)`", line.split("|")[1]))
    return names


def test_every_statement_names_its_request_or_is_documented():
    sql = statements()
    assert len(sql) > 30, sorted(sql)  # the listing works
    unkeyed = {n for n, s in sql.items() if not touches_one_request(s)}
    documented = documented_exceptions()
    assert unkeyed - documented == set(), (
        "statements without (tenant, request_id) and without a line in docs/scaling.md: %s"
        % sorted(unkeyed - documented))
    assert documented - set(sql) == set(), "docs/scaling.md names statements that do not exist"
    assert documented & (set(sql) - unkeyed) == set(), (
        "docs/scaling.md lists statements that do touch one request: %s"
        % sorted(documented & (set(sql) - unkeyed)))


def test_the_hot_path_is_keyed():
    sql = statements()
    for name in ("claim_fast", "complete_fast", "renew_fast", "lock_request", "read_call",
                 "call_settle", "attempt_insert", "event_insert", "decision_read"):
        assert touches_one_request(sql[name]), name


def test_batches_carry_the_key_of_every_element():
    sql = statements()
    for name in ("batch_lock", "claim_many", "complete_many"):
        s = sql[name]
        assert "unnest(" in s, name
        # The arrays are zipped into (tenant, request) pairs before anything is touched.
        assert re.search(r"AS k\(\s*(tenant|t)\s*,\s*(rid|r|request_id)\b", s), name


def test_tenant_wide_statements_are_scoped_to_a_tenant():
    sql = statements()
    for name in ("list_open", "list_any", "list_requests", "budget_count", "budget_drops"):
        assert KEYED[0].search(sql[name]), name
