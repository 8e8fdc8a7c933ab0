"""The documentation, run as a reader runs it.

Every shell block of the pages below runs, in the order a reader meets
them, in one shell session against one ledgerd started the way `make run`
starts it (scripts/run.sh, with `var/` of its own). Each answer is compared
with what the page shows after the command (ids and times masked, `...`
standing for what the page leaves out); a page whose answer differs fails.
Blocks that are not commands say what they are (docrun.py): an excerpt of
a file the tests run, a policy ledgerd must accept, or why they are not
run.
"""

import json
import os
import re
import sys
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import docrun
from conftest import LEDGERD, ROOT, Ledgerd, free_port

# The reader's order: the README, the API and the pages it sends them to.
PAGES = [
    "README.md",
    "docs/guide-agent.md",
    "docs/guide-router.md",
    "docs/api.md",
    "docs/design.md",
    "docs/architecture.md",
    "docs/scaling.md",
    "docs/operations.md",
    "sdk/README.md",
    "sdk/c/README.md",
    "sdk/python/README.md",
    "sdk/js/README.md",
    "sdk/programs/ledger-mcp/README.md",
    "sdk/programs/ledger-gateway/README.md",
    "sdk/programs/ledgerctl/README.md",
    "docker/README.md",
]

# Languages whose blocks are not code a reader runs: trees, diagrams, output.
NOT_CODE = {"", "text"}

ADDRESS = "127.0.0.1:8080"

# A page's command runs as root on the machine that runs the tests: one that
# would change the machine itself (its PostgreSQL, its services, its files
# outside the reader's tree) is never run; its block must say it is a
# production setup (doctest: skip) instead.
MACHINE = re.compile(r"(^|[\s'\"=>])(/etc/|/var/lib/|/srv/|/usr/(?!bin/env))|"
                     r"\b(pg_ctlcluster|systemctl|service|sudo|apt-get|dpkg|useradd|kill(all)?)\b")


def page_blocks():
    out = []
    for page in PAGES:
        out.extend(docrun.blocks(page, (ROOT / page).read_text()))
    return out


