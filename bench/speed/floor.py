"""The in-process floor: the bundle run in this process on the same rows, no HTTP, no JSON.

:func:`in_process_floor` is the one place in the benchmark that imports ``app`` internals.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# A c1 HTTP request starts after the process slept in epoll. On this kind of VM the work
# after a sleep can run slower than in a hot loop, by an amount that varies from day to
# day (demo, 1000 rows: 1.21 against 1.90 ms in one session, 1.17 against 1.23 ms in the
# next; 1 row: 0.07 against 0.22 ms), so the floor is also taken that way.
IDLE_S = 0.001


def _median_ms(call: Callable[[int], object], repeats: int, warmup: int) -> float:
    for i in range(warmup):
        call(i)
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 4)


def _paired_ms(
    call: Callable[[int], object], repeats: int, warmup: int, idle_s: float
) -> dict[str, float]:
    """Median ms of a call made ``idle_s`` after a sleep and of the same call made at once
    after it (hot), timed in pairs: both see the same load, so a burst of another
    process's work lands on both medians, not on one. ``idle_over_hot`` is the median of
    the pairs' ratios."""
    for i in range(warmup):
        call(i)
    idle, hot = [], []
    for i in range(repeats):
        time.sleep(idle_s)
        t0 = time.perf_counter()
        call(i)
        t1 = time.perf_counter()
        call(i + 1)
        idle.append(t1 - t0)
        hot.append(time.perf_counter() - t1)
    return {
        "predict_ms": round(statistics.median(hot) * 1e3, 4),
        "predict_after_idle_ms": round(statistics.median(idle) * 1e3, 4),
        "idle_over_hot": round(statistics.median(a / b for a, b in zip(idle, hot, strict=True)), 3),
    }


def in_process_floor(
    store: Path,
    name: str,
    rows: Sequence[dict[str, Any]],
    *,
    batch: int = 1000,
    repeats_one: int = 2000,
    repeats_batch: int = 100,
) -> dict[str, Any]:
    """Median ms of one predict call on 1 row and on ``batch`` rows (one ORT thread).

    ``predict_ms`` times the ONNX graphs and the mixture on columns built beforehand, hot:
    the floor no server can go under. ``predict_after_idle_ms`` times the same call made
    :data:`IDLE_S` after a sleep, as a one-client request is; the two are timed in pairs
    (:func:`_paired_ms`), and ``idle_over_hot`` is their pairs' median ratio.
    ``columns_ms`` times the app's validation of JSON-like rows into those columns, which
    every request also pays.
    """
    from app.bundle.loader import open_bundle, resolve_version
    from app.bundle.predictor import BundlePredictor
    from app.core.inputs import FeatureTable

    bundle = open_bundle(resolve_version(store, name), intra_op_threads=1)
    predictor = BundlePredictor(bundle)
    table = FeatureTable.from_manifest(bundle.manifest, "reject")

    def field(_i: int, n: str) -> str:
        return n

    def timings(size: int, repeats: int) -> dict[str, Any]:
        # Several distinct inputs, cycled, as the HTTP runs do.
        starts = [(i * size) % len(rows) for i in range(min(64, max(1, len(rows) // size)))]
        inputs = [[rows[(s + j) % len(rows)] for j in range(size)] for s in starts]
        columns = [table.columns(x, field) for x in inputs]
        k = len(inputs)

        def predict(i: int) -> object:
            return predictor.predict(columns[i % k])

        return {
            "rows": size,
            "repeats": repeats,
            **_paired_ms(predict, repeats, 20, IDLE_S),
            "columns_ms": _median_ms(lambda i: table.columns(inputs[i % k], field), repeats, 5),
        }

    return {
        "experts": len(bundle.manifest.experts),
        "1": timings(1, repeats_one),
        str(batch): timings(batch, repeats_batch),
    }
