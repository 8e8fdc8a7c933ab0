"""make dist: a source tarball of the commit checked out, with its
checksum, that builds with make and says its version."""

import hashlib
import subprocess
import tarfile

from conftest import ROOT

VERSION = (ROOT / "VERSION").read_text().strip()


def test_the_source_tarball_is_whole_checksummed_and_builds(tmp_path):
    out = subprocess.run(["make", "-s", "--no-print-directory", "dist"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    tarball = ROOT / "build" / ("ledgerd-%s.tar.gz" % VERSION)
    digest, name = (tarball.parent / (tarball.name + ".sha256")).read_text().split()
    assert name == tarball.name and digest == hashlib.sha256(tarball.read_bytes()).hexdigest()
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        top = "ledgerd-%s/" % VERSION
        assert all(n == top.rstrip("/") or n.startswith(top) for n in names), names[:5]
        for must in ("LICENSE", "VERSION", "CHANGELOG.md", "Makefile", "README.md",
                     "api/cli/main.c", "sql/001_tool_call_ledger.sql"):
            assert top + must in names, must
        assert not any(n.startswith(top + p) for n in names for p in ("build/", "var/"))
        tar.extractall(tmp_path)
    src = tmp_path / top
    out = subprocess.run(["make", "-s", "-j2", "build/ledgerd", "build/ledgerctl"], cwd=src,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    for program in ("ledgerd", "ledgerctl"):
        said = subprocess.run([str(src / "build" / program), "--version"], capture_output=True,
                              text=True, timeout=10, check=True).stdout
        assert said.split()[:2] == [program, VERSION], said
