"""The Python client (sdk/python, package ledger_client) against a live ledgerd.

Every outcome of Ledger.tool_call (executed, replayed, failed, Retryable,
NotExecuted, in progress with and without waiting, unknown, args mismatch,
fenced attempt, expired result, unreachable ledgerd, attempt required),
the claim renewal of a long tool, the completion retried across a ledgerd
restart and a database outage, the unrecorded outcome, the decorator, the
router helper through a whole failover, the RFC 8785 vectors and the
fingerprint shared with the server, and the agent-side example.

Tests that stop ledgerd or PostgreSQL start them again before they end.
Router tests work in tenants of their own: the pool-wide retry budget is
counted per tenant.
"""

import ctypes
import decimal
import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from answer_thief import AnswerThief
from conftest import LEDGERD, claim_id, free_port, new_id

ROOT = Path(__file__).resolve().parents[3]
SDK = ROOT / "sdk" / "python"
JCS = ROOT / "tests" / "data" / "jcs"
EXAMPLE = ROOT / "sdk" / "python" / "examples" / "send_email.py"
sys.path.insert(0, str(SDK))

from ledger_client import (  # noqa: E402
    ArgsMismatch, AttemptFenced, InProgress, Ledger, LedgerError, LedgerUnavailable,
    NotExecuted, OutcomeUnknown, RequestClosed, ResultExpired, Retryable, ToolCallCounter,
    args_sha256, canonicalize, canonicalize_text, stable_tool_call_id)
from ledger_client.jcs import format_number  # noqa: E402


# --- helpers ----------------------------------------------------------------


def url(service):
    return "http://%s:%d" % (service.ledgerd.host, service.ledgerd.port)


def agent(service, **kw):
    """A Ledger with the agent token of tenant t1."""
    return Ledger(url(service), service.token("agent"), **kw)


def reviewer(service, tenant="t1"):
    """A Ledger that may read every request of @tenant."""
    return Ledger(url(service), service.token("router", tenant))


def router(service):
    """A Ledger with a router token of a tenant of its own."""
    return Ledger(url(service), service.token("router", new_id("t")))


def key():
    return new_id("r"), new_id("c")


def tool_path(rid, cid, action=None):
    p = "/v1/requests/%s/tool-calls/%s" % (rid, cid)
    return p + "/" + action if action else p


def raw_post(service, path, body=None, raw=None, token=None):
    return service.ledgerd.post(path, body, raw=raw, token=token or service.token("agent"))


def raw_claim(service, rid, cid, **fields):
    """A claim by another holder, over plain HTTP; returns the answer."""
    fields.setdefault("claim_id", claim_id())
    return raw_post(service, tool_path(rid, cid, "claim"), fields)


def event_types(service, rid):
    return [e["type"] for e in reviewer(service).get_request(rid)["events"]]


def must_not_run(idempotency_key, fencing_token):
    pytest.fail("the tool ran again for %s" % idempotency_key)


class Tool:
    """A tool function that counts its calls and returns @result."""

    def __init__(self, result=None, error=None):
        self.calls = []
        self.result = result
        self.error = error

    def __call__(self, idempotency_key, fencing_token):
        self.calls.append((idempotency_key, fencing_token))
        if self.error is not None:
            raise self.error
        return self.result




# --- RFC 8785 and the fingerprint -------------------------------------------


def expected_output(name):
    """The canonical form of input/NAME: exact_output/ holds the vectors the
    exact-number rule changes (tests/data/jcs/README.md), output/ the rest."""
    exact = JCS / "exact_output" / name
    return (exact if exact.exists() else JCS / "output" / name).read_bytes()


