#!/usr/bin/env python3
"""Checks that docs/architecture.md and the README's tree describe the tree
as it is (tests/docs/test_architecture.py runs it; run it by hand from the
repository root):

- every source file (of api/, ledger/, sdk/, sql/, ui/, scripts/, docker/)
  is named in the section of architecture.md for its folder;
- every folder holding tests is named in architecture.md's tests section;
- every home of code (api/*/, ledger/*/, sdk/c/, sdk/python/, sdk/js/,
  sdk/programs/*/, sql/, ui/, scripts/, docker/, docs/, tests/) and every
  folder of tests/ is named in the README's tree;
- every function architecture.md names (`name()`, `name(arg)`) is defined
  in the project's code, and every other name it quotes with an underscore
  in it (`claim_locked`, `attempts_one_live`) occurs in the project's code.

Prints each problem and exits 1 if there is any.
"""
import pathlib
import re
import subprocess
import sys

SOURCE_TOPS = ("api", "ledger", "sdk", "sql", "ui", "scripts", "docker")
NOT_SOURCE = (".gitignore", "package-lock.json")
CODE_SUFFIXES = (".c", ".h", ".py", ".ts", ".mjs", ".js", ".sql", ".sh", ".lua", ".yaml",
                 ".yml", ".in", "Makefile", "Dockerfile")
SECTION = re.compile(r"^### `([^`]+)`", re.M)
QUOTED = re.compile(r"`([^`\n]+)`")
CALL = re.compile(r"^([A-Za-z_]\w*)\(.*\)$")
NAME = re.compile(r"^[A-Za-z_]\w*_\w*[A-Za-z0-9]$")
C_DEF = re.compile(r"^(?:#\s*define\s+|[A-Za-z_][\w \t\*]*?\b)([A-Za-z_]\w*)\(", re.M)
SQL_CALL = re.compile(r"\b([a-z_]\w*)\(")
PY_DEF = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(", re.M)
JS_DEF = re.compile(r"(?:function\s+|^\s*(?:async\s+)?)([A-Za-z_]\w*)\s*\([^)]*\)\s*[:{]", re.M)


def tracked(root):
    out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                         check=True).stdout
    return [p for p in out.splitlines() if (root / p).is_file()]


def sections(text):
    """architecture.md's '### `folder/`' sections: folder -> their text."""
    found = {}
    marks = list(SECTION.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        found[m.group(1)] = text[m.start():end]
    return found


def section_of(path, secs):
    """The section whose folder is the longest prefix of @path."""
    best = None
    for folder in secs:
        for prefix in folder.split("` and `"):
            if path.startswith(prefix.rstrip("/") + "/") and (
                    best is None or len(prefix) > len(best[0])):
                best = (prefix, folder)
    return secs[best[1]] if best else ""


def named(path, text):
    """Whether @text names the file @path: by its name, or a .h by its .c's
    line saying `.h` (the page's "`conn.c`, `.h`")."""
    base = pathlib.PurePosixPath(path).name
    if re.search(r"(^|[`/ ])%s\b" % re.escape(base), text, re.M):
        return True
    if base.endswith(".h"):
        stem = re.escape(base[:-2])
        return re.search(r"`[^`]*\b%s\.c`[^\n]*`\.h`" % stem, text) is not None
    return False


def source_files(files):
    return [p for p in files if p.split("/")[0] in SOURCE_TOPS
            and pathlib.PurePosixPath(p).name not in NOT_SOURCE]


def test_folders(files):
    dirs = set()
    for p in files:
        parts = p.split("/")
        if parts[0] != "tests" or len(parts) < 3:
            continue
        if parts[1] == "data" or (parts[1] == "fuzz" and "corpus" in parts):
            continue
        for n in range(2, len(parts)):
            dirs.add("/".join(parts[:n]))
    return sorted(dirs)


def homes(files):
    found = {"sql", "ui", "scripts", "docker", "docs", "tests"}
    for p in files:
        parts = p.split("/")
        if parts[0] in ("api", "ledger") and len(parts) > 2:
            found.add("/".join(parts[:2]))
        elif parts[0] == "sdk" and len(parts) > 2 and parts[1] in ("c", "python", "js"):
            found.add("/".join(parts[:2]))
        elif parts[0] == "sdk" and len(parts) > 3 and parts[1] == "programs":
            found.add("/".join(parts[:3]))
    return sorted(found)


def readme_tree(text):
    """The code block of the README that shows the tree (the one naming ledger/common/)."""
    blocks, block = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if block is None:
                block = []
            else:
                blocks.append("\n".join(block))
                block = None
        elif block is not None:
            block.append(line)
    return next((b for b in blocks if "ledger/common/" in b), "")


def definitions(root, files):
    """Function names defined in the code (or called in the SQL ledgerd sends:
    PostgreSQL's own), and every word the code holds."""
    defined, words = set(), set()
    for p in files:
        # Not the docs, nor the check and its test, whose planted names must stay unknown.
        if p.startswith(("docs/", "tests/docs/")) or p.endswith(".md") or "/corpus/" in p or \
                p == "scripts/check_docs.py" or not p.endswith(CODE_SUFFIXES):
            continue
        text = (root / p).read_text(errors="replace")
        words.update(re.findall(r"[A-Za-z_]\w*", text))
        if p.endswith(".sql") or p == "ledger/store/statements.c":
            defined.update(SQL_CALL.findall(text))
        if p.endswith((".c", ".h")):
            defined.update(C_DEF.findall(text))
        elif p.endswith(".py"):
            defined.update(PY_DEF.findall(text))
        elif p.endswith((".ts", ".mjs", ".js")):
            defined.update(JS_DEF.findall(text))
    return defined, words


def problems(root, arch=None, readme=None):
    root = pathlib.Path(root)
    arch = arch if arch is not None else (root / "docs" / "architecture.md").read_text()
    readme = readme if readme is not None else (root / "README.md").read_text()
    files = tracked(root)
    secs = sections(arch)
    found = []
    for p in source_files(files):
        if not named(p, section_of(p, secs)):
            found.append("docs/architecture.md does not name the source file %s" % p)
    tests_text = secs.get("tests/", "")
    for d in test_folders(files):
        base = d.rsplit("/", 1)[1]
        if not re.search(r"`(?:[^`]*/)?%s/[^`]*`" % re.escape(base), tests_text):
            found.append("docs/architecture.md does not name the test folder %s/" % d)
    tree = readme_tree(readme)
    for h in homes(files):
        if not re.search(r"(^|\s)%s/" % re.escape(h), tree, re.M):
            found.append("the README's tree does not name %s/" % h)
    for d in sorted({"/".join(t.split("/")[:2]) for t in test_folders(files)}):
        if not re.search(r"(^|[\s,(])%s/" % re.escape(d.split("/")[1]), tree, re.M):
            found.append("the README's tree does not name the test folder %s/" % d)
    defined, words = definitions(root, files)
    for q in sorted(set(QUOTED.findall(arch))):
        call = CALL.match(q)
        if call and call.group(1) not in defined:
            found.append("docs/architecture.md names %s, which is defined nowhere" % q)
        elif not call and NAME.match(q) and q not in words:
            found.append("docs/architecture.md names `%s`, which the code never holds" % q)
    return found


def main():
    found = problems(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    for f in found:
        print(f)
    if found:
        print("check_docs: %d problem(s)" % len(found), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
