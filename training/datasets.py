"""The benchmark data: the paper's simulation and the shared CSVs, plus any other CSV.

Nothing is downloaded: the CSVs are read from ``../shared/datasets`` next to the repo (or
``IABMA_DATA_DIR``, or an explicit ``data_dir``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from training.errors import ParameterError
from training.features import clean_missing_strings

MIN_ROWS = 50


@dataclass(frozen=True)
class Dataset:
    name: str
    task: str
    X: pd.DataFrame
    y: pd.Series
    region: np.ndarray | None = None  # simulation only: 0 linear, 1 circular

    def take(self, rows: np.ndarray) -> Dataset:
        """These rows (in this order), renumbered from 0."""
        return replace(
            self,
            X=self.X.iloc[rows].reset_index(drop=True),
            y=self.y.iloc[rows].reset_index(drop=True),
            region=None if self.region is None else self.region[rows],
        )


@dataclass(frozen=True)
class _Shared:
    file: str
    target: str
    task: str
    drop: tuple[str, ...] = ()


SHARED = {
    "spambase": _Shared("spambase.csv", "class", "classification"),
    "credit-g": _Shared("credit-g.csv", "class", "classification"),
    # casual + registered == cnt (leakage); instant is a row id; dteday repeats yr/mnth.
    "bike": _Shared(
        "bike_sharing_hour.csv", "cnt", "regression", ("casual", "registered", "instant", "dteday")
    ),
    "california": _Shared("california_housing.csv", "MedHouseVal", "regression"),
}


def default_data_dir() -> Path:
    env = os.environ.get("IABMA_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "datasets"


def load_shared(name: str, data_dir: Path | None = None) -> Dataset:
    if name not in SHARED:
        raise ParameterError("dataset", name, f"must be one of {sorted(SHARED)} or 'simulation'")
    spec = SHARED[name]
    path = Path(data_dir or default_data_dir()) / spec.file
    return load_csv(path, spec.target, spec.task, spec.drop, name=name)


def load_csv(
    path: Path | str,
    target: str,
    task: str,
    drop: Sequence[str] = (),
    name: str | None = None,
) -> Dataset:
    """Read a CSV and check that ``target`` suits ``task``; errors name the problem."""
    path = Path(path)
    if task not in ("classification", "regression"):
        raise ParameterError("task", task, "must be 'classification' or 'regression'")
    if not path.is_file():
        raise ParameterError("csv", str(path), "does not exist")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise ParameterError("csv", str(path), f"is not a readable CSV: {exc}") from None
    if target not in df.columns:
        raise ParameterError(
            "target", target, f"is not a column of {path.name}; columns: {list(df.columns)}"
        )
    unknown = [d for d in drop if d not in df.columns]
    if unknown:
        raise ParameterError("drop", unknown, f"are not columns of {path.name}")
    df = clean_missing_strings(df)
    y = df[target]
    if y.isna().any():
        rows = np.flatnonzero(y.isna().to_numpy())
        raise ParameterError(
            "target",
            target,
            f"has {rows.size} missing values (first at data row {rows[0] + 1}); fill or drop them",
        )
    if len(df) < MIN_ROWS:
        raise ParameterError(
            "csv", str(path), f"has {len(df)} usable rows; at least {MIN_ROWS} are needed"
        )
    if y.nunique() < 2:
        problem = "is constant" if task == "regression" else "has a single class"
        raise ParameterError(
            "target", target, f"{problem} ({y.iloc[0]!r}); there is nothing to learn"
        )
    if task == "regression" and not pd.api.types.is_numeric_dtype(y):
        raise ParameterError(
            "task", task, f"does not match target {target!r}, which is not numeric"
        )
    if task == "classification" and pd.api.types.is_float_dtype(y) and not np.all(y == np.round(y)):
        raise ParameterError(
            "task", task, f"does not match target {target!r}, which has non-integer values"
        )
    X = df.drop(columns=[target, *drop])
    if X.shape[1] == 0:
        raise ParameterError("drop", list(drop), "leaves no feature columns")
    return Dataset(name or path.stem, task, X.reset_index(drop=True), y.reset_index(drop=True))


def simulate(n: int, random_state: int = 0, t: float = 1.0) -> Dataset:
    """The paper's 2-D task: half a linear Gaussian cluster, half a ring (appendix)."""
    rng = np.random.default_rng(random_state)
    n_lin = n // 2
    n_circ = n - n_lin
    lin = rng.normal(loc=(-t, 0.0), scale=np.sqrt(0.1), size=(n_lin, 2))
    y_lin = (lin[:, 0] + lin[:, 1] > -t).astype(int)
    theta = rng.uniform(0.0, 2.0 * np.pi, n_circ)
    r = np.sqrt(rng.uniform(0.0, 2.0, n_circ))
    circ = np.column_stack([t + r * np.cos(theta), r * np.sin(theta)])
    y_circ = (r < 1.0).astype(int)
    X = np.vstack([lin, circ])
    y = np.concatenate([y_lin, y_circ])
    region = np.concatenate([np.zeros(n_lin, int), np.ones(n_circ, int)])
    order = rng.permutation(n)
    frame = pd.DataFrame(X[order], columns=["x1", "x2"])
    return Dataset(
        "simulation", "classification", frame, pd.Series(y[order], name="y"), region[order]
    )
