"""A 60 s chaos campaign inside `make test`: a random seed, judged by checker.py.

The campaign (campaign.py) runs ledgerd twice over on a synchronously
replicated PostgreSQL, with agent workers, routers and an operator as
separate processes, while the seed's faults happen: ledgerd killed,
frozen and restarted without its database, workers frozen past their
claim's lease, routers frozen, the primary killed and the standby
promoted, answers dropped, delayed and reset between the clients and
ledgerd. It fails with the seed, the anomalies and the command that runs
the same campaign again; the run folder (build/chaos/<time>-<seed>/) keeps
every record.

A campaign that did not exercise the system (no promotion, hardly any
acknowledged completion) fails too: passing then would prove nothing.

    LEDGERD=build/ledgerd python3 -m pytest -q tests/chaos/test_chaos.py
    CHAOS_SEED=123 ... (the same seed again)
"""

import os
import random

import campaign

SECONDS = int(os.environ.get("CHAOS_TEST_SECONDS") or 60)
MIN_ACKNOWLEDGED = 50


def test_chaos_campaign(capsys):
    seed = int(os.environ["CHAOS_SEED"]) if os.environ.get("CHAOS_SEED") else \
        random.SystemRandom().randrange(1, 1 << 31)
    with capsys.disabled():
        print("\nchaos: seed %d, %d s" % (seed, SECONDS), flush=True)
    report = campaign.run_campaign(seed, SECONDS, out=lambda line: None)
    text = report.text()
    print(text)
    reproduce = campaign.reproduce_command(seed, SECONDS)
    assert not report.anomalies, "seed %d: %d anomalies\n%s\nrun folder: %s\nreproduce: %s" % (
        seed, len(report.anomalies), "\n".join(
            "%s: %s" % (a["kind"], a["text"]) for a in report.anomalies[:30]),
        report.folder, reproduce)
    assert report.failovers >= 1, "seed %d: no promotion of the standby happened\n%s\n" \
        "reproduce: %s" % (seed, text, reproduce)
    # Each Python agent was answered by ledgerd: a transport that cannot send
    # would leave the campaign to the other clients and prove nothing of these.
    silent = ["agent-%d" % (i + 1) for i in range(campaign.PY_AGENTS)
              if not report.answered.get("agent-%d" % (i + 1))]
    assert not silent, "seed %d: %s never answered by ledgerd\n%s" % (seed, silent, text)
    assert report.acknowledged >= MIN_ACKNOWLEDGED, \
        "seed %d: only %d acknowledged completions were checked\n%s\nreproduce: %s" % (
            seed, report.acknowledged, text, reproduce)
