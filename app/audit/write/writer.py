"""Group commit on a writer thread: requests queue their record and await its commit.

A group holds what is queued (up to ``IABMA_AUDIT_BATCH_MAX``), waits briefly for records
of requests in flight, and commits in one statement; failures answer 503. A record that
cannot be built or that the database refuses fails its own request alone
(:mod:`app.audit.write.refusals`). Why it works this way: docs/design.md, "Audit trail".
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import threading
import time
from collections.abc import Callable

from app.audit.store.records import AuditRecord
from app.audit.write import refusals
from app.audit.write.apart import Refused
from app.audit.write.deadlines import CANCEL_AFTER_S, CLAIM_GRACE_S, Deadlines
from app.audit.write.gather import GroupWait
from app.audit.write.group_rows import Built, log_rows
from app.audit.write.health import PROBE_EVERY_S, TrailHealth
from app.audit.write.trail_db import AuditStore
from app.errors import AuditUnavailable
from app.metrics import ServiceMetrics

log = logging.getLogger("iabma.audit")
# The record, the future its commit settles, the one set when it is taken, its deadline.
_Item = tuple[AuditRecord, asyncio.Future[None], asyncio.Future[None] | None, float]
_STOP = None


class AuditWriter:
    def __init__(
        self,
        store: AuditStore,
        metrics: ServiceMetrics,
        labels: Callable[[], tuple[str, str]],
        batch_max: int,
        timeout_seconds: float,
        group_wait_seconds: float = 0.0,
        pending: Callable[[], int] = lambda: 0,
        unready_seconds: float = 5.0,
    ) -> None:
        """``pending`` counts the requests being served that have yet to queue a record;
        a group waits for them for up to ``group_wait_seconds``. After commits have failed
        for ``unready_seconds``, :attr:`health` says the replica is not ready."""
        self.health = TrailHealth(unready_seconds)
        self.store = store
        self.group_wait = group_wait_seconds
        self.pending = pending
        self.metrics = metrics
        self.labels = labels
        self.batch_max = batch_max
        self.timeout_seconds = timeout_seconds
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._in_commit = 0
        self._deadlines: Deadlines[_Item] = Deadlines(lambda it: it[1], lambda it: it[3])
        self._thread: threading.Thread | None = None
        self._running = False  # the thread has started and not ended
        self._group_wait = GroupWait(self._queue, pending)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchdog: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="iabma-audit", daemon=True)
        self._running = True
        self._thread.start()
        self._watchdog = self._loop.create_task(self._expire(), name="iabma-audit-watchdog")

    @property
    def depth(self) -> int:
        return self._queue.qsize() + self._in_commit

    def submit(self, record: AuditRecord) -> asyncio.Future[None]:
        """Queue ``record``; the future settles once it is committed, or with
        ``AuditUnavailable``. The caller may work while the commit runs, then await it."""
        return self._put(record, None)

    def submit_large(
        self, record: AuditRecord
    ) -> tuple[asyncio.Future[None], asyncio.Future[None]]:
        """Queue ``record``; also return a future set when the writer takes it (or, like
        the first, failed). Await ``taken`` (or the commit) before long GIL-bound work."""
        assert self._loop is not None
        taken: asyncio.Future[None] = self._loop.create_future()
        return self._put(record, taken), taken

    def _put(self, record: AuditRecord, taken: asyncio.Future[None] | None) -> asyncio.Future[None]:
        # A flag the thread clears as it ends, not Thread.is_alive(): a lock's try on every
        # request.
        if not self._running or self._loop is None:
            raise AuditUnavailable("the audit writer is not running", field="audit")
        done: asyncio.Future[None] = self._loop.create_future()
        deadline = time.monotonic() + self.timeout_seconds
        self._deadlines.queued(done, deadline)
        self._queue.put((record, done, taken, deadline))
        self._group_wait.queued(taken is not None)
        return done

    def _timed_out(self) -> AuditUnavailable:
        return AuditUnavailable(
            f"the audit store did not commit within {self.timeout_seconds:g} s "
            "(IABMA_AUDIT_TIMEOUT_SECONDS)",
            field="audit",
        )

    async def _expire(self) -> None:
        """Fail the requests whose record has waited too long (a hung database)."""
        while True:
            await asyncio.sleep(min(0.5, self.timeout_seconds / 4))
            self._expire_now(time.monotonic())
            self.metrics.audit_depth.set(self.labels(), self.depth)

    def _expire_now(self, now: float) -> None:
        for fut in self._deadlines.expire(now, self.store.cancel_insert):
            fut.set_exception(self._timed_out())

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            self._running = False

    def _serve(self) -> None:
        stopping = False
        while not stopping:
            first = self._next()
            if first is _STOP:
                break
            more, stopping = self._take(self.batch_max - 1)
            batch = [first, *more]
            stopping = self._commit(batch, gather=not stopping) or stopping

    def _take(self, room: int) -> tuple[list[_Item], bool]:
        """Up to ``room`` items already queued, without waiting; True if a stop came."""
        items: list[_Item] = []
        while len(items) < room:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return items, True
            items.append(item)
        return items, False

    def _next(self) -> _Item | None:
        """The next queued item; while commits fail, a probe commit whenever none comes for
        a while (a replica taken out of the balancer gets no records to try with)."""
        while True:
            if not self.health.failing:
                return self._queue.get()
            try:
                return self._queue.get(timeout=PROBE_EVERY_S)
            except queue.Empty:
                self._probe()

    def _probe(self) -> None:
        try:
            self.store.probe()
        except Exception as exc:
            self.health.failed(exc, 0)
        else:
            self.health.succeeded()

    def _commit(self, batch: list[_Item], gather: bool) -> bool:
        """Build the group's rows, add those of requests on their way (``gather``), insert
        them in one transaction, and settle the group. True if told to stop meanwhile."""
        assert self._loop is not None
        self._deadlines.begin()
        batch = self._in_time(batch)
        if not batch:
            return False
        self._in_commit = len(batch)
        t0 = time.perf_counter()
        stop = False
        refused: Refused = {}
        try:
            rows: list[Built] = []
            if gather and self.group_wait > 0:
                if any(it[2] is not None for it in batch):
                    rows = self._rows(batch)  # a large request waits for its row
                stop = self._gather(batch, rows)
            rows.extend(self._rows(batch[len(rows) :]))
            refused = self._insert(batch, rows)
        except Exception as exc:
            reason = self.health.failed(exc, len(batch))
            late = time.monotonic() >= min(item[3] for item in batch)
            error: Exception | None = (
                self._timed_out()  # cancelled, or given up on: the timeout is the reason
                if late
                else AuditUnavailable(
                    f"the audit store is unavailable ({reason}); nothing was recorded, retry later",
                    field="audit",
                )
            )
        else:
            error = None
        seconds = time.perf_counter() - t0
        self._in_commit = 0
        self._loop.call_soon_threadsafe(self._settle, batch, error, seconds, refused)
        return stop

    def _insert(self, batch: list[_Item], rows: list[Built]) -> Refused:
        """Insert the rows that could be built; the requests refused, by place in
        ``batch``, with what to answer them (:mod:`app.audit.write.refusals`)."""
        records = [rec for rec, _, _, _ in batch]
        places, built, refused = refusals.built_rows(records, rows)
        if not places:
            return refused
        self._deadlines.inserting(True)
        try:
            give_up = min(batch[k][3] for k in places) + CANCEL_AFTER_S
            by_db = self.store.insert_rows(built, give_up)
        finally:
            self._deadlines.inserting(False)
        self.health.succeeded()
        for j, fault in by_db.items():
            refused[places[j]] = refusals.answer(records[places[j]], fault)
        return refused

    def _rows(self, items: list[_Item]) -> list[Built]:
        """The items' rows; then their large requests may encode (see the module docstring)."""
        assert self._loop is not None
        taken = [t for _, _, t, _ in items if t is not None]
        try:
            return log_rows([rec for rec, _, _, _ in items])
        finally:
            # Built (or failed): the writer now waits without the GIL, on the queue or the
            # database.
            if taken:
                self._loop.call_soon_threadsafe(_release, taken)

    def _gather(self, batch: list[_Item], rows: list[Built]) -> bool:
        """Add the records of requests already being served, for up to the group wait.

        Waits only while some request in flight has yet to queue its record (a lone
        request never waits) and returns at once when none has. True when told to stop.
        The rows of the records added are built at the end, together (app.audit.write.group_rows),
        except when a large request waits for its row: then at once, with those before.
        """
        deadline = time.monotonic() + self.group_wait
        while True:
            more, stop = self._take(self.batch_max - len(batch))
            for item in self._in_time(more) if more else ():
                batch.append(item)
                self._in_commit = len(batch)
                if item[2] is not None:
                    rows.extend(self._rows(batch[len(rows) :]))
            if stop:
                return True
            if not self._group_wait.wait(self.batch_max - len(batch), deadline):
                return False

    def _in_time(self, items: list[_Item]) -> list[_Item]:
        """The items still within their deadline, now claimed for a commit; the others'
        requests get their 503 now, and their records are never written.

        Their requests were (or are about to be) answered 503, so a record would stand for
        an answer never given; and written after a stall of minutes, it would land in a
        time whose sums ``GET /weights`` may have stored already (:mod:`app.audit.read.rollup`).
        """
        assert self._loop is not None
        keep, late = self._deadlines.claim(items)
        if late:
            log.warning("audit: %d records waited past their deadline; not written", len(late))
            self._loop.call_soon_threadsafe(self._fail_late, late)
        return keep

    def _fail_late(self, items: list[_Item]) -> None:
        _release([t for _, _, t, _ in items if t is not None])
        for _, fut, _, _ in items:
            if not fut.done():
                fut.set_exception(self._timed_out())

    def _settle(
        self, batch: list[_Item], error: Exception | None, seconds: float, refused: Refused
    ) -> None:
        """On the event loop: wake the requests of a committed (or failed) group, and
        those refused alone with their own fault."""
        labels = self.labels()
        self._deadlines.settled(batch)
        for k, exc in refused.items():
            if not batch[k][1].done():
                batch[k][1].set_exception(exc)
        if refused:
            batch = [item for k, item in enumerate(batch) if k not in refused]
        answered = sum(
            fut.done() and not fut.cancelled() and fut.exception() is not None
            for _, fut, _, _ in batch
        )
        if error is None and answered:
            log.error(
                "audit: %d records were committed after their requests got a 503: the "
                "commit took more than IABMA_AUDIT_TIMEOUT_SECONDS + %g s",
                answered,
                CLAIM_GRACE_S,
            )
        if error is None:
            self.metrics.audit_commit_seconds.observe(labels, seconds)
            # Under each record's own version: at a swap a group holds both.
            versions = collections.Counter((rec.model, rec.version) for rec, _, _, _ in batch)
            for key, n in versions.items():
                self.metrics.audit_records.inc(key, n)
        else:
            self.metrics.audit_failures.inc(labels)
        for _, fut, _, _ in batch:
            if fut.done():
                continue
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

    async def close(self) -> None:
        """Commit whatever is queued, then stop the writer thread."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(_STOP)
            self._group_wait.stop()
            await asyncio.to_thread(self._thread.join)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        # Settle callbacks posted by the last commit before anyone reads the futures.
        await asyncio.sleep(0)


def _release(futures: list[asyncio.Future[None]]) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(None)
