"""``bench/audit_group.py --quick`` end to end: real servers, real wrk, real PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("wrk")
def test_quick_run_measures_every_trail_with_and_without_the_wait(
    demo_store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = ["--quick", "--waits", "3", "--store", str(demo_store), "--out", str(out)]
    run_bench("audit_group.py", *args, timeout=400)
    (json_file,) = out.glob("audit_group-*.json")
    assert json_file.with_suffix(".md").read_text().startswith("# audit_group")
    report = json.loads(json_file.read_text())
    assert report["waits_ms"] == [0.0, 3.0]
    seen = {(r["trail"], r["workers"], r["wait_ms"]) for r in report["runs"]}
    assert seen == {(t, w, x) for t, w in (("postgres", 1), ("postgres", 2), ("sqlite", 1))
                    for x in (0.0, 3.0)}  # fmt: skip
    for r in report["runs"]:
        assert r["ok"] > 0 and r["failures"] == 0, r
        # Every answer had its record: at least one per commit.
        assert r["records_per_commit"] >= 1, r
        if r["trail"] == "postgres":  # (its background processes run during SQLite runs too)
            assert r["postgres_cpu_us_per_request"] > 0, r
    ratio = {(x["trail"], x["workers"], x["wait_ms"]): x for x in report["ratios"]}
    assert ratio["postgres", 2, 3.0]["two_workers_over_one"] > 0
    assert ratio["sqlite", 1, 0.0]["over_no_wait"] == 1.0
