"""Validating raw feature values and turning them into the columns every ONNX graph takes.

Numbers within float32 or ``null``; categories as text (or a number spelling one) or
``null``; an unseen category is refused unless ``IABMA_UNKNOWN_CATEGORY=missing``. Every
fault names its field (docs/design.md, "Reading a request").
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from app.bundle.columns import Columns, numeric_column, string_column
from app.bundle.manifest import Manifest
from app.bundle.normalise import (
    CategoryMap,
    Normaliser,
    Problem,
    json_repr,
    loose,
    quoted,
    visible,
)
from app.errors import Fault, InvalidInput

FLOAT32_MAX = 3.4028234663852886e38
MAX_FAULTS = 20
# pandas' and iabma train's name for a column with an empty header.
_UNNAMED = re.compile(r"Unnamed: \d+(?:\.\d+)?")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_NON_FINITE = re.compile(r"^[+-]?(inf|infinity)$", re.IGNORECASE)

FieldName = Callable[[int, str], str]
_PLAIN_NUMBERS = frozenset({float, int, type(None)})


class NonFinite:
    """A ``NaN``, ``Infinity`` or ``-Infinity`` token found in the body."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token

    def __repr__(self) -> str:
        return self.token


def json_type(value: Any) -> str:
    if isinstance(value, NonFinite):
        return value.token
    return json_repr(value)


