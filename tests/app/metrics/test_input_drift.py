"""Input drift against the bundle's training rows: per feature PSI over the window, the
out-of-range and missing counters, ``GET /drift``, a bundle without a reference, and
``iabma_gate_constant``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from app.bundle.manifest import MANIFEST_FILE
from app.bundle.reference import bin_counts, numeric_reference
from tests.support.bundles import Bundles, check_contract, make_settings
from tests.support.harness import AsgiHarness
from tests.support.metrics import scrape, total, value
from tests.support.services import wait_for
from tests.support.shift import Shift, part, shifted_bundle


@pytest.fixture(scope="module")
def shift(tmp_path_factory: pytest.TempPathFactory) -> Shift:
    return shifted_bundle(tmp_path_factory.mktemp("shift"))


def test_numeric_bins_hold_range_deciles_and_missing() -> None:
    train = np.arange(100, dtype=np.float32)
    ref = numeric_reference("a", "f_a", train)
    assert ref.low == 0 and ref.high == 99 and len(ref.edges or []) == 9
    assert ref.counts[0] == ref.counts[-2] == ref.counts[-1] == 0
    assert sum(ref.counts) == 100 and max(ref.counts[1:-2]) - min(ref.counts[1:-2]) <= 1
    served = np.array([-1.0, 0.0, 99.0, 150.0, np.nan], dtype=np.float32)
    got = bin_counts(served, ref, "__missing__")
    assert got[0] == 1 and got[-2] == 1 and got[-1] == 1 and got[1] == 1 and got[-3] == 1
    assert len(ref.bin_labels()) == ref.bins


def serve(app: AsgiHarness, rows: list[dict], per: int = 50) -> None:
    for k in range(0, len(rows), per):
        r = app.post("/predict", json={"instances": rows[k : k + per]})
        assert r.status_code == 200, r.text


def drift_of(app: AsgiHarness, feature: str) -> dict:
    r = app.get("/drift")
    assert r.status_code == 200, r.text
    return next(f for f in r.json()["features"] if f["feature"] == feature)


def test_a_shifted_feature_passes_psi_025_and_counts_out_of_range(
    shift: Shift, tmp_path: Path
) -> None:
    settings = make_settings(shift.store, tmp_path, "shift", drift_min_rows=100)
    before, _ = part(500, 1, inside=True)
    after, _ = part(1000, 2, inside=False)
    with AsgiHarness(settings) as app:
        labels = {"model_name": "shift", "model_version": shift.version}
        start, _ = scrape(app)
        serve(app, before)
        wait_for(lambda: drift_of(app, "x1")["rows"] >= 500, 10, "the first rows")
        quiet = drift_of(app, "x1")
        assert quiet["psi"] is not None and quiet["psi"] < 0.1, quiet
        serve(app, after)
        wait_for(lambda: drift_of(app, "x1")["rows"] >= 1500, 10, "the shifted rows")
        x1, x2 = drift_of(app, "x1"), drift_of(app, "x2")
        check_contract(app, "DriftReport", app.get("/drift").json())
        assert x1["psi"] > 0.25 and x1["out_of_range"] > 0, x1
        assert x2["psi"] < x1["psi"]
        samples, types = scrape(app)
        assert types["iabma_feature_drift"] == "gauge"
        assert value(samples, "iabma_feature_drift", feature="x1", **labels) == pytest.approx(
            x1["psi"]
        )
        moved = total(samples, "iabma_out_of_range_total", feature="x1", **labels) - total(
            start, "iabma_out_of_range_total", feature="x1", **labels
        )
        assert moved == x1["out_of_range"] > 0


def test_a_bundle_without_a_reference_reports_drift_unavailable(
    shift: Shift, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(shift.store, store)
    path = store / "shift" / shift.version / MANIFEST_FILE
    path.chmod(0o644)
    manifest = json.loads(path.read_text())
    del manifest["input_reference"]
    path.write_text(json.dumps(manifest))
    with AsgiHarness(make_settings(store, tmp_path, "shift", drift_min_rows=1)) as app:
        rows, _ = part(20, 3, inside=False)
        serve(app, rows)
        r = app.get("/drift")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["available"] is False and "retrain" in body["reason"]
        assert body["features"] == []
        samples, _ = scrape(app)
        assert not [
            s for s in samples.get("iabma_feature_drift", []) if s[0]["model_name"] == "shift"
        ]


def test_gate_constant_says_when_weight_drift_cannot_move(bundles: Bundles, tmp_path: Path) -> None:
    """The demo bundle ships a network; credit-g's classifier fell back to the pool."""
    for name, constant in (("demo", False), ("creditcls", True)):
        with AsgiHarness(make_settings(bundles.store, tmp_path / name, name)) as app:
            assert app.get("/drift").json()["gate_constant"] is constant
            labels = {"model_name": name}

            def flushed() -> bool:
                samples, _ = scrape(app)
                return bool(samples.get("iabma_gate_constant"))

            wait_for(flushed, 10, "a flush")
            samples, _ = scrape(app)
            assert value(samples, "iabma_gate_constant", **labels) == float(constant)


@pytest.mark.parametrize("mode", ["reject", "missing"])
def test_unseen_levels_are_counted_refused_or_read_as_missing(
    bundles: Bundles, tmp_path: Path, mode: str
) -> None:
    rows = bundles.creditcls.instances([0, 1, 2])
    odd = {**rows[0], "purpose": "spaceship"}
    settings = make_settings(bundles.store, tmp_path, "creditcls", unknown_category=mode)
    with AsgiHarness(settings) as app:
        r = app.post("/predict", json={"instances": [*rows, odd]})
        assert r.status_code == (422 if mode == "reject" else 200), r.text
        if mode == "reject":
            assert app.post("/predict", json={"instances": rows}).status_code == 200

        def purpose() -> dict:
            return next(
                f for f in app.get("/drift").json()["features"] if f["feature"] == "purpose"
            )

        wait_for(lambda: purpose()["unseen"] == 1, 10, "the unseen level in the window")
        # Refused, the unseen value is its feature's one value of that request.
        assert purpose()["rows"] == 4
        assert purpose()["missing"] == 0, "an unseen level read as missing is not counted twice"
        samples, _ = scrape(app)
        assert (
            total(samples, "iabma_unseen_levels_total", model_name="creditcls", feature="purpose")
            >= 1
        )
