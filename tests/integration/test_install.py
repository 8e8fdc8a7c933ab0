"""make install: what lands where, for PREFIX and DESTDIR, and the units.

A package builder runs `make install PREFIX=/usr DESTDIR=<staging>`: every
file lands under the staging directory, while what the files say (the
units' paths, the pkg-config prefix) is the final one. An operator runs it
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
