"""The Python client's results not kept, against a live ledgerd.

A tool's result longer than the client's max_result_bytes (default 1 MiB,
ledgerd's default --max-result-bytes) is completed as the length and
SHA-256 of its exact JSON text, never sent whole; a whole completion that
ledgerd refuses as too large (413 body_too_large) is sent again at once as
that digest. Either way the completion is recorded, the tool's caller gets
its result, and a rerun of the key raises ResultNotKept without running
the tool: never in_progress, never outcome_unknown. A result within the
bound is kept whole, as before.

Contract: docs/api.md, "Results not kept"; sdk/python/README.md.
"""

import hashlib
import json
import sys
from pathlib import Path

import pytest

from conftest import Ledgerd, new_id

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "sdk" / "python"))

from ledger_client import (  # noqa: E402
    Ledger, LedgerError, NotExecuted, ResultNotKept, Retryable)

MIB = 1 << 20


def url(ledgerd):
    return "http://%s:%d" % (ledgerd.host, ledgerd.port)


def agent(service, ledgerd=None, **kw):
    return Ledger(url(ledgerd or service.ledgerd), service.token("agent"), **kw)


def key():
    return new_id("r"), new_id("c")


def completions_sent(led):
    """The body of every completion @led sends from now on, in order."""
    bodies = []
    call = led._transport.call

    def recording(method, path, body=None, **kw):
        if path.endswith("/complete"):
            bodies.append(json.loads(body))
        return call(method, path, body, **kw)

    led._transport.call = recording
    return bodies


def text_of(value):
    """The exact JSON text the client sends of @value (as json.dumps writes it, UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def digest_of(value):
    text = text_of(value)
    return {"bytes": len(text), "sha256": hashlib.sha256(text).hexdigest()}


def must_not_run(idempotency_key, fencing_token):
    pytest.fail("the tool ran again for %s" % idempotency_key)


class Tool:
    """A tool function that counts its calls and returns @result (or raises @error)."""

    def __init__(self, result=None, error=None):
        self.calls = []
        self.result = result
        self.error = error

    def __call__(self, idempotency_key, fencing_token):
        self.calls.append((idempotency_key, fencing_token))
        if self.error is not None:
            raise self.error
        return self.result


def assert_not_kept(service, rid, cid, state, digest):
    """ledgerd's view of the call: settled in @state, its result kept as @digest only."""
    call = agent(service).get_tool_call(rid, cid)
    assert call["state"] == state
    assert call["result_kept"] is False
    assert (call["result_bytes"], call["result_sha256"]) == (digest["bytes"], digest["sha256"])
    assert "result" not in call


def assert_rerun_is_result_not_kept(service, rid, cid, outcome, digest, ledgerd=None):
    """A rerun of the key raises ResultNotKept with the stored digest; the tool does not run."""
    with pytest.raises(ResultNotKept) as e:
        agent(service, ledgerd).tool_call(rid, cid, must_not_run, tool="fetch_report",
                                          args={"id": 42}, wait_s=5)
    assert isinstance(e.value, LedgerError)
    assert (e.value.status, e.value.code) == (409, "result_not_kept")
    assert e.value.outcome == outcome
    assert (e.value.result_bytes, e.value.result_sha256) == (digest["bytes"], digest["sha256"])
    assert e.value.details["idempotency_key"] == "%s:%s" % (rid, cid)
    assert e.value.details["completed_at"]


# A report of 1.2 MB in 600,000 characters: over the default bound in UTF-8
# bytes, under it in characters.
REPORT = {"report": "\u00e9" * 600_000}


def test_a_result_over_the_bound_is_completed_as_its_length_and_digest(service):
    rid, cid = key()
    led = agent(service)
    sent = completions_sent(led)
    tool = Tool(REPORT)
    r = led.tool_call(rid, cid, tool, tool="fetch_report", args={"id": 42})
    digest = digest_of(REPORT)
    assert digest["bytes"] > MIB > len(REPORT["report"])
    # The tool's caller has its result, and ledgerd recorded the completion.
    assert (r.executed, r.replayed, r.outcome, r.recorded) == (True, False, "succeeded", True)
    assert r.result == REPORT and r.result_json.encode("utf-8") == text_of(REPORT)
    assert r.result_kept is False and r.completion_error is None
    # Only the digest went out: the whole text was never sent.
    assert sent == [{"fencing_token": 1, "outcome": "succeeded", "result_not_kept": digest}]
    assert_not_kept(service, rid, cid, "succeeded", digest)
    assert_rerun_is_result_not_kept(service, rid, cid, "succeeded", digest)
    assert len(tool.calls) == 1


