"""The standard normal in numpy: erfc against the standard library, the quantile's start
against scipy, and the log density against scipy's."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from app.bundle.normal import erfc, gaussian_logpdf, normal_cdf, normal_ppf


def test_erfc_matches_the_standard_library() -> None:
    x = np.concatenate([np.linspace(-30, 30, 60_001), [0.0, 1.0, -1.0, 8.0, -8.0]])
    want = np.vectorize(math.erfc)(x)
    got = erfc(x.reshape(6, -1)).ravel()  # any shape
    assert np.abs(got - want).max() <= 1e-15
    near = np.abs(x) <= 10
    assert (np.abs(got - want)[near] / want[near]).max() <= 1e-14


def test_normal_ppf_start_is_close() -> None:
    p = np.linspace(0.001, 0.999, 999)
    assert np.abs(normal_ppf(p) - norm.ppf(p)).max() < 4.5e-4


def test_normal_cdf_and_logpdf_match_scipy() -> None:
    z = np.linspace(-9, 9, 1801)
    assert np.abs(normal_cdf(z) - norm.cdf(z)).max() <= 1e-15
    y, mean, sigma = np.linspace(-4, 4, 81), 0.5, np.full(81, 1.7)
    np.testing.assert_allclose(
        gaussian_logpdf(y, mean, sigma), norm.logpdf(y, mean, sigma), rtol=1e-13
    )
