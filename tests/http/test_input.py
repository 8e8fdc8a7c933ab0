"""Bad input over HTTP: every malformed body, field, path id, query, method
and size gets its documented 4xx in the one error envelope, the process
stays up, and nothing is written.

Contract: the API contract ("Conventions"); docs/api.md ("Conventions",
"The order of checks", "Errors").
"""

import http.client
import json
import socket
import threading

import pytest

from conftest import claim_id, new_id
from http_helpers import assert_only_error, claim, key, path, leases_as_asked

MIB = 1024 * 1024
MAX_SAFE = 2 ** 53 - 1


def post_raw(service, p, raw, role="agent"):
    return service.ledgerd.post(p, raw=raw, token=service.token(role))


def claim_raw(service, rid, cid, raw):
    return post_raw(service, path(rid, cid, "claim"), raw)


def assert_alive(service):
    r = service.ledgerd.get("/healthz")
    assert r.status == 200, r
    assert r.json == {"status": "ok"}


def rows(service, rid_like):
    """Rows of every table for request ids LIKE @rid_like (any tenant)."""
    n = 0
    for table in ("requests", "tool_calls", "events"):
        n += int(service.sql("SELECT count(*) FROM %s WHERE request_id LIKE '%s'"
                             % (table, rid_like))[0][0])
    return n


def assert_nothing_written(service, rid):
    assert rows(service, rid) == 0, rid


def claimed(service):
    """A fresh key claimed by an agent: (rid, cid, fencing_token)."""
    rid, cid = key()
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 201, r
    return rid, cid, r.json["fencing_token"]


def assert_unchanged(service, rid, cid, token):
    """The claimed key is as claimed: in progress, its token, one event."""
    g = service.ledgerd.get(path(rid, cid), token=service.token("reviewer"))
    assert g.status == 200, g
    assert g.json["state"] == "in_progress" and g.json["fencing_token"] == token, g
    types = service.sql("SELECT type FROM events WHERE request_id = '%s' ORDER BY seq" % rid)
    assert types == [["claimed"]], types


def exchange(service, head, body=b"", timeout=30):
    """Sends @head (and @body from a second thread, which may be cut short),
    then reads the reply; returns (status, headers dict, body text)."""
    s = socket.create_connection((service.ledgerd.host, service.ledgerd.port), timeout=timeout)

    def send():
        try:
            s.sendall(body)
        except OSError:
            pass  # the server answered and closed without reading it all

    try:
        s.sendall(head)
        t = threading.Thread(target=send, daemon=True)
        t.start()
        resp = http.client.HTTPResponse(s, method="POST")
        resp.begin()
        data = resp.read()
        t.join(timeout=timeout)
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data.decode()
    finally:
        s.close()


class Reply:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def __repr__(self):
        return "<%d %s>" % (self.status, self.body[:300])


def post_sized(service, p, body):
    """POSTs @body with its Content-Length through a raw socket."""
    head = ("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (p, service.token("agent"), len(body))).encode()
    return Reply(*exchange(service, head, body))


def post_chunked(service, p, chunks):
    conn = http.client.HTTPConnection(service.ledgerd.host, service.ledgerd.port, timeout=60)
    try:
        conn.request("POST", p, body=iter(chunks), encode_chunked=True,
                     headers={"Authorization": "Bearer " + service.token("agent"),
                              "Content-Type": "application/json",
                              "Transfer-Encoding": "chunked"})
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()},
                     r.read().decode())
    finally:
        conn.close()


def padded_claim(size):
    """A valid claim body of exactly @size bytes."""
    head = '{"claim_id": "%s", "args": {"pad": "' % claim_id()
    tail = '"}}'
    return (head + "x" * (size - len(head) - len(tail)) + tail).encode()


def nested(depth):
    """@depth nested arrays."""
    return "[" * depth + "]" * depth


# --- bodies that are not JSON -----------------------------------------------


INVALID_JSON = [
    b"{",
    b'{"tool":}',
    b"nul",
    b"{'tool': 'x'}",
    b"{} x",
    b"{}{}",
    b'{"tool": "x",}',
    b'{"args": [1,]}',
    b'{"tool" "x"}',
    b'{"lease_ms": 01000}',
    b'{"lease_ms": NaN}',
    b'{"lease_ms": +5}',
    b'{"tool": "a\tb"}',
    b'{"tool": "\\x"}',
    b'{"tool": "\\u12"}',
    b'{"tool": "unterminated}',
    b'{"args": [1, 2}',
]


