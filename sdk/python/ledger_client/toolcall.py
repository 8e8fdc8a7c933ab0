"""Running a tool's side effect at most once per idempotency key.

One invocation claims ``{request_id}:{tool_call_id}`` right before the side
effect, runs the tool while a background thread renews the claim, and
records the outcome; a later invocation of the same key (a rerun on
another replica, a retried request) gets the recorded result back instead
of running the tool again.

A result too large to keep (over ``max_result_bytes``, or refused by
ledgerd as too large a body) is recorded as the length and SHA-256 of its
JSON text: the completion is never lost to its size, and a rerun is told
:class:`ResultNotKept` instead of getting the result back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._heartbeat import Heartbeat
from ._http import Answer, Backoff, Transport, json_body, quote_id
from ._trace import trace_headers
from .errors import InProgress, LedgerError, NotExecuted, Retryable
from .jcs import args_sha256, canonicalize

__all__ = ["MAX_RESULT_BYTES", "ToolCall", "ToolCallCounter", "ToolCallResult",
           "ToolFunction", "check_max_result_bytes", "stable_tool_call_id"]

log = logging.getLogger("ledger_client")

ToolFunction = Callable[[str, int], Any]
"""A tool's side effect: ``fn(idempotency_key, fencing_token)`` returns a JSON value."""

Outcome = Literal["succeeded", "failed", "unrecorded"]

# Polling a key another holder has: its completion may come at any moment,
# so the wait between two claims never grows past this.
IN_PROGRESS_POLL_CAP_S = 1.0
_REASON_MAX_BYTES = 256
TOO_LARGE_A_BODY = ("%s: a result of %d bytes is too large a body for ledgerd; "
                    "completing with its length and SHA-256")

MAX_RESULT_BYTES = 1 << 20
"""The default bound of a result sent whole: ledgerd's default ``--max-result-bytes``."""


@dataclass(frozen=True)
class ToolCallResult:
    """What became of one tool call.

    Attributes:
        executed: this invocation called the tool function.
        replayed: the call had already finished; its recorded result was
            returned and the tool was not called.
        outcome: ``"succeeded"``; ``"failed"`` (only on a replay: the
            invocation that ran the tool raised its exception); or
            ``"unrecorded"``: the tool ran and returned, but ledgerd could
            not record it (see ``completion_error``).
        result: the tool's result as a JSON value (``json.loads`` of
            ``result_json``), the same whether executed or replayed.
        result_json: the result's JSON text, byte for byte what ledgerd
            stores and replays.
        idempotency_key: ``"{request_id}:{tool_call_id}"``, the key the tool
            received.
        fencing_token: the token the tool received; None on a replay.
        recorded: ledgerd holds this outcome (False only when unrecorded).
        completion_error: why the outcome is unrecorded, else None.
        result_kept: False when ledgerd recorded the result as the length
            and SHA-256 of ``result_json`` only (it was too large to keep):
            a rerun of the key raises :class:`ResultNotKept`. True otherwise.
    """

    executed: bool
    replayed: bool
    outcome: Outcome
    result: Any
    result_json: str
    idempotency_key: str
    fencing_token: int | None
    recorded: bool
    completion_error: LedgerError | None = None
    result_kept: bool = True


def stable_tool_call_id(k: int) -> str:
    """The id of the k-th tool call (from 0) of a logical request: ``call_00``, ``call_01``...

    The ordinal is what stays the same when the request runs again on
    another replica, so the rerun meets the same key; the random id a model
    engine gives a call changes with every decode and must not be used.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError("a tool call's ordinal is an int >= 0, not %r" % (k,))
    return "call_%02d" % k


class ToolCallCounter:
    """Hands out :func:`stable_tool_call_id` ids in order, one per tool call made.

    Keep one per logical request and attempt; a rerun starts its own
    counter at 0 and so names its calls as the first run did.
    """

    def __init__(self, start: int = 0) -> None:
        self._next = start

    def next(self) -> str:
        """The id of the next tool call."""
        tool_call_id = stable_tool_call_id(self._next)
        self._next += 1
        return tool_call_id


def _dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def check_max_result_bytes(value: Any) -> int:
    """``value`` as a bound of the result sent whole; ValueError unless an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("max_result_bytes is an int >= 0, not %r" % (value,))
    return value


