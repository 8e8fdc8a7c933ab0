"""The asyncio client of ledgerd: :class:`Ledger`'s surface, as coroutines.

An async agent wraps each tool call::

    from ledger_client.aio import AsyncLedger

    async with AsyncLedger("http://127.0.0.1:8080", token) as ledger:
        outcome = await ledger.tool_call(request_id, "call_00", send, tool="send_email",
                                         args={"to": "ana@example.com"})

Everything but the I/O is the blocking client's: the same bodies, the same
fingerprint, the same errors, the same re-send rules. One AsyncLedger
belongs to one event loop; many coroutines of it may call at once.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from . import _aio_router
from ._aio_http import AsyncTransport
from ._aio_router import AsyncAttempt, AsyncFailoverDecision
from ._aio_toolcall import AsyncToolCall, AsyncToolFunction
from ._http import quote_id
from .client import _CLAIM_PARAMETERS
from .errors import ArgsMismatch, AttemptFenced
from .toolcall import MAX_RESULT_BYTES, ToolCallResult, check_max_result_bytes

__all__ = ["AsyncAttempt", "AsyncFailoverDecision", "AsyncLedger"]


class AsyncLedger:
    """A client of one ledgerd with one token, for the coroutines of one event loop.

    The arguments, and what each method does and raises, are those of
    :class:`Ledger`; ``max_idle_connections`` bounds the keep-alive
    connections kept open between calls. Close it with :meth:`aclose`,
    or use it as ``async with AsyncLedger(...) as ledger``.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float = 10.0,
                 retry_s: float = 30.0, complete_retry_s: float = 300.0,
                 ca_file: str | os.PathLike[str] | None = None,
                 max_result_bytes: int = MAX_RESULT_BYTES,
                 max_idle_connections: int = 8,
                 traceparent: str | None = None, tracestate: str | None = None) -> None:
        self.url = url
        self.retry_s = retry_s
        self.complete_retry_s = complete_retry_s
        self.max_result_bytes = check_max_result_bytes(max_result_bytes)
        self._transport = AsyncTransport(url, token, timeout_s=timeout_s, ca_file=ca_file,
                                         max_idle=max_idle_connections,
                                         traceparent=traceparent, tracestate=tracestate)

    def __repr__(self) -> str:
        return "<AsyncLedger %s>" % self.url

    async def __aenter__(self) -> AsyncLedger:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the idle keep-alive connections."""
        await self._transport.aclose()

    # --- tool calls ---------------------------------------------------------

    async def tool_call(self, request_id: str, tool_call_id: str, fn: AsyncToolFunction, *,
                        args: Any = None, tool: str | None = None,
                        attempt_id: str | None = None, attempt: AsyncAttempt | None = None,
                        owner: str | None = None, lease_ms: int | None = None,
                        tool_dedupes: bool = False, store_args: bool = False,
                        wait_s: float = 0, max_result_bytes: int | None = None,
                        traceparent: str | None = None, tracestate: str | None = None
                        ) -> ToolCallResult:
        """Runs ``fn(idempotency_key, fencing_token)`` at most once for this key.

        :meth:`Ledger.tool_call`, awaited: ``fn`` is a coroutine function
        (a plain function works too), the claim is renewed by a task while
        it runs, and a wait for another holder sleeps without blocking the
        loop. A cancelled ``fn`` is like an interrupted one: nothing is
        recorded, since the effect may be half done; once the lease runs
        out the key is ``outcome_unknown``. OpenTelemetry's current context
        is the calling task's, taken as the call starts.
        """
        if attempt is not None:
            if attempt_id is not None and attempt_id != attempt.attempt_id:
                raise ValueError("attempt_id and attempt name different attempts")
            attempt_id = attempt.attempt_id
        call = AsyncToolCall(self._transport, request_id, tool_call_id, args=args, tool=tool,
                             attempt_id=attempt_id, owner=owner, lease_ms=lease_ms,
                             tool_dedupes=tool_dedupes, store_args=store_args,
                             retry_s=self.retry_s, complete_retry_s=self.complete_retry_s,
                             max_result_bytes=(self.max_result_bytes if max_result_bytes is None
                                               else max_result_bytes),
                             traceparent=traceparent, tracestate=tracestate)
        try:
            return await call.run(fn, wait_s)
        except (ArgsMismatch, AttemptFenced):
            if attempt is not None:
                attempt.revoked = True
            raise

    def idempotent(self, tool: str | None = None, *, owner: str | None = None,
                   lease_ms: int | None = None, tool_dedupes: bool = False,
                   store_args: bool = False, wait_s: float = 0,
                   max_result_bytes: int | None = None
                   ) -> Callable[[Callable[..., Awaitable[Any]]],
                                 Callable[..., Awaitable[ToolCallResult]]]:
        """Decorates an ``async def`` tool so that each of its calls goes through
        :meth:`tool_call`; :meth:`Ledger.idempotent` for coroutines::

            @ledger.idempotent(tool="send_email")
            async def send_email(to, subject, *, idempotency_key):
                return await mailer.send(to, subject, idempotency_key=idempotency_key)

            outcome = await send_email(request_id=rid, tool_call_id="call_00",
                                       to="ana@example.com", subject="Your refund")
        """

        def decorate(func: Callable[..., Awaitable[Any]]
                     ) -> Callable[..., Awaitable[ToolCallResult]]:
            if not inspect.iscoroutinefunction(func):
                raise TypeError("AsyncLedger.idempotent decorates an async def tool; "
                                "Ledger.idempotent decorates a plain one")
            name = tool or func.__name__
            parameters = inspect.signature(func).parameters
            wanted = [p for p in _CLAIM_PARAMETERS if p in parameters
                      and parameters[p].kind != inspect.Parameter.POSITIONAL_ONLY]

            @functools.wraps(func)
            async def wrapper(*, request_id: str, tool_call_id: str,
                              attempt: AsyncAttempt | None = None,
                              attempt_id: str | None = None, **kwargs: Any) -> ToolCallResult:
                async def run(idempotency_key: str, fencing_token: int) -> Any:
                    claim = {"idempotency_key": idempotency_key, "fencing_token": fencing_token}
                    return await func(**kwargs, **{p: claim[p] for p in wanted})

                return await self.tool_call(request_id, tool_call_id, run, args=kwargs,
                                            tool=name, attempt=attempt, attempt_id=attempt_id,
                                            owner=owner, lease_ms=lease_ms,
                                            tool_dedupes=tool_dedupes, store_args=store_args,
                                            wait_s=wait_s, max_result_bytes=max_result_bytes)

            return wrapper

        return decorate

    # --- the router's calls -------------------------------------------------

    async def begin_attempt(self, request_id: str, attempt_id: str, *,
                            replica: str | None = None, model_revision: str | None = None,
                            lease_ms: int | None = None,
                            max_attempts: int | None = None) -> AsyncAttempt:
        """Creates an attempt of the request (and the request, if new); see
        :meth:`Ledger.begin_attempt`."""
        return await _aio_router.begin_attempt(
            self._transport, request_id, attempt_id, replica=replica,
            model_revision=model_revision, lease_ms=lease_ms, max_attempts=max_attempts,
            retry_s=self.retry_s)

    async def failover(self, request_id: str, attempt: AsyncAttempt | str, signal: str, *,
                       retry_prefill_tokens: int | None = None,
                       next_attempt: dict[str, Any] | None = None) -> AsyncFailoverDecision:
        """Reports a failure of the live attempt; returns what the router may do.
        See :meth:`Ledger.failover`; a revoked :class:`AsyncAttempt`'s heartbeat
        task is stopped before this returns."""
        return await _aio_router.failover(
            self._transport, request_id, attempt, signal,
            retry_prefill_tokens=retry_prefill_tokens, next_attempt=next_attempt,
            retry_s=self.retry_s)

    # --- reading --------------------------------------------------------------

    async def get_request(self, request_id: str) -> dict[str, Any]:
        """The request with its attempts, tool calls and history (``GET /v1/requests/{rid}``)."""
        return await self._get("/v1/requests/%s" % quote_id(request_id))

    async def get_tool_call(self, request_id: str, tool_call_id: str) -> dict[str, Any]:
        """One tool call: state, holder, fingerprint, outcome and result."""
        return await self._get("/v1/requests/%s/tool-calls/%s" % (quote_id(request_id),
                                                                  quote_id(tool_call_id)))

    async def _get(self, path: str) -> dict[str, Any]:
        answer = await self._transport.call("GET", path, retry_s=self.retry_s)
        body: dict[str, Any] = answer.body
        return body
