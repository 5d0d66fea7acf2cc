"""What the bundle keeps of its training inputs, for input drift: per feature, bins and the
training rows in each.

A numeric feature's bins are its training range cut at its deciles, with a bin below the
range, one above it and one for missing values; a categorical feature's are its training
levels, one for an unseen level and one for missing. Training counts its rows with
:func:`bin_counts`, the server the rows it serves, on the same columns as the graphs take
(float32 with NaN for missing; the level text, or the missing token). Both then compare
with :func:`app.bundle.weight_bins.psi` (docs/design.md, "Input drift").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

QUANTILES = tuple(round(0.1 * k, 1) for k in range(1, 10))  # the deciles cut the range
MIXTURE_KEY = "_mixture"  # the mixture among the experts: no expert name starts with _
NLL_CAP = float(-np.log(1e-300))  # the server's cap on one row's NLL (app.audit.read.scores)


class FeatureReference(BaseModel):
    """One feature's bins and its training rows in each.

    Numeric: ``edges`` (the deciles, rising, distinct), ``low`` and ``high``; ``counts`` is
    [below low, ``len(edges) + 1`` bins of the range, above high, missing]. Categorical:
    ``levels``; ``counts`` is [each level, unseen, missing].
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    input: str
    kind: Literal["numeric", "categorical"]
    edges: list[float] | None = None
    low: float | None = None
    high: float | None = None
    levels: list[str] | None = None
    counts: list[int]
    rows: int = Field(ge=1)

    @model_validator(mode="after")
    def _layout(self) -> FeatureReference:
        if self.kind == "numeric":
            e = self.edges
            if e is None or any(a >= b for a, b in pairwise(e)):
                raise ValueError(f"{self.name}: a numeric reference needs rising edges")
        elif not self.levels:
            raise ValueError(f"{self.name}: a categorical reference needs its levels")
        if len(self.counts) != self.bins or min(self.counts) < 0 or sum(self.counts) != self.rows:
            raise ValueError(f"{self.name}: one count per bin, adding up to rows, is needed")
        return self

    @property
    def bins(self) -> int:
        if self.kind == "numeric":
            return len(self.edges or ()) + 4
        return len(self.levels or ()) + 2

    @property
    def missing_bin(self) -> int:
        return self.bins - 1

    def bin_labels(self) -> list[str]:
        """What each bin holds, as /drift and the console show it."""
        if self.kind == "categorical":
            return [*(self.levels or ()), "(unseen)", "(missing)"]
        if self.low is None or self.high is None:  # no value in training was a number
            return ["(below)", "(range)", "(above)", "(missing)"]
        cuts = [self.low, *(self.edges or ()), self.high]
        inner = [f"[{a:g}, {b:g})" for a, b in pairwise(cuts[:-1])]
        last = f"[{cuts[-2]:g}, {self.high:g}]"
        return [f"< {self.low:g}", *inner, last, f"> {self.high:g}", "(missing)"]


class InputReference(BaseModel):
    """Every feature's reference, in the manifest's feature order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    features: list[FeatureReference]


class NllReference(BaseModel):
    """Mean and standard deviation of the per-row NLL on the held-out rows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean: float
    sd: float = Field(ge=0)


class PerformanceReference(BaseModel):
    """The held-out rows' realised NLL, per expert and for the mixture (``_mixture``), as
    the server scores an outcome: what realised-performance alerts compare with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int = Field(ge=2)
    nll: dict[str, NllReference]


def numeric_bins(values: np.ndarray, ref: FeatureReference) -> np.ndarray:
    """The bin of each value (float; NaN is missing)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    edges = np.asarray(ref.edges, dtype=np.float64)
    out = np.searchsorted(edges, v, side="right") + 1
    out[v < (ref.low if ref.low is not None else -np.inf)] = 0
    out[v > (ref.high if ref.high is not None else np.inf)] = ref.bins - 2
    out[np.isnan(v)] = ref.missing_bin
    return out


def category_bins(values: np.ndarray, ref: FeatureReference, missing_token: str) -> np.ndarray:
    """The bin of each level text (the missing token is missing; any other unseen)."""
    v = np.asarray(values, dtype=object).ravel()
    index = {level: k for k, level in enumerate(ref.levels or ())}
    unseen = len(index)
    index[missing_token] = ref.missing_bin
    uniques, inverse = np.unique(v.astype(str), return_inverse=True)
    codes = np.array([index.get(u, unseen) for u in uniques.tolist()], dtype=np.int64)
    return codes[inverse.ravel()] if len(uniques) else np.zeros(0, dtype=np.int64)


def bin_counts(values: np.ndarray, ref: FeatureReference, missing_token: str) -> np.ndarray:
    """Rows per bin of one feature's column."""
    if ref.kind == "numeric":
        bins = numeric_bins(values, ref)
    else:
        bins = category_bins(values, ref, missing_token)
    return np.bincount(bins, minlength=ref.bins).astype(np.int64)


def numeric_reference(name: str, graph: str, values: np.ndarray) -> FeatureReference:
    """A numeric feature's deciles, range and training counts."""
    v = np.asarray(values, dtype=np.float64).ravel()
    finite = v[np.isfinite(v)]
    low: float | None = None
    high: float | None = None
    edges: list[float] = []
    if finite.size:
        low, high = float(finite.min()), float(finite.max())
        cuts = np.unique(np.quantile(finite, QUANTILES))
        edges = [float(c) for c in cuts if low < c <= high]
    shell = FeatureReference.model_construct(
        name=name, input=graph, kind="numeric", edges=edges, low=low, high=high, levels=None
    )
    counts = np.bincount(numeric_bins(v, shell), minlength=len(edges) + 4)
    return FeatureReference(
        name=name, input=graph, kind="numeric", edges=edges, low=low, high=high,
        counts=counts.tolist(), rows=int(counts.sum()),
    )  # fmt: skip


def category_reference(
    name: str, graph: str, values: np.ndarray, levels: Sequence[str], missing_token: str
) -> FeatureReference:
    """A categorical feature's levels and training counts."""
    shell = FeatureReference.model_construct(
        name=name, input=graph, kind="categorical", levels=list(levels)
    )
    counts = np.bincount(category_bins(values, shell, missing_token), minlength=len(levels) + 2)
    return FeatureReference(
        name=name, input=graph, kind="categorical", levels=list(levels),
        counts=counts.tolist(), rows=int(counts.sum()),
    )  # fmt: skip


def input_reference(
    features: Sequence[tuple[str, str, Sequence[str] | None]],
    columns: Mapping[str, np.ndarray],
    missing_token: str,
) -> InputReference:
    """The reference of every feature: (name, graph input, levels or None for a number),
    read from ``columns`` as the graphs take them."""
    out = []
    for name, graph, levels in features:
        col = columns[graph]
        if levels is None:
            out.append(numeric_reference(name, graph, col))
        else:
            out.append(category_reference(name, graph, col, levels, missing_token))
    return InputReference(features=out)
