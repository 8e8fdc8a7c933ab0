"""What both JavaScript wrappers need before a node test runs: sdk/js
installed at its pinned devDependencies and built, and a test package's
pinned dependencies installed, each once, under one lock (build/js.lock),
since several pytest workers start at once. dist/ is rebuilt only when a
source is newer, so a worker never rewrites it under another one's tests.
"""

import fcntl
import json
import subprocess
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CORE = ROOT / "sdk" / "js"
LOCK = ROOT / "build" / "js.lock"
NPM_CI = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]


@contextmanager
def locked(path=LOCK):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run(cmd, cwd, timeout, env=None):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, "%s failed (%d):\n%s\n%s" % (
        " ".join(map(str, cmd)), done.returncode, done.stdout[-6000:], done.stderr[-6000:])
    return done


def installed_version(package_dir, name):
    try:
        return json.loads((package_dir / "node_modules" / name / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def pinned_versions(package_dir, names=None):
    """The top-level packages of @package_dir's lock file and their versions."""
    lock = json.loads((package_dir / "package-lock.json").read_text())
    return {path[len("node_modules/"):]: entry["version"]
            for path, entry in lock["packages"].items()
            if path.startswith("node_modules/") and "version" in entry
            and "/node_modules/" not in path[len("node_modules/"):]
            and (names is None or path[len("node_modules/"):] in names)}


def needs_install(package_dir, names=None):
    return any(installed_version(package_dir, n) != v
               for n, v in pinned_versions(package_dir, names).items())


def _stale():
    built = [p.stat().st_mtime for p in (CORE / "dist").rglob("*.js")]
    sources = [p.stat().st_mtime for p in (CORE / "src").rglob("*.ts")]
    sources.append((CORE / "tsconfig.json").stat().st_mtime)
    return not built or min(built) < max(sources)


def build_core():
    """sdk/js installed and built (tsc --strict); call under locked()."""
    if needs_install(CORE):
        # --ignore-scripts: the package's prepare script would build before the check below.
        run(NPM_CI + ["--ignore-scripts"], CORE, 300)
    if _stale():
        run([str(CORE / "node_modules" / ".bin" / "tsc"), "-p", "."], CORE, 300)
