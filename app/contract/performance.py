"""The answer of ``GET /performance``: realised scores over the rows that have outcomes.

Every score is a mean over rows, taken from what was served (the audit record) against
the outcome: the mixture's, each expert's on the same rows, the best expert in hindsight
and the gate's regret against it, trust calibration per expert and weight bin, and the
same per time bucket. A score over no rows is null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from app.contract.staged import StagedComparison


@dataclass(frozen=True)
class ClassScores:
    """Classification: NLL of the outcome's class (nats), accuracy of the label, and the
    multiclass Brier score (sum over classes)."""

    task: ClassVar[str] = "classification"
    rows: int
    nll: float | None
    accuracy: float | None
    brier: float | None


@dataclass(frozen=True)
class RegressionScores:
    """Regression, in the target's units: NLL of the outcome under the predictive density,
    RMSE of the mean, and the share of outcomes inside the central 90% interval."""

    task: ClassVar[str] = "regression"
    rows: int
    nll: float | None
    rmse: float | None
    coverage90: float | None


Scores = ClassScores | RegressionScores
SCORES: dict[str, tuple[str, ...]] = {
    "classification": ("nll", "accuracy", "brier"),
    "regression": ("nll", "rmse", "coverage90"),
}


@dataclass(frozen=True)
class TrustBin:
    """The rows where the gate gave one expert a weight in ``[low, high)`` (the last bin
    includes 1)."""

    low: float
    high: float
    rows: int
    mean_weight: float | None
    nll: float | None = field(metadata={"doc": "This expert's mean NLL on these rows."})
    others_nll: float | None = field(
        metadata={"doc": "The other experts' mean NLL on the same rows."}
    )
    best_share: float | None = field(
        metadata={"doc": "Share of these rows on which this expert had the lowest NLL."}
    )


@dataclass(frozen=True)
class PerformanceBucket:
    start: datetime
    end: datetime
    mixture: Scores
    experts: Mapping[str, Scores]


@dataclass(frozen=True)
class RefitGain:
    """On the rows after the change: the mixture's NLL less the best expert's there (in
    hindsight), an estimate of what refitting the gate could gain, with the standard
    error of the paired difference."""

    best_expert: str
    nll_difference: float
    se: float


@dataclass(frozen=True)
class ChangePoint:
    """A shift of the mixture's realised NLL found by the CUSUM test (docs/design.md,
    "Change point"); ``iabma refit --since auto`` learns from the rows after it."""

    rows_before: int
    rows_after: int
    served_at: datetime = field(metadata={"doc": "When the first row after the change was served."})
    statistic: float
    p_value: float
    nll_before: float
    nll_after: float
    refit_gain: RefitGain | None


@dataclass(frozen=True)
class Performance:
    model: str = field(metadata={"const": "name"})
    task: str = field(metadata={"const": "task"})
    filter: Mapping[str, Any] = field(
        metadata={
            "doc": "since and until (the predictions' time) and version, as given; the "
            "posters left out (exclude_poster) and the number of time buckets."
        }
    )
    rows: int = field(metadata={"doc": "Served rows with an outcome that match the filter."})
    excluded_rows: int = field(
        metadata={
            "doc": "Stored outcomes matching the filter that were left out: their scores "
            "are not finite, or their regression outcome lies outside the model's range "
            "(outcomes stored before that range was checked)."
        }
    )
    posters: Mapping[str, int] = field(
        metadata={
            "doc": "Rows per poster: a fingerprint of the key that posted them (key: and 12 "
            "hex digits), or anonymous where the route takes no key."
        }
    )
    mixture: Scores
    experts: Mapping[str, Scores] = field(
        metadata={"doc": "Each expert on the rows whose record had it."}
    )
    best_expert: str | None = field(
        metadata={"doc": "The expert with the lowest NLL over all the rows, in hindsight."}
    )
    regret: float | None = field(
        metadata={"doc": "The mixture's NLL minus the best expert's; negative: the gate beat it."}
    )
    calibration: Mapping[str, tuple[TrustBin, ...]] = field(
        metadata={"doc": "Per expert: its NLL and the others' by the weight the gate gave it."}
    )
    buckets: tuple[PerformanceBucket, ...] = field(
        metadata={
            "doc": "Up to 24 time buckets (or as many as asked for) of the predictions' "
            "time, oldest first."
        }
    )
    change_point: ChangePoint | None = field(
        default=None,
        metadata={
            "doc": "The suggested change of the mixture's realised NLL, in the order the "
            "rows were served; null with fewer than 60 rows or no change at p < 0.01."
        },
    )
    staged: StagedComparison | None = field(
        default=None,
        metadata={"doc": "With compare=staged: the staged version against the served one on "
                  "the same outcome rows; null when nothing is staged."},
    )  # fmt: skip
