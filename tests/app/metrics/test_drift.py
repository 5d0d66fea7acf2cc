"""Drift without labels: the sliding window of served weights, and the PSI /metrics gives
against the bundle's training histogram."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.bundle.manifest import WeightHistogram
from app.bundle.weight_bins import WEIGHT_EDGES, psi, weight_counts
from app.metrics.drift import SLICES, WeightWindow
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness
from tests.support.metrics import scrape, value


def test_counts_and_psi_on_known_cases() -> None:
    w = np.array([[0.0, 1.0], [0.1, 0.9], [0.55, 0.45], [1.0, 0.0]])
    counts = weight_counts(w)
    assert counts[0].tolist() == [1, 1, 0, 0, 0, 1, 0, 0, 0, 1]  # 1.0 in the last bin
    assert counts[1].tolist() == [1, 0, 0, 0, 1, 0, 0, 0, 0, 2]
    same = np.array([[10, 30, 60], [5, 0, 5]])
    assert psi(same, same * 3).tolist() == [0.0, 0.0]
    moved = psi(np.array([50, 50]), np.array([90, 10]))
    assert moved == pytest.approx(0.4 * np.log(0.5 / 0.9) * -1 + 0.4 * np.log(0.5 / 0.1))
    assert np.isfinite(psi(np.array([10, 0]), np.array([0, 10]))), "empty bins are floored"


def test_the_window_forgets_what_slid_out_of_it() -> None:
    now = [1_000.0]
    window = WeightWindow(600.0, clock=lambda: now[0])
    histogram = WeightHistogram(
        edges=list(WEIGHT_EDGES), counts={"a": [1] + [0] * 9, "b": [0] * 9 + [1]}, rows=1
    )
    window.watch(("m", "v1"), ("a", "b"), histogram)
    rng = np.random.default_rng(0)
    first = rng.dirichlet([1, 1], size=3)  # the row-by-row path
    window.observe(("m", "v1"), first)
    now[0] += 300.0
    later = rng.dirichlet([1, 1], size=40)  # the array path
    window.observe(("m", "v1"), later)
    window.observe(("m", "other"), later)  # not watched: ignored

    def counted() -> np.ndarray:
        ((labels, _, counts),) = list(window.totals())
        assert labels == ("m", "v1")
        return counts

    assert (counted() == weight_counts(np.vstack([first, later]))).all()
    now[0] += 300.0 + 600.0 / SLICES  # the first rows' slice is now out of the window
    assert (counted() == weight_counts(later)).all()
    now[0] += 600.0
    assert counted().sum() == 0


def test_metrics_report_each_experts_psi_against_training(bundles: Bundles, tmp_path: Path) -> None:
    settings = make_settings(bundles.store, tmp_path, drift_min_rows=40)
    with AsgiHarness(settings) as app:
        labels = {"model_name": "demo", "model_version": bundles.demo.version}
        histogram = app.get("/models").json()["gate"]["weight_histogram"]
        served: list[list[float]] = []

        def predict(batch: list[dict[str, float]]) -> None:
            r = app.post("/predict", json={"instances": batch})
            served.extend(list(item["weights"].values()) for item in r.json()["predictions"])

        predict(bundles.demo.instances(slice(0, 30)))  # the array path
        for row in bundles.demo.instances(slice(30, 35)):  # the row-by-row path
            predict([row])
        samples, types = scrape(app)
        assert types["iabma_weight_drift"] == "gauge"
        ours = [lab for lab, _ in samples["iabma_weight_drift"] if lab.items() >= labels.items()]
        assert not ours, "35 rows: under the minimum, no PSI yet"
        predict(bundles.demo.instances(slice(35, 60)))
        samples, _ = scrape(app)
    counts = weight_counts(np.array(served))
    experts = list(histogram["counts"])
    for j, expert in enumerate(experts):
        window = [
            value(samples, "iabma_weight_window_rows", **labels, expert=expert, bin=f"{e:g}")
            for e in WEIGHT_EDGES[1:]
        ]
        assert window == counts[j].tolist()
        want = psi(counts[j], np.array(histogram["counts"][expert]))
        got = value(samples, "iabma_weight_drift", **labels, expert=expert)
        assert got == pytest.approx(want, abs=1e-12), expert