@dataclass(frozen=True)
class FeatureTable:
    """What a request must look like for one bundle; built once when the bundle loads.

    Clients name features as in their own data (``names``); the columns handed to the
    graphs are keyed by graph input name (``inputs``). Values are read by the bundle's
    input rule, exactly as training read the file.
    """

    names: tuple[str, ...]
    inputs: Mapping[str, str]  # user name -> graph input name
    numeric: frozenset[str]  # user names
    categories: Mapping[str, CategoryMap]  # user name -> its categories
    rule: Normaliser
    missing_token: str
    map_unknown_to_missing: bool
    # Keys a row may hold that are read as absent: the training file's target and dropped
    # columns, with IABMA_IGNORE_TRAINING_COLUMNS (docs/data.md).
    ignored: frozenset[str] = frozenset()
    # Values of each categorical feature that are no training level, refused or read as
    # missing; the metrics drain it into input drift (app.metrics.inputs).
    unseen: Counter[str] = field(default_factory=Counter, compare=False, repr=False)

    @classmethod
    def from_manifest(
        cls, manifest: Manifest, unknown_category: str, ignore_training_columns: bool = False
    ) -> FeatureTable:
        rule = manifest.input_rule.normaliser()
        ignored: frozenset[str] = frozenset()
        if ignore_training_columns:
            dropped = [str(c) for c in manifest.training.get("drop", ())]
            ignored = frozenset([manifest.target.name, *dropped]) - {
                f.name for f in manifest.features
            }
        return cls(
            names=tuple(f.name for f in manifest.features),
            inputs={f.name: f.input for f in manifest.features},
            numeric=frozenset(f.name for f in manifest.features if f.dtype == "float"),
            categories={
                f.name: CategoryMap(tuple(f.categories), rule, f.other)
                for f in manifest.features
                if f.categories
            },
            rule=rule,
            missing_token=manifest.missing_token,
            map_unknown_to_missing=unknown_category == "missing",
            ignored=ignored,
        )

    @property
    def names_text(self) -> str:
        return ", ".join(self.names)

    @cached_property
    def _by_loose_name(self) -> dict[str, str]:
        return {loose(n): n for n in self.names}

    def near_hint(self, key: str) -> str:
        """For a name that differs from one of the model's only in spaces (surrounding,
        repeated, or of another kind such as a no-break space), case, Unicode form or
        characters that print as nothing (a byte-order mark), which look alike in a
        message: which one was meant. For an empty name, as a CSV reader gives an unnamed
        column, the model's ``Unnamed: N`` columns, as pandas names them."""
        look = loose(key)
        near = self._by_loose_name.get(look)
        # Printed, a no-break space looks like a space and a byte-order mark like nothing.
        shown_key = visible(key)
        seen = f' "{shown_key}"' if shown_key != key else ""
        if near is None and not look:
            unnamed = [n for n in self.names if _UNNAMED.fullmatch(n)]
            if unnamed:
                shown = " or ".join(f'"{n}"' for n in unnamed)
                return (
                    f"{seen}; a column with an empty header is called {shown} by this model "
                    "(as pandas and iabma train name it); send it under that name"
                )
        if near is None or near == key:
            return ""
        return f"{seen}; did you mean {quoted(near)}? names match exactly, spaces and case included"

    def number(self, value: Any) -> tuple[float | None, Problem | None]:
        if isinstance(value, NonFinite):
            return None, (
                "not_finite",
                f"{value.token} is not allowed; send null for a missing value",
            )
        number, problem = self.rule.number(value)
        if problem is not None or number is None:
            return None, problem
        # An integer or a text of digits too long for float64 reads as infinity: it is a
        # finite number out of range, not an infinity the client sent.
        if not math.isfinite(number) and not isinstance(value, int | str):
            return None, ("not_finite", f"{json_repr(value)} is not a finite number")
        if abs(number) > FLOAT32_MAX:
            return None, (
                "out_of_range",
                f"{json_repr(value)} is outside the float32 range the model uses",
            )
        return number, None

    def category(self, name: str, value: Any) -> tuple[str | None, Problem | None]:
        if isinstance(value, NonFinite):
            return None, ("wrong_type", f"expected a string or null, got {value.token}")
        cat, problem = self.categories[name].lookup(value)
        if problem is not None and problem[0] == "unknown_category":
            self.unseen[name] += 1
            if self.map_unknown_to_missing:
                return None, None
        return cat, problem

    def columns(self, rows: Sequence[Mapping[str, Any]], field_of: FieldName) -> Columns:
        """Validate every row; raise :class:`InvalidInput` listing the faults found."""
        if set(map(len, rows)) == {len(self.names)}:
            try:
                fast = self.columns_fast({name: [row[name] for row in rows] for name in self.names})
            except KeyError:  # a row lacks a feature and has another key instead
                fast = None
            if fast is not None:
                return fast
        return self._columns_exact(rows, field_of)

    def columns_fast(self, data: Mapping[str, Any]) -> Columns | None:
        """Column at a time, for columns of plain values or numeric arrays (every feature,
        equal lengths); None sends the batch to the exact path.

        Anything unusual (text in a numeric column, a value to normalise, an unknown
        category, a non-finite or out-of-range number) falls back, so the exact path alone
        decides what is refused and how the fault is named.
        """
        out: Columns = {}
        numbers: list[list[Any]] = []
        try:
            for name in self.numeric_names:
                col = data[name]
                if isinstance(col, np.ndarray):  # a raw tensor: NaN is a missing value
                    if col.dtype.kind not in "fiu":
                        return None
                elif not set(map(type, col)) <= _PLAIN_NUMBERS:
                    return None
                numbers.append(col)
            for name in self.categorical_names:
                known = self._exact[name]
                picked = [known[v] for v in data[name]]
                out[self.inputs[name]] = np.array(picked, dtype=object).reshape(-1, 1)
            if numbers:
                # Every numeric column at once: a few numpy calls per batch, not per column.
                arr = np.array(numbers, dtype=np.float64)  # None -> NaN, a missing value
                # One test for both: an infinity's magnitude exceeds float32's too (NaN,
                # a missing value, compares False and passes).
                if (np.abs(arr) > FLOAT32_MAX).any():
                    return None
                arr32 = arr.astype(np.float32)
                for j, name in enumerate(self.numeric_names):
                    out[self.inputs[name]] = arr32[j].reshape(-1, 1)
        except (KeyError, TypeError, OverflowError, ValueError):  # unhashable, huge, ragged
            return None
        return out

    @cached_property
    def numeric_names(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n in self.numeric)

    @cached_property
    def categorical_names(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n not in self.numeric)

    @cached_property
    def _exact(self) -> dict[str, dict[Any, str]]:
        """Per categorical feature: each category as itself, and null as missing."""
        return {
            name: {**{c: c for c in cats.categories}, None: self.missing_token}
            for name, cats in self.categories.items()
        }

    def _columns_exact(self, rows: Sequence[Mapping[str, Any]], field_of: FieldName) -> Columns:
        faults: list[Fault] = []
        values: dict[str, list[Any]] = {name: [] for name in self.names}
        for i, row in enumerate(rows):
            for key in row:
                if key not in values and key not in self.ignored:
                    faults.append(
                        Fault(
                            "unknown_feature",
                            field_of(i, key),
                            f"unknown feature{self.near_hint(key)}; the model takes "
                            f"{self.names_text}",
                        )
                    )
            for name in self.names:
                value: float | str | None
                if name not in row:
                    problem: Problem | None = (
                        "missing_feature",
                        "missing feature (send null for a missing value)",
                    )
                    value = None
                elif name in self.numeric:
                    value, problem = self.number(row[name])
                else:
                    value, problem = self.category(name, row[name])
                if problem is not None:
                    faults.append(Fault(problem[0], field_of(i, name), problem[1]))
                values[name].append(value)
            if len(faults) >= MAX_FAULTS:
                break
        if faults:
            raise InvalidInput(faults[:MAX_FAULTS])
        return {
            self.inputs[name]: numeric_column(col)
            if name in self.numeric
            else string_column(col, self.missing_token)
            for name, col in values.items()
        }


def query_row(params: Mapping[str, str], table: FeatureTable) -> dict[str, Any]:
    """Query-string text to JSON-like values: numbers parsed, an empty value is missing."""
    row: dict[str, Any] = {}
    for key, text in params.items():
        if text == "":
            row[key] = None
        elif key in table.numeric and _NUMBER.match(text.strip()):
            row[key] = float(text)
        elif key in table.numeric and _NON_FINITE.match(text.strip()):
            row[key] = NonFinite(text)
        else:
            row[key] = text
    return row
