"""Expected calibration error on small cases worked out by hand (docs/method.md, "Metrics")."""

from __future__ import annotations

import numpy as np
import pytest

from training.metrics import expected_calibration_error


def two_columns(p: list[float]) -> np.ndarray:
    """Binary output as docs/method.md scores it: ``[1 - p, p]`` with p = P(class 1)."""
    p_arr = np.asarray(p)
    return np.column_stack([1 - p_arr, p_arr])


# P(class 1) and labels. Top-label confidence and correctness per row:
#   0.95 (right), 0.97 (wrong), 0.75 (right), 0.85 (right: P(0) = 0.85, y = 0),
#   0.62 (wrong: predicts 1, y = 0), 0.55 (right).
P1 = [0.95, 0.97, 0.75, 0.15, 0.62, 0.55]
Y = [1, 0, 1, 0, 0, 1]


@pytest.mark.parametrize("n_bins", [15, 10])
def test_ece_by_hand(n_bins: int) -> None:
    # With 15 bins of width 1/15 and with 10 of width 0.1 the grouping is the same:
    # {0.95, 0.97} share the top bin (accuracy 1/2, confidence 0.96, gap 0.46) and the other
    # four rows are alone (gaps 0.25, 0.15, 0.62, 0.45).
    # ECE = (2/6) 0.46 + (1/6)(0.25 + 0.15 + 0.62 + 0.45) = 2.39 / 6.
    ece = expected_calibration_error(two_columns(P1), np.array(Y), n_bins=n_bins)
    assert ece == pytest.approx(2.39 / 6, abs=1e-12)


def test_ece_bins_are_closed_on_the_right() -> None:
    # 0.6 = 9/15 is an edge of the 15 bins. Under (lo, hi] it closes bin (8/15, 9/15] and
    # stays apart from 0.65, in (9/15, 10/15]: ECE = 0.5 |1 - 0.6| + 0.5 |0 - 0.65| = 0.525.
    # Under [lo, hi) both would share a bin: |0.5 - 0.625| = 0.125.
    proba = two_columns([0.6, 0.35])  # confidences 0.6 (class 1) and 0.65 (class 0)
    y = np.array([1, 1])  # the first is right, the second wrong
    assert proba.max(axis=1)[0] == 9 / 15 == np.linspace(0, 1, 16)[9]
    assert expected_calibration_error(proba, y) == pytest.approx(0.525, abs=1e-12)


def test_top_label_not_positive_column() -> None:
    # p = 0.25 and 0.75, both labelled 0. Top-label: both have confidence 0.75, one right
    # and one wrong, so ECE = |0.5 - 0.75| = 0.25. Binning the positive column alone
    # (torchmetrics' binary ECE) would give 0.5 (|0 - 0.25| + |0 - 0.75|) / 2 = 0.5.
    ece = expected_calibration_error(two_columns([0.25, 0.75]), np.array([0, 0]))
    assert ece == pytest.approx(0.25, abs=1e-12)
