"""What the servers on the project's HTTP/1.1 layer (api/wire/) do with
malformed or ambiguous HTTP/1.1 (RFC 9112): ledgerd, ledger-gateway and
ledger-mcp alike, each case run against all three (wire_targets.py).

A front proxy and a server must never read one stream as different
requests, so every message whose framing two readers could take apart
differently is refused with 400 and the connection closed, before any
route runs. Every refusal is one JSON envelope, written once."""

import json
import os
import threading
import time

import pytest

import wire_targets
from conftest import hold_request_lock, new_id
from wire import connect, exchange, parse, read_all, request

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\n\r\n"


@pytest.fixture(scope="module", params=["ledgerd", "ledger-gateway", "ledger-mcp"])
def target(request, service, tmp_path_factory):
    """One of the three servers, for the module's cases that hold for each."""
    t, close = wire_targets.start(request.param, service, tmp_path_factory.mktemp("wire"))
    yield t
    close()


def assert_nothing_written(svc, rid):
    for table in ("requests", "tool_calls", "events"):
        n = svc.sql("SELECT count(*) FROM %s WHERE request_id = '%s'" % (table, rid))
        assert int(n[0][0]) == 0, (table, rid)


def claim_path(rid):
    return "/v1/requests/%s/tool-calls/call_01/claim" % rid


def refused_once(svc, raw, status=400, code="malformed_request", timeout=10.0):
    """@raw is answered by one @status @code envelope and a close, quickly:
    nothing after it in the stream is read as another request."""
    t0 = time.monotonic()
    answers, rest, closed = exchange(svc, raw, timeout=timeout)
    took = time.monotonic() - t0
    assert len(answers) == 1 and rest == b"", (answers, rest)
    assert answers[0].status == status, answers[0]
    assert answers[0].error()["code"] == code, answers[0]
    assert answers[0].header("Connection") == "close"
    assert closed, "the connection stayed open"
    assert took < timeout / 2, "answered after %.1f s" % took
    return answers[0]


def post(target, headers, body=b"", path=None):
    """The bytes of a POST to @target's path that reads its body."""
    return request("POST", path or target.body_path(), target.body_headers + headers, body)


# --- request smuggling ------------------------------------------------------


def nothing_ran(target, service, path):
    """For ledgerd, the claim at @path left no row: its refusal ran nothing."""
    if target.name == "ledgerd":
        assert_nothing_written(service, path.split("/")[3])


def test_two_content_lengths_are_refused_and_the_rest_never_runs(target, service):
    path = target.body_path()
    raw = post(target, [("Content-Length", "2"), ("Content-Length", str(len(target.body)))],
               target.body, path=path)
    refused_once(target, raw + HEALTHZ)
    nothing_ran(target, service, path)


def test_equal_content_lengths_are_refused_too(target):
    refused_once(target, request("POST", "/healthz", [("Content-Length", "2"),
                                                      ("Content-Length", "2")], b"{}"))


def test_content_length_beside_transfer_encoding_is_refused(target, service):
    path = target.body_path()
    raw = post(target, [("Content-Length", "5"), ("Transfer-Encoding", "chunked")],
               b"2\r\n{}\r\n0\r\n\r\n", path=path)
    refused_once(target, raw + HEALTHZ)
    nothing_ran(target, service, path)


def test_whitespace_before_a_colon_is_refused(target):
    raw = (b"POST /healthz HTTP/1.1\r\nHost: ledgerd\r\nTransfer-Encoding : chunked\r\n\r\n"
           b"0\r\n\r\n")
    refused_once(target, raw + HEALTHZ)


@pytest.mark.parametrize("coding", ["gzip", "chunked, gzip", "chunked, chunked", "identity"])
def test_a_coding_that_does_not_end_in_chunked_is_refused_at_once(target, coding):
    raw = request("POST", "/healthz", [("Transfer-Encoding", coding)]) + b"0\r\n\r\n"
    refused_once(target, raw, timeout=6)


def test_an_unknown_coding_before_chunked_is_not_implemented(target):
    raw = request("POST", "/healthz", [("Transfer-Encoding", "gzip, chunked")]) + b"0\r\n\r\n"
    refused_once(target, raw, status=501, code="not_implemented", timeout=6)


def test_http11_without_host_is_refused(target):
    refused_once(target, request("GET", "/healthz", host=False) + HEALTHZ)


