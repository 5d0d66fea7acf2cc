"""The bundle's held-out reference for realised-performance alerts: each expert's and the
mixture's per-row NLL on held-out rows, scored as the server scores an outcome."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.audit.scores import NLL_CAP
from app.bundle.reference import MIXTURE_KEY, NllReference, PerformanceReference
from training.errors import ParameterError
from training.evaluate import row_nll


def performance_reference(est: Any, X: Any, y: Any) -> PerformanceReference:
    """Mean and sd of the held-out NLL (capped at the server's cap) of the mixture and of
    each expert alone, on ``(X, y)``."""
    y_enc = est.encode_target(y)
    if len(y_enc) < 2:
        raise ParameterError("held_out", len(y_enc), "needs at least two rows")
    outputs = est.expert_outputs(X)
    sigmas = est.expert_sigmas(X) if est._task == "regression" else None
    n, m = outputs.shape[:2]
    rows = {
        MIXTURE_KEY: row_nll(est, outputs, est.weights(X), y_enc, est.mixture_temperature_, sigmas)
    }
    for j, name in enumerate(est.expert_names_):
        rows[name] = row_nll(est, outputs, np.eye(m)[np.full(n, j)], y_enc, sigmas=sigmas)
    return PerformanceReference(
        rows=n,
        nll={
            k: NllReference(
                mean=float(np.minimum(v, NLL_CAP).mean()),
                sd=float(np.minimum(v, NLL_CAP).std(ddof=1)),
            )
            for k, v in rows.items()
        },
    )
