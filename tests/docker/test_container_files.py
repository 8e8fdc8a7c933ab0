"""docker/Dockerfile and docker/compose.yaml, checked without a container engine.

Nothing is built here: `make image-test` (tests/image) builds the image
with podman and runs it. What can be proven by reading is: the files name
only files that exist and targets that `make all` also builds; packages
come only from scripts/deps.sh, and its runtime list covers every shared
library the programs load; entrypoints and commands are programs the image
holds; the health check asks for /healthz where LEDGER_LISTEN says ledgerd
serves; every variable set is one that ledgerd or the gateway reads; every
service whose program would ignore SIGTERM as PID 1 runs under an init; and
the services that talk share a network and agree on ports. Each check is a
function that returns what is wrong, and each is also shown failing on a
doctored input.

The compose file is read by a small strict reader (below) of the YAML it is
written in; anything outside that subset is an error, so no line is skipped.
"""

import fnmatch
import functools
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
LEDGERD = Path(os.environ.get("LEDGERD", ROOT / "build" / "ledgerd")).resolve()
# The programs the image ships, as `make` builds them (without SANITIZE, as the image does).
PROGRAMS = ("build/ledgerd", "build/ledgerctl", "build/ledger-gateway")
# The programs of the images that stop by themselves on SIGTERM as a container's
# PID 1 (each takes it with sigwait()); make image-test stops both. Any other
# program, Python's above all, ignores SIGTERM there and needs an init.
STOPS_ON_SIGTERM = {"ledgerd", "ledger-gateway"}
# The image's HEALTHCHECK program, and where the image has it.
HEALTHCHECK_SCRIPT = "docker/healthcheck.sh"
# What ledgerd's image gets from debian:bookworm-slim itself, besides RUNTIME_PKGS.
BASE_OWNERS = {"libc6"}
# A sanitizer build also loads the compiler's runtimes, which the image never has.
SANITIZER_OWNERS = re.compile(r"^(lib(a|ub|l|t|hwa)san\d+|libgcc-s1|libstdc\+\+6)$")


def clean_env():
    """Our environment without what would change how make, ledgerd or the gateway behave."""
    drop = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "SANITIZE", "CFLAGS", "CPPFLAGS", "LDFLAGS", "CC")
    return {k: v for k, v in os.environ.items()
            if k not in drop and not k.startswith(("LEDGER_", "GATEWAY_"))}


def run(argv, check=True, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120,
                          env=kw.pop("env", clean_env()), check=check, **kw)


# ---------------------------------------------------------------------------
# The compose file's YAML: block mappings, block lists of scalars, one-line
# flow lists of scalars, double-quoted or plain scalars, comments on lines of
# their own, two spaces an indent level.

class ComposeSyntaxError(ValueError):
    pass


KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*):(?: (.*))?$")
PLAIN = re.compile(r"^[A-Za-z0-9_./:@=+-]+$")
QUOTED = re.compile(r'^"([^"\\]*)"$')


def read_yaml(text):
    """Parses @text; returns dicts, lists and str (true/false: bool, empty: None)."""
    lines = []
    for number, raw in enumerate(text.split("\n"), 1):
        if "\t" in raw:
            raise ComposeSyntaxError("line %d: a tab" % number)
        stripped = raw.strip()
        if stripped == "" or stripped.startswith("#"):
            continue
        if raw != raw.rstrip():
            raise ComposeSyntaxError("line %d: trailing spaces" % number)
        indent = len(raw) - len(raw.lstrip(" "))
        if indent % 2:
            raise ComposeSyntaxError("line %d: indent is not a multiple of 2" % number)
        lines.append((number, indent, stripped))
    if not lines:
        raise ComposeSyntaxError("empty document")
    value, end = _block(lines, 0, 0)
    if end != len(lines):
        raise ComposeSyntaxError("line %d: not read (bad indent)" % lines[end][0])
    return value


def _block(lines, i, indent):
    if lines[i][2].startswith("- ") or lines[i][2] == "-":
        return _list(lines, i, indent)
    return _mapping(lines, i, indent)


def _list(lines, i, indent):
    out = []
    while i < len(lines) and lines[i][1] == indent:
        number, _, text = lines[i]
        if not text.startswith("- "):
            raise ComposeSyntaxError("line %d: a key among list items" % number)
        out.append(_scalar(text[2:], number))
        i += 1
        if i < len(lines) and lines[i][1] > indent:
            raise ComposeSyntaxError("line %d: only scalars may be list items" % lines[i][0])
    return out, i


def _mapping(lines, i, indent):
    out = {}
    while i < len(lines) and lines[i][1] == indent:
        number, _, text = lines[i]
        m = KEY.match(text)
        if m is None:
            raise ComposeSyntaxError("line %d: not `key:` or `key: value`: %s" % (number, text))
        key, rest = m.group(1), m.group(2)
        if key in out:
            raise ComposeSyntaxError("line %d: %s given twice" % (number, key))
        i += 1
        if rest is None:
            if i < len(lines) and lines[i][1] > indent:
                if lines[i][1] != indent + 2:
                    raise ComposeSyntaxError("line %d: indent by 2" % lines[i][0])
                out[key], i = _block(lines, i, indent + 2)
            else:
                out[key] = None
        else:
            out[key] = _flow_or_scalar(rest, number)
            if i < len(lines) and lines[i][1] > indent:
                raise ComposeSyntaxError("line %d: indented under a value" % lines[i][0])
    return out, i


def _flow_or_scalar(text, number):
    if not text.startswith("["):
        return _scalar(text, number)
    if not text.endswith("]"):
        raise ComposeSyntaxError("line %d: a flow list on one line only" % number)
    inner = text[1:-1]
    if inner.strip() == "":
        return []
    # Items are quoted without commas inside, or plain (which has none).
    items = re.findall(r'\s*("[^"\\]*"|[^,"\s]+)\s*(,|$)', inner)
    if ", ".join(item for item, _ in items) != inner.strip():
        raise ComposeSyntaxError("line %d: a flow list of scalars, comma and space apart"
                                 % number)
    return [_scalar(item, number) for item, _ in items]


