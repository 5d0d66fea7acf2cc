"""The covariate-shift replay (issue 48's targets): a bundle trained on x1 < 0, served the
same part and then the other, with the true outcomes. Within the first 1,000 outcome rows
after the shift the input drift of x1 passes 0.25 and its out-of-range counter moves, the
mixture's realised-NLL z gauge crosses ALERT_Z, and /performance suggests a change within
200 rows of the true one. With no shift, over 10 seeds, the alert fires in at most one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.audit.read.change_point import cusum, kolmogorov_p
from app.metrics.alerts import ALERT_Z
from tests.support.bundles import check_contract, make_settings
from tests.support.harness import AsgiHarness
from tests.support.metrics import scrape, value
from tests.support.services import wait_for
from tests.support.shift import Shift, part, shifted_bundle

BEFORE = 600  # outcome rows before the shift
PER = 50  # rows per request


@pytest.fixture(scope="module")
def shift(tmp_path_factory: pytest.TempPathFactory) -> Shift:
    return shifted_bundle(tmp_path_factory.mktemp("alerts"))


def test_cusum_finds_a_mean_shift_and_is_quiet_without_one() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.exponential(0.3, 500), rng.exponential(0.6, 300)])
    tau, _stat, p = cusum(x)
    assert abs(tau - 500) <= 60 and p < 1e-6
    assert cusum(rng.exponential(0.3, 800))[2] > 0.01
    assert kolmogorov_p(1.36) == pytest.approx(0.05, abs=0.002)


def send(app: AsgiHarness, rows: list[dict[str, Any]], y: list[int], prefix: str) -> None:
    for k in range(0, len(rows), PER):
        rid = f"{prefix}{k // PER}"
        r = app.post(
            "/predict", json={"instances": rows[k : k + PER]}, headers={"X-Request-ID": rid}
        )
        assert r.status_code == 200, r.text
        outcomes = [
            {"request_id": rid, "row": i, "outcome": v} for i, v in enumerate(y[k : k + PER])
        ]
        r = app.post("/feedback", json={"outcomes": outcomes})
        assert r.status_code == 200, r.text


def z_of(app: AsgiHarness, version: str, rows: int) -> float:
    """The mixture's z once the window has taken the outcomes sent so far."""
    labels = {"model_name": "shift", "model_version": version, "expert": "_mixture"}

    def seen() -> bool:
        samples, _ = scrape(app)
        return value(samples, "iabma_realised_window", stat="rows", **labels) >= rows

    wait_for(seen, 10, f"{rows} outcome rows in the window")
    samples, _ = scrape(app)
    return value(samples, "iabma_realised_nll_z", **labels)


def settings(shift: Shift, tmp: Path) -> Any:
    return make_settings(shift.store, tmp, "shift", drift_min_rows=100, realised_window_rows=300)


def test_a_covariate_shift_is_noticed_within_1000_outcome_rows(
    shift: Shift, tmp_path: Path
) -> None:
    rows, y = part(BEFORE, 11, inside=True)
    moved, y_moved = part(1000, 12, inside=False)
    with AsgiHarness(settings(shift, tmp_path)) as app:
        send(app, rows, y, "a")
        assert z_of(app, shift.version, min(BEFORE, 300)) < ALERT_Z
        fired = None
        for k in range(0, 1000, 2 * PER):
            send(app, moved[k : k + 2 * PER], y_moved[k : k + 2 * PER], f"b{k}-")
            if z_of(app, shift.version, min(BEFORE + k + 2 * PER, 300)) > ALERT_Z:
                fired = k + 2 * PER
                break
        assert fired is not None and fired <= 1000
        drift = {f["feature"]: f for f in app.get("/drift").json()["features"]}
        assert drift["x1"]["psi"] > 0.25 and drift["x1"]["out_of_range"] > 0
        report = app.get("/performance").json()
        check_contract(app, "Performance", report)
        point = report["change_point"]
        assert point is not None, report["mixture"]
        assert abs(point["rows_before"] - BEFORE) <= 200, point
        assert point["nll_after"] > point["nll_before"]
        gain = point["refit_gain"]
        assert gain["best_expert"] in ("lda", "logit") and gain["se"] > 0


def test_without_a_shift_the_alert_fires_in_at_most_one_of_ten_seeds(
    shift: Shift, tmp_path: Path
) -> None:
    fired, peaks = 0, []
    for seed in range(10):
        rows, y = part(1000, 100 + seed, inside=True)
        with AsgiHarness(settings(shift, tmp_path / str(seed))) as app:
            zs = []
            for k in range(0, 1000, 4 * PER):
                send(app, rows[k : k + 4 * PER], y[k : k + 4 * PER], f"s{seed}-{k}-")
                zs.append(z_of(app, shift.version, min(k + 4 * PER, 300)))
            peaks.append(max(zs))
            fired += max(zs) > ALERT_Z
    assert fired <= 1, peaks