def _not_kept(result_json: str) -> dict[str, Any]:
    """What a completion sends instead of ``result_json``: the length and SHA-256 of its bytes."""
    data = result_json.encode("utf-8")
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _failure_result(e: BaseException) -> str:
    return _dump_json({"error": type(e).__name__, "message": str(e)})


def _release_reason(e: NotExecuted) -> dict[str, str]:
    reason = str(e).encode("utf-8")[:_REASON_MAX_BYTES].decode("utf-8", "ignore")
    return {"reason": reason} if reason else {}


def _raw_member(text: str, name: str) -> str:
    """The JSON text of the member ``name`` of the object in ``text``, exactly as written.

    ledgerd replays a stored result byte for byte; re-serialising the parsed
    value could change its spelling, so the text is cut out of the answer.
    """
    skip_ws = json.decoder.WHITESPACE.match  # type: ignore[attr-defined]
    decoder = json.JSONDecoder()

    def expect(i: int, char: str) -> int:
        i = skip_ws(text, i).end()
        if text[i:i + 1] != char:
            raise ValueError("expected %r at %d of a JSON answer" % (char, i))
        return i + 1

    i = expect(0, "{")
    while True:
        i = expect(i, '"')
        key, i = json.decoder.scanstring(text, i)  # type: ignore[attr-defined]
        start = skip_ws(text, expect(i, ":")).end()
        _, end = decoder.raw_decode(text, start)
        if key == name:
            return text[start:end]
        i = expect(end, ",")


# --- what the blocking and the asyncio tool calls share (no I/O here) --------


def tool_call_path(request_id: str, tool_call_id: str) -> str:
    """The path of the key's calls, to which ``claim``, ``renew``... are appended."""
    return "/v1/requests/%s/tool-calls/%s/" % (quote_id(request_id), quote_id(tool_call_id))


def claim_body(*, args: Any, tool: str | None, attempt_id: str | None, owner: str | None,
               lease_ms: int | None, tool_dedupes: bool, store_args: bool) -> bytes:
    """The body of every claim one invocation sends, its ``claim_id`` drawn here.

    The claim_id is the identity of this invocation: when the answer to a
    claim is lost and the transport sends it again, ledgerd recognises the
    holder it already made (200, same token). Another invocation of the
    same key draws its own.
    """
    claim: dict[str, Any] = {"claim_id": secrets.token_hex(16), "tool_dedupes": tool_dedupes}
    if tool is not None:
        claim["tool"] = tool
    raw: dict[str, str] = {}
    if store_args:
        if args is None:
            raise ValueError("store_args needs args")
        # The arguments go out as their canonical text, which ledgerd
        # fingerprints to the very bytes hashed here (json.dumps could
        # not send a Decimal); with the fingerprint beside them, a
        # client and a server that ever disagreed would get a 400, not
        # two fingerprints for one call.
        canonical = canonicalize(args)
        claim["args_sha256"] = hashlib.sha256(canonical).hexdigest()
        claim["store_args"] = True
        raw["args"] = canonical.decode("utf-8")
    elif args is not None:
        claim["args_sha256"] = args_sha256(args)
    for name, value in (("attempt_id", attempt_id), ("owner", owner),
                        ("lease_ms", lease_ms)):
        if value is not None:
            claim[name] = value
    return json_body(claim, raw)


@dataclass(frozen=True)
class Claimed:
    """A claim granted: the tool may run now under this key and token."""

    idempotency_key: str
    fencing_token: int
    lease_ms: int