def _scalar(text, number):
    m = QUOTED.match(text)
    if m is not None:
        return m.group(1)
    if not PLAIN.match(text) or text.endswith(":"):
        raise ComposeSyntaxError("line %d: quote this scalar (or drop the comment): %s"
                                 % (number, text))
    return {"true": True, "false": False}.get(text, text)


@functools.lru_cache(maxsize=None)
def compose():
    return read_yaml((DOCKER / "compose.yaml").read_text())


# ---------------------------------------------------------------------------
# The Dockerfile: instructions by stage.

def read_dockerfile(text):
    """Returns a list of stages: {"name", "base", "workdir", "ins": [(INSTR, args)]}."""
    stages = []
    joined = re.sub(r"\\\n(?:[ \t]*#[^\n]*\n)*", " ", text)
    for line in joined.split("\n"):
        line = line.strip()
        if line == "" or line.startswith("#"):
            continue
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        args = re.sub(r"\s+", " ", args.strip())
        if instr == "FROM":
            m = re.match(r"^(\S+)(?: AS (\S+))?$", args, re.IGNORECASE)
            assert m, "FROM %s" % args
            stages.append({"name": m.group(2), "base": m.group(1), "workdir": "/", "ins": []})
            continue
        assert stages, "%s before FROM" % instr
        if instr == "WORKDIR":
            stages[-1]["workdir"] = str(PurePosixPath(stages[-1]["workdir"]) / args)
        stages[-1]["ins"].append((instr, args))
    return stages


@functools.lru_cache(maxsize=None)
def dockerfile():
    return read_dockerfile((DOCKER / "Dockerfile").read_text())


def stage(stages, name):
    for s in stages:
        if s["name"] == name:
            return s
    raise AssertionError("no stage %s" % name)


def copies(st):
    """(flags, sources, dest) of every COPY/ADD of a stage."""
    out = []
    for instr, args in st["ins"]:
        if instr in ("COPY", "ADD"):
            words = shlex.split(args)
            flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
            rest = [w for w in words if not w.startswith("--")]
            out.append((flags, rest[:-1], rest[-1]))
    return out


def exec_form(args):
    """["a", "b"] of ENTRYPOINT/CMD, or None for the shell form."""
    m = re.match(r'^\[(.*)\]$', args)
    return re.findall(r'"([^"]*)"', m.group(1)) if m else None


def image_files(st):
    """Absolute paths the stage's COPYs from the build context put in the image."""
    files = set()
    for flags, sources, dest in copies(st):
        if "from" in flags:
            continue
        dest_abs = PurePosixPath(st["workdir"]) / dest
        for src in sources:
            path = ROOT / src
            if path.is_dir():
                for f in path.rglob("*"):
                    if f.is_file() and "__pycache__" not in f.parts:
                        files.add(str(dest_abs / f.relative_to(path)))
            elif dest.endswith("/"):
                files.add(str(dest_abs / path.name))
            else:
                files.add(str(dest_abs))
    return files


def run_commands(st):
    return [args for instr, args in st["ins"] if instr == "RUN"]


# ---------------------------------------------------------------------------
# The facts the checks compare against.

@functools.lru_cache(maxsize=None)
def deps_mode(mode):
    """The packages scripts/deps.sh MODE wants, asked of the script itself.

    A dpkg-query that says every package is installed records each name it
    is asked about, so the script exits without installing anything.
    """
    with tempfile.TemporaryDirectory(prefix="ledgerd-deps-") as folder:
        stand_in, asked = Path(folder) / "dpkg-query", Path(folder) / "asked"
        asked.write_text("")
        stand_in.write_text('#!/bin/sh\nfor a; do p=$a; done\necho "$p" >> "%s"\n'
                        'echo "install ok installed"\n' % asked)
        stand_in.chmod(0o755)
        env = dict(clean_env(), PATH="%s:%s" % (folder, os.environ["PATH"]))
        run(["bash", ROOT / "scripts" / "deps.sh", mode], env=env)
        return tuple(asked.read_text().split())


@functools.lru_cache(maxsize=None)
def ledgerd_help():
    return run([LEDGERD, "help"]).stdout


def ledgerd_variables():
    return set(re.findall(r"\b(LEDGER_[A-Z0-9_]+)\b", ledgerd_help()))


def ledgerd_commands():
    """The commands of `usage: ledgerd [serve | migrate | token create ... [...] | ...]`."""
    text = ledgerd_help()
    start = text.index("usage: ledgerd [") + len("usage: ledgerd [")
    depth, parts, word = 0, [], ""
    for c in text[start:]:
        if c == "]" and depth == 0:
            break
        depth += {"[": 1, "]": -1}.get(c, 0)
        if c == "|" and depth == 0:
            parts.append(word)
            word = ""
        else:
            word += c
    # "token create --tenant T ..." is the command "token create".
    return {" ".join(re.match(r"^([a-z ]*)", part.strip()).group(1).split())
            for part in parts + [word]}


def is_command(argv, commands):
    return any(argv[:len(c.split())] == c.split() for c in commands)


def gateway_variables():
    """What ledger-gateway reads: its settings table's variables (config.c names each
    as a whole string literal) and any getenv() of its own."""
    src = "".join(p.read_text() for p in sorted((ROOT / "sdk" / "programs" / "ledger-gateway").glob("*.c")))
    return (set(re.findall(r'getenv\("([A-Z0-9_]+)"\)', src))
            | set(re.findall(r'"((?:GATEWAY|LEDGER)_[A-Z0-9_]+)"', src)))


