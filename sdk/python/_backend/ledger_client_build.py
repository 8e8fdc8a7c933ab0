"""The build backend of ledger-client (PEP 517, PEP 660), standard library only.

pyproject.toml names it with `backend-path`, so `pip install sdk/python`
needs nothing from a package index: a build-system that requires
setuptools makes pip fetch it into an isolated environment, which fails on
a machine without an index, and Python 3.12's venv no longer has
setuptools at all. The package is pure Python; its wheel is a zip of the
package, its metadata and the RECORD of both.

It reads [project] from pyproject.toml and the version from
ledger_client/_version.py. It writes only into the directory the frontend
names: nothing is left in the source tree.
"""

from __future__ import annotations

import ast
import base64
import gzip
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The [project] keys this backend writes into the metadata: any other is
# refused, so pyproject.toml never promises what the wheel does not carry.
KNOWN_KEYS = {"name", "description", "readme", "requires-python", "license", "dependencies",
              "dynamic", "classifiers"}
# Zip and tar entries carry this time (or SOURCE_DATE_EPOCH), so a build is
# byte for byte the same each time: 1980-01-01, the earliest a zip can hold.
DEFAULT_EPOCH = 315532800
# What the sdist holds besides PKG-INFO and the package.
SDIST_FILES = ("pyproject.toml", "README.md", "_backend/ledger_client_build.py")

__all__ = ["build_editable", "build_sdist", "build_wheel", "get_requires_for_build_editable",
           "get_requires_for_build_sdist", "get_requires_for_build_wheel",
           "prepare_metadata_for_build_editable", "prepare_metadata_for_build_wheel"]


class _Project:
    """What pyproject.toml and the package say about the distribution."""

    def __init__(self, root: Path = ROOT) -> None:
        try:
            import tomllib
        except ImportError:  # Python < 3.11: the package itself needs 3.11 too
            raise RuntimeError("ledger-client needs Python 3.11 or later") from None
        self.root = root
        with open(root / "pyproject.toml", "rb") as f:
            project = tomllib.load(f)["project"]
        unknown = sorted(set(project) - KNOWN_KEYS)
        if unknown:
            raise RuntimeError("pyproject.toml: [project] keys this backend does not write: %s"
                               % ", ".join(unknown))
        if project.get("dynamic", []) != ["version"]:
            raise RuntimeError("pyproject.toml: dynamic must be [\"version\"]")
        self.name: str = project["name"]
        self.package = self.name.replace("-", "_")
        self.version = self._version()
        self.project = project
        # The distribution's name in file names (PEP 427, PEP 625).
        self.stem = "%s-%s" % (re.sub(r"[-_.]+", "_", self.name).lower(), self.version)

    def _version(self) -> str:
        source = (self.root / self.package / "_version.py").read_text(encoding="utf-8")
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
                value = ast.literal_eval(node.value)
                if isinstance(value, str):
                    return value
        raise RuntimeError("%s/_version.py sets no __version__ string" % self.package)

    def metadata(self) -> bytes:
        """The core metadata (version 2.1): METADATA in a wheel, PKG-INFO in an sdist."""
        p = self.project
        lines = ["Metadata-Version: 2.1", "Name: " + self.name, "Version: " + self.version]
        if "description" in p:
            lines.append("Summary: " + p["description"])
        if "requires-python" in p:
            lines.append("Requires-Python: " + p["requires-python"])
        if "license" in p:
            if not isinstance(p["license"], str):
                raise RuntimeError("pyproject.toml: license must be an SPDX expression")
            lines.append("License: " + p["license"])
        lines += ["Requires-Dist: " + d for d in p.get("dependencies", [])]
        lines += ["Classifier: " + c for c in p.get("classifiers", [])]
        body = ""
        if "readme" in p:
            if not isinstance(p["readme"], str) or not p["readme"].endswith(".md"):
                raise RuntimeError("pyproject.toml: readme must name a .md file")
            lines.append("Description-Content-Type: text/markdown")
            body = (self.root / p["readme"]).read_text(encoding="utf-8")
        return ("\n".join(lines) + "\n\n" + body).encode("utf-8")

    def package_files(self) -> list[Path]:
        """The package's files, sorted: its modules and py.typed, never bytecode."""
        base = self.root / self.package
        files = [f for f in base.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                 and (f.suffix == ".py" or f.name == "py.typed")]
        return sorted(files, key=lambda f: f.relative_to(self.root).as_posix())

    @property
    def dist_info(self) -> str:
        return self.stem + ".dist-info"


