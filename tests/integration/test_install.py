"""make install: what lands where, for PREFIX and DESTDIR, and the units.

A package builder runs `make install PREFIX=/usr DESTDIR=<staging>`: every
file lands under the staging directory, while what the files say (the
units' paths, the pkg-config prefix) is the final one; the four man pages
land in share/man/man1 and man8, and render without a warning. An operator runs it
with a real prefix: then systemd itself checks the units, and their
sandboxing is scored. The settings files are the operator's: an install
never writes over them."""

import os
import re
import shutil
import stat
import subprocess

import pytest

from conftest import ROOT

VERSION = (ROOT / "VERSION").read_text().strip()
PROGRAMS = ["ledgerd", "ledger-gateway", "ledger-mcp", "ledgerctl"]
MAN_PAGES = {"ledgerd": 8, "ledger-gateway": 8, "ledger-mcp": 1, "ledgerctl": 1}


def make_install(*args):
    out = subprocess.run(["make", "-s", "--no-print-directory", "install", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_staged_install_holds_everything_and_names_the_final_prefix(tmp_path):
    stage = tmp_path / "stage"
    make_install("PREFIX=/usr", "DESTDIR=%s" % stage)
    usr = stage / "usr"
    for program in PROGRAMS:
        path = usr / "bin" / program
        assert path.stat().st_mode & 0o111, path
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=10)
        assert out.stdout.split()[:2] == [program, VERSION], out.stdout
    assert (usr / "include/ledger_client.h").is_file()
    assert (usr / "lib/libledger_client.a").is_file()
    assert list((usr / "lib").glob("libledger_client.so*")), list((usr / "lib").iterdir())
    pc = (usr / "lib/pkgconfig/ledger_client.pc").read_text()
    assert re.search(r"^prefix=/usr$", pc, re.M) and "Version: %s" % VERSION in pc, pc
    for unit, binary in (("ledgerd", "ledgerd serve"), ("ledger-gateway", "ledger-gateway")):
        text = (usr / ("lib/systemd/system/%s.service" % unit)).read_text()
        assert "ExecStart=/usr/bin/%s\n" % binary in text, text
        assert re.search(r"@[A-Z]+@", text) is None, "an unfilled placeholder in " + unit
        assert str(stage) not in text
    for env in ("ledgerd.env", "gateway.env"):
        mode = stat.S_IMODE((stage / "etc/ledgerd" / env).stat().st_mode)
        assert mode == 0o600, (env, oct(mode))
    docs = usr / "share/doc/ledgerd"
    assert sorted(p.name for p in docs.iterdir()) == sorted(
        ["LICENSE", "CHANGELOG.md", "operations.md", "api.md", "ledger-gateway.md"])
    for program, section in MAN_PAGES.items():
        page = usr / ("share/man/man%d/%s.%d" % (section, program, section))
        assert stat.S_IMODE(page.stat().st_mode) == 0o644, page
    for unit in ("ledgerd", "ledger-gateway"):
        text = (usr / ("lib/systemd/system/%s.service" % unit)).read_text()
        assert "Documentation=man:%s(8) " % unit in text, text


@pytest.mark.parametrize("program", sorted(MAN_PAGES))
def test_each_man_page_renders_without_a_warning(program):
    """groff with every warning on, as lintian's check of man pages runs
    it, and man-db's man (scripts/deps.sh installs both for the tests): a
    page with a misused macro or a wrong escape says so on stderr. Each
    names its program and its section in .TH and NAME."""
    section = MAN_PAGES[program]
    page = ROOT / "packaging/man" / ("%s.%d" % (program, section))
    out = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    text = page.read_text()
    th = re.search(r"^\.TH (\S+) (\d)", text, re.M)
    assert th is not None and th.group(1).replace("\\-", "-") == program.upper(), th
    assert int(th.group(2)) == section
    assert re.search(r"^\.SH NAME\n%s \\- " % re.escape(program.replace("-", "\\-")),
                     text, re.M), program
    for heading in ("SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "SEE ALSO"):
        assert "\n.SH %s\n" % heading in text, (program, heading)
    out = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, MANWIDTH="80"))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert program in out.stdout


def test_each_man_page_names_every_flag_of_its_help():
    """The pages are written by hand: a flag added to a program's help and
    not to its page fails here."""
    helps = {"ledgerd": ["help"], "ledger-gateway": ["--help"], "ledger-mcp": ["help"],
             "ledgerctl": ["--help"]}
    for program, section in MAN_PAGES.items():
        out = subprocess.run([str(ROOT / "build" / program), *helps[program]],
                             capture_output=True, text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        page = (ROOT / "packaging/man" / ("%s.%d" % (program, section))).read_text()
        page = page.replace("\\-", "-")
        for flag in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", out.stdout))):
            assert flag in page, (program, flag)


def test_an_install_never_writes_over_the_operators_settings(tmp_path):
    stage = tmp_path / "stage"
    make_install("PREFIX=/usr", "DESTDIR=%s" % stage)
    env = stage / "etc/ledgerd/ledgerd.env"
    env.write_text("LEDGER_DATABASE_URL=postgresql://mine/ledgerd\n")
    make_install("PREFIX=/usr", "DESTDIR=%s" % stage)
    assert env.read_text() == "LEDGER_DATABASE_URL=postgresql://mine/ledgerd\n"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_units_and_scores_their_sandbox(tmp_path):
    """Installed for real (no DESTDIR), so that the paths the units name
    exist: systemd-analyze verify checks them, and `security --offline`
    scores the sandboxing (0 is best, 10 worst; 'OK' is under 2.5)."""
    make_install("PREFIX=%s/usr" % tmp_path, "SYSCONFDIR=%s/etc" % tmp_path)
    units = tmp_path / "usr/lib/systemd/system"
    for unit in ("ledgerd.service", "ledger-gateway.service"):
        path = units / unit
        out = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, SYSTEMD_LOG_LEVEL="warning"))
        assert out.returncode == 0 and out.stderr.strip() == "", (unit, out.stderr)
        out = subprocess.run(["systemd-analyze", "security", "--offline=true", str(path)],
                             capture_output=True, text=True, timeout=60)
        score = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout)
        assert score is not None, out.stdout + out.stderr
        print(unit, "exposure", score.group(1))
        assert float(score.group(1)) < 2.5, out.stdout