def make_outputs(targets):
    """The files `make -n -B TARGETS` would write with -o (nothing is built)."""
    out = run(["make", "-C", ROOT, "-n", "-B", "SANITIZE="] + list(targets)).stdout
    return set(re.findall(r"(?:^|\s)-o\s+(\S+)", out)), out


@functools.lru_cache(maxsize=None)
def installed_packages():
    """{package: (first alternative of each Depends and Pre-Depends)}, and {virtual: package}."""
    out = run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Depends}\t${Pre-Depends}\t"
               "${Provides}\n"]).stdout
    deps, provides = {}, {}
    for line in out.splitlines():
        name, status, depends, pre, prov = line.split("\t")
        if not status.endswith(" installed"):
            continue
        deps[name] = tuple(re.split(r"[\s(:]", alt.split("|")[0].strip())[0]
                           for alt in (depends + "," + pre).split(",") if alt.strip())
        for p in prov.split(","):
            if p.strip():
                provides.setdefault(re.split(r"[\s(:]", p.strip())[0], name)
    return deps, provides


def closure(packages):
    """The packages apt installs for @packages: themselves and what they depend on."""
    deps, provides = installed_packages()
    seen, pending = set(), list(packages)
    while pending:
        p = pending.pop()
        p = p if p in deps else provides.get(p, p)
        if p in seen:
            continue
        seen.add(p)
        pending.extend(deps.get(p, ()))
    return seen


def shared_libraries(binary):
    """The paths of the shared libraries `ldd` says @binary loads."""
    out = run(["ldd", binary]).stdout
    missing = [line.strip() for line in out.splitlines() if "not found" in line]
    assert not missing, "%s: %s" % (binary, missing)
    return set(re.findall(r"=>\s+(/\S+)", out))


def owners(paths):
    """{path: {packages}} as dpkg -S tells (through /usr and symlinks: usrmerge)."""
    candidates = {}
    for p in paths:
        real = os.path.realpath(p)
        candidates[p] = [p, "/usr" + p if p.startswith("/lib") else p, real,
                         "/usr" + real if real.startswith("/lib") else real]
    asked = sorted({c for cs in candidates.values() for c in cs})
    out = run(["dpkg", "-S"] + asked, check=False).stdout
    found = {}
    for line in out.splitlines():
        if line.startswith("diversion ") or ": " not in line:
            continue
        pkgs, path = line.split(": ", 1)
        found.setdefault(path, set()).update(p.split(":")[0] for p in pkgs.split(", "))
    return {p: set().union(*(found.get(c, set()) for c in cs)) for p, cs in candidates.items()}


# ---------------------------------------------------------------------------
# The checks: each returns a list of what is wrong.

def check_copy_sources(stages, made):
    """Every COPY source is in the context (and not ignored), or made by an earlier stage."""
    problems, names = [], []
    for st in stages:
        for flags, sources, _ in copies(st):
            for src in sources:
                if "from" in flags:
                    if flags["from"] not in names:
                        problems.append("COPY --from=%s: no earlier stage" % flags["from"])
                        continue
                    work = PurePosixPath(stage(stages, flags["from"])["workdir"])
                    rel = str(PurePosixPath(src).relative_to(work)) \
                        if PurePosixPath(src).is_relative_to(work) else src
                    if rel not in made.get(flags["from"], ()):
                        problems.append("COPY --from=%s %s: not made there" % (flags["from"], src))
                elif not (ROOT / src).exists():
                    problems.append("COPY %s: no such file" % src)
                elif ignored(src):
                    problems.append("COPY %s: excluded by Dockerfile.dockerignore" % src)
        names.append(st["name"])
    return problems


