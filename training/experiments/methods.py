"""Build, fit and score one method on one repetition.

Every method mixes the same refitted experts through :mod:`app.bundle.mixture`; only the
weights differ. A method learns from the out-of-fold evidence, except ``iabma_paper``
(and, under ``paper_literal``, every method), which learns from the experts' in-sample
likelihoods as the paper does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.bundle.mixture import mix_classification, mix_regression
from training.combiners.base import Combiner
from training.combiners.names import ABLATIONS
from training.combiners.registry import make_combiner
from training.errors import ParameterError
from training.evidence import Evidence
from training.experiments.config import DATASETS, method_params
from training.experiments.protocol import RepData
from training.experiments.schema import METHODS
from training.metrics import classification_scores, regression_scores


@dataclass(frozen=True)
class MethodOutcome:
    """One method's fit on one repetition and its test scores."""

    name: str
    combiner: Combiner
    evidence_source: str  # "oof" or "in_sample"
    fit_seconds: float
    weights: np.ndarray  # (n_test, m)
    temperature: float
    scores: dict[str, float]
    proba: np.ndarray | None  # (n_test, C) mixture probabilities (classification)


_SELECTION = (
    "candidates scored by held-out mixture NLL on inner folds of the training rows (one "
    "80/20 split above 3000 rows), early stopping (one-SE epoch), then the chosen candidate "
    "along a path toward stacking's pool (lambda_pool 0.3-10); the network ships only if "
    "it beats stacking's pool by more than one corrected resampled standard error on "
    "held-out rows that took no part in choosing it (the choice repeated without them), "
    "else the pool ships"
)
_HELD_OUT_T = "fitted on the inner held-out rows (log grid 0.25-4)"
_OOF_T = "fitted on the out-of-fold training rows (log grid 0.25-4)"
#: How each row is tuned, for results.json; ``temperature`` is overridden by the config.
TUNING: dict[str, dict[str, str]] = {
    "best_single": {"search": "argmax of mean out-of-fold log-likelihood"},
    "uniform": {"search": "none"},
    "accuracy_weighted": {"search": "none (weights from out-of-fold accuracy or MSE)"},
    "bma": {"search": "none (posterior over experts)"},
    "moe": {"search": "none: the paper's setting, 10 epochs, no early stopping"},
    "dla": {"search": "none (k and temperature from the config)"},
    "smc": {"search": "none (thresholds from the config)"},
    "bhs": {"search": "L-BFGS-B to convergence at the config's slab scale"},
    "iabma": {"search": f"objective x lambda grid; {_SELECTION}"},
    "moe_tuned": {"search": f"lambda = 0, marginal objective; {_SELECTION}"},
    "stacking": {"search": "penalty by 5-fold cross-validation on the out-of-fold rows"},
    "ensemble_selection": {"search": "greedy forward selection, trimmed to the best round"},
    "iabma_paper": {"search": "none: the paper's lambda, 10 epochs, in-sample likelihoods"},
    "iabma_lambda0": {"search": f"objective grid at lambda = 0; {_SELECTION}"},
    "iabma_no_temp": {"search": f"objective x lambda grid; {_SELECTION}"},
    "iabma_prior_tau": {"search": f"objective x lambda x prior temperature grid; {_SELECTION}"},
    "iabma_s_sigma": {"search": f"objective x lambda grid, energy at s = sigma; {_SELECTION}"},
}


def tuning_of(combiner: Combiner, name: str) -> dict[str, str]:
    """``search`` and ``temperature`` in words for ``combiner`` as built for row ``name``."""
    setting = getattr(combiner, "temperature", None) if hasattr(combiner, "temperature_") else None
    if name == "dla":
        setting = None  # DLA's temperature is its softmax's, not the mixture's
    if setting == "auto":
        how = _HELD_OUT_T if hasattr(combiner, "fallback") else _OOF_T
    elif setting is None:
        how = "none"
    else:
        how = f"fixed at {setting}"
    return {"search": TUNING[name]["search"], "temperature": how}


