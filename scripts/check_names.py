#!/usr/bin/env python3
"""Checks that every external symbol is named <area>_<module>_<verb> after
the file that defines it (STYLE.md, "Names"): ledger_json_parse lives in
ledger/common/json.c, api_reply_error in api/service/reply.c, store_step_run in
ledger/store/step.c. The store's public operations are ledger_store_*
(ledger/store/store.h) whichever file of the folder holds them.

Usage: check_names.py BUILD_DIR (after make all). Prints each symbol that
breaks the rule and exits 1 if there is any.
"""
import pathlib
import subprocess
import sys

AREAS = {"api/wire": "wire", "api/service": "api", "api/cli": "api",
         "ledger/common": "ledger", "ledger/core": "ledger", "ledger/store": "ledger",
         "sdk/programs/ledger-mcp": "mcp"}


def allowed(folder, module, sym):
    area = AREAS[folder]
    if sym == "main" or sym == "%s_%s" % (area, module) or sym.startswith("%s_%s_" % (area, module)):
        return True
    return folder == "ledger/store" and (sym.startswith("ledger_store_") or
                                         sym.startswith("store_%s_" % module))


def main():
    build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build")
    bad = []
    for folder in AREAS:
        for src in sorted(pathlib.Path(folder).glob("*.c")):
            obj = build / src.with_suffix(".o")
            if not obj.exists():
                print("check_names: %s is not built" % obj, file=sys.stderr)
                return 2
            out = subprocess.run(["nm", "-g", "--defined-only", str(obj)], check=True,
                                 capture_output=True, text=True).stdout
            for line in out.splitlines():
                parts = line.split()
                # Names from "__" on are the compiler's (a sanitizer's, say), not ours.
                if (len(parts) == 3 and parts[1] in "TDRB" and not parts[2].startswith("__")
                        and not allowed(folder, src.stem, parts[2])):
                    bad.append("%s: %s" % (src, parts[2]))
    for b in bad:
        print(b)
    if bad:
        print("check_names: %d symbol(s) not named after their file" % len(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
