"""Raw feature columns: which are numeric, which categorical, their graph input names
(``f_`` plus the user's name made safe and unique), and their values as every consumer
sees them (docs/design.md, "Feature values")."""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

import numpy as np
import pandas as pd

from app.bundle.columns import Columns, numeric_column, string_column
from app.bundle.manifest import MISSING_TOKEN, FeatureSpec, InputRule
from app.bundle.normalise import OTHER_CATEGORY, CategoryMap, Normaliser
from training.errors import DataWarning, ParameterError
from training.hints import warn_dates, warn_lookalikes, warn_mostly_numeric

MAX_CATEGORIES = 1000
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_MAX_NAME = 100


def graph_input_names(names: Sequence[str]) -> list[str]:
    """``f_<sanitised>`` per name, unique: ``a-b`` and ``a_b`` become ``f_a_b``, ``f_a_b_2``."""
    out: list[str] = []
    used: set[str] = set()
    for name in names:
        base = "f_" + (_UNSAFE.sub("_", str(name))[:_MAX_NAME] or "_")
        candidate, k = base, 1
        while candidate in used:
            k += 1
            candidate = f"{base}_{k}"
        used.add(candidate)
        out.append(candidate)
    return out


def _is_number(v: object) -> TypeGuard[int | float | np.integer | np.floating]:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
        v, (bool, np.bool_)
    )


def _cell_kind(v: object, rule: Normaliser) -> str:
    """ "missing", "number" or "text" for one raw cell."""
    if v is None or v is pd.NA or v is pd.NaT:
        return "missing"
    if _is_number(v):
        return "missing" if math.isnan(float(v)) else "number"
    if isinstance(v, str):
        text = rule.text(v)
        if text is None:
            return "missing"
        return "number" if rule.number_text(text) is not None else "text"
    return "text"


def _numeric_spec(name: str, graph: str, values: Sequence[object], rule: Normaliser) -> FeatureSpec:
    """A numeric column with its training range (numbers written as text included)."""
    numbers = []
    for v in values:
        if _is_number(v):
            numbers.append(float(v))
        elif (
            isinstance(v, str)
            and (text := rule.text(v)) is not None
            and (parsed := rule.number_text(text)) is not None
        ):
            numbers.append(parsed)
    finite = [x for x in numbers if math.isfinite(x)]
    low, high = (min(finite), max(finite)) if finite else (None, None)
    return FeatureSpec(name=name, input=graph, dtype="float", low=low, high=high)


def _category_text(v: object, rule: Normaliser) -> str | None:
    """A training cell as category text: normalised strings, numbers as ``str(v)``."""
    if isinstance(v, str):
        return rule.text(v)
    if v is None or v is pd.NA or (_is_number(v) and math.isnan(float(v))):
        return None
    return str(v.item() if isinstance(v, np.generic) else v)


