"""Graphs run in chunks give exactly the one-call answer, so memory stays bounded."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier

from training.datasets import simulate
from training.estimator import IABMAClassifier
from training.evaluate import BOOTSTRAP_RESAMPLES, BOOTSTRAP_ROWS, bootstrap_se
from training.experts.spec import Expert


def test_chunks_match_one_call() -> None:
    train, test = simulate(800, 5), simulate(300, 6)
    experts = [
        Expert("linear", LogisticRegression()),
        Expert("knn", KNeighborsClassifier(n_neighbors=7)),
    ]
    est = IABMAClassifier(experts, combiner="uniform", cv=3).fit(train.X, train.y)
    frame = est.features(test.X).frame
    for model in est.experts_.models_:
        whole = model.graph.run(frame, chunk_rows=len(frame))
        np.testing.assert_array_equal(model.graph.run(frame, chunk_rows=37), whole)


def test_the_bootstrap_in_pieces_is_the_bootstrap_in_one_block() -> None:
    values = np.random.default_rng(3).normal(size=5_000)
    assert BOOTSTRAP_ROWS // len(values) < BOOTSTRAP_RESAMPLES  # it does run in pieces
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(values), size=(BOOTSTRAP_RESAMPLES, len(values)))
    assert bootstrap_se(values, seed=0) == float(values[idx].mean(axis=1).std(ddof=1))
