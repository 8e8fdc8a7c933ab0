"""Running a tool's side effect at most once per idempotency key, from a coroutine.

The twin of toolcall.py's ToolCall: the same claim, the same wait while
another holder has the key, the same bodies and the same reading of the
answers (the pure helpers of toolcall.py), with an asyncio task in place
of the renewing thread and ``await`` in place of blocking calls.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ._aio_heartbeat import AsyncHeartbeat
from ._aio_http import AsyncTransport
from ._http import Answer, Backoff, json_body
from .errors import InProgress, LedgerError
from .toolcall import (IN_PROGRESS_POLL_CAP_S, TOO_LARGE_A_BODY, ToolCallBase, ToolCallResult,
                       _dump_json, completion_digest, completion_whole, executed_result,
                       failure_record, in_progress_delay, read_claim, renew_body)

__all__ = ["AsyncToolCall", "AsyncToolFunction"]

log = logging.getLogger("ledger_client")

AsyncToolFunction = Callable[[str, int], Awaitable[Any] | Any]
"""A tool's side effect: ``fn(idempotency_key, fencing_token)``, a coroutine function
(or a plain one) whose result is a JSON value."""


class AsyncToolCall(ToolCallBase):
    """One invocation of a tool under its idempotency key: claim, run, record.

    :meth:`AsyncLedger.tool_call` makes one per call; it is not reused.
    """

    _transport: AsyncTransport

    async def _post(self, action: str, body: bytes, retry_s: float) -> Answer:
        return await self._transport.call("POST", self._path + action, body, retry_s=retry_s,
                                          trace=self._trace)

    async def run(self, fn: AsyncToolFunction, wait_s: float) -> ToolCallResult:
        """Claims the key, then replays the recorded result or runs ``fn`` and records it.

        See :meth:`AsyncLedger.tool_call` for the whole contract.
        """
        claimed = read_claim(await self._claim(wait_s), self._lease_ms)
        if isinstance(claimed, ToolCallResult):
            return claimed
        return await self._execute(fn, claimed.idempotency_key, claimed.fencing_token,
                                   claimed.lease_ms)

    async def _claim(self, wait_s: float) -> Answer:
        """Claims, waiting up to ``wait_s`` seconds while another holder has the key."""
        deadline = time.monotonic() + wait_s
        backoff = Backoff(cap_s=IN_PROGRESS_POLL_CAP_S)
        while True:
            try:
                return await self._post("claim", self._claim_body, self._retry_s)
            except InProgress as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                await asyncio.sleep(in_progress_delay(e, backoff, left))

    async def _execute(self, fn: AsyncToolFunction, key: str, token: int,
                       lease_ms: int) -> ToolCallResult:
        body = renew_body(token, self._lease_ms)
        heartbeat = AsyncHeartbeat("renew %s" % key, lease_ms / 3000,
                                   beat=lambda: self._post("renew", body, 0))
        heartbeat.start()
        try:
            try:
                value = fn(key, token)
                if inspect.isawaitable(value):
                    value = await value
            finally:
                await heartbeat.stop()
            result_json = _dump_json(value)
        except Exception as e:
            await self._record_failure(key, token, e)
            raise
        return await self._record_success(key, token, result_json)

    async def _record_failure(self, key: str, token: int, e: Exception) -> None:
        """Records what the tool's exception means for the key; a note on it says if that failed."""
        action, fields, result_json = failure_record(token, e)
        try:
            if result_json is None:
                await self._post(action, json_body(fields), self._complete_retry_s)
            else:
                await self._complete(key, fields, result_json)
        except LedgerError as failure:
            e.add_note("ledgerd did not record this failure: %s" % failure)

    async def _record_success(self, key: str, token: int, result_json: str) -> ToolCallResult:
        try:
            answer = await self._complete(key, {"fencing_token": token, "outcome": "succeeded"},
                                          result_json)
        except LedgerError as e:
            log.error("%s: the tool ran but its result was not recorded: %s", key, e)
            return executed_result(key, token, result_json, None, e)
        return executed_result(key, token, result_json, answer, None)

    async def _complete(self, key: str, fields: dict[str, Any], result_json: str) -> Answer:
        """Records a completion whose result is ``result_json``, whatever its size
        (see ToolCall._complete: whole within the bound and unless refused as too
        large a body, else as its length and SHA-256)."""
        size = len(result_json.encode("utf-8"))
        if size <= self._max_result_bytes:
            try:
                return await self._post("complete", completion_whole(fields, result_json),
                                        self._complete_retry_s)
            except LedgerError as e:
                if e.status != 413:
                    raise
                log.warning(TOO_LARGE_A_BODY, key, size)
        return await self._post("complete", completion_digest(fields, result_json),
                                self._complete_retry_s)