@pytest.mark.parametrize("raw", INVALID_JSON, ids=range(len(INVALID_JSON)))
def test_invalid_json_is_400_invalid_json(service, raw):
    rid, cid = key()
    err = assert_only_error(claim_raw(service, rid, cid, raw), 400, "invalid_json")
    assert isinstance(err.get("offset"), int)
    assert_nothing_written(service, rid)
    assert_alive(service)


DUPLICATES = [
    b'{"tool": "a", "tool": "b"}',
    b'{"tool": "a", "tool": "a"}',
    b'{"tool": "a", "\\u0074ool": "b"}',
    b'{"args": {"a": 1, "\\u0061": 2}}',
    b'{"args": [{"k": 1, "k": 1}]}',
    b'{"args": {"x": {"y": 1, "y": 2}}}',
]


@pytest.mark.parametrize("raw", DUPLICATES, ids=range(len(DUPLICATES)))
def test_duplicate_keys_are_invalid_json(service, raw):
    rid, cid = key()
    assert_only_error(claim_raw(service, rid, cid, raw), 400, "invalid_json")
    assert_nothing_written(service, rid)
    assert_alive(service)


def test_duplicate_keys_in_a_result_are_invalid_json(service):
    rid, cid, tok = claimed(service)
    raw = ('{"fencing_token": %d, "outcome": "succeeded", "result": {"a": 1, "\\u0061": 1}}'
           % tok).encode()
    assert_only_error(post_raw(service, path(rid, cid, "complete"), raw), 400, "invalid_json")
    assert_unchanged(service, rid, cid, tok)


@pytest.mark.parametrize("raw", [b"[]", b'"x"', b"1", b"null", b"true", b'[{"tool": "x"}]'])
def test_body_that_is_not_an_object_is_400(service, raw):
    rid, cid = key()
    r = claim_raw(service, rid, cid, raw)
    assert r.status == 400, r
    assert r.code in ("invalid_json", "invalid_field"), r
    assert_only_error(r, 400, r.code)
    assert_nothing_written(service, rid)
    assert_alive(service)


INVALID_UTF8 = [
    b'{"tool": "\xff"}',
    b'{"tool": "\xc0\xaf"}',           # overlong '/'
    b'{"tool": "\xed\xa0\x80"}',       # an encoded surrogate
    b'{"tool": "\xe2\x82"}',           # truncated sequence
    b'{"tool": "\xf4\x90\x80\x80"}',   # past U+10FFFF
    b'{"args": {"\xfe": 1}}',
    b'{"args": "ok"}\xff',
]


@pytest.mark.parametrize("raw", INVALID_UTF8, ids=range(len(INVALID_UTF8)))
def test_invalid_utf8_is_invalid_json(service, raw):
    rid, cid = key()
    assert_only_error(claim_raw(service, rid, cid, raw), 400, "invalid_json")
    assert_nothing_written(service, rid)
    assert_alive(service)


LONE_SURROGATES = [
    b'{"tool": "\\ud800"}',
    b'{"tool": "\\udc00"}',
    b'{"tool": "\\ud800x"}',
    b'{"tool": "\\ud800\\u0041"}',
    b'{"args": ["\\udbff"]}',
    b'{"args": {"\\ud800": 1}}',
]


@pytest.mark.parametrize("raw", LONE_SURROGATES, ids=range(len(LONE_SURROGATES)))
def test_lone_surrogate_is_invalid_json(service, raw):
    rid, cid = key()
    assert_only_error(claim_raw(service, rid, cid, raw), 400, "invalid_json")
    assert_nothing_written(service, rid)
    assert_alive(service)


def test_invalid_utf8_in_a_result_is_invalid_json(service):
    rid, cid, tok = claimed(service)
    for raw in (b'{"fencing_token": %d, "outcome": "succeeded", "result": "\xff"}' % tok,
                b'{"fencing_token": %d, "outcome": "succeeded", "result": "\\ud800"}' % tok):
        assert_only_error(post_raw(service, path(rid, cid, "complete"), raw), 400, "invalid_json")
    assert_unchanged(service, rid, cid, tok)


