"""The C SDK against a live ledgerd.

The assertions live in tests/sdk/c/test_c_client.c (cmocka, the public header
only); this module starts ledgerd, prepares what C cannot (a result removed
by retention, a ledgerd that stops and starts), runs each group, and runs
the live group once under valgrind so a leak fails the build. It also runs
the example twice and checks that the second run replays.

A history longer than a page (the review calls' cursor) is written with
SQL: a thousand API calls would only make the valgrind run slow.
"""

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from answer_thief import AnswerThief, LoopbackProxy
from conftest import ROOT, LEDGERD, Ledgerd, ledgerd_cmd, new_id, claim_id

BUILD = LEDGERD.parent
CLIENT_TEST = BUILD / "tests" / "test_c_client"
EXAMPLE = BUILD / "examples" / "send_email"
JCS_DIR = ROOT / "tests" / "data" / "jcs"

# A result is served from the replay cache for up to a minute; the
# retention case needs every replay to come from the database.
LEDGERD_ARGS = ("--replay-cache", "0")


@pytest.fixture(scope="module")
def env(service):
    led = service.ledgerd
    e = dict(os.environ)
    e.update({
        "LEDGER_URL": "http://%s:%d" % (led.host, led.port),
        "LEDGER_AGENT_TOKEN": service.token("agent"),
        "LEDGER_ROUTER_TOKEN": service.token("router"),
        "LEDGER_ADMIN_TOKEN": service.token("admin"),
        "LEDGER_JCS_DIR": str(JCS_DIR),
    })
    return e


