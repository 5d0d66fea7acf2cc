"""``bench/audit_size.py`` at a small size end to end: a real SQLite and PostgreSQL trail,
the archive and prune, and ``/predict`` under real wrk on each trail idle and while
another process moves it out; the figures go to a JSON and a markdown file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("wrk")
def test_small_run_writes_every_figure(demo_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_bench(
        "audit_size.py", "--records", "3000", "--load-seconds", "1", "--load-connections",
        "2", "--store", str(demo_store), "--out", str(out), timeout=500,
    )  # fmt: skip
    (json_file,) = out.glob("audit_size-*.json")
    assert "p99 ratio" in json_file.with_suffix(".md").read_text()
    report = json.loads(json_file.read_text())
    assert report["records"] == 3000
    for trail in ("sqlite", "postgresql"):
        r = report["trails"][trail]
        assert r["archived"] + r["pruned"] == 3000
        assert r["archive_per_s"] > 0 and r["prune_per_s"] > 0 and r["verify_s"] > 0
    assert [load["trail"] for load in report["load"]] == ["sqlite", "postgresql"]
    for load in report["load"]:
        assert load["connections"] == 2
        assert load["idle"]["failures"] == 0 and load["during"]["failures"] == 0
        assert load["during"]["p99"] > 0 and load["p99_ratio"] > 0
        # The mover archived the older half, and pruned the rest and what the loads added.
        moved = load["move_out"]
        assert moved["archived"] > 0 and moved["archived"] + moved["pruned"] > 3000