def read_claim(answer: Answer, lease_ms: int | None) -> ToolCallResult | Claimed:
    """What a claim's success answer says: the replay of a finished call, or a grant.

    ``lease_ms`` is the one asked for (None: the one ledgerd granted is renewed).
    """
    body = answer.body if isinstance(answer.body, dict) else {}
    if body.get("status") == "completed":
        result_json = _raw_member(answer.text, "result")
        return ToolCallResult(executed=False, replayed=True, outcome=body["outcome"],
                              result=json.loads(result_json), result_json=result_json,
                              idempotency_key=body["idempotency_key"],
                              fencing_token=None, recorded=True)
    if body.get("status") != "claimed":
        raise LedgerError(answer.status, {"error": {
            "code": "unexpected_answer", "message": answer.text[:200]}})
    return Claimed(body["idempotency_key"], body["fencing_token"], lease_ms or body["lease_ms"])


def in_progress_delay(e: InProgress, backoff: Backoff, left_s: float) -> float:
    """How long to wait before claiming a held key again, ``left_s`` of the wait remaining.

    The holder's completion may come at any moment; its lease ends at
    retry_after_ms at the latest: never wait past that.
    """
    delay = backoff.next_delay()
    if e.retry_after_ms is not None:
        delay = min(delay, e.retry_after_ms / 1000)
    return min(delay, left_s)


def renew_body(token: int, lease_ms: int | None) -> bytes:
    """The body of the claim's renewals."""
    renew = {"fencing_token": token}
    if lease_ms is not None:
        renew["lease_ms"] = lease_ms
    return json_body(renew)


def failure_record(token: int, e: Exception) -> tuple[str, dict[str, Any], str | None]:
    """What the tool's exception means for the key: (action, fields, result text).

    ``release`` for :class:`NotExecuted` (no result); else ``complete`` as
    failed, retryable for :class:`Retryable`, with the exception as result.
    """
    if isinstance(e, NotExecuted):
        return "release", {"fencing_token": token, **_release_reason(e)}, None
    return "complete", {"fencing_token": token, "outcome": "failed",
                        "retryable": isinstance(e, Retryable)}, _failure_result(e)


def completion_whole(fields: dict[str, Any], result_json: str) -> bytes:
    """A completion that sends ``result_json`` byte for byte."""
    return json_body(fields, raw={"result": result_json})


def completion_digest(fields: dict[str, Any], result_json: str) -> bytes:
    """A completion that sends the result's length and SHA-256 (none if retryable)."""
    if fields.get("retryable"):
        return json_body(fields)
    return json_body({**fields, "result_not_kept": _not_kept(result_json)})


def executed_result(key: str, token: int, result_json: str, answer: Answer | None,
                    error: LedgerError | None) -> ToolCallResult:
    """The result of a run: recorded by ``answer``, or left unrecorded by ``error``."""
    kept = not (answer is not None and isinstance(answer.body, dict)
                and answer.body.get("result_kept") is False)
    return ToolCallResult(executed=True, replayed=False,
                          outcome="succeeded" if error is None else "unrecorded",
                          result=json.loads(result_json), result_json=result_json,
                          idempotency_key=key, fencing_token=token,
                          recorded=error is None, completion_error=error, result_kept=kept)


class ToolCallBase:
    """What a tool call holds from its start, the same for the blocking
    :class:`ToolCall` and the asyncio one (``ledger_client._aio_toolcall``):
    the transport, the key's path, the bounds and the claim's body."""

    def __init__(self, transport: Any, request_id: str, tool_call_id: str, *,
                 args: Any, tool: str | None, attempt_id: str | None, owner: str | None,
                 lease_ms: int | None, tool_dedupes: bool, store_args: bool,
                 retry_s: float, complete_retry_s: float, max_result_bytes: int,
                 traceparent: str | None = None, tracestate: str | None = None) -> None:
        self._transport = transport
        # Taken here, in the caller's thread or task: the renewals run
        # elsewhere, and every call of this tool call carries the same.
        self._trace = trace_headers((traceparent, tracestate), transport.trace)
        self._path = tool_call_path(request_id, tool_call_id)
        self._lease_ms = lease_ms
        self._retry_s = retry_s
        self._complete_retry_s = complete_retry_s
        self._max_result_bytes = check_max_result_bytes(max_result_bytes)
        self._claim_body = claim_body(args=args, tool=tool, attempt_id=attempt_id, owner=owner,
                                      lease_ms=lease_ms, tool_dedupes=tool_dedupes,
                                      store_args=store_args)