def exact_number_cases():
    """(input, expected) of tests/data/jcs/exact_numbers.txt; expected None: refused."""
    cases = []
    for line in (JCS / "exact_numbers.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            text, want = line.split("\t")
            cases.append((text, None if want == "refused" else want))
    return cases


@pytest.mark.parametrize("name", sorted(p.name for p in (JCS / "input").glob("*.json")))
def test_jcs_vector_files(name):
    text = (JCS / "input" / name).read_bytes()
    assert canonicalize_text(text) == expected_output(name)


def test_jcs_number_vectors():
    lines = (JCS / "numbers.txt").read_text().splitlines()
    assert len(lines) > 30000
    wrong = []
    for line in lines:
        pattern, want = line.split(",")
        # The double written as JCS writes it, and that text as its own canonical form.
        got = format_number(struct.unpack(">d", bytes.fromhex(pattern))[0])
        again = canonicalize_text(want).decode()
        if got != want or again != want:
            wrong.append((pattern, want, got, again))
    assert wrong == []


def test_jcs_exact_number_vectors():
    cases = exact_number_cases()
    assert len(cases) >= 100
    wrong = []
    for text, want in cases:
        try:
            got = canonicalize_text(text).decode()
        except ValueError:
            got = None
        if got != want or (want is not None and canonicalize_text(want).decode() != want):
            wrong.append((text[:80], want and want[:80], got and got[:80]))
    assert wrong == []


def literal_rule(text):
    """The canonical text of a JSON number as api.md words the rule: JCS's text
    of the nearest double when that text has exactly the number's value, else
    the same layout of the number's own digits; None beyond the double range.
    Decimal stands in for exact values; format_number, checked against
    numbers.txt above, for JCS."""
    d = float(text)
    if d in (float("inf"), float("-inf")):
        return None
    jcs = format_number(d)
    exact = decimal.Decimal(text)
    if decimal.Decimal(jcs) == exact:
        return jcs
    sign, coefficient, exponent = exact.as_tuple()
    digits = "".join(map(str, coefficient)).lstrip("0")
    point = len(digits) + exponent
    digits = digits.rstrip("0")
    head = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    lead = "-" if sign else ""
    if len(digits) <= point <= 21:
        return lead + digits + "0" * (point - len(digits))
    if 0 < point <= 21:
        return lead + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return lead + "0." + "0" * -point + digits
    return "%s%se%s%d" % (lead, head, "+" if point >= 1 else "-", abs(point - 1))


def random_number_texts(n, seed=8785):
    """JSON number texts: doubles' shortest and longer spellings, and decimals
    of up to 40 digits with exponents around the double range."""
    rnd = random.Random(seed)
    texts = []
    for _ in range(n):
        if rnd.random() < 0.3:
            f = rnd.random() * 10.0 ** rnd.randint(-330, 308)
            text = repr(f) if rnd.random() < 0.5 else "%.*g" % (rnd.randint(1, 25), f)
        else:
            text = str(rnd.randint(0, 10 ** rnd.randint(1, 40)))
            if rnd.random() < 0.5:
                text += "." + "".join(rnd.choice("0123456789")
                                      for _ in range(rnd.randint(1, 25)))
            if rnd.random() < 0.6:
                text += rnd.choice("eE") + rnd.choice(["", "+", "-"]) + str(rnd.randint(0, 400))
        texts.append(("-" if rnd.random() < 0.3 else "") + text)
    return texts


def test_jcs_numbers_follow_the_rule_as_worded():
    wrong = []
    for text in random_number_texts(50000):
        try:
            got = canonicalize_text(text).decode()
        except ValueError:
            got = None
        if got != literal_rule(text):
            wrong.append((text, literal_rule(text), got))
    assert wrong[:10] == []


def c_canonicalize():
    """ledger_client_canonicalize of the C SDK's shared library, through ctypes."""
    lib = ctypes.CDLL(str(LEDGERD.parent / "libledger_client.so"))
    fn = lib.ledger_client_canonicalize
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
                   ctypes.POINTER(ctypes.c_size_t)]
    fn.restype = ctypes.c_int
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]

    def canonical(text):
        raw = text.encode()
        out, n = ctypes.c_void_p(), ctypes.c_size_t()
        if fn(raw, len(raw), ctypes.byref(out), ctypes.byref(n)) != 0:
            return None
        try:
            return ctypes.string_at(out, n.value).decode()
        finally:
            libc.free(out)
    return canonical


def test_jcs_numbers_c_and_python_agree():
    """The C library (the server's own code) and this SDK give the same bytes,
    or both refuse, for every vector and for random spellings."""
    canonical = c_canonicalize()
    texts = [t for t, _ in exact_number_cases()] + random_number_texts(50000, seed=1)
    texts += ["[%s]" % line.split(",")[1]
              for line in (JCS / "numbers.txt").read_text().splitlines()]
    wrong = []
    for text in texts:
        try:
            mine = canonicalize_text(text).decode()
        except ValueError:
            mine = None
        if canonical(text) != mine:
            wrong.append((text[:80], canonical(text), mine))
    assert wrong[:10] == []


