"""The plain combiners a gate must beat before it ships: the uniform average, the best
expert and stacking's linear pool.

A learnt gate only earns its place if it beats all of them on rows it did not train on.
Each is a gate with constant output, so whichever is chosen exports and serves like any
other gate. The comparison uses the selection's own held-out rows: the network's
predictions there are out-of-sample (it was trained on the other folds), and the
constants' are too (the likelihoods are out-of-fold; the pooled weights are fitted on the
other folds). Every gate gets its own mixture temperature, fitted on the same rows, so
none wins by calibration alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax

from app.bundle.mixture import clip_proba, log_sum_exp, mix_classification, mix_regression
from training.errors import ParameterError
from training.evidence import Evidence

GateKind = Literal["network", "uniform", "best_single", "stacking"]
#: The light L2 weight on the pooled weights' logits of the ``stacking`` rival.
POOL_PENALTY = 1e-3
TEMPERATURE_GRID = np.exp(np.linspace(np.log(0.25), np.log(4.0), 57))


def row_nll(weights: np.ndarray, ev: Evidence, temperature: float) -> np.ndarray:
    """Per-row NLL of the mixture on the rows of ``ev``, after the mixture temperature."""
    if ev.proba is not None:
        p = mix_classification(weights, ev.proba, temperature).proba
        return -np.log(np.clip(p[np.arange(ev.n), ev.y], 1e-300, None))
    assert ev.means is not None and ev.sigmas is not None
    return -mix_regression(weights, ev.means, ev.sigmas, temperature).logpdf(ev.y)


def fit_temperature(weights: np.ndarray, ev: Evidence) -> float:
    """The temperature on a log grid (0.25 to 4) with the lowest held-out NLL."""
    if ev.proba is not None:
        nlls = _class_nll_per_temperature(weights, ev, TEMPERATURE_GRID)
    else:
        nlls = _regression_nll_per_temperature(weights, ev, TEMPERATURE_GRID)
    return float(TEMPERATURE_GRID[int(np.argmin(nlls))])


def _regression_nll_per_temperature(
    weights: np.ndarray, ev: Evidence, temperatures: np.ndarray
) -> np.ndarray:
    """Mean :func:`row_nll` at each temperature, for regression: every sigma times T, so
    the standardised squared residuals are computed once and divided by ``T**2``."""
    assert ev.means is not None and ev.sigmas is not None
    sigmas = np.asarray(ev.sigmas, dtype=np.float64)
    r2 = np.square((np.asarray(ev.y, dtype=np.float64)[:, None] - ev.means) / sigmas)
    base = np.log(np.clip(np.asarray(weights, dtype=np.float64), 1e-300, None))
    base = base - np.log(sigmas) - 0.5 * np.log(2.0 * np.pi)
    out = np.empty(len(temperatures))
    for i, t in enumerate(temperatures):
        out[i] = np.log(t) - log_sum_exp(base - (0.5 / (t * t)) * r2, axis=1).mean()
    return out


def _class_nll_per_temperature(
    weights: np.ndarray, ev: Evidence, temperatures: np.ndarray
) -> np.ndarray:
    """Mean :func:`row_nll` at each temperature, for classification, from the true class
    alone: the tempered expert ``f~_jy = f_jy ** (1/T) / sum_c f_jc ** (1/T)`` needs no
    mixture over every class, nor its entropies."""
    assert ev.proba is not None
    log_p = np.log(clip_proba(ev.proba))  # (n, m, C)
    # f~_jy = 1 / sum_c exp((log f_jc - log f_jy) / T); the clip bounds the exponent.
    gap = log_p - log_p[np.arange(ev.n), :, ev.y][..., None]
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum(axis=1, keepdims=True)
    out = np.empty(len(temperatures))
    for i, t in enumerate(temperatures):
        tempered_y = 1.0 / np.exp(gap * (1.0 / t)).sum(axis=2)
        out[i] = -np.log(np.einsum("nm,nm->n", w, tempered_y)).mean()
    return out


def pooled_weights(L: np.ndarray, penalty: float) -> np.ndarray:
    """Simplex weights ``softmax(b)`` maximising the mean log score minus
    ``penalty * |b|^2 / 2``: multinomial-logistic stacking of the experts' likelihoods,
    shrunk toward the uniform average as a ridge-penalised logistic meta-model is."""
    m = L.shape[1]

    # The rows' likelihoods relative to their best expert, once: each evaluation is then
    # a product with the weights (scipy's logsumexp over every row cost most of the fit).
    top = L.max(axis=1, keepdims=True)
    f = np.exp(L - top)

    def objective(b: np.ndarray) -> tuple[float, np.ndarray]:
        log_w = b - logsumexp(b)
        w = np.exp(log_w)
        mix = f @ w  # sum_j w_j f_ij / max_j f_ij, at least min_j w_j
        score = np.log(mix).mean() + float(top.mean())
        resp = (f * w) / mix[:, None]
        grad = (w - resp.mean(axis=0)) + penalty * b
        return -float(score) + 0.5 * penalty * float(b @ b), grad

    res = minimize(objective, np.zeros(m), jac=True, method="L-BFGS-B")
    return softmax(res.x)


def fit_or_fixed_temperature(setting: object, weights: np.ndarray, ev: Evidence) -> float:
    """A combiner's ``temperature`` setting resolved: None is 1, ``"auto"`` is fitted on
    ``ev`` with ``weights`` (one vector, or one row per row of ``ev``)."""
    if setting is None:
        return 1.0
    if setting == "auto":
        return fit_temperature(np.broadcast_to(weights, (ev.n, ev.m)), ev)
    if isinstance(setting, (int, float)) and not isinstance(setting, bool) and setting > 0:
        return float(setting)
    raise ParameterError("temperature", setting, "must be a positive number, 'auto' or None")


@dataclass(frozen=True)
class GateChoice:
    """Which gate ships, its temperature, and the held-out evidence for the choice."""

    kind: GateKind
    temperature: float
    constant: np.ndarray | None  # (m,) weights unless the network ships
    held_out_nll: dict[str, float] = field(default_factory=dict)
    reason: str = ""


def choose_gate(
    network_weights: np.ndarray,
    network_temperature: float,
    held_out: Evidence,
    all_rows: Evidence,
    calibrate: bool,
    pooled: tuple[np.ndarray, np.ndarray] | None = None,
) -> GateChoice:
    """The network unless a constant gate is at least as good on the held-out rows.

    The constant gates: the uniform average; the best expert (highest mean out-of-fold
    log-likelihood over ``all_rows``, as the ``best_single`` combiner picks it); and, if
    ``pooled`` is given, stacking's linear pool: ``pooled[0]`` its weights on the
    held-out rows, each fitted without those rows, and ``pooled[1]`` the weights fitted on
    all rows, which ship if it wins. ``network_weights`` are the network's weights on the
    ``held_out`` rows. ``calibrate``: fit each constant's temperature as the network's
    was; otherwise they use the network's.
    """
    n, m = held_out.n, held_out.m
    best = int(np.argmax(all_rows.log_lik.mean(axis=0)))
    constants: dict[GateKind, np.ndarray] = {
        "uniform": np.full(m, 1.0 / m),
        "best_single": np.eye(m)[best],
    }
    scored: dict[GateKind, np.ndarray] = {
        k: np.broadcast_to(w, (n, m)) for k, w in constants.items()
    }
    if pooled is not None:
        constants["stacking"] = pooled[1]
        scored["stacking"] = pooled[0]
    temps = {"network": float(network_temperature)}
    nll = {"network": float(row_nll(network_weights, held_out, temps["network"]).mean())}
    for kind, w in scored.items():
        temps[kind] = fit_temperature(w, held_out) if calibrate else temps["network"]
        nll[kind] = float(row_nll(w, held_out, temps[kind]).mean())
    rival = min(constants, key=lambda k: nll[k])
    scores = ", ".join(f"{k} {v:.4f}" for k, v in nll.items())
    where = f"held-out NLL over {n} rows: {scores} (best expert: #{best})"
    if nll["network"] < nll[rival]:
        return GateChoice(
            "network", temps["network"], None, nll, f"the network beats every plain gate; {where}"
        )
    return GateChoice(
        rival,
        temps[rival],
        constants[rival],
        nll,
        f"the network does not beat {rival} on held-out rows; {where}",
    )