class Shell:
    """One bash session: variables set by a command are there for the next one."""

    def __init__(self, workdir, state, env):
        self.workdir, self.state, self.env = workdir, state, env
        state.write_text("")
        # curl as the pages use it, with the status written to standard error,
        # where the shown answer is compared with its status.
        self.prelude = (
            "set -o pipefail\n"
            "curl() { command curl -w '%{stderr}\\n%{http_code}\\n' \"$@\"; }\n"
            "__before=$(compgen -v)\n")

    def run(self, text, timeout=60):
        script = "%s\nsource %s\ncd %s\n%s\n__rc=$?\n" \
                 "for __v in $(compgen -v); do case \"$__v\" in __*|BASH*|FUNCNAME|PIPESTATUS|_) ;; " \
                 "*) grep -qx \"$__v\" <<<\"$__before\" || declare -p \"$__v\";; esac; done >%s.new\n" \
                 "mv %s.new %s\nexit $__rc\n" % (self.prelude, self.state, self.workdir, text,
                                                  self.state, self.state, self.state)
        # In a session of its own, so that nothing a command started outlives it.
        proc = subprocess.Popen(["bash", "-c", script], env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += "\n(killed after %d s)" % timeout
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def split_status(stderr):
    """curl's status lines out of standard error: (the last status, the rest)."""
    statuses = re.findall(r"^(\d{3})$", stderr, re.M)
    rest = re.sub(r"^\n?\d{3}$", "", stderr, flags=re.M).strip()
    return (statuses[-1] if statuses else None), rest


@pytest.fixture(scope="module")
def reader(service, tmp_path_factory):
    """A reader's checkout: the repository's files as they are now, the programs
    built from them, and `var/` of this test's own make run."""
    base = tmp_path_factory.mktemp("reader")
    workdir, var, home = base / "clone", base / "var", base / "home"
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True).stdout
    for name in sorted(set(listed.decode().split("\0")) - {""}):
        src, dst = ROOT / name, workdir / name
        if src.is_file() and not name.startswith(("build/", "var/")):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    # The programs the pages run, copied: a command that rebuilds or installs
    # writes into the reader's tree, never into the one the other tests use.
    (workdir / "build").mkdir()
    for entry in (ROOT / "build").iterdir():
        if entry.is_file():
            shutil.copy2(entry, workdir / "build" / entry.name)
    var.mkdir()
    home.mkdir()
    (workdir / "var").symlink_to(var)
    port = free_port()
    address = "127.0.0.1:%d" % port
    env = dict(os.environ, LEDGERD=str(LEDGERD), LEDGER_DATABASE_URL=service.database_url,
               LEDGER_LISTEN=address, LEDGER_RUN_DIR=str(var))
    proc = subprocess.Popen([str(ROOT / "scripts" / "run.sh")], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = proc.stderr.readline()
        assert line, "make run ended"
        if line.startswith("{") and '"address"' in line:
            break
    # A Debian user's shell: the system's tools first, a home of its own, and
    # the one thing that differs from the pages: ledgerd listens on another port
    # (the commands' 127.0.0.1:8080 is rewritten, and the clients' default is set).
    shell_env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGER", "PYTHON"))}
    shell_env.update(HOME=str(home), LEDGER_URL="http://" + address,
                     PATH="/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/bin")
    shell = Shell(workdir, base / "state.sh", shell_env)
    shell.address = address
    shell.database_url = service.database_url
    yield shell
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def test_every_code_block_is_run_or_says_what_it_is():
    """A block a reader could copy is run, checked against a file, or says why not."""
    unaccounted = []
    for b in page_blocks():
        if b.lang in NOT_CODE or b.lang == "sh" and not b.directive:
            continue
        if b.lang == "json" and b.after_shell and not b.directive:
            continue
        if b.directive in ("skip", "imports") and len(b.argument) < 10:
            unaccounted.append("%s: %s without a reason" % (b.where, b.directive))
        elif not b.directive:
            unaccounted.append("%s: a %s block neither run nor checked" % (b.where, b.lang))
    assert not unaccounted, "\n".join(unaccounted)


def test_the_pages_run_as_written(reader):
    """Every command of every page, in order, answers what its page shows."""
    wrong, ran, previous = [], 0, None
    for b in page_blocks():
        if b.lang == "json" and b.after_shell and previous.commands and \
                not b.directive and not previous.commands[-1].shown:
            last = previous.commands[-1]
            if last.result is not None:
                why = docrun.check_http(b.text.strip().split("\n"), last.result[0],
                                        last.result[1], reader.address)
                if why:
                    wrong.append("%s (the answer of %s:%d): %s" % (b.where, b.page, last.line, why))
        previous = b
        if b.directive == "run":
            done = reader.run("%s - <<'__PROGRAM__'\n%s__PROGRAM__" % (b.argument, b.text))
            ran += 1
            shown = docrun.program_output(b.text)
            if done.returncode != 0:
                wrong.append("%s: the program exited %d: %s%s" % (
                    b.where, done.returncode, done.stdout[-600:], done.stderr[-600:]))
            elif not docrun.matches("\n".join(shown), done.stdout, reader.address):
                wrong.append("%s: the program printed %s, the page shows %s" % (
                    b.where, done.stdout.strip(), "\n".join(shown)))
            continue
        if b.lang != "sh" or b.directive:
            continue
        for c in b.commands:
            c.result = None
            if MACHINE.search(c.text):
                wrong.append("%s:%d: `%s` would change this machine: not run; mark its block "
                             "as a production setup" % (b.page, c.line, c.text.split("\n")[0]))
                continue
            text = c.text.replace(ADDRESS, reader.address)
            done = reader.run(text)
            ran += 1
            status, err = split_status(done.stderr)
            if done.returncode != 0:
                wrong.append("%s:%d: `%s` exited %d: %s%s" % (
                    b.page, c.line, c.text, done.returncode, done.stdout[-600:], err[-600:]))
                continue
            c.result = (done.stdout, status)
            if c.shown:
                why = docrun.check_http(c.shown, done.stdout, status, reader.address)
                if why:
                    wrong.append("%s:%d: `%s`: %s" % (b.page, c.line, c.text.split("\n")[0], why))
    assert ran > 20
    # What the commands wrote stays where git ignores it (var/, build/): a
    # reader's clone is not left with files that git status then shows.
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True).stdout
    ours = set(listed.decode().split("\0"))
    new = [p.relative_to(reader.workdir).as_posix() for p in reader.workdir.rglob("*")
           if p.is_file() and not p.relative_to(reader.workdir).as_posix().startswith(
               ("var/", "build/"))]
    new = [name for name in new if name not in ours]
    ignored = set(subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index",
                                  "--stdin"], input="\n".join(new), capture_output=True,
                                 text=True).stdout.split("\n"))
    for name in sorted(set(new) - ignored):
        wrong.append("a command of the pages wrote %s into the reader's clone, where git "
                     "sees it: write it under var/" % name)
    assert not wrong, "\n\n".join(wrong)


