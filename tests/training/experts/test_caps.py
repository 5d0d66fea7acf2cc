"""Bounded experts: a kNN keeps at most ``max_rows`` reference rows, a forest draws at most
``max_draws`` rows per tree, and experts below their bounds are fitted as before."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier

from training.datasets import simulate
from training.errors import ParameterError
from training.estimator import IABMAClassifier
from training.experts.caps import cap_draws, sample_rows
from training.experts.defaults import KNN_MAX_ROWS, default_experts
from training.experts.spec import Expert


def test_a_sample_keeps_each_class_share() -> None:
    y = np.r_[np.zeros(900, int), np.ones(100, int)]
    rows = sample_rows(len(y), 200, y, "classification", random_state=0)
    assert rows is not None and len(rows) == 200 and np.all(np.diff(rows) > 0)
    assert np.bincount(y[rows]).tolist() == [180, 20]


def test_rows_within_the_bound_are_all_kept() -> None:
    y = np.arange(50) % 2
    assert sample_rows(50, 50, y, "classification", 0) is None
    assert sample_rows(50, None, y, "classification", 0) is None


def test_forest_draws_never_exceed_the_rows() -> None:
    forest = RandomForestClassifier()
    assert cap_draws(forest, 20_000, 5_000).max_samples == 5_000
    assert cap_draws(forest, 20_000, 80_000).max_samples == 20_000


@pytest.mark.parametrize("value", [0, 1, -5, 2.5, True, "many"])
def test_a_bad_bound_is_refused_by_name(value) -> None:
    with pytest.raises(ParameterError, match="max_rows"):
        Expert("knn", KNeighborsClassifier(), max_rows=value).check("classification")


def test_draws_need_a_bagging_model() -> None:
    with pytest.raises(ParameterError, match="max_draws.*LogisticRegression"):
        cap_draws(LogisticRegression(), 100, 1_000)


def test_a_bounded_knn_serves_from_its_sample() -> None:
    train, test = simulate(1_200, 1), simulate(400, 2)
    experts = [
        Expert("linear", LogisticRegression()),
        Expert("knn", KNeighborsClassifier(n_neighbors=15), max_rows=300),
        Expert("forest", RandomForestClassifier(n_estimators=10, random_state=0), max_draws=250),
    ]
    est = IABMAClassifier(experts, combiner="uniform", cv=3).fit(train.X, train.y)
    _, knn, forest = est.experts_.models_
    assert knn.estimator[-1].n_samples_fit_ == 300
    assert forest.estimator[-1].max_samples == 250
    # The served graph is the sampled kNN: it agrees with the fitted estimator.
    frame = est.features(test.X).frame
    np.testing.assert_allclose(knn.predict_raw(frame), knn.predict_fitted(frame), atol=1e-4)


def test_the_default_bounds_can_be_dropped() -> None:
    bounded = {e.name: (e.max_rows, e.max_draws) for e in default_experts("classification")}
    assert bounded["knn"] == (KNN_MAX_ROWS, None)
    unbounded = default_experts("classification", bounded=False)
    assert all(e.max_rows is None and e.max_draws is None for e in unbounded)


def test_below_their_bounds_the_defaults_fit_as_unbounded() -> None:
    """Every shared dataset fits below the bounds, so it must train the same experts."""
    train, test = simulate(600, 3), simulate(200, 4)
    outputs = []
    for bounded in (True, False):
        experts = default_experts("classification", 0, bounded=bounded)
        est = IABMAClassifier(experts, combiner="uniform", cv=2).fit(train.X, train.y)
        outputs.append(est.expert_outputs(test.X))
    np.testing.assert_array_equal(outputs[0], outputs[1])
