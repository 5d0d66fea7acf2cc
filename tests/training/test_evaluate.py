"""How the train command words its test-NLL comparison against the plain combiners."""

from __future__ import annotations

import pytest

from training.evaluate import comparison_verdict


@pytest.mark.parametrize(
    ("difference", "se", "verdict"),
    [
        # Seen on a user's CSV: 0.17 lower NLL with a standard error of 0.024 had been
        # reported as "within one standard error".
        (-0.1711, 0.0240, "better by more than one standard error"),
        (-0.0029, 0.0053, "within one standard error"),
        (0.0053, 0.0053, "within one standard error"),
        (-0.0053, 0.0053, "within one standard error"),
        (0.02, 0.0053, "WORSE by more than one standard error"),
    ],
)
def test_the_verdict_reads_the_sign_of_the_difference(
    difference: float, se: float, verdict: str
) -> None:
    assert comparison_verdict(difference, se) == verdict
