"""Every metric the documentation names is one ledgerd exports: an alert
written from a page must be able to fire. A name in the docs that is
neither in /metrics nor an identifier of the code (a function, a type, a
module) names nothing at all."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bledger_[a-z0-9_]*[a-z0-9]\b")
DOCS = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("sdk/**/README.md"),
               *ROOT.glob("docker/*.md"), *ROOT.glob("tests/*/README.md")])
CODE = ("*.c", "*.h", "*.py", "*.ts", "*.mjs", "*.sh", "*.sql", "*.in", "Makefile")


def code_names():
    names = set()
    for top in ("api", "ledger", "sdk", "scripts", "sql", "tests"):
        for pattern in CODE:
            for f in (ROOT / top).rglob(pattern):
                if "node_modules" not in f.parts and "dist" not in f.parts:
                    names |= set(NAME.findall(f.read_text(errors="replace")))
    return names


def exported(service):
    text = service.ledgerd.get("/metrics").body
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


def test_every_metric_the_docs_name_is_exported(service):
    metrics = exported(service)
    assert "ledger_duplicate_executions_total" in metrics
    # The gauge of unknown outcomes appears with the first count, 15 s after
    # the start: api/service/metrics.c spells it, as it spells every metric.
    known = code_names() | metrics
    unknown = {}
    for doc in DOCS:
        for name in set(NAME.findall(doc.read_text())):
            if name not in known:
                unknown.setdefault(name, []).append(str(doc.relative_to(ROOT)))
    assert unknown == {}, "names that ledgerd neither exports nor defines: %s" % unknown
