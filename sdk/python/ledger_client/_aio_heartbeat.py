"""An asyncio task that keeps a lease alive by renewing it on a period.

The coroutine twin of _heartbeat.py, with the same rules: a renewal not
answered is tried again sooner, any other refusal ends the task. Both a
tool call's claim and a router attempt's lease use it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ._http import Backoff
from .errors import LedgerError, LedgerUnavailable

log = logging.getLogger("ledger_client")


class AsyncHeartbeat:
    """Awaits ``beat()`` every ``interval_s`` seconds until stopped or refused.

    ``beat`` renews the lease with a single try. When ledgerd cannot be
    reached it is tried again sooner (jittered back-off, never later than
    the period), because the lease keeps running meanwhile. Any other
    refusal means the lease is lost for good: the task logs it and ends.
    """

    def __init__(self, name: str, interval_s: float,
                 beat: Callable[[], Awaitable[object]]) -> None:
        if interval_s <= 0:
            raise ValueError("a heartbeat needs a positive interval")
        self._name = name
        self._interval_s = interval_s
        self._beat = beat
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Starts beating in a task of the running loop; the first beat comes one
        interval from now."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    @property
    def running(self) -> bool:
        """Beating: started, and neither stopped nor ended by a refusal."""
        return (self._task is not None and not self._task.done()
                and not self._stopping.is_set())

    def signal_stop(self) -> None:
        """Asks the task to end after the beat in flight, if any, without waiting."""
        self._stopping.set()

    async def stop(self) -> None:
        """Stops beating; returns once no beat is in flight any more."""
        self._stopping.set()
        task = self._task
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait([task])

    async def _run(self) -> None:
        delay = self._interval_s
        backoff = Backoff()
        while True:
            try:
                async with asyncio.timeout(delay):
                    await self._stopping.wait()
                return
            except TimeoutError:
                pass
            try:
                await self._beat()
            except LedgerUnavailable as e:
                log.warning("%s: renewal not answered, trying again: %s", self._name, e)
                delay = min(self._interval_s, backoff.next_delay())
            except LedgerError as e:
                log.warning("%s: lease lost: %s", self._name, e)
                return
            else:
                delay = self._interval_s
                backoff = Backoff()