def check_methods(methods: list[str] | tuple[str, ...]) -> list[str]:
    """``methods`` in the table's order, each known and listed once."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ParameterError("methods", unknown, f"are not methods; choose from {list(METHODS)}")
    if not methods:
        raise ParameterError("methods", [], "must name at least one method")
    return [m for m in METHODS if m in methods]


def check_config(config: dict[str, Any], dataset: str, paper_literal: bool) -> None:
    """Build every method once, so a bad hyperparameter fails before the experts train.

    ``load_config`` accepts any name inside the per-dataset sections; a typo there would
    otherwise be ignored silently.
    """
    for name, section in config["datasets"].items():
        if name not in (*DATASETS, "csv"):
            raise ParameterError(
                "config", f"datasets.{name}", f"is not a dataset; known: {[*DATASETS, 'csv']}"
            )
        stray = [k for k in section if k not in METHODS]
        if stray:
            raise ParameterError(
                "config", f"datasets.{name}.{stray[0]}", f"is not a method; known: {list(METHODS)}"
            )
    for name in METHODS:
        build_method(name, config, dataset, seed=0, paper_literal=paper_literal)


def config_key(dataset: str) -> str:
    """The per-dataset section that applies: the dataset's own, or ``"csv"``."""
    return dataset if dataset in DATASETS else "csv"


def build_method(
    name: str, config: dict[str, Any], dataset: str, seed: int, paper_literal: bool
) -> Combiner:
    """An unfitted combiner for ``name`` with the config's hyperparameters.

    ``iabma_paper`` is an :class:`~training.combiners.iabma_gate.IABMAGate` with the paper's
    settings (``config["iabma_paper"]``, which also turns off our early stopping and
    mixture temperature); under ``paper_literal`` so is ``iabma``.
    """
    key = config_key(dataset)
    if name == "iabma_paper" or (paper_literal and name == "iabma"):
        params = method_params(config, key, "iabma_paper")
        return make_combiner("iabma", random_state=seed, **params)
    if name in ABLATIONS:
        params = {**method_params(config, key, "iabma"), **method_params(config, key, name)}
        return make_combiner("iabma", random_state=seed, **params)
    return make_combiner(name, random_state=seed, **method_params(config, key, name))


def evidence_source(name: str, paper_literal: bool) -> str:
    """``"in_sample"`` or ``"oof"``: which likelihoods method ``name`` learns from."""
    return "in_sample" if paper_literal or name == "iabma_paper" else "oof"


def run_method(
    name: str, rd: RepData, config: dict[str, Any], paper_literal: bool = False
) -> MethodOutcome:
    """Fit method ``name`` on ``rd``'s training rows and score its mixture on the test rows.

    ``fit_seconds`` times the combiner's ``fit`` alone; the experts are shared by all.
    """
    source = evidence_source(name, paper_literal)
    ev = rd.evidence_in_sample if source == "in_sample" else rd.evidence
    combiner = build_method(name, config, rd.dataset, rd.seed, paper_literal)
    t0 = time.perf_counter()
    combiner.fit(rd.Z_train, ev)
    seconds = time.perf_counter() - t0
    weights = np.asarray(combiner.weights(rd.Z_test), dtype=np.float64)
    temperature = float(getattr(combiner, "temperature_", 1.0))
    scores, proba = score_mixture(rd, ev, weights, temperature)
    return MethodOutcome(name, combiner, source, seconds, weights, temperature, scores, proba)


def score_mixture(
    rd: RepData, ev: Evidence, weights: np.ndarray, temperature: float
) -> tuple[dict[str, float], np.ndarray | None]:
    """Test scores of the mixture; regression metrics in the target's original units.

    A regression mixture uses the stds of the evidence the method learnt from: under
    in-sample likelihoods that is the in-sample residual RMSE, as
    :class:`~training.estimator.IABMARegressor` serves it with ``likelihood_source
    ="in_sample"``.
    """
    if rd.task == "classification":
        proba = mix_classification(weights, rd.test_outputs, temperature).proba
        return classification_scores(proba, rd.y_test), proba
    assert ev.sigmas is not None
    mix = mix_regression(weights, rd.test_outputs, ev.sigmas, temperature)
    scores = regression_scores(mix, rd.y_test, rd.y_scale, mix.quantile(0.05), mix.quantile(0.95))
    return scores, None
