"""The layering docs/architecture.md states, as scripts/check_layers.py holds
it: the tree as it is passes, and a copy of it with one breach planted
fails, naming the file and line: a domain header or word in the wire, an
include that runs back up inside api/, a program reaching past the C
client's public header, libpq in the service."""

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

CHECK = ROOT / "scripts" / "check_layers.py"


def check(root):
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def tree(tmp_path):
    """A copy of the C sources the check reads."""
    for top in ("api", "ledger", "sdk/c", "sdk/programs"):
        shutil.copytree(ROOT / top, tmp_path / top,
                        ignore=shutil.ignore_patterns("node_modules", "*.md"))
    return tmp_path


def plant(path, line):
    text = path.read_text()
    first = text.index("#include")
    path.write_text(text[:first] + line + "\n" + text[first:])


def test_the_tree_keeps_its_layers():
    done = check(ROOT)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("file,line,says", [
    ("api/wire/conn.c", '#include "ledger/store/store.h"',
     'api/wire/conn.c:{n}: api/wire may not include "ledger/store/store.h"'),
    ("api/wire/http.h", '#include "api/service/request.h"',
     'api/wire/http.h:{n}: api/wire may not include "api/service/request.h"'),
    ("api/wire/net.c", "/* a claim's fencing token */",
     'api/wire/net.c:{n}: the wire speaks of "claim"'),
    ("api/service/reply.c", "#include <libpq-fe.h>",
     "api/service/reply.c:{n}: api/service may not include <libpq-fe.h>"),
    ("api/service/toolcalls.c", '#include "api/cli/settings.h"',
     'api/service/toolcalls.c:{n}: api/service may not include "api/cli/settings.h"'),
    ("sdk/programs/ledgerctl/text.c", '#include "sdk/c/client_int.h"',
     'sdk/programs/ledgerctl/text.c:{n}: sdk/programs/ledgerctl may not include '
     '"sdk/c/client_int.h"'),
    ("sdk/programs/ledgerctl/text.c", '#include "api/wire/net.h"',
     'sdk/programs/ledgerctl/text.c:{n}: sdk/programs/ledgerctl may not include '
     '"api/wire/net.h"'),
], ids=["wire-store", "wire-service", "wire-word", "service-libpq", "service-cli",
        "ledgerctl-private", "ledgerctl-wire"])
def test_a_planted_breach_is_named(tree, file, line, says):
    path = tree / file
    n = path.read_text()[:path.read_text().index("#include")].count("\n") + 1
    plant(path, line)
    done = check(tree)
    assert done.returncode == 1
    assert says.format(n=n) in done.stdout, done.stdout


def test_an_include_that_runs_back_up_is_a_circle(tree):
    """request.h once included routes.h, whose table names every handler,
    each of which includes request.h."""
    plant(tree / "api/service/request.h", '#include "api/service/routes.h"')
    done = check(tree)
    assert done.returncode == 1
    assert "api/service/request includes api/service/routes, which includes it back" in \
        done.stdout, done.stdout