def test_http10_without_host_is_served(target):
    answers, _, closed = exchange(target, request("GET", "/healthz", host=False,
                                                  version="HTTP/1.0"))
    assert [a.status for a in answers] == [200] and closed


@pytest.mark.parametrize("field", ["Host", "Authorization", "Content-Type"])
def test_a_field_given_twice_that_may_appear_once_is_refused(target, field):
    raw = request("GET", "/healthz", [(field, "a"), (field, "b")], host=field != "Host")
    refused_once(target, raw)


@pytest.mark.parametrize("value", ["+2", "-1", "2, 2", "0x2", "2 2", "", "1e1"])
def test_a_malformed_content_length_is_answered_once(target, value):
    raw = b"POST /healthz HTTP/1.1\r\nHost: ledgerd\r\nContent-Length: %s\r\n\r\n{}" % (
        value.encode())
    refused_once(target, raw + HEALTHZ)


@pytest.mark.parametrize("raw", [
    b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\nX-A: 1\r\n folded\r\n\r\n",
    b"GET /healthz HTTP/1.1\nHost: ledgerd\n\n\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\nX-A: a\rb\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\nX-A: a\x00b\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\nX-A: a\x01b\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\nno colon here\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\n: no name\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\nX(A): 1\r\n\r\n",
    b"GET  /healthz HTTP/1.1\r\nHost: ledgerd\r\n\r\n",
    b"GET /healthz  HTTP/1.1\r\nHost: ledgerd\r\n\r\n",
    b"GET /healthz\r\nHost: ledgerd\r\n\r\n",
    b"G@T /healthz HTTP/1.1\r\nHost: ledgerd\r\n\r\n",
    b"GET healthz HTTP/1.1\r\nHost: ledgerd\r\n\r\n",
    b"GET http://user@ledgerd/healthz HTTP/1.1\r\nHost: ledgerd\r\n\r\n",
    b"GET ftp://ledgerd/healthz HTTP/1.1\r\nHost: ledgerd\r\n\r\n",
    b"GET /heal\x7fthz HTTP/1.1\r\nHost: ledgerd\r\n\r\n",
    b"GET /healthz HTTX/1.1\r\nHost: ledgerd\r\n\r\n",
    b"GET /healthz HTTP/1.10\r\nHost: ledgerd\r\n\r\n",
], ids=["obs-fold", "bare-lf", "bare-cr", "nul", "control", "no-colon", "no-name",
        "bad-name", "two-spaces", "trailing-space", "no-version", "bad-method",
        "relative-target", "absolute-form-userinfo", "absolute-form-ftp", "del-in-target",
        "not-http", "long-minor"])
def test_a_malformed_head_is_answered_once(target, raw):
    refused_once(target, raw + HEALTHZ)


@pytest.mark.parametrize("uri", ["http://ledgerd/healthz", "HTTP://ledgerd:8080/healthz",
                                 "https://ledgerd/healthz"])
def test_an_absolute_form_target_is_served_as_its_path(target, uri):
    """RFC 9112 3.2.2: a server must accept the absolute form a proxy sends;
    the request is the path's, whatever the authority names."""
    s = connect(target)
    try:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: ledgerd\r\n\r\n" % uri.encode() + HEALTHZ)
        data, _ = read_all(s, until_answers=2)
    finally:
        s.close()
    answers, _ = parse(data)
    assert [a.status for a in answers] == [200, 200], answers


def test_an_absolute_form_without_a_path_is_the_root(target):
    s = connect(target)
    try:
        s.sendall(b"GET http://ledgerd HTTP/1.1\r\nHost: ledgerd\r\n\r\n" + HEALTHZ)
        data, _ = read_all(s, until_answers=2)
    finally:
        s.close()
    answers, _ = parse(data)
    # "/" is no route of any of the three servers: 404, answered, and the next goes on.
    assert [a.status for a in answers][1:] == [200] and answers[0].status in (404, 200), answers


@pytest.mark.parametrize("version", ["HTTP/2.0", "HTTP/1.2", "HTTP/0.9", "HTTP/3.0"])
def test_another_http_version_is_505(target, version):
    refused_once(target, request("GET", "/healthz", version=version), status=505,
                 code="http_version_not_supported")


def test_another_expectation_is_417(target):
    refused_once(target, request("POST", "/healthz", [("Expect", "200-ok")], b"{}"),
                 status=417, code="expectation_failed")


