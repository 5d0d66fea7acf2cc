"""Numbers at the precision they carry: the one rule every answer encoding follows.

The experts and the gate compute in float32. Probabilities, weights and entropies are
written as the shortest text that reads back as the same float32 (what the trail stores),
so the float64 mixture and split move by at most 6e-8 relatively: probabilities still sum
to 1, and total = aleatoric + epistemic, within 1e-7. Regression's other numbers, in target
units where float32 would lose digits when the mean is far from 0 (the trail keeps them
float64), are rounded to :data:`SIGNIFICANT` significant digits, which recover any
float32 the experts gave. docs/clients.md, "Precision", says the same.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import orjson

from app.bundle.predictor import Prediction

# Nine significant digits tell any two float32 apart; the float64 sums made of them keep
# their identities to 1e-9 relatively.
SIGNIFICANT = 9
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_F32 = np.dtype(np.float32)
_EXACT_POWERS = 22  # 10.0**k is exact up to here
_FEW = 48  # up to this many values, significant() formats each in Python (measured)


def float32(a: np.ndarray) -> np.ndarray:
    """``a`` as float32: orjson writes a float32 array's values as their shortest text."""
    return np.asarray(a, dtype=_F32)


def float32_values(a: np.ndarray) -> Any:
    """``a``'s float32 values as (nested) lists of the Python floats their shortest text
    reads as (orjson's float32 formatting, read back), for JSON built of lists."""
    return orjson.loads(orjson.dumps(np.ascontiguousarray(a, dtype=_F32), option=_NUMPY))


def significant(a: np.ndarray, digits: int = SIGNIFICANT) -> np.ndarray:
    """``a`` rounded to ``digits`` significant digits, each value the float64 nearest its
    decimal, so that its shortest text has at most ``digits`` digits. Zero, infinities and
    NaN stay as they are."""
    x = np.asarray(a, dtype=np.float64)
    if x.size <= _FEW:  # a row or two: Python's formatting beats a dozen numpy calls
        return np.array([float(f"{v:.{digits}g}") for v in x.ravel().tolist()]).reshape(x.shape)
    mag = np.abs(x)
    ok = np.isfinite(x) & (mag > 0)
    exp = np.floor(np.log10(np.where(ok, mag, 1.0))).astype(np.int64)
    shift = digits - 1 - exp  # digits after the point
    # m / 10**k and m * 10**k are correctly rounded while 10**k is exact (k <= 22).
    up = np.where(shift >= 0, shift, 0)
    down = np.where(shift < 0, -shift, 0)
    scaled = np.round(x * (10.0**up) / (10.0**down))
    out = np.where(ok, scaled / (10.0**up) * (10.0**down), x)
    far = np.flatnonzero(ok & (np.abs(shift) > _EXACT_POWERS))
    if far.size:  # below 1e-14 or above 1e31: rare, formatted one by one
        flat = out.reshape(-1)
        flat[far] = [float(f"{v:.{digits}g}") for v in x.reshape(-1)[far].tolist()]
    return out


def written(pred: Prediction) -> Prediction:
    """``pred``'s arrays as every encoding writes them: float32 for a classifier's (orjson
    writes them shortest, raw tensors carry their exact float64), :data:`SIGNIFICANT`
    digits for regression's, whose weights are float32 too. Labels are taken from ``pred``
    itself, before this rounding: a tie made by rounding must not move them."""
    if pred.proba is not None:
        assert pred.expert_proba is not None
        return replace(
            pred,
            weights=float32(pred.weights),
            uncertainty=float32(pred.uncertainty),
            proba=float32(pred.proba),
            expert_proba=float32(pred.expert_proba),
        )
    # Every array in one call: the calls, not the values, cost a single row.
    # The weights are the gate's float32 in any task, and the trail stores them so.
    arrays: list[np.ndarray | None] = [
        pred.uncertainty, pred.mean, pred.std, pred.interval, pred.expert_means, pred.expert_sds,
    ]  # fmt: skip
    u, mean, std, interval, means, sds = _each(significant(_flat(arrays)), arrays)
    assert u is not None
    return replace(
        pred, weights=float32(pred.weights), uncertainty=u, mean=mean, std=std,
        interval=interval, expert_means=means, expert_sds=sds,
    )  # fmt: skip


def _flat(arrays: list[np.ndarray | None]) -> np.ndarray:
    return np.concatenate([a.ravel() for a in arrays if a is not None])


def _each(flat: np.ndarray, like: list[np.ndarray | None]) -> list[np.ndarray | None]:
    """``flat`` cut back into arrays shaped as ``like`` (None stays None)."""
    out: list[np.ndarray | None] = []
    at = 0
    for a in like:
        if a is None:
            out.append(None)
            continue
        out.append(flat[at : at + a.size].reshape(a.shape))
        at += a.size
    return out
