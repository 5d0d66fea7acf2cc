"""The answer of ``GET /models``: the served bundle's manifest, less its file layout, and
how the server follows new versions.

The manifest's own sections are open (``OPEN``): a newer bundle may carry more fields
than this description, and the client keeps them (``ModelInfo.manifest``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal

from app.contract.answers import Label


@dataclass(frozen=True)
class FeatureCard:
    """One input column: the name clients send, and the graph input that carries it."""

    OPEN: ClassVar[bool] = True
    name: str
    input: str
    dtype: Literal["float", "string"]
    categories: tuple[str, ...] | None = None
    other: bool = False
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class TargetCard:
    OPEN: ClassVar[bool] = True
    name: str
    classes: tuple[Label, ...] | None = None
    mean: float | None = None
    scale: float | None = None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class ExpertCard:
    """One expert: its graph inputs (``FeatureCard.input``) and its test metrics."""

    OPEN: ClassVar[bool] = True
    name: str = field(metadata={"enum": "experts"})
    kind: str
    inputs: tuple[str, ...]
    output: str
    sha256: str
    metrics: Mapping[str, float] = field(default_factory=dict)
    sigma: float | None = None
    output_units: str | None = None


@dataclass(frozen=True)
class Refusal:
    version: str
    error: str


@dataclass(frozen=True)
class Rollout:
    follows_latest: bool
    interval_seconds: float | None
    refused: Refusal | None = field(metadata={"doc": "The last version refused, and why."})


@dataclass(frozen=True)
class ModelsAnswer:
    """``GET /models``: the served bundle."""

    OPEN: ClassVar[bool] = True
    name: str = field(metadata={"const": "name"})
    version: str
    task: str = field(metadata={"const": "task"})
    features: tuple[FeatureCard, ...]
    target: TargetCard
    experts: tuple[ExpertCard, ...]
    created_at: datetime
    schema_version: int
    rollout: Rollout
    metrics: Mapping[str, Mapping[str, float]] = field(
        default_factory=dict, metadata={"doc": "Test metrics of the mixture and each expert."}
    )
    gate: Mapping[str, Any] = field(default_factory=dict)
    input_rule: Mapping[str, Any] = field(default_factory=dict)
    library_versions: Mapping[str, str] = field(default_factory=dict)
