"""The mixture arithmetic both sides share: CDF, quantiles, uncertainty decompositions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from app.bundle.mixture import (
    clip_proba,
    entropy,
    mix_classification,
    mix_regression,
    temper_proba,
)


def test_clip_proba_keeps_rows_on_the_simplex() -> None:
    p = clip_proba(np.array([[1.0, 0.0], [0.3, 0.7]]))
    assert p.min() > 0 and np.allclose(p.sum(axis=1), 1.0)
    assert p[0, 1] == pytest.approx(1e-6, rel=1e-3)


@pytest.fixture(scope="module")
def regression():
    rng = np.random.default_rng(4)
    n, m = 60, 4
    weights = rng.dirichlet(np.ones(m) * 0.5, n)
    means = rng.normal(size=(n, m)) * 2.0
    sigmas = rng.uniform(0.2, 1.5, m)
    return mix_regression(weights, means, sigmas)


def _cdf_minus(x: float, w: np.ndarray, mu: np.ndarray, s: np.ndarray, q: float) -> float:
    return float((w * norm.cdf((x - mu) / s)).sum() - q)


def test_quantiles_equal_root_finding_on_the_mixture_cdf(regression) -> None:
    qs = [0.05, 0.5, 0.95]
    got = regression.quantiles(qs)
    for i in range(len(regression.means)):
        w, mu, s = regression.weights[i], regression.means[i], regression.sigmas
        for k, q in enumerate(qs):
            root = brentq(_cdf_minus, -40, 40, args=(w, mu, s, q), xtol=1e-13)
            assert got[i, k] == pytest.approx(root, abs=1e-8)


def test_bimodal_mixture_quantile_converges() -> None:
    """Newton alone would oscillate between the modes; the bracket makes it converge."""
    mix = mix_regression(np.array([[0.5, 0.5]]), np.array([[-10.0, 10.0]]), np.array([0.3, 0.3]))
    med = mix.quantile(0.5)[0]
    assert mix.cdf(np.array([med]))[0] == pytest.approx(0.5, abs=1e-9)


def test_regression_variance_is_the_law_of_total_variance(regression) -> None:
    rng = np.random.default_rng(0)
    i = 3
    w, mu, s = regression.weights[i], regression.means[i], regression.sigmas
    j = rng.choice(len(w), size=400_000, p=w)
    draws = rng.normal(mu[j], s[j])
    assert regression.variance[i] == pytest.approx(draws.var(), rel=0.01)
    assert regression.mean[i] == pytest.approx(draws.mean(), abs=0.01)
    assert regression.aleatoric[i] + regression.epistemic[i] == pytest.approx(
        regression.variance[i]
    )


@pytest.mark.parametrize("temperature", [0.3, 1.0, 3.0])
def test_classification_uncertainty_decomposes_at_every_temperature(temperature: float) -> None:
    """total = aleatoric + epistemic with epistemic the mutual information, computed here
    independently as sum_j alpha_j KL(f~_j || mixture); nothing is clipped."""
    rng = np.random.default_rng(1)
    w = rng.dirichlet(np.ones(3), 50)
    p = rng.dirichlet(np.ones(4) * 0.3, (50, 3))
    mix = mix_classification(w, p, temperature)
    clipped = np.clip(p, 1e-6, 1 - 1e-6)
    clipped /= clipped.sum(axis=2, keepdims=True)
    tempered = clipped ** (1 / temperature)
    tempered /= tempered.sum(axis=2, keepdims=True)
    mixture = np.einsum("nm,nmc->nc", w, tempered)
    np.testing.assert_allclose(mix.proba, mixture, rtol=0, atol=1e-12)
    kl = (tempered * np.log(tempered / mixture[:, None, :])).sum(axis=2)
    np.testing.assert_allclose(mix.epistemic, (w * kl).sum(axis=1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(mix.total, entropy(mixture), rtol=0, atol=1e-12)
    np.testing.assert_allclose(mix.total, mix.aleatoric + mix.epistemic, rtol=0, atol=1e-12)
    assert (mix.epistemic > 0).all()
    assert (mix.selection >= 0).all() and (mix.selection <= 1 + 1e-12).all()
    one_expert = np.zeros_like(w)
    one_expert[:, 0] = 1.0
    assert np.allclose(mix_classification(one_expert, p, temperature).selection, 0.0)
    assert np.allclose(mix_classification(one_expert, p, temperature).epistemic, 0.0)


def test_temperature() -> None:
    p = np.array([[0.2, 0.8]])
    assert temper_proba(p, 1.0) is p
    sharp = temper_proba(p, 0.5)
    assert sharp[0, 1] == pytest.approx(0.64 / 0.68)


def test_small_batches_solve_quantiles_in_python_with_the_same_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import app.bundle.mixture as mixture

    rng = np.random.default_rng(7)
    for _ in range(100):
        n, m = int(rng.integers(1, 4)), int(rng.integers(2, 7))
        mix = mix_regression(
            rng.dirichlet(np.ones(m) * rng.uniform(0.2, 3), n),
            rng.normal(size=(n, m)) * rng.uniform(0.1, 10),
            rng.uniform(0.05, 2, m),
            rng.uniform(0.3, 3),
        )
        scalar = (
            mix.quantiles([0.05, 0.5, 0.95])
            if n == 1
            else mix._quantiles_scalar([0.05, 0.5, 0.95], 1e-10)
        )
        with monkeypatch.context() as patched:
            patched.setattr(mixture, "_SCALAR_QUANTILES", -1)
            vectorised = mix.quantiles([0.05, 0.5, 0.95])
        np.testing.assert_allclose(scalar, vectorised, atol=1e-8, rtol=1e-9)