def ignored(path, rules=None):
    """Whether docker/Dockerfile.dockerignore leaves @path out of the context."""
    if rules is None:
        rules = [line.strip() for line in
                 (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
                 if line.strip() and not line.startswith("#")]
    parts = PurePosixPath(path.rstrip("/")).parts
    verdict = False
    for rule in rules:
        keep = rule.startswith("!")
        pattern = rule.lstrip("!").rstrip("/")
        for n in range(1, len(parts) + 1):
            prefix = "/".join(parts[:n])
            if pattern.startswith("**/"):
                hit = fnmatch.fnmatchcase(parts[n - 1], pattern[3:])
            else:
                hit = (prefix.count("/") == pattern.count("/")
                       and fnmatch.fnmatchcase(prefix, pattern))
            if hit:
                verdict = not keep
                break
    return verdict


def check_packages(stages, build_stage, final_stage):
    """Packages only through scripts/deps.sh: `build` in the build stage, `runtime` in the final."""
    problems = []
    installer = re.compile(r"\b(apt-get|apt|aptitude)\s+(\S+\s+)*install\b|\bdpkg\s+-i\b|"
                           r"\bpip3?\s+install\b")
    for st in stages:
        for cmd in run_commands(st):
            if installer.search(cmd):
                problems.append("stage %s installs outside deps.sh: %s" % (st["name"], cmd))
    for st, mode in ((build_stage, "build"), (final_stage, "runtime")):
        script = [dest for _, srcs, dest in copies(st) if srcs == ["scripts/deps.sh"]]
        ran = [cmd for cmd in run_commands(st)
               if any(re.search(r"(^|[\s;&|])%s %s($|[\s;&|])" % (re.escape(s), mode), cmd)
                      for s in script)]
        if not ran:
            problems.append("stage %s does not run scripts/deps.sh %s" % (st["name"], mode))
        if st["base"] != "debian:bookworm-slim":
            problems.append("stage %s is not on debian:bookworm-slim" % st["name"])
    return problems


def make_targets(build_stage):
    """The targets of the build stage's `make` (None: no make)."""
    for cmd in run_commands(build_stage):
        words = shlex.split(cmd)
        if words and words[0] == "make":
            return [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return None


def check_runtime_libraries(libraries_by_owner, runtime, exempt=BASE_OWNERS):
    """Every library's package is in RUNTIME_PKGS' closure (libc6's come with the base)."""
    have = closure(runtime)
    return ["%s (%s) is not in RUNTIME_PKGS or what they depend on" % (lib, "/".join(sorted(pkgs))
                                                                    or "no package")
            for lib, pkgs in sorted(libraries_by_owner.items())
            if not pkgs & exempt and not pkgs & have]


def images(doc, stages):
    """{image name: Dockerfile stage} of the images the compose file builds."""
    out = {}
    for svc in doc["services"].values():
        if isinstance(svc.get("build"), dict):
            out[svc["image"]] = stage(stages, svc["build"]["target"])
    return out


def check_compose_files(doc):
    problems = []
    for name, svc in doc["services"].items():
        build = svc.get("build")
        if build is not None:
            context = (DOCKER / build["context"]).resolve()
            if not context.is_dir():
                problems.append("%s: no build context %s" % (name, context))
            elif not (context / build["dockerfile"]).is_file():
                problems.append("%s: no Dockerfile %s" % (name, build["dockerfile"]))
        for volume in svc.get("volumes") or []:
            source = volume.split(":")[0]
            if source.startswith((".", "/", "~")):
                if not (DOCKER / source).exists():
                    problems.append("%s: no such host path %s" % (name, source))
            elif source not in (doc.get("volumes") or {}):
                problems.append("%s: volume %s is not declared" % (name, source))
    return problems


def check_environment(doc, stages, ledgerd_vars, gateway_vars):
    """Every variable set for a ledgerd or gateway container is one that program reads."""
    problems = []
    by_image = images(doc, stages)
    final = stages[-1]
    for name, svc in doc["services"].items():
        st = by_image.get(svc.get("image"))
        if st is not final:
            continue
        entry = svc.get("entrypoint") or exec_form(dict(final["ins"])["ENTRYPOINT"])
        command = svc.get("command") or []
        if entry == ["ledger-gateway"]:
            known = gateway_vars
        else:
            known = ledgerd_vars | {command[i + 1] for i, w in enumerate(command[:-1])
                                    if w == "--from-env"}
        env = svc.get("environment") or {}
        for var in env:
            if var not in known:
                problems.append("%s sets %s, which %s does not read" % (name, var, entry[0]))
        if entry == ["ledger-gateway"]:
            # Its defaults: no ledger, no replica, and a loopback address.
            required = {"GATEWAY_LISTEN", "LEDGER_URL", "LEDGER_TOKEN", "GATEWAY_REPLICAS"}
        else:
            required = {"LEDGER_DATABASE_URL"} | (known - ledgerd_vars)
        for var in sorted(required - set(env)):
            problems.append("%s does not set %s" % (name, var))
    for instr, args in final["ins"]:
        if instr == "ENV":
            var = args.split("=", 1)[0]
            if var not in ledgerd_vars:
                problems.append("the image sets %s, which ledgerd does not read" % var)
    return problems


def check_interpolation(text, readme):
    """Every ${VAR} is required (:?) and documented; no other $ form."""
    problems = []
    body = "\n".join(line for line in text.splitlines() if not line.strip().startswith("#"))
    for m in re.finditer(r"\$(\{[^}]*\}|.?)", body):
        ref = re.match(r"^\{([A-Za-z_][A-Za-z0-9_]*):\?[^}]+\}$", m.group(1))
        if ref is None:
            problems.append("%s: use ${VAR:?message}" % m.group(0))
        elif "`%s`" % ref.group(1) not in readme:
            problems.append("%s is not documented in docker/README.md" % ref.group(1))
    return problems


def image_programs(final):
    """The names of the programs on the final image's PATH that the project puts there."""
    binaries = {PurePosixPath(dest).name if not dest.endswith("/") else PurePosixPath(s).name
                for _, srcs, dest in copies(final) if dest.startswith("/usr/local/bin")
                for s in srcs}
    if "curl" in deps_mode("runtime"):
        binaries.add("curl")
    return binaries


def check_programs(doc, stages, commands):
    """Entrypoints and commands are programs and files the images hold."""
    problems = []
    final = stages[-1]
    binaries = image_programs(final)
    ins = dict(final["ins"])
    if exec_form(ins["ENTRYPOINT"])[0] not in binaries:
        problems.append("ENTRYPOINT %s is not in the image" % ins["ENTRYPOINT"])
    if not is_command(exec_form(ins["CMD"]), commands):
        problems.append("CMD %s is not a ledgerd command" % ins["CMD"])
    by_image = images(doc, stages)
    for name, svc in doc["services"].items():
        image = svc.get("image", "")
        if svc.get("pull_policy") == "never" and image not in by_image:
            problems.append("%s: pull_policy never, but no service builds %s" % (name, image))
        st = by_image.get(image)
        if st is None:
            continue
        entry = svc.get("entrypoint") or exec_form(dict(st["ins"])["ENTRYPOINT"])
        command = svc.get("command") or []
        if st is final:
            if entry[0] not in binaries:
                problems.append("%s: entrypoint %s is not in the image" % (name, entry[0]))
            elif entry == ["ledgerd"] and not is_command(command, commands):
                problems.append("%s: %s is not a ledgerd command" % (name, command[:2]))
            elif entry != ["ledgerd"] and command:
                problems.append("%s: %s takes its settings from the environment" %
                                (name, entry[0]))
        else:
            if entry[0] == "python3" and not st["base"].startswith("python:3"):
                problems.append("%s: python3 on %s" % (name, st["base"]))
            files = image_files(st)
            for word in entry[1:] + command[:1]:
                path = str(PurePosixPath(st["workdir"]) / word)
                if path not in files:
                    problems.append("%s: %s is not in the image" % (name, path))
        test = (svc.get("healthcheck") or {}).get("test")
        if test and test[0] == "CMD" and st is final and test[1] not in binaries:
            problems.append("%s: healthcheck runs %s, not in the image" % (name, test[1]))
    return problems


def check_fake_imports(st):
    """Every module a Python script of the stage imports is stdlib or in the image."""
    problems = []
    files = image_files(st)
    for path in sorted(f for f in files if f.endswith(".py")):
        source = (ROOT / PurePosixPath(path).relative_to(st["workdir"])).read_text()
        for mod in re.findall(r"^(?:from|import) ([A-Za-z_][A-Za-z0-9_]*)", source, re.M):
            if mod in sys.stdlib_module_names:
                continue
            here = PurePosixPath(path).parent
            places = [here / (mod + ".py"), PurePosixPath(st["workdir"]) / "sdk" / "python" /
                      mod / "__init__.py"]
            if not any(str(p) in files for p in places):
                problems.append("%s imports %s, which the image lacks" % (path, mod))
    return problems


def listen_port(stages):
    env = dict(args.split("=", 1) for instr, args in stages[-1]["ins"] if instr == "ENV")
    return env["LEDGER_LISTEN"].rsplit(":", 1)


def healthcheck_argv(final):
    """The exec-form command of the stage's HEALTHCHECK (None: none, or the shell form)."""
    m = re.match(r"^(?:--\S+ )*CMD (\[.*\])$", dict(final["ins"]).get("HEALTHCHECK", ""))
    return exec_form(m.group(1)) if m else None


def check_healthcheck(stages):
    """The HEALTHCHECK runs docker/healthcheck.sh, and EXPOSE is the image's listen port."""
    problems = []
    host, port = listen_port(stages)
    final = stages[-1]
    ins = dict(final["ins"])
    if host not in ("0.0.0.0", "127.0.0.1"):
        problems.append("LEDGER_LISTEN=%s:%s is not reachable on loopback" % (host, port))
    installed = {PurePosixPath(dest).name for _, srcs, dest in copies(final)
                 if srcs == [HEALTHCHECK_SCRIPT] and dest.startswith("/usr/local/bin/")}
    argv = healthcheck_argv(final)
    if argv is None or len(argv) != 1 or argv[0] not in installed:
        problems.append("HEALTHCHECK is not CMD [\"NAME\"] of %s copied to /usr/local/bin/NAME: %s"
                        % (HEALTHCHECK_SCRIPT, ins.get("HEALTHCHECK")))
    if ins.get("EXPOSE") != port:
        problems.append("EXPOSE %s, LEDGER_LISTEN port %s" % (ins.get("EXPOSE"), port))
    return problems


def healthcheck_run(script, listen, curl_exit=0):
    """Runs @script with LEDGER_LISTEN=@listen (None: unset) and a stand-in curl.

    Returns (exit status, the arguments curl was given or None when it was not run).
    """
    with tempfile.TemporaryDirectory(prefix="ledgerd-health-") as folder:
        asked = Path(folder) / "asked"
        stand_in = Path(folder) / "curl"
        stand_in.write_text('#!/bin/sh\nprintf "%%s\\n" "$@" > "%s"\nexit %d\n'
                            % (asked, curl_exit))
        stand_in.chmod(0o755)
        env = dict(clean_env(), PATH="%s:%s" % (folder, os.environ["PATH"]))
        if listen is not None:
            env["LEDGER_LISTEN"] = listen
        # dash, the image's /bin/sh, where there is one: it is what runs the script there.
        shell = "dash" if Path("/bin/dash").exists() else "sh"
        done = run([shell, script], check=False, env=env)
        return done.returncode, asked.read_text().split("\n")[:-1] if asked.exists() else None


def healthz(url):
    return ["-fsS", "-o", "/dev/null", "--max-time", "2", url]


# LEDGER_LISTEN (None: unset), and what the health check asks curl, or None
# when it must say unhealthy without asking.
HEALTHCHECK_ROWS = [
    (None, healthz("http://127.0.0.1:8080/healthz")),
    ("0.0.0.0:8080", healthz("http://127.0.0.1:8080/healthz")),
    ("0.0.0.0:9000", healthz("http://127.0.0.1:9000/healthz")),
    ("127.0.0.1:9000", healthz("http://127.0.0.1:9000/healthz")),
    (":9001", healthz("http://127.0.0.1:9001/healthz")),
    ("ledgerd.internal:9002", healthz("http://ledgerd.internal:9002/healthz")),
    ("[::]:9003", healthz("http://[::1]:9003/healthz")),
    ("[::1]:9004", healthz("http://[::1]:9004/healthz")),
    ("unix:/run/ledgerd/http.sock",
     ["-fsS", "-o", "/dev/null", "--max-time", "2", "--unix-socket", "/run/ledgerd/http.sock",
      "http://localhost/healthz"]),
    ("unix:", None),
    ("9000", None),
    ("0.0.0.0:", None),
    ("[::1]", None),
    ("0.0.0.0:http", None),
]


def check_healthcheck_script(script):
    """Each row of HEALTHCHECK_ROWS: the URL asked, exit 0 when curl succeeds, 1 when not."""
    problems = []
    for listen, expected in HEALTHCHECK_ROWS:
        status, asked = healthcheck_run(script, listen)
        if asked != expected or status != (0 if expected else 1):
            problems.append("LEDGER_LISTEN=%s: exit %d, curl %s; expected curl %s" %
                            (listen, status, asked, expected))
        if expected is not None:
            status, _ = healthcheck_run(script, listen, curl_exit=22)
            if status != 1:
                problems.append("LEDGER_LISTEN=%s: exit %d when curl fails, not 1" %
                                (listen, status))
    return problems


def check_init(doc, stages):
    """Every service of the project's images whose program ignores SIGTERM as PID 1 has an init."""
    problems = []
    by_image = images(doc, stages)
    for name, svc in doc["services"].items():
        st = by_image.get(svc.get("image"))
        if st is None:
            continue
        entry = svc.get("entrypoint") or exec_form(dict(st["ins"])["ENTRYPOINT"])
        if entry[0] not in STOPS_ON_SIGTERM and svc.get("init") is not True:
            problems.append("%s runs %s as PID 1, which ignores SIGTERM there: set init: true"
                            % (name, entry[0]))
    return problems


def service_ports(doc, stages):
    """{service: port it listens on}, from its settings."""
    ports = {"postgres": "5432"}
    for name, svc in doc["services"].items():
        env = svc.get("environment") or {}
        command = svc.get("command") or []
        if "GATEWAY_LISTEN" in env:
            ports[name] = env["GATEWAY_LISTEN"].rsplit(":", 1)[1]
        elif "--port" in command:
            ports[name] = command[command.index("--port") + 1]
        elif command[:1] == ["serve"]:
            ports[name] = env.get("LEDGER_LISTEN", ":".join(listen_port(stages))).rsplit(":")[-1]
    return ports


def check_wiring(doc, stages):
    """Every host:port a service is given is a service on a shared network, on its port."""
    problems = []
    services = doc["services"]
    ports = service_ports(doc, stages)
    declared = doc.get("networks") or {}
    for name, svc in services.items():
        for net in svc.get("networks") or []:
            if net not in declared:
                problems.append("%s: network %s is not declared" % (name, net))
        for dep in svc.get("depends_on") or {}:
            if dep not in services:
                problems.append("%s depends on %s, no such service" % (name, dep))
        words = list((svc.get("environment") or {}).values()) + (svc.get("command") or [])
        for word in words:
            for host, port in re.findall(r"[@/]([a-z][a-z0-9-]*):(\d+)", str(word)):
                if host not in services:
                    problems.append("%s: %s is no service" % (name, host))
                elif not set(svc.get("networks") or []) & set(services[host].get("networks")
                                                              or []):
                    problems.append("%s and %s share no network" % (name, host))
                elif ports.get(host) != port:
                    problems.append("%s: %s:%s, but %s listens on %s" %
                                    (name, host, port, host, ports.get(host)))
    # One router token: the one `tokens` stores is the gateway's and the replica's.
    tokens = services["tokens"]
    var = tokens["command"][tokens["command"].index("--from-env") + 1]
    stored = tokens["environment"].get(var)
    replica = services["replica"]["command"]
    for who, used in (("gateway", services["gateway"]["environment"].get("LEDGER_TOKEN")),
                      ("replica", replica[replica.index("--ledger-token") + 1])):
        if used != stored:
            problems.append("%s uses the token %s, tokens stores %s" % (who, used, stored))
    test = (services["gateway"].get("healthcheck") or {}).get("test") or []
    if not any(w.endswith(":%s/healthz" % ports["gateway"]) for w in test):
        problems.append("gateway: its healthcheck does not hit its own port")
    return problems


# ---------------------------------------------------------------------------
# The tests, on the real files.

def build_and_final(stages):
    return stage(stages, "build"), stages[-1]


def made_by_build_stage(stages):
    targets = make_targets(stage(stages, "build"))
    outputs, _ = make_outputs(targets)
    return {"build": {t for t in targets if t in outputs}}


def test_copy_sources_exist_or_are_made_by_the_build_stage():
    stages = dockerfile()
    assert check_copy_sources(stages, made_by_build_stage(stages)) == []


def test_build_stage_makes_exactly_the_copied_programs_which_make_all_also_builds():
    stages = dockerfile()
    targets = make_targets(stage(stages, "build"))
    copied = {str(PurePosixPath(s).relative_to(stage(stages, "build")["workdir"]))
              for flags, srcs, _ in copies(stages[-1]) if flags.get("from") == "build"
              for s in srcs}
    assert sorted(targets) == sorted(copied) == sorted(PROGRAMS)
    outputs, text = make_outputs(targets)
    assert set(targets) <= outputs
    # cmocka is a test package: the image's build must not need it.
    assert "cmocka" not in text
    all_outputs, _ = make_outputs(["all"])
    assert set(targets) <= all_outputs


def read_by_build(text):
    """The top-level entries of the tree that the commands of @text name."""
    names = set()
    for word in re.findall(r"[\w./-]+", text):
        top = word.split("/")[0]
        if top and "/" in word and (ROOT / word).exists() and top != "build":
            names.add(top)
    return names


def test_build_stage_copies_every_tree_its_make_reads():
    """A tree the programs are made from (sql/ and ui/ are built into ledgerd)
    must be in the stage: make would fail there on a file it never got."""
    build = stage(dockerfile(), "build")
    copied = {src.rstrip("/").split("/")[0] for flags, srcs, _ in copies(build)
              if "from" not in flags for src in srcs}
    _, text = make_outputs(make_targets(build))
    assert {"api", "ledger", "sql", "ui"} <= read_by_build(text)
    assert read_by_build(text) - copied == set()


def test_packages_come_only_from_deps_sh():
    stages = dockerfile()
    assert check_packages(stages, *build_and_final(stages)) == []


def test_build_packages_provide_every_pkg_config_module_the_programs_use():
    _, text = make_outputs(PROGRAMS)
    makefile = (ROOT / "Makefile").read_text()
    modules = set(re.search(r"^PKGS\s*:=(.*)$", makefile, re.M).group(1).split())
    modules |= {m for group in re.findall(r"pkg-config --(?:cflags|libs) ([a-z0-9_. -]+)\)",
                                          makefile) for m in group.split()}
    modules -= {"cmocka", "ledger_client"}  # a test package; the SDK's own file
    pcs = {m: run(["pkg-config", "--path", m]).stdout.strip() for m in sorted(modules)}
    have = closure(deps_mode("build"))
    missing = {m: pkgs for m, pkgs in ((m, owners([pc])[pc]) for m, pc in pcs.items())
               if not pkgs & have}
    assert missing == {}
    assert "-lmicrohttpd" not in text and "-ljansson" in text and "-lpq" in text


def test_build_packages_provide_every_header_the_programs_include():
    """Every system header the image's programs include comes from a package
    the build stage installs (or one of their dependencies): no header
    arrives only as the recommendation or the dependency of something the
    build no longer asks for (libc6-dev came with libmicrohttpd-dev)."""
    names = set()
    for folder in ("api", "ledger", "sdk/c", "sdk/programs"):
        for src in (ROOT / folder).rglob("*.[ch]"):
            names |= set(re.findall(r"^\s*#\s*include\s*<([^>]+)>", src.read_text(), re.M))
    names.discard("ledger_client.h")  # the SDK's own
    flags = run(["pkg-config", "--cflags", "libpq", "libcrypto", "libssl", "yaml-0.1",
                 "libcurl", "jansson"]).stdout.split()
    source = "".join("#include <%s>\n" % n for n in sorted(names))
    out = run(["cc", "-M", "-D_GNU_SOURCE", "-x", "c", "-"] + flags, input=source).stdout
    headers = {p for p in out.replace("\\\n", " ").split()[1:] if p.startswith("/")}
    have = closure(deps_mode("build"))
    missing = {h: sorted(pkgs) for h, pkgs in owners(headers).items() if not pkgs & have}
    assert missing == {}


def test_runtime_packages_cover_every_shared_library_of_the_programs():
    folder = LEDGERD.parent
    sanitized = folder.name == "sanitize"
    binaries = [folder / PurePosixPath(p).name for p in PROGRAMS]
    for b in binaries:
        assert b.exists(), "%s is missing: run make all first" % b
    libs = set().union(*(shared_libraries(b) for b in binaries))
    by_owner = owners(libs)
    if sanitized:
        by_owner = {lib: pkgs for lib, pkgs in by_owner.items()
                    if not any(SANITIZER_OWNERS.match(p) for p in pkgs)}
    assert len(by_owner) >= 6
    runtime = deps_mode("runtime")
    assert check_runtime_libraries(by_owner, runtime) == []
    # The names are Debian 12's: each is a package installed on this Debian 12 machine.
    deps, _ = installed_packages()
    assert [p for p in runtime if p not in deps] == []
    assert [p for p in runtime if p.endswith("-dev")] == []


def test_compose_builds_and_mounts_only_what_exists():
    assert check_compose_files(compose()) == []


def test_every_variable_set_is_one_the_program_reads():
    assert check_environment(compose(), dockerfile(), ledgerd_variables(),
                             gateway_variables()) == []


def test_every_interpolated_variable_is_required_and_documented():
    assert check_interpolation((DOCKER / "compose.yaml").read_text(),
                               (DOCKER / "README.md").read_text()) == []


def test_entrypoints_and_commands_are_in_the_images():
    stages = dockerfile()
    assert check_programs(compose(), stages, ledgerd_commands()) == []
    assert check_fake_imports(stage(stages, "fakes")) == []


def test_healthcheck_is_the_script_and_the_listen_port_is_exposed():
    assert check_healthcheck(dockerfile()) == []


def test_healthcheck_asks_for_healthz_where_ledger_listen_says():
    assert check_healthcheck_script(ROOT / HEALTHCHECK_SCRIPT) == []
    # With the image's own LEDGER_LISTEN, on the port it exposes.
    host, port = listen_port(dockerfile())
    _, asked = healthcheck_run(ROOT / HEALTHCHECK_SCRIPT, "%s:%s" % (host, port))
    assert asked[-1] == "http://127.0.0.1:%s/healthz" % port


def test_services_that_would_ignore_sigterm_run_under_an_init():
    assert check_init(compose(), dockerfile()) == []


def test_services_that_talk_share_a_network_and_agree_on_ports():
    assert check_wiring(compose(), dockerfile()) == []


def test_the_image_runs_as_a_user_it_creates():
    final = dockerfile()[-1]
    user = dict(final["ins"])["USER"].split(":")[0]
    made = re.findall(r"useradd .*--uid (\d+)", " ".join(run_commands(final)))
    assert user not in ("0", "root") and user in made


# ---------------------------------------------------------------------------
# Each check fails on a doctored input.

def test_the_yaml_reader_refuses_what_it_does_not_understand():
    for text in ("a: b # comment\n", "a:\n   b: c\n", "a: &x b\n", "a: ${X}\n",
                 "a:\n  - b: c\n", "a: b\na: c\n", "a:\n\tb: c\n", "a: [b, \"c]\n",
                 "a: b\n  c: d\n", "a: 'b'\n"):
        with pytest.raises(ComposeSyntaxError):
            read_yaml(text)
    assert read_yaml('a:\n  b: "x y"\n  c: [d, "e f"]\n  l:\n    - g\n  n:\nz: true\n') == \
        {"a": {"b": "x y", "c": ["d", "e f"], "l": ["g"], "n": None}, "z": True}


def test_the_checks_catch_doctored_files():
    good = (DOCKER / "Dockerfile").read_text()
    bad = read_dockerfile(good.replace("COPY sql/ sql/", "COPY sqls/ sql/")
                          .replace("/src/build/ledger-gateway", "/src/build/gateway2")
                          .replace("deps.sh runtime", "deps.sh run")
                          .replace("COPY Makefile", "RUN apt-get install -y gcc\nCOPY Makefile")
                          .replace('CMD ["ledgerd-healthcheck"]',
                                   "CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1")
                          .replace('ENTRYPOINT ["ledgerd"]', 'ENTRYPOINT ["ledgerd2"]'))
    problems = check_copy_sources(bad, made_by_build_stage(bad))
    assert any("sqls/" in p for p in problems) and any("gateway2" in p for p in problems)
    problems = check_packages(bad, *build_and_final(bad))
    assert any("outside deps.sh" in p for p in problems)
    assert any("deps.sh runtime" in p for p in problems)
    assert any("HEALTHCHECK" in p for p in check_healthcheck(bad))
    assert any("EXPOSE" in p for p in check_healthcheck(
        read_dockerfile(good.replace("EXPOSE 8080", "EXPOSE 8081"))))
    with tempfile.TemporaryDirectory(prefix="ledgerd-health-") as folder:
        fixed = Path(folder) / "healthcheck.sh"
        fixed.write_text("#!/bin/sh\ncurl -fsS -o /dev/null --max-time 2 "
                         "http://127.0.0.1:8080/healthz || exit 1\n")
        problems = check_healthcheck_script(fixed)
        assert any("0.0.0.0:9000" in p for p in problems)
        assert not any(p.startswith("LEDGER_LISTEN=0.0.0.0:8080:") for p in problems)
    assert any("ENTRYPOINT" in p for p in check_programs(compose(), bad, ledgerd_commands()))
    assert ignored("build/ledgerd") and ignored("var/pg") and not ignored("ledger/core/decide.c")
    assert ignored("sdk/python/ledger_client/__pycache__/x.pyc")

    doc = compose()
    replica = {k: v for k, v in doc["services"]["replica"].items() if k != "init"}
    doctored = dict(doc, services=dict(doc["services"], replica=replica))
    assert [p for p in check_init(doctored, dockerfile()) if p.startswith("replica ")] != []
    env = dict(doc["services"]["gateway"]["environment"], LEDGER_LISTEN="0.0.0.0:1")
    svc = dict(doc["services"]["migrate"], environment={"LEDGER_DATABASE_UR": "x"})
    doctored = dict(doc, services=dict(doc["services"], migrate=svc,
                                       gateway=dict(doc["services"]["gateway"], environment=env)))
    problems = check_environment(doctored, dockerfile(), ledgerd_variables(),
                                 gateway_variables())
    assert any("LEDGER_DATABASE_UR" in p for p in problems)
    assert any("gateway sets LEDGER_LISTEN" in p for p in problems)
    svc = dict(doc["services"]["tokens"], environment={
        "LEDGER_DATABASE_URL": "x", "LEDGER_ROUTER_TOKN": "${LEDGER_ROUTER_TOKEN:?x}"})
    doctored = dict(doc, services=dict(doc["services"], tokens=svc))
    problems = check_environment(doctored, dockerfile(), ledgerd_variables(),
                                 gateway_variables())
    assert any("tokens does not set LEDGER_ROUTER_TOKEN" in p for p in problems)
    assert any("replica uses the token" in p for p in check_wiring(doctored, dockerfile()))
    svc = dict(doc["services"]["tokens"], command=["token", "make"])
    doctored = dict(doc, services=dict(doc["services"], tokens=svc))
    assert any("not a ledgerd command" in p
               for p in check_programs(doctored, dockerfile(), ledgerd_commands()))
    replica = dict(doc["services"]["replica"], networks=["db"])
    doctored = dict(doc, services=dict(doc["services"], replica=replica))
    assert any("share no network" in p for p in check_wiring(doctored, dockerfile()))
    gw = dict(doc["services"]["gateway"], environment=dict(
        doc["services"]["gateway"]["environment"], GATEWAY_REPLICAS="r=http://replica:9001"))
    doctored = dict(doc, services=dict(doc["services"], gateway=gw))
    assert any("9001" in p for p in check_wiring(doctored, dockerfile()))
    tools = dict(doc["services"]["tools"], command=["tests/faults/tool.py"])
    doctored = dict(doc, services=dict(doc["services"], tools=tools))
    assert any("tool.py" in p for p in check_programs(doctored, dockerfile(),
                                                       ledgerd_commands()))
    build = dict(doc["services"]["ledgerd"]["build"], dockerfile="docker/Dockerfil")
    doctored = dict(doc, services=dict(doc["services"], ledgerd=dict(
        doc["services"]["ledgerd"], build=build, volumes=["./nope:/x", "undeclared:/y"])))
    assert len(check_compose_files(doctored)) == 3
    readme = (DOCKER / "README.md").read_text().replace("`LEDGER_ROUTER_TOKEN`", "")
    assert check_interpolation((DOCKER / "compose.yaml").read_text(), readme) != []
    assert check_interpolation("a: ${B}\nc: $D\n", "`B` `D`") != []


def test_the_library_check_catches_a_missing_package():
    libs = owners(shared_libraries(LEDGERD))
    runtime = [p for p in deps_mode("runtime") if p != "libpq5"]
    assert any("libpq" in p for p in check_runtime_libraries(libs, runtime))


# --- make image-test's own hygiene (tests/image/) ------------------------------------


def mounts_under(folder):
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f
                if (line.split()[4] + "/").startswith(str(folder) + "/")]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root, as make image-test does")
def test_what_debootstrap_leaves_mounted_is_unmounted(tmp_path):
    """debootstrap can leave /proc (and /sys, /dev/pts) mounted in the root it
    made; tar then walked the live /proc and the mounts outlived the run.
    tests/image/mounts.sh's unmount_under, which run.sh calls before tar and
    on every exit, leaves nothing mounted under the folder, nested mounts
    and a busy one included."""
    root = tmp_path / "root"
    for sub in ("proc", "sys", "dev/pts", "dev/shm"):
        (root / sub).mkdir(parents=True)
    try:
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
        subprocess.run(["mount", "-t", "sysfs", "sysfs", str(root / "sys")], check=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(root / "dev")], check=True)
        (root / "dev" / "shm").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(root / "dev" / "shm")], check=True)
        busy = subprocess.Popen(["sleep", "30"], cwd=root / "dev" / "shm")
        assert len(mounts_under(root)) == 4
        done = subprocess.run(["bash", "-c", '. tests/image/mounts.sh && unmount_under "$1"',
                               "-", str(root)], cwd=ROOT, capture_output=True, text=True)
        busy.kill()
        busy.wait()
        assert done.returncode == 0, done.stderr
        assert mounts_under(root) == []
    finally:
        for mp in sorted(mounts_under(root), key=len, reverse=True):
            subprocess.run(["umount", "-l", mp])
