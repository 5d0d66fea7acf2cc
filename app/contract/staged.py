"""The ``staged`` block of ``GET /performance?compare=staged``: the served and the staged
version's realised NLL on the same outcome rows, paired (docs/serving.md, "Shadow")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class PairedSpan:
    start: datetime
    rows: int
    served_nll: float
    staged_nll: float


@dataclass(frozen=True)
class StagedDrift:
    rows: int = field(metadata={"doc": "Rows the staged gate weighed in the window."})
    psi: Mapping[str, float] | None = field(
        metadata={"doc": "Per expert, PSI of its staged weights against the staged version's "
                  "training histogram; null without one."}
    )  # fmt: skip


@dataclass(frozen=True)
class StagedComparison:
    """The served and the staged version on the outcome rows whose request was shadowed."""

    model: str
    version: str = field(metadata={"doc": "The staged version."})
    served_version: str
    rows: int = field(metadata={"doc": "Outcome rows scored under both versions."})
    served_nll: float | None
    staged_nll: float | None
    nll_diff: float | None = field(
        metadata={"doc": "Mean of staged minus served NLL per row: negative, staged is better."}
    )
    paired_se: float | None = field(metadata={"doc": "Its standard error, sd / sqrt(rows)."})
    since: datetime | None = field(metadata={"doc": "The first paired row's serving time."})
    until: datetime | None = field(metadata={"doc": "The last paired row's serving time."})
    over_time: tuple[PairedSpan, ...]
    shadow_stopped: Mapping[str, str] | None = field(
        metadata={"doc": "This worker's last shadow fault (version, error), if it stopped."}
    )
    weight_drift: StagedDrift | None = None
