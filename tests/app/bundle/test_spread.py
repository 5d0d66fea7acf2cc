"""The per-row spread rule, and the mixture with (n, m) sigmas."""

from __future__ import annotations

import numpy as np

from app.bundle.mixture import mix_regression
from app.bundle.spread import SD_FLOOR, clean_variance


def test_the_rule_floors_low_variances_and_replaces_non_finite_ones() -> None:
    v = np.array([4.0, 0.0, -1.0, 1e-9, np.nan, np.inf, -np.inf, 0.25])
    clean = clean_variance(v, fallback_sd=0.7)
    want = [2.0, SD_FLOOR, SD_FLOOR, SD_FLOOR, 0.7, 0.7, 0.7, 0.5]
    np.testing.assert_allclose(clean.sd, want)
    assert (clean.floored, clean.replaced) == (3, 3)


def _mixture(rng: np.random.Generator, n: int, m: int, sigmas: np.ndarray):  # type: ignore[no-untyped-def]
    w = rng.dirichlet(np.ones(m), size=n)
    means = rng.normal(size=(n, m))
    return mix_regression(w, means, sigmas, 1.3)


def test_constant_sigmas_given_per_row_change_nothing() -> None:
    rng = np.random.default_rng(0)
    n, m = 40, 3
    sigmas = np.array([0.5, 1.0, 2.0])
    flat = _mixture(np.random.default_rng(0), n, m, sigmas)
    rows = _mixture(np.random.default_rng(0), n, m, np.tile(sigmas, (n, 1)))
    y = rng.normal(size=n)
    np.testing.assert_allclose(rows.aleatoric, flat.aleatoric, rtol=1e-12)
    np.testing.assert_allclose(rows.logpdf(y), flat.logpdf(y), rtol=1e-12)
    np.testing.assert_allclose(rows.cdf(y), flat.cdf(y), rtol=1e-12)
    np.testing.assert_allclose(rows.pdf(y[:, None]), flat.pdf(y[:, None]), rtol=1e-12)
    np.testing.assert_allclose(rows.quantiles([0.05, 0.95]), flat.quantiles([0.05, 0.95]))


def test_per_row_sigmas_give_each_row_its_own_spread() -> None:
    rng = np.random.default_rng(1)
    n, m = 6, 2
    sigmas = rng.uniform(0.1, 3.0, size=(n, m))
    mix = _mixture(rng, n, m, sigmas)
    np.testing.assert_allclose(mix.aleatoric, (mix.weights * mix.sigmas**2).sum(axis=1))
    # The quantiles invert the CDF, on the vectorised path and on the one-row scalar path.
    q = mix.quantiles([0.05, 0.95])
    np.testing.assert_allclose(mix.cdf(q[:, 0]), 0.05, atol=1e-9)
    np.testing.assert_allclose(mix.cdf(q[:, 1]), 0.95, atol=1e-9)
    one = mix_regression(mix.weights[2:3], mix.means[2:3], sigmas[2:3], 1.3)
    np.testing.assert_allclose(one.quantiles([0.05, 0.95]), q[2:3], atol=1e-9)
    # Each row's density is its own mixture of normals.
    y = rng.normal(size=n)
    s = mix.sigmas
    dens = np.exp(-0.5 * ((y[:, None] - mix.means) / s) ** 2) / (s * np.sqrt(2 * np.pi))
    np.testing.assert_allclose(mix.logpdf(y), np.log((mix.weights * dens).sum(axis=1)))
