"""The data plane's two types: what every protocol decodes into, and what it encodes from.

``POST /predict`` and the Open Inference Protocol route are codecs (:mod:`app.codecs`):
each turns its request into one :class:`InferenceRequest`, :meth:`app.core.service.Service.infer`
runs the graph and commits the audit record once, and the codec encodes the
:class:`InferenceResult` its own way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.bundle.columns import Columns
from app.bundle.predictor import Prediction
from app.core.runtime import LoadedModel
from app.errors import Fault, InvalidInput

MAX_FAULTS = 20
RowField = Callable[[int], str]


@dataclass(frozen=True)
class InferenceRequest:
    columns: Columns  # validated, by graph input name
    n: int
    # The rows as sent, by the user's names (the audit payload), or how to make them: the
    # writer thread builds them only if IABMA_AUDIT_PAYLOAD keeps the input.
    instances: list[dict[str, Any]] | Callable[[], list[dict[str, Any]]]
    route: str  # "predict", "oip_infer", ...
    row_field: RowField  # how error messages name row i


@dataclass(frozen=True)
class InferenceResult:
    model: LoadedModel
    prediction: Prediction


def check_finite(model: LoadedModel, pred: Prediction, row_field: RowField) -> None:
    """Refuse rows with a non-finite output, naming the experts that gave one.

    An input far outside the training range can overflow float32 inside a graph; that is
    the input's fault (422), not a server error.
    """
    if pred.finite:
        return
    arrays = [pred.weights, pred.uncertainty]
    arrays += [a for a in (pred.proba, pred.mean, pred.std, pred.interval) if a is not None]
    per_expert = pred.expert_proba if pred.expert_proba is not None else pred.expert_means
    assert per_expert is not None
    arrays.append(per_expert)
    if all(np.isfinite(a).all() for a in arrays):
        return
    n = pred.n
    bad = np.zeros(n, dtype=bool)
    for arr in arrays:
        bad |= ~np.isfinite(arr.reshape(n, -1)).all(axis=1)
    culprits = ~np.isfinite(per_expert.reshape(n, len(model.experts), -1)).all(axis=2)
    faults = []
    for i in np.flatnonzero(bad)[:MAX_FAULTS]:
        names = [e for j, e in enumerate(model.experts) if culprits[i, j]]
        who = f"expert {', '.join(names)} gives" if names else "the model gives"
        faults.append(
            Fault(
                "non_finite_output",
                row_field(int(i)),
                f"{who} no finite output for this row: a missing value it cannot handle, "
                "or values far outside the range seen in training",
            )
        )
    raise InvalidInput(faults)
