"""``bench/trail_tail.py`` at a small size end to end: every control in the mover's place
against a real server and wrk, and what the archive and prune controls did to the trail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("wrk")
def test_small_run_sets_every_control_side_by_side(demo_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_bench(
        "trail_tail.py", "--records", "2000", "--seconds", "1", "--store", str(demo_store),
        "--rounds", "1", "--out", str(out), timeout=500,
    )  # fmt: skip
    (json_file,) = out.glob("trail_tail-*.json")
    report = json.loads(json_file.read_text())
    table = json_file.with_suffix(".md").read_text()
    kinds = ["none", "cpu", "disk", "write", "prune", "move"]
    assert [r["kind"] for r in report["runs"]] == kinds
    for r in report["runs"]:
        assert r["idle"]["failures"] == 0 and r["during"]["failures"] == 0
        assert r["p99_ratio"] > 0
        assert f"| {r['kind']} |" in table
        moved = r["move_out"]
        if r["kind"] in ("write", "prune"):
            assert 500 <= moved["records"] <= 1500, moved  # the older half
        if r["kind"] == "move":
            assert moved["archived"] > 0 and moved["archived"] + moved["pruned"] >= 2000
