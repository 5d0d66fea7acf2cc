"""``results.md``: mean (sd) cells, and the bold on the right cell for each metric."""

from __future__ import annotations

import re

import pytest

from training.experiments.results import (
    aggregate,
    best_methods,
    format_table,
    mean_sd,
    render_markdown,
)
from training.experiments.schema import METRICS


def hand_made(task: str, values: dict[str, dict[str, float]]) -> dict:
    """Results with the given means (sd 0.01) for the given methods."""
    return {
        "dataset": "toy",
        "task": task,
        "reps": 2,
        "methods": {
            m: {k: {"mean": v[k], "sd": 0.01} for k in METRICS[task]} for m, v in values.items()
        },
        "fit_seconds": {m: {"mean": 1.0, "sd": 0.0} for m in values},
    }


def bold_cells(table: str, metric: str) -> list[str]:
    """Column names whose cell in ``metric``'s row is bold."""
    lines = table.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    row = next(line for line in lines if f"| {metric} (" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    return [h for h, c in zip(header, cells, strict=True) if c.startswith("**")]


REGRESSION = hand_made(
    "regression",
    {
        "uniform": {"rmse": 0.50, "r2": 0.70, "nll": 1.20, "crps": 0.30, "coverage90": 0.99},
        "moe": {"rmse": 0.45, "r2": 0.76, "nll": 1.10, "crps": 0.26, "coverage90": 0.87},
        "iabma": {"rmse": 0.46, "r2": 0.75, "nll": 1.00, "crps": 0.27, "coverage90": 0.94},
        # Better than every competitor on rmse, but a reference row: it must not be bold.
        "iabma_paper": {"rmse": 0.40, "r2": 0.50, "nll": 3.00, "crps": 0.40, "coverage90": 0.90},
    },
)


@pytest.mark.parametrize(
    ("metric", "winner"),
    [("rmse", "moe"), ("r2", "moe"), ("nll", "iabma"), ("crps", "moe"), ("coverage90", "moe")],
)
def test_regression_bold_follows_each_metric_direction(metric: str, winner: str) -> None:
    assert bold_cells(format_table(REGRESSION), metric) == [winner]


def test_coverage_closest_to_ninety_wins_from_either_side() -> None:
    data = hand_made(
        "regression",
        {
            "uniform": {"rmse": 1, "r2": 0, "nll": 1, "crps": 1, "coverage90": 0.99},
            "moe": {"rmse": 1, "r2": 0, "nll": 1, "crps": 1, "coverage90": 0.85},
            "dla": {"rmse": 1, "r2": 0, "nll": 1, "crps": 1, "coverage90": 0.92},
        },
    )
    assert best_methods(data, "coverage90") == {"dla"}  # 0.02 off, below
    data["methods"]["dla"]["coverage90"]["mean"] = 0.96
    assert best_methods(data, "coverage90") == {"moe"}  # 0.05 under beats 0.06 over
    data["methods"]["dla"]["coverage90"]["mean"] = 0.95
    assert best_methods(data, "coverage90") == {"dla", "moe"}  # 0.05 off either side: a tie
    assert bold_cells(format_table(data), "coverage90") == ["moe", "dla"]


def test_classification_bold_and_ties_at_the_shown_precision() -> None:
    data = hand_made(
        "classification",
        {
            "bma": {"accuracy": 0.7101, "ece": 0.05, "nll": 0.60, "brier": 0.40},
            "moe": {"accuracy": 0.7099, "ece": 0.04, "nll": 0.55, "brier": 0.41},
            "iabma": {"accuracy": 0.7000, "ece": 0.06, "nll": 0.58, "brier": 0.39},
            "iabma_paper": {"accuracy": 0.9, "ece": 0.01, "nll": 0.1, "brier": 0.1},
        },
    )
    table = format_table(data)
    assert bold_cells(table, "accuracy") == ["bma", "moe"]  # both show 0.710
    assert bold_cells(table, "ece") == ["moe"]
    assert bold_cells(table, "nll") == ["moe"]
    assert bold_cells(table, "brier") == ["iabma"]
    assert "| toy | accuracy (↑) | **0.710** (0.010) | **0.710** (0.010) | 0.700 (0.010) |" in table


def test_layout_columns_in_method_order_and_fit_table() -> None:
    md = render_markdown(REGRESSION, ["task: regression, reps: 2"])
    header = next(line for line in md.splitlines() if line.startswith("| Dataset | Metric"))
    assert header == "| Dataset | Metric | uniform | moe | iabma | iabma_paper |"
    assert "- task: regression, reps: 2" in md
    assert "does not compete for bold" in md
    assert re.search(r"\| toy \| fit seconds \| 1\.000 \(0\.000\) \|", md)
    assert md.count("| toy |") == len(METRICS["regression"]) + 1


def test_mean_sd_uses_the_sample_sd() -> None:
    assert mean_sd([1.0, 3.0]) == {"mean": 2.0, "sd": pytest.approx(2**0.5)}
    assert mean_sd([4.0]) == {"mean": 4.0, "sd": 0.0}


def test_aggregate_builds_a_valid_result_in_method_order() -> None:
    rep = {"accuracy": 0.8, "ece": 0.1, "nll": 0.5, "brier": 0.3, "ece10": 0.09}
    out = aggregate(
        "toy", "classification", 2,
        {"iabma": [rep, rep], "uniform": [rep, {**rep, "accuracy": 0.6}]},
        {"iabma": [1.0, 2.0], "uniform": [0.0, 0.0]},
    )  # fmt: skip
    assert list(out["methods"]) == ["uniform", "iabma"]
    assert out["methods"]["uniform"]["accuracy"]["mean"] == pytest.approx(0.7)
    assert set(out["methods"]["iabma"]) == set(METRICS["classification"])  # no ece10
    assert out["fit_seconds"]["iabma"] == {"mean": 1.5, "sd": pytest.approx(0.5**0.5)}