def test_valid_unicode_is_accepted(service):
    rid, cid = key()
    raw = '{"tool": "\\ud83d\\ude00 caf\u00e9", "owner": "\u00e9\u4e2d"}'.encode()
    r = claim_raw(service, rid, cid, raw)
    assert r.status == 201, r
    g = service.ledgerd.get(path(rid, cid), token=service.token("reviewer")).json
    assert g["tool"] == "\U0001F600 caf\u00e9"
    assert g["holder"]["owner"] == "\u00e9\u4e2d"


def test_empty_body_counts_as_an_empty_object(service):
    rid, cid = key()
    r = claim_raw(service, rid, cid, b"")
    assert r.status == 201, r
    assert leases_as_asked(r.json["lease_ms"], 30000)
    # For a call with a required field, the empty body lacks it.
    rid, cid, tok = claimed(service)
    assert_only_error(post_raw(service, path(rid, cid, "complete"), b""), 400, "invalid_field",
                 "fencing_token")
    assert_unchanged(service, rid, cid, tok)


# --- nesting ----------------------------------------------------------------


def test_deep_nesting_is_invalid_json(service):
    rid, cid = key()
    raw = ('{"claim_id": "%s", "args": %s}' % (claim_id(), nested(100))).encode()
    assert_only_error(claim_raw(service, rid, cid, raw), 400, "invalid_json")
    raw = ('{"args": %s}' % ("[" * 100000)).encode()
    assert_only_error(claim_raw(service, rid, cid, raw), 400, "invalid_json")
    assert_nothing_written(service, rid)
    assert_alive(service)


def test_a_large_body_its_parse_refuses_is_answered_once(service):
    """A body past the inline limit is parsed on an offload thread, and a
    refusal made there must wait for the call's wake: answered at once by
    the polling thread as well, the call was freed before the wake and
    ledgerd crashed (about one such request in ten did)."""
    too_deep = ('{"args": %s}' % ("[" * 100000)).encode()
    for _ in range(100):
        rid, cid = key()
        assert_only_error(claim_raw(service, rid, cid, too_deep), 400, "invalid_json")
    assert_alive(service)


def test_sixty_levels_of_args_are_fine(service):
    rid, cid = key()
    raw = ('{"claim_id": "%s", "args": %s}' % (claim_id(), nested(60))).encode()
    r = claim_raw(service, rid, cid, raw)
    assert r.status == 201, r


def test_nesting_limit_is_64_levels_counting_the_body(service):
    rid, cid = key()
    ok = ('{"args": %s}' % nested(63)).encode()       # 64 levels in all
    assert claim_raw(service, rid, cid, ok).status == 201
    rid, cid = key()
    too_deep = ('{"args": %s}' % nested(64)).encode()  # 65
    assert_only_error(claim_raw(service, rid, cid, too_deep), 400, "invalid_json")
    assert_nothing_written(service, rid)


def test_deep_result_is_invalid_json(service):
    rid, cid, tok = claimed(service)
    raw = ('{"fencing_token": %d, "outcome": "succeeded", "result": %s}'
           % (tok, nested(100))).encode()
    assert_only_error(post_raw(service, path(rid, cid, "complete"), raw), 400, "invalid_json")
    assert_unchanged(service, rid, cid, tok)


# --- fields -----------------------------------------------------------------


