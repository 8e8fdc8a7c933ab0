"""The router's side: attempts, their leases, and failover decisions.

An attempt is one try of a logical request on one replica. While it is the
live attempt within its lease it may claim tool calls, deliver to the
client and finish; a router keeps its lease alive with a heartbeat and asks
ledgerd, whenever a replica fails, what it may do next.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._heartbeat import Heartbeat
from ._http import Answer, Transport, json_body, quote_id
from .errors import AttemptFenced, LedgerError, RequestClosed

# ledgerd's least lease_ms by default: what a renewal asks at least.
MIN_LEASE_MS = 100

__all__ = ["Attempt", "FailoverDecision"]


def _fields(**values: Any) -> dict[str, Any]:
    """The given fields without those left at None (ledgerd reads null as absent)."""
    return {name: value for name, value in values.items() if value is not None}


class AttemptState:
    """What the blocking and the asyncio attempts share: the attempt as ledgerd made it.

    Subclasses add the calls; this holds no transport and does no I/O.
    """

    def __init__(self, request_id: str, created: dict[str, Any], *,
                 asked_lease_ms: int | None = None) -> None:
        self.request_id = request_id
        self.attempt_id: str = created["attempt_id"]
        self.epoch: int = created["epoch"]
        self.attempt_number: int = created["attempt_number"]
        self.lease_ms_left: int = created["lease_ms"]
        # A retried creation answers with what is left, possibly 0: never renew with that.
        self.lease_ms: int = asked_lease_ms or max(created["lease_ms"], MIN_LEASE_MS)
        self.request: dict[str, Any] = created["request"]
        self.revoked = False
        self._path = "/v1/requests/%s/attempts/%s/" % (quote_id(request_id),
                                                      quote_id(self.attempt_id))

    def __repr__(self) -> str:
        return "<%s %s/%s epoch=%d%s>" % (type(self).__name__, self.request_id,
                                          self.attempt_id, self.epoch,
                                          " revoked" if self.revoked else "")

    def _refuse_if_revoked(self) -> None:
        """The answer a revoked attempt gives without asking: it has no rights to use."""
        if self.revoked:
            raise AttemptFenced(409, {"error": {
                "code": "attempt_fenced",
                "message": "the attempt was revoked; it has no rights"}})


class Attempt(AttemptState):
    """One attempt of a logical request, as ``POST attempts`` (or a failover) made it.

    Every call that needs the attempt's rights raises :class:`AttemptFenced`
    once it has none, and sets ``revoked``: the replica must stop, publish
    nothing more, and start no side effect. Once revoked, :meth:`renew`,
    :meth:`deliver` and :meth:`finish` raise :class:`AttemptFenced` without
    asking ledgerd, and the heartbeat ends.

    Attributes:
        request_id, attempt_id: what the attempt belongs to and its id.
        epoch: the attempt's fencing token; it grows with every attempt.
        attempt_number: 1 for the first attempt of the request, and so on.
        lease_ms: the lease it renews with by default: the one asked for at
            creation, else the one ledgerd granted.
        lease_ms_left: what was left of the lease when ledgerd answered the
            creation (less than granted when the answer was slow or retried).
        request: the request as ledgerd described it at creation.
        revoked: this attempt has no rights any more: ledgerd answered
            ``attempt_fenced`` to it, a tool call under it got
            ``args_mismatch``, a failover decision other than ``keep_waiting``
            was taken for it (passed as the object), or it was cancelled
            through this object. Never cleared.
    """

    def __init__(self, transport: Transport, request_id: str, created: dict[str, Any], *,
                 retry_s: float, asked_lease_ms: int | None = None) -> None:
        super().__init__(request_id, created, asked_lease_ms=asked_lease_ms)
        self._transport = transport
        self._retry_s = retry_s
        self._heartbeat: Heartbeat | None = None

    def _revoke(self) -> None:
        """Marks the attempt revoked for good and stops its heartbeat."""
        self.revoked = True
        self.stop_heartbeat()

    def _post(self, action: str, fields: dict[str, Any], retry_s: float | None = None
              ) -> dict[str, Any]:
        try:
            answer = self._transport.call("POST", self._path + action, json_body(fields),
                                          retry_s=self._retry_s if retry_s is None else retry_s)
        except AttemptFenced:
            self.revoked = True
            raise
        body: dict[str, Any] = answer.body
        return body

    def renew(self, lease_ms: int | None = None) -> dict[str, Any]:
        """Extends the lease to ledgerd's now plus ``lease_ms`` (default: the attempt's lease).

        Returns ``{"attempt_id", "epoch", "lease_ms"}``.
        """
        self._refuse_if_revoked()
        return self._post("renew", {"lease_ms": self.lease_ms if lease_ms is None else lease_ms})

    def start_heartbeat(self, interval_s: float | None = None) -> None:
        """Renews the lease in a background thread every ``interval_s`` (default: a third of it).

        The thread ends by itself once ledgerd refuses a renewal, having set
        ``revoked`` if the attempt was fenced, or once the attempt is revoked
        otherwise (a revoking failover stops it at once): check ``revoked``
        before every publication. :meth:`stop_heartbeat` ends it sooner.
        """
        if self._heartbeat is not None and self._heartbeat.running:
            raise RuntimeError("the heartbeat of %r is running already" % self)
        self._heartbeat = Heartbeat(
            "heartbeat %s/%s" % (self.request_id, self.attempt_id),
            self.lease_ms / 3000 if interval_s is None else interval_s,
            beat=self._beat)
        self._heartbeat.start()

    def _beat(self) -> None:
        """One renewal of the heartbeat, one try: the next beat is the retry."""
        self._refuse_if_revoked()
        self._post("renew", {"lease_ms": self.lease_ms}, retry_s=0)

    def stop_heartbeat(self) -> None:
        """Stops the heartbeat, if one runs; returns once no renewal is in flight."""
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.stop()

    def deliver(self, delivered_output_tokens: int) -> dict[str, Any]:
        """Reports output about to reach the client; call it BEFORE writing the first byte.

        The first call records, durably, that a delta was sent: from then on
        the request is never rerun. :class:`AttemptFenced` means: do not
        publish. Returns ``{"first_delta_sent", "phase", "delivered_output_tokens", ...}``.
        """
        self._refuse_if_revoked()
        return self._post("deliver", {"delivered_output_tokens": delivered_output_tokens})

    def cancel(self, reason: str | None = None) -> dict[str, Any]:
        """Revokes the attempt's rights at once (state ``cancel_requested``).

        It still blocks the next attempt until :meth:`cancel_ack` or its
        lease runs out, since its replica may not know yet. Stops the heartbeat.
        """
        self.stop_heartbeat()
        answer = self._post("cancel", _fields(reason=reason))
        self.revoked = True
        return answer

    def cancel_ack(self) -> dict[str, Any]:
        """Confirms the replica stopped: the attempt is ``cancelled`` and blocks nothing."""
        self.stop_heartbeat()
        answer = self._post("cancel-ack", {})
        self.revoked = True
        return answer

    def finish(self, outcome: str, delivered_output_tokens: int | None = None,
               reason: str | None = None) -> dict[str, Any]:
        """Ends the attempt: ``"completed"`` closes the request, ``"failed"`` leaves it
        open for a failover decision. Stops the heartbeat.
        """
        self.stop_heartbeat()
        self._refuse_if_revoked()
        return self._post("finish", _fields(outcome=outcome,
                                            delivered_output_tokens=delivered_output_tokens,
                                            reason=reason))


@dataclass(frozen=True)
class FailoverDecision:
    """What the router may do after a failure of the live attempt.

    Attributes:
        action: ``retry_prefill``, ``wait_for_fence``, ``keep_waiting``,
            ``terminate_stream``, ``reject`` or ``cancel_upstream``.
        retry_after_ms: for ``wait_for_fence``: ask again after this long
            (or after the source's cancel-ack).
        client_error: the error to send the client, when the request ended.
        sse_event: ``client_error`` as the final SSE event to write to a
            streaming client (``data: {...}`` and a blank line, no ``[DONE]``).
        attempt: for ``retry_prefill`` with a ``next_attempt``, the new live
            attempt, created in the same transaction.
        settled_tool_calls: for ``retry_prefill``, the calls already settled
            (``tool_call_id``, ``tool``, ``args_sha256``, ``outcome``): the
            rerun gets their results replayed.
        body: ledgerd's whole answer.
    """

    action: str
    retry_after_ms: int | None
    client_error: dict[str, Any] | None
    sse_event: str | None
    attempt: Attempt | None
    settled_tool_calls: list[dict[str, Any]]
    body: dict[str, Any]


# --- what the blocking and the asyncio routers share (no I/O here) ------------


def begin_request(request_id: str, attempt_id: str, *, replica: str | None,
                  model_revision: str | None, lease_ms: int | None,
                  max_attempts: int | None) -> tuple[str, bytes]:
    """The path and body of ``POST /v1/requests/{rid}/attempts``."""
    return "/v1/requests/%s/attempts" % quote_id(request_id), json_body(_fields(
        attempt_id=attempt_id, replica=replica, model_revision=model_revision,
        lease_ms=lease_ms, max_attempts=max_attempts))


def failover_request(request_id: str, attempt: AttemptState | str, signal: str, *,
                     retry_prefill_tokens: int | None,
                     next_attempt: dict[str, Any] | None) -> tuple[str, bytes]:
    """The path and body of ``POST /v1/requests/{rid}/failover``.

    Raises ValueError for an attempt object of another request.
    """
    if isinstance(attempt, AttemptState) and attempt.request_id != request_id:
        raise ValueError("%r is an attempt of another request than %r" % (attempt, request_id))
    attempt_id = attempt.attempt_id if isinstance(attempt, AttemptState) else attempt
    return "/v1/requests/%s/failover" % quote_id(request_id), json_body(_fields(
        attempt_id=attempt_id, signal=signal, retry_prefill_tokens=retry_prefill_tokens,
        next_attempt=next_attempt))


def read_decision(answer: Answer) -> dict[str, Any]:
    """A failover's decision, checked to be one; the fields of a FailoverDecision but
    ``attempt`` and ``body`` (``created`` is the new attempt's answer, or None)."""
    decision = answer.body
    if not isinstance(decision, dict) or "action" not in decision:
        raise LedgerError(answer.status, {"error": {
            "code": "unexpected_answer", "message": answer.text[:200]}})
    client_error = decision.get("client_error")
    return {"action": decision["action"],
            "retry_after_ms": decision.get("retry_after_ms"),
            "client_error": client_error,
            "sse_event": (None if client_error is None
                          else "data: %s\n\n" % json.dumps(client_error)),
            "settled_tool_calls": decision.get("settled_tool_calls") or [],
            "created": decision.get("attempt")}


def begin_attempt(transport: Transport, request_id: str, attempt_id: str, *,
                  replica: str | None, model_revision: str | None, lease_ms: int | None,
                  max_attempts: int | None, retry_s: float) -> Attempt:
    """``POST /v1/requests/{rid}/attempts``; see :meth:`Ledger.begin_attempt`."""
    path, body = begin_request(request_id, attempt_id, replica=replica,
                               model_revision=model_revision, lease_ms=lease_ms,
                               max_attempts=max_attempts)
    answer = transport.call("POST", path, body, retry_s=retry_s)
    return Attempt(transport, request_id, answer.body, retry_s=retry_s, asked_lease_ms=lease_ms)


def failover(transport: Transport, request_id: str, attempt: Attempt | str, signal: str, *,
             retry_prefill_tokens: int | None, next_attempt: dict[str, Any] | None,
             retry_s: float) -> FailoverDecision:
    """``POST /v1/requests/{rid}/failover``; see :meth:`Ledger.failover`."""
    source = attempt if isinstance(attempt, Attempt) else None
    path, body = failover_request(request_id, attempt, signal,
                                  retry_prefill_tokens=retry_prefill_tokens,
                                  next_attempt=next_attempt)
    try:
        answer = transport.call("POST", path, body, retry_s=retry_s)
    except (AttemptFenced, RequestClosed):
        # Not the newest attempt, or the request is over: it has no rights.
        if source is not None:
            source._revoke()
        raise
    fields = read_decision(answer)
    created = fields.pop("created")
    result = FailoverDecision(
        **fields, body=answer.body,
        attempt=None if created is None else Attempt(
            transport, request_id, created, retry_s=retry_s,
            asked_lease_ms=(next_attempt or {}).get("lease_ms")))
    # Every decision but keep_waiting takes the source's rights (it is
    # cancel_requested, dead, superseded, or its request is over).
    if source is not None and result.action != "keep_waiting":
        source._revoke()
    return result
