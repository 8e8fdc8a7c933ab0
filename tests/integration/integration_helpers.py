"""What the integration suites share: the operator's client, /metrics
samples, and lines that must appear in order.

A helper lives here as soon as two test files need it. The module is
imported by name (tests/integration is on sys.path for its test files), so
its name must differ from every other helper module of tests/.
"""

import os
import re
from pathlib import Path

from conftest import LEDGERD

# ledgerctl, built next to ledgerd unless LEDGERCTL names another.
LEDGERCTL = Path(os.environ.get("LEDGERCTL", LEDGERD.parent / "ledgerctl")).resolve()


def metric(led, name):
    """The value of the unlabelled sample @name in @led's /metrics."""
    for line in led.get("/metrics").body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric %s" % name)


def find_in_order(lines, patterns):
    """Matches each regular expression against a later line than the one before."""
    at = 0
    for pattern in patterns:
        for i in range(at, len(lines)):
            if re.search(pattern, lines[i]):
                at = i + 1
                break
        else:
            raise AssertionError("no line after %d matches %r in:\n%s"
                                 % (at, pattern, "\n".join(lines)))
