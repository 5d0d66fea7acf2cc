"""The contract every baseline keeps: simplex weights, fit/NotFitted, checks, ONNX parity."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
import pytest

from training.combiners.base import Combiner
from training.combiners.registry import COMBINER_NAMES, make_combiner
from training.errors import NotFittedError, ParameterError
from training.onnx_graph import FLOAT, GraphBuilder

if TYPE_CHECKING:
    from conftest import Case  # the fixtures' type; pytest provides the values

BASELINES = [n for n in COMBINER_NAMES if n != "iabma"]


@pytest.fixture(scope="session")
def fitted() -> Callable[[str, Case], Combiner]:
    """Each (combiner, task) fitted once with paper defaults and shared across tests."""
    cache: dict[tuple[str, str], Combiner] = {}

    def get(name: str, case: Case) -> Combiner:
        key = (name, case.task)
        if key not in cache:
            cache[key] = make_combiner(name, random_state=0).fit(case.Z, case.evidence)
        return cache[key]

    return get


def onnx_weights(comb: Combiner, Z: np.ndarray) -> np.ndarray:
    g = GraphBuilder(f"{comb.name}_gate")
    z = g.add_input("z", FLOAT, Z.shape[1])
    g.add_output("weights", comb.to_onnx(g, z))
    session = ort.InferenceSession(
        g.build().SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(["weights"], {"z": np.ascontiguousarray(Z, dtype=np.float32)})[0]


@pytest.mark.parametrize("name", BASELINES)
def test_weights_on_simplex(name: str, case: Case, fitted: Callable[[str, Case], Combiner]) -> None:
    comb = fitted(name, case)
    for Z in (case.Z, case.Z_test):
        w = comb.weights(Z)
        assert w.shape == (len(Z), case.evidence.m)
        assert np.all(np.isfinite(w))
        assert w.min() >= 0.0
        np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", BASELINES)
def test_fit_returns_self(name: str, classification_case: Case) -> None:
    comb = make_combiner(name)
    assert comb.fit(classification_case.Z, classification_case.evidence) is comb


@pytest.mark.parametrize("name", BASELINES)
def test_not_fitted(name: str, classification_case: Case) -> None:
    comb = make_combiner(name)
    with pytest.raises(NotFittedError, match="not fitted"):
        comb.weights(classification_case.Z_test)
    with pytest.raises(NotFittedError):
        comb.to_onnx(GraphBuilder("g"), "z")


@pytest.mark.parametrize("name", BASELINES)
def test_onnx_parity(name: str, case: Case, fitted: Callable[[str, Case], Combiner]) -> None:
    comb = fitted(name, case)
    expected = comb.weights(case.Z_test)
    got = onnx_weights(comb, case.Z_test)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.max(np.abs(got - expected)) <= 1e-5


@pytest.mark.parametrize("name", BASELINES)
def test_rejects_misshapen_features(name: str, classification_case: Case) -> None:
    case = classification_case
    with pytest.raises(ParameterError) as err:
        make_combiner(name).fit(case.Z[:-1], case.evidence)
    assert err.value.parameter == "Z"
    if name == "uniform":
        return  # base.UniformCombiner does not record the width it was fitted on
    comb = make_combiner(name).fit(case.Z, case.evidence)
    assert comb.n_features_in_ == case.Z.shape[1]
    with pytest.raises(ParameterError) as err:
        comb.weights(case.Z_test[:, :-1])
    assert err.value.parameter == "Z"


BAD_PARAMS = [
    ("bma", {"prior": [0.5, 0.5]}, "prior"),
    ("bma", {"prior": [1.0, 0.0, 1.0]}, "prior"),
    ("moe", {"epochs": 0}, "epochs"),
    ("moe", {"batch_size": 2.5}, "batch_size"),
    ("moe", {"learning_rate": -1e-3}, "learning_rate"),
    ("moe", {"hidden_layer_sizes": (64, 0)}, "hidden_layer_sizes"),
    ("moe", {"random_state": None}, "random_state"),
    ("dla", {"k": 0}, "k"),
    ("dla", {"k": 2.5}, "k"),
    ("dla", {"temperature": 0.0}, "temperature"),
    ("dla", {"alpha": -1.0}, "alpha"),
    ("smc", {"threshold": 1.5}, "threshold"),
    ("smc", {"quantile": 0.0}, "quantile"),
    ("smc", {"min_coverage": 1}, "min_coverage"),
    ("smc", {"shrinkage": 1.2}, "shrinkage"),
    ("smc", {"ridge": 0.0}, "ridge"),
    ("bhs", {"slab_scale": 0.0}, "slab_scale"),
    ("bhs", {"tol": -1.0}, "tol"),
    ("bhs", {"max_iter": 0}, "max_iter"),
]


@pytest.mark.parametrize(("name", "params", "parameter"), BAD_PARAMS)
def test_bad_hyperparameters(
    name: str, params: dict[str, object], parameter: str, classification_case: Case
) -> None:
    comb = make_combiner(name, **params)  # scikit-learn style: __init__ only stores
    with pytest.raises(ParameterError) as err:
        comb.fit(classification_case.Z, classification_case.evidence)
    assert err.value.parameter == parameter
    assert parameter in str(err.value)


@pytest.mark.parametrize("name", ["moe", "dla", "smc"])
def test_featureless_gate_rejected(name: str, classification_case: Case) -> None:
    Z0 = np.zeros((classification_case.evidence.n, 0), dtype=np.float32)
    with pytest.raises(ParameterError) as err:
        make_combiner(name).fit(Z0, classification_case.evidence)
    assert err.value.parameter == "Z"


@pytest.mark.parametrize("name", BASELINES)
def test_manifest_params_are_the_hyperparameters(name: str) -> None:
    comb = make_combiner(name)
    # An IA-BMA-style gate (moe_tuned) records its chosen variant beside them.
    extra = {"selected"} if name == "moe_tuned" else set()
    assert set(comb.manifest_params()) <= set(comb.get_params()) | extra