def test_a_malformed_chunk_is_refused_once_the_body_is_read(target, service):
    path = target.body_path()
    raw = post(target, [("Transfer-Encoding", "chunked")], path=path) + b"zz\r\n{}\r\n0\r\n\r\n"
    refused_once(target, raw + HEALTHZ)
    nothing_ran(target, service, path)


@pytest.mark.parametrize("tail", [b"2\r\n{}0\r\n\r\n", b"2\n{}\r\n0\r\n\r\n",
                                  b"2\r\n{}\r\n0\r\nX-T: 1\n\r\n",
                                  b"2 ;ext=1\r\n{}\r\n0\r\n\r\n",
                                  b"2\t;ext=1\r\n{}\r\n0\r\n\r\n"],
                         ids=["data-without-crlf", "size-bare-lf", "trailer-bare-lf",
                              "space-before-extension", "tab-before-extension"])
def test_chunk_framing_needs_every_crlf(target, service, tail):
    path = target.body_path()
    raw = post(target, [("Transfer-Encoding", "chunked")], path=path) + tail
    refused_once(target, raw + HEALTHZ)
    nothing_ran(target, service, path)


def test_a_chunked_body_with_extensions_and_trailers_is_read(target):
    body = target.body
    raw = post(target, [("Transfer-Encoding", "chunked")])
    raw += b"%x;ext=1\r\n%s\r\n0\r\nX-Trailer: yes\r\n\r\n" % (len(body), body)
    s = connect(target)
    try:
        s.sendall(raw + HEALTHZ)
        data, _ = read_all(s, until_answers=2)
    finally:
        s.close()
    answers, _ = parse(data)
    assert [a.status for a in answers] == [target.body_status, 200], answers


# --- limits, at their edges --------------------------------------------------


def padded_head(total):
    """A GET /healthz head of exactly @total bytes, final CRLFCRLF included."""
    base = b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\nX-Pad: \r\n\r\n"
    return base.replace(b"X-Pad: ", b"X-Pad: " + b"a" * (total - len(base)))


def test_a_head_of_16384_bytes_is_served(target):
    raw = padded_head(16384)
    assert len(raw) == 16384
    answers, _, _ = exchange(target, raw + request("GET", "/healthz", [("Connection", "close")]))
    assert [a.status for a in answers] == [200, 200], answers


def test_a_head_of_16385_bytes_is_431(target):
    raw = padded_head(16385)
    refused_once(target, raw, status=431, code="headers_too_large")


def test_a_head_far_too_large_is_431_without_waiting_for_its_end(target):
    s = connect(target)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: ledgerd\r\nX-Pad: " + b"a" * 40000)
        data, closed = read_all(s, timeout=5)
    finally:
        s.close()
    answers, _ = parse(data)
    assert [a.status for a in answers] == [431] and closed, answers
    assert answers[0].error()["code"] == "headers_too_large"


def test_empty_lines_before_a_request_are_ignored(target):
    answers, _, _ = exchange(target, b"\r\n\r\n" + request("GET", "/healthz",
                                                             [("Connection", "close")]))
    assert [a.status for a in answers] == [200]


def test_100_fields_are_served_and_101_are_431(target):
    fields = [("X-F%d" % i, "v") for i in range(99)]
    # Host, 98 more and Connection: 100 fields.
    answers, _, _ = exchange(target, request("GET", "/healthz",
                                             fields[:98] + [("Connection", "close")]))
    assert [a.status for a in answers] == [200], answers
    # Host, 99 more and one again: 101.
    refused_once(target, request("GET", "/healthz", fields + [("X-Last", "v")]),
                 status=431, code="headers_too_large")


