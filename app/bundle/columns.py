"""Raw feature columns as every ONNX graph in a bundle takes them.

One input per feature, shape ``(n, 1)``: float32 with NaN for a missing number, or a
string with the manifest's missing token for a missing category. Training builds these
from a DataFrame and serving from JSON, through the same two functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

Columns = dict[str, np.ndarray]


def numeric_column(values: Iterable[object]) -> np.ndarray:
    """Float32 ``(n, 1)``; ``None`` becomes NaN."""
    arr = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return arr.astype(np.float32).reshape(-1, 1)


def string_column(values: Iterable[object], missing_token: str) -> np.ndarray:
    """Object ``(n, 1)`` of str; ``None`` and NaN become ``missing_token``."""
    out = [
        missing_token if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
        for v in values
    ]
    return np.asarray(out, dtype=object).reshape(-1, 1)


def feed(columns: Mapping[str, np.ndarray], names: Iterable[str]) -> Columns:
    """The subset of ``columns`` that one ONNX graph declares as its inputs."""
    return {name: columns[name] for name in names}


def n_rows(columns: Mapping[str, np.ndarray]) -> int:
    return int(next(iter(columns.values())).shape[0]) if columns else 0
