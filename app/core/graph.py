"""The graph thread: large requests' graphs off the event loop, one at a time, and in
parts when their answer can be encoded part by part meanwhile.

One thread: concurrent runs would each grow onnxruntime's arena (415 MB for california at
8 concurrent 1000-row requests), and two cores gain nothing from more than one graph
thread beside the event loop.
"""

from __future__ import annotations

import asyncio
import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from app.bundle.predictor import Prediction
from app.core.plane import InferenceRequest, InferenceResult
from app.core.runtime import LoadedModel

# A larger request also runs inline when no other request is being served and its graph
# should take at most this long: the hop to the graph thread and back costs about 0.25 ms
# here, and a request arriving meanwhile waits no longer than this for the loop.
ALONE_SECONDS = 0.002
ROW_SECONDS = "graph_seconds_per_row"  # the key of a model's running estimate in its cache
# Off the event loop, a request of more rows runs its graph in parts of about this many,
# and the event loop encodes each part's rows while the next part's graph runs.
PART_ROWS = 256


def runs_alone_inline(n: int, in_flight: int, seconds_per_row: float | None) -> bool:
    """Whether a request of ``n`` rows, above the inline limit, runs on the event loop.

    Only when it is the one request in flight and the model's graph time is known (from
    its earlier large requests) and short enough; a model whose graph is slow per row (a
    kNN expert over its training set) keeps every large request off the loop.
    """
    if in_flight != 1 or seconds_per_row is None:
        return False
    return n * seconds_per_row <= ALONE_SECONDS


class AnswerParts(Protocol):
    """An answer made in parts (:class:`app.codecs.native.RowParts`)."""

    def part(self, result: InferenceResult) -> bytes: ...

    def join(self, model: LoadedModel, parts: list[bytes]) -> bytes: ...


class GraphThread:
    """The one thread that runs large requests' graphs, and the rule for when one runs
    on the event loop instead."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="iabma-graph")

    def inline(self, model: LoadedModel, n: int, in_flight: int) -> bool:
        return runs_alone_inline(n, in_flight, model.cache.get(ROW_SECONDS))

    async def predict(
        self, model: LoadedModel, request: InferenceRequest, in_flight: int
    ) -> Prediction:
        """A large request's answer: on this thread, or inline (:func:`runs_alone_inline`)."""
        if self.inline(model, request.n, in_flight):
            pred = model.predictor.predict(request.columns)
        else:
            loop = asyncio.get_running_loop()
            run = model.predictor.predict
            pred = await loop.run_in_executor(self.executor, run, request.columns)
        return _learned(model, pred, request.n)

    async def predict_in_parts(
        self, model: LoadedModel, request: InferenceRequest, parts: AnswerParts
    ) -> tuple[Prediction, list[bytes], Prediction]:
        """The answer of runs of about :data:`PART_ROWS` rows each, queued here at once;
        each run's rows but the last's encoded by ``parts`` on the event loop as the run
        ends (the graph holds no GIL); and the last run's answer."""
        loop = asyncio.get_running_loop()
        n, columns = request.n, request.columns
        k = -(-n // PART_ROWS)
        cuts = [round(i * n / k) for i in range(k + 1)]  # parts alike in size
        runs = [
            loop.run_in_executor(
                self.executor, model.predictor.predict, {c: v[a:b] for c, v in columns.items()}
            )
            for a, b in itertools.pairwise(cuts)
        ]
        preds: list[Prediction] = []
        encoded: list[bytes] = []
        try:
            for run in runs:
                if preds:
                    encoded.append(parts.part(InferenceResult(model, preds[-1])))
                preds.append(await run)
        except BaseException:
            for run in runs:
                run.cancel()
            await asyncio.gather(*runs, return_exceptions=True)
            raise
        return _learned(model, Prediction.joined(preds), n), encoded, preds[-1]

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)


def _learned(model: LoadedModel, pred: Prediction, n: int) -> Prediction:
    """``pred``, its graph's time per row now in the model's running estimate."""
    per_row, seen = model.cache.get(ROW_SECONDS), pred.seconds / n
    model.cache[ROW_SECONDS] = seen if per_row is None else 0.8 * per_row + 0.2 * seen
    return pred
