#!/usr/bin/env python3
"""Writes each docs/guides/ file into the code block that names it in the guides.

A block of docs/guide-agent.md or docs/guide-router.md follows a line
`<!-- file: docs/guides/NAME -->` and must be that file byte for byte
(tests/docs/test_guides.py checks it). After editing a file, run
`python3 scripts/sync_guides.py` to copy it into the guide.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUIDES = ("docs/guide-agent.md", "docs/guide-router.md")
MARKER = re.compile(r"<!-- file: (\S+) -->")


def sync(text):
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        marker = MARKER.fullmatch(lines[i])
        if marker is None:
            out.append(lines[i])
            i += 1
            continue
        end = lines.index("```", i + 2)  # the block's closing fence
        body = (ROOT / marker.group(1)).read_text()
        if not body.endswith("\n") or "\n```\n" in "\n" + body:
            sys.exit("%s: must end with a newline and hold no ``` line" % marker.group(1))
        out += [lines[i], lines[i + 1]] + body[:-1].split("\n") + ["```"]
        i = end + 1
    return "\n".join(out)


def main():
    for name in GUIDES:
        path = ROOT / name
        text = path.read_text()
        synced = sync(text)
        if synced != text:
            path.write_text(synced)
            print("updated", name)


if __name__ == "__main__":
    main()
