"""The staged version in shadow: follow ``STAGED``, score each answered request with it off
the request's path, keep its answer in the trail, and never fail a served request.

A request hands its columns and served answer to :meth:`Shadow.offer` (a queue append);
a thread takes what queued every :data:`GROUP_SECONDS`, runs the staged gate once over
it, large requests apart (:class:`app.bundle.staged_gate.StagedGate`), and writes it as
one ``iabma_shadow`` row. A staged version that fails to open, or fails on a group, is
logged and counted, and shadowing stops until ``STAGED`` moves (docs/serving.md).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Engine

from app.audit.read import shadow_scores
from app.audit.store import shadow_table
from app.audit.store.records import now_us
from app.bundle.loader import BundleError
from app.bundle.predictor import Prediction
from app.bundle.staged import STAGED_FILE
from app.bundle.staged_gate import ExpertOutputs, StagedGate, expert_outputs
from app.core.context import RequestContext
from app.core.plane import InferenceRequest, InferenceResult
from app.core.runtime import ModelRuntime
from app.metrics.shadow import shadow_families
from app.settings import Settings

log = logging.getLogger("iabma.shadow")
# How long requests wait in the queue for their group: a group is one graph run per
# staged version (large requests apart) and one insert, whose commit is the costly part.
GROUP_SECONDS = 0.25
MAX_QUEUED = 20_000  # requests held for the thread; beyond, they are dropped and counted
ALONE_ROWS = 256  # a request of this many rows is scored alone, not joined to others
REFRESH_SECONDS = 60.0  # how often the thread sets iabma_shadow_nll_diff from the trail


@dataclass(slots=True)
class Offered:
    gate: StagedGate
    request_id: str
    created_us: int
    columns: dict[str, np.ndarray]
    prediction: Prediction


class Shadow:
    """This worker's staged version, its queue and the thread that empties it."""

    def __init__(self, settings: Settings, runtime: ModelRuntime) -> None:
        self.settings = settings
        self.runtime = runtime
        self.pointer = settings.store / settings.model_name / STAGED_FILE
        self.gate: StagedGate | None = None
        self.stopped: dict[str, str] | None = None  # {"version", "error"} of the last fault
        self.engine: Engine | None = None
        self._seen: tuple[Any, ...] | None = None
        self._queue: collections.deque[Offered] = collections.deque()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._refreshed = 0.0
        self._ensured = False  # iabma_shadow exists in the trail
        self.offered = 0  # requests queued (event loop)
        self.settled = 0  # of those, the ones written or failed (the thread)
        self._stopped_at: tuple[Any, ...] | None = None  # the pointer's key at the last fault

    # -- the request path (event loop): must never raise --------------------------------
    def offer(
        self, result: InferenceResult, request: InferenceRequest, ctx: RequestContext
    ) -> None:
        gate = self.gate
        if gate is None or gate.served_version != result.model.version:
            return
        if len(self._queue) >= MAX_QUEUED:
            shadow_families().faults.labels(*result.model.labels, gate.version, "dropped").inc()
            return
        self._queue.append(
            Offered(gate, ctx.request_id, now_us(), request.columns, result.prediction)
        )
        self.offered += 1

    def idle(self) -> bool:
        """Every request queued so far is written, or its fault counted."""
        return self.settled == self.offered

    # -- following STAGED ----------------------------------------------------------------
    def start(self, engine: Engine | None) -> None:
        """Shadow into ``engine``'s trail (None: no trail, so nothing to shadow into)."""
        self.engine = engine
        if engine is not None:
            self._thread = threading.Thread(target=self._work, name="iabma-shadow", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _stat(self) -> tuple[Any, ...] | None:
        try:
            st = os.stat(self.pointer)
        except OSError:
            return None
        served = self.runtime.current
        return (st.st_ino, st.st_mtime_ns, st.st_size, served.version if served else None)

    async def check(self, force: bool = False) -> None:
        """Open what ``STAGED`` names if it (or the served version) changed; a version that
        fails to open is logged and counted, and the served requests go on. A version that
        stopped (at opening or on a group) is not opened again until ``STAGED`` moves."""
        key = self._stat()
        if (key == self._seen and not force) or (key is not None and key == self._stopped_at):
            return  # unchanged, or the version that stopped, still named: not again
        self._seen = key
        served = self.runtime.current
        named = _read(self.pointer) if key is not None else None
        if named is None or served is None or self.engine is None or named == served.version:
            if self.gate is not None:
                log.info("no longer shadowing version %s", self.gate.version)
            self.gate = None
            return
        if self.gate is not None and (self.gate.version, self.gate.served_version) == (
            named,
            served.version,
        ):
            return
        path = self.pointer.parent / named
        threads = self.settings.ort_intra_op_threads
        try:
            gate = await asyncio.to_thread(StagedGate, path, served.manifest, threads)
        except (BundleError, OSError) as exc:
            self._fault(named, "load", exc)
            self.gate = None
            return
        self.stopped = None
        self.gate = gate
        how = "its gate alone" if gate.gate_only else "its own fused graph"
        log.info("shadowing version %s beside %s (%s)", named, served.version, how)

    async def run(self) -> None:
        """Check every reload interval until cancelled."""
        while True:
            await asyncio.sleep(self.settings.reload_interval_seconds)
            try:
                await self.check()
            except Exception:
                log.exception("checking %s failed", self.pointer)

    def _fault(self, version: str, stage: str, exc: BaseException) -> None:
        served = self.runtime.current
        labels = (self.settings.model_name, served.version if served else "")
        shadow_families().faults.labels(*labels, version, stage).inc()
        self.stopped = {"version": version, "error": f"{stage}: {exc}"}
        self._stopped_at = self._seen
        log.error("shadow of version %s stopped at %s: %s", version, stage, exc)

    # -- the thread ----------------------------------------------------------------------
    def _work(self) -> None:
        while not self._halt.wait(GROUP_SECONDS):
            self.drain()
            if time.monotonic() - self._refreshed > REFRESH_SECONDS:
                self._refreshed = time.monotonic()
                self.refresh()
        self.drain()

    def drain(self) -> int:
        """Score what queued and write it, one row per staged version; the number of
        requests written."""
        taken: list[Offered] = []
        while self._queue:
            taken.append(self._queue.popleft())
        by_gate: dict[int, list[Offered]] = {}
        for item in taken:
            by_gate.setdefault(id(item.gate), []).append(item)
        done = 0
        for items in by_gate.values():
            done += self._group(items)
            self.settled += len(items)
        return done

    def _group(self, items: list[Offered]) -> int:
        gate = items[0].gate
        try:
            blobs = [gate.score(*_joined(batch, gate)).blob() for batch in _batches(items)]
        except Exception as exc:  # whatever the staged graph does, the served one goes on
            if self.gate is gate:
                self.gate = None
            self._fault(gate.version, "score", exc)
            return 0
        model, served, staged = self.settings.model_name, gate.served_version, gate.version
        group = shadow_table.ShadowGroup(
            model, served, staged, len(gate.experts),
            [it.request_id for it in items], [it.created_us for it in items],
            [it.prediction.n for it in items], b"".join(blobs),
        )  # fmt: skip
        try:
            assert self.engine is not None
            if not self._ensured:
                shadow_table.ensure(self.engine)
                self._ensured = True
            shadow_table.write(self.engine, group)
        except Exception as exc:
            shadow_families().faults.labels(model, served, staged, "write").inc(len(items))
            log.error("could not keep %d shadowed requests: %s", len(items), exc)
            return 0
        shadow_families().requests.labels(model, served, staged).inc(len(items))
        return len(items)

    def refresh(self) -> dict[str, Any] | None:
        """Recompute the comparison from the trail and set the gauges; None when idle."""
        gate, served = self.gate, self.runtime.current
        if gate is None or served is None or self.engine is None:
            return None
        try:
            block = shadow_scores.compare(
                self.engine, served.name, served.manifest, gate.manifest, drift=False
            )
        except Exception as exc:
            log.warning("could not compare the staged version: %s", exc)
            return None
        publish(block)
        return block


def publish(block: dict[str, Any]) -> None:
    """``iabma_shadow_nll_diff`` and ``iabma_shadow_rows`` from a comparison."""
    f = shadow_families()
    labels = (block["model"], block["served_version"], block["version"])
    f.rows.labels(*labels).set(block["rows"])
    if block["nll_diff"] is not None:
        f.nll_diff.labels(*labels).set(block["nll_diff"])


def _batches(items: list[Offered]) -> Iterator[list[Offered]]:
    """The items in order, in runs to score at once: a large request alone (it is a batch
    already, and joining it to others would only copy it), small ones together."""
    run: list[Offered] = []
    for item in items:
        if item.prediction.n >= ALONE_ROWS:
            if run:
                yield run
                run = []
            yield [item]
        else:
            run.append(item)
    if run:
        yield run


def _joined(items: list[Offered], gate: StagedGate) -> tuple[dict[str, np.ndarray], ExpertOutputs]:
    """The columns the staged version reads and the served experts' outputs of a run of
    requests as one batch (a lone request's as they are). Only what is read is joined:
    joining whole answers cost 4 us a request."""
    if len(items) == 1:
        return items[0].columns, expert_outputs(items[0].prediction)
    columns = {k: np.concatenate([it.columns[k] for it in items]) for k in gate.needs}
    if not gate.gate_only:
        return columns, (None, None, None)
    parts = [expert_outputs(it.prediction) for it in items]
    joined = [
        None if a is None else np.concatenate([p[k] for p in parts]) for k, a in enumerate(parts[0])
    ]
    return columns, (joined[0], joined[1], joined[2])


def _read(pointer: Any) -> str | None:
    try:
        return str(pointer.read_text(encoding="utf-8")).strip() or None
    except OSError:
        return None
