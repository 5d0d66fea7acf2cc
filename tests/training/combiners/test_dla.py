"""Soft DLA against a brute-force OLA, against DESlib's OLA, and its own definitions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.tree import DecisionTreeClassifier

from training.combiners.dla import DLACombiner, k_smallest
from training.evidence import classification_evidence

if TYPE_CHECKING:
    from conftest import Case  # the fixtures' type; pytest provides the values

K = 15
HARD = 1e-6  # a temperature small enough that softmax(s / T) is one-hot up to exact ties


def brute_force_neighbours(
    Z_train: np.ndarray, query: np.ndarray, k: int
) -> list[np.ndarray | None]:
    """Each query's k nearest training rows by plain Euclidean distance, or None if the
    k-th and (k+1)-th distances are too close for the neighbourhood to be well defined."""
    out = []
    train = Z_train.astype(np.float64)
    for q in query.astype(np.float64):
        d = np.sqrt(np.sum((train - q) ** 2, axis=1))
        order = np.argsort(d, kind="stable")
        out.append(order[:k] if d[order[k]] - d[order[k - 1]] > 1e-9 else None)
    return out


def check_hard_selection(w: np.ndarray, local_acc: np.ndarray) -> None:
    """One-hot on the argmax of local accuracy, split evenly between tied experts."""
    best = np.isclose(local_acc, local_acc.max())
    np.testing.assert_allclose(w, best / best.sum(), atol=1e-12)


def test_hard_limit_equals_brute_force_ola(classification_case: Case) -> None:
    case = classification_case
    correct = case.evidence.correct
    comb = DLACombiner(k=K, temperature=HARD).fit(case.Z, case.evidence)
    w = comb.weights(case.Z_test)
    neighbours = brute_force_neighbours(case.Z, case.Z_test, K)
    compared = 0
    for i, idx in enumerate(neighbours):
        if idx is None:
            continue
        compared += 1
        check_hard_selection(w[i], correct[idx].mean(axis=0))
    assert compared >= 0.9 * len(case.Z_test)


def test_training_rows_leave_themselves_out(classification_case: Case) -> None:
    case = classification_case
    comb = DLACombiner(k=K, temperature=HARD).fit(case.Z, case.evidence)
    correct = case.evidence.correct
    rows = np.arange(0, case.evidence.n, 7)
    compared = 0
    for i in rows:
        others = np.delete(np.arange(case.evidence.n), i)
        (idx,) = brute_force_neighbours(case.Z[others], case.Z[i : i + 1], K)
        if idx is not None:
            compared += 1
            check_hard_selection(comb.train_weights_[i], correct[others[idx]].mean(axis=0))
    # Rows whose neighbourhood is tied are skipped; most must still be compared.
    assert compared >= 0.9 * len(rows), (compared, len(rows))


def test_scores_are_smoothed_local_accuracy(classification_case: Case) -> None:
    case = classification_case
    comb = DLACombiner(k=K, alpha=2.0).fit(case.Z, case.evidence)
    neighbours = brute_force_neighbours(case.Z, case.Z_test, K)
    s = comb.local_scores(case.Z_test)
    correct = case.evidence.correct
    for i, idx in enumerate(neighbours):
        if idx is not None:
            expected = (correct[idx].sum(axis=0) + 2.0) / (K + 4.0)
            np.testing.assert_allclose(s[i], expected, rtol=1e-12)
    np.testing.assert_allclose(comb.weights(case.Z_test), np.exp(s) / np.exp(s).sum(1)[:, None])


def test_regression_score_is_minus_local_mse_over_variance(regression_case: Case) -> None:
    case = regression_case
    ev = case.evidence
    comb = DLACombiner(k=K, temperature=0.5).fit(case.Z, ev)
    s = comb.local_scores(case.Z_test)
    for i, idx in enumerate(brute_force_neighbours(case.Z, case.Z_test, K)):
        if idx is not None:
            np.testing.assert_allclose(s[i], -ev.sq_error[idx].mean(axis=0) / ev.y.var())
    np.testing.assert_allclose(
        comb.weights(case.Z_test), np.exp(s / 0.5) / np.exp(s / 0.5).sum(1)[:, None]
    )


def test_k_is_capped_by_the_training_rows(classification_case: Case) -> None:
    case = classification_case
    ev = case.evidence.rows(np.arange(10))
    comb = DLACombiner(k=50).fit(case.Z[:10], ev)
    assert comb.n_neighbors_ == 9


def test_k_smallest_breaks_ties_to_the_lowest_index() -> None:
    dist = np.array([[3.0, 1.0, 2.0, 1.0, 2.0, 0.5]])
    assert sorted(k_smallest(dist, 3)[0]) == [1, 3, 5]
    assert sorted(k_smallest(dist, 4)[0]) == [1, 2, 3, 5]


def _deslib_ola(pool: list, Z: np.ndarray, y: np.ndarray, k: int) -> Any:
    deslib_dcs = pytest.importorskip("deslib.dcs", reason="DESlib is not installed")
    ola = deslib_dcs.OLA(pool, k=k, n_jobs=1)
    try:
        return ola.fit(Z.astype(np.float64), y)
    except AttributeError as exc:
        if "_validate_data" not in str(exc):
            raise
    # DESlib 0.3.7 calls BaseEstimator._validate_data, which scikit-learn 1.6 removed in
    # favour of sklearn.utils.validation.validate_data; restore it on this instance only.
    from sklearn.utils.validation import validate_data

    ola._validate_data = lambda *a, **kw: validate_data(ola, *a, **kw)
    return ola.fit(Z.astype(np.float64), y)


def test_hard_limit_matches_deslib_ola(classification_case: Case) -> None:
    case = classification_case
    Z, y = case.Z[:300], case.evidence.y[:300]
    pool = [
        LogisticRegression(max_iter=2000).fit(Z, y),
        GaussianNB().fit(Z, y),
        DecisionTreeClassifier(max_depth=2, random_state=0).fit(Z, y),
    ]
    ola = _deslib_ola(pool, Z, y, K)
    # DESlib scores the pool's own predictions on its DSEL rows, so the evidence does too.
    ev = classification_evidence(np.stack([c.predict_proba(Z) for c in pool], axis=1), y)
    np.testing.assert_array_equal(ev.correct, ola.DSEL_processed_)
    comb = DLACombiner(k=K, temperature=HARD).fit(Z, ev)
    _, idx = ola.get_competence_region(case.Z_test.astype(np.float64))
    competence = ola.estimate_competence(idx)
    selected = ola.select(competence)
    s = comb.local_scores(case.Z_test)
    w = comb.weights(case.Z_test)
    neighbours = brute_force_neighbours(Z, case.Z_test, K)
    well_defined = [i for i, nb in enumerate(neighbours) if nb is not None]
    assert len(well_defined) >= 0.9 * len(case.Z_test)
    for i in well_defined:
        np.testing.assert_allclose(s[i], (K * competence[i] + 1.0) / (K + 2.0), rtol=1e-12)
        check_hard_selection(w[i], competence[i])
        assert w[i, selected[i]] == w[i].max()
