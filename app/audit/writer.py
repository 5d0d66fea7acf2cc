"""Group commit: requests queue their record and wait; one writer commits them together.

Each request awaits its own future. The writer takes everything queued (up to
``IABMA_AUDIT_BATCH_MAX``), commits it in one transaction on a dedicated thread, then
resolves all those futures at once; while it commits, the next group accumulates. A
response therefore leaves only after its record is durable, yet under load one fsync is
shared by many requests. If the commit fails, or takes longer than
``IABMA_AUDIT_TIMEOUT_SECONDS``, the waiting requests get
:class:`~app.errors.AuditUnavailable` (503). Closing the writer flushes the queue first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from app.audit.records import AuditRecord
from app.audit.store import AuditStore
from app.errors import AuditUnavailable
from app.metrics import ServiceMetrics

log = logging.getLogger("iabma.audit")
_Item = tuple[AuditRecord, asyncio.Future[None]]


class AuditWriter:
    def __init__(
        self,
        store: AuditStore,
        metrics: ServiceMetrics,
        labels: Callable[[], tuple[str, str]],
        batch_max: int,
        timeout_seconds: float,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.labels = labels
        self.batch_max = batch_max
        self.timeout_seconds = timeout_seconds
        self._queue: asyncio.Queue[_Item | None] = asyncio.Queue()
        self._in_commit = 0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="iabma-audit")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="iabma-audit")

    @property
    def depth(self) -> int:
        return self._queue.qsize() + self._in_commit

    def _gauge(self) -> None:
        self.metrics.audit_depth.set(self.labels(), self.depth)

    async def write(self, record: AuditRecord) -> None:
        """Return once ``record`` is committed; raise ``AuditUnavailable`` otherwise."""
        if self._task is None or self._task.done():
            raise AuditUnavailable("the audit writer is not running", field="audit")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # A request that gave up waiting must not leave an unretrieved exception behind.
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._queue.put_nowait((record, done))
        self._gauge()
        try:
            await asyncio.wait_for(asyncio.shield(done), self.timeout_seconds)
        except TimeoutError:
            raise AuditUnavailable(
                f"the audit store did not commit within {self.timeout_seconds:g} s "
                "(IABMA_AUDIT_TIMEOUT_SECONDS)",
                field="audit",
            ) from None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < self.batch_max and not self._queue.empty():
                item = self._queue.get_nowait()
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            self._in_commit = len(batch)
            t0 = time.perf_counter()
            try:
                await loop.run_in_executor(
                    self._executor, self.store.insert, [rec for rec, _ in batch]
                )
            except Exception as exc:
                log.error("audit commit of %d records failed: %s", len(batch), exc, exc_info=exc)
                self.metrics.audit_failures.inc(self.labels())
                message = (
                    f"the audit store is unavailable ({type(exc).__name__}); nothing was "
                    "recorded, retry later"
                )
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(AuditUnavailable(message, field="audit"))
            else:
                labels = self.labels()
                self.metrics.audit_commit_seconds.observe(labels, time.perf_counter() - t0)
                self.metrics.audit_records.inc(labels, len(batch))
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(None)
            self._in_commit = 0
            self._gauge()

    async def close(self) -> None:
        """Commit whatever is queued, then stop the writer thread."""
        if self._task is not None and not self._task.done():
            self._queue.put_nowait(None)
            await self._task
        self._executor.shutdown(wait=True)
