"""The gate ships only if it beats the uniform average and the best expert on held-out rows."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from training.combiners.iabma_gate import IABMAGate
from training.evidence import regression_evidence
from training.onnx_graph import GraphBuilder


def _evidence(kind: str, n: int = 1200, seed: int = 0):
    """Gate features and regression evidence of four experts.

    ``dominated``: expert 0 is far better than the others everywhere.
    ``exchangeable``: four experts with independent errors of the same size everywhere;
    nothing in x says which to trust, so their average is the best gate.
    """
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 3)).astype(np.float32)
    y = Z[:, 0] + 0.2 * rng.normal(size=n)
    if kind == "dominated":
        noise = np.column_stack([0.2 * rng.normal(size=n), rng.normal(size=(n, 3))])
    else:
        noise = 0.6 * rng.normal(size=(n, 4))
    means = y[:, None] + noise
    sigmas = np.sqrt(np.mean(noise**2, axis=0))
    return Z, regression_evidence(means, y, sigmas, y_low=float(y.min()), y_high=float(y.max()))


def _served_weights(gate: IABMAGate, Z: np.ndarray) -> np.ndarray:
    g = GraphBuilder("gate")
    z = g.add_input("z", TensorProto.FLOAT, Z.shape[1])
    g.add_output("w", gate.to_onnx(g, z))
    sess = ort.InferenceSession(g.build().SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"z": Z})[0]


@pytest.mark.parametrize(
    ("kind", "ships", "want"),
    [
        ("dominated", {"best_single", "stacking"}, np.eye(4)[0]),
        ("exchangeable", {"uniform", "stacking"}, np.full(4, 0.25)),
    ],
)
def test_a_plain_gate_ships_when_the_network_does_not_beat_it(
    kind: str, ships: set[str], want: np.ndarray
) -> None:
    """Dominated: all the weight on the good expert; exchangeable: the plain average.
    Stacking's pool may edge out either (it can put the last percent elsewhere)."""
    Z, ev = _evidence(kind)
    gate = IABMAGate(epochs=8, random_state=0).fit(Z, ev)
    sel = gate.selected_
    assert sel["gate"] in ships, sel["gate_reason"]
    nll = sel["held_out_nll"]
    assert nll[sel["gate"]] <= nll["network"]
    assert nll[sel["gate"]] == min(v for k, v in nll.items() if k != "network")
    assert sel["gate"] in sel["gate_reason"]
    w = gate.weights(Z[:7])
    np.testing.assert_allclose(w, np.tile(w[0], (7, 1)))  # one constant vector
    np.testing.assert_allclose(w[0], want, atol=0.05)
    # It exports as a constant gate, like the best_single and uniform combiners.
    np.testing.assert_allclose(_served_weights(gate, Z[:7]), w, atol=1e-6)


def test_the_network_ships_where_the_input_says_which_expert_to_trust(simulation_fit) -> None:
    """The simulation: polynomial experts on one half, circles on the other."""
    sel = simulation_fit.est.combiner_.selected_
    assert sel["gate"] == "network", sel["gate_reason"]
    nll = sel["held_out_nll"]
    assert set(nll) == {"network", "uniform", "best_single", "stacking"}
    assert nll["network"] < min(nll["uniform"], nll["best_single"], nll["stacking"])


def test_no_fallback_keeps_the_network() -> None:
    Z, ev = _evidence("exchangeable")
    gate = IABMAGate(epochs=4, fallback=False, random_state=0).fit(Z, ev)
    assert "gate" not in gate.selected_ and gate.layers_ is not None


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_the_temperature_grid_scores_what_row_nll_scores(task: str, simulation_fit) -> None:
    """The fast per-temperature NLL (true class or squared residual alone) equals the mean
    of :func:`row_nll`, the served mixture's NLL, at every grid temperature."""
    from training.combiners import fallback

    if task == "classification":
        ev = simulation_fit.est.evidence_
        scores = fallback._class_nll_per_temperature
    else:
        _, ev = _evidence("exchangeable", n=300)
        scores = fallback._regression_nll_per_temperature
    w = np.random.default_rng(1).dirichlet(np.ones(ev.m), size=ev.n)
    got = scores(w, ev, fallback.TEMPERATURE_GRID)
    want = [fallback.row_nll(w, ev, float(t)).mean() for t in fallback.TEMPERATURE_GRID]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert fallback.fit_temperature(w, ev) == fallback.TEMPERATURE_GRID[int(np.argmin(want))]
