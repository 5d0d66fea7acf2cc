"""The adaptive prior: the paper's oracle example, the MC estimate, the "sum" pathology."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from app.bundle.prior import (
    classification_energy,
    expert_energy,
    log_prior_at_training_points,
    loo_baseline,
    prior_from_energy,
    regression_energy,
    regression_energy_mc,
)


def _sigmoid(u: float) -> float:
    return 1.0 / (1.0 + np.exp(-u))


@pytest.mark.parametrize(
    ("beta_1", "log_odds", "p_f1"),
    [(3, 0.1388, 0.5346), (5, -1.7775, 0.1446), (9, -5.7643, 0.00313)],
)
def test_two_model_bernoulli_example(beta_1: float, log_odds: float, p_f1: float) -> None:
    """Paper §3.1: C1 - C2 = log 5, x = 1, beta_2 = 1 (the paper's worked example)."""
    x, beta_2 = 1.0, 1.0
    proba = np.array(
        [
            [
                [1 - _sigmoid(beta_1 * x), _sigmoid(beta_1 * x)],
                [1 - _sigmoid(beta_2 * x), _sigmoid(beta_2 * x)],
            ]
        ]
    )
    energy = classification_energy(proba)
    prior = prior_from_energy(energy, np.array([np.log(5.0), 0.0]), temperature=1.0)[0]
    assert np.log(prior[0] / prior[1]) == pytest.approx(log_odds, abs=1e-3)
    assert prior[0] == pytest.approx(p_f1, abs=1e-3 if p_f1 > 0.01 else 1e-5)


def test_monte_carlo_energy_converges_to_the_closed_form() -> None:
    rng = np.random.default_rng(0)
    means = rng.normal(size=(50, 4))
    exact = regression_energy(means, 1.0, -1.7, 2.9)
    errors = [
        np.abs(regression_energy_mc(means, 1.0, -1.7, 2.9, k, random_state=1) - exact).max()
        for k in (10, 1_000, 100_000)
    ]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.02


def test_closed_form_matches_numerical_integration() -> None:
    mu, s, a, b = 0.3, 0.7, -1.0, 2.5
    ys = np.linspace(a, b, 200_001)
    logpdf = -0.5 * np.log(2 * np.pi * s * s) - (ys - mu) ** 2 / (2 * s * s)
    numeric = np.trapezoid(logpdf, ys) / (b - a)
    assert regression_energy(np.array([[mu]]), s, a, b)[0, 0] == pytest.approx(numeric, abs=1e-8)


energies = st.integers(2, 12).flatmap(
    lambda n: st.integers(2, 5).flatmap(
        lambda m: arrays(np.float64, (n, m), elements=st.floats(-50, 0, allow_nan=False))
    )
)


@settings(max_examples=200, deadline=None)
@given(energies)
def test_sum_reduction_makes_the_loo_prior_identical_at_every_training_point(e) -> None:
    total = loo_baseline(e, "sum") + e
    assert np.allclose(total, total[0], atol=1e-9)
    lp = log_prior_at_training_points(e, "sum", 1.0)
    assert np.allclose(lp, lp[0], atol=1e-9)


def test_mean_reduction_keeps_the_prior_adaptive() -> None:
    e = np.array([[-1.0, -3.0], [-4.0, -0.5], [-2.0, -2.0]])
    lp = log_prior_at_training_points(e, "mean", 1.0)
    assert not np.allclose(lp[0], lp[1])
    # Row 0 favours expert 0, row 1 expert 1: the prior follows the per-point energy.
    assert lp[0, 0] > lp[0, 1] and lp[1, 1] > lp[1, 0]


def test_bad_prior_arguments_are_named() -> None:
    e = np.zeros((3, 2))
    with pytest.raises(ValueError, match="energy_reduction='median'"):
        loo_baseline(e, "median")
    with pytest.raises(ValueError, match="prior_temperature=0"):
        log_prior_at_training_points(e, "mean", 0)
    with pytest.raises(ValueError, match="mc_samples=0"):
        regression_energy_mc(e, 1.0, 0.0, 1.0, 0)


def test_expert_energy_reads_the_task_from_the_outputs_shape() -> None:
    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(3), size=(4, 2))
    assert np.array_equal(expert_energy(proba, None, "sigma", 0, 0), classification_energy(proba))
    means, sigmas = rng.normal(size=(4, 2)), np.array([0.5, 2.0])
    unit = expert_energy(means, sigmas, "unit", -1.0, 2.0)
    assert np.array_equal(unit, regression_energy(means, 1.0, -1.0, 2.0))
    scaled = expert_energy(means, sigmas, "sigma", -1.0, 2.0)
    assert np.array_equal(scaled, regression_energy(means, sigmas, -1.0, 2.0))
    with pytest.raises(ValueError, match="needs the experts' sigmas"):
        expert_energy(means, None, "sigma", -1.0, 2.0)


def test_the_prior_maths_loads_without_a_runtime() -> None:
    code = (
        "import sys, app.bundle.prior; "
        "print(sorted(m for m in ('onnxruntime', 'torch', 'sklearn', 'pandas', 'training') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
