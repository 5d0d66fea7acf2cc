"""Raw feature columns: which are numeric, which categorical, and how they are normalised.

Every consumer (sklearn experts, the gate, ONNX export, serving) sees the same normalised
values: numbers rounded to float32 with NaN for missing, and categories as strings with
the missing token. That is what makes the ONNX graphs agree with the in-memory models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.bundle.columns import Columns, numeric_column, string_column
from app.bundle.manifest import MISSING_TOKEN, FeatureSpec
from training.errors import ParameterError

# Strings that mean "missing" in the CSVs this tool reads (the paper's UCI preprocessing).
# Not "none": credit-g uses it as a real level ("no other parties").
MISSING_STRINGS = frozenset({"", "?", "na", "n/a", "nan", "null", "unknown"})


def _is_numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


@dataclass(frozen=True)
class FeatureSchema:
    """The raw features in order, as recorded in the manifest."""

    features: tuple[FeatureSpec, ...]

    @classmethod
    def infer(cls, X: pd.DataFrame, categorical: Sequence[str] = ()) -> FeatureSchema:
        """Numeric dtypes become float features; everything else, and ``categorical``, strings."""
        unknown = sorted(set(categorical) - set(X.columns))
        if unknown:
            raise ParameterError("categorical", unknown, "names columns that X does not have")
        specs = []
        for name in X.columns:
            col = X[name]
            if _is_numeric(col) and name not in categorical:
                specs.append(FeatureSpec(name=str(name), dtype="float"))
                continue
            values = string_column(col.tolist(), MISSING_TOKEN).ravel()
            cats = sorted(set(values.tolist()) - {MISSING_TOKEN})
            if not cats:
                raise ParameterError("X", name, "is a categorical column with no values at all")
            specs.append(FeatureSpec(name=str(name), dtype="string", categories=cats))
        if not specs:
            raise ParameterError("X", list(X.columns), "has no feature columns")
        return cls(tuple(specs))

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.features]

    def subset(self, names: Sequence[str]) -> FeatureSchema:
        by_name = {f.name: f for f in self.features}
        return FeatureSchema(tuple(by_name[n] for n in names))

    @property
    def numeric(self) -> list[str]:
        return [f.name for f in self.features if f.dtype == "float"]

    @property
    def categorical(self) -> list[str]:
        return [f.name for f in self.features if f.dtype == "string"]

    def check_columns(self, X: pd.DataFrame, param: str = "X") -> None:
        missing = [n for n in self.names if n not in X.columns]
        if missing:
            raise ParameterError(param, missing, "lacks these feature columns")

    def columns(self, X: pd.DataFrame) -> Columns:
        """ONNX-ready inputs: one ``(n, 1)`` array per feature."""
        self.check_columns(X)
        out: Columns = {}
        for f in self.features:
            col = X[f.name]
            if f.dtype == "float":
                try:
                    out[f.name] = numeric_column(pd.to_numeric(col).astype("float64").tolist())
                except (TypeError, ValueError):
                    raise ParameterError(
                        "X", f.name, "must be numeric, as it was in training"
                    ) from None
            else:
                out[f.name] = string_column(col.tolist(), MISSING_TOKEN)
        return out

    def frame(self, X: pd.DataFrame) -> pd.DataFrame:
        """The same values as :meth:`columns`, as the DataFrame the sklearn experts fit on."""
        cols = self.columns(X)
        return pd.DataFrame(
            {
                name: (arr.ravel().astype(np.float64) if arr.dtype != object else arr.ravel())
                for name, arr in cols.items()
            },
            index=X.index,
        )


def clean_missing_strings(df: pd.DataFrame) -> pd.DataFrame:
    """Strip string cells and turn the usual "unknown" tokens into missing values."""
    out = df.copy()
    for name in out.columns:
        if out[name].dtype == object or pd.api.types.is_string_dtype(out[name]):
            stripped = out[name].astype("string").str.strip()
            mask = stripped.str.lower().isin(MISSING_STRINGS)
            out[name] = stripped.mask(mask).astype(object).where(lambda s: s.notna(), None)
            numeric = pd.to_numeric(out[name], errors="coerce")
            if numeric.notna().sum() == out[name].notna().sum() and out[name].notna().any():
                out[name] = numeric
    return out