CLAIM_BAD_FIELDS = [
    ("claim_id", 123),
    ("claim_id", True),
    ("claim_id", ["0123456789abcdef"]),
    ("claim_id", "0123456789abcde"),        # 15: shorter than 16
    ("claim_id", "a" * 129),
    ("claim_id", "0123456789abcdef:"),
    ("claim_id", "0123456789abcdef/"),
    ("claim_id", "0123456789 abcdef"),
    ("claim_id", "\u00e9" * 16),
    ("tool", 5),
    ("tool", ["send"]),
    ("tool", ""),
    ("tool", "t" * 257),
    ("tool", "\u00e9" * 129),              # 258 bytes
    ("args_sha256", "xyz"),
    ("args_sha256", "A" * 64),
    ("args_sha256", "a" * 63),
    ("args_sha256", "a" * 65),
    ("args_sha256", "g" * 64),
    ("args_sha256", 5),
    ("store_args", "yes"),
    ("store_args", 1),
    ("attempt_id", 5),
    ("attempt_id", "a:b"),
    ("attempt_id", ""),
    ("attempt_id", "a" * 129),
    ("owner", []),
    ("owner", {}),
    ("owner", ""),
    ("owner", "o" * 257),
    ("lease_ms", "1000"),
    ("lease_ms", 99),
    ("lease_ms", 0),
    ("lease_ms", 3600001),
    ("lease_ms", -1000),
    ("lease_ms", 1000.5),
    ("lease_ms", True),
    ("lease_ms", MAX_SAFE + 1),
    ("lease_ms", 10 ** 30),
    ("tool_dedupes", 1),
    ("tool_dedupes", "true"),
]


@pytest.mark.parametrize("field,value", CLAIM_BAD_FIELDS,
                         ids=["%s-%d" % (f, i) for i, (f, _) in enumerate(CLAIM_BAD_FIELDS)])
def test_claim_field_of_wrong_type_or_range_is_invalid_field(service, field, value):
    rid, cid = key()
    body = {"claim_id": claim_id(), field: value}
    assert_only_error(claim(service, rid, cid, body), 400, "invalid_field", field)
    assert_nothing_written(service, rid)
    assert_alive(service)


def test_claim_accepts_the_boundaries(service):
    cases = [
        {"claim_id": "0123456789abcdef"},                  # 16
        {"claim_id": "A" * 128},
        {"claim_id": "az.AZ_09~-" * 2},
        {"tool": "t" * 256, "owner": "o" * 256},
        {"tool": "\u00e9" * 128},                         # 256 bytes
        {"lease_ms": 100},
        {"lease_ms": 3600000},
        {"args_sha256": "0123456789abcdef" * 4},
        {"store_args": False, "tool_dedupes": False},
    ]
    for body in cases:
        rid, cid = key()
        r = claim(service, rid, cid, body)
        assert r.status == 201, (body, r)
        if "lease_ms" in body:
            assert leases_as_asked(r.json["lease_ms"], body["lease_ms"])


def test_null_counts_as_an_absent_optional_field(service):
    rid, cid = key()
    body = {k: None for k in ("claim_id", "tool", "args_sha256", "store_args", "attempt_id",
                              "owner", "lease_ms", "tool_dedupes")}
    r = claim(service, rid, cid, body)
    assert r.status == 201, r
    assert leases_as_asked(r.json["lease_ms"], 30000)
    tok = r.json["fencing_token"]
    r = service.ledgerd.post(path(rid, cid, "renew"), {"fencing_token": tok, "lease_ms": None},
                             token=service.token("agent"))
    assert r.status == 200 and leases_as_asked(r.json["lease_ms"], 30000), r
    r = service.ledgerd.post(path(rid, cid, "complete"),
                             {"fencing_token": tok, "outcome": "succeeded", "result": None,
                              "retryable": None}, token=service.token("agent"))
    assert r.status == 200 and r.json["result"] is None, r


def test_null_args_count_as_absent_args(service):
    # docs/api.md Conventions: "null for an optional field is the same as
    # leaving it out": a claim with "args": null is a claim without args.
    rid, cid = key()
    cl = claim_id()
    assert claim(service, rid, cid, {"claim_id": cl, "args": None}).status == 201
    g = service.ledgerd.get(path(rid, cid), token=service.token("reviewer")).json
    assert g["args_sha256"] is None, g
    r = claim(service, rid, cid, {"claim_id": cl})
    assert r.status == 200, r


def test_null_result_counts_as_absent_for_not_executed(service):
    # "not_executed (which takes no result)"; a null result is no result.
    rid, cid, tok = claimed(service)
    r = service.ledgerd.post(path(rid, cid, "resolve"),
                             {"resolution": "not_executed", "result": None, "note": None},
                             token=service.token("admin"))
    assert r.status == 200, r
    assert r.json["status"] == "released"


