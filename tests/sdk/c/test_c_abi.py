"""The C SDK's ABI as a user installs it: make install-sdk into a prefix of
its own, then the shared library's soname and links, the example built
through that prefix's pkg-config and run against a live ledgerd, the
dynamic exports against the installed header's declarations, and
ledger_client_version() against VERSION, the one place the version is written.

Nothing here reads build/: what is checked is what a user's program sees.
"""

import os
import re
import subprocess

import pytest

from conftest import ROOT, new_id

MAKEFILE = (ROOT / "Makefile").read_text()


def makefile_var(name):
    m = re.search(r"^%s\s*:=\s*(\S+)\s*$" % name, MAKEFILE, re.M)
    assert m, "the Makefile sets no %s" % name
    return m.group(1)


VERSION = (ROOT / "VERSION").read_text().strip()
SOVERSION = makefile_var("SOVERSION")
SONAME = "libledger_client.so.%s" % SOVERSION
NODE = "LEDGER_CLIENT_%s" % SOVERSION


def out_of(argv, env=None):
    p = subprocess.run([str(a) for a in argv], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, "%s exited %d\n%s\n%s" % (argv, p.returncode, p.stdout,
                                                          p.stderr)
    return p.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """make install-sdk PREFIX=<a fresh directory>."""
    prefix = tmp_path_factory.mktemp("abi") / "prefix"
    out_of(["make", "-C", ROOT, "--no-print-directory", "install-sdk", "PREFIX=%s" % prefix])
    return prefix


def cc_with_pkg_config(prefix, source, program):
    """Compiles @source as a user does: the installed .pc's flags, nothing else."""
    e = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    e.pop("PKG_CONFIG_LIBDIR", None)
    flags = out_of(["pkg-config", "--cflags", "--libs", "ledger_client"], env=e).split()
    out_of(["cc", "-std=c11", "-Wall", "-Werror", "-Werror=implicit-function-declaration",
            source] + flags + ["-o", program])
    return program


@pytest.fixture(scope="module")
def example(prefix):
    return cc_with_pkg_config(prefix, ROOT / "sdk" / "c" / "examples" / "send_email.c",
                              prefix.parent / "send_email")


def dynamic_section(path):
    """readelf -d's entries of @path: [(tag, value)], e.g. ("SONAME", "libledger_client.so.1")."""
    entries = []
    for line in out_of(["readelf", "-d", path]).splitlines():
        m = re.search(r"\((\w+)\)\s+.*\[(.*)\]", line)
        if m:
            entries.append((m.group(1), m.group(2)))
    return entries


def declared_functions(header_text):
    """Every function the header declares: comments and preprocessor lines
    removed, each name followed by its parameter list. A function pointer's
    typedef ("enum x (*fn)(...)") is no declaration of a function."""
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
    return set(re.findall(r"\b([A-Za-z_]\w*)\s*\((?!\s*\*)", text))


def test_the_library_is_installed_with_its_soname_and_links(prefix):
    lib = prefix / "lib"
    real = lib / ("libledger_client.so.%s" % VERSION)
    assert real.is_file() and not real.is_symlink(), sorted(os.listdir(lib))
    assert os.readlink(lib / SONAME) == real.name
    assert os.readlink(lib / "libledger_client.so") == SONAME
    assert ("SONAME", SONAME) in dynamic_section(real), dynamic_section(real)


def test_the_example_needs_the_soname_and_loads_the_installed_library(prefix, example):
    needed = [v for tag, v in dynamic_section(example) if tag == "NEEDED"]
    assert SONAME in needed and "libledger_client.so" not in needed, needed
    e = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"))
    ldd = out_of(["ldd", example], env=e)
    assert "%s => %s" % (SONAME, prefix / "lib" / SONAME) in ldd, ldd


def test_the_example_runs_against_the_installed_library(service, prefix, example):
    led = service.ledgerd
    e = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"),
             LEDGER_URL="http://%s:%d" % (led.host, led.port),
             LEDGER_TOKEN=service.token("agent"))
    e.pop("LEDGER_CA_FILE", None)
    rid = new_id()
    first = out_of([example, rid, "ada@example.com"], env=e)
    assert "sent: {\"message_id\":\"msg-%s:call_00\"}" % rid in first, first
    second = out_of([example, rid, "ada@example.com"], env=e)
    assert "already sent, not sending again" in second, second


def test_the_library_exports_exactly_the_installed_headers_functions(prefix):
    declared = declared_functions((prefix / "include" / "ledger_client.h").read_text())
    assert "ledger_client_open" in declared and "ledger_client_version" in declared, declared
    exported, others = {}, []
    for line in out_of(["nm", "-D", "--defined-only", prefix / "lib" / SONAME]).splitlines():
        _, kind, name = line.split()
        if kind == "T":
            symbol, _, node = name.partition("@@")
            exported[symbol] = node
        else:
            others.append((kind, name))
    # Besides the functions, only the version node's own symbol.
    assert others == [("A", NODE)], others
    assert sorted(set(exported) - declared) == [], "exported, not in the header"
    assert sorted(declared - set(exported)) == [], "in the header, not exported"
    assert {node for node in exported.values()} == {NODE}, exported


VERSION_PROGRAM = r"""
#include <stdio.h>
#include <ledger_client.h>

int main(void)
{
	printf("%s\n", ledger_client_version());
	return 0;
}
"""


def test_ledger_client_version_is_the_makefiles_version(prefix):
    source = prefix.parent / "version.c"
    source.write_text(VERSION_PROGRAM)
    program = cc_with_pkg_config(prefix, source, prefix.parent / "version")
    e = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"))
    assert out_of([program], env=e) == VERSION + "\n"
    e = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    assert out_of(["pkg-config", "--modversion", "ledger_client"], env=e) == VERSION + "\n"
