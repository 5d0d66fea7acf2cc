"""Numbers at the precision they carry: the one rule every answer encoding follows.

The experts and the gate compute in float32. Probabilities, weights and entropies are
written as the shortest text that reads back as the same float32 (what the trail stores),
so the float64 mixture and split move by at most 6e-8 relatively: probabilities still sum
to 1, and total = aleatoric + epistemic, within 1e-7. Regression's values in target units
(the trail keeps them float64) are rounded to :data:`SIGNIFICANT` significant digits,
which recover any float32 the experts gave. docs/clients.md, "Precision", says the same.
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


def float32(a: np.ndarray) -> np.ndarray:
    """``a`` as float32: orjson writes a float32 array's values as their shortest text."""
    return np.asarray(a, dtype=_F32)


def float32_text(a: np.ndarray) -> np.ndarray:
    """The float64 values of ``a``'s float32 values written shortest: each one's own
    shortest text is that float32's (orjson's float32 formatting, read back)."""
    a32 = np.ascontiguousarray(a, dtype=_F32)
    return np.asarray(float32_values(a32), dtype=np.float64).reshape(a32.shape)


def float32_values(a: np.ndarray) -> Any:
    """:func:`float32_text` as (nested) lists of Python floats, for JSON built of lists."""
    return orjson.loads(orjson.dumps(np.ascontiguousarray(a, dtype=_F32), option=_NUMPY))


def significant(a: np.ndarray, digits: int = SIGNIFICANT) -> np.ndarray:
    """``a`` rounded to ``digits`` significant digits, each value the float64 nearest its
    decimal, so that its shortest text has at most ``digits`` digits. Zero, infinities and
    NaN stay as they are."""
    x = np.asarray(a, dtype=np.float64)
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
    writes them shortest, raw tensors carry their exact float64), and for regression the
    values in target units to :data:`SIGNIFICANT` digits beside float32-text weights and
    selection. Labels are taken from ``pred`` itself, before this rounding: a tie made by
    rounding must not move them."""
    if pred.proba is not None:
        assert pred.expert_proba is not None
        return replace(
            pred,
            weights=float32(pred.weights),
            uncertainty=float32(pred.uncertainty),
            proba=float32(pred.proba),
            expert_proba=float32(pred.expert_proba),
        )
    u = pred.uncertainty
    return replace(
        pred,
        weights=float32_text(pred.weights),
        uncertainty=np.column_stack([significant(u[:, :3]), float32_text(u[:, 3])]),
        mean=_maybe(pred.mean),
        std=_maybe(pred.std),
        interval=_maybe(pred.interval),
        expert_means=_maybe(pred.expert_means),
        expert_sds=_maybe(pred.expert_sds),
    )


def _maybe(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else significant(a)
