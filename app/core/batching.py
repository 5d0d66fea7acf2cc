"""Dynamic batching: concurrent small requests share one run of the graph.

A batch runs once the event loop has nothing else ready, waiting up to
``IABMA_BATCH_WAIT_MS`` for requests already in flight; a lone request never waits
(docs/design.md, "Batching").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from app.bundle.columns import Columns
from app.bundle.predictor import Prediction
from app.core.runtime import LoadedModel


@dataclass
class _Batch:
    model: LoadedModel
    parts: list[tuple[Columns, int, asyncio.Future[Prediction]]] = field(default_factory=list)
    rows: int = 0
    timer: asyncio.TimerHandle | None = None
    waited: bool = False
    paced_until: float = 0.0  # a paced batch runs by then at the latest (loop.time())


class Batcher:
    """Merge concurrent requests into graph runs.

    Parameters
    ----------
    wait_ms : the longest a batch waits for more requests while others are in flight.
    max_rows : rows in one graph run; a request that would pass it opens the next batch.
    in_flight : how many requests are being served now (this one included).
    on_run : told each graph run's model, number of requests and whether it waited.
    gap_ms : while others are in flight, how long a paced request's batch waits for the
        next, again after each that comes (gRPC's ``IABMA_GRPC_BATCH_GAP_MS``).
    gap_cap_ms : the longest a paced batch waits in all; at least ``gap_ms``.
    """

    def __init__(
        self,
        wait_ms: float,
        max_rows: int,
        in_flight: Callable[[], int] = lambda: 1,
        on_run: Callable[[LoadedModel, int, bool], None] | None = None,
        gap_ms: float = 0.0,
        gap_cap_ms: float = 0.0,
    ) -> None:
        self.wait = wait_ms / 1000.0
        self.gap = gap_ms / 1000.0
        self.gap_cap = max(gap_cap_ms, gap_ms) / 1000.0
        self.max_rows = max_rows
        self.in_flight = in_flight
        self.on_run = on_run
        self._open: _Batch | None = None
        self.batches = 0  # graph runs, for tests and metrics
        self.requests = 0
        self.waited = 0  # batches that waited for more requests

    async def predict(
        self, model: LoadedModel, columns: Columns, n: int, paced: bool = False
    ) -> Prediction:
        """The request's answer from a shared graph run. A ``paced`` request (one that
        arrives one per turn of the event loop, as grpc.aio accepts calls) opens a batch
        that waits while others keep coming, up to ``gap_ms`` after the last."""
        loop = asyncio.get_running_loop()
        batch = self._open
        if batch is None or batch.model is not model or batch.rows + n > self.max_rows:
            batch = self._open = _Batch(model)
            if self.wait > 0 and self.in_flight() > 1:
                batch.timer = loop.call_later(self.wait, self._run, batch)
                batch.waited = True
                self.waited += 1
            elif paced and self.gap > 0 and self.in_flight() > 1:
                batch.paced_until = loop.time() + self.gap_cap
                batch.timer = loop.call_later(self.gap, self._run, batch)
                batch.waited = True
                self.waited += 1
            else:
                loop.call_soon(self._run, batch)
        elif batch.paced_until and batch.timer is not None:
            # Another came within the gap: wait one more, as long as the cap allows.
            batch.timer.cancel()
            delay = min(self.gap, batch.paced_until - loop.time())
            batch.timer = loop.call_later(max(delay, 0.0), self._run, batch)
        done: asyncio.Future[Prediction] = loop.create_future()
        batch.parts.append((columns, n, done))
        batch.rows += n
        if batch.timer is not None and len(batch.parts) >= self.in_flight():
            # Everyone in flight is here: nobody else can be answered and send again.
            batch.timer.cancel()
            batch.timer = None
            loop.call_soon(self._run, batch)
        return await done

    def parked(self) -> int:
        """Requests in the open batch that wait on its timer, i.e. for others in flight."""
        batch = self._open
        return len(batch.parts) if batch is not None and batch.timer is not None else 0

    def _run(self, batch: _Batch) -> None:
        if self._open is batch:
            self._open = None
        self.batches += 1
        self.requests += len(batch.parts)
        if self.on_run is not None:
            self.on_run(batch.model, len(batch.parts), batch.waited)
        try:
            if len(batch.parts) == 1:
                columns, _, done = batch.parts[0]
                if not done.done():
                    done.set_result(batch.model.predictor.predict(columns))
                return
            names = batch.parts[0][0].keys()
            merged = {k: np.concatenate([c[k] for c, _, _ in batch.parts]) for k in names}
            pred = batch.model.predictor.predict(merged)
        except Exception as exc:  # onnxruntime's errors are untyped; each request reports it
            for _, _, done in batch.parts:
                if not done.done():
                    done.set_exception(exc)
            return
        start = 0
        for _, n, done in batch.parts:
            if not done.done():
                done.set_result(pred.rows(slice(start, start + n)))
            start += n
