"""Who settles a record whose deadline has passed: the writer thread or the watchdog.

A record the writer has claimed is the writer's to settle; one the watchdog failed first
is never written. The reasons: docs/design.md, "Audit trail".
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

CANCEL_AFTER_S = 0.5
CLAIM_GRACE_S = 5.0

T = TypeVar("T")  # a queued item; ``future_of`` gives its request's future
Future = asyncio.Future[None]


class Deadlines(Generic[T]):
    def __init__(self, future_of: Callable[[T], Future], deadline_of: Callable[[T], float]):
        self._future_of = future_of
        self._deadline_of = deadline_of
        self._lock = threading.Lock()
        # Futures in the order they were queued, with the time each must commit by.
        self._queued: collections.deque[tuple[float, Future]] = collections.deque()
        self._claimed: dict[Future, int] = {}  # -> the commit that took it
        self._abandoned: set[Future] = set()
        self._held: list[tuple[float, Future]] = []
        self._commits = 0  # commits begun
        self._inserting = 0  # the commit whose statement runs now, or 0
        self._cancelled = 0  # the last commit whose statement was sent a cancel

    def queued(self, future: Future, deadline: float) -> None:
        """On the event loop, as the record is queued."""
        self._queued.append((deadline, future))

    # On the writer thread.

    def begin(self) -> int:
        """A new commit; its number."""
        self._commits += 1
        return self._commits

    def claim(self, items: list[T]) -> tuple[list[T], list[T]]:
        """``(kept, late)``: the items within their deadline, now claimed for the current
        commit, and those past it or abandoned, never to be written."""
        now = time.monotonic()
        kept: list[T] = []
        late: list[T] = []
        with self._lock:
            for it in items:
                (late if self._is_late(it, now) else kept).append(it)
            self._abandoned.difference_update(self._future_of(it) for it in late)
            self._claimed.update((self._future_of(it), self._commits) for it in kept)
        return kept, late

    def _is_late(self, item: T, now: float) -> bool:
        return self._deadline_of(item) <= now or self._future_of(item) in self._abandoned

    def inserting(self, running: bool) -> None:
        """Around the commit's statement: while it runs, the watchdog may cancel it."""
        with self._lock:
            self._inserting = self._commits if running else 0

    # On the event loop.

    def settled(self, items: list[T]) -> None:
        """The commit of ``items`` is over; their futures are about to be settled."""
        with self._lock:
            for it in items:
                self._claimed.pop(self._future_of(it), None)

    def expire(self, now: float, cancel: Callable[[], None]) -> list[Future]:
        """The futures to fail now; runs ``cancel`` on a thread of its own, once per
        commit, for a claimed record :data:`CANCEL_AFTER_S` past its deadline (on
        PostgreSQL a cancel is a round trip a partitioned server may never answer)."""
        due = list(self._held)
        self._held.clear()
        while self._queued and (self._queued[0][1].done() or self._queued[0][0] <= now):
            due.append(self._queued.popleft())
        fail = []
        for deadline, fut in due:
            if fut.done():
                continue
            with self._lock:
                commit = self._claimed.get(fut)
                if commit is not None and now < deadline + CLAIM_GRACE_S:
                    self._held.append((deadline, fut))  # its commit settles it
                    if now >= deadline + CANCEL_AFTER_S and commit == self._inserting:
                        self._cancel(commit, cancel)
                    continue
                if commit is None:
                    self._abandoned.add(fut)
            fail.append(fut)
        return fail

    def _cancel(self, commit: int, cancel: Callable[[], None]) -> None:
        if self._cancelled == commit:
            return
        self._cancelled = commit
        threading.Thread(target=cancel, name="iabma-audit-cancel", daemon=True).start()