OP_BAD_BODIES = [
    ("complete", {"outcome": "succeeded"}, "fencing_token"),
    ("complete", {"fencing_token": None, "outcome": "succeeded"}, "fencing_token"),
    ("complete", {"fencing_token": "1", "outcome": "succeeded"}, "fencing_token"),
    ("complete", {"fencing_token": -1, "outcome": "succeeded"}, "fencing_token"),
    ("complete", {"fencing_token": 1.5, "outcome": "succeeded"}, "fencing_token"),
    ("complete", {"fencing_token": MAX_SAFE + 1, "outcome": "succeeded"}, "fencing_token"),
    ("complete", {"fencing_token": True, "outcome": "succeeded"}, "fencing_token"),
    ("complete", {"fencing_token": 1}, "outcome"),
    ("complete", {"fencing_token": 1, "outcome": "ok"}, "outcome"),
    ("complete", {"fencing_token": 1, "outcome": "SUCCEEDED"}, "outcome"),
    ("complete", {"fencing_token": 1, "outcome": 1}, "outcome"),
    ("complete", {"fencing_token": 1, "outcome": "failed", "retryable": "no"}, "retryable"),
    ("complete", {"fencing_token": 1, "outcome": "succeeded", "retryable": True}, "retryable"),
    ("complete", {"fencing_token": 1, "outcome": "succeeded", "extra": 1}, "extra"),
    ("renew", {}, "fencing_token"),
    ("renew", {"fencing_token": "1"}, "fencing_token"),
    ("renew", {"fencing_token": 1, "lease_ms": 99}, "lease_ms"),
    ("renew", {"fencing_token": 1, "lease_ms": 3600001}, "lease_ms"),
    ("renew", {"fencing_token": 1, "lease_ms": "x"}, "lease_ms"),
    ("renew", {"fencing_token": 1, "lease_ms": 500.5}, "lease_ms"),
    ("renew", {"fencing_token": 1, "lease": 500}, "lease"),
    ("release", {}, "fencing_token"),
    ("release", {"fencing_token": -1}, "fencing_token"),
    ("release", {"fencing_token": 1, "reason": 5}, "reason"),
    ("release", {"fencing_token": 1, "reason": ""}, "reason"),
    ("release", {"fencing_token": 1, "reason": "r" * 257}, "reason"),
    ("release", {"fencing_token": 1, "why": "x"}, "why"),
    ("resolve", {}, "resolution"),
    ("resolve", {"resolution": "maybe"}, "resolution"),
    ("resolve", {"resolution": 1}, "resolution"),
    ("resolve", {"resolution": "succeeded", "note": 5}, "note"),
    ("resolve", {"resolution": "succeeded", "note": "n" * 257}, "note"),
    ("resolve", {"resolution": "not_executed", "result": {"x": 1}}, "result"),
    ("resolve", {"resolution": "failed", "comment": "x"}, "comment"),
]


@pytest.mark.parametrize("action,body,field", OP_BAD_BODIES,
                         ids=["%s-%s-%d" % (a, f, i)
                              for i, (a, _, f) in enumerate(OP_BAD_BODIES)])
def test_bad_body_of_a_call_on_a_held_key_is_invalid_field_and_changes_nothing(
        service, action, body, field):
    rid, cid, tok = claimed(service)
    role = "admin" if action == "resolve" else "agent"
    r = service.ledgerd.post(path(rid, cid, action), body, token=service.token(role))
    assert_only_error(r, 400, "invalid_field", field)
    assert_unchanged(service, rid, cid, tok)
    assert_alive(service)


def test_body_is_validated_before_the_key_is_looked_up(service):
    rid, cid = key()
    for action, body in (("complete", {"fencing_token": 1, "outcome": "nope"}),
                         ("renew", {"fencing_token": 1, "lease_ms": 1}),
                         ("release", {"fencing_token": "1"}),
                         ("resolve", {"resolution": "nope"})):
        role = "admin" if action == "resolve" else "agent"
        r = service.ledgerd.post(path(rid, cid, action), body, token=service.token(role))
        assert r.status == 400, (action, r)
    assert_nothing_written(service, rid)