class ToolCall(ToolCallBase):
    """One invocation of a tool under its idempotency key: claim, run, record.

    :meth:`Ledger.tool_call` makes one per call; it is not reused.
    """

    _transport: Transport

    def _post(self, action: str, body: bytes, retry_s: float) -> Answer:
        return self._transport.call("POST", self._path + action, body, retry_s=retry_s,
                                    trace=self._trace)

    def run(self, fn: ToolFunction, wait_s: float) -> ToolCallResult:
        """Claims the key, then replays the recorded result or runs ``fn`` and records it.

        See :meth:`Ledger.tool_call` for the whole contract.
        """
        claimed = read_claim(self._claim(wait_s), self._lease_ms)
        if isinstance(claimed, ToolCallResult):
            return claimed
        return self._execute(fn, claimed.idempotency_key, claimed.fencing_token,
                             claimed.lease_ms)

    def _claim(self, wait_s: float) -> Answer:
        """Claims, waiting up to ``wait_s`` seconds while another holder has the key."""
        deadline = time.monotonic() + wait_s
        backoff = Backoff(cap_s=IN_PROGRESS_POLL_CAP_S)
        while True:
            try:
                return self._post("claim", self._claim_body, self._retry_s)
            except InProgress as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(in_progress_delay(e, backoff, left))

    def _execute(self, fn: ToolFunction, key: str, token: int, lease_ms: int) -> ToolCallResult:
        body = renew_body(token, self._lease_ms)
        heartbeat = Heartbeat("renew %s" % key, lease_ms / 3000,
                              beat=lambda: self._post("renew", body, 0))
        heartbeat.start()
        try:
            try:
                value = fn(key, token)
            finally:
                heartbeat.stop()
            result_json = _dump_json(value)
        except Exception as e:
            self._record_failure(key, token, e)
            raise
        return self._record_success(key, token, result_json)

    def _record_failure(self, key: str, token: int, e: Exception) -> None:
        """Records what the tool's exception means for the key; a note on it says if that failed."""
        action, fields, result_json = failure_record(token, e)
        try:
            if result_json is None:
                self._post(action, json_body(fields), self._complete_retry_s)
            else:
                self._complete(key, fields, result_json)
        except LedgerError as failure:
            e.add_note("ledgerd did not record this failure: %s" % failure)

    def _record_success(self, key: str, token: int, result_json: str) -> ToolCallResult:
        try:
            answer = self._complete(key, {"fencing_token": token, "outcome": "succeeded"},
                                    result_json)
        except LedgerError as e:
            log.error("%s: the tool ran but its result was not recorded: %s", key, e)
            return executed_result(key, token, result_json, None, e)
        return executed_result(key, token, result_json, answer, None)

    def _complete(self, key: str, fields: dict[str, Any], result_json: str) -> Answer:
        """Records a completion whose result is ``result_json``, whatever its size.

        Within ``max_result_bytes`` the text goes out whole; over it, or
        refused whole as too large a body (``413``: a ledgerd whose
        ``--max-body`` is below the client's bound), the completion sends
        the text's length and SHA-256 instead, which ledgerd records as a
        result not kept. A completion lost to its size would leave the key
        ``in_progress``, then ``outcome_unknown``, though the effect happened.
        A retryable failure keeps no result, so it goes without one.
        """
        size = len(result_json.encode("utf-8"))
        if size <= self._max_result_bytes:
            try:
                return self._post("complete", completion_whole(fields, result_json),
                                  self._complete_retry_s)
            except LedgerError as e:
                if e.status != 413:
                    raise
                log.warning(TOO_LARGE_A_BODY, key, size)
        return self._post("complete", completion_digest(fields, result_json),
                          self._complete_retry_s)