def _epoch() -> int:
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", DEFAULT_EPOCH)), DEFAULT_EPOCH)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _dist_info_files(project: _Project) -> dict[str, bytes]:
    wheel = ("Wheel-Version: 1.0\nGenerator: ledger_client_build\nRoot-Is-Purelib: true\n"
             "Tag: py3-none-any\n")
    return {"METADATA": project.metadata(), "WHEEL": wheel.encode(),
            "top_level.txt": (project.package + "\n").encode()}


def _write_wheel(directory: str, project: _Project, files: dict[str, bytes]) -> str:
    """Writes {archive name: bytes} and the dist-info into a wheel; returns its file name."""
    entries = dict(files)
    for name, data in _dist_info_files(project).items():
        entries["%s/%s" % (project.dist_info, name)] = data
    record_name = "%s/RECORD" % project.dist_info
    record = "".join(_record_line(n, d) + "\n" for n, d in entries.items())
    entries[record_name] = (record + record_name + ",,\n").encode()
    wheel_name = "%s-py3-none-any.whl" % project.stem
    stamp = _zip_time()
    tmp = Path(directory) / (wheel_name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    tmp.replace(Path(directory) / wheel_name)
    return wheel_name


def _zip_time() -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(_epoch())
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


def _write_metadata_dir(directory: str, project: _Project) -> str:
    target = Path(directory) / project.dist_info
    target.mkdir(parents=True, exist_ok=True)
    for name, data in _dist_info_files(project).items():
        (target / name).write_bytes(data)
    return project.dist_info


# --- PEP 517 ------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _write_metadata_dir(metadata_directory, _Project())


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _Project()
    files = {f.relative_to(project.root).as_posix(): f.read_bytes()
             for f in project.package_files()}
    return _write_wheel(wheel_directory, project, files)


def build_sdist(sdist_directory, config_settings=None):
    project = _Project()
    members = [(name, (project.root / name).read_bytes()) for name in SDIST_FILES]
    members += [(f.relative_to(project.root).as_posix(), f.read_bytes())
                for f in project.package_files()]
    members.append(("PKG-INFO", project.metadata()))
    sdist_name = project.stem + ".tar.gz"
    tmp = Path(sdist_directory) / (sdist_name + ".part")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(members):
            info = tarfile.TarInfo("%s/%s" % (project.stem, name))
            info.size = len(data)
            info.mtime = _epoch()
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    with open(tmp, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=_epoch(),
                                                filename="") as gz:
        gz.write(raw.getvalue())
    tmp.replace(Path(sdist_directory) / sdist_name)
    return sdist_name


# --- PEP 660: pip install -e sdk/python ---------------------------------------


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth puts this directory on sys.path: edits apply without reinstalling."""
    project = _Project()
    pth = (str(project.root) + "\n").encode()
    return _write_wheel(wheel_directory, project, {project.package + ".pth": pth})


def _drop_own_bytecode() -> None:
    """Removes the bytecode that importing this module just wrote beside it, so that a
    build leaves the source tree exactly as it found it."""
    cached = getattr(__spec__, "cached", None)
    if not cached:
        return
    try:
        Path(cached).unlink(missing_ok=True)
        Path(cached).parent.rmdir()  # only if nothing else is in it
    except OSError:
        pass


_drop_own_bytecode()
