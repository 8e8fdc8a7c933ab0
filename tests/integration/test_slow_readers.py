"""Readers that take a reply slower than anyone should.

A reply has an end: a client that reads it a trickle at a time is cut
--write-timeout after the reply's first byte (for a reply written as it
comes, the time counted is the time the client is behind), however often
it reads a little. And the bytes waiting on slow readers are bounded in
all by --max-unread-output: past it, the connections that have been
behind longest are closed first, so 200 of them cost a bounded amount of
memory while everyone else is served."""

import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import Ledgerd, claim_id, new_id
from integration_helpers import metric

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "http"))
from wire import parse, read_all, request  # noqa: E402

KIB = 1024
MIB = 1024 * KIB
RESULT_BYTES = 900 * KIB


def start(service, tmp_path, *args):
    led = Ledgerd(service.database_url, tmp_path / ("ledgerd-%s.log" % new_id("l")),
                  extra_args=["--max-connections", "2000",
                              "--max-connections-per-address", "0"] + list(args))
    led.start()
    return led


def big_call(led, token):
    """A tool call completed with a result of RESULT_BYTES: the path of its view."""
    rid = new_id("req")
    base = "/v1/requests/%s/tool-calls/call_01" % rid
    r = led.post(base + "/claim", {"claim_id": claim_id(), "tool": "t", "args": {}}, token=token)
    assert r.status == 201, r.body
    result = {"blob": "x" * RESULT_BYTES}
    r = led.post(base + "/complete", {"fencing_token": r.json["fencing_token"],
                                      "outcome": "succeeded", "result": result}, token=token)
    assert r.status == 200, r.body[:300]
    return base


def slow_get(led, path, token):
    """A connection that asks for @path and will read its reply slowly: a
    receive buffer of 4 KiB, so the reply waits in ledgerd, not in the kernel."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((led.host, led.port))
    s.sendall(request("GET", path, [("Authorization", "Bearer " + token)]))
    return s


def trickle(sock, every_s, stop, got):
    """Reads 1 KiB every @every_s seconds until the connection ends;
    @got["end"] is when it did, @got["bytes"] how much came."""
    sock.settimeout(1)
    while not stop.is_set():
        try:
            chunk = sock.recv(KIB)
        except socket.timeout:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            got["end"] = time.monotonic()
            return
        got["bytes"] = got.get("bytes", 0) + len(chunk)
        stop.wait(every_s)


def labelled(led, name, **labels):
    """The value of sample @name{labels} in @led's /metrics."""
    want = "%s{%s}" % (name, ",".join('%s="%s"' % kv for kv in labels.items()))
    for line in led.get("/metrics").body.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[1])
    raise AssertionError("no metric %s" % want)


def queued_kib(led):
    """The bytes ledgerd's sockets hold in the kernel, waiting to be sent
    or acknowledged (skmem's w, summed), in KiB: output that has left
    ledgerd's memory still costs the machine's."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", "( sport = :%d )" % led.port],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(w) for w in re.findall(r"\bw(\d+)", out)) // 1024


def rss_kib(led):
    for line in Path("/proc/%d/status" % led.proc.pid).read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_reader_taking_a_trickle_is_cut_at_the_write_timeout(service, tmp_path):
    """16 readers take 1 KiB a second of a 900 KiB reply: each bit of
    progress is no reason to wait longer. ledgerd cuts every one within
    --write-timeout (4 s, well before --idle-timeout, 10 s) and a sweep of
    its first byte, counted as a write
    timeout; each reader then ends (once it has read what its kernel had
    already received) with most of the reply unread."""
    led = start(service, tmp_path, "--idle-timeout", "10s", "--write-timeout", "4s")
    readers = []
    try:
        token = service.token()
        path = big_call(led, token)
        before = labelled(led, "ledger_http_timeouts_total", phase="write")
        stop = threading.Event()
        t0 = time.monotonic()
        for _ in range(16):
            got = {}
            s = slow_get(led, path, token)
            t = threading.Thread(target=trickle, args=(s, 1.0, stop, got), daemon=True)
            readers.append((s, t, got))
            t.start()
        cut = None
        while time.monotonic() - t0 < 15:
            if labelled(led, "ledger_http_timeouts_total", phase="write") - before >= 16:
                cut = time.monotonic() - t0
                break
            time.sleep(0.1)
        print("all 16 cut after %s s" % ("%.1f" % cut if cut is not None else "more than 15"))
        assert cut is not None and cut <= 4 + 2.5, cut
        deadline = time.monotonic() + 20
        for _, t, _ in readers:
            t.join(timeout=max(0, deadline - time.monotonic()))
        stop.set()
        assert all("end" in got for _, _, got in readers), [got for _, _, got in readers]
        assert all(got.get("bytes", 0) < RESULT_BYTES // 2 for _, _, got in readers)
        # whoever reads at once is served as before
        r = led.get(path, token=token)
        assert r.status == 200 and len(r.body) > RESULT_BYTES
    finally:
        for s, _, _ in readers:
            s.close()
        led.stop()


def test_two_hundred_slow_readers_hold_a_bounded_amount_of_memory(service, tmp_path):
    """200 readers each ask for a 900 KiB reply and read 1 KiB every 3 s
    (a write timeout far away): the replies waiting on them would be 176
    MiB. With --max-unread-output 16MiB, ledgerd's memory and its sockets'
    queues in the kernel grow by a bounded amount, the longest behind are closed first (counted in
    ledger_http_unread_shed_total), and a client that reads at once
    is served all along."""
    led = start(service, tmp_path, "--max-unread-output", "16MiB")
    socks, stop = [], threading.Event()
    try:
        token = service.token()
        path = big_call(led, token)
        assert led.get(path, token=token).status == 200  # the replay cache is warm
        base = rss_kib(led) + queued_kib(led)
        peak = base
        threads = []
        for i in range(200):
            got = {}
            s = slow_get(led, path, token)
            socks.append(s)
            t = threading.Thread(target=trickle, args=(s, 3.0, stop, got), daemon=True)
            t.start()
            threads.append(t)
            if i % 20 == 19:
                peak = max(peak, rss_kib(led) + queued_kib(led))
        served = []
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            peak = max(peak, rss_kib(led) + queued_kib(led))
            t0 = time.monotonic()
            r = led.get(path, token=token, timeout=10)
            served.append((r.status, time.monotonic() - t0))
            time.sleep(0.2)
        grew_mib = (peak - base) / 1024
        evicted = metric(led, "ledger_http_unread_shed_total")
        print("memory (RSS and socket queues) base %.0f MiB, peak %.0f MiB, grew %.0f MiB; "
              "shed %d; fast reader's median %.1f ms"
              % (base / 1024, peak / 1024, grew_mib, evicted,
                 sorted(x for _, x in served)[len(served) // 2] * 1000))
        assert all(status == 200 for status, _ in served), served
        assert evicted >= 150, evicted
        assert grew_mib <= 96, grew_mib  # 258 MiB when the kernel took every reply whole
    finally:
        stop.set()
        for s in socks:
            s.close()
        led.stop()
