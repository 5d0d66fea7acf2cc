"""How a group commit waits for the records of requests in flight: woken once, when it has
what it waits for, not by each record queued.

The writer thread waits while requests being served have yet to queue their record (the
group wait, ``IABMA_AUDIT_GROUP_WAIT_MS``). Woken by every record, it took the GIL from
the event loop a dozen times a group to take one record each time; now the loop wakes it
when the last of them is queued, when the group is full, or when a large request waits
for its row (app.audit.write.writer).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any


class GroupWait:
    def __init__(self, q: queue.SimpleQueue[Any], pending: Callable[[], int]) -> None:
        self._queue = q
        self._pending = pending
        self._wake = threading.Event()
        self._waiting = False
        self._room = 0  # records the waiting group still has room for

    def queued(self, large: bool) -> None:
        """On the event loop, after a record is queued."""
        if self._waiting and (large or self._queue.qsize() >= self._room or self._pending() <= 0):
            self._wake.set()

    def stop(self) -> None:
        """A stop was queued: a waiting group takes it now."""
        self._wake.set()

    def wait(self, room: int, deadline: float) -> bool:
        """On the writer thread, once the queue is taken: wait for records while the group
        has ``room`` for them, requests in flight have yet to queue theirs, and the group
        wait (until ``deadline``, ``time.monotonic()``) lasts. False when the group is done.
        """
        remaining = deadline - time.monotonic()
        if room <= 0 or remaining <= 0 or self._pending() <= 0:
            return False
        # Cleared before the checks that follow, so that a record queued after them sets
        # it again and the wait returns at once.
        self._wake.clear()
        self._room = room
        self._waiting = True
        try:
            if self._queue.empty() and self._pending() > 0:
                self._wake.wait(remaining)
        finally:
            self._waiting = False
        return True
