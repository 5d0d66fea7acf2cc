"""Checks for hyperparameters: each raises ParameterError naming the parameter and value.

``fit`` calls them (scikit-learn's convention: ``__init__`` only stores), so one table of
rules serves every estimator here.
"""

from __future__ import annotations

from typing import TypeGuard

import numpy as np

from training.errors import ParameterError


def is_real(v: object) -> TypeGuard[int | float | np.integer | np.floating]:
    """A finite int or float; bools are not numbers here."""
    return (
        isinstance(v, (int, float, np.integer, np.floating))
        and not isinstance(v, (bool, np.bool_))
        and bool(np.isfinite(v))
    )


def check_int(name: str, v: object, minimum: int = 1) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ParameterError(name, v, f"must be an integer >= {minimum}")
    return int(v)


def check_real(
    name: str,
    v: object,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """A finite number within ``[low, high]`` (``(low`` / ``high)`` when open)."""
    ok = is_real(v) and bool(
        (low is None or (v > low if open_low else v >= low))
        and (high is None or (v < high if open_high else v <= high))
    )
    if not ok:
        left = "(" if open_low else "["
        right = ")" if open_high else "]"
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        raise ParameterError(name, v, f"must be a finite number in {left}{lo}, {hi}{right}")
    assert is_real(v)  # the range check above raised otherwise
    return float(v)


def check_positive(name: str, v: object) -> float:
    return check_real(name, v, low=0.0, open_low=True)


def check_choice(name: str, v: object, choices: tuple[str, ...]) -> str:
    if v not in choices:
        raise ParameterError(name, v, f"must be one of {', '.join(map(repr, choices))}")
    return str(v)
