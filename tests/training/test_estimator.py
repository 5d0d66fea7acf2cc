"""IABMAClassifier / IABMARegressor: behaviour on the paper's simulation and bad arguments."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from app.bundle.mixture import mix_classification
from training.errors import NotFittedError, ParameterError
from training.estimator import IABMAClassifier, IABMARegressor
from training.experts.spec import Expert, ExpertRegistry
from training.metrics import accuracy, expected_calibration_error


def two_experts() -> list[Expert]:
    return [
        Expert("lr", LogisticRegression()),
        Expert("tree", DecisionTreeClassifier(max_depth=3, random_state=0)),
    ]


def test_iabma_beats_the_uniform_average_on_accuracy_and_ece(simulation_fit) -> None:
    est, test = simulation_fit.est, simulation_fit.test
    y = est.encode_target(test.y)
    outputs = est.expert_outputs(test.X)
    uniform = mix_classification(np.full(outputs.shape[:2], 1 / outputs.shape[1]), outputs).proba
    ours = est.predict_proba(test.X)
    assert accuracy(ours, y) > accuracy(uniform, y)
    assert expected_calibration_error(ours, y) < expected_calibration_error(uniform, y)


def test_the_weights_adapt_to_the_region(simulation_fit) -> None:
    """The gate never sees the region; its weights must still follow it."""
    est, test = simulation_fit.est, simulation_fit.test
    y = est.encode_target(test.y)
    out = est.expert_outputs(test.X)
    local_ll = np.log(np.take_along_axis(out, y[:, None, None], axis=2)[:, :, 0])
    w = est.weights(test.X)
    means = []
    for region in (0, 1):
        rows = test.region == region
        top_weight = int(np.argmax(w[rows].mean(axis=0)))
        best_two = np.argsort(-local_ll[rows].mean(axis=0))[:2]
        assert top_weight in best_two, (region, w[rows].mean(axis=0), local_ll[rows].mean(axis=0))
        means.append(w[rows].mean(axis=0))
    assert np.abs(means[0] - means[1]).max() > 0.05


def test_fitted_attributes_and_predictions(simulation_fit) -> None:
    est, test = simulation_fit.est, simulation_fit.test
    assert est.expert_names_ == ["poly2", "poly3", "lda", "circle", "circle_fit"]
    w = est.weights(test.X)
    assert w.shape == (500, 5) and np.allclose(w.sum(axis=1), 1.0) and (w >= 0).all()
    prior = est.prior(test.X)
    assert prior.shape == (500, 5) and np.allclose(prior.sum(axis=1), 1.0)
    assert set(np.unique(est.predict(test.X))) <= set(est.classes_)
    assert est.combiner_.selected_["objective"] in ("elbo", "marginal")


def test_string_labels_multiclass_and_missing_values() -> None:
    rng = np.random.default_rng(0)
    n = 400
    X = pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": rng.normal(size=n),
            "colour": rng.choice(["red", "green", "blue"], size=n).astype(object),
        }
    )
    y = np.where(X["a"] > 0.5, "high", np.where(X["a"] < -0.5, "low", "mid"))
    X.loc[::17, "b"] = np.nan
    X.loc[::23, "colour"] = None
    est = IABMAClassifier(two_experts(), random_state=1).fit(X, y)
    assert est.classes_.tolist() == ["high", "low", "mid"]
    proba = est.predict_proba(X.head(20))
    assert proba.shape == (20, 3) and np.allclose(proba.sum(axis=1), 1.0)
    assert est.score(X, y) > 0.8


def test_a_registry_of_experts_is_accepted() -> None:
    reg = ExpertRegistry()
    reg.register("lr", LogisticRegression())
    reg.register("tree", DecisionTreeClassifier(max_depth=2), features=["a"])
    with pytest.raises(ParameterError, match="name='lr' is already registered"):
        reg.register("lr", LogisticRegression())
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=200), "b": rng.normal(size=200)})
    est = IABMAClassifier(reg).fit(X, (X["a"] + X["b"] > 0).astype(int))
    assert est.experts_.schemas_[1].names == ["a"]


def test_bad_arguments_name_the_parameter() -> None:
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=100)})
    y = (X["a"] > 0).astype(int).to_numpy()
    with pytest.raises(ParameterError, match=r"experts=\['lr'\] needs at least two"):
        IABMAClassifier([Expert("lr", LogisticRegression())]).fit(X, y)
    y_nan = y.astype(float)
    y_nan[7] = np.nan
    with pytest.raises(ParameterError, match="y='1 missing values, first at row 7'"):
        IABMAClassifier(two_experts()).fit(X, y_nan)
    with pytest.raises(ParameterError, match="regression target; use IABMARegressor"):
        IABMAClassifier(two_experts()).fit(X, rng.normal(size=100))
    with pytest.raises(ParameterError, match="is not numeric"):
        IABMARegressor([Expert("a", LinearRegression()), Expert("b", LinearRegression())]).fit(
            X, np.array(["x", "y"] * 50)
        )
    with pytest.raises(ParameterError, match="is constant"):
        IABMARegressor([Expert("a", LinearRegression()), Expert("b", LinearRegression())]).fit(
            X, np.ones(100)
        )
    with pytest.raises(ParameterError, match="single class"):
        IABMAClassifier(two_experts()).fit(X, np.zeros(100, dtype=int))
    with pytest.raises(ParameterError, match="is not a regressor"):
        IABMARegressor(two_experts()).fit(X, rng.normal(size=100))
    with pytest.raises(ParameterError, match="gate_features"):
        IABMAClassifier(two_experts(), gate_features=["nope"]).fit(X, y)
    with pytest.raises(ParameterError, match="likelihood_source='bootstrap'"):
        IABMAClassifier(two_experts(), likelihood_source="bootstrap").fit(X, y)
    with pytest.raises(ParameterError, match="features=\\['zzz'\\]"):
        IABMAClassifier([Expert("lr", LogisticRegression(), ("zzz",)), *two_experts()[1:]]).fit(
            X, y
        )
    with pytest.raises(NotFittedError):
        IABMAClassifier(two_experts()).predict_proba(X)


@pytest.mark.parametrize("source", ["oof", "holdout", "in_sample"])
def test_every_likelihood_source_fits(source: str) -> None:
    rng = np.random.default_rng(2)
    X = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300)})
    y = (X["a"] * X["b"] > 0).astype(int)
    est = IABMAClassifier(two_experts(), likelihood_source=source, random_state=0).fit(X, y)
    expected_rows = 60 if source == "holdout" else 300
    assert est.evidence_.n == expected_rows
    tree_ll = est.evidence_.log_lik[:, 1].mean()
    # In-sample likelihoods flatter an interpolating expert: the paper's failure mode.
    if source == "in_sample":
        oof = IABMAClassifier(two_experts(), random_state=0).fit(X, y)
        assert tree_ll > oof.evidence_.log_lik[:, 1].mean()


def test_fit_is_its_four_stages_in_order(credit_fit) -> None:
    train, test = credit_fit.train, credit_fit.test
    experts = [
        Expert("linear", LogisticRegression(max_iter=2000)),
        Expert("tree", DecisionTreeClassifier(max_depth=4, random_state=0)),
    ]
    whole = IABMAClassifier(experts, combiner="bma").fit(train.X, train.y)
    staged = IABMAClassifier(experts, combiner="bma")
    data, y = staged.prepare(train.X, train.y)
    staged.fit_experts(data, y).fit_gate_encoder(data)
    staged.fit_gate(staged.gate_inputs(data)[staged.experts_.evidence_rows_], staged.evidence_)
    assert np.array_equal(staged.predict_proba(test.X), whole.predict_proba(test.X))
    assert staged.data_fingerprint_ == whole.data_fingerprint_


def test_targets_are_encoded_as_in_training(credit_fit) -> None:
    est, test = credit_fit.est, credit_fit.test
    codes = est.encode_target(test.y)
    assert np.array_equal(est.classes_[codes], test.y.astype(str).to_numpy())
    with pytest.raises(ParameterError, match="'fair' is a class training never saw"):
        est.encode_target(["good", "fair"])