def test_a_completion_refused_as_too_large_is_sent_again_as_its_digest(service):
    # A ledgerd on the same database whose bodies are smaller than the
    # client's bound: the whole result is sent, refused, then sent as its digest.
    small = Ledgerd(service.database_url, service.tmp / "ledgerd-small-body.log",
                    extra_args=["--max-body", "16KiB"])
    try:
        rid, cid = key()
        led = agent(service, small)
        sent = completions_sent(led)
        value = {"rows": ["row %05d" % i for i in range(2000)]}
        digest = digest_of(value)
        assert 16 * 1024 < digest["bytes"] < MIB
        tool = Tool(value)
        r = led.tool_call(rid, cid, tool, tool="fetch_report", args={"id": 42})
        assert (r.executed, r.outcome, r.recorded, r.result_kept) == (True, "succeeded", True, False)
        assert r.result == value and r.completion_error is None
        assert [sorted(b) for b in sent] == [["fencing_token", "outcome", "result"],
                                             ["fencing_token", "outcome", "result_not_kept"]]
        assert sent[0]["result"] == value and sent[1]["result_not_kept"] == digest
        assert_not_kept(service, rid, cid, "succeeded", digest)
        assert_rerun_is_result_not_kept(service, rid, cid, "succeeded", digest, small)
        assert len(tool.calls) == 1
    finally:
        small.stop()


def test_a_result_within_the_bound_is_kept_whole(service):
    # Exactly at the client's bound: sent and kept whole, replayed to a rerun.
    led = agent(service, max_result_bytes=4096)
    rid, cid = key()
    value = {"text": "x" * (4096 - len('{"text":""}'))}
    assert len(text_of(value)) == 4096
    sent = completions_sent(led)
    r = led.tool_call(rid, cid, Tool(value))
    assert r.result_kept is True and r.outcome == "succeeded"
    assert [sorted(b) for b in sent] == [["fencing_token", "outcome", "result"]]
    call = agent(service).get_tool_call(rid, cid)
    assert call["result"] == value and "result_kept" not in call
    again = led.tool_call(rid, cid, must_not_run)
    assert again.replayed and again.result_json == r.result_json and again.result_kept is True
    # One byte more is over it.
    rid, cid = key()
    value["text"] += "x"
    r = led.tool_call(rid, cid, Tool(value))
    assert r.result_kept is False
    assert_not_kept(service, rid, cid, "succeeded", digest_of(value))
    # Just under the default bound, against ledgerd's default body limit: whole, as before.
    rid, cid = key()
    value = {"text": "y" * (MIB - 100)}
    r = agent(service).tool_call(rid, cid, Tool(value))
    assert r.result_kept is True and r.recorded
    assert agent(service).get_tool_call(rid, cid)["result"] == value


def test_the_bound_of_one_call_and_of_the_decorator(service):
    led = agent(service)  # the default bound, 1 MiB
    rid, cid = key()
    r = led.tool_call(rid, cid, Tool({"n": "z" * 100}), max_result_bytes=64)
    assert r.result_kept is False
    assert_not_kept(service, rid, cid, "succeeded", digest_of({"n": "z" * 100}))

    @led.idempotent(tool="fetch_report", max_result_bytes=64)
    def fetch_report(id):
        return {"id": id, "body": "w" * 100}

    rid = new_id("r")
    r = fetch_report(request_id=rid, tool_call_id="call_00", id=42)
    assert r.result_kept is False and r.result == {"id": 42, "body": "w" * 100}
    assert_rerun_is_result_not_kept(service, rid, "call_00", "succeeded",
                                    digest_of({"id": 42, "body": "w" * 100}))
    for wrong in (-1, 1.5, "1024", True):
        with pytest.raises(ValueError):
            Ledger(url(service.ledgerd), "t", max_result_bytes=wrong)
        with pytest.raises(ValueError):
            led.tool_call(*key(), must_not_run, max_result_bytes=wrong)


def test_a_failure_over_the_bound_is_completed_as_its_digest(service):
    led = agent(service, max_result_bytes=1024)
    rid, cid = key()
    tool = Tool(error=ValueError("upstream said: " + "q" * 5000))
    with pytest.raises(ValueError, match="upstream said"):
        led.tool_call(rid, cid, tool, tool="fetch_report", args={"id": 42})
    digest = digest_of({"error": "ValueError", "message": str(tool.error)})
    assert_not_kept(service, rid, cid, "failed", digest)
    assert_rerun_is_result_not_kept(service, rid, cid, "failed", digest)
    assert len(tool.calls) == 1


def test_a_retryable_failure_over_the_bound_still_frees_the_key(service):
    # A retryable failure keeps no result: it is recorded without one.
    led = agent(service, max_result_bytes=1024)
    rid, cid = key()
    with pytest.raises(Retryable):
        led.tool_call(rid, cid, Tool(error=Retryable("r" * 5000)))
    assert agent(service).get_tool_call(rid, cid)["state"] == "released"
    r = led.tool_call(rid, cid, Tool({"sent": True}))
    assert r.executed and r.fencing_token == 2 and r.result_kept is True
    # NotExecuted releases the key, with no result at all.
    rid, cid = key()
    with pytest.raises(NotExecuted):
        led.tool_call(rid, cid, Tool(error=NotExecuted("n" * 5000)))
    assert agent(service).get_tool_call(rid, cid)["state"] == "released"