def test_jcs_of_python_values():
    assert canonicalize({"b": [1, 2.5, True, None], "a": "x"}) == b'{"a":"x","b":[1,2.5,true,null]}'
    assert canonicalize(-0.0) == b"0"
    assert canonicalize(10 ** 21) == b"1e+21"
    # An int is its digits, as json.dumps sends it: 2^53 + 1 is not the double 2^53.
    assert canonicalize(2 ** 53 + 1) == b"9007199254740993"
    assert canonicalize(-(2 ** 64) - 1) == b"-18446744073709551617"
    assert canonicalize(10 ** 22 + 1) == b"1.0000000000000000000001e+22"
    assert canonicalize(1.5e-7) == b"1.5e-7"
    assert canonicalize(0.000001) == b"0.000001"
    assert canonicalize(1e23) == b"1e+23"
    assert canonicalize(0.1 + 0.2) == b"0.30000000000000004"
    # A Decimal is its own digits.
    D = decimal.Decimal
    assert canonicalize(D("0.30000000000000000001")) == b"0.30000000000000000001"
    assert canonicalize([D("1.10"), D("-0"), D("1E+2"), D("1E-400"), D("12.5e-7")]) == \
        b"[1.1,0,100,1e-400,0.00000125]"
    assert canonicalize(D("1234567890123456789")) == canonicalize(1234567890123456789)
    assert canonicalize("\u2028\x7f\x1f\b\"\\/") == '"\u2028\x7f\\u001f\\b\\"\\\\/"'.encode()
    # UTF-16 order: U+1F600 (surrogates D83D..) sorts before U+E000.
    assert canonicalize({"\ue000": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ue000":1}'.encode()
    for bad in (float("nan"), float("inf"), 10 ** 400, -(10 ** 309), D("1e400"), D("NaN"),
                D("-Infinity"), "\ud800"):
        with pytest.raises(ValueError):
            canonicalize(bad)
    with pytest.raises(TypeError):
        canonicalize({1: "a"})
    with pytest.raises(TypeError):
        canonicalize({"a": object()})
    for text in ('{"a": 1, "a": 2}', "[NaN]", "[1e400]", '{"a": 1', b"\xff",
                 "1e" + "9" * 5000):
        with pytest.raises(ValueError):
            canonicalize_text(text)
    # Once the double 1.2345678901234568e+29 (JCS): now the number's own digits.
    assert canonicalize_text("123456789012345678901234567890") == \
        b"1.2345678901234567890123456789e+29"
    # Exponents past Python's 4300-digit int conversions are still exact.
    assert canonicalize_text("1.5e-" + "9" * 5000) == b"1.5e-" + b"9" * 5000
    assert canonicalize_text("0e" + "9" * 5000) == b"0"
    assert args_sha256({"a": 1}) == hashlib.sha256(b'{"a":1}').hexdigest()


FINGERPRINT_ARGS = [
    {"to": "ana@example.com", "subject": "Your refund", "amount": 12.5},
    {"z": [1, 2.0, -0.0, 1e21, 1e-7, 123456789.125], "a": {"nested": [True, False, None]}},
    {"\u20ac": "euro", "\U0001f600": "smiley", "\ufb33": "dalet", "\n": "newline",
     "ctl": "\x01\x1f\x7f", "quote": "\"\\/"},
    [333333333.33333329, 4.5, 2e-3, 1e-27, 9007199254740993],
    {"order_id": 1234567890123456789, "big": 10 ** 30 + 7, "neg": -(2 ** 63) - 1},
    "just a string",
]


@pytest.mark.parametrize("args", FINGERPRINT_ARGS)
def test_fingerprint_equals_the_servers(service, args):
    rid, cid = key()
    r = raw_claim(service, rid, cid, args=args)
    assert r.status == 201, r
    assert agent(service).get_tool_call(rid, cid)["args_sha256"] == args_sha256(args)


@pytest.mark.parametrize("name", sorted(p.name for p in (JCS / "input").glob("*.json")))
def test_fingerprint_of_the_vector_files_equals_the_servers(service, name):
    text = (JCS / "input" / name).read_text(encoding="utf-8")
    rid, cid = key()
    raw = '{"claim_id": "%s", "args": %s}' % (claim_id(), text)
    r = raw_post(service, tool_path(rid, cid, "claim"), raw=raw.encode("utf-8"))
    assert r.status == 201, r
    expected = hashlib.sha256(expected_output(name)).hexdigest()
    assert agent(service).get_tool_call(rid, cid)["args_sha256"] == expected
    assert hashlib.sha256(canonicalize_text(text)).hexdigest() == expected


def test_fingerprint_of_the_exact_number_vectors_equals_the_servers(service):
    """The server fingerprints each vector as the SDK does, and refuses with
    400 invalid_json what the SDK refuses."""
    for text, want in exact_number_cases():
        rid, cid = key()
        raw = '{"claim_id": "%s", "args": %s}' % (claim_id(), text)
        r = raw_post(service, tool_path(rid, cid, "claim"), raw=raw.encode("utf-8"))
        if want is None:
            assert r.status == 400 and r.json["error"]["code"] == "invalid_json", (text, r)
            continue
        assert r.status == 201, (text, r)
        expected = hashlib.sha256(want.encode()).hexdigest()
        assert agent(service).get_tool_call(rid, cid)["args_sha256"] == expected, text
        assert hashlib.sha256(canonicalize_text(text)).hexdigest() == expected


def test_fingerprint_of_decimals_equals_the_servers(service):
    """A Decimal fingerprints like the same digits sent as JSON text."""
    args = {"amount": decimal.Decimal("0.30000000000000000001"), "id": 1234567890123456789}
    rid, cid = key()
    raw = ('{"claim_id": "%s", "args": {"id": 1234567890123456789,'
           ' "amount": 0.300000000000000000010}}' % claim_id())
    r = raw_post(service, tool_path(rid, cid, "claim"), raw=raw.encode())
    assert r.status == 201, r
    assert agent(service).get_tool_call(rid, cid)["args_sha256"] == args_sha256(args)


def test_store_args_sends_the_args_and_the_server_keeps_them(service):
    args = {"to": "ana@example.com", "cc": ["b@example.com"], "n": 3}
    rid, cid = key()
    r = agent(service).tool_call(rid, cid, Tool({"ok": True}), args=args, store_args=True)
    assert r.outcome == "succeeded"
    call = agent(service).get_tool_call(rid, cid)
    assert call["args"] == args
    assert call["args_sha256"] == args_sha256(args)


def test_store_args_of_numbers_json_dumps_cannot_send(service):
    """Decimals and big ints go out as their canonical text, with the
    fingerprint beside it: the server finds the same one (or it would refuse
    with 400), and the call is recognised without store_args too."""
    D = decimal.Decimal
    args = {"amount": D("12.50"), "rate": D("1E-400"), "order_id": 2 ** 64 + 1, "f": 0.1}
    rid, cid = key()
    r = agent(service).tool_call(rid, cid, Tool({"ok": True}), args=args, store_args=True)
    assert r.outcome == "succeeded"
    call = agent(service).get_tool_call(rid, cid)
    assert call["args_sha256"] == args_sha256(args)
    assert call["args"] == json.loads(canonicalize(args))
    r = agent(service).tool_call(rid, cid, must_not_run, args=args)
    assert r.replayed


# --- tool_call: every outcome -------------------------------------------------


def test_executed_runs_once_and_records_succeeded(service):
    rid, cid = key()
    tool = Tool({"message_id": "m-1", "n": [1, 2]})
    r = agent(service).tool_call(rid, cid, tool, tool="send_email", args={"to": "a"},
                                 owner="mailer@pod-7")
    assert tool.calls == [("%s:%s" % (rid, cid), 1)]
    assert (r.executed, r.replayed, r.outcome, r.recorded) == (True, False, "succeeded", True)
    assert r.result == {"message_id": "m-1", "n": [1, 2]}
    assert json.loads(r.result_json) == r.result
    assert r.idempotency_key == "%s:%s" % (rid, cid) and r.fencing_token == 1
    assert r.completion_error is None
    call = agent(service).get_tool_call(rid, cid)
    assert call["state"] == "succeeded" and call["result"] == r.result
    assert call["tool"] == "send_email" and call["args_sha256"] == args_sha256({"to": "a"})
    assert call["tool_dedupes"] is False
    assert event_types(service, rid) == ["claimed", "completed"]


def test_replayed_returns_the_stored_text_without_running(service):
    rid, cid = key()
    first = agent(service).tool_call(rid, cid, Tool({"id": 7}), tool="t", args={"a": 1})
    r = agent(service).tool_call(rid, cid, must_not_run, tool="t", args={"a": 1})
    assert (r.executed, r.replayed, r.outcome, r.recorded) == (False, True, "succeeded", True)
    assert r.result == {"id": 7} and r.result_json == first.result_json
    assert r.idempotency_key == "%s:%s" % (rid, cid) and r.fencing_token is None
    # Byte for byte what was stored, however it was spelt.
    rid, cid = key()
    tok = raw_claim(service, rid, cid).json["fencing_token"]
    stored = '{ "b" :[1,  2.50, "\\u00e9"], "a":1E2 }'
    complete = '{"fencing_token": %d, "outcome": "succeeded", "result": %s}' % (tok, stored)
    assert raw_post(service, tool_path(rid, cid, "complete"), raw=complete.encode()).status == 200
    r = agent(service).tool_call(rid, cid, must_not_run)
    assert r.result_json == stored
    assert r.result == {"b": [1, 2.5, "\u00e9"], "a": 100.0}


def test_failure_is_recorded_reraised_then_replayed_as_failed(service):
    rid, cid = key()
    tool = Tool(error=ValueError("mailbox full"))
    with pytest.raises(ValueError, match="mailbox full"):
        agent(service).tool_call(rid, cid, tool, tool="send_email")
    assert len(tool.calls) == 1
    call = agent(service).get_tool_call(rid, cid)
    assert call["state"] == "failed"
    assert call["result"] == {"error": "ValueError", "message": "mailbox full"}
    r = agent(service).tool_call(rid, cid, must_not_run, tool="send_email")
    assert (r.executed, r.replayed, r.outcome) == (False, True, "failed")
    assert r.result == {"error": "ValueError", "message": "mailbox full"}


def test_result_json_cannot_carry_is_a_recorded_failure(service):
    rid, cid = key()
    with pytest.raises(TypeError):
        agent(service).tool_call(rid, cid, Tool({"when": object()}))
    call = agent(service).get_tool_call(rid, cid)
    assert call["state"] == "failed" and call["result"]["error"] == "TypeError"


def test_retryable_makes_the_key_claimable_again(service):
    rid, cid = key()
    with pytest.raises(Retryable):
        agent(service).tool_call(rid, cid, Tool(error=Retryable("smtp timeout")))
    assert agent(service).get_tool_call(rid, cid)["state"] == "released"
    tool = Tool({"sent": True})
    r = agent(service).tool_call(rid, cid, tool)
    assert len(tool.calls) == 1 and tool.calls[0][1] == 2  # a new holder, a higher token
    assert r.executed and r.outcome == "succeeded"
    assert event_types(service, rid) == ["claimed", "released", "claimed", "completed"]


def test_not_executed_releases_the_key_and_reraises(service):
    rid, cid = key()
    with pytest.raises(NotExecuted, match="invalid address"):
        agent(service).tool_call(rid, cid, Tool(error=NotExecuted("invalid address")))
    assert agent(service).get_tool_call(rid, cid)["state"] == "released"
    events = reviewer(service).get_request(rid)["events"]
    assert [e["type"] for e in events] == ["claimed", "released"]
    assert events[1]["detail"]["reason"] == "invalid address"
    r = agent(service).tool_call(rid, cid, Tool("done"))
    assert r.executed and r.result == "done" and r.fencing_token == 2


def test_in_progress_without_waiting_raises_with_the_retry_hint(service):
    rid, cid = key()
    assert raw_claim(service, rid, cid, owner="other@pod-2", lease_ms=10000).status == 201
    tool = Tool()
    started = time.monotonic()
    with pytest.raises(InProgress) as e:
        agent(service).tool_call(rid, cid, tool, wait_s=0)
    assert time.monotonic() - started < 1
    assert tool.calls == []
    assert e.value.status == 409 and e.value.code == "in_progress"
    assert 0 < e.value.retry_after_ms <= 10000
    assert e.value.retry_after_ms == e.value.body["error"]["retry_after_ms"]
    assert e.value.details["holder"]["owner"] == "other@pod-2"


def test_in_progress_waits_for_the_holder_and_replays_its_result(service):
    rid, cid = key()
    r = raw_claim(service, rid, cid, tool="t", args={"a": 1}, lease_ms=10000)
    assert r.status == 201, r

    def holder_completes():
        time.sleep(1)
        done = raw_post(service, tool_path(rid, cid, "complete"),
                        {"fencing_token": r.json["fencing_token"], "outcome": "succeeded",
                         "result": {"by": "other"}})
        assert done.status == 200, done

    other = threading.Thread(target=holder_completes)
    other.start()
    started = time.monotonic()
    try:
        result = agent(service).tool_call(rid, cid, must_not_run, tool="t", args={"a": 1},
                                          wait_s=3)
    finally:
        other.join()
    assert 0.9 < time.monotonic() - started < 3
    assert result.replayed and result.result == {"by": "other"}


def test_outcome_unknown_after_the_holders_lease_ran_out(service):
    rid, cid = key()
    assert raw_claim(service, rid, cid, lease_ms=100).status == 201
    time.sleep(0.3)
    with pytest.raises(OutcomeUnknown) as e:
        agent(service).tool_call(rid, cid, must_not_run, wait_s=2)
    assert e.value.status == 409 and e.value.code == "outcome_unknown"


def test_other_args_on_the_same_key_is_args_mismatch(service):
    rid, cid = key()
    agent(service).tool_call(rid, cid, Tool(1), tool="pay", args={"amount": 100})
    with pytest.raises(ArgsMismatch) as e:
        agent(service).tool_call(rid, cid, must_not_run, tool="pay", args={"amount": 200})
    assert e.value.status == 422
    assert e.value.details["field"] == "args"
    assert e.value.details["expected_args_sha256"] == args_sha256({"amount": 100})
    assert e.value.details["got_args_sha256"] == args_sha256({"amount": 200})


def test_claim_under_a_fenced_attempt_raises_attempt_fenced(service):
    led = router(service)
    rid = new_id("r")
    a1 = led.begin_attempt(rid, new_id("a"))
    # Cancelled behind this object's back, as another router would: the same
    # attempt again is answered with the same attempt.
    led.begin_attempt(rid, a1.attempt_id).cancel("zombie")
    assert not a1.revoked
    with pytest.raises(AttemptFenced) as e:
        led.tool_call(rid, "call_00", must_not_run, attempt=a1)
    assert e.value.status == 409
    assert a1.revoked
    with pytest.raises(AttemptFenced):
        led.tool_call(rid, "call_00", must_not_run, attempt_id=a1.attempt_id)


def test_settled_and_retained_call_is_result_expired(service):
    rid, cid = key()
    # A tombstone, as retention leaves it.
    service.sql("INSERT INTO tool_call_tombstones (tenant, request_id, tool_call_id,"
                " args_sha256, outcome, completed_at, expires_at) VALUES"
                " ('t1', '%s', '%s', NULL, 'succeeded', now() - interval '30 days',"
                " now() + interval '60 days')" % (rid, cid))
    with pytest.raises(ResultExpired) as e:
        agent(service).tool_call(rid, cid, must_not_run)
    assert e.value.status == 410 and e.value.details["outcome"] == "succeeded"


def test_unreachable_ledger_raises_ledger_unavailable_without_running(service):
    led = Ledger("http://127.0.0.1:%d" % free_port(), service.token("agent"), retry_s=0.5)
    tool = Tool()
    started = time.monotonic()
    with pytest.raises(LedgerUnavailable) as e:
        led.tool_call(*key(), tool)
    elapsed = time.monotonic() - started
    assert 0.4 < elapsed < 3, elapsed
    assert tool.calls == []
    assert e.value.status is None and e.value.code == "unreachable"
    assert isinstance(e.value, LedgerError)


def test_request_with_attempts_requires_one(service):
    led = router(service)
    rid = new_id("r")
    led.begin_attempt(rid, new_id("a"))
    with pytest.raises(LedgerError) as e:
        led.tool_call(rid, "call_00", must_not_run)
    assert type(e.value) is LedgerError
    assert e.value.status == 409 and e.value.code == "attempt_required"


# --- renewal, restarts, outages -------------------------------------------------


def test_renewal_keeps_a_long_tools_claim_alive(service):
    rid, cid = key()
    seen = []

    def slow_tool(idempotency_key, fencing_token):
        time.sleep(1.5)  # past the 1 s lease
        seen.append(raw_claim(service, rid, cid))
        time.sleep(1.5)
        return {"slow": True}

    r = agent(service).tool_call(rid, cid, slow_tool, lease_ms=1000)
    assert seen[0].status == 409 and seen[0].code == "in_progress", seen[0]
    assert r.outcome == "succeeded" and r.recorded
    assert agent(service).get_tool_call(rid, cid)["state"] == "succeeded"
    types = event_types(service, rid)
    assert "late_completion" not in types
    assert types[-1] == "completed"


def test_completion_is_retried_across_a_ledgerd_restart(service):
    rid, cid = key()
    port = service.ledgerd.port
    restarter = threading.Thread(target=lambda: (time.sleep(1),
                                                 service.ledgerd.start("127.0.0.1:%d" % port)))

    def tool_that_outlives_ledgerd(idempotency_key, fencing_token):
        service.ledgerd.stop()
        restarter.start()
        return {"sent": True}

    try:
        r = agent(service).tool_call(rid, cid, tool_that_outlives_ledgerd)
    finally:
        if restarter.ident is not None:
            restarter.join()
        if service.ledgerd.proc is None:
            service.ledgerd.start("127.0.0.1:%d" % port)
    assert (r.executed, r.outcome, r.recorded) == (True, "succeeded", True)
    call = agent(service).get_tool_call(rid, cid)
    assert call["state"] == "succeeded" and call["result"] == {"sent": True}


def test_unrecorded_result_is_still_returned(service):
    rid, cid = key()
    port = service.ledgerd.port

    def tool_that_outlives_ledgerd(idempotency_key, fencing_token):
        service.ledgerd.stop()
        return {"sent": True}

    try:
        started = time.monotonic()
        r = agent(service, complete_retry_s=1).tool_call(rid, cid, tool_that_outlives_ledgerd)
        assert time.monotonic() - started < 5
    finally:
        service.ledgerd.start("127.0.0.1:%d" % port)
    assert (r.executed, r.replayed, r.outcome, r.recorded) == (True, False, "unrecorded", False)
    assert r.result == {"sent": True}
    assert isinstance(r.completion_error, LedgerUnavailable)
    # The claim is still held: nothing recorded its outcome.
    assert agent(service).get_tool_call(rid, cid)["state"] == "in_progress"


def test_lost_answers_are_retried_with_the_same_claim_and_completion(service):
    thief = AnswerThief(service, {"claim", "complete"})
    try:
        rid, cid = key()
        tool = Tool({"sent": 1})
        r = Ledger(thief.url, service.token("agent")).tool_call(rid, cid, tool)
    finally:
        thief.close()
    # ledgerd acted on both calls whose answers were lost...
    assert thief.stolen == [("claim", "HTTP/1.1 201 Created"), ("complete", "HTTP/1.1 200 OK")]
    # ...and the retried claim found its own holder again: one run, one token.
    assert tool.calls == [("%s:%s" % (rid, cid), 1)]
    assert r.outcome == "succeeded" and r.recorded
    assert event_types(service, rid) == ["claimed", "completed"]


def test_claim_is_retried_through_a_database_outage(service):
    rid, cid = key()
    agent(service).tool_call(new_id("r"), "warm-up", Tool())  # the token is known now
    service.cluster.stop()
    back = threading.Thread(target=lambda: (time.sleep(1), service.cluster.start()))
    back.start()
    tool = Tool("ok")
    started = time.monotonic()
    try:
        r = agent(service).tool_call(rid, cid, tool)
    finally:
        back.join()
    assert time.monotonic() - started > 0.9  # it could only succeed once the database was back
    assert len(tool.calls) == 1 and r.outcome == "succeeded" and r.recorded
    assert event_types(service, rid) == ["claimed", "completed"]


# --- the decorator and stable ids -------------------------------------------


def test_decorator_claims_with_kwargs_and_passes_the_claim(service):
    led = agent(service)
    sent = []

    @led.idempotent(tool="send_email")
    def send_email(to, subject, *, idempotency_key, fencing_token):
        sent.append((to, subject, idempotency_key, fencing_token))
        return {"message_id": "m-%d" % len(sent)}

    @led.idempotent()
    def lookup(q):
        return {"q": q}

    rid = new_id("r")
    r = send_email(request_id=rid, tool_call_id="call_00", to="ana@example.com", subject="Hi")
    assert sent == [("ana@example.com", "Hi", "%s:call_00" % rid, 1)]
    assert r.executed and r.result == {"message_id": "m-1"}
    call = led.get_tool_call(rid, "call_00")
    assert call["tool"] == "send_email"
    assert call["args_sha256"] == args_sha256({"to": "ana@example.com", "subject": "Hi"})

    again = send_email(request_id=rid, tool_call_id="call_00", subject="Hi",
                       to="ana@example.com")
    assert again.replayed and again.result == {"message_id": "m-1"} and len(sent) == 1
    with pytest.raises(ArgsMismatch):
        send_email(request_id=rid, tool_call_id="call_00", to="bob@example.com", subject="Hi")

    r = lookup(request_id=rid, tool_call_id="call_01", q="weather")
    assert r.result == {"q": "weather"}
    assert led.get_tool_call(rid, "call_01")["tool"] == "lookup"
    assert send_email.__name__ == "send_email"


def test_stable_tool_call_ids():
    assert [stable_tool_call_id(k) for k in (0, 7, 42, 100)] == \
        ["call_00", "call_07", "call_42", "call_100"]
    for bad in (-1, True, 1.0, "3"):
        with pytest.raises(ValueError):
            stable_tool_call_id(bad)
    counter = ToolCallCounter()
    assert [counter.next(), counter.next(), counter.next()] == ["call_00", "call_01", "call_02"]


# --- the router helper ------------------------------------------------------


def attempt_state(led, rid, aid):
    return {a["attempt_id"]: a["state"] for a in led.get_request(rid)["attempts"]}[aid]


def test_a_retried_begin_renews_with_the_lease_asked_not_what_is_left(service):
    led = router(service)
    rid, aid = new_id("r"), new_id("a")
    first = led.begin_attempt(rid, aid, replica="gpu-1", lease_ms=300)
    assert 0 < first.lease_ms_left <= 300 and first.lease_ms == 300
    time.sleep(0.5)
    # The same begin again (its answer was lost): ledgerd says what is left, 0.
    again = led.begin_attempt(rid, aid, replica="gpu-1", lease_ms=300)
    assert again.lease_ms_left == 0 and again.lease_ms == 300


def test_failover_from_a_dead_replica_to_a_terminated_stream(service):
    led = router(service)
    rid = new_id("r")
    a1 = led.begin_attempt(rid, new_id("a"), replica="gpu-1", model_revision="m1",
                           lease_ms=5000)
    assert (a1.epoch, a1.attempt_number, a1.revoked) == (1, 1, False)
    assert 3000 < a1.lease_ms <= 5000  # what is left of it as the answer went out
    assert a1.request["request_id"] == rid and a1.request["status"] == "open"
    assert led.begin_attempt(rid, a1.attempt_id, replica="gpu-1",
                             model_revision="m1", lease_ms=5000).epoch == 1  # a repeat
    first = led.tool_call(rid, stable_tool_call_id(0), Tool({"temp": 21}), tool="weather",
                          args={"city": "Oslo"}, attempt=a1)
    assert first.executed

    a1.start_heartbeat(interval_s=0.2)
    time.sleep(0.5)
    a1.stop_heartbeat()
    assert not a1.revoked

    a2_id = new_id("a")
    d = led.failover(rid, a1.attempt_id, "replica_exited", retry_prefill_tokens=100,
                     next_attempt={"attempt_id": a2_id, "replica": "gpu-2", "lease_ms": 6000})
    assert d.action == "retry_prefill"
    assert d.client_error is None and d.sse_event is None and d.retry_after_ms is None
    assert d.settled_tool_calls == [{"tool_call_id": "call_00", "tool": "weather",
                                     "args_sha256": args_sha256({"city": "Oslo"}),
                                     "outcome": "succeeded"}]
    assert d.body["source_state"] == "dead"
    a2 = d.attempt
    assert (a2.attempt_id, a2.epoch, a2.attempt_number, a2.lease_ms) == (a2_id, 2, 2, 6000)

    # The old replica is a zombie: it may not publish.
    with pytest.raises(AttemptFenced):
        a1.deliver(1)
    assert a1.revoked
    # The rerun gets the settled call replayed, then publishes.
    again = led.tool_call(rid, stable_tool_call_id(0), must_not_run, tool="weather",
                          args={"city": "Oslo"}, attempt=a2)
    assert again.replayed and again.result == {"temp": 21}
    delivered = a2.deliver(1)
    assert delivered["first_delta_sent"] is True and delivered["phase"] == "decode"
    assert a2.deliver(9)["delivered_output_tokens"] == 9

    # After a delta the stream can only end with an explicit error.
    d = led.failover(rid, a2.attempt_id, "upstream_closed",
                     next_attempt={"attempt_id": new_id("a")})
    assert d.action == "terminate_stream" and d.attempt is None
    error = d.client_error["error"]
    assert error["code"] == "upstream_decode_interrupted"
    assert error["delivered_output_tokens"] == 9 and error["retryable"] is False
    assert d.sse_event.startswith('data: {"error": ') and d.sse_event.endswith("\n\n")
    assert json.loads(d.sse_event[len("data: "):]) == d.client_error

    with pytest.raises(RequestClosed) as e:
        led.failover(rid, a2.attempt_id, "network_error")
    assert e.value.code == "request_closed" and e.value.client_error == d.client_error
    with pytest.raises(AttemptFenced) as e:
        led.failover(rid, a1.attempt_id, "network_error")
    assert e.value.details["current_attempt_id"] == a2_id
    with pytest.raises(RequestClosed) as e:
        led.begin_attempt(rid, new_id("a"))
    assert e.value.code == "first_delta_sent" and e.value.client_error == d.client_error
    with pytest.raises(AttemptFenced):
        a2.finish("completed")
    assert a2.revoked
    assert led.get_request(rid)["request"]["status"] == "terminated"


def heartbeat_alive(attempt):
    """Whether the heartbeat thread of @attempt still runs."""
    name = "heartbeat %s/%s" % (attempt.request_id, attempt.attempt_id)
    return any(t.name == name and t.is_alive() for t in threading.enumerate())


def refusals(led, rid, aid):
    """The calls of attempt @aid that ledgerd refused, from the request's history."""
    return [e for e in led.get_request(rid)["events"]
            if e["type"] == "refused" and e.get("attempt_id") == aid]


def test_failover_revokes_the_attempt_handle_it_is_given(service):
    led = router(service)
    rid = new_id("r")
    a1 = led.begin_attempt(rid, new_id("a"), replica="gpu-1", lease_ms=3000)
    a1.start_heartbeat(interval_s=0.1)
    assert heartbeat_alive(a1)

    # As the C SDK does: a decision other than keep_waiting revokes the handle
    # it names, whose heartbeat then ends.
    a2_id = new_id("a")
    try:
        d = led.failover(rid, a1, "pod_lost",
                         next_attempt={"attempt_id": a2_id, "replica": "gpu-2"})
    finally:
        alive = heartbeat_alive(a1)
        a1.stop_heartbeat()
    assert d.action == "retry_prefill" and d.body["source_state"] == "dead"
    assert d.attempt.attempt_id == a2_id and not d.attempt.revoked
    assert a1.revoked
    assert not alive
    seen = len(refusals(led, rid, a1.attempt_id))

    # A revoked handle refuses to renew, deliver or finish without asking ledgerd.
    for call in (a1.renew, lambda: a1.deliver(1), lambda: a1.finish("completed")):
        with pytest.raises(AttemptFenced) as e:
            call()
        assert e.value.status == 409 and e.value.code == "attempt_fenced"
    assert len(refusals(led, rid, a1.attempt_id)) == seen
    assert attempt_state(led, rid, a1.attempt_id) == "dead"

    # A handle of another request is a mistake, not a failover.
    with pytest.raises(ValueError):
        led.failover(new_id("r"), d.attempt, "pod_lost")
    assert not d.attempt.revoked

    # keep_waiting leaves the handle its rights, and its heartbeat.
    d.attempt.start_heartbeat(interval_s=0.1)
    try:
        assert led.failover(rid, d.attempt, "overloaded").action == "keep_waiting"
        assert not d.attempt.revoked and heartbeat_alive(d.attempt)
    finally:
        d.attempt.stop_heartbeat()


def test_failover_refused_as_fenced_or_closed_revokes_the_handle(service):
    led = router(service)
    rid = new_id("r")
    a1 = led.begin_attempt(rid, new_id("a"))
    stale = led.begin_attempt(rid, a1.attempt_id)  # the same attempt, another handle
    d = led.failover(rid, a1.attempt_id, "replica_exited",
                     next_attempt={"attempt_id": new_id("a")})
    assert d.action == "retry_prefill" and not a1.revoked  # by id: no handle to revoke
    # The other router's handle: not the newest attempt any more.
    assert not stale.revoked
    with pytest.raises(AttemptFenced):
        led.failover(rid, stale, "network_error")
    assert stale.revoked
    a2 = d.attempt
    a2.deliver(1)
    assert led.failover(rid, a2.attempt_id, "upstream_closed").action == "terminate_stream"
    assert not a2.revoked  # asked by id again
    with pytest.raises(RequestClosed):
        led.failover(rid, a2, "network_error")
    assert a2.revoked


def test_uncertain_liveness_waits_for_the_fence_then_reruns(service):
    led = router(service)
    rid = new_id("r")
    a1 = led.begin_attempt(rid, new_id("a"), lease_ms=1900)
    a2_id = new_id("a")
    d = led.failover(rid, a1.attempt_id, "heartbeat_timeout",
                     next_attempt={"attempt_id": a2_id})
    assert d.action == "wait_for_fence" and d.attempt is None
    assert 1000 < d.retry_after_ms <= 1900
    assert a1.cancel_ack()["state"] == "cancelled"
    d = led.failover(rid, a1.attempt_id, "heartbeat_timeout",
                     next_attempt={"attempt_id": a2_id})
    assert d.action == "retry_prefill" and d.attempt.attempt_id == a2_id


def test_finish_completed_closes_the_request(service):
    led = router(service)
    rid = new_id("r")
    a = led.begin_attempt(rid, new_id("a"))
    a.deliver(0)
    done = a.finish("completed", delivered_output_tokens=120, reason="stop")
    assert done["state"] == "finished" and done["request"]["status"] == "completed"
    view = led.get_request(rid)["request"]
    assert view["status"] == "completed" and view["delivered_output_tokens"] == 120


def test_finish_failed_leaves_the_request_to_a_failover(service):
    led = router(service)
    rid = new_id("r")
    a1 = led.begin_attempt(rid, new_id("a"))
    assert a1.finish("failed", reason="oom")["request"]["status"] == "open"
    d = led.failover(rid, a1.attempt_id, "replica_exited",
                     next_attempt={"attempt_id": new_id("a")})
    assert d.action == "retry_prefill" and d.body["source_state"] == "failed"
    assert 18000 < d.attempt.renew(20000)["lease_ms"] <= 20000


def test_cancel_revokes_and_cancel_ack_ends_the_attempt(service):
    led = router(service)
    rid = new_id("r")
    a = led.begin_attempt(rid, new_id("a"))
    assert a.cancel("client went away")["state"] == "cancel_requested"
    assert a.revoked
    with pytest.raises(AttemptFenced):
        a.deliver(0)
    assert a.cancel_ack()["state"] == "cancelled"
    assert attempt_state(led, rid, a.attempt_id) == "cancelled"


def test_heartbeat_keeps_the_attempt_alive(service):
    led = router(service)
    rid = new_id("r")
    a = led.begin_attempt(rid, new_id("a"), lease_ms=800)
    a.start_heartbeat(interval_s=0.15)
    try:
        time.sleep(2)  # well past the lease
        assert attempt_state(led, rid, a.attempt_id) == "live"
    finally:
        a.stop_heartbeat()
    time.sleep(1)
    assert attempt_state(led, rid, a.attempt_id) == "expired"
    assert not a.revoked
    with pytest.raises(AttemptFenced):
        a.renew()
    assert a.revoked


def test_heartbeat_sets_revoked_when_the_attempt_is_cancelled(service):
    led = router(service)
    rid = new_id("r")
    a = led.begin_attempt(rid, new_id("a"), lease_ms=3000)
    a.start_heartbeat(interval_s=0.1)
    try:
        # The same attempt cancelled elsewhere (another router, an operator).
        led.begin_attempt(rid, a.attempt_id, lease_ms=3000).cancel("operator")
        deadline = time.monotonic() + 3
        while not a.revoked and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.revoked
    finally:
        a.stop_heartbeat()


def test_args_mismatch_under_a_live_attempt_revokes_it(service):
    led = router(service)
    rid = new_id("r")
    a = led.begin_attempt(rid, new_id("a"))
    led.tool_call(rid, "call_00", Tool(1), tool="pay", args={"amount": 1}, attempt=a)
    assert not a.revoked
    with pytest.raises(ArgsMismatch):
        led.tool_call(rid, "call_00", must_not_run, tool="pay", args={"amount": 2}, attempt=a)
    assert a.revoked
    view = led.get_request(rid)
    assert view["request"]["status"] == "failed"
    assert view["request"]["client_error"]["error"]["code"] == "tool_call_divergence"


# --- the example ------------------------------------------------------------


def test_send_email_example_sends_once_then_replays(service):
    env = dict(os.environ, LEDGER_URL=url(service), LEDGER_TOKEN=service.token("agent"),
               PYTHONPATH=str(SDK))
    rid = new_id("r")

    def run():
        done = subprocess.run([sys.executable, str(EXAMPLE), rid], env=env, text=True,
                              capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    first = run()
    assert "sending email to ana@example.com" in first
    assert "sent: m-%s:call_00" % rid in first
    second = run()
    assert "sending email" not in second
    assert "replayed: already sent as m-%s:call_00, not sent again" % rid in second

