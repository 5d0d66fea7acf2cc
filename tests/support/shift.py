"""A covariate shift to replay: a bundle trained on the simulation's rows with ``x1 < 0``
(its linear cluster), then served rows from the same part and rows from the other part
(its ring), with their true outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tests.support.bundles import instances

CUT = 0.0  # training sees x1 < CUT only


@dataclass(frozen=True)
class Shift:
    store: Path
    version: str


def part(n: int, seed: int, inside: bool) -> tuple[list[dict[str, Any]], list[int]]:
    """``n`` simulated rows from one side of the cut (``inside``: the training side), as
    JSON instances, and their outcomes."""
    from training.datasets import simulate

    data = simulate(6 * n, seed)
    keep = (data.X["x1"] < CUT) == inside
    X, y = data.X[keep].head(n), data.y[keep].head(n)
    assert len(X) == n
    return instances(X.reset_index(drop=True)), [int(v) for v in y]


def shifted_bundle(root: Path, seed: int = 0) -> Shift:
    """Two experts and the IA-BMA gate on 800 rows with ``x1 < 0``, exported with a
    held-out reference from 400 more."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import LogisticRegression

    from training.estimator import IABMAClassifier
    from training.evaluate import performance_reference
    from training.experts.spec import Expert
    from training.export.bundle import export_bundle

    rows, y = part(1200, 1000 + seed, inside=True)
    X = pd.DataFrame(rows)
    experts = [Expert("lda", LinearDiscriminantAnalysis()), Expert("logit", LogisticRegression())]
    est = IABMAClassifier(experts, cv=3, random_state=seed).fit(X.head(800), y[:800])
    held = performance_reference(est, X.tail(400), y[800:])
    path = export_bundle(est, root / "store", "shift", X.tail(400), performance=held)
    return Shift(root / "store", path.name)
