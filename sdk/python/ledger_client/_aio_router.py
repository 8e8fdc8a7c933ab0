"""The router's side for asyncio: attempts, their leases, and failover decisions.

The twin of router.py: the same bodies and the same reading of decisions
(its pure helpers), the same rules for when an attempt is revoked, with
the heartbeat as an asyncio task instead of a thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._aio_heartbeat import AsyncHeartbeat
from ._aio_http import AsyncTransport
from ._http import json_body
from .errors import AttemptFenced, RequestClosed
from .router import AttemptState, _fields, begin_request, failover_request, read_decision

__all__ = ["AsyncAttempt", "AsyncFailoverDecision"]


class AsyncAttempt(AttemptState):
    """One attempt of a logical request; :class:`Attempt` with coroutine methods.

    The attributes and the rules are :class:`Attempt`'s: every call that
    needs the attempt's rights raises :class:`AttemptFenced` once it has
    none and sets ``revoked``; once revoked, :meth:`renew`, :meth:`deliver`
    and :meth:`finish` refuse without asking ledgerd and the heartbeat ends.
    """

    def __init__(self, transport: AsyncTransport, request_id: str, created: dict[str, Any], *,
                 retry_s: float, asked_lease_ms: int | None = None) -> None:
        super().__init__(request_id, created, asked_lease_ms=asked_lease_ms)
        self._transport = transport
        self._retry_s = retry_s
        self._heartbeat: AsyncHeartbeat | None = None

    async def _revoke(self) -> None:
        """Marks the attempt revoked for good and stops its heartbeat."""
        self.revoked = True
        await self.stop_heartbeat()

    async def _post(self, action: str, fields: dict[str, Any], retry_s: float | None = None
                    ) -> dict[str, Any]:
        try:
            answer = await self._transport.call(
                "POST", self._path + action, json_body(fields),
                retry_s=self._retry_s if retry_s is None else retry_s)
        except AttemptFenced:
            self.revoked = True
            if self._heartbeat is not None:
                self._heartbeat.signal_stop()
            raise
        body: dict[str, Any] = answer.body
        return body

    async def renew(self, lease_ms: int | None = None) -> dict[str, Any]:
        """Extends the lease to ledgerd's now plus ``lease_ms`` (default: the attempt's lease)."""
        self._refuse_if_revoked()
        return await self._post("renew",
                                {"lease_ms": self.lease_ms if lease_ms is None else lease_ms})

    def start_heartbeat(self, interval_s: float | None = None) -> None:
        """Renews the lease in a task of the running loop every ``interval_s``
        (default: a third of it).

        The task ends by itself once ledgerd refuses a renewal, having set
        ``revoked`` if the attempt was fenced, or once the attempt is
        revoked otherwise: check ``revoked`` before every publication.
        :meth:`stop_heartbeat` ends it sooner.
        """
        if self._heartbeat is not None and self._heartbeat.running:
            raise RuntimeError("the heartbeat of %r is running already" % self)
        self._heartbeat = AsyncHeartbeat(
            "heartbeat %s/%s" % (self.request_id, self.attempt_id),
            self.lease_ms / 3000 if interval_s is None else interval_s,
            beat=self._beat)
        self._heartbeat.start()

    @property
    def heartbeat_running(self) -> bool:
        """The heartbeat task is beating."""
        return self._heartbeat is not None and self._heartbeat.running

    async def _beat(self) -> None:
        """One renewal of the heartbeat, one try: the next beat is the retry."""
        self._refuse_if_revoked()
        await self._post("renew", {"lease_ms": self.lease_ms}, retry_s=0)

    async def stop_heartbeat(self) -> None:
        """Stops the heartbeat, if one runs; returns once no renewal is in flight."""
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            await heartbeat.stop()

    async def deliver(self, delivered_output_tokens: int) -> dict[str, Any]:
        """Reports output about to reach the client; await it BEFORE writing the first byte.

        :class:`AttemptFenced` means: do not publish.
        """
        self._refuse_if_revoked()
        return await self._post("deliver", {"delivered_output_tokens": delivered_output_tokens})

    async def cancel(self, reason: str | None = None) -> dict[str, Any]:
        """Revokes the attempt's rights at once (state ``cancel_requested``); stops the heartbeat."""
        await self.stop_heartbeat()
        answer = await self._post("cancel", _fields(reason=reason))
        self.revoked = True
        return answer

    async def cancel_ack(self) -> dict[str, Any]:
        """Confirms the replica stopped: the attempt is ``cancelled`` and blocks nothing."""
        await self.stop_heartbeat()
        answer = await self._post("cancel-ack", {})
        self.revoked = True
        return answer

    async def finish(self, outcome: str, delivered_output_tokens: int | None = None,
                     reason: str | None = None) -> dict[str, Any]:
        """Ends the attempt: ``"completed"`` closes the request, ``"failed"`` leaves it
        open for a failover decision. Stops the heartbeat.
        """
        await self.stop_heartbeat()
        self._refuse_if_revoked()
        return await self._post("finish", _fields(outcome=outcome,
                                                  delivered_output_tokens=delivered_output_tokens,
                                                  reason=reason))


@dataclass(frozen=True)
class AsyncFailoverDecision:
    """:class:`FailoverDecision` whose ``attempt`` is an :class:`AsyncAttempt`."""

    action: str
    retry_after_ms: int | None
    client_error: dict[str, Any] | None
    sse_event: str | None
    attempt: AsyncAttempt | None
    settled_tool_calls: list[dict[str, Any]]
    body: dict[str, Any]


async def begin_attempt(transport: AsyncTransport, request_id: str, attempt_id: str, *,
                        replica: str | None, model_revision: str | None, lease_ms: int | None,
                        max_attempts: int | None, retry_s: float) -> AsyncAttempt:
    """``POST /v1/requests/{rid}/attempts``; see :meth:`AsyncLedger.begin_attempt`."""
    path, body = begin_request(request_id, attempt_id, replica=replica,
                               model_revision=model_revision, lease_ms=lease_ms,
                               max_attempts=max_attempts)
    answer = await transport.call("POST", path, body, retry_s=retry_s)
    return AsyncAttempt(transport, request_id, answer.body, retry_s=retry_s,
                        asked_lease_ms=lease_ms)


async def failover(transport: AsyncTransport, request_id: str, attempt: AsyncAttempt | str,
                   signal: str, *, retry_prefill_tokens: int | None,
                   next_attempt: dict[str, Any] | None,
                   retry_s: float) -> AsyncFailoverDecision:
    """``POST /v1/requests/{rid}/failover``; see :meth:`AsyncLedger.failover`."""
    source = attempt if isinstance(attempt, AsyncAttempt) else None
    path, body = failover_request(request_id, attempt, signal,
                                  retry_prefill_tokens=retry_prefill_tokens,
                                  next_attempt=next_attempt)
    try:
        answer = await transport.call("POST", path, body, retry_s=retry_s)
    except (AttemptFenced, RequestClosed):
        # Not the newest attempt, or the request is over: it has no rights.
        if source is not None:
            await source._revoke()
        raise
    fields = read_decision(answer)
    created = fields.pop("created")
    result = AsyncFailoverDecision(
        **fields, body=answer.body,
        attempt=None if created is None else AsyncAttempt(
            transport, request_id, created, retry_s=retry_s,
            asked_lease_ms=(next_attempt or {}).get("lease_ms")))
    # Every decision but keep_waiting takes the source's rights.
    if source is not None and result.action != "keep_waiting":
        await source._revoke()
    return result
