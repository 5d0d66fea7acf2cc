"""bench/summarise_quality.py judges issue 44's targets from the runs' paired repetitions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.summarise_quality import across, targets


def _run(root: Path, name: str, per_dataset: dict[str, dict[str, list[float]]]) -> Path:
    run = root / name
    for dataset, methods in per_dataset.items():
        (run / dataset).mkdir(parents=True)
        per_rep = {m: [{"nll": v} for v in vals] for m, vals in methods.items()}
        (run / dataset / "details.json").write_text(json.dumps({"per_rep": per_rep}))
    return run


def test_the_targets_table_says_met_or_not(tmp_path: Path) -> None:
    base = np.linspace(0.5, 0.6, 10)
    ahead = {
        "iabma": list(base - 0.01),
        "stacking": list(base),
        "ensemble_selection": list(base),
        "moe_tuned": list(base - 0.01 + 0.001 * np.resize([1, -1], 10)),
    }
    behind = {**ahead, "stacking": list(base - 0.02 + 0.001 * np.resize([1, -1], 10))}
    run = _run(tmp_path, "new", {"a": ahead, "b": ahead, "c": behind})
    text = targets(run)
    rows = {line.split(" | ")[0]: line for line in text.splitlines()[2:]}
    never, first, prior = rows.values()
    assert never.endswith("| not met |") and "against stacking on c" in never
    assert "| 2 (a, b) | met |" in first  # 2 of 3 datasets is two thirds
    assert "a +0.0000" in prior and "c +0.0000" in prior
    good = targets(_run(tmp_path, "good", {"a": ahead, "b": ahead, "c": ahead}))
    assert sum(line.endswith("| met |") for line in good.splitlines()[2:]) == 2


def test_runs_pair_by_repetition(tmp_path: Path) -> None:
    new = _run(tmp_path, "new", {"a": {"iabma": [1.0, 2.0, 3.0]}})
    old = _run(tmp_path, "old", {"a": {"iabma": [1.5, 2.0, 2.0]}})
    line = across([new, old]).splitlines()[-1]
    assert line == "| a | old | +0.1667 | 0.7638 | 1/3 |"