def test_largest_safe_integer_passes_validation(service):
    rid, cid, tok = claimed(service)
    r = service.ledgerd.post(path(rid, cid, "complete"),
                             {"fencing_token": MAX_SAFE, "outcome": "succeeded"},
                             token=service.token("agent"))
    # A valid integer, but a token never issued.
    assert_only_error(r, 409, "stale_token")


UNKNOWN_FIELDS = [
    {"claimid": "0123456789abcdef"},
    {"Claim_id": "0123456789abcdef"},
    {"claim_id": "0123456789abcdef", "fencing_token": 1},
    {"claim_id": "0123456789abcdef", "idempotency_key": "x"},
]


@pytest.mark.parametrize("body", UNKNOWN_FIELDS, ids=range(len(UNKNOWN_FIELDS)))
def test_unknown_claim_field_is_invalid_field(service, body):
    rid, cid = key()
    unknown = [k for k in body if k not in ("claim_id",)][0]
    assert_only_error(claim(service, rid, cid, body), 400, "invalid_field", unknown)
    assert_nothing_written(service, rid)


# --- ids in the path --------------------------------------------------------


def bad_id_paths(prefix):
    """(path, field) pairs: each has one invalid id beginning with @prefix."""
    ok = "c-ok"
    return [
        (path(prefix + ":b", ok, "claim"), "request_id"),
        (path(prefix + "%2Fb", ok, "claim"), "request_id"),
        (path(prefix + "%2fb", ok, "claim"), "request_id"),
        ("/v1/requests/%s/b/tool-calls/%s/claim" % (prefix, ok), "request_id"),
        (path(prefix + "%00", ok, "claim"), "request_id"),
        (path(prefix + "%zz", ok, "claim"), "request_id"),
        (path(prefix + "%4", ok, "claim"), "request_id"),
        (path(prefix + "%", ok, "claim"), "request_id"),
        (path(prefix + "%C3%A9", ok, "claim"), "request_id"),
        (path(prefix + "%20b", ok, "claim"), "request_id"),
        (path(prefix + "%3A", ok, "claim"), "request_id"),
        (path(prefix + "x" * (129 - len(prefix)), ok, "claim"), "request_id"),
        (path(prefix, "c:1", "claim"), "tool_call_id"),
        (path(prefix, "c%2F1", "claim"), "tool_call_id"),
        (path(prefix, "c%00", "claim"), "tool_call_id"),
        (path(prefix, "c%zz", "claim"), "tool_call_id"),
        (path(prefix, "c" * 129, "claim"), "tool_call_id"),
    ]


def test_invalid_ids_in_the_path_are_invalid_id(service):
    prefix = new_id("bad")
    for p, field in bad_id_paths(prefix):
        r = post_raw(service, p, b'{"claim_id": "0123456789abcdef"}')
        assert_only_error(r, 400, "invalid_id", field)
    assert rows(service, prefix + "%") == 0
    assert int(service.sql("SELECT count(*) FROM tool_calls WHERE tool_call_id LIKE 'c%%'"
                           " AND request_id = '%s'" % prefix)[0][0]) == 0
    assert_alive(service)


def test_invalid_ids_in_get_and_other_calls_are_invalid_id(service):
    prefix = new_id("bad")
    t = service.token("admin")
    for p, field in bad_id_paths(prefix):
        one = p[:-len("/claim")]
        assert_only_error(service.ledgerd.get(one, token=t), 400, "invalid_id", field)
        for action in ("renew", "complete", "release", "resolve"):
            r = service.ledgerd.post(one + "/" + action, {}, token=t)
            assert_only_error(r, 400, "invalid_id", field)
    assert rows(service, prefix + "%") == 0
    assert_alive(service)


def test_ids_of_128_bytes_are_accepted(service):
    rid = (new_id("r") + "-" + "R" * 128)[:128]
    cid = (new_id("c") + "." + "C" * 128)[:128]
    assert len(rid) == 128 and len(cid) == 128
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 201, r
    assert r.json["idempotency_key"] == "%s:%s" % (rid, cid)
    g = service.ledgerd.get(path(rid, cid), token=service.token("reviewer"))
    assert g.status == 200 and g.json["request_id"] == rid and g.json["tool_call_id"] == cid, g


