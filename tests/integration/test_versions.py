"""One version, written in VERSION at the root, and one licence, Apache-2.0.

Every program says the version with --version (and exits 0); the C
library's pkg-config file, the Python package and the npm package carry
it; the changelog has an entry for it. Each package's metadata names the
licence, whose text is LICENSE."""

import json
import re
import subprocess

import pytest

from conftest import ROOT

BUILD = ROOT / "build"
VERSION = (ROOT / "VERSION").read_text().strip()
PROGRAMS = ["ledgerd", "ledger-gateway", "ledger-mcp", "ledgerctl"]


def test_the_version_is_one_line_of_semver():
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?", VERSION), VERSION
    assert (ROOT / "VERSION").read_text() == VERSION + "\n"


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_program_says_the_version(program):
    out = subprocess.run([str(BUILD / program), "--version"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert out.stdout.splitlines()[0].split()[:2] == [program, VERSION], out.stdout


def test_ledgerd_version_command_agrees():
    out = subprocess.run([str(BUILD / "ledgerd"), "version"], capture_output=True, text=True,
                         timeout=10, check=True)
    assert out.stdout.split()[:2] == ["ledgerd", VERSION], out.stdout


def test_the_packages_carry_the_version():
    pc = (BUILD / "ledger_client.pc").read_text()
    assert re.search(r"^Version: %s$" % re.escape(VERSION), pc, re.M), pc
    py = (ROOT / "sdk/python/ledger_client/_version.py").read_text()
    assert re.search(r'^__version__ = "%s"$' % re.escape(VERSION), py, re.M), py
    js = json.loads((ROOT / "sdk/js/package.json").read_text())
    assert js["version"] == VERSION, js["version"]


def test_the_changelog_has_an_entry_for_the_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(r"^## %s( |$)" % re.escape(VERSION), text, re.M), "no entry for " + VERSION


def test_the_licence_is_apache_2_0_everywhere():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    js = json.loads((ROOT / "sdk/js/package.json").read_text())
    assert js["license"] == "Apache-2.0", js.get("license")
    pyproject = (ROOT / "sdk/python/pyproject.toml").read_text()
    assert re.search(r'^license = "Apache-2.0"$', pyproject, re.M), pyproject