def run(argv, env, timeout=180):
    p = subprocess.run([str(a) for a in argv], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, "%s exited %d\n%s\n%s" % (argv, p.returncode, p.stdout,
                                                          p.stderr)
    return p


def expired_key(service):
    """A key settled long ago whose result retention removed: only a tombstone is left."""
    led, token = service.ledgerd, service.token("agent")
    rid = new_id()
    path = "/v1/requests/%s/tool-calls/call_00/" % rid
    body = {"claim_id": claim_id(), "tool": "pay", "args": {"amount": 5}}
    assert led.post(path + "claim", body, token=token).status == 201
    assert led.post(path + "complete", {"fencing_token": 1, "outcome": "succeeded",
                                        "result": {"ok": 1}}, token=token).status == 200
    age = "interval '8 days'"
    service.sql("UPDATE requests SET created_at = created_at - %s WHERE request_id = '%s'"
                % (age, rid))
    service.sql("UPDATE tool_calls SET created_at = created_at - %s, "
                "completed_at = completed_at - %s WHERE request_id = '%s'" % (age, age, rid))
    ledgerd_cmd("gc", "--database-url", service.database_url, "--retention", "7d")
    assert service.sql("SELECT count(*) FROM tool_call_tombstones WHERE request_id = '%s'" % rid) \
        == [["1"]]
    return "%s:call_00" % rid


def long_history(service):
    """A request with 1,101 events: more than the 1,000 of one page."""
    led, token = service.ledgerd, service.token("agent")
    rid = new_id()
    assert led.post("/v1/requests/%s/tool-calls/call_00/claim" % rid,
                    {"claim_id": claim_id(), "tool": "t"}, token=token).status == 201
    service.sql(
        "INSERT INTO events (tenant, request_id, at, type, detail) "
        "SELECT 't1', '%s', now() + g * interval '1 ms', 'operator_note', "
        "jsonb_build_object('n', g) FROM generate_series(1, 1100) g" % rid)
    return rid


def test_c_client_jcs_vectors(env):
    out = run([CLIENT_TEST, "jcs"], env)
    assert "[  PASSED  ] 3 test(s)." in out.stdout + out.stderr, out.stdout + out.stderr


def sanitized(binary):
    """Built with AddressSanitizer (make SANITIZE=...): it finds leaks itself."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    return "libasan" in out


def test_c_client_live_without_leaks(service, env):
    """Every outcome kind, waits, renewals, the router helper and the review
    calls, with no leak."""
    e = dict(env, LEDGER_EXPIRED_KEY=expired_key(service),
             LEDGER_LONG_REQUEST_ID=long_history(service))
    if sanitized(CLIENT_TEST):
        argv = [CLIENT_TEST, "live"]
    else:
        if shutil.which("valgrind") is None:
            pytest.fail("valgrind is missing: scripts/deps.sh test installs it")
        argv = ["valgrind", "--quiet", "--leak-check=full",
                "--show-leak-kinds=definite,indirect",
                "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99",
                CLIENT_TEST, "live"]
    out = run(argv, e, timeout=300)
    assert "[  PASSED  ] 26 test(s)." in out.stdout + out.stderr, out.stdout + out.stderr


def small_ledgerd(service, tmp_path):
    """Another ledgerd on the same database, whose --max-body (4 KiB) is under
    the client's bound and whose --max-result-bytes is 1 KiB."""
    return Ledgerd(service.database_url, tmp_path / "ledgerd-small.log",
                   extra_args=LEDGERD_ARGS + ("--max-body", "4KiB", "--max-result-bytes", "1KiB"))


def refused_for_size(led):
    """The tool_call_ids of the completions @led answered 413 body_too_large."""
    return [json.loads(line)["tool_call_id"] for line in led.log_text().splitlines()
            if '"tool_call_complete"' in line and '"status":413' in line]


def test_c_client_large_results_against_a_small_body_limit(service, env, tmp_path):
    """A completion refused as 413 body_too_large is sent again as the
    result's digest, and one ledgerd keeps as its digest answers without it."""
    led = small_ledgerd(service, tmp_path)
    try:
        out = run([CLIENT_TEST, "small"], dict(env, LEDGER_URL="http://%s:%d" % (led.host,
                                                                                 led.port)))
    finally:
        led.stop()
    assert "[  PASSED  ] 2 test(s)." in out.stdout + out.stderr, out.stdout + out.stderr
    # The whole result was refused for its size, then sent again as its digest.
    assert refused_for_size(led) == ["call_00", "call_01"]


class BodyLimit(LoopbackProxy):
    """A reverse proxy in front of ledgerd that refuses a body over @limit bytes
    as nginx's client_max_body_size does: 413 with a page of its own, no
    envelope of ledgerd's."""

    PAGE = (b"<html><head><title>413 Request Entity Too Large</title></head><body>"
            b"<center><h1>413 Request Entity Too Large</h1></center></body></html>\r\n")

    def __init__(self, led, limit):
        self.limit = limit
        self.refused = []
        super().__init__((led.host, led.port))

    def _serve(self, client):
        with client, socket.create_connection(self.upstream) as upstream:
            buffered = b""
            while True:
                request, buffered = self._read_message(client, buffered)
                if request is None:
                    return
                body = request.partition(b"\r\n\r\n")[2]
                if len(body) > self.limit:
                    self.refused.append(request.split(b" ", 2)[1].decode())
                    client.sendall(b"HTTP/1.1 413 Request Entity Too Large\r\n"
                                   b"Content-Type: text/html\r\nContent-Length: %d\r\n"
                                   b"Connection: close\r\n\r\n%s" % (len(self.PAGE), self.PAGE))
                    return
                upstream.sendall(request)
                answer, _ = self._read_message(upstream, b"")
                client.sendall(answer)


def test_c_client_large_results_behind_a_proxy_with_a_body_limit(service, env, tmp_path):
    """A reverse proxy's own 413 (3000 bytes, under ledgerd's 4 KiB) is answered
    the same way: the digest is sent at once, and ledgerd never saw the body."""
    led = small_ledgerd(service, tmp_path)
    proxy = BodyLimit(led, 3000)
    try:
        out = run([CLIENT_TEST, "small"], dict(env, LEDGER_URL=proxy.url))
    finally:
        proxy.close()
        led.stop()
    assert "[  PASSED  ] 2 test(s)." in out.stdout + out.stderr, out.stdout + out.stderr
    assert [p.rsplit("/", 2)[-2] for p in proxy.refused] == ["call_00", "call_01"], \
        proxy.refused
    assert refused_for_size(led) == []


def outage(service, env, group, down_s):
    """Runs @group; stops ledgerd once the tool runs, starts it again after @down_s."""
    led = service.ledgerd
    mark = service.tmp / ("%s-%s" % (group, new_id("m")))
    rid = new_id()
    e = dict(env, LEDGER_MARK=str(mark), LEDGER_REQUEST_ID=rid)
    proc = subprocess.Popen([str(CLIENT_TEST), group], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 20
        while not mark.exists():
            assert time.time() < deadline and proc.poll() is None, "the tool never ran"
            time.sleep(0.02)
        port = led.port
        led.stop()
        Path(str(mark) + ".down").touch()
        time.sleep(down_s)
        led.start("127.0.0.1:%d" % port)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
    finally:
        if proc.poll() is None:
            proc.kill()
        if led.proc is None:
            led.start("127.0.0.1:%d" % led.port)
    return rid


def call_of(service, rid):
    r = service.ledgerd.get("/v1/requests/%s/tool-calls/call_00" % rid,
                            token=service.token("agent"))
    assert r.status == 200, r
    return r.json


def test_c_client_completion_is_retried_across_a_restart(service, env):
    rid = outage(service, env, "restart", 1.5)
    c = call_of(service, rid)
    assert c["state"] == "succeeded" and c["result"] == {"charged": True}, c
    assert c["fencing_token"] == 1  # recorded by its own holder, not rerun


def test_c_client_completion_past_its_bound_is_unrecorded(service, env):
    rid = outage(service, env, "unrecorded", 3.0)
    # The record is missing, and the ledger says so: the claim is still open.
    assert call_of(service, rid)["state"] in ("in_progress", "unknown")


def test_c_client_lost_answers_are_sent_again_unchanged(service, env):
    """A claim and a completion reach ledgerd but their answers are lost: the
    client sends each again, unchanged, and ledgerd recognises them."""
    thief = AnswerThief(service, {"claim", "complete"})
    rid = new_id()
    try:
        run([CLIENT_TEST, "lost"], dict(env, LEDGER_URL=thief.url, LEDGER_REQUEST_ID=rid))
    finally:
        thief.close()
    assert thief.stolen == [("claim", "HTTP/1.1 201 Created"), ("complete", "HTTP/1.1 200 OK")]
    events = service.sql("SELECT type FROM events WHERE request_id = '%s' ORDER BY seq" % rid)
    assert [e[0] for e in events] == ["claimed", "completed"], events


def test_c_example_sends_once_then_replays(service, env):
    e = dict(env, LEDGER_TOKEN=env["LEDGER_AGENT_TOKEN"])
    rid = new_id()
    first = run([EXAMPLE, rid, "ada@example.com"], e)
    assert "sending the email to ada@example.com" in first.stdout, first.stdout
    assert "sent: {\"message_id\":\"msg-%s:call_00\"}" % rid in first.stdout, first.stdout
    second = run([EXAMPLE, rid, "ada@example.com"], e)
    assert "sending the email" not in second.stdout, second.stdout
    assert "already sent, not sending again" in second.stdout, second.stdout
    # Another recipient under the same key is another call: refused, not sent.
    third = subprocess.run([str(EXAMPLE), rid, "bob@example.com"], env=e,
                           capture_output=True, text=True, timeout=60)
    assert third.returncode == 1 and "not sent: args_mismatch" in third.stdout, third


def test_c_example_is_built_against_the_shared_library():
    out = subprocess.run(["ldd", str(EXAMPLE)], capture_output=True, text=True).stdout
    assert "libledger_client.so.1 => %s" % (BUILD / "libledger_client.so.1") in out, out


def test_c_libraries_export_only_the_public_api():
    header = (ROOT / "sdk" / "c" / "ledger_client.h").read_text()
    for lib, argv in ((BUILD / "libledger_client.so", ["nm", "-D", "--defined-only"]),
                      (BUILD / "libledger_client.a", ["nm", "-g", "--defined-only"])):
        out = subprocess.run(argv + [str(lib)], capture_output=True, text=True,
                             check=True).stdout
        # The shared library's names carry their version node: name@@LEDGER_CLIENT_1.
        names = {line.split()[-1].split("@")[0] for line in out.splitlines()
                 if len(line.split()) == 3 and line.split()[1] in "TDBR"}
        assert names, lib
        stray = sorted(n for n in names if not n.startswith("ledger_client_"))
        assert stray == [], "%s exports %s" % (lib.name, stray)
        assert all(n + "(" in header.replace("\n", "") or n in header for n in names), names


def test_c_pkg_config_names_the_library():
    e = dict(os.environ, PKG_CONFIG_PATH=str(BUILD))
    out = subprocess.run(["pkg-config", "--cflags", "--libs", "ledger_client"], env=e,
                         capture_output=True, text=True, check=True).stdout
    assert "-I%s" % (ROOT / "sdk" / "c") in out and "-lledger_client" in out, out
    installed = (BUILD / "ledger_client.pc").read_text()
    assert "Requires.private: libcurl libcrypto" in installed


def build_and_start_example(out_dir, pkg_config_path):
    """sdk/README's build line, as a user types it (no -D_GNU_SOURCE, with
    implicit declarations an error as newer compilers make them), then the
    program started from where it was built: its usage, exit 2."""
    e = dict(os.environ, PKG_CONFIG_PATH=str(pkg_config_path))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "ledger_client"], env=e,
                           capture_output=True, text=True, check=True).stdout.split()
    program = out_dir / "send_email"
    cc = subprocess.run(["cc", "-Werror=implicit-function-declaration",
                         str(ROOT / "sdk" / "c" / "examples" / "send_email.c")] + flags
                        + ["-o", str(program)], capture_output=True, text=True)
    assert cc.returncode == 0 and cc.stderr == "", cc.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LEDGER_URL")}
    run = subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=10)
    assert run.returncode == 2 and run.stderr.startswith("usage: "), run.stderr
    return program


def test_the_documented_build_line_works_from_the_build_tree(tmp_path):
    build_and_start_example(tmp_path, BUILD)


def test_install_sdk_follows_prefix_and_the_example_builds_against_it(tmp_path):
    prefix = tmp_path / "opt" / "ledgerd"
    done = subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", "install-sdk",
                           "PREFIX=%s" % prefix], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    pc = (prefix / "lib" / "pkgconfig" / "ledger_client.pc").read_text()
    assert pc.startswith("prefix=%s\n" % prefix), pc
    program = build_and_start_example(tmp_path, prefix / "lib" / "pkgconfig")
    ldd = subprocess.run(["ldd", str(program)], capture_output=True, text=True).stdout
    assert "libledger_client.so.1 => %s" % (prefix / "lib" / "libledger_client.so.1") in ldd, ldd
