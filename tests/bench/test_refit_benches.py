"""``bench/refit_speed.py`` and ``bench/drift.py`` in small runs: real servers, real trails,
``iabma refit`` in its own process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_refit_speed_times_a_refit_on_the_outcome_rows(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_bench("refit_speed.py", "--rows", "2000", "--repeats", "1", "--out", str(out), timeout=500)
    (json_file,) = out.glob("refit_speed-*.json")
    report = json.loads(json_file.read_text())
    assert report["rows"] == 2000 and len(report["runs"]) == 1
    (run,) = report["runs"]
    assert run["refitted_nll"] < run["served_nll"], "the outcomes follow lda; the refit finds it"
    assert report["median_wall_s"] <= report["target_s"]
    assert "median wall" in json_file.with_suffix(".md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_drift_refit_closes_most_of_the_gap_to_the_oracle(tmp_path: Path) -> None:
    out, figure = tmp_path / "out", tmp_path / "drift.png"
    args = ["--requests", "4", "--senders", "2", "--fresh", "2000", "--out", str(out)]
    run_bench("drift.py", *args, "--figure", str(figure), timeout=500)
    (json_file,) = out.glob("drift-*.json")
    report = json.loads(json_file.read_text())
    assert report["promoted"]
    realised = report["realised_nll"]
    assert realised["after the change"] > realised["after the refit"]
    assert report["gap_closed"] >= report["target"]
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
