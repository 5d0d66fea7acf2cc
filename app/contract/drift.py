"""The answer of ``GET /drift``: what changed without outcomes (the inputs, against the
bundle's training rows) and with them (the realised NLL against the bundle's held-out
reference), over the drift window of every live worker of this server."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FeatureDriftEntry:
    """One feature's served values in the window against its training rows."""

    feature: str
    kind: str = field(metadata={"doc": "numeric or categorical"})
    rows: int = field(metadata={"doc": "Served rows in the window (all live workers)."})
    psi: float | None = field(
        metadata={
            "doc": "Population stability index against the training rows, from the minimum "
            "rows on (IABMA_DRIFT_MIN_ROWS). Under 0.1 stable, over 0.25 a major shift."
        }
    )
    out_of_range: int = field(
        metadata={"doc": "Numeric: values in the window outside the training range."}
    )
    unseen: int = field(
        metadata={"doc": "Categorical: values in the window that are no training level."}
    )
    missing: int = field(metadata={"doc": "Missing values in the window."})
    bins: Sequence[str] = field(metadata={"doc": "What each bin holds."})
    served: Sequence[float] = field(metadata={"doc": "Served rows per bin, in the window."})
    training: Sequence[int] = field(metadata={"doc": "Training rows per bin."})


@dataclass(frozen=True)
class DriftReport:
    model: str = field(metadata={"const": "name"})
    version: str
    available: bool = field(
        metadata={
            "doc": "Whether the bundle keeps its training inputs' bins; bundles exported "
            "before they were kept report no input drift (reason says so)."
        }
    )
    reason: str | None
    window_seconds: float
    min_rows: int
    gate_constant: bool = field(
        metadata={
            "doc": "The served gate gives every row the same weights (a pool): the drift "
            "of its weights (iabma_weight_drift) cannot move, and says nothing."
        }
    )
    features: Sequence[FeatureDriftEntry]
