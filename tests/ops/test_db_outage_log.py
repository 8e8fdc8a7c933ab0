"""The database goes away under a running ledgerd and comes back: the process
says so once each way, at warning level, with how long it was gone, and
ledger_database_up follows. What callers see meanwhile (503
store_unavailable, /readyz) is tests/integration/test_outage.py's; this
module stops a cluster of its own, so it may stop it while idle too."""

import json
import re
import threading
import time

import pytest

from conftest import LEDGERD, TEST_SETTINGS, Ledgerd, claim_id, ledgerd_cmd, new_id
from pgcluster import Cluster, wait_for

WORKERS = 4
# Every connection a ledgerd serve keeps: its workers, /readyz's, retention's and the
# token watch's.
CONNECTIONS = WORKERS + 3


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if not LEDGERD.exists():
        pytest.exit("build/ledgerd is missing: run make first", 2)
    tmp = tmp_path_factory.mktemp("db_outage_log")
    cluster = Cluster.new(TEST_SETTINGS)
    led = None
    try:
        url = cluster.create_db("ledger")
        ledgerd_cmd("migrate", "--database-url", url)
        token = ledgerd_cmd("token", "create", "--tenant", "t1", "--role", "agent",
                            "--database-url", url).stdout.strip()
        led = Ledgerd(url, tmp / "ledgerd.log",
                      extra_args=["--workers", str(WORKERS), "--db-timeout", "2s"])
        yield cluster, led, token
    finally:
        if led is not None and led.proc is not None:
            led.stop()
        cluster.destroy()


def claim(led, token):
    path = "/v1/requests/%s/tool-calls/call_01/claim" % new_id()
    return led.post(path, {"claim_id": claim_id()}, token=token, timeout=15)


def database_up(led):
    text = led.get("/metrics").body
    return int(re.search(r"^ledger_database_up (\d+)$", text, re.M).group(1))


def lines(led, prefix):
    """The log entries whose message starts with @prefix."""
    found = []
    for line in led.log_text().splitlines():
        entry = json.loads(line)
        if entry["msg"].startswith(prefix):
            found.append(entry)
    return found


def connections(cluster):
    rows = cluster.psql("SELECT count(*) FROM pg_stat_activity "
                        "WHERE application_name = 'ledgerd'")
    return int(rows[0][0])


def burst(led, token, n=16):
    """@n claims at once, from as many threads: several workers take them."""
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(claim(led, token)))
               for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def all_connected(cluster, led, token):
    """Calls until every connection of the process is open again; the workers
    that were idle through the outage find theirs broken on their first call."""
    def probe():
        burst(led, token)
        led.get("/readyz")
        return connections(cluster) == CONNECTIONS
    wait_for(probe, 30, "all %d connections of ledgerd open" % CONNECTIONS, interval=0.2)


def test_one_line_each_way_per_process_and_the_gauge(stack):
    cluster, led, token = stack
    all_connected(cluster, led, token)
    assert database_up(led) == 1
    assert lines(led, "database unreachable") == []

    # Attempts may fail from the moment the shutdown begins.
    stopping = time.monotonic()
    cluster.stop()
    try:
        # No call at all: the process notices by itself (its retention
        # thread reads its idle connection every second).
        wait_for(lambda: database_up(led) == 0, 5, "ledger_database_up 0 with no call")
        noticed = time.monotonic()
        down = lines(led, "database unreachable")
        assert len(down) == 1, down
        assert down[0]["level"] == "warn"
        # The cause is libpq's, whatever it says in this locale: the socket is gone.
        assert len(down[0]["msg"]) > len("database unreachable: ")

        # Calls from every side meanwhile, on every worker and on /readyz's
        # connection: each fails, and none says it again.
        for _ in range(3):
            for r in burst(led, token):
                assert r.status == 503 and r.code == "store_unavailable", r
            assert led.get("/readyz").status == 503
        time.sleep(1.5)  # the retention thread's attempts too, once a second
        assert len(lines(led, "database unreachable")) == 1
        assert lines(led, "database reachable again") == []
        assert database_up(led) == 0
    finally:
        restarting = time.monotonic()
        cluster.start()

    wait_for(lambda: claim(led, token).status == 201, 20, "a claim served again")
    served = time.monotonic()
    assert database_up(led) == 1
    # The idle workers' connections from before the outage break now, on
    # their first call: that is no new outage, and nothing more is said.
    all_connected(cluster, led, token)
    time.sleep(1.5)
    assert len(lines(led, "database unreachable")) == 1
    back = lines(led, "database reachable again")
    assert len(back) == 1, back
    assert back[0]["level"] == "warn"
    said = float(re.fullmatch(r"database reachable again after (\d+\.\d) s",
                              back[0]["msg"]).group(1))
    # From the first failed attempt to the first that worked: at least the
    # time the cluster was seen down, at most the time it was stopped.
    assert restarting - noticed - 0.1 <= said <= served - stopping + 0.1, (said, back)
    assert abs(back[0]["unreachable_ms"] / 1000 - said) < 0.06
    assert led.proc.poll() is None
