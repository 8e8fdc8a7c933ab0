"""Node 18, the oldest Node the TypeScript client claims, without installing it.

The machine's `node` is newer (NodeSource's 20). Debian 12's own nodejs is
18.20, split into nodejs (the launcher) and libnode108 (the engine): both
are downloaded with `apt-get download`, not installed, and unpacked with
`dpkg-deb -x` under build/node18/, once, under a lock of its own
(build/node18.lock), since several pytest workers start at once. The
version taken is the newest 18.x the archive offers (bookworm-security's
once it has one); build/node18/VERSION says which is unpacked, and a newer
one replaces it.

Debian's node keeps some of its built-in modules outside the binary, at
fixed paths under /usr/share/nodejs: undici (fetch), acorn and
cjs-module-lexer. Those come from node-undici, node-acorn and
node-cjs-module-lexer, which scripts/deps.sh installs for `make test`;
they hold only JavaScript and leave the machine's node alone.

`node()` is the path of the binary, `env()` what it runs with (its shared
library on LD_LIBRARY_PATH).
"""

import fcntl
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DIR = ROOT / "build" / "node18"
LOCK = ROOT / "build" / "node18.lock"
PACKAGES = ("nodejs", "libnode108")
# The built-ins Debian's node loads from these paths at start (it aborts without them).
BUILTINS = {
    "node-undici": "/usr/share/nodejs/undici/undici-fetch.js",
    "node-acorn": "/usr/share/nodejs/acorn/dist/acorn.js",
    "node-cjs-module-lexer": "/usr/share/nodejs/cjs-module-lexer/lexer.js",
}
LIB = DIR / "usr" / "lib" / "x86_64-linux-gnu"
BINARY = DIR / "usr" / "bin" / "node"


def _apt(*cmd, cwd=None):
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, "%s failed (%d):\n%s\n%s" % (
        " ".join(cmd), done.returncode, done.stdout[-4000:], done.stderr[-4000:])
    return done.stdout


def _versions():
    return [v for v in (line.split("|")[1].strip()
                        for line in _apt("apt-cache", "madison", "libnode108").splitlines()
                        if "|" in line) if v.startswith("18.")]


def _newest_18():
    """The newest version of libnode108 (Node 18's engine) the archive has."""
    versions = _versions()
    if not versions:
        _apt("apt-get", "update", "-q")
        versions = _versions()
    assert versions, "the Debian archive offers no libnode108 (Node 18): is this Debian 12?"
    best = versions[0]
    for v in versions[1:]:
        if subprocess.run(["dpkg", "--compare-versions", v, "gt", best]).returncode == 0:
            best = v
    return best


def _unpack(version):
    with tempfile.TemporaryDirectory() as tmp:
        want = ["%s=%s" % (p, version) for p in PACKAGES]
        try:
            _apt("apt-get", "download", "-q", *want, cwd=tmp)
        except AssertionError:
            _apt("apt-get", "update", "-q")
            _apt("apt-get", "download", "-q", *want, cwd=tmp)
        subprocess.run(["rm", "-rf", str(DIR)], check=True)
        DIR.mkdir(parents=True)
        for deb in sorted(Path(tmp).glob("*.deb")):
            _apt("dpkg-deb", "-x", str(deb), str(DIR))
    (DIR / "VERSION").write_text(version + "\n")


def env(base=None):
    """@base (a dict) with Node 18's shared library on LD_LIBRARY_PATH."""
    out = dict(base or {})
    out["LD_LIBRARY_PATH"] = ":".join(p for p in (str(LIB), out.get("LD_LIBRARY_PATH")) if p)
    return out


def node():
    """The path of Node 18's binary, fetched and unpacked on first use."""
    missing = [pkg for pkg, path in BUILTINS.items() if not Path(path).exists()]
    assert not missing, ("Debian's node 18 loads built-ins from /usr/share/nodejs; install %s"
                         " (scripts/deps.sh test)" % " ".join(missing))
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            version = _newest_18()
            have = (DIR / "VERSION").read_text().strip() if (DIR / "VERSION").exists() else None
            if have != version or not BINARY.exists():
                _unpack(version)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return BINARY
