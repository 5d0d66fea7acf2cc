"""SMC's domains and shrunk Gaussians against scipy and direct computations."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import multivariate_normal

from training.combiners.smc import SMCCombiner

if TYPE_CHECKING:
    from conftest import Case  # the fixtures' type; pytest provides the values


def expected_domains(case: Case, threshold: float = 0.6, quantile: float = 0.3) -> np.ndarray:
    ev = case.evidence
    if ev.task == "classification":
        return np.exp(ev.log_lik) >= threshold
    err = np.abs(ev.means - ev.y[:, None])
    return err <= np.quantile(err, quantile, axis=0)


def test_log_density_is_the_shrunk_gaussian(case: Case) -> None:
    comb = SMCCombiner().fit(case.Z, case.evidence)
    domains = expected_domains(case)
    np.testing.assert_array_equal(comb.domain_sizes_, domains.sum(axis=0))
    got = comb.log_density(case.Z_test)
    d = case.Z.shape[1]
    for j in range(case.evidence.m):
        rows = case.Z[domains[:, j]].astype(np.float64) if domains[:, j].sum() >= 20 else case.Z
        cov = np.cov(rows, rowvar=False)
        shrunk = 0.1 * cov + 0.9 * np.diag(np.diag(cov)) + 1e-6 * np.eye(d)
        want = multivariate_normal(rows.mean(axis=0), shrunk).logpdf(case.Z_test)
        np.testing.assert_allclose(got[:, j], want, rtol=1e-9, atol=1e-7)


def test_weights_are_normalised_densities(case: Case) -> None:
    comb = SMCCombiner().fit(case.Z, case.evidence)
    dens = np.exp(comb.log_density(case.Z_test[:20]))
    np.testing.assert_allclose(
        comb.weights(case.Z_test[:20]), dens / dens.sum(axis=1, keepdims=True), rtol=1e-9
    )


def test_far_from_every_domain_stays_finite(classification_case: Case) -> None:
    case = classification_case
    comb = SMCCombiner().fit(case.Z, case.evidence)
    far = np.full((2, case.Z.shape[1]), 1e3, dtype=np.float32)
    log_density = comb.log_density(far)
    assert np.all(np.isfinite(log_density)) and np.all(log_density < -1e5)  # exp would be 0
    w = comb.weights(far)
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)


def test_small_domains_fall_back_to_all_rows(classification_case: Case) -> None:
    case = classification_case
    # No clipped probability reaches 1 - 1e-7, so every domain is empty: all experts
    # get the Gaussian of all rows, hence equal weights everywhere.
    comb = SMCCombiner(threshold=1 - 1e-7).fit(case.Z, case.evidence)
    assert comb.used_all_rows_.all()
    np.testing.assert_allclose(comb.weights(case.Z_test), 1.0 / case.evidence.m, atol=1e-12)


def test_no_shrinkage_keeps_the_full_covariance(regression_case: Case) -> None:
    case = regression_case
    comb = SMCCombiner(shrinkage=0.0, ridge=1e-9).fit(case.Z, case.evidence)
    rows = case.Z[expected_domains(case)[:, 0]].astype(np.float64)
    want = multivariate_normal(rows.mean(axis=0), np.cov(rows, rowvar=False)).logpdf(case.Z_test)
    np.testing.assert_allclose(comb.log_density(case.Z_test)[:, 0], want, rtol=1e-7)
