"""The benchmark data: the paper's simulation, the shared CSVs, the small sets that
scikit-learn ships, and any other CSV.

Nothing is downloaded: the CSVs are read from ``../shared/datasets`` next to the repo (or
``IABMA_DATA_DIR``, or an explicit ``data_dir``); scikit-learn's sets come with its wheel.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from app.bundle.normalise import Decimal, Normaliser, rule_for
from training.csvfile import read_text_frame, typed_frame
from training.errors import CsvError, DataWarning, ParameterError

MIN_ROWS = 50


@dataclass(frozen=True)
class Dataset:
    name: str
    task: str
    X: pd.DataFrame
    y: pd.Series
    region: np.ndarray | None = None  # simulation only: 0 linear, 1 circular
    rule: Normaliser = field(default_factory=Normaliser)  # how the cells were read
    source_rows: np.ndarray | None = None  # CSV only: each row's 1-based data row in the file

    def take(self, rows: np.ndarray) -> Dataset:
        """These rows (in this order), renumbered from 0."""
        return replace(
            self,
            X=self.X.iloc[rows].reset_index(drop=True),
            y=self.y.iloc[rows].reset_index(drop=True),
            region=None if self.region is None else self.region[rows],
            source_rows=None if self.source_rows is None else self.source_rows[rows],
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


#: scikit-learn's bundled sets (``sklearn.datasets.load_*``, files inside the wheel).
SKLEARN = {
    "breast-cancer": ("load_breast_cancer", "classification"),
    "diabetes": ("load_diabetes", "regression"),
    "wine": ("load_wine", "classification"),
    "digits": ("load_digits", "classification"),
}
#: Every named dataset ``load_shared`` reads (the simulation is generated).
NAMED = (*SHARED, *SKLEARN)


def default_data_dir() -> Path:
    env = os.environ.get("IABMA_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "datasets"


def load_shared(name: str, data_dir: Path | None = None) -> Dataset:
    """A shared CSV or one of scikit-learn's bundled sets, by name."""
    if name in SKLEARN:
        return load_sklearn(name)
    if name not in SHARED:
        raise ParameterError("dataset", name, f"must be one of {list(NAMED)} or 'simulation'")
    spec = SHARED[name]
    path = Path(data_dir or default_data_dir()) / spec.file
    return load_csv(path, spec.target, spec.task, spec.drop, name=name)


def load_sklearn(name: str) -> Dataset:
    """One of :data:`SKLEARN`, as a frame of float features and its target."""
    import sklearn.datasets

    loader, task = SKLEARN[name]
    bunch = getattr(sklearn.datasets, loader)(as_frame=True)
    X = bunch.data.astype(np.float64).reset_index(drop=True)
    X.columns = [str(c) for c in X.columns]
    y = bunch.target.reset_index(drop=True)
    y = y.astype(np.float64 if task == "regression" else np.int64).rename("target")
    return Dataset(name, task, X, y)


