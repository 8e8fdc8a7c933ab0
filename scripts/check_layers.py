#!/usr/bin/env python3
"""Checks that each folder includes only what its layer may (STYLE.md, "Layout").

  ledger/common/  generic code: includes nothing of the project beyond itself
  ledger/core/    the pure domain: ledger/common and itself; never libpq,
                  libmicrohttpd or pthread
  ledger/store/   SQL: ledger/common, ledger/core and itself; never HTTP
  api/            HTTP: the store only through its public headers, never libpq
  sdk/c/          the C client: ledger/common and itself
  sdk/mcp/        ledger-mcp: the C client's public header, ledger/common and itself

Prints each violation as FILE:LINE: reason and exits 1 if there is any.
Run from the repository root (make test and make lint do).
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

# folder -> (project prefixes it may include, system headers it must not)
RULES = {
    "ledger/common": (("ledger/common/",), ("libpq-fe.h", "microhttpd.h")),
    "ledger/core": (("ledger/common/", "ledger/core/"), ("libpq-fe.h", "microhttpd.h", "pthread.h")),
    "ledger/store": (("ledger/common/", "ledger/core/", "ledger/store/"), ("microhttpd.h",)),
    "api": (("api/", "ledger/common/", "ledger/core/", "ledger/store/store.h",
             "ledger/store/job.h", "ledger/store/migrate.h", "ledger/store/maintenance.h",
             "ledger/store/replay_cache.h"), ("libpq-fe.h",)),
    "sdk/c": (("sdk/c/", "ledger/common/"), ("libpq-fe.h", "microhttpd.h")),
    "sdk/mcp": (("sdk/mcp/", "sdk/c/ledger_client.h", "ledger/common/"), ("libpq-fe.h",)),
}


def violations(root):
    for folder, (allowed, banned) in RULES.items():
        for path in sorted((root / folder).glob("*.[ch]")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, name = m.groups()
                where = "%s:%d" % (path.relative_to(root), n)
                if kind == "<" and name in banned:
                    yield "%s: %s may not include <%s>" % (where, folder, name)
                if kind == '"' and "/" in name and not name.startswith(allowed):
                    yield "%s: %s may not include \"%s\"" % (where, folder, name)


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    found = list(violations(root))
    for v in found:
        print(v)
    if found:
        print("check_layers: %d include(s) break the layering" % len(found), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