def test_ids_use_the_whole_allowed_alphabet(service):
    rid = new_id("r") + ".A_z~9-"
    cid = "~._-AZaz09"
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 201, r


# --- sizes ------------------------------------------------------------------


def test_body_over_1mib_with_content_length_is_413(service):
    rid, cid = key()
    r = post_sized(service, path(rid, cid, "claim"), padded_claim(MIB + 1))
    assert r.status == 413, r
    assert json.loads(r.body)["error"]["code"] == "body_too_large"
    r = post_sized(service, path(rid, cid, "claim"), padded_claim(4 * MIB))
    assert r.status == 413, r
    assert_nothing_written(service, rid)
    assert_alive(service)


def test_body_over_1mib_chunked_is_413(service):
    rid, cid = key()
    body = padded_claim(MIB + 1)
    chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]
    r = post_chunked(service, path(rid, cid, "claim"), chunks)
    assert r.status == 413, r
    assert json.loads(r.body)["error"]["code"] == "body_too_large"
    assert_nothing_written(service, rid)
    assert_alive(service)


def plain_post(service, p, body, token=None, chunked=False):
    """POSTs as most scripts do (Python's http.client): the whole body is
    written before the answer is read, with no Expect: 100-continue."""
    conn = http.client.HTTPConnection(service.ledgerd.host, service.ledgerd.port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    try:
        if chunked:
            chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]
            conn.request("POST", p, body=iter(chunks), encode_chunked=True, headers=headers)
        else:
            conn.request("POST", p, body=body, headers=headers)
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode())
    finally:
        conn.close()


@pytest.mark.parametrize("chunked", [False, True], ids=["content_length", "chunked"])
def test_a_client_that_writes_the_whole_body_first_reads_the_413(service, chunked):
    rid, cid = key()
    # Over a network 2 MiB is enough to break; loopback's buffers absorb a few
    # MiB more before the close is felt, so the body is larger here.
    r = plain_post(service, path(rid, cid, "claim"), padded_claim(6 * MIB),
                   token=service.token("agent"), chunked=chunked)
    assert r.status == 413, r
    err = json.loads(r.body)["error"]
    assert err["code"] == "body_too_large" and err["message"], err
    assert_nothing_written(service, rid)
    assert_alive(service)


def test_a_client_that_writes_the_whole_body_first_reads_the_401(service):
    rid, cid = key()
    r = plain_post(service, path(rid, cid, "claim"), padded_claim(6 * MIB))
    assert r.status == 401, r
    assert json.loads(r.body)["error"]["code"] == "unauthorized"
    assert_alive(service)


def test_body_of_exactly_1mib_is_accepted(service):
    rid, cid = key()
    body = padded_claim(MIB)
    assert len(body) == MIB
    r = post_sized(service, path(rid, cid, "claim"), body)
    assert r.status == 201, r
    rid, cid = key()
    chunks = [body[i:i + 100000] for i in range(0, len(body), 100000)]
    r = post_chunked(service, path(rid, cid, "claim"), chunks)
    assert r.status == 201, r


# --- paths, methods, queries ------------------------------------------------


UNKNOWN_PATHS = [
    ("GET", "/"),
    ("GET", "/v1"),
    ("GET", "/v1/nothing"),
    ("POST", "/v1/requests/r/tool-calls/c/bogus"),
    ("POST", "/v1/requests/r/tool-calls/c/claim/extra"),
    ("GET", "/v1/tool-calls/extra"),
    ("GET", "/v2/tool-calls"),
    ("GET", "/healthz/x"),
    ("GET", "/V1/tool-calls"),
]


@pytest.mark.parametrize("method,p", UNKNOWN_PATHS, ids=[p for _, p in UNKNOWN_PATHS])
def test_unknown_path_is_404_not_found(service, method, p):
    r = service.ledgerd.request(method, p, token=service.token("admin"))
    assert_only_error(r, 404, "not_found")
    # Without a token as well: the path is checked first.
    assert_only_error(service.ledgerd.request(method, p), 404, "not_found")