def load_csv(
    path: Path | str,
    target: str,
    task: str,
    drop: Sequence[str] = (),
    name: str | None = None,
    na_values: Sequence[str] | None = None,
    keep_default_na: bool = True,
    encoding: str | None = None,
    sample_rows: int | None = None,
    seed: int = 0,
) -> Dataset:
    """Read a CSV with the input rule and check that ``target`` suits ``task``.

    ``sample_rows`` reads a uniform random sample of that many rows (drawn with ``seed``);
    without it, a file too large to read in memory is refused (:mod:`training.csvsize`).

    Cells are typed by ``rule`` (pandas' missing-value strings by default): numeric
    columns become float64, the others pandas Categoricals that list every category in
    the file, so any split of it knows them all. Rows whose target is missing are dropped,
    with a warning saying how many. Every fault raises :class:`CsvError` naming the file
    and the column, before anything is fitted.
    """
    path = Path(path)
    if task not in ("classification", "regression"):
        raise ParameterError("task", task, "must be 'classification' or 'regression'")
    text, delimiter = read_text_frame(path, encoding, sample_rows, seed)
    if target not in text.columns:
        raise CsvError(
            path, f"--target {target!r} is not a column; the columns are {list(text.columns)}"
        )
    unknown = [d for d in drop if d not in text.columns]
    if unknown:
        raise CsvError(path, f"--drop names columns the file does not have: {unknown}")
    rule = rule_for(na_values, keep_default_na, decimal=guess_decimal(text, delimiter))
    source_rows = text.index.to_numpy() + 1
    y = _target(path, text[target], target, task, rule)
    missing = int(y.isna().sum())
    if missing:
        warnings.warn(
            f"{path}: column {target!r}: dropped {missing} of {len(y)} rows whose target is "
            "missing",
            DataWarning,
            stacklevel=2,
        )
        keep = y.notna().to_numpy()
        text, y, source_rows = text[keep], y[keep], source_rows[keep]
    if str(y.dtype) == "Int64":
        y = y.astype(np.int64)
    if len(y) < MIN_ROWS:
        raise CsvError(path, f"has {len(y)} usable rows; at least {MIN_ROWS} are needed")
    if y.nunique() < 2:
        problem = "is constant" if task == "regression" else "has a single class"
        raise CsvError(path, f"{problem} ({y.iloc[0]!r}); there is nothing to learn", column=target)
    features = text.drop(columns=[target, *drop])
    if features.shape[1] == 0:
        raise CsvError(path, f"has no feature columns besides the target {target!r}")
    X = typed_frame(path, features, rule)
    if X.shape[1] == 0:
        raise CsvError(path, "has no feature column with any value")
    return Dataset(
        name or path.stem,
        task,
        X.reset_index(drop=True),
        y.reset_index(drop=True),
        rule=rule,
        source_rows=source_rows,
    )


# A number written with a decimal comma, maybe grouped ("1 234,5", "1.234,5") or a percentage:
# the groups and the "%" are not read as numbers, but they still tell the decimal mark.
_COMMA_DECIMAL = r"[+-]?(?:\d{1,3}(?:[ \u00a0\u202f.]\d{3})+|\d+),\d+%?"


def guess_decimal(text: pd.DataFrame, delimiter: str) -> Decimal:
    """Semicolon files are often written with decimal commas ("3,5"); read them so."""
    if delimiter != ";":
        return "."
    sample = text.head(200)
    for name in sample.columns:
        cells = sample[name].str.strip()
        cells = cells[cells != ""]
        if len(cells) and cells.str.fullmatch(_COMMA_DECIMAL).mean() > 0.5:
            return ","
    return "."


def _not_numeric(text: str, row: int, rule: Normaliser) -> str:
    """Why a regression target's cell is refused: text, or a number with the other mark."""
    where = f'"{text[:40]}" in data row {row + 1}'
    if rule.decimal == "," and replace(rule, decimal=".").number_text(text) is not None:
        return (
            f"a regression target must be numeric; {where} is a number with a decimal point, "
            "but this file is read with decimal commas (its other numbers are written "
            'like "3,5"); write one decimal mark throughout'
        )
    return (
        f"a regression target must be numeric; it holds text ({where}). Use --task "
        "classification if it names classes"
    )


def _target(path: Path, cells: pd.Series, name: str, task: str, rule: Normaliser) -> pd.Series:
    """The target column typed for ``task``: float64, int64 class codes or string labels."""
    texts = [rule.text(c) for c in cells.tolist()]
    numbers = [None if t is None else rule.number_text(t) for t in texts]
    if task == "regression":
        for row, t, v in zip(cells.index, texts, numbers, strict=True):
            if t is not None and v is None:
                raise CsvError(path, _not_numeric(t, row, rule), column=name)
        return pd.Series([np.nan if v is None else v for v in numbers], dtype=np.float64, name=name)
    n_present = sum(t is not None for t in texts)
    values = [v for v in numbers if v is not None]
    if values and len(values) == n_present:
        if not all(v.is_integer() for v in values):
            raise CsvError(
                path,
                "has non-integer numbers, which look like a regression target; use "
                "--task regression",
                column=name,
            )
        return pd.Series([None if v is None else int(v) for v in numbers], dtype="Int64", name=name)
    return pd.Series(texts, dtype=object, name=name)


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
