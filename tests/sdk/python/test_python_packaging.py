"""sdk/python installs with no package index, as a Debian 12 user installs it.

Each test makes a venv with Debian's /usr/bin/python3 (not whatever
`python3` is first on PATH) and runs its pip with PIP_NO_INDEX=1, no pip
configuration and none of this machine's PIP_* or PYTHON* variables, so
nothing can be fetched and bytecode is written as a user's Python writes
it. The build backend (sdk/python/_backend) needs only the standard
library; the tests check that pip installs the package, the wheel and the
sdist hold what they must, and the source tree is left as it was.
"""

import ast
import base64
import csv
import hashlib
import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "sdk" / "python"
DEBIAN_PYTHON = Path("/usr/bin/python3")


def version_in_tree():
    tree = ast.parse((PACKAGE / "ledger_client" / "_version.py").read_text())
    return next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign))


def offline_env(home):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env.update({"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "HOME": str(home),
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"})
    return env


def run(cmd, env, cwd, timeout=120):
    done = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, "%s failed (%d):\n%s\n%s" % (
        " ".join(map(str, cmd)), done.returncode, done.stdout[-4000:], done.stderr[-4000:])
    return done


def tree_state():
    """What git sees in sdk/python: changes, untracked and ignored files, one by one.

    ledger_client/__pycache__ is left out: another test importing the
    package from the tree may write it at any moment.
    """
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all",
                          "--", "."], cwd=PACKAGE, capture_output=True, text=True, check=True)
    return sorted(line for line in out.stdout.splitlines()
                  if "sdk/python/ledger_client/__pycache__/" not in line)


def make_venv(path, env):
    run([DEBIAN_PYTHON, "-m", "venv", path], env, path.parent)
    return path / "bin" / "python"


@pytest.fixture
def offline(tmp_path):
    if not DEBIAN_PYTHON.exists():
        pytest.fail("no %s: this test is about Debian's Python" % DEBIAN_PYTHON)
    env = offline_env(tmp_path)
    before = tree_state()
    yield tmp_path, env
    assert tree_state() == before, "the build left files in sdk/python"


def test_pip_installs_offline_and_the_package_imports(offline):
    tmp, env = offline
    python = make_venv(tmp / "v", env)
    run([python, "-m", "pip", "install", PACKAGE], env, tmp)
    # From elsewhere than the tree: the venv's own copy answers.
    done = run([python, "-c", "import importlib.metadata as m, ledger_client as c; "
                "from ledger_client import Ledger, stable_tool_call_id; "
                "print(c.__version__, m.version('ledger-client'), c.__file__, "
                "stable_tool_call_id(3))"], env, tmp)
    version, dist_version, where, call_id = done.stdout.split()
    assert version == dist_version == version_in_tree()
    assert Path(where).is_relative_to(tmp / "v"), where
    assert call_id == "call_03"
    files = run([python, "-m", "pip", "show", "-f", "ledger-client"], env, tmp).stdout
    assert "ledger_client/py.typed" in files and "ledger_client/router.py" in files


def test_the_wheel_and_the_sdist_hold_the_package_and_its_metadata(offline):
    tmp, env = offline
    python = make_venv(tmp / "v", env)
    run([python, "-m", "pip", "wheel", "--no-deps", "-w", tmp / "dist", PACKAGE], env, tmp)
    version = version_in_tree()
    wheel = tmp / "dist" / ("ledger_client-%s-py3-none-any.whl" % version)
    modules = sorted(p.relative_to(PACKAGE).as_posix()
                     for p in (PACKAGE / "ledger_client").glob("*.py"))
    dist_info = "ledger_client-%s.dist-info/" % version
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert sorted(n for n in names if not n.startswith(dist_info)) == sorted(
            modules + ["ledger_client/py.typed"])
        for name in modules:
            assert zf.read(name) == (PACKAGE / name).read_bytes(), name
        metadata = zf.read(dist_info + "METADATA").decode()
        assert "Name: ledger-client\n" in metadata
        assert "Version: %s\n" % version in metadata
        assert "Requires-Python: >=3.11\n" in metadata
        assert metadata.split("\n\n", 1)[1] == (PACKAGE / "README.md").read_text()
        assert "Root-Is-Purelib: true" in zf.read(dist_info + "WHEEL").decode()
        # RECORD names every other file with its hash and size, and itself without.
        record = list(csv.reader(io.StringIO(zf.read(dist_info + "RECORD").decode())))
        assert sorted(r[0] for r in record) == sorted(names)
        for name, digest, size in record:
            if name == dist_info + "RECORD":
                assert (digest, size) == ("", "")
                continue
            data = zf.read(name)
            assert digest == "sha256=" + base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode(), name
            assert int(size) == len(data), name

    # The sdist, made as a frontend makes it: the backend's hook, from the tree.
    done = run([python, "-c", "import sys; sys.path.insert(0, '_backend'); "
                "import ledger_client_build as b; print(b.build_sdist(sys.argv[1]))",
                tmp / "dist"], env, PACKAGE)
    sdist = tmp / "dist" / done.stdout.strip()
    assert sdist.name == "ledger_client-%s.tar.gz" % version
    with tarfile.open(sdist) as tar:
        members = sorted(m.name.split("/", 1)[1] for m in tar.getmembers())
    assert members == sorted(["PKG-INFO", "README.md", "pyproject.toml",
                              "_backend/ledger_client_build.py", "ledger_client/py.typed"]
                             + modules)
    # It installs offline too, into a venv of its own.
    other = make_venv(tmp / "w", env)
    run([other, "-m", "pip", "install", sdist], env, tmp)
    done = run([other, "-c", "import ledger_client; print(ledger_client.__version__)"], env, tmp)
    assert done.stdout.strip() == version


def test_builds_are_byte_for_byte_the_same(offline):
    tmp, env = offline
    hashes = []
    for n in range(2):
        out = tmp / str(n)
        out.mkdir()
        run([DEBIAN_PYTHON, "-c", "import sys; sys.path.insert(0, '_backend'); "
             "import ledger_client_build as b; b.build_wheel(sys.argv[1]); "
             "b.build_sdist(sys.argv[1])", out], env, PACKAGE)
        hashes.append(sorted((p.name, hashlib.sha256(p.read_bytes()).hexdigest())
                             for p in out.iterdir()))
    assert len(hashes[0]) == 2
    assert hashes[0] == hashes[1]


def test_editable_install_imports_from_the_tree(offline):
    tmp, env = offline
    python = make_venv(tmp / "v", env)
    run([python, "-m", "pip", "install", "-e", PACKAGE], env, tmp)
    done = run([python, "-c", "import ledger_client; print(ledger_client.__file__)"],
               dict(env, PYTHONDONTWRITEBYTECODE="1"), tmp)
    assert Path(done.stdout.strip()) == PACKAGE / "ledger_client" / "__init__.py"
