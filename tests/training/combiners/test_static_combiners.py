"""Best single, uniform, accuracy-weighted and BMA against numbers worked out by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from training.combiners.base import UniformCombiner
from training.combiners.static import AccuracyWeightedCombiner, BestSingleCombiner, BMACombiner
from training.evidence import Evidence, classification_evidence

if TYPE_CHECKING:
    from conftest import Case  # the fixtures' type; pytest provides the values

# Two rows, three experts: column sums are -0.3, -0.8 and -3.0.
HAND_L = np.array([[-0.1, -0.5, -1.0], [-0.2, -0.3, -2.0]])


def hand_evidence() -> Evidence:
    return Evidence("regression", np.zeros(2), HAND_L)


def test_uniform_is_exactly_one_over_m(case: Case) -> None:
    w = UniformCombiner().fit(case.Z, case.evidence).weights(case.Z_test)
    assert np.array_equal(w, np.full((len(case.Z_test), case.evidence.m), 1.0 / case.evidence.m))


def test_bma_closed_form_uniform_prior() -> None:
    # exp(0), exp(-0.5), exp(-2.7) over their total 1.6737361724
    comb = BMACombiner().fit(np.zeros((2, 1)), hand_evidence())
    np.testing.assert_allclose(comb.weights_, [0.5974657, 0.3623813, 0.0401530], atol=1e-7)
    np.testing.assert_allclose(comb.log_evidence_, [-0.3, -0.8, -3.0], atol=1e-12)
    np.testing.assert_allclose(comb.weights(np.zeros((4, 1))), np.tile(comb.weights_, (4, 1)))


def test_bma_closed_form_given_prior() -> None:
    # 0.2 e^0, 0.3 e^-0.5, 0.5 e^-2.7 = 0.2, 0.1819592, 0.0336028 over 0.4155620
    comb = BMACombiner(prior=[2.0, 3.0, 5.0]).fit(np.zeros((2, 1)), hand_evidence())
    np.testing.assert_allclose(comb.weights_, [0.4812760, 0.4378630, 0.0808610], atol=1e-7)


def test_bma_collapses_onto_one_expert(classification_case: Case) -> None:
    ev = classification_case.evidence
    small = BMACombiner().fit(classification_case.Z[:10], ev.rows(np.arange(10))).weights_
    full = BMACombiner().fit(classification_case.Z, ev).weights_
    sums = ev.log_lik.sum(axis=0)
    np.testing.assert_allclose(full, np.exp(sums - sums.max()) / np.exp(sums - sums.max()).sum())
    assert full.max() > 0.9999 and small.max() < 0.9


def test_best_single_uses_mean_log_likelihood() -> None:
    # P(y = 1) per row (rows) and expert (columns); y = (1, 1, 0, 0).
    p1 = np.array([[0.9, 0.7, 0.5], [0.9, 0.45, 0.5], [0.1, 0.3, 0.5], [0.999, 0.55, 0.5]])
    # Expert 0 is right on 3 of 4 rows, expert 1 on 2, but expert 0's one mistake is so
    # confident (log 0.001) that expert 1 has the best mean log-likelihood: it is chosen.
    ev = classification_evidence(np.stack([1 - p1, p1], axis=2), np.array([1, 1, 0, 0]))
    np.testing.assert_allclose(ev.correct.mean(axis=0), [0.75, 0.5, 0.5])
    comb = BestSingleCombiner().fit(np.zeros((4, 2)), ev)
    assert comb.best_index_ == 1
    np.testing.assert_array_equal(comb.weights_, [0.0, 1.0, 0.0])
    np.testing.assert_allclose(comb.mean_log_lik_, ev.log_lik.mean(axis=0))


def test_accuracy_weighted_classification() -> None:
    proba = np.array(
        [
            [[0.2, 0.8], [0.6, 0.4], [0.9, 0.1]],
            [[0.3, 0.7], [0.4, 0.6], [0.8, 0.2]],
            [[0.7, 0.3], [0.4, 0.6], [0.1, 0.9]],
            [[0.6, 0.4], [0.7, 0.3], [0.2, 0.8]],
        ]
    )
    # Accuracies on y = (1, 1, 0, 0): 4/4, 2/4 and 0/4, so weights 2/3, 1/3, 0.
    ev = classification_evidence(proba, np.array([1, 1, 0, 0]))
    comb = AccuracyWeightedCombiner().fit(np.zeros((4, 1)), ev)
    np.testing.assert_allclose(comb.skill_, [1.0, 0.5, 0.0])
    np.testing.assert_allclose(comb.weights_, [2 / 3, 1 / 3, 0.0])


def test_accuracy_weighted_regression_is_inverse_mse(regression_case: Case) -> None:
    ev = regression_case.evidence
    comb = AccuracyWeightedCombiner().fit(regression_case.Z, ev)
    inv = 1.0 / np.mean((ev.means - ev.y[:, None]) ** 2, axis=0)
    np.testing.assert_allclose(comb.weights_, inv / inv.sum(), rtol=1e-12)


@pytest.mark.parametrize("zero_expert", [0, 2])
def test_accuracy_weighted_perfect_expert_takes_all(zero_expert: int) -> None:
    y = np.array([0.5, -1.0, 2.0])
    means = np.tile(y[:, None], (1, 3)) + np.array([0.1, -0.2, 0.3])
    means[:, zero_expert] = y
    ev = Evidence("regression", y, np.zeros((3, 3)), means=means, sigmas=np.ones(3))
    w = AccuracyWeightedCombiner().fit(np.zeros((3, 1)), ev).weights_
    np.testing.assert_array_equal(w, np.eye(3)[zero_expert])