WRONG_METHODS = [
    ("GET", "/v1/requests/r/tool-calls/c/claim", "POST"),
    ("PUT", "/v1/requests/r/tool-calls/c/claim", "POST"),
    ("DELETE", "/v1/requests/r/tool-calls/c/complete", "POST"),
    ("GET", "/v1/requests/r/tool-calls/c/resolve", "POST"),
    ("POST", "/v1/requests/r/tool-calls/c", "GET, HEAD"),
    ("DELETE", "/v1/requests/r/tool-calls/c", "GET, HEAD"),
    ("POST", "/v1/tool-calls", "GET, HEAD"),
    ("PATCH", "/v1/tool-calls", "GET, HEAD"),
    ("POST", "/healthz", "GET, HEAD"),
    ("DELETE", "/metrics", "GET, HEAD"),
]


@pytest.mark.parametrize("method,p,allowed", WRONG_METHODS,
                         ids=["%s %s" % (m, p) for m, p, _ in WRONG_METHODS])
def test_wrong_method_is_405_with_allow(service, method, p, allowed):
    for token in (service.token("admin"), None):
        r = service.ledgerd.request(method, p, token=token)
        assert_only_error(r, 405, "method_not_allowed")
        allow = r.header("Allow")
        assert allow is not None, r
        assert allow == allowed, allow


HEAD_PATHS = ["/healthz", "/readyz", "/metrics", "/v1/whoami", "/v1/tool-calls",
              "/v1/requests", "/v1/requests/r-none", "/v1/requests/r-none/tool-calls/c",
              "/ui/"]


@pytest.mark.parametrize("p", HEAD_PATHS)
def test_head_is_served_wherever_get_is(service, p):
    """RFC 9110 9.3.2: HEAD answers as GET would, the same status and fields,
    Content-Length included (the metrics' own counters move between the two),
    and no body."""
    token = service.token("admin")
    got = service.ledgerd.request("GET", p, token=token)
    head = service.ledgerd.request("HEAD", p, token=token)
    assert head.status == got.status, (head, got)
    assert head.body == "", head
    length = head.header("Content-Length")
    if p == "/metrics":
        assert int(length) > 0, head.headers
    else:
        assert length == str(len(got.body.encode())), (head.headers, got)
    assert head.header("Content-Type") == got.header("Content-Type")


def test_unknown_query_parameter_is_invalid_field(service):
    r = service.ledgerd.get("/v1/tool-calls?foo=1", token=service.token("admin"))
    assert_only_error(r, 400, "invalid_field", "foo")
    r = service.ledgerd.get("/v1/tool-calls?state=unknown&Limit=5",
                            token=service.token("admin"))
    assert_only_error(r, 400, "invalid_field", "Limit")
    rid, cid = key()
    r = service.ledgerd.post(path(rid, cid, "claim") + "?lease_ms=1000",
                             {"claim_id": claim_id()}, token=service.token("agent"))
    assert_only_error(r, 400, "invalid_field", "lease_ms")
    assert_nothing_written(service, rid)
    r = service.ledgerd.get(path(rid, cid) + "?x=1", token=service.token("reviewer"))
    assert_only_error(r, 400, "invalid_field", "x")
    assert_alive(service)


def test_process_survives_a_burst_of_bad_input(service):
    rid, cid = key()
    for raw in INVALID_JSON + DUPLICATES + INVALID_UTF8 + LONE_SURROGATES:
        assert claim_raw(service, rid, cid, raw).status == 400
    assert_alive(service)
    r = claim(service, rid, cid, {"claim_id": claim_id()})
    assert r.status == 201, r


def test_eight_kib_of_headers_are_served_and_a_huge_head_is_not(service):
    """A connection's memory is bounded: proxies' usual 8 KiB of headers fit;
    a head several times larger is refused (431, or the connection closed
    before the client finished sending it), and the server goes on."""
    led = service.ledgerd
    token = service.token("agent")
    path = "/v1/requests/%s/tool-calls/call_01/claim" % new_id()
    pad = {"X-Pad-%d" % i: "p" * 1000 for i in range(8)}
    r = led.post(path, {"claim_id": claim_id()}, token=token, headers=pad)
    assert r.status == 201, r
    try:
        r = led.get("/healthz", headers={"X-Pad": "p" * 40000})
        assert r.status == 431, r
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert led.get("/healthz").status == 200