@dataclass(frozen=True)
class FeatureSchema:
    """The raw features in order, as recorded in the manifest, and the rule that reads them."""

    features: tuple[FeatureSpec, ...]
    rule: Normaliser = field(default_factory=Normaliser)

    @classmethod
    def infer(
        cls,
        X: pd.DataFrame,
        categorical: Sequence[str] = (),
        rule: Normaliser | None = None,
        max_categories: int = MAX_CATEGORIES,
    ) -> FeatureSchema:
        """Type every column and list its categories.

        Numeric dtypes, and object columns whose every value is a number or numeric text,
        are numeric. Everything else is categorical, as are the ``categorical`` columns and
        pandas ``category`` columns (whose declared categories all count as seen: a split
        of a file then knows the file's categories). A column with more than
        ``max_categories`` values keeps the most frequent ones; the rest share the
        ``__other__`` bucket, with a warning.
        """
        rule = rule or Normaliser()
        names = [str(c) for c in X.columns]
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise ParameterError("X", dupes, "has duplicate column names")
        unknown = sorted(set(categorical) - set(names))
        if unknown:
            raise ParameterError("categorical", unknown, "names columns that X does not have")
        if not names:
            raise ParameterError("X", [], "has no feature columns")
        specs = []
        for i, (name, graph) in enumerate(zip(names, graph_input_names(names), strict=True)):
            col = X.iloc[:, i]
            specs.append(_infer_one(name, graph, col, name in categorical, rule, max_categories))
        return cls(tuple(specs), rule)

    # -- names ------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """The user's column names."""
        return [f.name for f in self.features]

    @property
    def inputs(self) -> list[str]:
        """The graph input names, in the same order."""
        return [f.input for f in self.features]

    def name_of(self, graph_input: str) -> str:
        for f in self.features:
            if f.input == graph_input:
                return f.name
        raise KeyError(graph_input)

    def subset(self, names: Sequence[str]) -> FeatureSchema:
        by_name = {f.name: f for f in self.features}
        return FeatureSchema(tuple(by_name[n] for n in names), self.rule)

    @property
    def numeric(self) -> list[str]:
        """Graph names of the numeric features."""
        return [f.input for f in self.features if f.dtype == "float"]

    @property
    def categorical(self) -> list[str]:
        """Graph names of the categorical features."""
        return [f.input for f in self.features if f.dtype == "string"]

    def input_rule(self) -> InputRule:
        r = self.rule
        return InputRule(
            na_values=sorted(r.na_values),
            strip_whitespace=r.strip_whitespace,
            na_casefold=r.na_casefold,
            numbers_as_text=r.numbers_as_text,
            decimal=r.decimal,
        )

    # -- values -----------------------------------------------------------------------------
    def check_columns(self, X: pd.DataFrame, param: str = "X") -> None:
        have = {str(c) for c in X.columns}
        missing = [n for n in self.names if n not in have]
        if missing:
            raise ParameterError(param, missing, "lacks these feature columns")

    def columns(self, X: pd.DataFrame) -> Columns:
        """ONNX-ready inputs keyed by graph name: one ``(n, 1)`` array per feature."""
        self.check_columns(X)
        lookup = {str(c): c for c in X.columns}
        out: Columns = {}
        for f in self.features:
            col = X[lookup[f.name]]
            if f.dtype == "float":
                out[f.input] = self._numbers(f.name, col)
            else:
                cats = CategoryMap(tuple(f.categories or ()), self.rule, f.other)
                mapped, unseen = cats.lookup_all(col.astype(object).tolist())
                if unseen:
                    # As the server with IABMA_UNKNOWN_CATEGORY=missing; it refuses by default.
                    warnings.warn(
                        f"column {f.name!r}: {unseen} values training never saw are treated "
                        "as missing",
                        DataWarning,
                        stacklevel=3,
                    )
                out[f.input] = string_column(mapped, MISSING_TOKEN)
        return out

    def _numbers(self, name: str, col: pd.Series) -> np.ndarray:
        if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
            return numeric_column(col.to_numpy(dtype=np.float64, na_value=np.nan).tolist())
        values: list[float | None] = []
        for v in col.astype(object).tolist():
            if v is pd.NA or (_is_number(v) and math.isnan(float(v))):
                values.append(None)
                continue
            number, problem = self.rule.number(v.item() if isinstance(v, np.generic) else v)
            if problem is not None:
                raise ParameterError(
                    "X", name, f"must be numeric, as it was in training: {problem[1]}"
                )
            values.append(number)
        return numeric_column(values)

    def frame(self, X: pd.DataFrame) -> pd.DataFrame:
        """The same values as :meth:`columns`, as the DataFrame the sklearn experts fit on."""
        return frame_of(self.columns(X), index=X.index)


def frame_of(columns: Columns, index: pd.Index | None = None) -> pd.DataFrame:
    """Columns (graph names) as a DataFrame: float64 numbers, object strings."""
    return pd.DataFrame(
        {
            name: (arr.ravel().astype(np.float64) if arr.dtype != object else arr.ravel())
            for name, arr in columns.items()
        },
        index=index,
    )


def _infer_one(
    name: str,
    graph: str,
    col: pd.Series,
    forced: bool,
    rule: Normaliser,
    max_categories: int,
) -> FeatureSpec:
    declared: list[str] = []
    if isinstance(col.dtype, pd.CategoricalDtype):
        forced = True
        declared = [t for c in col.cat.categories if (t := _category_text(c, rule)) is not None]
        values = col.astype(object).tolist()
    elif pd.api.types.is_bool_dtype(col):
        forced = True
        values = col.tolist()
    elif pd.api.types.is_numeric_dtype(col):
        if col.isna().all():
            raise ParameterError("X", name, "is empty: every value is missing; drop the column")
        if not forced:
            return _numeric_spec(name, graph, col.tolist(), rule)
        values = col.tolist()
    else:
        values = col.tolist()
    if not forced:
        kinds = Counter(_cell_kind(v, rule) for v in values)
        if kinds["text"] == 0:
            if kinds["number"] == 0:
                raise ParameterError("X", name, "is empty: every value is missing; drop the column")
            return _numeric_spec(name, graph, values, rule)
        _warn_mostly_numeric(name, values, kinds, rule)
    texts = [t for v in values if (t := _category_text(v, rule)) is not None]
    counts = Counter(texts)
    for c in declared:
        counts.setdefault(c, 0)
    if not counts:
        raise ParameterError("X", name, "is empty: every value is missing; drop the column")
    warn_dates(name, counts)
    warn_lookalikes(f"column {name!r}", counts)
    other = len(counts) > max_categories
    if other:
        ranked = sorted(counts, key=lambda c: (-counts[c], c))[:max_categories]
        warnings.warn(
            f"column {name!r} has {len(counts)} distinct values; keeping the "
            f"{max_categories} most frequent and pooling the rest as {OTHER_CATEGORY!r}",
            DataWarning,
            stacklevel=3,
        )
        cats = sorted({*ranked, OTHER_CATEGORY})
    else:
        cats = sorted(counts)
    return FeatureSpec(name=name, input=graph, dtype="string", categories=cats, other=other)


def _warn_mostly_numeric(name: str, values: list[object], kinds: Counter, rule: Normaliser) -> None:
    odd = Counter(
        t
        for v in values
        if isinstance(v, str) and (t := rule.text(v)) is not None and rule.number_text(t) is None
    )
    warn_mostly_numeric(name, kinds["number"], odd)