def test_excerpts_are_lines_of_the_files_the_tests_run():
    """A fragment of code on a page is taken from a program that a test builds and runs."""
    wrong = []
    for b in page_blocks():
        if b.directive not in ("excerpt", "file"):
            continue
        path = ROOT / b.argument
        if not path.is_file():
            wrong.append("%s: %s does not exist" % (b.where, b.argument))
            continue
        if b.directive == "file":
            if path.read_text() != b.text:
                wrong.append("%s: not the whole of %s" % (b.where, b.argument))
            continue
        missing = docrun.excerpt_of(b.text, path.read_text())
        if missing is not None:
            wrong.append("%s: %r is not in %s (in this order)" % (b.where, missing, b.argument))
    assert not wrong, "\n".join(wrong)


def test_policies_shown_are_accepted(service, tmp_path):
    """A policy file a page shows starts ledgerd."""
    shown = [b for b in page_blocks() if b.directive == "policy"]
    assert shown
    for i, b in enumerate(shown):
        path = tmp_path / ("policy-%d.yml" % i)
        path.write_text(b.text)
        led = Ledgerd(service.database_url, tmp_path / ("ledgerd-%d.log" % i),
                      extra_args=["--policy", str(path)])
        try:
            assert led.get("/readyz").status == 200, b.where
        finally:
            led.stop()


def test_typescript_sketches_import_what_the_package_exports():
    """A sketch of an adapter's use imports names the built package has."""
    sys.path.insert(0, str(ROOT / "tests" / "sdk" / "js"))
    import js_build
    js_build.build_core()
    wanted = {}
    for b in page_blocks():
        if b.directive == "imports":
            for module, names in docrun.imports(b.text).items():
                wanted.setdefault(module, set()).update((n, b.where) for n in names)
    assert wanted
    script = "const want = JSON.parse(process.argv[2]); const missing = [];\n" \
             "for (const [m, names] of Object.entries(want)) { const mod = await import(m);\n" \
             "  for (const [n, where] of names) if (!(n in mod)) missing.push(where + ': ' + m + ' has no ' + n); }\n" \
             "console.log(JSON.stringify(missing));\n"
    # Resolved as a user's project resolves it: the package by its name.
    project = ROOT / "build" / "docs-imports"
    (project / "node_modules").mkdir(parents=True, exist_ok=True)
    link = project / "node_modules" / "ledgerd"
    if not link.exists():
        link.symlink_to(ROOT / "sdk" / "js")
    (project / "check.mjs").write_text(script)
    done = subprocess.run(["node", str(project / "check.mjs"),
                           json.dumps({m: sorted(v) for m, v in wanted.items()})],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
