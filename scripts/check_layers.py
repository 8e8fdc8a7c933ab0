#!/usr/bin/env python3
"""Checks that each folder includes only what its layer may (STYLE.md, "Layout";
docs/architecture.md, "Layers").

  ledger/common/   generic code: includes nothing of the project beyond itself
  ledger/core/     the pure domain: ledger/common and itself; never libpq or pthread
  ledger/store/    SQL: ledger/common, ledger/core and itself
  api/wire/        HTTP/1.1 and TLS, shared by ledgerd, ledger-gateway and ledger-mcp:
                   ledger/common and itself; no domain header, and no domain word
                   in its code or its comments
  api/service/     ledgerd's driver and handlers: the wire, the domain, and the
                   store through its public headers alone; never libpq
  api/cli/         ledgerd's command line: the service, the wire, the domain, the
                   store's public headers
  sdk/c/           the C client: ledger/common and itself
  sdk/programs/*/  the programs on the C client: its public header, their own
                   folder, and the internal libraries named below

Inside api/ and each program, no include runs back up: the graph of modules
(a .c, its .h and its _int.h are one module) has no circle, so every module sits above
the ones it includes.

Prints each violation as FILE:LINE: reason and exits 1 if there is any.
Run from the repository root (make test and make lint do).
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

STORE_PUBLIC = ("ledger/store/store.h", "ledger/store/job.h", "ledger/store/migrate.h",
                "ledger/store/maintenance.h", "ledger/store/token_watch.h",
                "ledger/store/replay_cache.h")
CLIENT = ("sdk/c/ledger_client.h", "ledger_client.h")

# folder -> (project includes it may have, system headers it must not)
RULES = {
    "ledger/common": (("ledger/common/",), ("libpq-fe.h",)),
    "ledger/core": (("ledger/common/", "ledger/core/"), ("libpq-fe.h", "pthread.h")),
    "ledger/store": (("ledger/common/", "ledger/core/", "ledger/store/"), ()),
    "api/wire": (("api/wire/", "ledger/common/"), ("libpq-fe.h", "yaml.h", "curl/curl.h")),
    "api/service": (("api/service/", "api/wire/", "ledger/common/", "ledger/core/") + STORE_PUBLIC,
                    ("libpq-fe.h",)),
    "api/cli": (("api/cli/", "api/service/", "api/wire/", "ledger/common/", "ledger/core/")
                + STORE_PUBLIC, ("libpq-fe.h",)),
    "sdk/c": (("sdk/c/", "ledger/common/"), ("libpq-fe.h",)),
    # The programs: the client's public header, and these internal libraries:
    # ledger/common (libledger_common.a: the JSON reader and writer) and the
    # wire (libledger_wire.a: the HTTP/1.1 server the gateway and ledger-mcp serve on).
    "sdk/programs/ledgerctl": (("sdk/programs/ledgerctl/", "ledger/common/") + CLIENT,
                               ("libpq-fe.h",)),
    "sdk/programs/ledger-gateway": (("sdk/programs/ledger-gateway/", "api/wire/",
                                     "ledger/common/") + CLIENT, ("libpq-fe.h",)),
    "sdk/programs/ledger-mcp": (("sdk/programs/ledger-mcp/", "api/wire/", "ledger/common/")
                                + CLIENT, ("libpq-fe.h",)),
}

# Folders whose modules must form no circle of includes.
ACYCLIC = ("api", "sdk/programs/ledgerctl", "sdk/programs/ledger-gateway",
           "sdk/programs/ledger-mcp")

# What the wire must never speak of: it is HTTP for any server.
DOMAIN_WORDS = re.compile(r"\b(claim|attempt|tenant|fencing|tool[ _-]?calls?|idempoten|ledgerd|"
                          r"replica|failover|polic(y|ies)|database|sql|store)\w*", re.I)


def sources(root, folder):
    return sorted(p for p in (root / folder).glob("*.[ch]"))


def violations(root):
    for folder, (allowed, banned) in RULES.items():
        for path in sources(root, folder):
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
    for path in sources(root, "api/wire"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = DOMAIN_WORDS.search(line)
            if m:
                yield "%s:%d: the wire speaks of \"%s\", a word of a server's domain" % (
                    path.relative_to(root), n, m.group(0))
    yield from circles(root)


def module(path):
    """The module a file belongs to: its path without suffix; a NAME_int.h,
    what NAME's files share and nothing else sees, is NAME's."""
    base = path.rsplit(".", 1)[0]
    return base[:-4] if base.endswith("_int") else base


def circles(root):
    """Each include that closes a circle of modules inside an ACYCLIC folder."""
    edges, where = {}, {}
    for top in ACYCLIC:
        for path in sorted((root / top).rglob("*.[ch]")):
            rel = path.relative_to(root)
            mod = module(str(rel))
            edges.setdefault(mod, set())
            for n, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) != '"' or not m.group(2).startswith(top + "/"):
                    continue
                dep = module(m.group(2))
                if dep != mod:
                    edges[mod].add(dep)
                    where.setdefault((mod, dep), "%s:%d" % (rel, n))
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in found:
        for (a, b), at in sorted(where.items()):
            if a in comp and b in comp:
                yield "%s: %s includes %s, which includes it back (circle: %s)" % (
                    at, a, b, " ".join(sorted(comp)))


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
