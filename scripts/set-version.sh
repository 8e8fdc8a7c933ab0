#!/bin/sh
# scripts/set-version.sh VERSION: the one step of a release that writes its
# version. VERSION (at the root) is where the Makefile, and through it every
# program, the C library, its pkg-config file and the image, read it; the
# Python and npm packages must carry it in their own metadata files, so this
# writes it there too. tests/integration/test_versions.py fails when any of
# them, or CHANGELOG.md's entries, disagree.
set -eu
case "${1:-}" in
[0-9]*.[0-9]*.[0-9]*) ;;
*) echo "usage: scripts/set-version.sh MAJOR.MINOR.PATCH[-PRE]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
printf '%s\n' "$1" >VERSION
python3 - "$1" <<'PY'
import json, re, sys
v = sys.argv[1]
p = "sdk/python/ledger_client/_version.py"
s = open(p).read()
open(p, "w").write(re.sub(r'(?m)^__version__ = ".*"$', '__version__ = "%s"' % v, s))
for p in ("sdk/js/package.json", "sdk/js/package-lock.json"):
    d = json.load(open(p))
    d["version"] = v
    if "packages" in d:
        d["packages"][""]["version"] = v
    open(p, "w").write(json.dumps(d, indent=2, ensure_ascii=False) + "\n")
PY
echo "version $1 written; add its entry to CHANGELOG.md"
