"""A background thread that keeps a lease alive by renewing it on a period.

Both kinds of lease ledgerd hands out use it: a tool call's claim while the
tool runs, and a router attempt while its replica generates.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ._http import Backoff
from .errors import LedgerError, LedgerUnavailable

log = logging.getLogger("ledger_client")


class Heartbeat:
    """Calls ``beat()`` every ``interval_s`` seconds until stopped or refused.

    ``beat`` renews the lease with a single try. When ledgerd cannot be
    reached it is tried again sooner (jittered back-off, never later than
    the period), because the lease keeps running meanwhile. Any other
    refusal means the lease is lost for good (the holder was fenced, the
    lease ran out, ...): the thread logs it, hands the error to ``on_lost``
    if given, and ends.
    """

    def __init__(self, name: str, interval_s: float, beat: Callable[[], object],
                 on_lost: Callable[[LedgerError], None] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("a heartbeat needs a positive interval")
        self._interval_s = interval_s
        self._beat = beat
        self._on_lost = on_lost
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Starts beating; the first beat comes one interval from now."""
        self._thread.start()

    @property
    def running(self) -> bool:
        """Beating: started, and neither stopped nor ended by a refusal."""
        return self._thread.is_alive() and not self._stopping.is_set()

    def stop(self) -> None:
        """Stops beating; returns once no beat is in flight any more."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        delay = self._interval_s
        backoff = Backoff()
        while not self._stopping.wait(delay):
            try:
                self._beat()
            except LedgerUnavailable as e:
                log.warning("%s: renewal not answered, trying again: %s", self._thread.name, e)
                delay = min(self._interval_s, backoff.next_delay())
            except LedgerError as e:
                log.warning("%s: lease lost: %s", self._thread.name, e)
                if self._on_lost is not None:
                    self._on_lost(e)
                return
            else:
                delay = self._interval_s
                backoff = Backoff()