def test_an_over_limit_chunked_body_is_413_before_its_end(target, service):
    """The 413 goes out as soon as the limit is passed, while the client
    still holds the body open: it is not read to its end first."""
    path = target.body_path()
    s = connect(target)
    try:
        s.sendall(post(target, [("Transfer-Encoding", "chunked")], path=path))
        chunk = b"x" * 65536
        for _ in range(target.max_body // len(chunk) + 1):  # the limit and 64 KiB, no last chunk
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        data, closed = read_all(s, timeout=5, until_answers=1)
    finally:
        s.close()
    answers, _ = parse(data)
    assert [a.status for a in answers] == [413], answers
    assert answers[0].error()["code"] == "body_too_large"
    assert answers[0].header("Connection") == "close"
    nothing_ran(target, service, path)


def test_pipelined_requests_are_answered_in_order(target):
    s = connect(target)
    try:
        s.sendall(HEALTHZ + request("GET", target.missing_target) + HEALTHZ)
        data, closed = read_all(s, timeout=5, until_answers=3)
        assert not closed
        s.sendall(HEALTHZ)
        more, _ = read_all(s, timeout=5, until_answers=1)
    finally:
        s.close()
    answers, _ = parse(data)
    assert [a.status for a in answers] == [200, 404, 200]
    assert [a.status for a in parse(more)[0]] == [200]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slow_request(target, service):
    """A request whose answer waits a while, its status, and the thread to join after:
    for ledgerd a claim behind a request's row lock, for a proxy a slow upstream."""
    if target.name != "ledgerd":
        raw, status = target.slow
        return raw, status, None
    led, token = service.ledgerd, service.token()
    rid = new_id()
    assert led.post(claim_path(rid), {"claim_id": "0123456789abcdef0123"},
                    token=token).status == 201
    lock = hold_request_lock(service.sql, rid, 2)
    raw = request("POST", claim_path(rid).replace("call_01", "call_02"),
                  [("Authorization", "Bearer " + token)], b'{"claim_id": "0123456789abcdef0124"}')
    return raw, 201, lock


def test_a_request_sent_while_a_call_runs_waits_for_it_without_spinning(target, service):
    """A client that sends its next request before the answer to a call
    that waits (on the database, on an upstream): the call is answered
    first, then the request, and meanwhile the server does not poll the
    readable socket in a loop (one core at 100% for as long as it waits)."""
    raw, status, lock = slow_request(target, service)
    s = connect(target)
    try:
        s.sendall(raw)
        time.sleep(0.2)  # the call waits now; the next request comes
        s.sendall(HEALTHZ)
        time.sleep(0.1)
        before, t0 = cpu_seconds(target.pid), time.monotonic()
        time.sleep(1.0)
        used, took = cpu_seconds(target.pid) - before, time.monotonic() - t0
        data, closed = read_all(s, timeout=10, until_answers=2)
    finally:
        s.close()
        if lock is not None:
            lock.join()
    answers, _ = parse(data)
    assert [a.status for a in answers] == [status, 200], answers
    assert not closed
    assert used < 0.25 * took, "%s used %.2f s of CPU in %.2f s, waiting" % (
        target.name, used, took)


def test_head_requests_get_the_head_alone(target):
    answers, rest, closed = exchange(target, request("HEAD", "/healthz",
                                                     [("Connection", "close")]))
    # A HEAD answer has a Content-Length and no body; parse() would wait for it.
    assert answers == [] and rest.startswith(b"HTTP/1.1 ") and rest.endswith(b"\r\n\r\n")
    assert b"\r\nContent-Length: " in rest and closed, rest


def test_thousands_of_pipelined_requests_are_all_answered(target):
    """Each reply of a pipelined stream is answered before the next head
    is read, in a loop: 20,000 requests sent at once once grew the stack
    by a frame pair each, until it overflowed. (ledger-mcp forwards each
    to its upstream, a Python server: 2,000 of them.)"""
    n = 2000 if target.name == "ledger-mcp" else 20000
    s = connect(target)
    try:
        sender = threading.Thread(target=s.sendall, args=(HEALTHZ * n + request(
            "GET", "/healthz", [("Connection", "close")]),))
        sender.start()
        data, closed = read_all(s, timeout=120)
        sender.join()
    finally:
        s.close()
    answers, rest = parse(data)
    assert len(answers) == n + 1 and closed and rest == b"", (len(answers), rest[:100])
    assert {a.status for a in answers} == {200}
    answers, _, _ = exchange(target, request("GET", "/healthz", [("Connection", "close")]))
    assert [a.status for a in answers] == [200]


@pytest.mark.parametrize("name", ["si%ce", "%ff%fe", "a%00b", "%1b[31m", "x" * 65])
def test_an_unknown_query_name_is_never_echoed_unless_plain(service, name):
    """The fuzzer's find: a name that decodes to bytes that are not UTF-8
    was written into the error's "field", and the reply was not JSON."""
    raw = request("GET", "/v1/requests?%s=1" % name,
                  [("Authorization", "Bearer " + service.token("reviewer")),
                   ("Connection", "close")])
    answers, _, _ = exchange(service, raw)
    assert [a.status for a in answers] == [400]
    assert "\ufffd" not in answers[0].body, answers[0].body  # the bytes were UTF-8
    doc = json.loads(answers[0].body)
    assert doc["error"]["code"] == "invalid_field" and doc["error"]["field"] == ""
